#!/usr/bin/env bash
# Packs what the build needs and the GPU machine lacks into .gpu_deps/deps.tar.xz, taken from
# this (Debian 12) machine's packages: headers of nlohmann-json, CLI11, toml++, xxHash and Gloo,
# oneDNN, the shared libraries of OpenBLAS (OpenMP flavour), oneDNN and Gloo with the libraries they pull in that
# Ubuntu 24.04 may lack, GoogleTest (prebuilt, plus its sources as a fallback), and the CMake
# package files. Laid out like /usr, so after `tar -xJf .gpu_deps/deps.tar.xz -C .gpu_deps` the
# build takes -DTRIREME_DEPS_PREFIX=$PWD/.gpu_deps/usr and LD_LIBRARY_PATH=.gpu_deps/usr/lib/...
# Compressed because the tree that travels to the GPU machine is limited to 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu_deps
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

copy() {  # copy /usr/PATH... (files or folders, symlinks resolved) to $stage/usr/PATH
  for p in "$@"; do
    [ -e "$p" ] || { echo "gpu_deps: missing $p (run scripts/setup.sh)" >&2; exit 1; }
    mkdir -p "$stage$(dirname "$p")"
    cp -rL "$p" "$stage$p"
  done
}

ml=/usr/lib/x86_64-linux-gnu
copy /usr/include/nlohmann /usr/share/cmake/nlohmann_json \
     /usr/include/CLI /usr/share/cmake/CLI11 \
     /usr/include/toml++ $ml/cmake/tomlplusplus $ml/libtomlplusplus.so* \
     /usr/include/xxhash.h \
     /usr/include/gloo /usr/lib/libgloo.so* \
     /usr/include/x86_64-linux-gnu/openblas-openmp \
     $ml/openblas-openmp/libopenblas.so $ml/openblas-openmp/libopenblas.so.0 \
     /usr/include/oneapi/dnnl $ml/libdnnl.so.2 \
     /usr/include/gtest /usr/include/gmock $ml/cmake/GTest $ml/libgtest.a $ml/libgtest_main.a \
     $ml/libgmock.a $ml/libgmock_main.a \
     /usr/src/googletest
ln -s libdnnl.so.2 "$stage$ml/libdnnl.so"  # one copy of oneDNN's 38 MB library, found by its link name
# Gloo's own CMake package names /usr/lib absolutely, so it is left out: the build finds the
# header and library by path under the prefix instead.
# Libraries the copied ones load that a plain Ubuntu may lack (glibc, libstdc++ and libgcc_s it has).
for lib in $ml/openblas-openmp/libopenblas.so.0 $ml/libdnnl.so.2 /usr/lib/libgloo.so.0; do
  ldd "$lib" | awk '/=> \// {print $3}' | while read -r dep; do
    case "$(basename "$dep")" in
      libc.so*|libm.so*|libgomp.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*) ;;
      *) mkdir -p "$stage$ml"; cp -L "$dep" "$stage$ml/" ;;
    esac
  done
done
rm -rf "$out"
mkdir -p "$out"
tar -C "$stage" -cJf "$out/deps.tar.xz" usr
echo "gpu_deps: $(du -h "$out/deps.tar.xz" | cut -f1) in $out/deps.tar.xz"
