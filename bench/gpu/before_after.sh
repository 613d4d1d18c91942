#!/usr/bin/env bash
# On a GPU machine: does a change keep the speed? Builds bench/gpt_train_step from two source
# trees, the current one and BEFORE_SRC (a tree, or a .tar.gz of one, e.g. made with
# `git archive <commit> | gzip > before.tar.gz`), then times a GPT-2 124M training step on one GPU
# (B=16, T=1024) in bf16 and amp-bf16, alternating before / after ROUNDS times so that both see
# the same machine state. Prints each run's tokens/s and the after/before ratio of the medians.
#   BEFORE_SRC=before.tar.gz bash bench/gpu/before_after.sh          # build and compare
#   BEFORE_SRC=... STAGE=build bash bench/gpu/before_after.sh         # only build (a first call)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
src=${BEFORE_SRC:?set BEFORE_SRC to the source tree or .tar.gz to compare against}
rounds=${ROUNDS:-3}
before=$PWD/build-before-src
if [ -f "$src" ]; then
  [ -d "$before" ] || { mkdir -p "$before" && tar -xzf "$src" -C "$before"; }
else
  before=$(cd "$src" && pwd)
fi
configure_and_build() {  # source dir, build dir, log
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON -DTRIREME_BUILD_TESTS=OFF \
    -DTRIREME_BUILD_EXAMPLES=OFF > "$out/$3" 2>&1 && ninja -C "$2" gpt_train_step >> "$out/$3" 2>&1 ||
    { grep -E "error" "$out/$3" | head -20; tail -20 "$out/$3"; echo "BUILD FAILED: $1"; exit 1; }
}
t0=$(date +%s)
configure_and_build "$before" "$PWD/build-gpu-before" build_before.log
configure_and_build "$PWD" "$PWD/build-gpu" build_after.log
echo "builds: $(($(date +%s) - t0)) s"
[ "${STAGE:-all}" = build ] && exit 0

declare -A runs
for dt in ${DTYPES:-bf16 amp-bf16}; do
  for r in $(seq "$rounds"); do
    for side in before after; do
      dir=build-gpu; [ $side = before ] && dir=build-gpu-before
      log="$out/before_after_${dt}_${side}_$r.log"
      timeout 240 "$dir/bench/gpt_train_step" --model gpt2-124m --batch 16 --device cuda --dtype "$dt" > "$log" 2>&1
      tps=$(grep -E '^\{' "$log" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])' 2>/dev/null)
      echo "$dt $side round $r: ${tps:-FAILED} tokens/s"
      runs[$dt.$side]="${runs[$dt.$side]:-} ${tps:-0}"
    done
  done
  python3 - "$dt" ${runs[$dt.before]} -- ${runs[$dt.after]} <<'PY'
import statistics, sys
dt, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
before, after = [float(x) for x in rest[:cut]], [float(x) for x in rest[cut + 1:]]
b, a = statistics.median(before), statistics.median(after)
print(f"{dt}: before {b:,.0f} tok/s, after {a:,.0f} tok/s, after/before {a / b:.3f}" if b else f"{dt}: no result")
PY
done
