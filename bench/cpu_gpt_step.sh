#!/usr/bin/env bash
# Side by side on this CPU: trireme's GPT training step vs PyTorch's (bench/peer/torch_gpt_bench.py, or $TORCH_PEER), for the
# `tiny` shape (d=256, 4 layers, 4 heads, T=128, B=8, vocab 6144) at 1 and 2 threads, in f32 and
# with bf16 autocast (amp-bf16; PyTorch's CPU autocast) on both sides (DTYPES="f32 amp-bf16").
# Both sides get the same OMP/OpenBLAS thread settings; peak memory is each process's max RSS.
# Each side runs as a user would run it: trireme picks the OpenBLAS core for this CPU and the
# passive OpenMP wait policy itself (docs/CPU.md); PyTorch gets OpenBLAS's own core choice.
#   bench/cpu_gpt_step.sh            # prints a table, logs JSON to out/bench/
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --peer
peer=${TORCH_PEER:-bench/peer/torch_gpt_bench.py}
mkdir -p out/bench
log=out/bench/cpu_gpt_step.jsonl
: > "$log"
rss() { /usr/bin/time -f '%M' -o out/bench/rss.txt "$@" >> "$log"; echo $(( $(cat out/bench/rss.txt) / 1024 )); }
own_core=$(env -u OPENBLAS_CORETYPE TRIREME_CPU_SETUP='core=;detected=;wait=' build/trireme env --json |
           sed -n 's/.*"openblas_core": "\([A-Za-z0-9]*\).*/\1/p')
echo "OpenBLAS core: trireme $(build/trireme env --json | sed -n 's/.*"openblas_core": "\(.*\)",*$/\1/p'); PyTorch (libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)) ${OPENBLAS_CORETYPE:-$own_core}"
printf '%-9s %-8s %-9s %12s %12s %8s %14s %14s\n' dtype threads impl step_ms tokens/s ratio peak_rss_MiB peak_tensor_MiB
for dtype in ${DTYPES:-f32 amp-bf16}; do
for n in 1 2; do
  export OMP_NUM_THREADS=$n OPENBLAS_NUM_THREADS=$n
  t_rss=$(rss build/bench/gpt_train_step --model tiny --batch 8 --threads "$n" --iters "${ITERS:-10}" --dtype "$dtype")
  t_line=$(tail -1 "$log")
  peer_amp=()
  [ "$dtype" = amp-bf16 ] && peer_amp=(--cpu-amp)
  p_rss=$(rss /usr/bin/python3 "$peer" --device cpu --model tiny --batch 8 --mode eager --threads "$n" \
          --iters "${ITERS:-10}" "${peer_amp[@]}")
  p_line=$(tail -1 "$log")
  t_ms=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['step_ms'])" "$t_line")
  t_mem=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['peak_tensor_MiB'])" "$t_line")
  p_ms=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['step_ms'])" "$p_line")
  ratio=$(python3 -c "print(f'{$p_ms/$t_ms:.2f}')")
  printf '%-9s %-8s %-9s %12s %12s %8s %14s %14s\n' "$dtype" "$n" trireme "$t_ms" "$(python3 -c "print(round(1024/$t_ms*1000))")" "$ratio" "$t_rss" "$t_mem"
  printf '%-9s %-8s %-9s %12s %12s %8s %14s %14s\n' "$dtype" "$n" pytorch "$p_ms" "$(python3 -c "print(round(1024/$p_ms*1000))")" 1.00 "$p_rss" -
done
done
echo "(ratio = PyTorch step time / trireme step time; > 1 means trireme is faster. Full JSON: $log)"
