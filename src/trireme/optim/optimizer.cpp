// Optimizer base: stepping, zeroing gradients, and state (de)serialisation.
#include "trireme/optim/optimizer.h"

#include <set>

#include "trireme/autograd/grad_mode.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/kernels/recording.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"

namespace trireme::optim {

Optimizer::Optimizer(NamedParams params, double lr, std::string type_name)
    : type_name_(std::move(type_name)), params_(std::move(params)), lr_(lr) {
  TRIREME_CHECK(lr >= 0, type_name_, ": learning rate must be non-negative, got ", lr);
  std::set<std::string> names;
  std::set<const TensorImpl*> seen;
  for (const auto& [name, p] : params_) {
    TRIREME_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), type_name_, ": parameter '", name,
                  "' must be a defined leaf that requires grad");
    TRIREME_CHECK(names.insert(name).second, type_name_, ": parameter name '", name, "' appears twice");
    TRIREME_CHECK(seen.insert(p.impl()).second, type_name_, ": parameter '", name,
                  "' is the same tensor as another parameter (tied weights must be passed once)");
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  ++step_count_;
  // A traced step's replays count their steps too (the updates' bias corrections read the count).
  KernelTape* tape = active_kernel_tape();
  if (tape && !tape->in_kernel()) tape->on_replay([this] { ++step_count_; });
  const bool traced = recording_for_replay();
  std::vector<ParamUpdate> updates;
  for (auto& [name, p] : params_) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (skip_.defined()) {
      masked_update(name, p, g);
    } else if (traced) {
      update(name, p, g, step_count_);
    } else {
      updates.push_back({&name, &p, &g});
    }
  }
  if (!updates.empty()) update_all(updates, step_count_);
}

void Optimizer::update_all(std::span<const ParamUpdate> updates, int64_t step) {
  for (const ParamUpdate& u : updates) update(*u.name, *u.param, *u.grad, step);
}

void Optimizer::masked_update(const std::string& name, Tensor& param, const Tensor& grad) {
  // What the update writes: the parameter and its state (created before the first masked step:
  // a state tensor made inside a traced step would be made again by every replay).
  std::vector<Tensor> written = {param};
  for (auto& [key, t] : state_[name]) written.push_back(t);
  std::vector<Tensor> before;
  for (const Tensor& t : written) before.push_back(clone(t.detach()));
  update(name, param, grad, step_count_);
  const Tensor skipped = gt(skip_, 0.0);
  for (size_t i = 0; i < written.size(); ++i) {
    Tensor t = written[i].detach();
    copy_(t, where(skipped, before[i], t));
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad();
      zero_(g);
    }
  }
}

Tensor Optimizer::state(const std::string& param_name, const std::string& key) const {
  auto it = state_.find(param_name);
  if (it == state_.end()) return Tensor();
  auto jt = it->second.find(key);
  return jt == it->second.end() ? Tensor() : jt->second;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  Tensor step = Tensor::empty({1}, DType::i64);
  step.data<int64_t>()[0] = step_count_;
  Tensor lr = Tensor::empty({1}, DType::f64);
  lr.data<double>()[0] = lr_;
  out.emplace_back("step", step);
  out.emplace_back("lr", lr);
  // Parameter order, then key order: stable across runs.
  for (const auto& [name, p] : params_) {
    auto it = state_.find(name);
    if (it == state_.end()) continue;
    for (const auto& [key, t] : it->second) out.emplace_back("state." + name + "." + key, clone(t));
  }
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto step = state.find("step");
  TRIREME_CHECK(step != state.end() && step->second.numel() == 1, type_name_,
                ".load_state_dict: the state has no one-element 'step'");
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, p] : params_) by_name[name] = &p;
  std::map<std::string, std::map<std::string, Tensor>> loaded;
  for (const auto& [key, t] : state) {
    if (key == "step" || key == "lr") continue;
    TRIREME_CHECK(key.rfind("state.", 0) == 0, type_name_, ".load_state_dict: unexpected key '", key, "'");
    // "state.<param name>.<key>": the param name may contain dots, the state key does not.
    const std::string rest = key.substr(6);
    const size_t dot = rest.rfind('.');
    TRIREME_CHECK(dot != std::string::npos, type_name_, ".load_state_dict: malformed key '", key, "'");
    const std::string pname = rest.substr(0, dot), skey = rest.substr(dot + 1);
    auto p = by_name.find(pname);
    TRIREME_CHECK(p != by_name.end(), type_name_, ".load_state_dict: key '", key,
                  "' is for parameter '", pname, "', which this optimizer does not have");
    TRIREME_CHECK(t.sizes() == p->second->sizes(), type_name_, ".load_state_dict: '", key, "' has shape ",
                  t.sizes(), " but the parameter has ", p->second->sizes());
    Tensor copy = to_device(clone(t), p->second->device());
    // Keep the dtype the optimizer creates its state in (acc type of the parameter).
    auto existing = this->state(pname, skey);
    if (existing.defined() && existing.dtype() != copy.dtype()) copy = to_dtype(copy, existing.dtype());
    loaded[pname][skey] = copy;
  }
  step_count_ = int64_t(step->second.at({0}));
  auto lr = state.find("lr");
  if (lr != state.end()) lr_ = lr->second.at({0});
  state_ = std::move(loaded);
}

}  // namespace trireme::optim
