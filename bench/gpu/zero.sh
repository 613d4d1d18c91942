#!/usr/bin/env bash
# On a machine with 2 GPUs: the ZeRO stages side by side. GPT 1.3B, dp = 2, batch 8 per GPU, bf16
# parameters (bench/gpt_parallel_step --zero N), each stage's tokens/s and rank 0's peak, and
# PyTorch FSDP2 (fully_shard on every block, bf16 autocast) and DDP in the same call.
#   bash bench/gpu/zero.sh            # MODEL=gpt2-124m BATCH=16 for the small model
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
model=${MODEL:-gpt-1.3b}
batch=${BATCH:-8}
t0=$(date +%s)
build_bench build_zero.log gpt_parallel_step trireme_cli
echo "build: $(($(date +%s) - t0)) s"
row() {  # label, log file
  grep -oE '\{"(impl|peer)".*\}' "$2" | tail -1 |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-12s %10.0f tok/s  %8.1f ms  peak %6.2f GiB" % (sys.argv[1], r["tokens_per_s"], r["step_ms"], r.get("peak_mem_GiB", float("nan"))))' "$1" ||
    echo "$1: FAILED (see $2)"
}
for z in 0 1 2 3; do
  log="$out/zero_$z.log"
  timeout 300 build-gpu/trireme launch --nproc-per-node 2 -- build-gpu/bench/gpt_parallel_step --model "$model" --dp 2 \
    --batch "$batch" --device cuda --dtype bf16 --zero "$z" --warmup 3 --iters 8 > "$log" 2>&1
  row "zero=$z" "$log"
done
for mode in ddp fsdp2; do
  log="$out/zero_torch_$mode.log"
  timeout 300 python3 bench/peer/torch_gpt_bench.py --model "$model" --batch "$batch" --mode "$mode" --gpus 2 \
    --warmup 3 --iters 8 > "$log" 2>&1
  row "torch $mode" "$log"
done
