#!/usr/bin/env bash
# The planner against published layouts: the GPT runs of Narayanan et al., "Efficient
# Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (SC 2021), Table 1 — 1.7B
# to 1T parameters on 32 to 3,072 A100-80GB (Selene: nodes of 8, 8 x 200 Gb/s InfiniBand each).
# For each row: trireme's predicted throughput of the published layout (as trireme would run it:
# micro-batches of 1 sequence, 1F1B, full recomputation, bf16), the published figure, and the
# layout trireme would choose instead with its predicted gain. Throughput is the paper's own
# FLOP count (its equation 3, recomputation included) over the predicted step time.
#
#   bench/plan_megatron.sh [build/trireme]      # prints a Markdown table (docs/PLANNER.md)
set -euo pipefail
TRIREME=${1:-build/trireme}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

echo "| parameters | GPUs | published layout | published TFLOP/s per GPU | predicted | error | trireme's choice | predicted | gain |"
echo "|---|---|---|---|---|---|---|---|---|"
# params heads hidden layers tp pp gpus batch published_tflops
while read -r params heads hidden layers tp pp gpus batch published; do
  dp=$((gpus / tp / pp))
  cat > "$dir/c.toml" <<TOML
[model]
d_model = $hidden
n_layer = $layers
n_head = $heads
block_size = 2048
[data]
tokenizer = "bpe"
bpe_vocab_size = 51200
[train]
batch_size = $batch
precision = "bf16"
device = "cuda"
[parallel]
dp = $dp
tp = $tp
pp = $pp
micro_batches = $((batch / dp))
[memory]
recompute = "full"
TOML
  if ! json=$("$TRIREME" plan --config "$dir/c.toml" --preset a100-80gb-nvlink --nodes $((gpus / 8)) --top 1 --json \
      2> "$dir/err"); then
    # Nothing fits: the least memory any layout needs, from the refusal.
    need=$(grep -o 'needs [0-9.]* GiB per device' "$dir/err" | head -1)
    echo "| ${params}B | $gpus | tp=$tp pp=$pp dp=$dp | $published | no layout fits ($need) | — | — | — | — |"
    continue
  fi
  # The paper's FLOPs per step: 96 B s l h^2 (1 + s / 6h + V / 16 l h).
  flops=$(awk -v B="$batch" -v l="$layers" -v h="$hidden" 'BEGIN { s = 2048; V = 51200;
          printf "%.6e", 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) }')
  echo "$json" | jq -r --argjson flops "$flops" --argjson gpus "$gpus" --argjson pub "$published" \
    --arg params "$params" --arg layout "tp=$tp pp=$pp dp=$dp" '
    def tf(s): $flops / s / $gpus / 1e12;
    def r1: . * 10 | round / 10;
    .plans[0] as $best |
    (if .given.fits then (tf(.given.step_s) | r1 | tostring) else "does not fit (\(.given.peak_bytes / 1073741824 | round) GiB)" end) as $pred |
    (if .given.fits then ((tf(.given.step_s) - $pub) / $pub * 100 | round | if . == 0 then 0 else . end |
                           "\(if . > 0 then "+" else "" end)\(.)%") else "—" end) as $err |
    (if .given.fits then (((.given.step_s / $best.step_s - 1) * 100 | round | tostring) + "%") else "—" end) as $gain |
    "| \($params)B | \($gpus) | \($layout) | \($pub) | \($pred) | \($err) | \($best.layout | "tp=\(.tp)\(if .sequence_parallel then " sp" else "" end) pp=\(.pp) dp=\(.dp) mb=\(.micro_batches) \(.schedule)\(if .schedule == "interleaved" then "/v\(.virtual_stages)" else "" end) zero=\(.zero_stage) \(.recompute)") | \(tf($best.step_s) | r1) | \($gain) |"'
done <<'ROWS'
1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008 160 25600 128 8 64 3072 3072 163
ROWS
