#!/usr/bin/env bash
# On a GPU machine: `trireme train` on one GPU at several micro-batch counts and recomputation
# modes (GPT-2 124M, global batch 16, T 1024, the default corpus), each run's median step time and
# the fastest and slowest of its counted steps (as `plan --measure` reads them), then where the
# host's main thread spends the step (bench/gpu/host_sampler.cpp, wall clock) at the most
# micro-batches. What the planner's price of a micro-batch is checked against (docs/PLANNER.md).
#   COUNTS="1 4 16" MODES="none selective" PRECISIONS="f16 bf16" HOST_CLOCKS="wall cpu" bash bench/gpu/micro_batches.sh
# (HOST_CLOCKS= skips the host profiles)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
t0=$(date +%s)
build_bench build_mb.log trireme_cli
g++ -shared -fPIC -O2 -std=c++17 bench/gpu/host_sampler.cpp -o build-gpu/libhost_sampler.so -ldl -lrt -lpthread ||
  { echo "host_sampler FAILED"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
build-gpu/trireme prepare --out "$out/mb_data" > "$out/mb_prepare.log" 2>&1 || { tail -5 "$out/mb_prepare.log"; exit 1; }
steps=${STEPS:-12}
counts=(${COUNTS:-1 2 4 8 16})
# train LABEL [--set ...]: one run; prints its median and range of step times (the first two not counted).
train() {
  local label=$1
  shift
  local dir="$out/mb/$label"
  mkdir -p "$dir"
  timeout 200 ${PREFIX:-} build-gpu/trireme train --overwrite --set model.d_model=768 --set model.n_layer=12 \
    --set model.n_head=12 --set model.block_size=1024 --set train.batch_size=16 --set train.device=cuda \
    --set data.dir="$out/mb_data" --set train.eval_interval=0 --set train.checkpoint_interval=0 \
    --set train.log_interval=1 --set schedule.warmup_steps=0 --set train.steps="$steps" \
    --set train.out_dir="$dir/run" "$@" > "$dir/train.log" 2>&1
  local rc=$?
  python3 - "$dir/run/metrics.jsonl" "$label" "$rc" << 'EOF'
import json, sys
path, label, rc = sys.argv[1:]
try:
    t = [json.loads(l)["elapsed_s"] for l in open(path) if '"elapsed_s"' in l]
except OSError:
    t = []
d = sorted(b - a for a, b in zip(t[1:], t[2:]))
if not d:
    print(f"{label:32s} rc={rc} no steps")
else:
    print(f"{label:32s} median {1e3 * d[len(d) // 2]:7.1f} ms  range {1e3 * d[0]:7.1f}-{1e3 * d[-1]:7.1f} ms  ({len(d)} steps)")
EOF
}
precisions=(${PRECISIONS:-f16 bf16})
for precision in "${precisions[@]}"; do
  for mode in ${MODES:-none selective}; do
    for m in "${counts[@]}"; do
      train "$precision-$mode-mb$m" --set train.precision="$precision" --set memory.recompute="$mode" \
        --set parallel.micro_batches="$m"
    done
  done
done
last=${counts[${#counts[@]} - 1]}
for clock in ${HOST_CLOCKS-wall cpu}; do
  mkdir -p "$out/mb/host_$clock"
  PREFIX="env TRIREME_HOST_SAMPLES=$out/mb/host_$clock TRIREME_HOST_SAMPLE_CLOCK=$clock LD_PRELOAD=$PWD/build-gpu/libhost_sampler.so" \
    train "host-$clock-mb$last" --set train.precision="${precisions[0]}" --set parallel.micro_batches="$last"
  for f in "$out/mb/host_$clock"/host_*.txt; do echo "== $f"; cat "$f"; done
done
echo "total: $(($(date +%s) - t0)) s"
