#!/usr/bin/env bash
# On a GPU machine: does a change keep the speed? Builds the benchmarks from two source trees,
# the current one and BEFORE_SRC (a tree, or a .tar.gz of one, e.g. made with
# `git archive <commit> | gzip > before.tar.gz`), then runs each row ROUNDS times, alternating
# before / after so that both see the same machine state, and prints every run's tokens/s and
# the after/before ratio of the medians. Rows (ROWS, default: the one-GPU ones):
#   gpt2-bf16, gpt2-amp   GPT-2 124M on one GPU, B=16, T=1024, bf16 / amp-bf16 (gpt_train_step)
#   gpt2-bf16-static, gpt2-amp-static   the same in static-graph mode
#   gpt2-amp-static-clip  static amp-bf16, clipping the gradients' global norm at 1.0 (as `train` does)
#   gpt2-amp-b1           the same with B=1, eager: a step whose pace the host's launches set
#   gpt2-amp-b1-clip      the same, clipping the gradients' global norm at 1.0 on the device
#   train-amp-mb16        `trireme train` on one GPU, GPT-2 124M, B=16 in 16 micro-batches,
#                         bf16 autocast (bench/gpu/train_tokens.sh)
#   train-amp-b1          `trireme train` on one GPU, GPT-2 124M, B=1, bf16 autocast: the trainer's
#                         eager step (clipping included) where the host's launches set the pace
#   dp2                   GPT-2 124M, dp=2, B=16 per GPU, bf16 (gpt_parallel_step, 2 GPUs)
#   tp2-sp                GPT 1.3B, tp=2 with sequence parallelism, B=8, bf16 (2 GPUs)
#   BEFORE_SRC=before.tar.gz bash bench/gpu/before_after.sh
#   BEFORE_SRC=before.tar.gz ROWS="dp2 tp2-sp" bash bench/gpu/before_after.sh   # on 2 GPUs
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
src=${BEFORE_SRC:?set BEFORE_SRC to the source tree or .tar.gz to compare against}
rounds=${ROUNDS:-3}
rows=${ROWS:-gpt2-bf16 gpt2-amp}
before=$PWD/build-before-src
if [ -f "$src" ]; then
  [ -d "$before" ] || { mkdir -p "$before" && tar -xzf "$src" -C "$before"; }
else
  before=$(cd "$src" && pwd)
fi
t0=$(date +%s)
targets=(gpt_train_step)  # the two-GPU rows also need the launcher and gpt_parallel_step
case " $rows " in *" dp2 "* | *" tp2-sp "*) targets+=(gpt_parallel_step trireme_cli) ;; esac
case " $rows " in *" train-"*) targets+=(trireme_cli) ;; esac
BENCH_SRC=$before BENCH_BUILD=$PWD/build-gpu-before build_bench build_before.log "${targets[@]}"
build_bench build_after.log "${targets[@]}"
echo "builds: $(($(date +%s) - t0)) s"
case " $rows " in
  *" train-"*) build-gpu/trireme prepare --out "$out/before_after_data" > "$out/before_after_prepare.log" 2>&1 ||
                 { tail -5 "$out/before_after_prepare.log"; exit 1; } ;;
esac

row_command() {  # row, build dir: the command line of one run
  local b=$2
  case $1 in
    gpt2-bf16) echo "$b/bench/gpt_train_step --model gpt2-124m --batch 16 --device cuda --dtype bf16" ;;
    gpt2-amp) echo "$b/bench/gpt_train_step --model gpt2-124m --batch 16 --device cuda --dtype amp-bf16" ;;
    gpt2-amp-b1) echo "$b/bench/gpt_train_step --model gpt2-124m --batch 1 --device cuda --dtype amp-bf16 --iters 40" ;;
    gpt2-amp-b1-clip) echo "$(row_command gpt2-amp-b1 "$b") --clip 1.0" ;;
    gpt2-bf16-static) echo "$(row_command gpt2-bf16 "$b") --mode static" ;;
    gpt2-amp-static) echo "$(row_command gpt2-amp "$b") --mode static" ;;
    gpt2-amp-static-clip) echo "$(row_command gpt2-amp-static "$b") --clip 1.0" ;;
    dp2) echo "$b/trireme launch --nproc-per-node 2 -- $b/bench/gpt_parallel_step --model gpt2-124m --dp 2 --batch 16 --device cuda --dtype bf16" ;;
    tp2-sp) echo "$b/trireme launch --nproc-per-node 2 -- $b/bench/gpt_parallel_step --model gpt-1.3b --tp 2 --sp 1 --batch 8 --device cuda --dtype bf16" ;;
    train-amp-mb16) echo "bash bench/gpu/train_tokens.sh $b $out/before_after_data --set train.precision=bf16 --set parallel.micro_batches=16" ;;
    train-amp-b1) echo "env BATCH=1 STEPS=40 bash bench/gpu/train_tokens.sh $b $out/before_after_data --set train.precision=bf16" ;;
    *) echo "unknown row '$1' (gpt2-bf16, gpt2-amp, gpt2-amp-b1, gpt2-amp-b1-clip, gpt2-bf16-static, gpt2-amp-static, gpt2-amp-static-clip, dp2, tp2-sp, train-amp-mb16, train-amp-b1)" >&2; return 1 ;;
  esac
}
for row in $rows; do
  declare -a tps_before=() tps_after=()
  for r in $(seq "$rounds"); do
    for side in before after; do
      dir=build-gpu; [ $side = before ] && dir=build-gpu-before
      cmd=$(row_command "$row" "$dir") || exit 2
      log="$out/before_after_${row}_${side}_$r.log"
      # Each side loads its own libtrireme.so: the prebuilt bundle's build puts build-gpu first
      # on LD_LIBRARY_PATH, which outranks a binary's RUNPATH.
      LD_LIBRARY_PATH="$PWD/$dir:$LD_LIBRARY_PATH" timeout 300 $cmd > "$log" 2>&1
      tps=$(grep -oE '\{"(impl|peer)".*\}' "$log" | tail -1 |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])' 2>/dev/null)
      echo "$row $side round $r: ${tps:-FAILED} tokens/s"
      if [ $side = before ]; then tps_before+=("${tps:-0}"); else tps_after+=("${tps:-0}"); fi
    done
  done
  python3 - "$row" "${tps_before[@]}" -- "${tps_after[@]}" <<'PY'
import statistics, sys
row, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
before, after = [float(x) for x in rest[:cut]], [float(x) for x in rest[cut + 1:]]
b, a = statistics.median(before), statistics.median(after)
print(f"{row}: before {b:,.0f} tok/s, after {a:,.0f} tok/s, after/before {a / b:.3f}" if b and a else f"{row}: no result")
PY
done
