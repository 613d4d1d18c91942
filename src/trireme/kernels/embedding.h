// Signatures of the embedding kernel family: row gather from a table and its scatter-add.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// out (N, D) = weight (V, D)[ids (N)]. ids are contiguous i64 or i32; weight any strides; out
// contiguous. Registered by weight's dtype. An id out of range is an error naming `embedding`, the
// id, its position and V: thrown at the call on the CPU (before writing anything); on CUDA its row
// is zeroed and the error thrown at the next synchronisation (cuda/device_error.h).
using EmbeddingKernel = void (*)(const Tensor& weight, const Tensor& ids, Tensor& out);
// grad_weight (V, D), zeroed by the caller, gets grad (N, D) row n added to row ids[n]. Contiguous
// operands. Deterministic: every element is summed by one thread in token order. Ids out of range
// contribute nothing (the forward reported them).
using EmbeddingBackwardKernel = void (*)(const Tensor& grad, const Tensor& ids, Tensor& grad_weight);

}  // namespace trireme
