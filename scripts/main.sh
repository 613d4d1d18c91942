#!/usr/bin/env bash
# The README's main job: install, build the trireme command (only it: scripts/test.sh builds
# the tests, benchmarks and examples), train a character-level GPT on the Tang and Song poems
# (configs/tang_poems.toml) split over two processes, then write a poem from a prompt.
# Extra args go to `trireme train` (e.g. --set train.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh trireme_cli
trireme=${TRIREME_BUILD_DIR:-build}/trireme

# GPUs this build can use: `trireme env` lists them only when it was built with CUDA and the
# driver answers (one JSON line per GPU: "0: NVIDIA H200, ...").
gpus=$("$trireme" env --json | grep -cE '^ +"[0-9]+: ' || true)
cores=$(nproc)
if ((gpus >= 2)); then
  # Tensor parallel over NCCL: each GPU holds half of every layer and the two all-reduce
  # activations over NVLink/PCIe.
  layout=(--nproc 2 --set parallel.tp=2 --set train.device=cuda)
  why="$gpus GPUs: tensor parallel (tp=2) over NCCL, half of every layer on each GPU"
elif ((gpus == 1)); then
  layout=(--set train.device=cuda)
  why="1 GPU: the whole model on it"
elif ((cores >= 2)); then
  # Measured on 2 cores beside other work (README): tp=2 ran the step fastest, ahead of pp=2
  # (a stage idles while the pipeline fills and drains, and micro-batches shrink the GEMMs),
  # dp=2 and one process with 2 threads (whose threads meet at a barrier in every kernel).
  layout=(--nproc 2 --set parallel.tp=2)
  why="no GPU, $cores CPU cores: tensor parallel (tp=2) over Gloo, half of every layer in each process, $((cores / 2)) thread(s) each (on 2 cores measured faster than pp=2, dp=2 or one 2-thread process)"
else
  layout=()
  why="no GPU, 1 CPU core: one process"
fi
echo "main: layout ${layout[*]:-(one process)}: $why"
"$trireme" train --config configs/tang_poems.toml "${layout[@]}" "$@"
echo
echo "--- a poem (trireme generate --checkpoint out/tang --prompt 春眠 -n 120 -t 0.8 -k 20):"
"$trireme" generate --checkpoint out/tang --prompt "春眠" --max-new-tokens 120 --temperature 0.8 --top-k 20 --seed 7
