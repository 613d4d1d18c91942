#!/usr/bin/env bash
# On a GPU machine with 2+ GPUs: unpacks .gpu_deps (scripts/gpu_deps.sh), builds libtrireme,
# test_cuda and the NCCL worker, and runs the NCCL tests (2 processes, one GPU each). Logs go to
# $OUT (or out/gpu); a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

{
  nvidia-smi -L; nvidia-smi topo -m; nvcc --version | tail -2
  ls -l /usr/include/nccl.h /usr/local/cuda/include/nccl.h /usr/lib/x86_64-linux-gnu/libnccl.so* 2>&1
  grep -E "define NCCL_(MAJOR|MINOR|PATCH)" /usr/include/nccl.h 2>&1
} > "$out/env.txt" 2>&1

t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=OFF > "$out/build.log" 2>&1 &&
  ninja -C build-gpu test_cuda nccl_worker >> "$out/build.log" 2>&1
build_rc=$?
t1=$(date +%s)
grep -E "^-- NCCL" "$out/build.log"
if [ $build_rc -ne 0 ]; then
  grep -E "error|Error" "$out/build.log" | head -30
  tail -30 "$out/build.log"
  echo "BUILD FAILED after $((t1 - t0)) s"
  exit 1
fi

timeout ${NCCL_TEST_TIMEOUT:-200} build-gpu/tests/test_cuda --gtest_filter='Nccl*' > "$out/nccl_test.log" 2>&1
test_rc=$?
t2=$(date +%s)
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|error after|watchdog error|wait\(timeout\) error|Failure|check failed|\[trireme\]" \
  "$out/nccl_test.log" | head -60

echo
echo "| step | result | seconds |"
echo "|---|---|---|"
echo "| build (libtrireme + test_cuda + nccl_worker) | ok | $((t1 - t0)) |"
echo "| test_cuda --gtest_filter=Nccl* | rc=$test_rc, $(grep -E '^\[  PASSED  \]' "$out/nccl_test.log" | tr -d '[]') $(grep -cE '^\[  FAILED  \] [A-Z]' "$out/nccl_test.log") failed | $((t2 - t1)) |"
