// Signatures of the mixed-precision kernel family: gradient unscaling for the f16 loss scaler.
#pragma once

#include "trireme/core/tensor.h"

namespace trireme {

// In place: grad *= inv_scale (computed in acc_t, rounded once), and found_inf[0] = 1 when any
// element of grad is inf or NaN (it is never reset here: one flag collects a whole step's
// gradients, read with one host sync at the end). grad is contiguous; found_inf is a
// one-element f32 tensor on grad's device. Registered by grad's dtype.
using AmpUnscaleKernel = void (*)(Tensor& grad, Tensor& found_inf, double inv_scale);

}  // namespace trireme
