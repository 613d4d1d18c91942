// Signatures of the neural-network kernel families: norms, softmax, cross-entropy, dropout,
// attention and rotary embeddings (shared by the CPU and CUDA backends).
//
// Conventions: kernels are registered by the dtype of their floating input (f64, f32, bf16, f16).
// "stat" tensors (saved means, reciprocal standard deviations, log-sum-exps, per-row losses)
// hold the accumulation type: f64 for f64 inputs, f32 otherwise.
// Ops hand kernels contiguous tensors unless a signature says otherwise.
#pragma once

#include <cstdint>
#include <type_traits>

#include "trireme/core/tensor.h"

namespace trireme {

// The dtype of the stat tensors for inputs of dtype t.
inline DType stat_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// ---- norms over the last dim: x (R, D) ----
// Beside an f32 x, the forward's y and the backward's grad may be bf16 or f16 (the norm's "edge"):
// y is then the f32 result rounded once, grad is widened exactly, so a call gives the bits of the
// f32 norm next to a cast. Eager ops never ask for it; graph/norm_folds.h folds such casts in.
template <class T, class Fn>
void dispatch_norm_edge(const char* op, DType edge, Fn&& fn) {  // fn<E>() with E the edge's element type
  if (edge == dtype_v<T>) return fn.template operator()<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (edge == DType::bf16) return fn.template operator()<bf16_t>();
    if (edge == DType::f16) return fn.template operator()<f16_t>();
  }
  TRIREME_FAIL(op, ": a ", dtype_v<T>, " input with a ", edge, " edge tensor (only f32 inputs may have a bf16 or f16 one)");
}
// A forward's residual, when defined, is added to x before the norm, as the add kernel adds it, and
// the sum (x's dtype, contiguous like x) is written to `sum` and normalised: the residual stream's
// add and the norm that reads it in one pass (graph/norm_folds.h); eager passes none. The residual
// has x's dtype or, beside an f32 x, y's 16-bit edge dtype, widened exactly as a cast widens it.
template <class T, class E, class Fn>
void dispatch_norm_residual(const char* op, const Tensor& residual, Fn&& fn) {  // fn<R>(), R the residual's type
  if (!residual.defined() || residual.dtype() == dtype_v<T>) return fn.template operator()<T>();
  if constexpr (!std::is_same_v<T, E>) {
    if (residual.dtype() == dtype_v<E>) return fn.template operator()<E>();
  }
  TRIREME_FAIL(op, ": a ", residual.dtype(), " residual beside a ", dtype_v<T>, " input and a ", dtype_v<E>,
               " output (it must have the input's dtype or the output's)");
}
// A forward's residual needs a sum output of x's dtype and size (both contiguous, as x is).
inline void check_norm_residual(const char* op, const Tensor& x, const Tensor& residual, const Tensor& sum) {
  TRIREME_CHECK(!residual.defined() || (sum.defined() && sum.dtype() == x.dtype() && sum.numel() == x.numel() &&
                                        residual.numel() == x.numel()),
                op, ": a residual needs a sum output of x's dtype and size");
}
// layer_norm: y = (x - mean) * rstd * w + b; mean, rstd (R) stat. weight/bias (D) may be undefined.
using LayerNormKernel = void (*)(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                 double eps, Tensor& y, Tensor& sum, Tensor& mean, Tensor& rstd);
// grad (R, D). Writes grad_x (R, D); grad_weight/grad_bias (D) when defined (in x's dtype).
// addend (R, D, x's dtype), when defined, is added to grad_x as the add kernel would add it to the
// rounded grad_x: the gradient a residual stream accumulates (graph/norm_folds.h); eager passes none.
// grad_x_edge, when defined, gets grad_x (with the addend) rounded once more to grad's bf16 or f16
// edge dtype, as a cast of grad_x would (an f32 x only): what the residual branch's 16-bit
// backward reads under autocast (graph/norm_folds.h); eager passes none.
using LayerNormBackwardKernel = void (*)(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                         const Tensor& mean, const Tensor& rstd, const Tensor& addend,
                                         Tensor& grad_x, Tensor& grad_x_edge, Tensor& grad_weight,
                                         Tensor& grad_bias);
// rms_norm: y = x * rstd * w with rstd = 1 / sqrt(mean(x²) + eps); rstd (R) stat.
using RmsNormKernel = void (*)(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps, Tensor& y,
                               Tensor& sum, Tensor& rstd);
using RmsNormBackwardKernel = void (*)(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                       const Tensor& rstd, const Tensor& addend, Tensor& grad_x,
                                       Tensor& grad_x_edge, Tensor& grad_weight);

