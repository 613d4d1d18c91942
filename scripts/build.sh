#!/usr/bin/env bash
# Configures and builds trireme into build/ (or $TRIREME_BUILD_DIR).
#   scripts/build.sh                         # every target: library, trireme, tests, benchmarks, examples
#   scripts/build.sh trireme_cli             # only these Ninja targets (and what they need)
#   scripts/build.sh -DTRIREME_WITH_CUDA=OFF # arguments starting with - go to cmake
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TRIREME_BUILD_DIR:-build}
cmake_args=()
targets=()
for a in "$@"; do
  if [[ $a == -* ]]; then cmake_args+=("$a"); else targets+=("$a"); fi
done
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
ninja -C "$build_dir" "${targets[@]}" | grep -v '^\[' || true
test -x "$build_dir/trireme"
