#!/usr/bin/env bash
# The pipeline bubble table: p = 2 and 4 CPU processes, m = 1..16 micro-batches, measured idle
# fraction beside (p - 1) / (m + p - 1). One thread per process (OMP_NUM_THREADS=1) so the
# processes do not share cores; on a machine with fewer cores than p the steady phase runs slower
# and the measured bubble comes out low.
#   bench/pipeline_bubble.sh [build dir] [extra flags for pipeline_bubble...]
set -euo pipefail
build=${1:-build}
shift || true
for p in 2 4; do
  for m in 1 2 4 8 16; do
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$build/trireme" launch --nproc-per-node "$p" -- \
      "$build/bench/pipeline_bubble" --micro-batches "$m" "$@" 2>&1 | grep -E "^(\[rank 0\] )?p=" | sed 's/^\[rank 0\] //'
  done
done
