// The reduction step of the peer all-reduce (dist/peer_all_reduce.h): several same-sized
// buffers of one GPU summed element by element, in the order given, into one of them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "trireme/core/dtype.h"

namespace trireme::cuda_kernels {

inline constexpr int kMaxPeerSumInputs = 8;

// Floating-point dtypes only (f64, f32, bf16, f16): integer averages round as NCCL's do, which
// this path does not reproduce.
bool peer_sum_supports(DType dtype);

// out[i] = (inputs[0][i] + inputs[1][i] + ... ) in that order, accumulated in f32 for the 16-bit
// types and rounded once, divided by n_inputs when average. Every rank of a group calls it with
// its inputs in rank order, so every rank computes the same bits. out may be one of the inputs.
// With a bias (bias_period elements, repeated along out: a row-parallel layer's bias over its
// rows) it is then added as a separate add would: out[i] = round(round(sum) + bias[i % period]).
// With a residual (numel elements: a residual stream's rows) it is added after that, as a
// separate add again: out[i] = round(previous + residual[i]).
// max_blocks > 0 caps the grid: a sum that runs beside a GEMM then takes fewer of its SMs, and
// takes longer (each thread strides over more elements; the result is the same).
void peer_sum(void* out, const void* const* inputs, int n_inputs, int64_t numel, DType dtype, bool average,
              cudaStream_t stream, const void* bias = nullptr, int64_t bias_period = 0,
              const void* residual = nullptr, int max_blocks = 0);

}  // namespace trireme::cuda_kernels
