// Module: registration, recursive walks, state dicts and in-place conversion.
#include "trireme/nn/module.h"

#include <algorithm>
#include <functional>
#include <set>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"

namespace trireme::nn {

std::string join_name(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

void assign_in_place(const Tensor& t, const Tensor& value) {
  TRIREME_CHECK(t.defined() && value.defined(), "assign_in_place: undefined tensor");
  TensorImpl* dst = t.impl();
  TensorImpl* src = value.impl();
  dst->storage = src->storage;
  dst->sizes = src->sizes;
  dst->strides = src->strides;
  dst->offset = src->offset;
  dst->numel = src->numel;
  dst->dtype = src->dtype;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  TRIREME_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": ", what, " name '", name,
                "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  TRIREME_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name_, ": cannot register ",
                what, " '", name, "': the name is already taken");
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name, "parameter");
  TRIREME_CHECK(value.defined(), type_name_, ": parameter '", name, "' is undefined");
  TRIREME_CHECK(value.is_leaf(), type_name_, ": parameter '", name, "' must be a leaf (detach it first)");
  if (requires_grad) value.set_requires_grad(true);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name, "buffer");
  TRIREME_CHECK(value.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  TRIREME_CHECK(module != nullptr, type_name_, ": module '", name, "' is null");
  TRIREME_CHECK(module->parent_ == nullptr, type_name_, ": module '", name, "' (", module->type_name_,
                ") is already registered under '", module->qualified_name(), "'");
  module->parent_ = this;
  module->local_name_ = name;
  module->training_ = training_;
  children_.emplace_back(name, std::move(module));
}

std::string Module::qualified_name() const {
  if (!parent_) return "";
  return join_name(parent_->qualified_name(), local_name_);
}

void Module::collect_parameters(const std::string& prefix, NamedTensors& out,
                                std::unordered_set<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : parameters_) {
    if (!seen.insert(t.impl()).second) continue;
    out.emplace_back(join_name(prefix, name), t);
  }
  for (const auto& [name, m] : children_) m->collect_parameters(join_name(prefix, name), out, seen);
}

void Module::collect_buffers(const std::string& prefix, NamedTensors& out,
                             std::unordered_set<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : buffers_) {
    if (!seen.insert(t.impl()).second) continue;
    out.emplace_back(join_name(prefix, name), t);
  }
  for (const auto& [name, m] : children_) m->collect_buffers(join_name(prefix, name), out, seen);
}

NamedTensors Module::named_parameters(const std::string& prefix) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect_parameters(prefix, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(const std::string& prefix) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect_buffers(prefix, out, seen);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (auto& [name, m] : children_) {
    auto sub = m->named_modules(join_name(prefix, name));
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Tensor& Module::parameter(const std::string& name) {
  for (auto& [n, t] : parameters_) {
    if (n == name) return t;
  }
  TRIREME_FAIL(type_name_, " '", qualified_name(), "' has no parameter '", name, "'");
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (auto& [n, m] : children_) {
    if (n == name) return m;
  }
  TRIREME_FAIL(type_name_, " '", qualified_name(), "' has no child module '", name, "'");
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, m] : children_) m->train(on);
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  NamedTensors buffers = named_buffers();
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict, bool convert_dtype) {
  std::map<std::string, Tensor> m;
  for (const auto& [name, t] : state) {
    TRIREME_CHECK(m.emplace(name, t).second, "load_state_dict: key '", name, "' appears twice");
  }
  load_state_dict(m, strict, convert_dtype);
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict, bool convert_dtype) {
  NamedTensors own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& v = it->second;
    if (!v.defined() || v.sizes() != t.sizes()) {
      mismatched.push_back(str_cat(name, ": shape ", v.defined() ? v.sizes() : Shape{}, " in the state, ",
                                   t.sizes(), " in the model"));
    } else if (v.dtype() != t.dtype() && !convert_dtype) {
      mismatched.push_back(str_cat(name, ": dtype ", v.dtype(), " in the state, ", t.dtype(), " in the model"));
    }
  }
  for (const auto& [name, t] : state) {
    if (!own_names.count(name)) unexpected.push_back(name);
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  std::string problems;
  if (!mismatched.empty()) problems += "\n  mismatched: " + list(mismatched);
  if (strict && !missing.empty()) problems += "\n  missing keys: " + list(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected keys: " + list(unexpected);
  TRIREME_CHECK(problems.empty(), "load_state_dict: ", type_name_, " cannot load the state:", problems);

  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor dst = t;  // copy_ writes through the shared TensorImpl
    copy_(dst, it->second);
  }
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, m] : children_) m->apply(fn);
  fn(*this);
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    if (!t.grad().defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      Tensor g = t.grad();
      zero_(g);
    }
  }
}

namespace {
// Converts t (and its gradient) in place with `convert`.
template <class Convert>
void convert_in_place(const Tensor& t, Convert&& convert) {
  Tensor grad = t.grad();
  Tensor value = convert(t.detach());
  if (value.same(t) || value.impl()->storage == t.storage()) return;
  if (grad.defined()) t.set_grad(Tensor());  // dropped first: set_grad checks the dtype
  assign_in_place(t, value);
  if (grad.defined()) t.set_grad(convert(grad));
}
}  // namespace

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) convert_in_place(t, [&](const Tensor& x) { return to_device(x, device); });
  for (auto& [name, t] : named_buffers()) convert_in_place(t, [&](const Tensor& x) { return to_device(x, device); });
}

void Module::to(DType dtype) {
  TRIREME_CHECK(is_floating(dtype), "Module::to: parameters convert to floating dtypes only, not ", dtype);
  NoGradGuard no_grad;
  auto conv = [&](const Tensor& x) { return is_floating(x.dtype()) ? to_dtype(x, dtype) : x; };
  for (auto& [name, t] : named_parameters()) convert_in_place(t, conv);
  for (auto& [name, t] : named_buffers()) convert_in_place(t, conv);
}

void init_parameters(Module& root, uint64_t seed) {
  root.apply([&](Module& m) { m.reset_parameters(seed); });
}

void Module::set_rng(uint64_t seed, uint64_t counter) {
  rng_seed_ = seed;
  rng_counter_ = counter;
  for (auto& [name, m] : children_) m->set_rng(seed, counter);
}

std::vector<uint64_t> Module::rng_counters() const {
  std::vector<uint64_t> out{rng_counter_};
  for (const auto& [name, m] : children_) {
    const std::vector<uint64_t> sub = m->rng_counters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void Module::set_rng_counters(const std::vector<uint64_t>& counters) {
  size_t next = 0;
  std::function<void(Module&)> set = [&](Module& m) {
    TRIREME_CHECK(next < counters.size(), "Module.set_rng_counters: ", counters.size(), " counters for a larger tree");
    m.rng_counter_ = counters[next++];
    for (auto& [name, child] : m.children_) set(*child);
  };
  set(*this);
  TRIREME_CHECK(next == counters.size(), "Module.set_rng_counters: ", counters.size(), " counters for ", next,
                " modules");
}

}  // namespace trireme::nn
