#!/usr/bin/env bash
# On a machine with 2 GPUs: the model-split example (f32 and bf16, plain and pipelined) and the CUDA
# tests, in one go. Uses binaries built beforehand on a CUDA 13 x86-64 machine when they are
# present in build/ (PREBUILT=1; they hold absolute paths of the tree they were built in, given
# as BUILT_IN, which is linked to this tree), else builds them here. Logs go to $OUT (or out/gpu);
# a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
root=$PWD
# The CUDA trainer tests read the poem corpus: without fortunes-zh installed, put its poem files in .fortunes.
[ -d .fortunes ] && export TRIREME_FORTUNES_DIR=${TRIREME_FORTUNES_DIR:-$PWD/.fortunes}
t0=$(date +%s)
bin=build-gpu
if [ "${PREBUILT:-0}" = 1 ]; then
  mkdir -p "$(dirname "$BUILT_IN")" && ln -sfn "$root" "$BUILT_IN"
  bin=build
  if ! build/tests/test_cuda --gtest_list_tests > /dev/null 2> "$out/prebuilt.log"; then
    cat "$out/prebuilt.log"; ldd build/tests/test_cuda | grep "not found"
    echo "prebuilt binaries do not run here: building"
    bin=build-gpu
  fi
fi
if [ $bin = build-gpu ]; then
  bin=build-gpu
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=OFF > "$out/build.log" 2>&1 &&
    ninja -C build-gpu test_cuda two_gpu_split >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo BUILD FAILED; exit 1; }
fi
t1=$(date +%s)
nvidia-smi topo -m > "$out/topo.txt" 2>&1

# The example: four runs (f32 and bf16; each does one device, the plain split and the pipeline).
size="--d-model ${D_MODEL:-1024} --heads 16 --seq ${SEQ:-512} --batch 8 --micro-batches 4 --non-blocking"
ex_rc=""
for dt in f32 bf16; do
  timeout 120 $bin/examples/two_gpu_split $size --dtype $dt > "$out/example_$dt.log" 2>&1
  ex_rc="$ex_rc $dt=$?"
  cat "$out/example_$dt.log"
done
timeout 60 $bin/examples/two_gpu_split --devices cpu,cpu > "$out/example_cpu.log" 2>&1
ex_rc="$ex_rc cpu=$?"
tail -3 "$out/example_cpu.log"
t2=$(date +%s)

# The new CUDA tests first (and under memcheck, they are quick), then the whole suite.
new="CudaCrossDevice.*:CudaPinned.*:CudaModelSplit.*:CudaCopy.*:CudaStream.*"
$bin/tests/test_cuda --gtest_filter="$new" > "$out/test_new.log" 2>&1
new_rc=$?
grep -E "^\[  (FAILED|SKIPPED|  OK) |Failure|differ" "$out/test_new.log" | head -40
timeout "${MEMCHECK_TIMEOUT:-90}" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
  $bin/tests/test_cuda --gtest_brief=1 --gtest_filter="CudaCrossDevice.*:CudaPinned.*:CudaCopy.*:CudaStream.*" \
  > "$out/memcheck.log" 2>&1
mem_rc=$?
tail -3 "$out/memcheck.log"
t3=$(date +%s)
timeout "${SUITE_TIMEOUT:-200}" $bin/tests/test_cuda --gtest_filter="-$new" > "$out/test_cuda.log" 2>&1
suite_rc=$?
grep -E "^\[  (FAILED|SKIPPED) |Failure|^\[ (parity|training)" "$out/test_cuda.log" | head -30
t4=$(date +%s)

echo
echo "| step | result | seconds |"
echo "|---|---|---|"
echo "| build ($bin) | ok | $((t1 - t0)) |"
echo "| example runs | rc:$ex_rc | $((t2 - t1)) |"
echo "| new CUDA tests | rc=$new_rc, $(grep -E '^\[  PASSED  \]' "$out/test_new.log" | tr -d '[]') $(grep -cE '^\[  FAILED  \] [A-Za-z0-9_./]+$' "$out/test_new.log") failed | |"
echo "| memcheck (cross-device, pinned, copy, stream tests) | rc=$mem_rc ($(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)) | $((t3 - t2)) |"
echo "| rest of test_cuda | rc=$suite_rc, $(grep -E '^\[  PASSED  \]' "$out/test_cuda.log" | tr -d '[]') $(grep -cE '^\[  FAILED  \] [A-Za-z0-9_./]+$' "$out/test_cuda.log") failed | $((t4 - t3)) |"
