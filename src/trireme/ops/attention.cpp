// scaled_dot_product_attention: checks, the fused (flash-style) kernel, and its backward, which
// recomputes the probabilities from the saved log-sum-exps (kernels/nn.h).
//
// Note [attention layouts]
// The output and the input gradients are allocated as (B, T, H, hd) in memory and returned as
// (B, H, T, hd) views: a model transposes attention's output back to (B, T, H, hd) and merges the
// heads, which is then free, and the gradients of q, k, v (usually head views of one fused QKV
// projection) land in the layout that projection's backward wants. Kernels accept any strides
// with a unit last stride, so these views need no copies either way.
#include <array>

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

// A (B, H, T, hd) tensor that kernels can read: last stride 1 and rows that do not overlap.
Tensor kernel_layout(const Tensor& t) {
  const bool unit_last = t.stride(3) == 1 || t.size(3) <= 1;
  const bool rows_apart = t.size(2) <= 1 || t.stride(2) >= t.size(3);
  return unit_last && rows_apart ? t.detach() : contiguous(t.detach());
}

// See Note [attention layouts].
Tensor empty_bthd(int64_t b, int64_t h, int64_t t, int64_t hd, DType dtype, Device device) {
  Tensor buf = Tensor::empty({b, t, h, hd}, dtype, device);
  return buf.alias({b, h, t, hd}, {t * h * hd, hd, h * hd, 1}, buf.offset());
}

// True when q, k, v are the three head views of one fused (B, T, 3, H, hd) projection, tiling it
// exactly (the model's split of c_attn's output): then their gradients can share one buffer laid
// out the same way, and split's backward finds them in place instead of copying them together.
bool fused_projection_views(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.storage().get() != k.storage().get() || q.storage().get() != v.storage().get()) return false;
  if (q.sizes() != k.sizes() || q.sizes() != v.sizes() || q.strides() != k.strides() || q.strides() != v.strides())
    return false;
  const int64_t nb = q.size(0), nh = q.size(1), t = q.size(2), hd = q.size(3), delta = nh * hd;
  return k.offset() - q.offset() == delta && v.offset() - k.offset() == delta && q.stride(3) == 1 &&
         (nh == 1 || q.stride(1) == hd) && (t == 1 || q.stride(2) == 3 * delta) &&
         (nb == 1 || q.stride(0) == t * 3 * delta);
}

// Gradients for q, k, v: one (B, T, 3, H, hd) buffer in the layout q, k, v have when they are
// fused projection views (see above), else three (B, T, H, hd) buffers (Note [attention layouts]).
std::array<Tensor, 3> empty_qkv_grads(const Tensor& q, const Tensor& k, bool fused) {
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  if (!fused) {
    return {empty_bthd(nb, nh, tq, hd, q.dtype(), q.device()), empty_bthd(nb, nh, tk, hd, q.dtype(), q.device()),
            empty_bthd(nb, nh, tk, hd, q.dtype(), q.device())};
  }
  Tensor buf = Tensor::empty({nb, tq, 3, nh, hd}, q.dtype(), q.device());
  const Shape strides{tq * 3 * nh * hd, hd, 3 * nh * hd, 1};
  auto piece = [&](int64_t i) { return buf.alias({nb, nh, tq, hd}, strides, buf.offset() + i * nh * hd); };
  return {piece(0), piece(1), piece(2)};
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  if (auto c = autocast_low_args({q, k, v})) return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], causal);
  const char* op = "scaled_dot_product_attention";
  TRIREME_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k or v is undefined");
  TRIREME_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op, ": q, k, v must be (B, H, T, hd), got shapes ",
                q.sizes(), ", ", k.sizes(), " and ", v.sizes());
  TRIREME_CHECK(q.size(0) == k.size(0) && q.size(0) == v.size(0) && q.size(1) == k.size(1) && q.size(1) == v.size(1) &&
                    q.size(3) == k.size(3) && q.size(3) == v.size(3),
                op, ": q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(),
                " must agree on batch, heads and head dim (B, H, _, hd)");
  TRIREME_CHECK(k.size(2) == v.size(2), op, ": k ", k.sizes(), " and v ", v.sizes(), " have different lengths");
  TRIREME_CHECK(!causal || q.size(2) == k.size(2), op, ": causal attention needs as many queries as keys, got q ",
                q.sizes(), " and k ", k.sizes());
  TRIREME_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k, v have dtypes ", q.dtype(), ", ",
                k.dtype(), " and ", v.dtype());
  TRIREME_CHECK(q.device() == k.device() && q.device() == v.device(), op, ": q, k, v are on different devices");
  TRIREME_CHECK(is_floating(q.dtype()), op, ": needs floating inputs, got ", q.dtype());
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), hd = q.size(3);
  Tensor qc = kernel_layout(q), kc = kernel_layout(k), vc = kernel_layout(v);
  const bool fused_views = fused_projection_views(qc, kc, vc);
  Tensor out = empty_bthd(nb, nh, tq, hd, q.dtype(), q.device());
  Tensor lse = Tensor::empty({nb, nh, tq}, stat_dtype(q.dtype()), q.device());
  // Its products for ops/op_count.h: q kᵀ and p v forward (4 T_q T_k hd per head), and the
  // backward's five (q kᵀ again, dv, dp, dq, dk); causal attention computes about half.
  const double tk = double(k.size(2)), pairs = double(nb) * double(nh) * double(tq) * tk * (causal ? 0.5 : 1);
  const double qkvo_bytes = double(dtype_size(q.dtype())) * double(nb) * double(nh) * double(hd) * (2 * double(tq) + 2 * tk);
  op_count_attention(4 * pairs * double(hd), qkvo_bytes);
  find_kernel<AttentionKernel>(op, q.device(), q.dtype())(qc, kc, vc, causal, out, lse);
  if (any_requires_grad({&q, &k, &v})) {
    // The backward recomputes the probabilities from lse: O(T) saved per row, not O(T²).
    record(op, {&q, &k, &v}, {&out},
           [=, sq = SavedTensor(qc), sk = SavedTensor(kc), sv = SavedTensor(vc),
            so = SavedTensor(out.detach())](const TensorList& g) -> TensorList {
             const Tensor& qv = sq.unpack(op);
             const Tensor& kv = sk.unpack(op);
             const Tensor& vv = sv.unpack(op);
             const Tensor& ov = so.unpack(op);
             auto [gq, gk, gv] = empty_qkv_grads(qv, kv, fused_views);
             op_count_attention(10 * pairs * double(hd), 2 * qkvo_bytes);
             find_kernel<AttentionBackwardKernel>("scaled_dot_product_attention_backward", qv.device(), qv.dtype())(
                 kernel_layout(g[0]), qv, kv, vv, ov, lse, causal, gq, gk, gv);
             return {gq, gk, gv};
           });
  }
  return out;
}

}  // namespace trireme
