// Neural-network ops, each with its backward: embedding, norms, softmax, losses, dropout,
// attention and rotary embeddings.
#pragma once

#include <cstdint>

#include "trireme/core/rng.h"
#include "trireme/core/tensor.h"

namespace trireme {

// weight (V, D), ids (...) i64/i32 -> (..., D). Backward scatter-adds into weight's gradient.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// Normalise over the last dim; weight/bias (D) may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

enum class Reduction { mean, sum, none };
// logits (N, C), targets (N) i64/i32. Fused log-softmax + NLL, stable; targets equal to
// ignore_index contribute nothing (mean divides by the count of the others; when every target is
// ignored the mean is 0, not NaN). A target outside [0, C) that is not ignore_index is an error.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);

// Inverted dropout. The mask of element i is a function of (seed, stream, offset + i) only,
// so it can be reproduced for any slice; identity when !training or p == 0; p must be in [0, 1).
// Element i counts in x's row-major order. The Generator form reserves numel counters from gen.
Tensor dropout(const Tensor& x, double p, bool training, uint64_t seed, uint64_t stream, uint64_t offset = 0);
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// q, k, v (B, H, T, hd) -> (B, H, T, hd): softmax(q kᵀ / sqrt(hd) + causal mask) v.
// k and v may be longer than q when !causal. The result is a (B, H, T, hd) view of (B, T, H, hd)
// memory, so transposing it back and merging heads is free (see ops/attention.cpp).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);

// Rotary position embedding on x (B, H, T, hd), hd even, pairs (2i, 2i+1) rotated by
// angle pos * base^(-2i/hd), positions start at `position_offset`.
Tensor rotary_embedding(const Tensor& x, double base = 10000.0, int64_t position_offset = 0);

}  // namespace trireme
