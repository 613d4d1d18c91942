// Dropout: zeroes elements with probability p in training mode and scales the rest by 1/(1-p);
// the identity in eval mode or when p == 0.
//
// Masks are reproducible: a call draws from (module seed, stream) with the stream derived from
// the module's qualified name and its call counter (Module::set_rng sets both), so the same
// model, seed and step give the same masks however the model is split across devices.
//
//   nn::Dropout drop(0.1);
//   model.set_rng(seed, step);    // once per step, from the trainer
//   Tensor y = drop.forward(x);
#pragma once

#include "trireme/nn/module.h"

namespace trireme::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x);

  double p;
};

// The stream of a named layer's `counter`-th draw: the name's hash mixed with the counter.
uint64_t dropout_stream(const std::string& qualified_name, uint64_t counter);

}  // namespace trireme::nn
