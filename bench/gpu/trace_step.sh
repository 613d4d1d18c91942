#!/usr/bin/env bash
# On a machine with 2 GPUs: GPU timelines of GPT 1.3B steps (bench/gpu/cupti_trace.cpp, LD_PRELOADed),
# for finding what a tensor-parallel step waits on. Each run's CSVs land in $out/trace/<label>/,
# gzipped; bench/gpu/timeline.py reads them. RUNS picks among:
#   tp2sp     tp=2 with sequence parallelism (launcher, both ranks traced)
#   alone     rank 0's shard with its collectives skipped (--tp-alone 2 --sp 1): the floor
#   tp1       one GPU
#   step      one GPU, bench/gpt_train_step with STEP_ARGS (default: GPT 6.7B, amp-bf16, full recomputation)
#   train     one GPU, `trireme train` on the default corpus with TRAIN_ARGS (default: GPT-2 124M, batch 16
#             in 16 micro-batches, bf16 autocast; checkpoints and evaluation off)
#   peer      one GPU, the PyTorch peer (bench/peer/torch_gpt_bench.py) with PEER_ARGS (default: GPT-2
#             124M, B 16, torch.compile), to set its kernels beside trireme's (timeline.py, step first)
# FLAGS are added to every gpt_parallel_step; ENVS (assignments) to every run.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu_env.sh
start=$(date +%s)
targets=(trireme_cli)
for run in ${RUNS:-tp2sp alone}; do
  case $run in
    tp2sp | alone | tp1) targets+=(gpt_parallel_step) ;;
    step) targets+=(gpt_train_step) ;;
  esac
done
build_bench trace_build.log "${targets[@]}"
cupti_lib=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda/extras -name 'libcupti.so*' 2>/dev/null | head -1)")
g++ -shared -fPIC -O2 -std=c++17 bench/gpu/cupti_trace.cpp -I/usr/local/cuda/include -I/usr/local/cuda/extras/CUPTI/include \
  -L"$cupti_lib" -lcupti -Wl,-rpath,"$cupti_lib" -o build-gpu/libcupti_trace.so || { echo "cupti_trace FAILED"; exit 1; }
echo "build: $(($(date +%s) - start)) s (cupti in $cupti_lib)"
bench=build-gpu/bench/gpt_parallel_step
big=(--model gpt-1.3b --batch 8 --device cuda --dtype bf16 --warmup 3 --iters 4 ${FLAGS:-})
trace() {  # label, command...
  local label=$1
  shift
  local dir="$out/trace/$label"
  mkdir -p "$dir"
  timeout 120 env ${ENVS:-} TRIREME_CUPTI_DIR="$dir" LD_PRELOAD="$PWD/build-gpu/libcupti_trace.so" "$@" > "$dir/run.log" 2>&1
  echo "$label: rc=$? $(grep -oE '"step_ms": [0-9.]+' "$dir/run.log" | tail -1) $(ls "$dir" | wc -l) files"
  find "$dir" -name 'trace_*.csv' -size -200c -delete
  gzip -f "$dir"/trace_*.csv
}
for run in ${RUNS:-tp2sp alone}; do
  case $run in
    tp2sp) trace tp2sp build-gpu/trireme launch --nproc-per-node 2 -- $bench "${big[@]}" --tp 2 --sp 1 ;;
    alone) trace alone $bench "${big[@]}" --tp-alone 2 --sp 1 ;;
    tp1) trace tp1 $bench "${big[@]}" ;;
    step) read -r -a step_args <<< "${STEP_ARGS:---model gpt-6.7b --batch 8 --device cuda --dtype amp-bf16 --recompute full --warmup 2 --iters 4}"
          trace step build-gpu/bench/gpt_train_step "${step_args[@]}" ;;
    train) build-gpu/trireme prepare --out "$out/trace_data" > "$out/trace_prepare.log" 2>&1 || { tail -5 "$out/trace_prepare.log"; exit 1; }
           read -r -a train_args <<< "${TRAIN_ARGS:---set model.d_model=768 --set model.n_layer=12 --set model.n_head=12 --set model.block_size=1024 --set train.batch_size=16 --set parallel.micro_batches=16 --set train.precision=bf16}"
           trace train build-gpu/trireme train --overwrite --set train.device=cuda --set data.dir="$out/trace_data" \
             --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.steps=8 --set schedule.warmup_steps=0 \
             --set train.out_dir="$out/trace_train_run" "${train_args[@]}" ;;
    peer) read -r -a peer_args <<< "${PEER_ARGS:---model gpt2-124m --batch 16 --mode compile --warmup 3 --iters 5}"
          trace peer python3 bench/peer/torch_gpt_bench.py "${peer_args[@]}" ;;
  esac
done
echo "total: $(($(date +%s) - start)) s"
