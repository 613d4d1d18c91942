// Optimizer: the base of SGD and AdamW. Holds named parameters, a step count, the learning rate,
// and per-parameter state tensors, and saves/restores all of it as named tensors so that a
// checkpoint resumes training exactly.
//
//   optim::AdamW opt(model.named_parameters(), {.lr = 3e-4, .weight_decay = 0.1});
//   for (int64_t step = 0; step < steps; ++step) {
//     opt.zero_grad();
//     model.loss(x, y).backward();
//     optim::clip_grad_norm(opt.params(), 1.0);
//     opt.set_lr(schedule.lr(step));
//     opt.step();
//   }
//   io::save_safetensors("opt.safetensors", opt.state_dict());
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::optim {

using NamedParams = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  Optimizer(NamedParams params, double lr, std::string type_name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (others are skipped), with grad mode off.
  // An optimizer that holds part of a distributed state (ZeRO, parallel/zero.h) overrides these
  // and the state functions, so that a trainer drives every optimizer the same way.
  virtual void step();
  virtual void zero_grad(bool set_to_none = true);

  // f16 loss scaling in a traced step (docs/STATIC_GRAPH.md), where the host cannot read whether
  // the gradients overflowed: while `skip` (a one-element f32 tensor, nonzero: skip) is set, step()
  // updates each parameter and then gives it and its state tensors their values from before the
  // update back where `skip` says so, bit for bit a step that did not run. The count advances
  // either way; uncount_step() takes a skipped step back once the host has read the flag.
  // An undefined `skip` ends the masking.
  void mask_steps_by(Tensor skip) { skip_ = std::move(skip); }
  void uncount_step() { --step_count_; }

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_count_; }  // completed steps
  const NamedParams& params() const { return params_; }

  // Named tensors: "step" (i64, one element), "lr" (f64, one element) and
  // "state.<param name>.<key>" for each state tensor (e.g. "state.h.0.ln_1.weight.exp_avg").
  // The state tensors are copies.
  virtual std::vector<std::pair<std::string, Tensor>> state_dict() const;
  // Restores what state_dict() saved. Errors name unknown parameters and state keys, and
  // shape mismatches.
  virtual void load_state_dict(const std::map<std::string, Tensor>& state);
  // Restores a state in this optimizer's format as if it held every parameter it was built for
  // whole ("state.<param>.<key>" shaped as the parameter): what a checkpoint of another layout
  // comes back as (parallel/optimizer_reshard.h). The same as load_state_dict unless the
  // optimizer keeps only part of it.
  virtual void load_unsharded_state_dict(const std::map<std::string, Tensor>& state) { load_state_dict(state); }

  // A parameter's state tensor (undefined if it has none yet).
  Tensor state(const std::string& param_name, const std::string& key) const;

 protected:
  // Updates one parameter (in place) from its gradient; `step` counts from 1.
  virtual void update(const std::string& name, Tensor& param, const Tensor& grad, int64_t step) = 0;
  // One parameter of a step: update()'s arguments.
  struct ParamUpdate {
    const std::string* name;
    Tensor* param;
    const Tensor* grad;
  };
  // Every parameter with a gradient, in an eager step without f16 skip masking: update() on each
  // in turn, unless the optimizer has a kernel that updates many in one call (AdamW). A traced
  // step calls update() per parameter, which the graph's own pass merges (graph/multi_tensor.h).
  virtual void update_all(std::span<const ParamUpdate> updates, int64_t step);
  // The state tensor `key` of a parameter, created by `make` on first use.
  template <class Make>
  Tensor& state_or_init(const std::string& name, const std::string& key, Make&& make) {
    Tensor& t = state_[name][key];
    if (!t.defined()) t = make();
    return t;
  }

  std::string type_name_;

 private:
  NamedParams params_;
  double lr_;
  int64_t step_count_ = 0;
  std::map<std::string, std::map<std::string, Tensor>> state_;
  Tensor skip_;  // mask_steps_by
  // update(), undone where skip_ is nonzero.
  void masked_update(const std::string& name, Tensor& param, const Tensor& grad);
};

}  // namespace trireme::optim
