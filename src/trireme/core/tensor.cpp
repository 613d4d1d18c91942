// Tensor metadata, element access and shape helpers.
#include "trireme/core/tensor.h"

#include <cstring>
#include <sstream>

#include "trireme/core/checked.h"
#include "trireme/core/trace_hook.h"

namespace trireme {

int64_t shape_numel(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n = checked_mul(n, s, "the element count of shape ", sizes);
  return n;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s = checked_mul(s, std::max<int64_t>(sizes[i], 1), "the strides of shape ", sizes);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t lo = -std::max<int64_t>(ndim, 1), hi = std::max<int64_t>(ndim, 1) - 1;
  TRIREME_CHECK(dim >= lo && dim <= hi, op, ": dimension ", dim, " is out of range for a ", ndim,
                "-D tensor (expected ", lo, "..", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TRIREME_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                  " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
// A contiguous tensor of `sizes` over the storage make_storage(nbytes) returns.
template <class MakeStorage>
Tensor contiguous_over(const char* op, const Shape& sizes, DType dtype, MakeStorage&& make_storage) {
  for (int64_t s : sizes) TRIREME_CHECK(s >= 0, op, ": negative size in shape ", sizes);
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->numel = shape_numel(sizes);
  impl->dtype = dtype;
  const int64_t nbytes = checked_mul(impl->numel, int64_t(dtype_size(dtype)), op, ": the byte count of a ",
                                     dtype_name(dtype), " tensor of shape ", sizes);
  impl->storage = make_storage(size_t(nbytes));
  return Tensor(std::move(impl));
}
}  // namespace

Tensor Tensor::empty(const Shape& sizes, DType dtype, Device device) {
  return contiguous_over("empty", sizes, dtype, [&](size_t nbytes) { return std::make_shared<Storage>(nbytes, device); });
}

Tensor Tensor::borrowed(void* data, const Shape& sizes, DType dtype, Device device) {
  return contiguous_over("borrowed", sizes, dtype, [&](size_t nbytes) {
    return std::make_shared<Storage>(Storage::Borrowed{}, data, nbytes, device);
  });
}

#define TRIREME_REQUIRE_DEFINED(what) \
  TRIREME_CHECK(impl_ != nullptr, "Tensor::" what ": the tensor is undefined")

const Shape& Tensor::sizes() const { TRIREME_REQUIRE_DEFINED("sizes"); return impl_->sizes; }
const Shape& Tensor::strides() const { TRIREME_REQUIRE_DEFINED("strides"); return impl_->strides; }
int64_t Tensor::size(int64_t d) const { return sizes()[size_t(wrap_dim(d, dim(), "size"))]; }
int64_t Tensor::stride(int64_t d) const { return strides()[size_t(wrap_dim(d, dim(), "stride"))]; }
int64_t Tensor::dim() const { return int64_t(sizes().size()); }
int64_t Tensor::numel() const { TRIREME_REQUIRE_DEFINED("numel"); return impl_->numel; }
int64_t Tensor::offset() const { TRIREME_REQUIRE_DEFINED("offset"); return impl_->offset; }
DType Tensor::dtype() const { TRIREME_REQUIRE_DEFINED("dtype"); return impl_->dtype; }
Device Tensor::device() const { TRIREME_REQUIRE_DEFINED("device"); return impl_->storage->device(); }
const StoragePtr& Tensor::storage() const { TRIREME_REQUIRE_DEFINED("storage"); return impl_->storage; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const Shape& sz = sizes();
  const Shape& st = strides();
  for (size_t i = sz.size(); i-- > 0;) {
    if (sz[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  TRIREME_REQUIRE_DEFINED("data_ptr");
  TRIREME_CHECK(!impl_->storage->released(), "Tensor::data_ptr: the memory of this ", str(),
                " was released (a ZeRO-3 parameter used outside its all-gather; Note [released storage])");
  if (StorageObserver* o = storage_observer()) o->on_host_access(*impl_->storage, "Tensor::data_ptr()");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * int64_t(element_size());
}

double Tensor::at(const Shape& index) const {
  if (StorageObserver* o = storage_observer(); o && defined()) o->on_host_access(*impl_->storage, "Tensor::at()");
  TRIREME_CHECK(device().is_cpu(), "Tensor::at: the tensor is on ", device(), "; copy it to the CPU first");
  TRIREME_CHECK(int64_t(index.size()) == dim(), "Tensor::at: index ", index, " has ", index.size(),
                " entries for a tensor of shape ", sizes());
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    TRIREME_CHECK(index[i] >= 0 && index[i] < sizes()[i], "Tensor::at: index ", index,
                  " is out of range for shape ", sizes());
    off += index[i] * strides()[i];
  }
  const char* base = static_cast<const char*>(data_ptr()) + off * int64_t(element_size());
  return dispatch_dtype(dtype(), [&]<class T>() {
    T v;
    std::memcpy(&v, base, sizeof(T));
    return double(acc_t<T>(v));
  });
}

double Tensor::item() const {
  if (StorageObserver* o = storage_observer(); o && defined()) o->on_host_access(*impl_->storage, "Tensor::item()");
  TRIREME_CHECK(numel() == 1, "Tensor::item: expected one element, got shape ", sizes());
  return at(Shape(size_t(dim()), 0));
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  TRIREME_CHECK(device().is_cpu(), "Tensor::to_vector: the tensor is on ", device());
  std::vector<T> out;
  out.reserve(size_t(numel()));
  if (numel() == 0) return out;
  Shape idx(size_t(dim()), 0);
  for (int64_t n = 0; n < numel(); ++n) {
    out.push_back(T(at(idx)));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < sizes()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;

Tensor Tensor::alias(const Shape& sizes, const Shape& strides, int64_t offset) const {
  TRIREME_REQUIRE_DEFINED("alias");
  TRIREME_CHECK(sizes.size() == strides.size(), "Tensor::alias: sizes ", sizes, " and strides ",
                strides, " differ in length");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->numel = shape_numel(sizes);
  impl->dtype = impl_->dtype;
  // Bounds: the view must stay inside the storage.
  for (int64_t s : sizes) TRIREME_CHECK(s >= 0, "Tensor::alias: negative size in shape ", sizes);
  if (impl->numel > 0) {
    int64_t lo = offset, hi = offset;
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t span = checked_mul(sizes[i] - 1, strides[i], "Tensor::alias: the extent of a view of shape ", sizes,
                                 " strides ", strides);
      int64_t& end = span < 0 ? lo : hi;
      end = checked_add(end, span, "Tensor::alias: the extent of a view of shape ", sizes, " strides ", strides);
    }
    const int64_t end_bytes = checked_mul(checked_add(hi, int64_t(1), "Tensor::alias: the view's end"),
                                          int64_t(element_size()), "Tensor::alias: the view's end in bytes");
    TRIREME_CHECK(lo >= 0 && end_bytes <= int64_t(impl_->storage->nbytes()),
                  "Tensor::alias: a view of shape ", sizes, " strides ", strides, " offset ", offset,
                  " reaches outside its storage of ", impl_->storage->nbytes(), " bytes");
  }
  return Tensor(std::move(impl));
}

void Tensor::set_data(const Tensor& view) const {
  TRIREME_REQUIRE_DEFINED("set_data");
  TRIREME_CHECK(view.defined() && view.sizes() == sizes() && view.dtype() == dtype() && view.device() == device(),
                "Tensor::set_data: ", view.defined() ? view.str() : std::string("an undefined tensor"),
                " cannot stand in for ", str());
  impl_->storage = view.impl_->storage;
  impl_->strides = view.impl_->strides;
  impl_->offset = view.impl_->offset;
}

Tensor Tensor::detach() const { return alias(sizes(), strides(), offset()); }

uint64_t Tensor::version() const { return storage()->version(); }
void Tensor::bump_version() const { storage()->bump_version(); }

bool Tensor::requires_grad() const {
  return impl_ && impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  TRIREME_REQUIRE_DEFINED("set_requires_grad");
  TRIREME_CHECK(is_leaf(), "set_requires_grad: only leaf tensors can be changed; this one was made by ",
                "an op (use detach() to make a new leaf)");
  TRIREME_CHECK(!requires_grad || is_floating(dtype()), "set_requires_grad: only floating-point tensors ",
                "can require gradients, this one is ", dtype_name(dtype()));
  impl_->autograd_meta().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_ || !impl_->autograd || !impl_->autograd->grad_fn; }

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  if (!impl_ || !impl_->autograd) return undefined;
  return impl_->autograd->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  TRIREME_REQUIRE_DEFINED("set_grad");
  if (grad.defined()) {
    TRIREME_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
                  "set_grad: gradient ", grad.str(), " does not match the tensor ", str());
  }
  impl_->autograd_meta().grad = grad;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  if (!impl_ || !impl_->autograd) return none;
  return impl_->autograd->grad_fn;
}

uint32_t Tensor::output_nr() const { return impl_ && impl_->autograd ? impl_->autograd->output_nr : 0; }

void Tensor::register_grad_ready_hook(GradReadyHook hook) const {
  TRIREME_REQUIRE_DEFINED("register_grad_ready_hook");
  TRIREME_CHECK(is_leaf() && requires_grad(), "register_grad_ready_hook: only leaves that require grad ",
                "have a gradient to be ready");
  impl_->autograd_meta().grad_ready_hooks.push_back(std::move(hook));
}

std::string Tensor::str() const {
  if (!impl_) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype()) << ", " << device() << ", " << sizes() << ")";
  return os.str();
}

}  // namespace trireme
