#!/usr/bin/env bash
# Installs the built trireme into a temporary prefix, then configures, builds and runs a separate
# two-file project (tests/install/project) that finds it with find_package(trireme) and links
# trireme::trireme. Also checks that the installed binary runs.
#   install_test.sh BUILD_DIR CXX_COMPILER
set -euo pipefail
build_dir=$1
cxx=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build_dir" --prefix "$tmp/prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
for f in bin/trireme lib/libtrireme.so include/trireme/core/tensor.h lib/cmake/trireme/triremeConfig.cmake; do
  [ -e "$tmp/prefix/$f" ] || { echo "install_test: $f was not installed"; ls -R "$tmp/prefix" | head -40; exit 1; }
done
"$tmp/prefix/bin/trireme" --version

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$here/project" -B "$tmp/build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/build/uses_trireme"
echo "install_test: find_package(trireme) project built and ran"
