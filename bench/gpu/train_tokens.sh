#!/usr/bin/env bash
# `trireme train` as a benchmark run: BUILD/trireme train on one GPU, GPT-2 124M shapes, global
# batch BATCH (default 16), T 1024, on the default corpus prepared into DATA, STEPS steps (default 12), with the
# given --set arguments after these. Prints {"impl": "trireme train", "tokens_per_s", "step_ms",
# "fastest_ms", "slowest_ms"} from the steps after the first two (the median, as `plan --measure`
# reads a run), as the benchmarks print theirs; PREFIX (e.g. `env LD_PRELOAD=...`) wraps the
# trainer alone. Used by before_after.sh and micro_batches.sh.
#   bash bench/gpu/train_tokens.sh BUILD DATA [--set key=value ...]
set -uo pipefail
build=$1 data=$2
shift 2
run=$(mktemp -d)
${PREFIX:-} "$build/trireme" train --overwrite --set model.d_model=768 --set model.n_layer=12 --set model.n_head=12 \
  --set model.block_size=1024 --set train.batch_size="${BATCH:-16}" --set train.device=cuda --set data.dir="$data" \
  --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.log_interval=1 \
  --set schedule.warmup_steps=0 --set train.steps="${STEPS:-12}" --set train.out_dir="$run" "$@" > "$run.log" 2>&1 ||
  { tail -5 "$run.log"; rm -rf "$run" "$run.log"; exit 1; }
python3 - "$run/metrics.jsonl" "${BATCH:-16}" << 'PY'
import json, statistics, sys
t = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"elapsed_s"' in l]
batch = int(sys.argv[2])
steps = sorted(b - a for a, b in zip(t[1:], t[2:]))
median = statistics.median(steps)
print(json.dumps({"impl": "trireme train", "tokens_per_s": batch * 1024 / median, "step_ms": 1e3 * median,
                  "fastest_ms": 1e3 * steps[0], "slowest_ms": 1e3 * steps[-1]}))
PY
rm -rf "$run" "$run.log"
