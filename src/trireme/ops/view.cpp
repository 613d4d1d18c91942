// Shape ops. Views are Tensor::alias over the same storage; each records a backward that maps
// the gradient back to the input's shape.
#include "trireme/ops/view.h"

#include <numeric>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::TensorList;

namespace {

Shape infer_size(const char* op, const Shape& sizes, int64_t numel) {
  Shape out = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TRIREME_CHECK(infer < 0, op, ": only one dimension can be -1 in ", sizes);
      infer = int64_t(i);
    } else {
      TRIREME_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", sizes);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    TRIREME_CHECK(known != 0 && numel % known == 0, op, ": shape ", sizes, " is invalid for ", numel, " elements");
    out[size_t(infer)] = numel / known;
  }
  TRIREME_CHECK(shape_numel(out) == numel, op, ": shape ", sizes, " is invalid for ", numel, " elements");
  return out;
}

// Strides for viewing `x` with `sizes` without copying, if possible (PyTorch's computeStride logic:
// each chunk of new dims must map onto a run of old dims that is contiguous within itself).
bool view_strides(const Tensor& x, const Shape& sizes, Shape& strides) {
  const Shape& old_sizes = x.sizes();
  const Shape& old_strides = x.strides();
  strides.assign(sizes.size(), 0);
  if (x.numel() == 0) {
    strides = contiguous_strides(sizes);
    return true;
  }
  int64_t view_d = int64_t(sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[size_t(d)];
    if (d == 0 || (old_sizes[size_t(d - 1)] != 1 &&
                   old_strides[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[size_t(view_d)] == 1)) {
        strides[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= sizes[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) {
    // Remaining leading size-1 dims.
    for (; view_d >= 0; --view_d) {
      if (sizes[size_t(view_d)] != 1) return false;
      strides[size_t(view_d)] = 1;
    }
  }
  return true;
}

// Records a view op whose backward is `back(grad)`.
Tensor record_view(const char* op, const Tensor& x, Tensor out, std::function<Tensor(const Tensor&)> back) {
  if (any_requires_grad({&x})) {
    record(op, {&x}, {&out}, [back = std::move(back)](const TensorList& g) -> TensorList { return {back(g[0])}; });
  }
  return out;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& sizes) {
  TRIREME_CHECK(x.defined(), "view: the input is undefined");
  Shape s = infer_size("view", sizes, x.numel());
  Shape strides;
  TRIREME_CHECK(view_strides(x, s, strides), "view: cannot view a tensor of shape ", x.sizes(), " strides ",
                x.strides(), " as ", sizes, " without copying; use reshape");
  return record_view("view", x, x.alias(s, strides, x.offset()),
                     [in = x.sizes()](const Tensor& g) { return reshape(g, in); });
}

Tensor reshape(const Tensor& x, const Shape& sizes) {
  TRIREME_CHECK(x.defined(), "reshape: the input is undefined");
  Shape s = infer_size("reshape", sizes, x.numel());
  Shape strides;
  if (view_strides(x, s, strides)) {
    return record_view("reshape", x, x.alias(s, strides, x.offset()),
                       [in = x.sizes()](const Tensor& g) { return reshape(g, in); });
  }
  Tensor c = contiguous(x);  // records clone's backward
  return view(c, s);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  TRIREME_CHECK(s <= e, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape out(x.sizes().begin(), x.sizes().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= x.sizes()[size_t(d)];
  out.push_back(n);
  out.insert(out.end(), x.sizes().begin() + e + 1, x.sizes().end());
  return reshape(x, out);
}

Tensor permute(const Tensor& x, const Shape& dims) {
  TRIREME_CHECK(int64_t(dims.size()) == x.dim(), "permute: ", dims.size(), " dims ", dims, " for a tensor of shape ",
                x.sizes());
  Shape sizes(dims.size()), strides(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    TRIREME_CHECK(!seen[size_t(d)], "permute: dimension ", dims[i], " repeats in ", dims);
    seen[size_t(d)] = true;
    sizes[i] = x.sizes()[size_t(d)];
    strides[i] = x.strides()[size_t(d)];
    inverse[size_t(d)] = int64_t(i);
  }
  return record_view("permute", x, x.alias(sizes, strides, x.offset()),
                     [inverse](const Tensor& g) { return permute(g, inverse); });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  int64_t a = wrap_dim(dim0, x.dim(), "transpose"), b = wrap_dim(dim1, x.dim(), "transpose");
  Shape dims(size_t(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  if (x.dim() > 0) std::swap(dims[size_t(a)], dims[size_t(b)]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int64_t d = wrap_dim(dim, x.dim(), "slice");
  TRIREME_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.sizes()[size_t(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[size_t(d)] = (end - start + step - 1) / step;
  strides[size_t(d)] *= step;
  Tensor out = x.alias(sizes, strides, x.offset() + start * x.strides()[size_t(d)]);
  return record_view("slice", x, out, [in = x.sizes(), d, start, end, step](const Tensor& g) {
    Tensor full = zeros(in, g.dtype(), g.device());
    Tensor part = slice(full, d, start, end, step);
    copy_(part, g);
    return full;
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.sizes()[size_t(d)];
  TRIREME_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ", start + length,
                ") is out of bounds for dimension ", dim, " of size ", n, " (shape ", x.sizes(), ")");
  return slice(x, d, start, start + length, 1);
}

Tensor expand(const Tensor& x, const Shape& sizes) {
  TRIREME_CHECK(int64_t(sizes.size()) >= x.dim(), "expand: target ", sizes, " has fewer dims than shape ", x.sizes());
  Shape target = sizes;
  const size_t lead = sizes.size() - size_t(x.dim());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      TRIREME_CHECK(i >= lead, "expand: -1 is not allowed for a new leading dimension in ", sizes);
      target[i] = x.sizes()[i - lead];
    }
  }
  Tensor out = broadcast_view(x, target);
  return record_view("expand", x, out, [in = x.sizes()](const Tensor& g) { return sum_to(g, in); });
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0 || x.sizes()[size_t(d)] != 1) return x;
  Shape s = x.sizes();
  s.erase(s.begin() + d);
  return reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.sizes();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}

namespace {

// When the gradients of split's pieces already sit side by side in one dense buffer, exactly where
// the pieces sit in x (the attention backward writes dq, dk, dv so for a fused QKV projection:
// ops/attention.cpp), that buffer viewed as x's shape is the gradient of x: no copy. Else
// undefined. Gradients are never written in place (the engine adds out of place), so sharing
// their storage is safe.
Tensor pieces_in_place(const TensorList& g, const Shape& in, int64_t d, const std::vector<int64_t>& sizes) {
  for (const Tensor& gi : g)
    if (!gi.defined() || gi.storage().get() != g[0].storage().get() || gi.strides() != g[0].strides()) return Tensor();
  int64_t start = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i].offset() != g[0].offset() + start * g[0].strides()[size_t(d)]) return Tensor();
    start += sizes[i];
  }
  Tensor whole = g[0].alias(in, g[0].strides(), g[0].offset());
  return whole.is_contiguous() ? whole : Tensor();
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TRIREME_CHECK(s >= 0, "split: negative size in ", sizes);
    total += s;
  }
  TRIREME_CHECK(total == x.sizes()[size_t(d)], "split: sizes ", sizes, " add up to ", total, " but dimension ", dim,
                " of shape ", x.sizes(), " is ", x.sizes()[size_t(d)]);
  // One node for all the pieces, not one narrow each: narrow's backward makes a zero tensor of
  // x's full shape per piece and the engine then adds them up (for GPT's fused QKV projection:
  // three (B, T, 3C) zero fills and two (B, T, 3C) additions per layer). Here the backward writes
  // each piece's gradient into its slice of one buffer, and zeros only a piece that got none.
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape piece = x.sizes();
    piece[size_t(d)] = s;
    out.push_back(x.alias(piece, x.strides(), x.offset() + start * x.strides()[size_t(d)]));
    start += s;
  }
  if (any_requires_grad({&x})) {
    std::vector<Tensor*> outs;
    for (Tensor& t : out) outs.push_back(&t);
    autograd::record("split", std::vector<Tensor>{x}, outs, [in = x.sizes(), d, sizes](const TensorList& g) -> TensorList {
      const Tensor* some = nullptr;
      for (const Tensor& gi : g) some = some ? some : (gi.defined() ? &gi : nullptr);
      if (!some) return {Tensor()};
      if (Tensor whole = pieces_in_place(g, in, d, sizes); whole.defined()) return {whole};
      Tensor full = Tensor::empty(in, some->dtype(), some->device());
      int64_t at = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        Tensor part = narrow(full, d, at, sizes[i]);  // backward runs without grad mode: a plain view
        if (g[i].defined()) {
          copy_(part, g[i]);
        } else {
          zero_(part);
        }
        at += sizes[i];
      }
      return {full};
    });
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  TRIREME_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  int64_t n = x.sizes()[size_t(wrap_dim(dim, x.dim(), "split"))];
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < n; s += split_size) sizes.push_back(std::min(split_size, n - s));
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TRIREME_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  int64_t n = x.sizes()[size_t(wrap_dim(dim, x.dim(), "chunk"))];
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  TRIREME_CHECK(!xs.empty(), "cat: no tensors given");
  const Tensor& first = xs[0];
  int64_t d = wrap_dim(dim, first.dim(), "cat");
  Shape out_shape = first.sizes();
  out_shape[size_t(d)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    TRIREME_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype() && t.device() == first.device(),
                  "cat: tensor ", i, " ", t.str(), " does not match tensor 0 ", first.str());
    for (int64_t k = 0; k < t.dim(); ++k) {
      TRIREME_CHECK(k == d || t.sizes()[size_t(k)] == first.sizes()[size_t(k)], "cat: tensor ", i, " has shape ",
                    t.sizes(), " but tensor 0 has ", first.sizes(), " (only dimension ", dim, " may differ)");
    }
    out_shape[size_t(d)] += t.sizes()[size_t(d)];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  {
    autograd::NoGradGuard no_grad;
    int64_t start = 0;
    for (const Tensor& t : xs) {
      Tensor part = narrow(out, d, start, t.sizes()[size_t(d)]);
      copy_(part, t);
      start += t.sizes()[size_t(d)];
      sizes.push_back(t.sizes()[size_t(d)]);
    }
  }
  if (any_requires_grad(xs)) {
    record("cat", xs, {&out}, [sizes, d](const TensorList& g) -> TensorList { return split(g[0], sizes, d); });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  TRIREME_CHECK(!xs.empty(), "stack: no tensors given");
  int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    TRIREME_CHECK(xs[i].sizes() == xs[0].sizes(), "stack: tensor ", i, " has shape ", xs[i].sizes(),
                  " but tensor 0 has ", xs[0].sizes());
    parts.push_back(unsqueeze(xs[i], d));
  }
  return cat(parts, d);
}

}  // namespace trireme
