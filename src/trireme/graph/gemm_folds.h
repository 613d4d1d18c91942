// Folds into GEMMs: a pass from graph to graph (graph/passes.h) that lets a matrix product do the
// GELU after it, and the product in GELU's backward do GELU's gradient, in one call each
// (kernels/linalg.h: "matmul_gelu" and "matmul_gelu_backward"; on the GPU, cuBLASLt's GELU_AUX
// and DGELU epilogues), so that the product is not written to memory only to be read back by an
// elementwise kernel. GPT's MLP has one of each per block.
#pragma once

#include "trireme/graph/graph.h"

namespace trireme::graph {

// Rewrites, where the device registers the fused kernel for the dtype,
//   - a 2-D product (no accumulation) whose output `pre`, an intermediate that it is the first to
//     touch and that nothing later writes, is read next by a gelu_tanh call into a contiguous
//     value of the same elements: the product writes GELU's output and pre, and the gelu call is
//     gone (pre stays for the backward);
//   - a 2-D product without bias whose output, an intermediate that only it and a
//     gelu_tanh_backward call touch, is that call's gradient: the product reads GELU's input and
//     writes the backward's contiguous output, and the backward call is gone;
// when no call in between touches what the product now writes, or writes what it now reads.
// Pinned calls and calls with per-replay arguments stay as they are. On the GPU the epilogue
// applies GELU to the product before rounding it, so 16-bit results differ from the unfused
// calls' in the last bits; elsewhere they are the same.
Graph fold_gelu_into_gemms(const Graph& g);

}  // namespace trireme::graph