// ---- softmax over the last dim: x (R, D) ----
using SoftmaxKernel = void (*)(const Tensor& x, Tensor& y);  // softmax or log_softmax
// grad_x from the output y and its gradient.
using SoftmaxBackwardKernel = void (*)(const Tensor& grad, const Tensor& y, Tensor& grad_x);

// ---- cross-entropy: logits (N, C), targets (N) i64/i32 ----
// Writes each row's loss (N, stat; 0 for ignored rows), log-sum-exp (N, stat) and the number of
// rows not ignored into `count` (a 0-dim stat tensor on the logits' device: no host round trip).
// A target outside [0, C) that is not ignore_index is an error: thrown at the call on the CPU;
// on CUDA the row is skipped and the error thrown at the next synchronisation
// (cuda/device_error.h).
using CrossEntropyKernel = void (*)(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                    Tensor& losses, Tensor& lse, Tensor& count);
// grad_logits[r, c] = (softmax[r, c] - [c == target_r]) * grad[r]; zero rows where ignored (or out
// of range). grad (N) is in the stat dtype (the mean's 1/count is folded in without rounding to a
// 16-bit logits dtype) and may have any stride (stride 0 broadcasts a scalar gradient).
// Element by element (each output element from the logit at its position), so grad_logits may be
// the memory of logits (graph/passes.cpp, Note [in-place reuse]).
using CrossEntropyBackwardKernel = void (*)(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                            const Tensor& grad, int64_t ignore_index, Tensor& grad_logits);

// ---- vocabulary-parallel cross-entropy (parallel/vocab_parallel_loss.cpp) ----
// logits (N, Vl) contiguous: this rank's columns, of which [0, real) are the vocabulary ids
// [start, start + real) and the rest padding; targets (N) i64/i32 full-vocabulary ids. The op
// all-reduces between the two passes. Stat tensors are f32 (f64 for f64 logits), contiguous.
// row_max (N) = max over the real columns (-inf when real == 0).
using VocabRowMaxKernel = void (*)(const Tensor& logits, int64_t real, Tensor& row_max);
// stats (2, N): row 0 = Σ_{j<real} exp(x[r, j] - row_max[r]); row 1 = x[r, t - start] - row_max[r]
// when this rank owns target t, else 0. A target outside [0, vocab_size) that is not
// ignore_index is an error (as in CrossEntropyKernel).
using VocabRowStatsKernel = void (*)(const Tensor& logits, const Tensor& targets, int64_t start, int64_t real,
                                     int64_t vocab_size, int64_t ignore_index, const Tensor& row_max, Tensor& stats);
// grad_logits (N, Vl) in the logits dtype = (exp(x - lse[r]) - [j == t - start]) * grad_row[r] on the
// real columns, 0 on padding. grad_row (N) stat (0 for ignored rows).
using VocabGradKernel = void (*)(const Tensor& logits, const Tensor& targets, int64_t start, int64_t real,
                                 const Tensor& lse, const Tensor& grad_row, Tensor& grad_logits);

// ---- dropout: x contiguous, element i kept iff rng_uniform(seed, stream, offset + i) >= p ----
using DropoutKernel = void (*)(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t offset,
                               Tensor& y);

// ---- attention: q (B, H, Tq, hd), k and v (B, H, Tk, hd) ----
// Fused ("flash") kernels: the (Tq, Tk) score matrix is never materialised; the backward
// recomputes the probabilities from the saved log-sum-exps. With s = 1/sqrt(hd):
//   lse[b, h, i] = log Σ_j exp(s q_i·k_j) over the keys row i attends (j <= i when causal),
//   out[b, h, i] = Σ_j exp(s q_i·k_j - lse[b, h, i]) v_j.
// q, k, v, out, grad_out and the gradients may have any strides as long as the last dim has
// stride 1 (the (B, T, H, hd) layout that splitting a fused QKV projection gives needs no copy).
// lse (B, H, Tq) stat, contiguous; -inf for a row with no key (Tk = 0), whose output is 0.
// Causal needs Tq == Tk. The backward writes every element of grad_q, grad_k, grad_v.
using AttentionKernel = void (*)(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out,
                                 Tensor& lse);
using AttentionBackwardKernel = void (*)(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, bool causal, Tensor& grad_q,
                                         Tensor& grad_k, Tensor& grad_v);

// ---- rotary embedding: x (B, H, T, hd) with last-dim stride 1, out contiguous ----
// inverse = true rotates by the negated angles (the backward).
using RotaryKernel = void (*)(const Tensor& x, double base, int64_t position_offset, bool inverse, Tensor& out);

}  // namespace trireme
