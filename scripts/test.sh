#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs the whole test suite
# (labels unit and dist; cuda tests skip themselves without a GPU). Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${TRIREME_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 -j2 "$@"
