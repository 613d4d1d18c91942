#!/usr/bin/env bash
# On a GPU machine: the memory issue's one-GPU rows. GPT 1.3B under each recomputation mode
# (SKIP_6_7B=1 stops there; SKIP_1_3B=1 skips it), then GPT 6.7B (d 4096, 32 layers, T 2048,
# vocabulary 50304) with bf16 autocast, f32 master weights, AdamW and full recomputation, trireme
# beside PyTorch (torch.utils.checkpoint around every block) at the same batch, and trireme's
# estimate beside its measured peak. Prints one table last; logs under $out.
#   bash bench/gpu/memory.sh               # BATCHES="8 16" to choose batches
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
batches=${BATCHES:-8}
t0=$(date +%s)
build_bench build_memory.log gpt_train_step trireme_cli
echo "build: $(($(date +%s) - t0)) s"
# GPT 1.3B, bf16 parameters, B 8: what each recomputation mode costs and saves.
for mode in none selective full; do
  [ "${SKIP_1_3B:-0}" = 1 ] && break
  timeout 300 build-gpu/bench/gpt_train_step --model gpt-1.3b --batch 8 --device cuda --dtype bf16 \
    --recompute "$mode" --warmup 2 --iters 5 > "$out/memory_1.3b_$mode.log" 2>&1
  grep -oE '\{"impl".*\}' "$out/memory_1.3b_$mode.log" | tail -1 |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("gpt-1.3b recompute %s: %.1f ms, %.0f tok/s, peak %.2f GiB" % (r["recompute"], r["step_ms"], r["tokens_per_s"], r["peak_mem_GiB"]))' ||
    echo "gpt-1.3b recompute $mode: FAILED"
done
[ "${SKIP_6_7B:-0}" = 1 ] && exit 0
rows=()
for b in $batches; do
  timeout 400 build-gpu/bench/gpt_train_step --model gpt-6.7b --batch "$b" --device cuda --dtype amp-bf16 \
    --recompute full --warmup 2 --iters 4 > "$out/memory_trireme_b$b.log" 2>&1
  timeout 400 python3 bench/peer/torch_gpt_bench.py --model gpt-6.7b --batch "$b" --recompute full \
    --warmup 2 --iters 4 > "$out/memory_torch_b$b.log" 2>&1
  build-gpu/trireme estimate --set model.d_model=4096 --set model.n_layer=32 --set model.n_head=32 \
    --set model.block_size=2048 --set train.batch_size="$b" --set train.precision=bf16 \
    --set memory.recompute=full --set train.device=cuda --vocab 50304 --json > "$out/memory_estimate_b$b.json" 2>&1
  rows+=("$b")
done
python3 - "$out" "${rows[@]}" <<'PY'
import json, re, sys
out, batches = sys.argv[1], sys.argv[2:]
def last_json(path):
    try:
        found = re.findall(r'\{"(?:impl|peer)".*\}', open(path).read())
        return json.loads(found[-1]) if found else None
    except OSError:
        return None
print("| batch | trireme tok/s | PyTorch tok/s | ratio | trireme MFU | trireme peak GiB | PyTorch peak GiB | estimate GiB |")
print("|---|---|---|---|---|---|---|---|")
for b in batches:
    t, p = last_json(f"{out}/memory_trireme_b{b}.log"), last_json(f"{out}/memory_torch_b{b}.log")
    try:
        est = json.load(open(f"{out}/memory_estimate_b{b}.json"))["ranks"][0]["peak_bytes"] / 2**30
    except Exception:
        est = float("nan")
    tt = t["tokens_per_s"] if t else float("nan")
    pt = p["tokens_per_s"] if p else float("nan")
    tm = t.get("peak_mem_GiB", float("nan")) if t else float("nan")
    pm = p.get("peak_mem_GiB", float("nan")) if p else float("nan")
    mfu = t.get("mfu", float("nan")) if t else float("nan")
    print(f"| {b} | {tt:,.0f} | {pt:,.0f} | {tt / pt:.3f} | {mfu:.3f} | {tm:.1f} | {pm:.1f} | {est:.1f} |")
PY
