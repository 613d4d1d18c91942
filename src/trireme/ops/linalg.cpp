// Matrix products: matmul (numpy semantics, batched with broadcasting) and linear, with backwards.
#include "trireme/ops/linalg.h"

#include <tuple>
#include <utility>

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/autocast_policy.h"
#include "trireme/ops/op_count.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme {

using autograd::any_requires_grad;
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

void check_operands(const char* op, const char* what_a, const Tensor& a, const char* what_b, const Tensor& b) {
  TRIREME_CHECK(a.defined() && b.defined(), op, ": the ", a.defined() ? what_b : what_a, " is undefined");
  TRIREME_CHECK(a.device() == b.device(), op, ": ", what_a, " ", a.sizes(), " and ", what_b, " ", b.sizes(),
                " are on different devices (", a.device(), " and ", b.device(), ")");
  TRIREME_CHECK(a.dtype() == b.dtype(), op, ": ", what_a, " ", a.sizes(), " and ", what_b, " ", b.sizes(),
                " have different dtypes (", a.dtype(), " and ", b.dtype(), "); convert one with to_dtype");
  TRIREME_CHECK(is_floating(a.dtype()), op, ": needs floating operands, got ", a.dtype(), " for ", what_a, " ",
                a.sizes(), " and ", what_b, " ", b.sizes());
}

Shape batch_of(const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end() - 2); }

// A batch of `batch` products (M, K) x (K, N), for ops/op_count.h: 2 M N K operations each, and
// the operands read and the result written once (`operand_reads` is 3 with an addend).
void count_product(double batch, double m, double n, double k, DType dtype, double operand_reads = 2) {
  const double elt = double(dtype_size(dtype));
  op_count_matmul(batch * 2 * m * n * k,
                  elt * batch * (m * k + k * n + (operand_reads - 1) * m * n));
}

// t (batch_t..., R, C) as a view of shape (batch..., R, C): stride 0 along broadcast dims.
Tensor expand_batch(const Tensor& t, const Shape& batch) {
  const size_t nb = batch.size(), nt = size_t(t.dim()) - 2;
  Shape sizes = batch, strides(nb, 0);
  for (size_t i = 0; i < nt; ++i) {
    if (t.sizes()[i] != 1) strides[i + nb - nt] = t.strides()[i];
  }
  sizes.insert(sizes.end(), t.sizes().end() - 2, t.sizes().end());
  strides.insert(strides.end(), t.strides().end() - 2, t.strides().end());
  return t.alias(sizes, strides, t.offset());
}

// The kernel call without autograd: a (..., M, K) · b (..., K, N) with broadcast batch dims
// -> a fresh contiguous (batch..., M, N).
Tensor matmul_forward(const Tensor& a, const Tensor& b, const Tensor& orig_a, const Tensor& orig_b) {
  const Shape ba = batch_of(a), bb = batch_of(b);
  Shape batch(std::max(ba.size(), bb.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t sa = i < batch.size() - ba.size() ? 1 : ba[i - (batch.size() - ba.size())];
    int64_t sb = i < batch.size() - bb.size() ? 1 : bb[i - (batch.size() - bb.size())];
    TRIREME_CHECK(sa == sb || sa == 1 || sb == 1, "matmul: the batch dimensions of ", orig_a.sizes(), " and ",
                  orig_b.sizes(), " do not broadcast (", sa, " vs ", sb, ")");
    batch[i] = sa == 1 ? sb : sa;
  }
  Shape out_shape = batch;
  out_shape.push_back(a.size(-2));
  out_shape.push_back(b.size(-1));
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  count_product(double(shape_numel(batch)), double(a.size(-2)), double(b.size(-1)), double(a.size(-1)), a.dtype());
  find_kernel<MatmulKernel>("matmul", a.device(), a.dtype())(expand_batch(a, batch), expand_batch(b, batch), Tensor(),
                                                            out);
  return out;
}

// (a · b, a's rows summed) for 2-D a (M, K) and b (K, N), by one kernel (kernels/linalg.h's
// MatmulRowSumsKernel): a linear layer's weight and bias gradients. Records no autograd.
std::pair<Tensor, Tensor> product_and_row_sums(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.dtype(), a.device());
  Tensor row_sums = Tensor::empty({a.size(0)}, a.dtype(), a.device());
  count_product(1, double(a.size(0)), double(b.size(1)), double(a.size(1)), a.dtype());
  find_kernel<MatmulRowSumsKernel>("matmul_row_sums", a.device(), a.dtype())(a, b, out, row_sums);
  return {out, row_sums};
}

