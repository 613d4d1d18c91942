// Gradient clipping: a deterministic f64 sum of squares, then an in-place scale.
#include "trireme/optim/clip_grad.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

namespace trireme::optim {
namespace {

// Sum of squares of a CPU tensor in f64: fixed blocks summed in order (thread-count independent).
template <class T>
double sum_squares_cpu(const T* x, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(size_t(blocks), 0.0);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0.0;
    const int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) {
      const double v = double(x[i]);
      s += v * v;
    }
    partial[size_t(b)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

double sum_squares(const Tensor& g) {
  if (g.device().is_cpu()) {
    Tensor c = contiguous(g);
    return dispatch_dtype(c.dtype(), [&]<class T>() -> double {
      if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T>) {
        TRIREME_FAIL("clip_grad_norm: gradient of dtype ", c.dtype(), " is not floating");
      } else {
        return sum_squares_cpu(c.data<T>(), c.numel());
      }
    });
  }
  Tensor g64 = to_dtype(g, DType::f64);
  return to_device(sum(mul(g64, g64)), Device::cpu()).item();  // item() reads CPU tensors only
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  double total = 0.0;
  for (const Tensor& p : params) {
    if (p.grad().defined()) total += sum_squares(p.grad());
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
