#!/usr/bin/env bash
# On a GPU machine: where does a GPT-2 124M training step spend its GPU time? Builds
# bench/gpt_train_step and runs a few steps under Nsight Systems (nsys) when it is installed,
# printing the kernels by total time; without nsys it prints the plain step timing.
#   PROFILE_DTYPE=bf16 bash bench/gpu/profile.sh
# PROFILE_TP=N profiles GPT 1.3B (B=8) in bench/gpt_parallel_step instead: N=1 the one-GPU step,
# N>1 rank 0's shard of tp=N in one process with its collectives skipped (--tp-alone N), so the
# two kernel tables show which kernels do not shrink with tensor parallelism.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
dtype=${PROFILE_DTYPE:-bf16}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIREME_DEPS_PREFIX="$deps/usr" \
  -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DTRIREME_BUILD_BENCH=ON > "$out/profile_build.log" 2>&1 &&
  ninja -C build-gpu gpt_train_step gpt_parallel_step >> "$out/profile_build.log" 2>&1 ||
  { tail -30 "$out/profile_build.log"; exit 1; }
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
bench=(build-gpu/bench/gpt_train_step --model gpt2-124m --batch 16 --device cuda --dtype "$dtype" --warmup 2 --iters 3)
tp=${PROFILE_TP:-0}
if [ "$tp" -ge 1 ]; then
  bench=(build-gpu/bench/gpt_parallel_step --model gpt-1.3b --batch 8 --device cuda --dtype bf16 --warmup 2 --iters 3)
  [ "$tp" -gt 1 ] && bench+=(--tp-alone "$tp")
fi
# PROFILE_ARGS replaces gpt_train_step's arguments, e.g. "--model gpt-6.7b --batch 8 --device cuda
# --dtype amp-bf16 --recompute full --warmup 1 --iters 2".
if [ -n "${PROFILE_ARGS:-}" ]; then
  read -r -a args <<< "$PROFILE_ARGS"
  bench=(build-gpu/bench/gpt_train_step "${args[@]}")
fi
if [ -n "$nsys" ]; then
  "$nsys" profile -o "$out/step" --force-overwrite true "${bench[@]}" > "$out/profile_run.log" 2>&1
  "$nsys" stats --report cuda_gpu_kern_sum --format csv "$out/step.nsys-rep" > "$out/kernels.csv" 2>/dev/null
  python3 - "$out/kernels.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
head, rows = rows[0], rows[1:]
print(" | ".join(head[:4] + [head[-1]]))
for r in rows[:40]:
    print(" | ".join(r[:4] + [r[-1][:110]]))
PY
elif command -v ncu > /dev/null; then
  # Nsight Compute replays each kernel; one metric keeps it to one pass. One warm-up step and
  # one measured step: the sums below are per two steps (the warm-up one includes first calls).
  ncu --metrics gpu__time_duration.sum --csv --print-units base "${bench[@]}" --iters 1 \
    --warmup 1 > "$out/ncu.csv" 2> "$out/ncu.err"
  python3 - "$out/ncu.csv" <<'PY'
import csv, sys, collections
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.reader(lines))
head = rows[0]
ki, vi = head.index("Kernel Name"), head.index("Metric Value")
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[1:]:
    name = r[ki].split("(")[0][:90]
    tot[name] += float(r[vi].replace(",", "")) / 1e6
    cnt[name] += 1
allms = sum(tot.values())
print(f"total kernel time {allms:.1f} ms over {sum(cnt.values())} kernels (2 steps)")
for name, ms in tot.most_common(45):
    print(f"{ms:9.2f} ms {100*ms/allms:5.1f}% {cnt[name]:6d}  {name}")
PY
else
  echo "no profiler here"
  "${bench[@]}"
fi
