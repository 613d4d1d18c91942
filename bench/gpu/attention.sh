#!/usr/bin/env bash
# On a GPU machine: builds bench/attention_step and times fused causal attention forward and
# forward + backward (B=16, H=12, T=1024, hd=64 by default; BENCH_DTYPES to change the dtypes),
# trireme as built (cuDNN's kernels where the build has cuDNN) and with its own kernels
# (TRIREME_CUDNN_ATTENTION=0), beside PyTorch's F.scaled_dot_product_attention (flash backend,
# memory-efficient for f32; and cuDNN's) in the same run. Logs to $OUT (or out/gpu); a table is
# printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
dtypes=${BENCH_DTYPES:-bf16 f16}
shape=(--batch "${BENCH_B:-16}" --heads "${BENCH_H:-12}" --seq "${BENCH_T:-1024}" --hd "${BENCH_HD:-64}")

cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$out/attn_build.log" 2>&1 &&
  ninja -C build-gpu attention_step >> "$out/attn_build.log" 2>&1 || { tail -30 "$out/attn_build.log"; echo "BUILD FAILED"; exit 1; }

: > "$out/attention.jsonl"
for dt in $dtypes; do
  for causal in 1 0; do
    # trireme twice: as built (cuDNN for 16 bits where the build has it), then its own kernels.
    timeout 120 build-gpu/bench/attention_step "${shape[@]}" --dtype "$dt" --causal $causal 2>&1 | tee -a "$out/attention.log" |
      grep '^{' | sed 's/"impl": "trireme"/"impl": "trireme (as built)"/' >> "$out/attention.jsonl"
    TRIREME_CUDNN_ATTENTION=0 timeout 120 build-gpu/bench/attention_step "${shape[@]}" --dtype "$dt" --causal $causal 2>&1 |
      tee -a "$out/attention.log" | grep '^{' | sed 's/"impl": "trireme"/"impl": "trireme (own kernels)"/' >> "$out/attention.jsonl"
    timeout 120 "$python" bench/gpu/torch_attention.py "${shape[@]}" --dtype "$dt" --causal $causal 2>&1 | tee -a "$out/attention.log" | grep '^{' >> "$out/attention.jsonl"
  done
done
echo
echo "| impl | dtype | causal | fwd ms | fwd+bwd ms | fwd TFLOP/s |"
echo "|---|---|---|---|---|---|"
"$python" - "$out/attention.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"| {r['impl']} | {r['dtype']} | {r['causal']} | {r['fwd_ms']} | {r['fwd_bwd_ms']} | {r['fwd_tflops']} |")
PY
