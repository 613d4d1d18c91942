#!/usr/bin/env bash
# On a GPU machine: static-graph mode's one-GPU rows (docs/STATIC_GRAPH.md). GPT-2 124M (B 16)
# eager and static, bf16 autocast and pure bf16, static with and without CUDA graphs, beside
# PyTorch's torch.compile in the same run; GPT 1.3B (B 8, pure bf16) eager and static. One
# JSON line per run in $out/static_*.json, a table last.
#   bash bench/gpu/static.sh            # PEER=0 leaves PyTorch out; SKIP_1_3B=1 the 1.3B rows
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
peer=${TRIREME_PEER:-../shared/peer/torch_gpt_bench.py}
[ -f "$peer" ] || peer=.peer/torch_gpt_bench.py
t0=$(date +%s)
build_bench build_static.log gpt_train_step
echo "build: $(($(date +%s) - t0)) s"
rm -f "$out"/static_*.json
run() {  # name, command...
  local name=$1
  shift
  timeout 300 "$@" > "$out/static_$name.log" 2>&1 || echo "$name: rc=$? ($(tail -1 "$out/static_$name.log"))"
  grep -E '^\{' "$out/static_$name.log" | tail -1 > "$out/static_$name.json"
}
step=build-gpu/bench/gpt_train_step
for dt in amp-bf16 bf16; do
  run "124m_${dt}_eager" $step --model gpt2-124m --batch 16 --device cuda --dtype $dt --mode eager
  run "124m_${dt}_static" $step --model gpt2-124m --batch 16 --device cuda --dtype $dt --mode static
  run "124m_${dt}_static_nograph" $step --model gpt2-124m --batch 16 --device cuda --dtype $dt --mode static --cuda-graph 0
done
if [ "${PEER:-1}" = 1 ] && [ -f "$peer" ]; then
  run 124m_torch_compile python3 "$peer" --model gpt2-124m --batch 16 --mode compile
fi
if [ "${SKIP_1_3B:-0}" != 1 ]; then
  for m in eager static; do
    run "1.3b_bf16_$m" $step --model gpt-1.3b --batch 8 --device cuda --dtype bf16 --mode $m --warmup 2 --iters 5
  done
fi
echo "| run | step ms | host ms | tokens/s | MFU | peak GiB |"
echo "|---|---|---|---|---|---|"
for f in "$out"/static_*.json; do
  [ -s "$f" ] || continue
  python3 - "$f" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
name = os.path.basename(sys.argv[1])[len("static_"):-len(".json")]
print(f"| {name} | {r['step_ms']:.2f} | {r.get('host_ms', float('nan')):.2f} | {r['tokens_per_s']:.0f} | {r.get('mfu', 0):.3f} | {r.get('peak_mem_GiB', 0):.2f} |")
PY
done
