// Gradient clipping by global L2 norm.
//
//   double norm = optim::clip_grad_norm(opt.params(), 1.0);   // before opt.step()
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::optim {

// The L2 norm of all gradients together (sum of squares accumulated in f64, in a fixed order, so
// the result does not depend on the thread count). Parameters without a gradient are skipped.
double grad_norm(const std::vector<Tensor>& params);
// Computes the global norm, and when it exceeds max_norm scales every gradient in place by
// max_norm / (norm + 1e-6) (as PyTorch). Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
double clip_grad_norm(const std::vector<std::pair<std::string, Tensor>>& params, double max_norm);

}  // namespace trireme::optim
