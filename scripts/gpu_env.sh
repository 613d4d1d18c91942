# Sourced (from the repository root) by every script that runs on the GPU machine: the
# environment every process there needs (NVLink multicast off), the toolchain, and the Debian-side
# dependencies unpacked from .gpu_deps (scripts/gpu_deps.sh). Sets $out (logs) and $deps.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-out/gpu}
mkdir -p "$out"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
# The GPU machine has no fortunes-zh: a carried copy of its poem files (.fortunes) stands in.
if [ -d .fortunes ]; then export TRIREME_FORTUNES_DIR=${TRIREME_FORTUNES_DIR:-$PWD/.fortunes}; fi
deps=$PWD/.gpu_deps
if [ -f "$deps/deps.tar.xz" ] && [ ! -d "$deps/usr" ]; then tar -xJf "$deps/deps.tar.xz" -C "$deps"; fi
ml=$deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$ml:$ml/openblas-openmp:$deps/usr/lib:${LD_LIBRARY_PATH:-}
# cuDNN (CUDA attention, CMakeLists.txt) is there only inside PyTorch's environment.
for cudnn in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn; do
  if [ -f "$cudnn/include/cudnn.h" ]; then
    export CUDNN_ROOT=${CUDNN_ROOT:-$cudnn} LD_LIBRARY_PATH=$cudnn/lib:$LD_LIBRARY_PATH
  fi
done

# build_bench LOG TARGET...: configures build-gpu (Release, benches on) and builds the targets,
# logging to $out/LOG; on failure prints the errors and exits the calling script. BENCH_SRC and
# BENCH_BUILD name another source tree and build folder (default: this one, build-gpu). A carried
# .gpu_prebuilt (scripts/gpu_prebuilt.sh) stands in for the build when it was made from these
# sources and holds the targets, and its command starts here.
build_bench() {
  local log="$out/$1" src=${BENCH_SRC:-.} build=${BENCH_BUILD:-build-gpu}
  shift
  if [ "$src" = . ] && [ "$build" = build-gpu ] && use_prebuilt "$@"; then return 0; fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$log" 2>&1 &&
    ninja -C "$build" "$@" >> "$log" 2>&1 ||
    { grep -E "error" "$log" | head -20; tail -30 "$log"; echo "BUILD FAILED"; exit 1; }
}

# use_prebuilt TARGET...: unpacks .gpu_prebuilt into build-gpu when its digest is these sources'
# and it has every target; succeeds when build-gpu then holds a command that starts.
use_prebuilt() {
  local pre=.gpu_prebuilt t
  [ -f "$pre/build.tar.xz" ] && [ -f "$pre/digest" ] && [ -f "$pre/targets" ] || return 1
  source scripts/source_digest.sh
  [ "$(cat "$pre/digest")" = "$(source_digest)" ] || { echo "prebuilt: made from other sources; building"; return 1; }
  for t in "$@"; do
    [[ " $(cat "$pre/targets") " == *" $t "* ]] || { echo "prebuilt: has no $t; building"; return 1; }
  done
  mkdir -p build-gpu && tar -xJf "$pre/build.tar.xz" -C build-gpu || return 1
  export LD_LIBRARY_PATH=$PWD/build-gpu:$LD_LIBRARY_PATH
  build-gpu/trireme --version > /dev/null 2>&1 || { echo "prebuilt: its command does not start here; building"; return 1; }
  echo "prebuilt: build-gpu from .gpu_prebuilt ($*)"
}
