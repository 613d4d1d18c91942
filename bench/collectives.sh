#!/usr/bin/env bash
# Builds bench/collectives and prints its tables: Gloo f32 bus bandwidth on the CPU with 2 and
# 4 local ranks, 4 KiB to 256 MiB, and the launcher's start-up time to the first collective.
#   bench/collectives.sh [collectives flags, e.g. --nproc 4 --max-bytes 67108864]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C build -j2 collectives > /dev/null
build/bench/collectives "$@"
