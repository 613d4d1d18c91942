#!/usr/bin/env bash
# On the 2-GPU machine: the pipeline-on-GPUs checks in one bounded call. Uses binaries built
# beforehand on the dev machine (same CUDA 13.0, sm_90) when PREBUILT names their build folder
# and they load there, else builds test_cuda (and with it the CLI and the NCCL worker); then runs
# the NCCL p2p grouping test and the pipeline trainer test (GPipe and 1F1B, pp=2 on 2 GPUs) under
# `timeout`, with TRIREME_PIPELINE_TRACE=1 so that a hang shows each rank's last action.
# Logs go to $OUT (or out/gpu); a short summary is printed last.
#   PREBUILT=.prebuilt PREBUILT_AS=/path/of/the/build/checkout bash scripts/gpu_pipeline_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

t0=$(date +%s)
bin=""
if [ -n "${PREBUILT:-}" ] && [ -d "$PREBUILT" ] && [ ! -e "$PREBUILT_AS" ]; then
  # The binaries name their own paths (rpath, the CLI and worker the tests start, the source
  # folder): make this checkout appear where they were built, with its build folder = PREBUILT.
  mkdir -p "$(dirname "$PREBUILT_AS")" && ln -sfn "$PWD" "$PREBUILT_AS" && ln -sfn "$PREBUILT" build
  if ! ldd build/tests/test_cuda build/libtrireme.so | grep -q "not found" &&
     build/tests/test_cuda --gtest_list_tests > /dev/null 2>&1; then
    bin=$PREBUILT_AS/build
  else
    ldd build/tests/test_cuda build/libtrireme.so > "$out/prebuilt.log" 2>&1
  fi
fi
how=prebuilt
if [ -z "$bin" ]; then
  how=built
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=OFF > "$out/build.log" 2>&1 &&
    ninja -C build-gpu test_cuda >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
  bin=build-gpu
fi
t1=$(date +%s)

export TRIREME_PIPELINE_TRACE=1
timeout -k 5 ${NCCL_TIMEOUT:-60} "$bin/tests/test_cuda" --gtest_filter='Nccl.Transfers*' > "$out/nccl_p2p.log" 2>&1
nccl_rc=$?
t2=$(date +%s)
timeout -k 5 ${PIPE_TIMEOUT:-200} "$bin/tests/test_cuda" --gtest_filter='CudaPipeline.*' > "$out/pipeline.log" 2>&1
pipe_rc=$?
t3=$(date +%s)

grep -E "error as expected|^\[ +(OK|FAILED) +\]|Failure|check failed|\[ training \]" "$out/nccl_p2p.log" "$out/pipeline.log" | cut -c1-400 | head -40
if [ $pipe_rc -ne 0 ]; then
  echo "--- last trace lines per rank:"
  for r in 0 1; do grep -a "\[pipeline trace\].* rank $r " "$out/pipeline.log" | tail -3; done
fi
echo
echo "| step | result | seconds |"
echo "|---|---|---|"
echo "| binaries | $how | $((t1 - t0)) |"
echo "| Nccl.Transfers* | rc=$nccl_rc | $((t2 - t1)) |"
echo "| CudaPipeline.* | rc=$pipe_rc | $((t3 - t2)) |"
