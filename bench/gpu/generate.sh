#!/usr/bin/env bash
# On a GPU machine: text generation speed, eager against static (`trireme generate --mode
# static`, docs/STATIC_GRAPH.md). Trains the main job's model (configs/tang_poems.toml) for a few
# steps on the GPU, then generates TOKENS tokens in each mode and prints tokens/s. The time of a
# run with -n 1 (loading the checkpoint, the first traces) is subtracted from each mode's time.
#   bash bench/gpu/generate.sh          # TOKENS=400 STEPS=50 DEVICE=cuda by default
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
tokens=${TOKENS:-400}
device=${DEVICE:-cuda}
build_bench build_generate.log trireme_cli
run_dir=$out/generate_run
rm -rf "$run_dir"
build-gpu/trireme train --config configs/tang_poems.toml --set train.steps="${STEPS:-50}" --set train.device="$device" \
  --set train.out_dir="$run_dir" --set train.eval_interval=1000 --set schedule.warmup_steps=5 > "$out/generate_train.log" 2>&1 ||
  { tail -20 "$out/generate_train.log"; echo "TRAIN FAILED"; exit 1; }
seconds() {  # mode, tokens: wall seconds of one generate run
  local t0 t1
  t0=$(date +%s.%N)
  build-gpu/trireme generate --checkpoint "$run_dir" --prompt 春眠 -n "$2" -t 0.8 --seed 1 --device "$device" \
    --mode "$1" > "$out/generate_$1_$2.txt" 2>&1 || { echo "generate --mode $1 failed: $(tail -3 "$out/generate_$1_$2.txt")" >&2; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
echo "| mode | tokens | seconds (less a 1-token run) | tokens/s |"
echo "|---|---|---|---|"
for mode in eager static; do
  # The first 1-token run warms the caches (driver, files); the second is the baseline.
  seconds "$mode" 1 > /dev/null
  base=$(seconds "$mode" 1)
  all=$(seconds "$mode" "$tokens")
  awk -v m="$mode" -v n="$tokens" -v all="$all" -v base="$base" \
    'BEGIN { net = all - base; printf "| %s | %d | %.3f | %.0f |\n", m, n, net, (n - 1) / net }'
done
if cmp -s "$out/generate_eager_$tokens.txt" "$out/generate_static_$tokens.txt"; then
  echo "the two modes wrote the same text"
else
  echo "the two modes wrote different text"
fi
