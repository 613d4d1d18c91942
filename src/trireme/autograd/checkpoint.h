// Checkpointed regions (activation recomputation): a region's forward runs without recording
// anything, so none of its intermediate activations stay alive; only its inputs are saved. In
// the backward the region runs again, recording, and the gradient flows through that replay.
// The replay computes only what the backward reads (kernels/deferred_kernels.h): the kernels
// whose results only flow into the region's outputs are skipped (in a transformer block, the
// MLP's last GEMM and what follows it; the outputs' values are those of the first run).
// Memory: one region's activations at a time instead of all of them; time: at most one more forward.
//
// The replay runs in the grad and autocast state of the first run, so it computes the same
// values in the same dtypes. What else a region reads must be the same the second time: a
// region that draws random numbers has to replay its draws (nn/checkpoint.h does this for
// modules, whose dropout is counter-based). Parameters used inside a region get their
// gradients from the replay's backward, accumulated as usual (their grad-ready hooks run then).
//
//   TensorList out = autograd::checkpoint([&](const TensorList& in) { return TensorList{block(in[0])}; }, {x});
//   loss(out[0]).backward();   // block runs forward twice, backward once
#pragma once

#include <functional>

#include "trireme/autograd/node.h"

namespace trireme::autograd {

using RegionFn = std::function<TensorList(const TensorList& inputs)>;

// Runs fn(inputs) as a checkpointed region when grad mode is on (plainly otherwise). fn is
// called again in the backward, possibly long after this returns: what it captures must live
// until then.
TensorList checkpoint(const RegionFn& fn, const TensorList& inputs);

// Selective recomputation: `t` = fn(inputs), something cheap to compute and large to keep (a
// norm's or an activation function's output feeding a GEMM), is not kept by the ops that save it
// for the backward; each computes it again from `inputs` (saved, with their versions checked)
// when its backward runs, under the grad-free autocast state of now, so the values are the same.
// A cast of `t` (autocast's, before a GEMM) is recomputed the same way. The inputs must be
// kept anyway (the op that made `t` saves them) or the saving is smaller. Without grad mode it
// does nothing.
//   Tensor h = layer_norm(x, w, b, eps);
//   autograd::recompute_when_saved(h, {x, w, b}, [eps](const TensorList& in) { return layer_norm(in[0], in[1], in[2], eps); });
void recompute_when_saved(const Tensor& t, const TensorList& inputs, RegionFn fn);
// The recipe of a tensor marked by recompute_when_saved (or a cast of one), null otherwise.
std::function<Tensor()> recompute_recipe(const Tensor& t);
// Marks `t` as recomputed by `recipe` (what recompute_when_saved does with its inputs bound).
void set_recompute_recipe(const Tensor& t, std::function<Tensor()> recipe);

}  // namespace trireme::autograd
