// SGD with optional momentum (dampening 0), L2 weight decay and Nesterov momentum (PyTorch's rule):
//   g = grad + wd * p
//   buf = g (first step) or momentum * buf + g;   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
//
//   optim::SGD opt(model.named_parameters(), {.lr = 0.1, .momentum = 0.9});
#pragma once

#include "trireme/optim/optimizer.h"

namespace trireme::optim {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedParams params, const SGDOptions& options);
  const SGDOptions& options() const { return options_; }

 protected:
  void update(const std::string& name, Tensor& param, const Tensor& grad, int64_t step) override;

 private:
  SGDOptions options_;
};

}  // namespace trireme::optim
