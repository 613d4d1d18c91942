// Tensor: a handle to view metadata (sizes, strides, offset, dtype) over a shared Storage,
// plus the autograd metadata that ops and the engine read. See Note [views and versions].
//
//   Tensor x = Tensor::empty({2, 3}, DType::f32, Device::cpu());
//   float* p = x.data<float>();          // contiguous here, so p[i] is element i
//   Tensor y = x.alias({3, 2}, {1, 3}, 0);  // a transpose-like view sharing x's storage
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trireme/core/device.h"
#include "trireme/core/dtype.h"
#include "trireme/core/error.h"
#include "trireme/core/storage.h"

namespace trireme {

using Shape = std::vector<int64_t>;

namespace autograd {
class Node;
}

class Tensor;
struct TensorImpl;
using GradReadyHook = std::function<void(Tensor& grad)>;

// Note [views and versions]
// A view shares its base's Storage; the version counter lives on the Storage, so an
// in-place write through any view (or the base, or a detach()ed alias) bumps one counter
// that every saved copy of any of them can check. Autograd refuses a saved tensor whose
// version moved since it was saved.

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // An uninitialised contiguous tensor (the only factory in core; see ops/factory.h).
  static Tensor empty(const Shape& sizes, DType dtype, Device device = Device::cpu());
  // A contiguous tensor over memory this library does not own (Storage::Borrowed): valid only
  // while the owner keeps that memory; e.g. a collective's staging buffer (Note [staged all-gather]).
  static Tensor borrowed(void* data, const Shape& sizes, DType dtype, Device device);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // Metadata.
  const Shape& sizes() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t offset() const;             // in elements, into the storage
  DType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  size_t element_size() const { return dtype_size(dtype()); }
  const StoragePtr& storage() const;

  // Data access. data<T>() checks T against the dtype; both include the view's offset.
  void* data_ptr() const;
  template <class T> T* data() const {
    TRIREME_CHECK(dtype_v<T> == dtype(), "Tensor::data: requested ", dtype_name(dtype_v<T>),
                  " but the tensor is ", dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }
  // CPU element access through strides, converted to double. For tests and small reads.
  double at(const Shape& index) const;
  double item() const;  // a one-element tensor's value
  template <class T> std::vector<T> to_vector() const;  // CPU only; any layout

  // Views without autograd (ops/view.h records autograd on top of these).
  Tensor alias(const Shape& sizes, const Shape& strides, int64_t offset) const;
  Tensor detach() const;  // same storage and version counter, no autograd history
  // Makes this tensor (every handle to it, its autograd identity kept) a view of `view`'s memory
  // instead of its own: same shape, dtype and device. For moving parameters into one flat
  // buffer (ZeRO-3's units); the values are the caller's to copy first.
  void set_data(const Tensor& view) const;

  // Versions (see Note [views and versions]).
  uint64_t version() const;
  void bump_version() const;

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;
  const Tensor& grad() const;  // undefined until a backward pass reaches it
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // Runs after this leaf's gradient has been fully accumulated in a backward pass.
  void register_grad_ready_hook(GradReadyHook hook) const;
  // Defined in autograd/engine.cpp: backward from this tensor (a scalar unless grad is given).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  std::string str() const;  // dtype, device, shape (not the values)

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that accumulates .grad
  std::vector<GradReadyHook> grad_ready_hooks;
  // Selective recomputation (autograd/checkpoint.h): how to compute this tensor again; the ops
  // that save it for the backward keep this instead of its memory.
  std::function<Tensor()> recompute;
};

struct TensorImpl {
  StoragePtr storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t offset = 0;
  int64_t numel = 0;
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMeta> autograd;  // created on first use

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

// Helpers on shapes, used by ops and kernels.
int64_t shape_numel(const Shape& sizes);
Shape contiguous_strides(const Shape& sizes);
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);  // -1 -> ndim-1, with a range check
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace trireme
