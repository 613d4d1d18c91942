// layer_norm and rms_norm over the last dim: checks, fused kernels, and their backwards.
#include "trireme/autograd/node.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/op_count.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

void check_norm_args(const char* op, const Tensor& x, const Tensor& param, const char* param_name, double eps) {
  TRIREME_CHECK(x.defined(), op, ": the input is undefined");
  TRIREME_CHECK(is_floating(x.dtype()), op, ": needs a floating input, got ", x.dtype(), " with shape ", x.sizes());
  TRIREME_CHECK(x.dim() >= 1, op, ": needs at least one dimension, got a scalar");
  TRIREME_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  if (!param.defined()) return;
  TRIREME_CHECK(param.dim() == 1 && param.size(0) == x.size(-1), op, ": ", param_name, " of shape ", param.sizes(),
                " does not match the last dim of input ", x.sizes(), " (expected [", x.size(-1), "])");
  TRIREME_CHECK(param.dtype() == x.dtype(), op, ": ", param_name, " is ", param.dtype(), " but the input is ",
                x.dtype());
  TRIREME_CHECK(param.device() == x.device(), op, ": ", param_name, " is on ", param.device(), " but the input on ",
                x.device());
}

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? contiguous(t.detach()) : Tensor(); }

// Row statistics: one value per row of x's leading dims.
Shape stat_shape(const Tensor& x) {
  Shape s = x.sizes();
  s.pop_back();
  return s;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (auto c = autocast_f32_args({x, weight, bias})) return layer_norm((*c)[0], (*c)[1], (*c)[2], eps);
  check_norm_args("layer_norm", x, weight, "weight", eps);
  check_norm_args("layer_norm", x, bias, "bias", eps);
  Tensor xc = contiguous(x.detach()), wc = contiguous_or_undefined(weight), bc = contiguous_or_undefined(bias);
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor mean = Tensor::empty(stat_shape(x), stat_dtype(x.dtype()), x.device());
  Tensor rstd = Tensor::empty(stat_shape(x), stat_dtype(x.dtype()), x.device());
  op_count_memory(2 * double(x.numel()) * double(dtype_size(x.dtype())));
  Tensor no_sum;
  find_kernel<LayerNormKernel>("layer_norm", x.device(), x.dtype())(xc, Tensor(), wc, bc, eps, y, no_sum, mean, rstd);
  if (any_requires_grad({&x, &weight, &bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
               need_b = bias.defined() && bias.requires_grad();
    record("layer_norm", {&x, &weight, &bias}, {&y},
           [=, sx = SavedTensor(xc), sw = SavedTensor(wc)](const TensorList& g) -> TensorList {
             const Tensor& xv = sx.unpack("layer_norm");
             Tensor gc = contiguous(g[0]);
             Tensor gx = need_x ? Tensor::empty(xv.sizes(), xv.dtype(), xv.device()) : Tensor();
             Tensor gw = need_w ? Tensor::empty({xv.size(-1)}, xv.dtype(), xv.device()) : Tensor();
             Tensor gb = need_b ? Tensor::empty({xv.size(-1)}, xv.dtype(), xv.device()) : Tensor();
             Tensor no_edge;
             op_count_memory(3 * double(xv.numel()) * double(dtype_size(xv.dtype())));
             find_kernel<LayerNormBackwardKernel>("layer_norm_backward", xv.device(), xv.dtype())(
                 gc, xv, sw.defined() ? sw.unpack("layer_norm") : Tensor(), mean, rstd, Tensor(), gx, no_edge, gw, gb);
             return {gx, gw, gb};
           });
  }
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  if (auto c = autocast_f32_args({x, weight})) return rms_norm((*c)[0], (*c)[1], eps);
  check_norm_args("rms_norm", x, weight, "weight", eps);
  Tensor xc = contiguous(x.detach()), wc = contiguous_or_undefined(weight);
  Tensor y = Tensor::empty(x.sizes(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty(stat_shape(x), stat_dtype(x.dtype()), x.device());
  Tensor no_sum;
  find_kernel<RmsNormKernel>("rms_norm", x.device(), x.dtype())(xc, Tensor(), wc, eps, y, no_sum, rstd);
  if (any_requires_grad({&x, &weight})) {
    const bool need_x = x.requires_grad(), need_w = weight.defined() && weight.requires_grad();
    record("rms_norm", {&x, &weight}, {&y},
           [=, sx = SavedTensor(xc), sw = SavedTensor(wc)](const TensorList& g) -> TensorList {
             const Tensor& xv = sx.unpack("rms_norm");
             Tensor gc = contiguous(g[0]);
             Tensor gx = need_x ? Tensor::empty(xv.sizes(), xv.dtype(), xv.device()) : Tensor();
             Tensor gw = need_w ? Tensor::empty({xv.size(-1)}, xv.dtype(), xv.device()) : Tensor();
             Tensor no_edge;
             find_kernel<RmsNormBackwardKernel>("rms_norm_backward", xv.device(), xv.dtype())(
                 gc, xv, sw.defined() ? sw.unpack("rms_norm") : Tensor(), rstd, Tensor(), gx, no_edge, gw);
             return {gx, gw};
           });
  }
  return y;
}

}  // namespace trireme
