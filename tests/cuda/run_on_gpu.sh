#!/usr/bin/env bash
# On the GPU machine: unpacks .gpu_deps (scripts/gpu_deps.sh), builds libtrireme and the CUDA
# tests, runs them, then runs them again (all but the GPT and trainer ones, too slow there) under
# compute-sanitizer memcheck, unless TRIREME_MEMCHECK=0; MEMCHECK_TIMEOUT (s) bounds that run and
# MEMCHECK_FILTER (a gtest filter) narrows it;
# TEST_FILTER (a gtest filter) picks the tests of the first run.
# Logs go to $OUT (or out/gpu); a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh

{
  nvidia-smi; g++ --version | head -1; cmake --version | head -1; nvcc --version | tail -2
  echo "--- system libraries the build could use:"
  ldconfig -p | grep -E "openblas|gloo|gtest|libfmt|gfortran|tomlplusplus|cublasLt" || true
  ls -d /usr/include/{nlohmann,CLI,toml++,gtest,fmt,gloo} /usr/src/googletest 2>&1
  which compute-sanitizer
} > "$out/env.txt" 2>&1

t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=OFF -DTRIREME_BUILD_TESTS=ON > "$out/build.log" 2>&1 &&
  ninja -C build-gpu test_cuda >> "$out/build.log" 2>&1
build_rc=$?
t1=$(date +%s)
if [ $build_rc -ne 0 ]; then
  tail -60 "$out/build.log"
  echo "BUILD FAILED after $((t1 - t0)) s"
  exit 1
fi

build-gpu/tests/test_cuda ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} > "$out/test_cuda.log" 2>&1
test_rc=$?
t2=$(date +%s)
grep -E "^\[  (FAILED|SKIPPED) |Failure|error|differ|^\[ (parity|training)" "$out/test_cuda.log" | head -60

# The out-of-memory test is left out: the failing cudaMalloc it provokes on purpose would be
# reported as an API error (seen on 2026-11-30: those were memcheck's only 4 reports). So is the
# test of a call that cannot be captured in a CUDA graph: its capture fails on purpose, with 3 API
# errors (cudaStreamSynchronize while capturing, then the invalidated capture's end; 2026-12-02).
mem_rc=skipped
if [ "${TRIREME_MEMCHECK:-1}" != 0 ]; then
  timeout "${MEMCHECK_TIMEOUT:-240}" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    build-gpu/tests/test_cuda --gtest_brief=1 --gtest_filter="${MEMCHECK_FILTER:--CudaAllocator.OutOfMemoryIsAnError:CudaStaticGraph.UncapturableCallRunsBetweenGraphs:CudaGPT.*:CudaTrainer.*}" \
    > "$out/memcheck.log" 2>&1
  mem_rc=$?
fi
touch "$out/memcheck.log"
t3=$(date +%s)
tail -4 "$out/memcheck.log"

echo
echo "| step | result | seconds |"
echo "|---|---|---|"
echo "| build (libtrireme + test_cuda) | ok | $((t1 - t0)) |"
echo "| test_cuda | rc=$test_rc, $(grep -E '^\[  PASSED  \]' "$out/test_cuda.log" | tr -d '[]') $(grep -cE '^\[  FAILED  \] [A-Z]' "$out/test_cuda.log") failed | $((t2 - t1)) |"
echo "| compute-sanitizer memcheck | rc=$mem_rc ($(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)) | $((t3 - t2)) |"
