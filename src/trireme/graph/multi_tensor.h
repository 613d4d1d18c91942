// Multi-tensor calls: passes merging what a traced step does one tensor at a time into calls of
// the kernels that take many (one launch, or a few, on a GPU): AdamW's updates (kernels/optim.h:
// adamw_multi) and gradient clipping's sum of squares and scale (kernels/reduce.h:
// sum_squares_many, kernels/optim.h: scale_many). Eager steps call those kernels directly
// (optim/optimizer.h, ops/multi_tensor.h); a traced step records a call per tensor, which these
// passes merge with the same bits. See docs/STATIC_GRAPH.md, "Passes".
#pragma once

#include "trireme/graph/graph.h"

namespace trireme::graph {

// Merges runs of `adamw` calls of one device and dtype into one `adamw_multi` call each. The
// merged call takes the place of the run's last member, so each earlier member moves down to it;
// a member joins a run only when that move is legal and costs no memory: no call it crosses
//   - touches a buffer the run touches where either writes (the update reads the gradient and
//     writes the parameter and both moments: a call reading a parameter, or writing a gradient,
//     in between ends the run),
//   - is pinned (a pipeline transfer's post or wait),
//   - or, when a member is the last use of an intermediate buffer (a gradient that dies at its
//     update), takes memory: the first use of an intermediate buffer. Crossing only calls that
//     take none, the gradient living until the merged call raises no peak.
// Members write disjoint elements (two updates of views into one buffer may merge when their
// ranges do not overlap). The merged call refreshes each member's hyper-parameters with the
// member's own refresh (learning rate, bias corrections, its group's weight decay) before every
// replay, then runs every update in one call; each element gets the operations adamw gives it,
// so the results are the same bits. A call of a dtype or device without the kernel, or one with
// other per-replay bindings, stays as it is; so does a run of one.
Graph merge_adamw(const Graph& g);

// Merges the sum of squares of a traced clip (ops/multi_tensor.h: sum_squares_all): a fill of a
// 0-dim f64 zero, then per tensor a `sum_squares` into a scalar and an `add` of it to the running
// total, becomes one `sum_squares_many` call writing the last total, in the last add's place. The
// chain is followed while its totals and scalars are intermediates only it touches, its tensors
// share a dtype and device (the kernel registered for them), none is written before the merged
// call would read it, and no pinned call lies in between; a chain of one stays as it is.
Graph merge_sum_squares(const Graph& g);

// Merges a traced clip's scale (ops/multi_tensor.h: mul_all_): in-place `mul`s of contiguous f32
// or f64 tensors by a broadcast view of one element that a cast wrote from a one-element f64
// value become one `scale_many` call given that f64 value, in the last member's place (the cast
// goes when nothing else reads it). A member joins while no call in between touches a member's
// tensor or writes the f64 value; scale_many rounds the factor to the tensors' dtype once, as the
// cast did, so the bits are the same.
Graph merge_scales(const Graph& g);

}  // namespace trireme::graph
