// Module: the base of every layer. Holds named parameters, buffers and child modules in
// registration order, and walks them recursively with dotted names ("h.0.attn.c_attn.weight").
//
//   class Affine : public nn::Module {
//    public:
//     Affine(int64_t d) : Module("Affine") {
//       scale = register_parameter("scale", ones({d}));
//       shift = register_parameter("shift", zeros({d}));
//     }
//     Tensor forward(const Tensor& x) { return x * scale + shift; }
//     Tensor scale, shift;   // handles sharing the registered tensors
//   };
//
//   auto m = std::make_shared<Affine>(4);
//   for (auto& [name, p] : m->named_parameters()) ...;   // "scale", "shift"
//   m->load_state_dict(io::load_safetensors("affine.safetensors").tensors);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::nn {

// Ordered (name, tensor) pairs: what state_dict() returns and save_safetensors() takes.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Note [parameters are shared handles]
// A layer keeps Tensor members that share the TensorImpl registered with the module, so the
// module, the layer's forward and an optimizer all see one tensor. Operations that change a
// parameter (load_state_dict, to(dtype), to(device)) therefore write into that TensorImpl
// in place rather than swapping the handle: every holder sees the new value, and the
// parameter stays a leaf that requires grad.

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // Registration (names are local: no dots, unique among this module's entries).
  // A parameter is made a leaf that requires grad (floating dtypes only).
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Recursive walks, in registration order, children after this module's own entries.
  // A tensor registered under two names (tied weights) appears once, under its first name.
  NamedTensors named_parameters(const std::string& prefix = "") const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers(const std::string& prefix = "") const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // This module (name = prefix) and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  // Lookups by local name; throw naming the module and the name when absent.
  Tensor& parameter(const std::string& name);
  std::shared_ptr<Module> child(const std::string& name) const;

  // This module's dotted name from the root it was registered under ("" for a root).
  std::string qualified_name() const;

  // Mode, recursive: dropout draws masks only in training mode.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Parameters then buffers, with dotted names. The tensors are the live ones (not copies).
  NamedTensors state_dict() const;
  // Copies values into the existing tensors (see Note [parameters are shared handles]).
  // Shapes must match; values are converted to the parameter's dtype only if `convert_dtype`,
  // otherwise a dtype mismatch is an error. With `strict`, keys missing from `state` and keys
  // in `state` the module does not have are errors; the message lists all of them.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true,
                       bool convert_dtype = false);
  void load_state_dict(const NamedTensors& state, bool strict = true, bool convert_dtype = false);

  // Calls fn on every descendant, then on this module (as PyTorch's apply).
  void apply(const std::function<void(Module&)>& fn);

  // Re-draws this module's own parameters (not its children's) from `seed`, keyed by their
  // qualified names (nn/init.h), so the result does not depend on the layout. Layers override
  // it with their default scheme; init_parameters(root, seed) runs it over a whole tree.
  virtual void reset_parameters(uint64_t seed) {}

  int64_t num_parameters() const;  // elements, tied tensors counted once
  void zero_grad(bool set_to_none = true);

  // Converts every parameter and buffer in place (see Note [parameters are shared handles]).
  // to(dtype) changes floating tensors only; gradients are converted alongside.
  void to(Device device);
  void to(DType dtype);

  // Random state for layers that draw (dropout), recursive. A layer derives its stream from
  // its qualified name and a per-module call counter, so its masks do not depend on what
  // other layers draw or on how the model is split across devices.
  void set_rng(uint64_t seed, uint64_t counter = 0);
  uint64_t rng_seed() const { return rng_seed_; }
  // Every module's draw counter in this subtree (pre-order), and setting them back: what a
  // replayed forward needs to draw the same masks again (nn/checkpoint.h).
  std::vector<uint64_t> rng_counters() const;
  void set_rng_counters(const std::vector<uint64_t>& counters);

 protected:
  // The next counter for this module's draws (one per forward call).
  uint64_t next_rng_counter() { return rng_counter_++; }
  // The counter the next draw would take, without taking it (Note [dropout keyed by global sample]).
  uint64_t peek_rng_counter() const { return rng_counter_; }
  // A traced step's replays take the counter as the traced draw did (nn/dropout.h).
  friend void bind_dropout_stream(Module& module, uint64_t counter, bool advances, uint64_t stream);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  void collect_parameters(const std::string& prefix, NamedTensors& out, std::unordered_set<const TensorImpl*>& seen) const;
  void collect_buffers(const std::string& prefix, NamedTensors& out, std::unordered_set<const TensorImpl*>& seen) const;

  std::string type_name_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  Module* parent_ = nullptr;  // the module that registered this one (it owns this one)
  std::string local_name_;
  bool training_ = true;
  uint64_t rng_seed_ = 0;
  uint64_t rng_counter_ = 0;
};

// Calls reset_parameters(seed) on every module of the tree (names are taken from `root`).
void init_parameters(Module& root, uint64_t seed);

// Joins dotted names, skipping empty parts: join_name("h.0", "ln_1") == "h.0.ln_1".
std::string join_name(const std::string& prefix, const std::string& name);

// Replaces t's storage and layout with `value`'s, keeping its identity and autograd leaf state.
// For loaders and conversions; value must be a plain (non-autograd) tensor.
void assign_in_place(const Tensor& t, const Tensor& value);

}  // namespace trireme::nn
