// Internal to ops: the autocast policy, i.e. which ops run in the low dtype, which in f32, and
// how mixed floating operands meet. Each op that autocast touches calls one of these at its top
// and, when they return casts, calls itself again with them:
//
//   if (auto c = autocast_low_args({x, weight, bias})) return linear((*c)[0], (*c)[1], (*c)[2]);
//
// Note [autocast policy]
// Under an autocast region for the operands' device type (autograd/autocast_mode.h):
// - low ops (matmul, linear, scaled_dot_product_attention): floating operands of f32 or of the
//   other 16-bit dtype are cast to the autocast dtype. f64 stays f64 (as in PyTorch: f64 is
//   asked for on purpose, e.g. by finite-difference tests).
// - f32 ops (softmax, log_softmax, layer_norm, rms_norm): 16-bit operands are cast up to f32, so
//   normalisations and probabilities are computed and returned in f32. The losses
//   (cross_entropy, vocab-parallel cross entropy) return f32 too but read 16-bit logits as they
//   are: their fused kernels compute in f32 anyway (autocast_f32_result).
// - binary elementwise ops (add, sub, mul, div, pow, maximum, where) with two floating operands
//   of different dtypes cast the narrower one to the wider (bf16 with f16 meet in f32). This is
//   how the f32 residual stream takes a bf16 linear output. Outside autocast a mismatch stays
//   an error naming the op (ops/elementwise.h): code written without autocast never mixes
//   precisions by accident, and only autocast, which creates the mixing, resolves it.
// Every cast is to_dtype, which autograd records, so gradients are cast back to each input's
// dtype: an f32 master parameter gets an f32 gradient even though its matmul ran in bf16.
// Backward runs with autocast off (autograd/engine.cpp): every backward formula sees the
// dtypes its forward saw, so gradients flow in the dtypes the forward used.
// A low op's casts of a pipeline stage's parameters are made once per step and shared by its
// micro-batches (Note [autocast cast cache] in autograd/autocast_mode.h); elsewhere every use
// casts: in one process or without a pipeline every parameter meets one low op per micro-batch
// (the tied wte meets embedding in f32 and the lm_head in bf16).
#pragma once

#include <optional>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme {

using AutocastArgs = std::optional<std::vector<Tensor>>;

// For a low op: the arguments with casts applied, or nullopt when nothing needs a cast
// (autocast off for their device, or already in the low dtype). Undefined tensors and
// non-floating ones pass through.
AutocastArgs autocast_low_args(const std::vector<Tensor>& args);
// For an f32 op: 16-bit floating arguments cast to f32, or nullopt when none needs it.
AutocastArgs autocast_f32_args(const std::vector<Tensor>& args);
// For an f32 op whose kernel already reads 16-bit inputs into f32 arithmetic (the fused
// cross-entropies): true when autocast asks for f32 and `t` is 16-bit. The op then keeps its input
// as it is and returns its result in f32: the same numbers as casting first, without an f32 copy
// of an (N, V) logits matrix (3.3 GB for GPT-2 at B=16, T=1024).
bool autocast_f32_result(const Tensor& t);
// For a binary op: both floating with different dtypes -> the narrower cast to the wider.
AutocastArgs autocast_promote_args(const Tensor& a, const Tensor& b);

}  // namespace trireme
