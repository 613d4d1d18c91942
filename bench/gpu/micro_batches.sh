#!/usr/bin/env bash
# On a GPU machine: `trireme train` on one GPU at several micro-batch counts and recomputation
# modes (GPT-2 124M, global batch 16, T 1024, the default corpus), each run's median step time and
# the fastest and slowest of its counted steps (as `plan --measure` reads them), then where the
# host's main thread spends the step (bench/gpu/host_sampler.cpp, wall clock) at the most
# micro-batches. What the planner's price of a micro-batch is checked against (docs/PLANNER.md).
#   COUNTS="1 4 16" MODES="none selective" PRECISIONS="f16 bf16" HOST_CLOCKS="wall cpu" bash bench/gpu/micro_batches.sh
# (HOST_CLOCKS= skips the host profiles, which count the samples inside the steps, or inside what
# HOST_WITHIN matches; $out/mb/host_*/*.stacks name themselves again elsewhere with
# bench/gpu/host_report.py --symbols BUILD when the machine's build is stripped. STEPS and PREFIX,
# e.g. PREFIX="taskset -c 3", pass to bench/gpu/train_tokens.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
t0=$(date +%s)
build_bench build_mb.log trireme_cli
g++ -shared -fPIC -O2 -std=c++17 bench/gpu/host_sampler.cpp -o build-gpu/libhost_sampler.so -ldl -lrt -lpthread ||
  { echo "host_sampler FAILED"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
build-gpu/trireme prepare --out "$out/mb_data" > "$out/mb_prepare.log" 2>&1 || { tail -5 "$out/mb_prepare.log"; exit 1; }
counts=(${COUNTS:-1 2 4 8 16})
# train LABEL [--set ...]: one run (bench/gpu/train_tokens.sh); prints its median step time and the
# fastest and slowest of its counted steps.
train() {
  local label=$1
  shift
  bash bench/gpu/train_tokens.sh build-gpu "$out/mb_data" "$@" | python3 -c '
import json, sys
label = sys.argv[1]
try:
    r = json.loads(sys.stdin.read().strip().splitlines()[-1])
    print("%-32s median %7.1f ms  range %7.1f-%7.1f ms" % (label, r["step_ms"], r["fastest_ms"], r["slowest_ms"]))
except (ValueError, IndexError, KeyError):
    print("%-32s failed" % label)' "$label"
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
  python3 bench/gpu/host_report.py --within "${HOST_WITHIN:-train_step}" "$out/mb/host_$clock"/host_*.stacks
done
echo "total: $(($(date +%s) - t0)) s"
