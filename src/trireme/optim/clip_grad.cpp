// Gradient clipping: a deterministic f64 sum of squares (sum_squares_all), then an in-place scale
// (mul_all_), one kernel call each per device.
#include "trireme/optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/multi_tensor.h"

namespace trireme::optim {
namespace {

// The parameters' gradients, grouped by device in the order each device first appears.
std::vector<std::vector<Tensor>> grads_by_device(const std::vector<Tensor>& params) {
  std::vector<std::vector<Tensor>> groups;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g[0].device() == p.device(); });
    if (it == groups.end()) it = groups.insert(groups.end(), std::vector<Tensor>{});
    it->push_back(p.grad());
  }
  return groups;
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  double total = 0.0;
  for (const auto& grads : grads_by_device(params)) {
    total += to_device(sum_squares_all(grads, grads[0].device()), Device::cpu()).item();
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TRIREME_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be positive, got ", max_norm);
  const double norm = grad_norm(params);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (auto& grads : grads_by_device(params)) mul_all_(grads, coef);
  }
  return norm;
}

double clip_grad_norm(const std::vector<std::pair<std::string, Tensor>>& params, double max_norm) {
  std::vector<Tensor> ps;
  for (const auto& [name, p] : params) ps.push_back(p);
  return clip_grad_norm(ps, max_norm);
}

}  // namespace trireme::optim