// matmul's operands as matrices: a 1-D a (K) is a row (1, K); a 1-D b (K) is a column (K, 1).
Tensor as_matrix_a(const Tensor& a) {
  return a.dim() == 1 ? a.alias({1, a.size(0)}, {a.size(0) * a.stride(0), a.stride(0)}, a.offset()) : a;
}
Tensor as_matrix_b(const Tensor& b) {
  return b.dim() == 1 ? b.alias({b.size(0), 1}, {b.stride(0), 1}, b.offset()) : b;
}
Shape matrix_shape_a(const Shape& s) { return s.size() == 1 ? Shape{1, s[0]} : s; }
Shape matrix_shape_b(const Shape& s) { return s.size() == 1 ? Shape{s[0], 1} : s; }

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto c = autocast_low_args({a, b})) return matmul((*c)[0], (*c)[1]);  // Note [autocast policy]
  check_operands("matmul", "first operand", a, "second operand", b);
  TRIREME_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: needs operands with at least one dimension, got ", a.sizes(),
                " and ", b.sizes());
  const Tensor a2 = as_matrix_a(a), b2 = as_matrix_b(b);
  TRIREME_CHECK(a2.size(-1) == b2.size(-2), "matmul: shapes ", a.sizes(), " and ", b.sizes(),
                " cannot be multiplied (", a2.size(-1), " != ", b2.size(-2), ")");
  Tensor out2 = matmul_forward(a2, b2, a, b);
  // Drop the row/column dims that 1-D operands were promoted with.
  Shape out_shape(out2.sizes().begin(), out2.sizes().end() - 2);
  if (a.dim() > 1) out_shape.push_back(a2.size(-2));
  if (b.dim() > 1) out_shape.push_back(b2.size(-1));
  Tensor out = out2.alias(out_shape, contiguous_strides(out_shape), out2.offset());

  if (any_requires_grad({&a, &b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    SavedTensor sa(need_b ? a : Tensor()), sb(need_a ? b : Tensor());
    record("matmul", {&a, &b}, {&out},
           [=, shape_a = a.sizes(), shape_b = b.sizes(), shape_out2 = out2.sizes()](const TensorList& g) -> TensorList {
             const Tensor g2 = reshape(g[0], shape_out2);
             Tensor ga, gb;
             if (need_a) {  // grad_a = g · bᵀ, summed over a's broadcast batch dims
               const Tensor bm = as_matrix_b(sb.unpack("matmul"));
               ga = reshape(sum_to(matmul(g2, transpose(bm, -1, -2)), matrix_shape_a(shape_a)), shape_a);
             }
             if (need_b) {  // grad_b = aᵀ · g, summed over b's broadcast batch dims
               const Tensor am = as_matrix_a(sa.unpack("matmul"));
               const Shape bm_shape = matrix_shape_b(shape_b);
               if (bm_shape.size() == 2 && am.dim() > 2) {
                 // b is shared by the whole batch: one GEMM over all rows instead of a batch of
                 // products and a reduction.
                 const int64_t k = am.size(-1), n = g2.size(-1);
                 gb = matmul(transpose(reshape(am, {-1, k}), 0, 1), reshape(g2, {-1, n}));
               } else {
                 gb = sum_to(matmul(transpose(am, -1, -2), g2), bm_shape);
               }
               gb = reshape(gb, shape_b);
             }
             return {ga, gb};
           });
  }
  return out;
}

void addmm_(Tensor& out, const Tensor& a, const Tensor& b) { addmm_into(out, out, a, b); }

void addmm_into(Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b) {
  // The same memory told by storage and offset, not by pointer: reading data_ptr() here would be
  // a host read inside a traced step (graph/trace.h).
  const bool same_storage = c.defined() && out.defined() && c.storage() == out.storage();
  const bool in_place = same_storage && c.offset() == out.offset();
  const char* op = in_place ? "addmm_" : "addmm_into";
  check_operands(op, "left operand", a, "right operand", b);
  check_operands(op, "output", out, "left operand", a);
  check_operands(op, "addend", c, "output", out);
  TRIREME_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) && out.size(0) == a.size(0) &&
                    out.size(1) == b.size(1),
                op, ": out ", out.sizes(), " += ", a.sizes(), " x ", b.sizes(), " does not match");
  TRIREME_CHECK(out.is_contiguous(), op, ": out ", out.sizes(), " must be contiguous");
  TRIREME_CHECK(c.sizes() == out.sizes() && c.is_contiguous(), op, ": the addend ", c.sizes(),
                " must be contiguous and of out's shape ", out.sizes());
  if (same_storage && !in_place) {  // both contiguous, of one shape and dtype
    const int64_t c0 = c.offset(), o0 = out.offset(), n = out.numel();
    TRIREME_CHECK(c0 + n <= o0 || o0 + n <= c0, op, ": the addend and out overlap without being the same memory");
  }
  TRIREME_CHECK(!out.requires_grad() || !autograd::grad_enabled(), op,
                ": records no autograd, so out may not require grad while grad mode is on");
  count_product(1, double(a.size(0)), double(b.size(1)), double(a.size(1)), a.dtype(), 3);
  find_kernel<MatmulAddKernel>("matmul_add", a.device(), a.dtype())(a, b, c, out);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return linear(x, weight, bias, nullptr); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, GradInputHook grad_input_hook) {
  if (auto c = autocast_low_args({x, weight, bias}))  // Note [autocast policy]
    return linear((*c)[0], (*c)[1], (*c)[2], std::move(grad_input_hook));
  check_operands("linear", "input", x, "weight", weight);
  TRIREME_CHECK(weight.dim() == 2, "linear: weight must be 2-D (out_features, in_features), got ", weight.sizes(),
                " with input ", x.sizes());
  TRIREME_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.sizes(), " and weight ",
                weight.sizes(), " do not match: the input's last dim must equal in_features ", weight.size(1));
  const int64_t in = weight.size(1), out_features = weight.size(0);
  if (bias.defined()) {
    check_operands("linear", "weight", weight, "bias", bias);
    TRIREME_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias ", bias.sizes(),
                  " does not match weight ", weight.sizes(), " (expected [", out_features, "])");
  }
  const Shape lead(x.sizes().begin(), x.sizes().end() - 1);
  const int64_t n = shape_numel(lead);

  // One GEMM over the flattened (N, in) input: a view when x's layout allows it (always when
  // contiguous), with Wᵀ passed as a transposed operand and the bias as the GEMM's epilogue.
  const Tensor x2 = reshape(x.detach(), {n, in});
  const Tensor wt = weight.alias({in, out_features}, {weight.stride(1), weight.stride(0)}, weight.offset());
  Tensor out2 = Tensor::empty({n, out_features}, x.dtype(), x.device());
  count_product(1, double(n), double(out_features), double(in), x.dtype());
  find_kernel<MatmulKernel>("matmul", x.device(), x.dtype())(x2, wt, bias, out2);
  Shape out_shape = lead;
  out_shape.push_back(out_features);
  Tensor out = out2.alias(out_shape, contiguous_strides(out_shape), out2.offset());

  if (any_requires_grad({&x, &weight, &bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    SavedTensor sx(need_w ? x : Tensor()), sw(need_x ? weight : Tensor());
    record("linear", {&x, &weight, &bias}, {&out},
           [=, shape_x = x.sizes()](const TensorList& g) -> TensorList {
             const Tensor g2 = reshape(g[0], {n, out_features});
             Tensor gx, gw, gb;
             std::function<void()> finish_grad_input;
             if (need_x) {
               gx = reshape(matmul(g2, sw.unpack("linear")), shape_x);  // g · W
               if (grad_input_hook) finish_grad_input = grad_input_hook(gx);
             }
             if (need_w && need_b && !autograd::grad_enabled()) {  // gᵀ · x and g's column sums in one pass
               std::tie(gw, gb) = product_and_row_sums(transpose(g2, 0, 1), reshape(sx.unpack("linear"), {n, in}));
             } else {
               if (need_w) gw = matmul(transpose(g2, 0, 1), reshape(sx.unpack("linear"), {n, in}));  // gᵀ · x
               if (need_b) gb = sum(g2, {0});                                                          // column sums
             }
             if (finish_grad_input) finish_grad_input();
             return {gx, gw, gb};
           });
  }
  return out;
}

}  // namespace trireme
