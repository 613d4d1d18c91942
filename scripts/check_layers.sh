#!/usr/bin/env bash
# Fails on an include that goes against the layering of src/trireme (scripts/layers.txt): every
# `#include "trireme/<folder>/..."` in src/trireme/<layer>/ must name <layer> itself or a folder
# it builds on. Prints file:line and the rule broken for each offence.
#
#   scripts/check_layers.sh                        # this checkout
#   scripts/check_layers.sh --src DIR --layers FILE  # another tree (the checker's own test)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/src/trireme"
layers="$root/scripts/layers.txt"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src) src="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    *) echo "check_layers: unknown argument '$1' (use --src DIR, --layers FILE)" >&2; exit 2 ;;
  esac
done
[[ -d "$src" ]] || { echo "check_layers: no source folder $src" >&2; exit 2; }
[[ -f "$layers" ]] || { echo "check_layers: no layer file $layers" >&2; exit 2; }

# Direct dependencies, in file order (a folder may only build on folders listed before it).
declare -A direct=() allowed=()
order=()
lineno=0
while IFS= read -r line || [[ -n "$line" ]]; do
  lineno=$((lineno + 1))
  line="${line%%#*}"
  read -r -a words <<<"$line" || true
  [[ ${#words[@]} -eq 0 ]] && continue
  layer="${words[0]}"
  if [[ -n "${direct[$layer]+x}" ]]; then
    echo "$layers:$lineno: layer '$layer' is listed twice" >&2; exit 2
  fi
  deps=("${words[@]:1}")
  closure=" $layer "
  for d in "${deps[@]}"; do
    if [[ -z "${direct[$d]+x}" ]]; then
      echo "$layers:$lineno: '$layer' builds on '$d', which is not listed above it" >&2; exit 2
    fi
    closure+="${allowed[$d]} "
  done
  direct[$layer]="${deps[*]}"
  allowed[$layer]="$closure"
  order+=("$layer")
done <"$layers"

failures=0
while IFS= read -r -d '' file; do
  rel="${file#"$src"/}"
  layer="${rel%%/*}"
  [[ "$layer" == "$rel" ]] && continue  # a file directly in src/trireme belongs to no layer
  while IFS=: read -r num text; do
    target="$(sed -E 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*"trireme/([^/"]+)/.*|\1|' <<<"$text")"
    if [[ -z "${allowed[$layer]+x}" ]]; then
      echo "src/trireme/$rel:$num: folder '$layer' is not a layer in scripts/layers.txt (add it there)"
      failures=$((failures + 1))
      break
    elif [[ -z "${allowed[$target]+x}" ]]; then
      echo "src/trireme/$rel:$num: includes trireme/$target/, which is not a layer in scripts/layers.txt"
      failures=$((failures + 1))
    elif [[ "${allowed[$layer]}" != *" $target "* ]]; then
      echo "src/trireme/$rel:$num: $layer includes $target, which is not below it ($layer builds on: ${direct[$layer]:-nothing})"
      failures=$((failures + 1))
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"trireme/[^/"]+/' "$file" || true)
done < <(find "$src" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)

if [[ $failures -gt 0 ]]; then
  echo "check_layers: $failures include(s) break the layering (order: ${order[*]}; see docs/ARCHITECTURE.md)"
  exit 1
fi
echo "check_layers: layering holds (${#order[@]} layers)"
