#!/usr/bin/env bash
# On a machine with 2 GPUs, one bounded run of everything: the CUDA tests, the GPT-2
# 124M step beside PyTorch (eager and compile), GPT-2 124M dp=1/dp=2 and GPT 1.3B tp=1/tp=2 beside
# PyTorch DDP and DTensor (bench/gpu/parallel.sh; PAR_RUNS picks), and the two-GPU pipeline tests
# last (under their own timeout: a hang must not eat the rest). One build
# folder (build-gpu) serves every part. DEADLINE_S (default 560) bounds the whole; a part that
# would start too late is skipped and says so. The CLI trainer tests need the poem corpus
# (fortunes-zh, or TRIREME_FORTUNES_DIR); the tables need the PyTorch peer ($TRIREME_PEER).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh  # the library path for the test binary run directly below
start=$(date +%s)
deadline=$((start + ${DEADLINE_S:-560}))
left() { echo $((deadline - $(date +%s))); }
part() {  # name, seconds it needs at least, command...
  local name=$1 need=$2
  shift 2
  if [ "$(left)" -lt "$need" ]; then
    echo "== $name: skipped ($(left) s left, needs $need)"
    return
  fi
  echo "== $name"
  local t=$(date +%s)
  "$@"
  echo "== $name: rc=$? in $(($(date +%s) - t)) s"
}
part "CUDA tests" 150 env TRIREME_MEMCHECK="${TRIREME_MEMCHECK:-0}" TEST_FILTER=-CudaPipeline.* \
  bash tests/cuda/run_on_gpu.sh
part "GPT-2 124M step" 150 env DTYPES="${DTYPES:-bf16 amp-bf16}" PEER_MODES="${PEER_MODES:-eager compile}" \
  bash bench/gpu/run.sh
part "dp and tp on 2 GPUs" 150 env RUNS="${PAR_RUNS:-dp1 dp2 tp1 tp2 torch_ddp torch_tp}" ITERS_BIG="${ITERS_BIG:-4}" DEADLINE_S="$(($(left) - 40))" \
  bash bench/gpu/parallel.sh
# The two-GPU pipeline tests run last, under their own timeout: a hang must not eat the rest.
part "pipeline on 2 GPUs" 40 timeout -k 5 "$(($(left) - 5))" build-gpu/tests/test_cuda --gtest_filter='CudaPipeline.*'
