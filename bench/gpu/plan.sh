#!/usr/bin/env bash
# On a GPU machine: the planner's GPU rows (docs/PLANNER.md). For each model, calibrates this
# machine's GPUs at the model's shapes (`trireme plan --calibrate` with train.device = "cuda"), then
# runs the top K plans for all of its GPUs, and up to K of the other splits, through `trireme train`
# (`--measure K`), printing predicted against measured step time and peak memory with the errors.
# On one GPU the plans differ in micro-batches and recomputation only; on two, also in dp, tp (with
# and without sequence parallelism), pp and its schedules, and ZeRO stages.
#   MODELS="gpt2-124m gpt2-350m gpt-1.3b" PRECISIONS=bf16 K=8 bash bench/gpu/plan.sh     # the defaults
# Logs and the profiles in $out (default out/gpu); a run of K=8 takes a few minutes per model.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
t0=$(date +%s)
build_bench build_plan.log trireme_cli
echo "build: $(($(date +%s) - t0)) s"
gpus=$(nvidia-smi -L | wc -l)
# The default corpus, prepared once: calibration, plans and the measured runs share its vocabulary.
build-gpu/trireme prepare --out "$out/plan_data" > "$out/plan_prepare.log" 2>&1 || { tail -5 "$out/plan_prepare.log"; exit 1; }
k=${K:-8}
for model in ${MODELS:-gpt2-124m gpt2-350m gpt-1.3b}; do
  case $model in  # the shapes of bench/peer/torch_gpt_bench.py, T 1024, on the default corpus
    gpt2-124m) shape=(--set model.d_model=768 --set model.n_layer=12 --set model.n_head=12 --set train.batch_size=16) ;;
    gpt2-350m) shape=(--set model.d_model=1024 --set model.n_layer=24 --set model.n_head=16 --set train.batch_size=8) ;;
    gpt-1.3b) shape=(--set model.d_model=2048 --set model.n_layer=24 --set model.n_head=16 --set train.batch_size=8) ;;
    *) echo "unknown model $model (gpt2-124m, gpt2-350m, gpt-1.3b)"; continue ;;
  esac
  for precision in ${PRECISIONS:-bf16}; do
    run=$model-$precision
    sets=("${shape[@]}" --set model.block_size=1024 --set train.device=cuda --set train.precision=$precision
          --set data.dir="$out/plan_data")
    profile="$out/plan_profile_$run.json"
    t=$(date +%s)
    timeout 300 build-gpu/trireme plan --calibrate --profile "$profile" "${sets[@]}" > "$out/plan_calibrate_$run.log" 2>&1 ||
      { echo "$run: calibration failed"; tail -5 "$out/plan_calibrate_$run.log"; continue; }
    echo "== $run: calibrated in $(($(date +%s) - t)) s"
    sed -n '/^per GPU/,/^a training step/p' "$out/plan_calibrate_$run.log"
    t=$(date +%s)
    timeout 900 build-gpu/trireme plan --devices "$gpus" --top "$k" --measure "$k" --profile "$profile" "${sets[@]}" \
      > "$out/plan_measure_$run.log" 2>&1
    rc=$?
    echo "== $run: measured in $(($(date +%s) - t)) s (rc=$rc)"
    sed -n '/^measured/,$p' "$out/plan_measure_$run.log"
  done
done
