#!/usr/bin/env bash
# Packs this machine's build of the command, the CUDA tests and the benchmarks into .gpu_prebuilt/
# (stripped, xz-compressed, about 12 MB), with a digest of the sources they were built from, so
# that the GPU machine's scripts can skip their own build (two minutes of each fresh machine)
# while the sources match: build_bench in scripts/gpu_env.sh unpacks it into build-gpu when the digest and
# the targets asked for match, and builds from source otherwise. BUILD (default build) must be a
# Release build with CUDA, cuDNN and the benchmarks, as build_bench configures its own.
#   scripts/gpu_prebuilt.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cache=$build/CMakeCache.txt
[ -f "$cache" ] || { echo "gpu_prebuilt: no $cache (configure a Release build first)" >&2; exit 1; }
for want in CMAKE_BUILD_TYPE:STRING=Release TRIREME_BUILD_BENCH:BOOL=ON TRIREME_WITH_CUDNN:BOOL=ON; do
  grep -qx "$want" "$cache" || { echo "gpu_prebuilt: $build is not configured with $want" >&2; exit 1; }
done
grep -qx "TRIREME_WITH_CUDA:BOOL=ON" "$cache" || { echo "gpu_prebuilt: $build has no CUDA" >&2; exit 1; }
source scripts/source_digest.sh
benches=$(for f in bench/*.cpp; do basename "$f" .cpp; done)
# shellcheck disable=SC2086
ninja -C "$build" trireme_cli test_cuda $benches
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bench" "$stage/tests"
cp "$build/trireme" "$build/libtrireme.so" "$stage/"
cp "$build/tests/test_cuda" "$stage/tests/"  # the CUDA tests, for a run without the machine's own build
for b in $benches; do cp "$build/bench/$b" "$stage/bench/"; done
# The unstripped files stay here, for naming the GPU machine's host samples
# (bench/gpu/host_report.py --symbols .gpu_symbols --symbols .gpu_symbols/bench).
rm -rf .gpu_symbols && cp -r "$stage" .gpu_symbols
strip "$stage/trireme" "$stage/libtrireme.so" "$stage"/bench/* "$stage/tests/test_cuda"
mkdir -p .gpu_prebuilt
tar -cJf .gpu_prebuilt/build.tar.xz -C "$stage" .
echo "trireme_cli test_cuda $benches" | tr '\n' ' ' > .gpu_prebuilt/targets
source_digest > .gpu_prebuilt/digest
echo "gpu_prebuilt: $(du -h .gpu_prebuilt/build.tar.xz | cut -f1) for $(cat .gpu_prebuilt/targets)"
