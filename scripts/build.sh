#!/usr/bin/env bash
# Configures and builds trireme into build/ (or $TRIREME_BUILD_DIR). Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TRIREME_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$build_dir" | grep -v '^\[' || true
test -x "$build_dir/trireme"
