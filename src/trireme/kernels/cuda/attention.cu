// CUDA scaled dot-product attention, forward and backward, the twin of kernels/cpu/attention.cpp:
// cuBLASLt strided-batched GEMMs over the (batch, head) pairs around row kernels for the softmax
// and its backward. Math is in the accumulation type C (f32 for f32/bf16/f16, no TF32; f64 for
// f64); 16-bit inputs are converted into C copies first and results converted back, as the CPU
// does. The probabilities are saved for the backward (B·H·Tq·Tk values of C).
//
// Per pair, with s = 1/sqrt(hd) and M the causal mask (-inf above the diagonal):
//   forward:  S = s Q Kᵀ + M,  P = softmax_rows(S),  O = P V
//   backward: dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - rowsum(P ∘ dP)),  dQ = s dS K,  dK = s dSᵀ Q
#include <cmath>

#include "trireme/kernels/cuda/blas.cuh"
#include "trireme/kernels/cuda/block_reduce.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

// One (B, H, T, hd) operand in C as the GEMMs see it: per-pair matrices (T, hd) with row stride
// ld, stepping s0 per batch and s1 per head. `keep` owns a converted copy when there is one.
template <class C>
struct HeadMat {
  C* ptr = nullptr;
  int64_t s0 = 0, s1 = 0, ld = 0;
  Tensor keep;
};

template <class C>
HeadMat<C> head_mat(const Tensor& t) {
  HeadMat<C> m;
  m.ptr = t.data<C>();
  m.s0 = t.stride(0);
  m.s1 = t.stride(1);
  m.ld = t.size(2) <= 1 ? std::max<int64_t>(t.size(3), 1) : t.stride(2);  // one row: any stride; cuBLAS wants >= hd
  return m;
}

// t in C: itself when it already is, else a contiguous converted copy.
template <class T, class C>
HeadMat<C> as_compute(const Tensor& t) {
  if constexpr (std::is_same_v<T, C>) {
    return head_mat<C>(t);
  } else {
    Tensor c = Tensor::empty(t.sizes(), dtype_v<C>, t.device());
    find_kernel<CopyKernel>("copy", t.device(), dtype_v<C>)(t, c);
    HeadMat<C> m = head_mat<C>(c);
    m.keep = c;
    return m;
  }
}

// Where a result in C goes: straight into `out` when T == C, else a contiguous C buffer that
// store() converts into out.
template <class T, class C>
struct HeadOut {
  Tensor& out;
  HeadMat<C> mat;
  explicit HeadOut(Tensor& o) : out(o) {
    if constexpr (std::is_same_v<T, C>) {
      mat = head_mat<C>(o);
    } else {
      Tensor c = Tensor::empty(o.sizes(), dtype_v<C>, o.device());
      mat = head_mat<C>(c);
      mat.keep = c;
    }
  }
  void store() {
    if constexpr (!std::is_same_v<T, C>) find_kernel<CopyKernel>("copy", out.device(), out.dtype())(mat.keep, out);
  }
};

// C[b, h] = alpha op(A[b, h]) op(B[b, h]) + beta C[b, h] for every pair: one batched GEMM when all
// three step through the pairs with one stride, else one per batch index over the heads.
template <class C>
void gemm_pairs(const LaunchContext& ctx, int64_t nb, int64_t nh, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                double alpha, HeadMat<C> a, HeadMat<C> b, double beta, HeadMat<C> c) {
  for (HeadMat<C>* x : {&a, &b, &c}) {
    if (nh == 1) x->s1 = x->s0;
    if (nb == 1) x->s0 = nh * x->s1;
  }
  const bool uniform = a.s0 == nh * a.s1 && b.s0 == nh * b.s1 && c.s0 == nh * c.s1;
  if (uniform) {
    gemm_batched<C>(ctx, ta, tb, m, n, k, alpha, a.ptr, a.ld, a.s1, b.ptr, b.ld, b.s1, beta, c.ptr, c.ld, c.s1, nb * nh);
    return;
  }
  for (int64_t i = 0; i < nb; ++i) {
    gemm_batched<C>(ctx, ta, tb, m, n, k, alpha, a.ptr + i * a.s0, a.ld, a.s1, b.ptr + i * b.s0, b.ld, b.s1, beta,
                    c.ptr + i * c.s0, c.ld, c.s1, nh);
  }
}

// In place on rows of (rows, tk) scores: softmax over the first n entries of each row (n = i + 1
// for row i of its pair when causal, else tk), zeros after.
template <class C>
__global__ void attention_softmax_kernel(C* s, int64_t tq, int64_t tk, bool causal) {
  __shared__ C scratch[32];
  const int64_t r = blockIdx.x;
  C* row = s + r * tk;
  const int64_t n = causal ? (r % tq) + 1 : tk;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = max(m, row[j]);
  m = block_max(m, scratch);
  C sum = C(0);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += m_exp(row[j] - m);
  sum = block_sum(sum, scratch);
  const C inv = C(1) / sum;
  for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) row[j] = j < n ? m_exp(row[j] - m) * inv : C(0);
}

