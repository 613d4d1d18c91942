#!/usr/bin/env bash
# Runs trireme's tests, or its main job, inside the CPU image that
# scripts/container/build_cpu_image.sh built: the image developers, CI and production share.
# scripts/test.sh runs the default (unit) mode after building the image, where podman is installed
# (scripts/container/tests_in_image_if_podman.sh).
#   scripts/container/test_in_image.sh              # ctest -L unit on the tests built into the image
#   scripts/container/test_in_image.sh --all        # every label of those tests (unit, dist; cuda ones
#                                                   # skip), privileged: the dist tests make network
#                                                   # namespaces and start a Slurm cluster
#   scripts/container/test_in_image.sh --checkout   # scripts/test.sh on this checkout, mounted at
#                                                   # /workspace and built into build-image/ (privileged)
#   scripts/container/test_in_image.sh --main [ARGS...]  # the main job (scripts/main.sh) on the image's
#                                                   # build; it writes out/ here; ARGS go to trireme train
# IMAGE=... picks another image (default: trireme:<version>-cpu-debian12 of these sources).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/container/image_tags.sh
source scripts/container/podman_options.sh

mode=unit
if (($#)); then
  case "$1" in
    --all | --checkout | --main) mode=${1#--}; shift ;;
    --unit) shift ;;
    *) echo "test_in_image: unknown option '$1' (expected --unit, --all, --checkout or --main)" >&2; exit 2 ;;
  esac
fi
[ "$mode" == main ] || (($# == 0)) || { echo "test_in_image: only --main takes more arguments" >&2; exit 2; }
image=${IMAGE:-$(cpu_image_tag)}
command -v podman > /dev/null || { echo "test_in_image: podman is missing: apt-get install -y podman runc" >&2; exit 1; }
podman image exists "$image" ||
  { echo "test_in_image: no image $image here: build it with scripts/container/build_cpu_image.sh" >&2; exit 1; }

run=(podman "${podman_global[@]}" run --rm "${podman_run[@]}")
case "$mode" in
  unit)
    exec nice -n 19 "${run[@]}" "$image" \
      ctest --test-dir /opt/trireme/build -L unit --output-on-failure --timeout 600 -j2 ;;
  all)
    exec nice -n 19 "${run[@]}" --privileged "$image" \
      ctest --test-dir /opt/trireme/build --output-on-failure --timeout 600 -j2 ;;
  checkout)
    exec nice -n 19 "${run[@]}" --privileged -v "$PWD:/workspace" -w /workspace -e TRIREME_BUILD_DIR=build-image \
      "$image" scripts/test.sh ;;
  main)
    mkdir -p out
    exec nice -n 19 "${run[@]}" -v "$PWD/out:/opt/trireme/src/out" -w /opt/trireme/src \
      -e TRIREME_BUILD_DIR=/opt/trireme/build "$image" scripts/main.sh "$@" ;;
esac
