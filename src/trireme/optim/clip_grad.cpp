// Gradient clipping: a deterministic f64 sum of squares (sum_squares), then an in-place scale.
#include "trireme/optim/clip_grad.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

namespace trireme::optim {
namespace {

double squares_on_host(const Tensor& g) { return to_device(sum_squares(g), Device::cpu()).item(); }

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  double total = 0.0;
  for (const Tensor& p : params) {
    if (p.grad().defined()) total += squares_on_host(p.grad());
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TRIREME_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  const double norm = grad_norm(params);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      if (!p.grad().defined()) continue;
      Tensor g = p.grad();
      mul_(g, coef);
    }
  }
  return norm;
}

double clip_grad_norm(const std::vector<std::pair<std::string, Tensor>>& params, double max_norm) {
  std::vector<Tensor> ps;
  for (const auto& [name, p] : params) ps.push_back(p);
  return clip_grad_norm(ps, max_norm);
}

}  // namespace trireme::optim
