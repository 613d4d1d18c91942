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
# BENCH_BUILD name another source tree and build folder (default: this one, build-gpu).
build_bench() {
  local log="$out/$1" src=${BENCH_SRC:-.} build=${BENCH_BUILD:-build-gpu}
  shift
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$log" 2>&1 &&
    ninja -C "$build" "$@" >> "$log" 2>&1 ||
    { grep -E "error" "$log" | head -20; tail -30 "$log"; echo "BUILD FAILED"; exit 1; }
}
