#!/usr/bin/env bash
# `trireme train` as a benchmark row (bench/gpu/before_after.sh): runs BUILD/trireme train on one
# GPU with the given --set arguments (GPT-2 124M shapes, global batch 16, T 1024, the default
# corpus prepared into DATA), 12 steps, and prints {"impl": "trireme train", "tokens_per_s": ...}
# from the median of the steps after the first two, as the benchmarks print theirs.
#   bash bench/gpu/train_tokens.sh BUILD DATA [--set key=value ...]
set -uo pipefail
build=$1 data=$2
shift 2
run=$(mktemp -d)
"$build/trireme" train --overwrite --set model.d_model=768 --set model.n_layer=12 --set model.n_head=12 \
  --set model.block_size=1024 --set train.batch_size=16 --set train.device=cuda --set data.dir="$data" \
  --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.log_interval=1 \
  --set schedule.warmup_steps=0 --set train.steps=12 --set train.out_dir="$run" "$@" > "$run.log" 2>&1 ||
  { tail -5 "$run.log"; exit 1; }
python3 - "$run/metrics.jsonl" << 'PY'
import json, statistics, sys
t = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"elapsed_s"' in l]
steps = [b - a for a, b in zip(t[1:], t[2:])]
print(json.dumps({"impl": "trireme train", "step_ms": 1e3 * statistics.median(steps),
                  "tokens_per_s": 16 * 1024 / statistics.median(steps)}))
PY
rm -rf "$run" "$run.log"
