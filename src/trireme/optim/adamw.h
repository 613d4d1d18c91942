// AdamW (Loshchilov & Hutter) exactly as PyTorch's torch.optim.AdamW: decoupled weight decay
// p *= 1 - lr * wd, then the bias-corrected Adam update (see kernels/optim.h for the formula).
// State per parameter: "exp_avg" and "exp_avg_sq", in f32 for bf16/f16 parameters.
//
//   optim::AdamW opt(model.named_parameters(), {.lr = 6e-4, .betas = {0.9, 0.95}, .weight_decay = 0.1});
#pragma once

#include <utility>

#include "trireme/kernels/optim.h"
#include "trireme/optim/optimizer.h"

namespace trireme::optim {

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(NamedParams params, const AdamWOptions& options);
  const AdamWOptions& options() const { return options_; }

 protected:
  void update(const std::string& name, Tensor& param, const Tensor& grad, int64_t step) override;
  void update_all(std::span<const ParamUpdate> updates, int64_t step) override;

 private:
  AdamWOptions options_;
  // The learning rate, betas, eps, weight decay and bias corrections of step `step` (from 1).
  AdamWHyper hyper(int64_t step) const;
  // The parameter's first and second moments (zeros on first use), after checking its gradient.
  std::pair<Tensor*, Tensor*> moments(const std::string& name, const Tensor& param, const Tensor& grad);
};

}  // namespace trireme::optim
