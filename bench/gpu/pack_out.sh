#!/usr/bin/env bash
# Last in a run on a GPU machine: packs everything under $OUT into $OUT/out.tgz, one file to copy
# off the machine (a trace alone writes many). Unpack with `tar xzf out.tgz -C <somewhere>`.
set -uo pipefail
cd "${OUT:?}" || exit 1
shopt -s nullglob dotglob
items=(*)
[ ${#items[@]} -eq 0 ] && exit 0
tar czf /tmp/out.tgz "${items[@]}" && rm -rf "${items[@]}" && mv /tmp/out.tgz out.tgz
echo "packed $(tar tzf out.tgz | wc -l) entries into out.tgz ($(du -h out.tgz | cut -f1))"
