#!/usr/bin/env bash
# Runs one fuzz harness from its committed seeds, for the ctest smoke and scripts/fuzz.sh:
#   run_harness.sh BINARY NAME WORK_DIR [libFuzzer flags...] [FILE...]
# New inputs go to WORK_DIR/NAME/corpus (the committed seeds are only read), crash inputs to
# WORK_DIR/NAME/artifacts/. With FILEs, runs just those inputs once each (no fuzzing).
# Exits non-zero on a finding.
set -euo pipefail
binary=$1 name=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
flags=(
  -artifact_prefix="$work/$name/artifacts/"
  -timeout=10           # an input running longer is a hang: a finding
  -malloc_limit_mb=512  # the inputs are KiBs: an allocation this big comes from a size field believed
  -rss_limit_mb=2048
  -print_final_stats=1
)
if [ -f "$here/dict/$name.dict" ]; then flags+=(-dict="$here/dict/$name.dict"); fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
options=() files=()
for a in "$@"; do
  if [[ $a == -* ]]; then options+=("$a"); else files+=("$a"); fi
done
# A fixed seed asks for a repeatable run: it starts from the committed seeds alone (the corpus
# folder emptied) with address randomisation off, as libFuzzer places the values it saw compared
# by the address of the comparing code (with randomisation the same seed tries other inputs).
launch=()
if [[ " ${options[*]} " == *" -seed="* ]] && ((${#files[@]} == 0)); then
  find "$work/$name/corpus" -mindepth 1 -delete
  if setarch -R true 2>/dev/null; then launch=(setarch -R); fi
fi
inputs=("$work/$name/corpus" "$here/corpus/$name") log=fuzz.log
if ((${#files[@]})); then inputs=("${files[@]}") log=replay.log; fi
"${launch[@]}" "$binary" "${flags[@]}" "${options[@]}" "${inputs[@]}" 2>&1 | tee "$work/$name/$log"
