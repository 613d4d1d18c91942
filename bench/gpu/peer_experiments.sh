#!/usr/bin/env bash
# On a machine with 2 GPUs: the copy-engine all-reduce (Note [peer all-reduce]) checked and measured
# in one bounded call: the NCCL tests (its bit-equality with NCCL, and the timeout / dead-peer /
# unwinding scenarios now running through it), then GPT steps with it on and off
# (--peer-allreduce off) beside the one-GPU baselines:
#   GPT-2 124M dp=1, dp=2; GPT 1.3B tp=1, tp=2.
#   GPT 1.3B --tp-alone 2 (rank 0's shard with its collectives skipped: the compute floor);
#   sequence parallelism (--sp 1) and its floor.
# DEADLINE_S (default 540) bounds the whole, build included; ROWS (an
# extended regex) keeps only the rows whose label matches; TEST_FILTER picks the tests;
# EXTRA_FLAGS go to every gpt_parallel_step (e.g. "--phases 3": forward/backward/optimizer ms).
# SMI=1 samples each GPU's SM clock and power every 100 ms during each row (nvidia-smi) and
# adds their medians over the samples under load (over 250 W) to the row: whether a slower
# kernel beside the copy engines is a lower clock (the power cap) or contention.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
start=$(date +%s)
deadline=$((start + ${DEADLINE_S:-540}))
build_bench peer_build.log trireme_cli gpt_parallel_step test_cuda nccl_worker
echo "build: $(($(date +%s) - start)) s"

timeout ${NCCL_TEST_TIMEOUT:-150} build-gpu/tests/test_cuda --gtest_filter="${TEST_FILTER:-Nccl*}" > "$out/peer_nccl_test.log" 2>&1
echo "nccl tests: rc=$? $(grep -E '^\[  PASSED  \]' "$out/peer_nccl_test.log" | tr -d '[]') $(grep -cE '^\[  FAILED  \] [A-Z]' "$out/peer_nccl_test.log") failed ($(($(date +%s) - start)) s)"
grep -E "^\[ +(OK|FAILED) +\]|equal to NCCL|differ|check failed|error after|watchdog error|wait\(timeout\) error" "$out/peer_nccl_test.log" | head -40

bench=build-gpu/bench/gpt_parallel_step
launch=(build-gpu/trireme launch --nproc-per-node 2 --)
gpt2=(--model gpt2-124m --batch 16 --device cuda --dtype bf16 --warmup 3 --iters 10 ${EXTRA_FLAGS:-})
big=(--model gpt-1.3b --batch 8 --device cuda --dtype bf16 --warmup 3 --iters 5 ${EXTRA_FLAGS:-})
row() {  # label, --, command...
  local label=$1
  shift 2
  if [ -n "${ROWS:-}" ] && ! grep -qE "$ROWS" <<< "$label"; then return; fi
  local left=$((deadline - $(date +%s)))
  if [ $left -lt 30 ]; then
    echo "| $label | skipped: $left s left |"
    return
  fi
  local log="$out/peer_row_$(echo "$label" | tr -c 'A-Za-z0-9' _).log"
  local smi_pid=""
  if [ "${SMI:-0}" = 1 ]; then
    nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$log.smi" 2>/dev/null &
    smi_pid=$!
  fi
  timeout $((left < 90 ? left : 90)) "$@" > "$log" 2>&1
  local clocks=""
  if [ -n "$smi_pid" ]; then
    kill $smi_pid 2>/dev/null
    wait $smi_pid 2>/dev/null
    clocks=$(python3 -c '
import sys, statistics as st
rows = [l.split(",") for l in open(sys.argv[1]) if l.count(",") == 2]
out = []
for g in sorted({r[0].strip() for r in rows}):
    busy = [(float(r[1]), float(r[2])) for r in rows if r[0].strip() == g and float(r[2]) > 250]
    if busy: out.append("gpu%s %d MHz %d W (%d)" % (g, st.median(c for c, _ in busy), st.median(w for _, w in busy), len(busy)))
print("; ".join(out))' "$log.smi" 2>/dev/null)
  fi
  local line
  line=$(grep -oE '\{"impl".*\}' "$log" | tail -1)
  local ms tps peer
  ms=$(grep -oE '"step_ms": [0-9.]+' <<< "$line" | grep -oE '[0-9.]+$')
  tps=$(grep -oE '"tokens_per_s": [0-9.]+' <<< "$line" | grep -oE '[0-9.]+$')
  peer=$(grep -oE '"peer_all_reduce": [a-z]+' <<< "$line" | grep -oE '[a-z]+$')
  local phases=""
  for k in step_ms_unsynced fwd_ms bwd_ms opt_ms queue_fwd_ms queue_bwd_ms host_ms; do
    phases+="$(grep -oE "\"$k\": [0-9.]+" <<< "$line" | grep -oE '[0-9.]+$') "
  done
  echo "| $label | ${ms:-failed: $(tail -c 300 "$log" | tr '\n' ' ')} | ${tps:-} | ${peer:-} | $phases| $clocks"
}

echo "| run | step ms | tokens/s | peer all-reduce | unsynced fwd bwd opt queue_fwd queue_bwd host (ms) |"
echo "|---|---|---|---|---|"
row "1.3B tp=1" -- $bench "${big[@]}"
row "1.3B tp=2 alone (rank 0's shard, no collectives)" -- $bench "${big[@]}" --tp-alone 2
row "1.3B tp=2, NCCL" -- "${launch[@]}" $bench "${big[@]}" --tp 2 --peer-allreduce off
row "1.3B tp=2, peer" -- "${launch[@]}" $bench "${big[@]}" --tp 2
row "1.3B tp=2, sequence parallel, peer reduce-scatter/all-gather" -- "${launch[@]}" $bench "${big[@]}" --tp 2 --sp 1
row "1.3B tp=2, sequence parallel, peer, gradient sums in the backward" -- "${launch[@]}" $bench "${big[@]}" --tp 2 --sp 1 --defer-sums 0
row "1.3B tp=2 alone, sequence parallel" -- $bench "${big[@]}" --tp-alone 2 --sp 1
row "124M dp=1" -- $bench "${gpt2[@]}"
row "124M dp=2, NCCL" -- "${launch[@]}" $bench "${gpt2[@]}" --dp 2 --peer-allreduce off
row "124M dp=2, peer" -- "${launch[@]}" $bench "${gpt2[@]}" --dp 2
echo "total: $(($(date +%s) - start)) s"
