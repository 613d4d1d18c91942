// Folds into norms: passes from graph to graph (graph/passes.h) that let a layer or RMS norm
// kernel do the pointwise work its neighbours do in a training step, with the same bits
// (kernels/nn.h: the norms' 16-bit edge and their backward's addend).
//   - Under bf16/f16 autocast a norm runs in f32 and the linear after it casts its output to 16
//     bits in a kernel of its own; in the backward, the cast's gradient widens the 16-bit gradient
//     to an f32 copy that only the norm's backward reads.
//   - A norm's input is a residual stream: the add of a branch's output to the stream writes the
//     sum that the next norm then reads back (under autocast, the branch's 16-bit output widened
//     first by a cast); its gradient is the norm backward's grad_x plus the
//     gradient the residual path brings, added in a kernel of its own; under autocast the residual
//     branch's 16-bit backward then reads that gradient cast to 16 bits, by a kernel of its own.
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

// Rewrites a norm whose input x is written by an add of two contiguous values of its shape and the
// norm is the add's first reader (and nothing writes x later): the norm takes the add's operands as
// x and residual and writes the add's output as its sum, and the add is gone. When one operand is
// written, for this add alone, by a cast from a contiguous value of the norm's 16-bit output dtype,
// that value is the residual and the cast is gone too. Neither operand may be written between the
// add and the norm. Run after fold_norm_casts, which gives the norm its 16-bit output.
Graph fold_norm_residual_adds(const Graph& g);

// Rewrites a norm backward whose grad_x, an intermediate nothing else touches, is read only by an
// add with another contiguous value of its shape and dtype into a new contiguous output: the
// backward takes the other value as its addend and writes the add's output, and the add is gone;
// when no call in between writes the other value or touches the output.
Graph fold_norm_gradient_adds(const Graph& g);

// Rewrites an f32 norm backward whose grad_x, an intermediate it is the first to write and nothing
// writes later, is first read by a cast to grad's bf16/f16 edge dtype into a new contiguous
// output: the backward writes the cast's output too (grad_x_edge), and the cast is gone; when no
// call in between touches the cast's output. Run after fold_norm_casts (which gives the backward
// its 16-bit grad) and fold_norm_gradient_adds (whose sum is what the cast reads).
Graph fold_norm_gradient_casts(const Graph& g);

}  // namespace trireme::graph
