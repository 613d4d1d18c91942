#!/usr/bin/env bash
# The last step of scripts/test.sh: where this machine can build container images (root, and
# podman, buildah, debootstrap and runc installed), builds the CPU image from this checkout
# (scripts/container/build_cpu_image.sh: minutes, cached between runs) and runs the unit tests
# inside it (scripts/container/test_in_image.sh), so the image developers, CI and production
# share is tested with the code. Elsewhere it says why it skips and succeeds: the packages are
# not part of scripts/setup.sh, because a container engine is a host's choice, not a dependency.
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
for tool in podman buildah debootstrap runc; do
  command -v "$tool" > /dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "tests in the CPU image: skipped (${missing[*]} not installed; apt-get install -y podman buildah debootstrap runc to run them)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "tests in the CPU image: skipped (building the image's base with debootstrap needs root)"
  exit 0
fi
echo "tests in the CPU image: building it from this checkout"
scripts/container/build_cpu_image.sh
scripts/container/test_in_image.sh
