#!/usr/bin/env bash
# On the 2-GPU machine: the experiments that should come next for issue 6's two scaling targets
# (docs/STATUS.md, "Next"), in one bounded call. Every row is one bench/gpt_parallel_step run;
# the one-GPU rows are the baselines of the same call:
#   GPT-2 124M dp=1, dp=2 (overlapped buckets), dp=2 --no-overlap 1 (every bucket after the
#   backward), dp=2 with TRIREME_GEMM_SM_CARVEOUT=8/16/24 (Note [GEMM SM carveout]);
#   GPT 1.3B tp=1, tp=2, tp=2 with the same carveouts, tp=2 with the row-parallel GEMM and
#   all-reduce in 2 or 4 chunks (Note [row-parallel chunks]), alone and with a carveout.
# Carry .gpu_deps. DEADLINE_S (default 480) bounds the whole, build included.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
start=$(date +%s)
deadline=$((start + ${DEADLINE_S:-480}))
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$out/exp_build.log" 2>&1 &&
  ninja -C build-gpu trireme_cli gpt_parallel_step >> "$out/exp_build.log" 2>&1 ||
  { tail -30 "$out/exp_build.log"; echo "BUILD FAILED"; exit 1; }
echo "build: $(($(date +%s) - start)) s"

bench=build-gpu/bench/gpt_parallel_step
launch=(build-gpu/trireme launch --nproc-per-node 2 --)
gpt2=(--model gpt2-124m --batch 16 --device cuda --dtype bf16 --warmup 3 --iters 10)
big=(--model gpt-1.3b --batch 8 --device cuda --dtype bf16 --warmup 3 --iters 4)
row() {  # label, env assignments..., --, command...
  local label=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local left=$((deadline - $(date +%s)))
  if [ $left -lt 30 ]; then
    echo "| $label | skipped: $left s left |"
    return
  fi
  local line
  line=$(timeout $((left < 90 ? left : 90)) env "${envs[@]}" "$@" 2>&1 | grep -oE '\{"impl".*\}' | tail -1)
  local ms tps
  ms=$(grep -oE '"step_ms": [0-9.]+' <<< "$line" | grep -oE '[0-9.]+$')
  tps=$(grep -oE '"tokens_per_s": [0-9.]+' <<< "$line" | grep -oE '[0-9.]+$')
  echo "| $label | ${ms:-failed} | ${tps:-} |"
}

echo "| run | step ms | tokens/s |"
echo "|---|---|---|"
row "124M dp=1" A=1 -- $bench "${gpt2[@]}"
row "124M dp=2" A=1 -- "${launch[@]}" $bench "${gpt2[@]}" --dp 2
row "124M dp=2, no overlap" A=1 -- "${launch[@]}" $bench "${gpt2[@]}" --dp 2 --no-overlap 1
for c in 8 16 24; do
  row "124M dp=2, carveout $c" TRIREME_GEMM_SM_CARVEOUT=$c -- "${launch[@]}" $bench "${gpt2[@]}" --dp 2
done
row "1.3B tp=1" A=1 -- $bench "${big[@]}"
row "1.3B tp=2" A=1 -- "${launch[@]}" $bench "${big[@]}" --tp 2
for c in 8 16 24; do
  row "1.3B tp=2, carveout $c" TRIREME_GEMM_SM_CARVEOUT=$c -- "${launch[@]}" $bench "${big[@]}" --tp 2
done
for k in 2 4; do
  row "1.3B tp=2, $k row chunks" A=1 -- "${launch[@]}" $bench "${big[@]}" --tp 2 --tp-chunks $k
  row "1.3B tp=2, $k row chunks, carveout 16" TRIREME_GEMM_SM_CARVEOUT=16 -- "${launch[@]}" $bench "${big[@]}" --tp 2 --tp-chunks $k
done
echo "total: $(($(date +%s) - start)) s"
