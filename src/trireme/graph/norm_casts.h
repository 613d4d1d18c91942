// Casts folded into norms: a pass from graph to graph (graph/passes.h) for mixed precision. Under
// bf16/f16 autocast a layer or RMS norm runs in f32, and the linear after it casts its f32 output
// to 16 bits in a kernel of its own; in the backward, the cast's gradient widens the 16-bit
// gradient to an f32 copy that only the norm's backward reads. The norm kernels take a 16-bit
// edge beside an f32 input (kernels/nn.h), with the same bits, so both casts can go.
#pragma once

#include "trireme/graph/graph.h"

namespace trireme::graph {

// Rewrites
//   - an f32 norm whose output, an intermediate nothing else touches, is read only by a cast to
//     bf16/f16: the norm writes the cast's contiguous output itself, and the cast is gone;
//   - a cast from a contiguous bf16/f16 value to an f32 intermediate that only an f32 norm
//     backward reads, as its gradient: the backward reads the 16-bit value, and the cast is gone;
// when no call in between touches the cast's output (forward) or writes its input (backward).
// Pinned calls and calls with per-replay arguments stay as they are.
Graph fold_norm_casts(const Graph& g);

}  // namespace trireme::graph
