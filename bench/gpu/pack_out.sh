#!/usr/bin/env bash
# On the GPU machine, last in a call: packs everything under $OUT into $OUT/out.tgz, since the
# device tool brings back at most 8 files (a trace alone writes more). Unpack here with
# `tar xzf <files_at>/out.tgz -C <somewhere>`.
set -uo pipefail
cd "${OUT:?}" || exit 1
shopt -s nullglob dotglob
items=(*)
[ ${#items[@]} -eq 0 ] && exit 0
tar czf /tmp/out.tgz "${items[@]}" && rm -rf "${items[@]}" && mv /tmp/out.tgz out.tgz
echo "packed $(tar tzf out.tgz | wc -l) entries into out.tgz ($(du -h out.tgz | cut -f1))"
