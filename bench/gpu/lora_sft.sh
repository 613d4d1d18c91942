#!/usr/bin/env bash
# On a GPU machine: LoRA supervised fine-tuning of a Qwen2-0.5B-shaped model (random weights made
# by transformers, bench/peer/torch_lora_sft.py) on one GPU, `trireme train --init-from` beside
# the same run in PyTorch (transformers + LoRA adapters on q, k, v, o, gate, up, down), in one go:
# tokens/s over the timed steps and peak memory. Both sides: bf16 autocast over f32 frozen weights,
# rank 16, alpha 32, dropout 0.05, AdamW on the adapters, batch 8 x 1024 tokens; the peer also with
# its frozen weights stored in bf16. Logs go to $OUT (or out/gpu); a table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
peer=bench/peer/torch_lora_sft.py
work=${WORK:-$out/lora_sft}
shape=${SHAPE:-qwen2-0.5b}
batch=${BATCH:-8} seq=${SEQ:-1024} steps=${STEPS:-20} warmup=${WARMUP:-5}
mkdir -p "$work"

build_bench lora_sft_build.log trireme_cli
$python $peer make-model --out "$work/model" --shape "$shape" --tokenizer tests/fixtures/hf/qwen2/tokenizer.json
$python $peer make-data --out "$work/sft.jsonl" --examples 6000
$python $peer trireme-config --model "$work/model" --data "$work/sft.jsonl" --out-dir "$work/run" \
  --batch "$batch" --seq "$seq" --steps "$steps" --warmup "$warmup" > "$work/run.toml"

timeout 400 build-gpu/trireme train -c "$work/run.toml" --init-from "$work/model" --overwrite > "$out/lora_sft_trireme.log" 2>&1
echo "trireme rc=$?"
grep -E "^(sft|model|summary):" "$out/lora_sft_trireme.log"
$python - "$work/run/metrics.jsonl" "$batch" "$seq" "$warmup" > "$out/lora_sft_trireme.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
b, t, w = map(int, sys.argv[2:5])
# From the end of the warm-up to the step before the last (the last one also evaluates).
by_step = {r["step"]: r for r in rows}
first, last = by_step[w], by_step[max(by_step) - 1]
n = last["step"] - first["step"]
dt = last["elapsed_s"] - first["elapsed_s"]
print(json.dumps({"side": "trireme", "steps": n, "ms_per_step": 1000 * dt / n, "tokens_per_s": b * t * n / dt,
                  "peak_memory_gib": max(r["peak_memory_bytes"] for r in rows) / 2**30, "loss": last["loss"]}))
PY
cat "$out/lora_sft_trireme.json"
for base in f32 bf16; do
  timeout 300 $python $peer bench --model "$work/model" --batch "$batch" --seq "$seq" --steps "$steps" \
    --warmup "$warmup" --base-dtype $base > "$out/lora_sft_torch_$base.log" 2>&1
  echo "pytorch ($base base) rc=$?"
  grep -E '^\{' "$out/lora_sft_torch_$base.log" | tail -1 | tee "$out/lora_sft_torch_$base.json"
done

$python - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try: return json.load(open(os.path.join(out, name)))
    except Exception: return None
t = load("lora_sft_trireme.json")
print("\n| side | tokens/s | ms/step | peak memory GiB | trireme's ratio |\n|---|---|---|---|---|")
if t: print(f"| trireme (f32 frozen weights, bf16 autocast) | {t['tokens_per_s']:,.0f} | {t['ms_per_step']:.1f} | {t['peak_memory_gib']:.2f} | |")
for base in ("f32", "bf16"):
    p = load(f"lora_sft_torch_{base}.json")
    if p and t:
        print(f"| PyTorch {p['torch']} ({base} frozen weights, bf16 autocast) | {p['tokens_per_s']:,.0f} | {p['ms_per_step']:.1f} | "
              f"{p['peak_memory_gib']:.2f} | {t['tokens_per_s'] / p['tokens_per_s']:.2f}x |")
PY
