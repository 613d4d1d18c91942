#!/usr/bin/env bash
# The README's main job: install, build, train a character-level GPT on the Tang and Song poems
# (configs/tang_poems.toml), then write a poem from a prompt. Extra args go to `trireme train`
# (e.g. --set train.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/trireme train --config configs/tang_poems.toml "$@"
echo
echo "--- a poem (trireme generate --checkpoint out/tang --prompt 春眠 -n 120 -t 0.8 -k 20):"
build/trireme generate --checkpoint out/tang --prompt "春眠" --max-new-tokens 120 --temperature 0.8 --top-k 20 --seed 7
