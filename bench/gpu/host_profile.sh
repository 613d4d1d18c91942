#!/usr/bin/env bash
# On a GPU machine: where the host's main thread spends its CPU time during GPT 1.3B steps
# (bench/gpu/host_sampler.cpp, LD_PRELOADed), for tp=2 with sequence parallelism (both ranks)
# and, with RUNS including tp1, one GPU. Each process writes $out/host/<run>/host_<pid>.stacks and
# bench/gpu/host_report.py counts the functions running (self) and on the stack (inclusive) in
# the steps (HOST_WITHIN), by share of their samples.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
start=$(date +%s)
build_bench host_build.log trireme_cli gpt_parallel_step
g++ -shared -fPIC -O2 -std=c++17 bench/gpu/host_sampler.cpp -o build-gpu/libhost_sampler.so -ldl -lrt -lpthread ||
  { echo "host_sampler FAILED"; exit 1; }
echo "build: $(($(date +%s) - start)) s"
bench=build-gpu/bench/gpt_parallel_step
big=(--model gpt-1.3b --batch 8 --device cuda --dtype bf16 --warmup 3 --iters ${ITERS:-10} ${FLAGS:-})
profile() {  # label, command...
  local label=$1
  shift
  local dir="$out/host/$label"
  mkdir -p "$dir"
  timeout 150 env TRIREME_HOST_SAMPLES="$dir" LD_PRELOAD="$PWD/build-gpu/libhost_sampler.so" "$@" > "$dir/run.log" 2>&1
  echo "$label: rc=$? $(grep -oE '"step_ms": [0-9.]+' "$dir/run.log" | tail -1) $(ls "$dir" | grep -c host_) profiles"
  python3 bench/gpu/host_report.py --within "${HOST_WITHIN:-GPT::loss|Tensor::backward|step}" "$dir"/host_*.stacks
}
for run in ${RUNS:-tp2sp tp1}; do
  case $run in
    tp2sp) profile tp2sp build-gpu/trireme launch --nproc-per-node 2 -- $bench "${big[@]}" --tp 2 --sp 1 ;;
    tp1) profile tp1 $bench "${big[@]}" ;;
  esac
done
echo "total: $(($(date +%s) - start)) s"
