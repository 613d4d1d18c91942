#!/usr/bin/env bash
# On a GPU machine: builds bench/collectives (dependencies: scripts/gpu_env.sh) and
# prints trireme's NCCL bus bandwidth (bf16, 2 GPUs, 4 KiB to 256 MiB) next to PyTorch's
# (torch_gpt_bench.py --collectives: $TRIREME_PEER, or .peer/). Logs go to $OUT (or out/gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
peer=${TRIREME_PEER:-../shared/peer/torch_gpt_bench.py}
[ -f "$peer" ] || peer=.peer/torch_gpt_bench.py
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
gpus=${BENCH_GPUS:-2}

t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$out/collectives_build.log" 2>&1 &&
  ninja -C build-gpu collectives >> "$out/collectives_build.log" 2>&1
if [ $? -ne 0 ]; then
  tail -40 "$out/collectives_build.log"
  echo "BENCH BUILD FAILED"
  exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"

echo "== trireme (NCCL, bf16, $gpus GPUs)"
timeout 150 build-gpu/bench/collectives --backend nccl --dtype bf16 --nproc "$gpus" 2>&1 | tee "$out/collectives_trireme.log"
echo "== PyTorch ($peer --collectives --gpus $gpus)"
if [ -f "$peer" ]; then
  timeout 150 "$python" "$peer" --collectives --gpus "$gpus" 2>&1 | tee "$out/collectives_torch.log"
else
  echo "no peer script at ../shared/peer or .peer: PyTorch not run"
fi
