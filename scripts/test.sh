#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs the whole test suite
# (labels unit and dist; cuda tests skip themselves without a GPU; extra args go to that ctest),
# then fuzzes the parsers for a bounded time in build-fuzz (label fuzz; tests/fuzz/README.md),
# then, where podman and its tools are installed, runs the unit tests inside the CPU image
# built from this checkout (scripts/container/tests_in_image_if_podman.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --fuzz
scripts/build.sh
(cd "${TRIREME_BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 -j2 "$@")
scripts/fuzz.sh smoke
scripts/container/tests_in_image_if_podman.sh
