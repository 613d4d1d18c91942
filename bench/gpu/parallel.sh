#!/usr/bin/env bash
# On a GPU machine with 2 GPUs: builds the trireme CLI and bench/gpt_parallel_step (with
# dependencies: scripts/gpu_env.sh), then, side by side with PyTorch's peer
# (torch_gpt_bench.py: $TRIREME_PEER, or .peer/), times in pure bf16:
#   GPT-2 124M  (B=16 per GPU)   dp=1 on 1 GPU, dp=2 on 2 GPUs;   peer: DDP on 2 GPUs
#   GPT 1.3B    (B=8)            tp=1 on 1 GPU, tp=2 on 2 GPUs;   peer: DTensor tp on 2 GPUs
# and prints a table: scaling efficiency = tokens/s(2 GPUs) / (2 x tokens/s(1 GPU)).
# RUNS picks some of: dp1 dp2 tp1 tp2 torch_ddp torch_tp (default all), tp2_alone (not by
# default: rank 0's shard of tp=2 in one process, collectives skipped: tp's compute without its
# communication, so tp2 - tp2_alone is what the communication costs), and dp1_static dp2_static
# tp1_static tp2_static (not by default: the same steps in static mode, --mode static, with their
# own scaling row: RUNS="dp1 dp2 tp1 tp2 dp1_static dp2_static tp1_static tp2_static"); PHASES=N adds N steps
# timed phase by phase (fwd_ms, bwd_ms, opt_ms; host_ms: the host's time to queue a step) and N
# with the GPU held back while the host queues each phase (queue_fwd_ms, queue_bwd_ms,
# queue_opt_ms: launch cost alone; gate_timeouts > 0: a phase made the host wait for the GPU).
# ITERS / WARMUP (10 / 3), ITERS_BIG (for 1.3B; default ITERS) and DEADLINE_S (400: the whole
# script, build included) bound the time. Full logs in $OUT (or out/gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
peer=${TRIREME_PEER:-../shared/peer/torch_gpt_bench.py}
[ -f "$peer" ] || peer=.peer/torch_gpt_bench.py
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
iters=${ITERS:-10}
warmup=${WARMUP:-3}
iters_big=${ITERS_BIG:-$iters}
phases=${PHASES:-0}  # extra steps timed phase by phase (forward, backward, optimizer)
runs=${RUNS:-dp1 dp2 tp1 tp2 torch_ddp torch_tp}
nvidia-smi -L > "$out/env.txt" 2>&1

t0=$(date +%s)
start=$t0
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON -DTRIREME_BUILD_TESTS=OFF > "$out/par_build.log" 2>&1 &&
  ninja -C build-gpu trireme_cli gpt_parallel_step >> "$out/par_build.log" 2>&1
if [ $? -ne 0 ]; then
  grep -E "error" "$out/par_build.log" | head -30
  tail -30 "$out/par_build.log"
  echo "BUILD FAILED"
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"

bench=build-gpu/bench/gpt_parallel_step
launch="build-gpu/trireme launch --nproc-per-node 2 --"
deadline=$((start + ${DEADLINE_S:-400}))  # whole script, build included; runs past it are cut
run() {  # name, seconds, command...: the JSON line into $out/par_<name>.json, the log beside it
  local name=$1 limit=$2
  shift 2
  case " $runs " in *" $name "*) ;; *) return ;; esac
  local t=$(date +%s)
  local left=$((deadline - t))
  if [ $left -lt 20 ]; then
    echo "$name: skipped, $left s left before the deadline"
    return
  fi
  [ $limit -le $left ] || limit=$left
  timeout "$limit" "$@" > "$out/par_$name.log" 2>&1
  local rc=$?
  grep -oE '\{"(impl|peer)".*\}' "$out/par_$name.log" | tail -1 > "$out/par_$name.json"
  echo "$name: rc=$rc, $(($(date +%s) - t)) s: $(cat "$out/par_$name.json")"
  [ $rc -eq 0 ] || grep -iE "error|fail|what\(\)" "$out/par_$name.log" | head -8
}
common=(--device cuda --dtype bf16 --warmup "$warmup" --phases "$phases")
run dp1 60 $bench --model gpt2-124m --batch 16 "${common[@]}" --iters "$iters"
run dp2 75 $launch $bench --model gpt2-124m --dp 2 --batch 16 "${common[@]}" --iters "$iters"
run tp1 110 $bench --model gpt-1.3b --batch 8 "${common[@]}" --iters "$iters_big"
# TP_FLAGS: extra flags for the tensor-parallel runs, e.g. "--sp 1" (sequence parallelism).
read -r -a tp_flags <<< "${TP_FLAGS:-}"
run tp2 110 $launch $bench --model gpt-1.3b --tp 2 --batch 8 "${common[@]}" --iters "$iters_big" "${tp_flags[@]}"
run tp2_alone 90 $bench --model gpt-1.3b --tp-alone 2 --batch 8 "${common[@]}" --iters "$iters_big" "${tp_flags[@]}"
static=(--device cuda --dtype bf16 --warmup "$warmup" --mode static)
run dp1_static 60 $bench --model gpt2-124m --batch 16 "${static[@]}" --iters "$iters"
run dp2_static 75 $launch $bench --model gpt2-124m --dp 2 --batch 16 "${static[@]}" --iters "$iters"
run tp1_static 110 $bench --model gpt-1.3b --batch 8 "${static[@]}" --iters "$iters_big"
run tp2_static 110 $launch $bench --model gpt-1.3b --tp 2 --batch 8 "${static[@]}" --iters "$iters_big" "${tp_flags[@]}"
if [ -f "$peer" ]; then
  run torch_ddp 75 "$python" "$peer" --model gpt2-124m --batch 16 --mode ddp --gpus 2
  run torch_tp 100 "$python" "$peer" --model gpt-1.3b --batch 8 --mode tp --gpus 2
else
  echo "no peer script at ../shared/peer or .peer: PyTorch not run"
fi

echo
"$python" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def get(name):
    try:
        return json.load(open(os.path.join(out, f"par_{name}.json")))
    except Exception:
        return None
def tps(r): return r["tokens_per_s"] if r else None
def fmt(x): return f"{x:,.0f}" if x else "-"
print("| model | layout | trireme 1 GPU tok/s | trireme 2 GPU tok/s | step ms (2 GPU) | peak GiB (2 GPU) | efficiency | target | PyTorch 2 GPU tok/s |")
print("|---|---|---|---|---|---|---|---|---|")
for model, one, two, peer, target in (("GPT-2 124M, B=16/GPU", "dp1", "dp2", "torch_ddp", 0.95),
                                      ("GPT 1.3B, B=8", "tp1", "tp2", "torch_tp", 0.90),
                                      ("GPT-2 124M, B=16/GPU, static", "dp1_static", "dp2_static", "torch_ddp", 0.95),
                                      ("GPT 1.3B, B=8, static", "tp1_static", "tp2_static", "torch_tp", 0.90)):
    a, b, p = get(one), get(two), get(peer)
    if not a and not b:
        continue
    eff = tps(b) / (2 * tps(a)) if a and b else None
    layout = "dp=2" if one.startswith("dp") else "tp=2"
    print(f"| {model} | {layout} | {fmt(tps(a))} | {fmt(tps(b))} | {b['step_ms'] if b else '-'} | "
          f"{b['peak_mem_GiB'] if b else '-'} | {f'{eff:.3f}' if eff else '-'} | {target} | {fmt(tps(p))} |")
PY
