// Nodes, saved tensors, leaf accumulation and the recording helper used by every op.
#include "trireme/autograd/node.h"

#include <atomic>

#include "trireme/autograd/grad_arithmetic.h"
#include "trireme/autograd/grad_mode.h"

namespace trireme::autograd {
namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

Node::Node(std::string name, uint32_t num_outputs)
    : name_(std::move(name)), num_outputs_(num_outputs), sequence_nr_(next_sequence_nr++) {}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  if (t.impl()->autograd && t.impl()->autograd->recompute) {
    recompute_ = t.impl()->autograd->recompute;
    return;
  }
  tensor_ = t.detach();
  version_ = t.version();
}

const Tensor& SavedTensor::unpack(const std::string& node_name) const {
  if (recompute_) {
    if (!recomputed_.defined()) recomputed_ = recompute_();
    return recomputed_;
  }
  TRIREME_CHECK(tensor_.defined(), node_name, ": a saved tensor was already freed (call backward with ",
                "retain_graph=true to backward through the graph a second time)");
  TRIREME_CHECK(tensor_.version() == version_, node_name, ": a tensor of shape ", tensor_.sizes(),
                " saved for the backward pass was modified in place (version ", version_, " -> ",
                tensor_.version(), "); clone it before modifying it");
  return tensor_;
}

TensorList LambdaNode::apply(TensorList&& grad_outputs) {
  TRIREME_CHECK(fn_ != nullptr, name(), ": trying to backward through the graph a second time, but ",
                "its saved tensors were freed; use retain_graph=true on the first backward");
  return fn_(grad_outputs);
}

namespace {

// Whether `g` can become a leaf's .grad as it is: this handle is the only one to the tensor and
// to its memory, which it covers exactly and which the allocator owns. A weight's gradient under
// autocast is such a tensor (the f32 copy that the cast's backward made): copying it again would
// cost a read and a write of every gradient each step.
bool sole_owner_of_its_memory(const Tensor& g, DType dtype) {
  const StoragePtr& storage = g.storage();
  return g.dtype() == dtype && g.impl_ptr().use_count() == 1 && storage.use_count() == 1 && storage->owned() &&
         g.is_contiguous() && g.offset() == 0 && storage->nbytes() == size_t(g.numel()) * g.element_size() &&
         g.grad_fn() == nullptr;
}

}  // namespace

AccumulateGrad::AccumulateGrad(const Tensor& leaf) : Node("AccumulateGrad", 1), leaf_(leaf.impl_ptr()) {}

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  auto impl = leaf_.lock();
  if (!impl || !grad_outputs[0].defined()) return {};
  Tensor leaf(impl);
  const Tensor& incoming = grad_outputs[0];
  TRIREME_CHECK(incoming.sizes() == leaf.sizes(), "AccumulateGrad: gradient of shape ", incoming.sizes(),
                " for a leaf of shape ", leaf.sizes());
  const Tensor& existing = leaf.grad();
  if (existing.defined()) {
    grad_accumulate(const_cast<Tensor&>(existing), incoming);  // in place: .grad may be a view into a bucket
  } else if (sole_owner_of_its_memory(incoming, leaf.dtype())) {
    leaf.set_grad(incoming);  // nothing else can see it: keep it rather than copy it
  } else {
    // A fresh copy: `incoming` may alias another gradient (add's backward passes one tensor on).
    leaf.set_grad(grad_copy(incoming, leaf.dtype()));
  }
  Tensor grad = leaf.grad();
  for (auto& hook : impl->autograd_meta().grad_ready_hooks) hook(grad);
  return {};
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t && t->requires_grad()) return true;
  }
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.requires_grad()) return true;
  }
  return false;
}

Edge edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  AutogradMeta& meta = t.impl()->autograd_meta();
  auto acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace {
void record_impl(const char* name, const std::vector<const Tensor*>& inputs,
                 const std::vector<Tensor*>& outputs, BackwardFn fn) {
  auto node = std::make_shared<LambdaNode>(name, uint32_t(outputs.size()), std::move(fn));
  node->next_edges().reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges().push_back(t ? edge_for(*t) : Edge{});
  uint32_t nr = 0;
  for (Tensor* out : outputs) {
    AutogradMeta& meta = out->impl()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = nr++;
  }
}
}  // namespace

void record(const char* name, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs, BackwardFn fn) {
  record_impl(name, std::vector<const Tensor*>(inputs), std::vector<Tensor*>(outputs), std::move(fn));
}

void record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn fn) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  record_impl(name, ptrs, outputs, std::move(fn));
}

}  // namespace trireme::autograd
