#!/usr/bin/env bash
# On a GPU machine: builds the trireme command, the CUDA tests and the model-split example, then
# runs what a user runs first: the CUDA tests, `trireme env`, a short poem training on the GPU
# (the log lines with MFU), generation from its checkpoint, a model too big for the GPU (refused
# before anything is allocated) and the README's bf16 model-split command. Logs in $OUT (or
# out/gpu); a short summary last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
build_bench build.log trireme_cli test_cuda two_gpu_split
b=build-gpu
summary=()
note() { summary+=("$1"); }

$b/tests/test_cuda ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$out/test_cuda.log" 2>&1
note "test_cuda rc=$? $(grep -E '^\[  PASSED  \]' "$out/test_cuda.log" | tr -d '[]'); failed: $(grep -E '^\[  FAILED  \] [A-Z]' "$out/test_cuda.log" | tr '\n' ' ')"

$b/trireme env > "$out/env.txt" 2>&1
note "env rc=$?"

run=$out/tang
$b/trireme train --config configs/tang_poems.toml --set train.device=cuda --set train.steps=60 \
  --set train.log_interval=20 --set train.out_dir="$run" --overwrite > "$out/train.log" 2>&1
note "train on cuda rc=$?: $(grep -E '^step 60' "$out/train.log" | tail -1)"
$b/trireme generate --checkpoint "$run" --prompt 春眠 -n 40 --device cuda --seed 7 > "$out/generate.log" 2>&1
note "generate rc=$?"
$b/trireme eval --checkpoint "$run" --text .fortunes/song100 --device cuda > "$out/eval.log" 2>&1
note "eval rc=$?: $(tail -1 "$out/eval.log")"

$b/trireme train --config configs/tang_poems.toml --set train.device=cuda --set model.d_model=8192 \
  --set model.n_head=64 --set model.n_layer=200 --set train.out_dir="$out/too_big" > "$out/too_big.log" 2>&1
note "too big rc=$? (2 expected): $(head -c 300 "$out/too_big.log" | tr '\n' ' ')"

$b/examples/two_gpu_split --devices cuda:0,cuda:0 --dtype bf16 --d-model 1024 --heads 16 --seq 512 --batch 8 \
  --non-blocking --micro-batches 4 > "$out/model_split.log" 2>&1
note "model_split bf16 rc=$?: $(grep -iE 'loss' "$out/model_split.log" | head -8 | tr '\n' ' ')"

grep -E "^\[  FAILED  \]|Failure" "$out/test_cuda.log" | head -20
for s in "${summary[@]}"; do echo "- $s"; done
