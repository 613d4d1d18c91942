#!/usr/bin/env bash
# The image tags, computed from the sources so that a tag always names what the image holds:
#   image_tags.sh version                    -> 0.1.0          (CMakeLists.txt's project(VERSION))
#   image_tags.sh cpu                        -> trireme:0.1.0-cpu-debian12
#   image_tags.sh gpu [CONTAINERFILE]        -> trireme:0.1.0-gpu-cuda13.0-cudnn9
#                                               (CUDA and cuDNN from the Containerfile's ARGs)
# Also sourced by the other scripts of this folder for its functions.
set -euo pipefail

trireme_root=${trireme_root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

# project(trireme VERSION X.Y.Z ...) of the top CMakeLists.txt.
trireme_version() {
  local v
  v=$(sed -nE 's/^project\(trireme[[:space:]]+VERSION[[:space:]]+([0-9]+(\.[0-9]+)*)[[:space:])].*/\1/p' \
        "$trireme_root/CMakeLists.txt" | head -n1)
  [ -n "$v" ] || { echo "image_tags: no project(trireme VERSION ...) in $trireme_root/CMakeLists.txt" >&2; return 1; }
  echo "$v"
}

# The default value of `ARG NAME=value` in a Containerfile.
containerfile_arg() {
  local file=$1 name=$2 v
  v=$(sed -nE "s/^ARG[[:space:]]+$name=\"?([^\"[:space:]]+)\"?[[:space:]]*$/\1/p" "$file" | head -n1)
  [ -n "$v" ] || { echo "image_tags: no 'ARG $name=...' in $file" >&2; return 1; }
  echo "$v"
}

cpu_image_tag() {
  local v
  v=$(trireme_version) || return 1
  echo "trireme:$v-cpu-debian12"
}

# CUDA as major.minor (13.0 from 13.0.1) and cuDNN as its major version.
gpu_image_tag() {
  local file=${1:-$trireme_root/container/Containerfile.gpu} cuda cudnn
  cuda=$(containerfile_arg "$file" CUDA) || return 1
  cudnn=$(containerfile_arg "$file" CUDNN) || return 1
  [[ $cuda =~ ^([0-9]+\.[0-9]+)(\.[0-9]+)?$ ]] || { echo "image_tags: CUDA '$cuda' is not X.Y or X.Y.Z" >&2; return 1; }
  local cuda_xy=${BASH_REMATCH[1]} v
  [[ $cudnn =~ ^[0-9]+$ ]] || { echo "image_tags: CUDNN '$cudnn' is not a number" >&2; return 1; }
  v=$(trireme_version) || return 1
  echo "trireme:$v-gpu-cuda$cuda_xy-cudnn$cudnn"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  case "${1:-}" in
    version) trireme_version ;;
    cpu) cpu_image_tag ;;
    gpu) gpu_image_tag "${2:-}" ;;
    *) echo "usage: image_tags.sh version|cpu|gpu [CONTAINERFILE]" >&2; exit 2 ;;
  esac
fi
