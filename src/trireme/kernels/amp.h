// Signatures of the mixed-precision kernel family: gradient unscaling for the f16 loss scaler, and
// a 16-bit gradient added into an f32 one.
#pragma once

#include <span>

#include "trireme/core/tensor.h"

namespace trireme {

// In place: grad *= inv_scale (computed in acc_t, rounded once), and found_inf[0] = 1 when any
// element of grad is inf or NaN (it is never reset here: one flag collects a whole step's
// gradients, read with one host sync at the end). grad is contiguous; found_inf is a
// one-element f32 tensor on grad's device. Registered by grad's dtype.
using AmpUnscaleKernel = void (*)(Tensor& grad, Tensor& found_inf, double inv_scale);
// amp_unscale of many gradients (contiguous, of one dtype and device) in one call: on a GPU one
// launch, where a call per gradient costs the host a launch each. The same bits and flag.
using AmpUnscaleManyKernel = void (*)(std::span<Tensor* const> grads, Tensor& found_inf, double inv_scale);

// In place: acc[i] += f32(incoming[i]), the bits of casting incoming to f32 and adding (the cast
// is exact): a weight's 16-bit gradient under autocast, accumulated into its f32 .grad in one
// pass (autograd/grad_arithmetic.h). acc is f32, incoming bf16 or f16, both contiguous and of
// one size. Registered by incoming's dtype.
using AccumulateWideningKernel = void (*)(Tensor& acc, const Tensor& incoming);

}  // namespace trireme
