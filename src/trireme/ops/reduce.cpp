// Reductions and their backwards.
#include "trireme/ops/reduce.h"

#include <algorithm>

#include "trireme/autograd/node.h"
#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/view.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// Which dims are reduced (all of them for an empty list), with range and duplicate checks.
std::vector<bool> reduced_mask(const char* op, const Tensor& x, const Shape& dims) {
  std::vector<bool> mask(size_t(x.dim()), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), op);
    if (x.dim() == 0) continue;
    TRIREME_CHECK(!mask[size_t(w)], op, ": dimension ", d, " appears twice in ", dims);
    mask[size_t(w)] = true;
  }
  return mask;
}

Shape keepdim_shape(const Tensor& x, const std::vector<bool>& mask) {
  Shape s = x.sizes();
  for (size_t d = 0; d < s.size(); ++d) {
    if (mask[d]) s[d] = 1;
  }
  return s;
}

Shape squeezed_shape(const Shape& keep, const std::vector<bool>& mask) {
  Shape s;
  for (size_t d = 0; d < keep.size(); ++d) {
    if (!mask[d]) s.push_back(keep[d]);
  }
  return s;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  TRIREME_CHECK(x.defined(), "sum: the input is undefined");
  auto mask = reduced_mask("sum", x, dims);
  Shape keep = keepdim_shape(x, mask);
  Tensor out = Tensor::empty(keep, x.dtype(), x.device());
  find_kernel<SumKernel>("sum", x.device(), x.dtype())(x, out);
  if (!keepdim) out = out.alias(squeezed_shape(keep, mask), contiguous_strides(squeezed_shape(keep, mask)), 0);
  if (any_requires_grad({&x})) {
    record("sum", {&x}, {&out}, [keep, in_shape = x.sizes()](const TensorList& g) -> TensorList {
      return {contiguous(expand(reshape(g[0], keep), in_shape))};
    });
  }
  return out;
}

Tensor sum_squares(const Tensor& x) {
  TRIREME_CHECK(x.defined(), "sum_squares: the input is undefined");
  TRIREME_CHECK(is_floating(x.dtype()), "sum_squares: needs a floating dtype, got ", x.dtype());
  Tensor xc = contiguous(x.detach());
  Tensor out = Tensor::empty({}, DType::f64, x.device());
  find_kernel<SumSquaresKernel>("sum_squares", x.device(), x.dtype())(xc, out);
  if (any_requires_grad({&x})) {
    record("sum_squares", {&x}, {&out}, [sx = SavedTensor(xc), dtype = x.dtype()](const TensorList& g) -> TensorList {
      const Tensor xv = sx.unpack("sum_squares");
      return {to_dtype(mul(to_dtype(xv, DType::f64), mul(g[0], 2.0)), dtype)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  auto mask = reduced_mask("mean", x, dims);
  int64_t count = 1;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) count *= x.sizes()[d];
  }
  TRIREME_CHECK(is_floating(x.dtype()), "mean: needs a floating dtype, got ", x.dtype());
  return mul(sum(x, dims, keepdim), 1.0 / double(std::max<int64_t>(count, 1)));
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  auto mask = reduced_mask("var", x, dims);
  int64_t count = 1;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) count *= x.sizes()[d];
  }
  TRIREME_CHECK(count - correction > 0, "var: ", count, " elements with correction ", correction,
                " leave no degrees of freedom");
  Tensor centered = sub(x, mean(x, dims, true));
  return mul(sum(mul(centered, centered), dims, keepdim), 1.0 / double(count - correction));
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  TRIREME_CHECK(x.defined() && x.dim() > 0, "max: needs a tensor with at least one dimension");
  int64_t d = wrap_dim(dim, x.dim(), "max");
  TRIREME_CHECK(x.sizes()[size_t(d)] > 0, "max: dimension ", dim, " of shape ", x.sizes(), " is empty");
  Shape keep = x.sizes();
  keep[size_t(d)] = 1;
  Tensor values = Tensor::empty(keep, x.dtype(), x.device());
  Tensor indices = Tensor::empty(keep, DType::i64, x.device());
  find_kernel<MaxDimKernel>("max_dim", x.device(), x.dtype())(x, d, values, indices);
  if (!keepdim) {
    Shape s = keep;
    s.erase(s.begin() + d);
    values = values.alias(s, contiguous_strides(s), 0);
    indices = indices.alias(s, contiguous_strides(s), 0);
  }
  if (any_requires_grad({&x})) {
    SavedTensor si(indices);
    record("max", {&x}, {&values}, [si, keep, d, in_shape = x.sizes()](const TensorList& g) -> TensorList {
      Tensor grad_in = zeros(in_shape, g[0].dtype(), g[0].device());
      Tensor gk = contiguous(reshape(g[0], keep));
      Tensor ik = reshape(si.unpack("max"), keep);
      find_kernel<MaxBackwardKernel>("max_backward", grad_in.device(), grad_in.dtype())(gk, ik, d, grad_in);
      return {grad_in};
    });
  }
  return {values, indices};
}

Tensor max(const Tensor& x) {
  TRIREME_CHECK(x.defined() && x.numel() > 0, "max: needs a non-empty tensor");
  return max(reshape(x, {x.numel()}), 0, false).first;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  const int64_t lead = x.dim() - int64_t(shape.size());
  TRIREME_CHECK(lead >= 0, "sum_to: cannot reduce shape ", x.sizes(), " to ", shape);
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else {
      int64_t target = shape[size_t(d - lead)];
      TRIREME_CHECK(target == x.sizes()[size_t(d)] || target == 1, "sum_to: cannot reduce shape ", x.sizes(),
                    " to ", shape);
      if (target == 1 && x.sizes()[size_t(d)] != 1) dims.push_back(d);
    }
  }
  Tensor r = dims.empty() ? x : sum(x, dims, true);
  return reshape(r, shape);
}

}  // namespace trireme