// In place on dP rows: dS = P ∘ (dP - Σ_j P dP), zero beyond the causal limit.
template <class C>
__global__ void attention_softmax_backward_kernel(const C* p, C* ds, int64_t tq, int64_t tk, bool causal) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const C* prow = p + r * tk;
  C* row = ds + r * tk;
  const int64_t n = causal ? (r % tq) + 1 : tk;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += double(prow[j] * row[j]);
  const C d = C(block_sum(dot, scratch));
  for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) row[j] = j < n ? prow[j] * (row[j] - d) : C(0);
}

template <class C>
void fill_zero(const LaunchContext& ctx, Tensor& t) {
  if (t.numel() == 0) return;
  find_kernel<FillKernel>("fill", t.device(), t.dtype())(t, 0.0);
  (void)ctx;
}

template <class T>
void attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out, Tensor& probs) {
  using C = acc_t<T>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  if (nb * nh * tq == 0) return;
  LaunchContext ctx(out);
  if (tk == 0) {  // nothing to attend to: zeros, as on the CPU
    fill_zero<C>(ctx, out);
    return;
  }
  const double scale = 1.0 / std::sqrt(double(hd));
  HeadMat<C> pm = head_mat<C>(probs);
  if (hd > 0) {
    HeadMat<C> qm = as_compute<T, C>(q), km = as_compute<T, C>(k);
    gemm_pairs<C>(ctx, nb, nh, false, true, tq, tk, hd, scale, qm, km, 0.0, pm);  // S = s Q Kᵀ
  } else {
    fill_zero<C>(ctx, probs);
  }
  attention_softmax_kernel<C><<<unsigned(nb * nh * tq), row_block_threads(tk, 512), 0, ctx.stream>>>(
      probs.data<C>(), tq, tk, causal);
  TRIREME_CUDA_CHECK_LAUNCH();
  if (hd == 0) return;
  HeadMat<C> vm = as_compute<T, C>(v);
  HeadOut<T, C> o(out);
  gemm_pairs<C>(ctx, nb, nh, false, false, tq, hd, tk, 1.0, pm, vm, 0.0, o.mat);  // O = P V
  o.store();
}

template <class T>
void attention_backward_cuda(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& probs, bool causal, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  using C = acc_t<T>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  LaunchContext ctx(grad_q);
  if (nb * nh == 0 || tq == 0 || tk == 0 || hd == 0) {  // degenerate: every gradient is zero (or empty)
    for (Tensor* t : {&grad_q, &grad_k, &grad_v}) fill_zero<C>(ctx, *t);
    return;
  }
  const double scale = 1.0 / std::sqrt(double(hd));
  HeadMat<C> gm = as_compute<T, C>(grad), qm = as_compute<T, C>(q), km = as_compute<T, C>(k),
             vm = as_compute<T, C>(v);
  HeadMat<C> pm = head_mat<C>(probs);
  Tensor ds = Tensor::empty(probs.sizes(), probs.dtype(), probs.device());
  HeadMat<C> dsm = head_mat<C>(ds);
  HeadOut<T, C> dq(grad_q), dk(grad_k), dv(grad_v);
  gemm_pairs<C>(ctx, nb, nh, true, false, tk, hd, tq, 1.0, pm, gm, 0.0, dv.mat);   // dV = Pᵀ dO
  gemm_pairs<C>(ctx, nb, nh, false, true, tq, tk, hd, 1.0, gm, vm, 0.0, dsm);      // dP = dO Vᵀ
  attention_softmax_backward_kernel<C><<<unsigned(nb * nh * tq), row_block_threads(tk, 512), 0, ctx.stream>>>(
      probs.data<C>(), ds.data<C>(), tq, tk, causal);
  TRIREME_CUDA_CHECK_LAUNCH();
  gemm_pairs<C>(ctx, nb, nh, false, false, tq, hd, tk, scale, dsm, km, 0.0, dq.mat);  // dQ = s dS K
  gemm_pairs<C>(ctx, nb, nh, true, false, tk, hd, tq, scale, dsm, qm, 0.0, dk.mat);   // dK = s dSᵀ Q
  dq.store();
  dk.store();
  dv.store();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_attention) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<AttentionKernel, double, float, bf16_t, f16_t>(
      "scaled_dot_product_attention", cuda, []<class T>() { return &attention_cuda<T>; });
  registry.add_each<AttentionBackwardKernel, double, float, bf16_t, f16_t>(
      "scaled_dot_product_attention_backward", cuda, []<class T>() { return &attention_backward_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
