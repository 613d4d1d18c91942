#!/usr/bin/env bash
# On a GPU machine: builds bench/gpt_train_step (dependencies: scripts/gpu_env.sh) and
# times a GPT-2 124M training step (B=16, T=1024, vocab 50304) on one GPU, trireme in f32, pure
# bf16 and bf16 autocast beside PyTorch's bf16-autocast peer in eager and compile modes
# (torch_gpt_bench.py: $TRIREME_PEER, or .peer/), in one go. Full logs go to $OUT (or
# out/gpu); a table of tokens/s, MFU and peak memory is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
batch=${BENCH_BATCH:-16}
model=${BENCH_MODEL:-gpt2-124m}
peer=${TRIREME_PEER:-../shared/peer/torch_gpt_bench.py}
[ -f "$peer" ] || peer=.peer/torch_gpt_bench.py
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3

t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$out/bench_build.log" 2>&1 &&
  ninja -C build-gpu gpt_train_step >> "$out/bench_build.log" 2>&1
if [ $? -ne 0 ]; then
  tail -40 "$out/bench_build.log"
  echo "BENCH BUILD FAILED"
  exit 1
fi
t1=$(date +%s)
echo "bench build: $((t1 - t0)) s"

run() {  # name, command...: one JSON line into $out/bench_<name>.json, the log beside it
  local name=$1
  shift
  timeout 240 "$@" > "$out/bench_$name.log" 2>&1
  echo "$name rc=$?"
  grep -E '^\{' "$out/bench_$name.log" | tail -1 > "$out/bench_$name.json"
  tail -3 "$out/bench_$name.log"
}
# DTYPES: trireme's modes (f32, bf16 = pure bf16 parameters, amp-bf16 = f32 master weights with
# bf16 autocast: the like-for-like peer of PyTorch's autocast). MODES: trireme's eager and/or
# static (train.mode = "static", docs/STATIC_GRAPH.md). PEER_MODES: eager and/or compile.
for dt in ${DTYPES:-f32 bf16 amp-bf16}; do
  for m in ${MODES:-eager}; do
    run "trireme_${dt}_$m" build-gpu/bench/gpt_train_step --model "$model" --batch "$batch" --device cuda --dtype "$dt" --mode "$m"
  done
done
if [ -f "$peer" ]; then
  for mode in ${PEER_MODES:-eager compile}; do
    run "torch_${mode}_bf16" "$python" "$peer" --model "$model" --batch "$batch" --mode "$mode"
  done
else
  echo "no peer script at ../shared/peer or .peer: PyTorch not run"
fi

echo
echo "| impl | dtype | step ms | tokens/s | MFU (of 989 TFLOP/s) | peak GiB |"
echo "|---|---|---|---|---|---|"
for f in "$out"/bench_*.json; do
  [ -s "$f" ] || continue
  "$python" - "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
impl = r.get("impl") or r.get("peer")
impl += f" ({r['mode']})" if r.get("mode") else ""
dtype = r.get("dtype", "bf16 autocast")
print(f"| {impl} | {dtype} | {r['step_ms']} | {r['tokens_per_s']} | {r.get('mfu', '-')} | {r.get('peak_mem_GiB', '-')} |")
PY
done
