// CPU scaled dot-product attention, forward and backward, one (batch, head) pair at a time in
// parallel over B*H. Each pair is a few small GEMMs (OpenBLAS, single-threaded inside the
// parallel loop) around a row softmax. Math is in acc_t (f32 for bf16/f16, which are converted
// into per-thread scratch first); the probabilities are saved for the backward.
//
// Per pair, with s = 1/sqrt(hd) and M the causal mask (-inf above the diagonal):
//   forward:  S = s Q Kᵀ + M,  P = softmax_rows(S),  O = P V
//   backward: dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - rowsum(P ∘ dP)),  dQ = s dS K,  dK = s dSᵀ Q
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/vec_math.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Row-major C = alpha op(A) op(B) + beta C.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// OpenBLAS would split each small GEMM over its own threads while our OpenMP threads already
// run one pair each; hold it to one thread for the duration of a parallel loop.
class BlasSingleThread {
 public:
  explicit BlasSingleThread(bool active) : saved_(active ? openblas_get_num_threads() : 0) {
    if (saved_ > 1) openblas_set_num_threads(1);
  }
  ~BlasSingleThread() {
    if (saved_ > 1) openblas_set_num_threads(saved_);
  }
  BlasSingleThread(const BlasSingleThread&) = delete;
  BlasSingleThread& operator=(const BlasSingleThread&) = delete;

 private:
  int saved_;
};

// One (T, hd) matrix of a (B, H, T, hd) tensor whose last dim has stride 1: a pointer and a
// row stride, as BLAS takes them.
template <class T>
struct HeadView {
  T* base;
  int64_t s0, s1, ld;
  HeadView(const Tensor& t) : base(t.data<T>()), s0(t.stride(0)), s1(t.stride(1)), ld(t.stride(2)) {
    if (t.size(2) <= 1) ld = t.size(3);  // a single row: its stride is arbitrary, BLAS wants >= hd
  }
  T* at(int64_t b, int64_t h) const { return base + b * s0 + h * s1; }
};

// A head matrix in the compute type C: the original memory when T == C, else a converted copy.
template <class T, class C>
const C* as_compute(const HeadView<T>& v, int64_t b, int64_t h, int64_t rows, int64_t cols, std::vector<C>& scratch,
                    int64_t& ld) {
  if constexpr (std::is_same_v<T, C>) {
    ld = v.ld;
    return v.at(b, h);
  } else {
    scratch.resize(size_t(rows * cols));
    const T* src = v.at(b, h);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) scratch[size_t(i * cols + j)] = C(src[i * v.ld + j]);
    ld = cols;
    return scratch.data();
  }
}

// Where a head result in C goes: straight into the output when T == C, else through scratch
// that store() converts.
template <class T, class C>
struct HeadOut {
  const HeadView<T>& view;
  int64_t b, h, rows, cols;
  std::vector<C>& scratch;
  C* ptr;
  int64_t ld;
  HeadOut(const HeadView<T>& v, int64_t b_, int64_t h_, int64_t r, int64_t c, std::vector<C>& s)
      : view(v), b(b_), h(h_), rows(r), cols(c), scratch(s) {
    if constexpr (std::is_same_v<T, C>) {
      ptr = v.at(b, h);
      ld = v.ld;
    } else {
      scratch.resize(size_t(rows * cols));
      ptr = scratch.data();
      ld = cols;
    }
  }
  void store() {
    if constexpr (!std::is_same_v<T, C>) {
      T* dst = view.at(b, h);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) dst[i * view.ld + j] = T(scratch[size_t(i * cols + j)]);
    }
  }
};

template <class T>
void attention_cpu(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out, Tensor& probs) {
  using C = acc_t<T>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  const C scale = C(1.0 / std::sqrt(double(hd)));
  const HeadView<T> vq(q), vk(k), vv(v), vo(out);
  C* pp = probs.data<C>();
  BlasSingleThread single(nb * nh > 1 && num_threads() > 1);
  parallel_for(nb * nh, tq * tk * hd, [&](int64_t p0, int64_t p1) {
    std::vector<C> sq, sk, sv, so;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / nh, h = p % nh;
      int64_t ldq, ldk, ldv;
      const C* cq = as_compute(vq, b, h, tq, hd, sq, ldq);
      const C* ck = as_compute(vk, b, h, tk, hd, sk, ldk);
      const C* cv = as_compute(vv, b, h, tk, hd, sv, ldv);
      C* s = pp + p * tq * tk;  // (tq, tk): scores, then probabilities in place
      if (tk > 0 && hd > 0) {
        gemm(false, true, tq, tk, hd, scale, cq, ldq, ck, ldk, C(0), s, tk);
      } else {
        std::fill(s, s + tq * tk, C(0));
      }
      for (int64_t i = 0; i < tq; ++i) {
        C* row = s + i * tk;
        const int64_t n = causal ? i + 1 : tk;  // causal: key j attends only when j <= i
        const C m = row_max<C>(row, n);
        for (int64_t j = 0; j < n; ++j) row[j] = exp_acc(row[j] - m);
        const C inv = C(1.0 / row_sum(row, n));
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
        for (int64_t j = n; j < tk; ++j) row[j] = C(0);
      }
      HeadOut<T, C> o(vo, b, h, tq, hd, so);
      if (tk > 0) {
        gemm(false, false, tq, hd, tk, C(1), s, tk, cv, ldv, C(0), o.ptr, o.ld);
      } else {
        for (int64_t i = 0; i < tq; ++i) std::fill(o.ptr + i * o.ld, o.ptr + i * o.ld + hd, C(0));
      }
      o.store();
    }
  });
}

template <class T>
void attention_backward_cpu(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& probs, bool causal, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  using C = acc_t<T>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  const C scale = C(1.0 / std::sqrt(double(hd)));
  const HeadView<T> vg(grad), vq(q), vk(k), vv(v), vdq(grad_q), vdk(grad_k), vdv(grad_v);
  const C* pp = probs.data<C>();
  BlasSingleThread single(nb * nh > 1 && num_threads() > 1);
  parallel_for(nb * nh, 4 * tq * tk * hd, [&](int64_t p0, int64_t p1) {
    std::vector<C> sg, sq, sk, sv, sdq, sdk, sdv, ds(size_t(tq * tk));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / nh, h = p % nh;
      int64_t ldg, ldq, ldk, ldv;
      const C* cg = as_compute(vg, b, h, tq, hd, sg, ldg);
      const C* cq = as_compute(vq, b, h, tq, hd, sq, ldq);
      const C* ck = as_compute(vk, b, h, tk, hd, sk, ldk);
      const C* cv = as_compute(vv, b, h, tk, hd, sv, ldv);
      const C* pr = pp + p * tq * tk;
      HeadOut<T, C> dq(vdq, b, h, tq, hd, sdq), dk(vdk, b, h, tk, hd, sdk), dv(vdv, b, h, tk, hd, sdv);
      if (tq == 0 || tk == 0 || hd == 0) {  // degenerate: every gradient is zero (or empty)
        for (auto* o : {&dq, &dk, &dv})
          for (int64_t i = 0; i < o->rows; ++i) std::fill(o->ptr + i * o->ld, o->ptr + i * o->ld + hd, C(0));
      } else {
        gemm(true, false, tk, hd, tq, C(1), pr, tk, cg, ldg, C(0), dv.ptr, dv.ld);     // dV = Pᵀ dO
        gemm(false, true, tq, tk, hd, C(1), cg, ldg, cv, ldv, C(0), ds.data(), tk);  // dP = dO Vᵀ
        for (int64_t i = 0; i < tq; ++i) {
          const C* prow = pr + i * tk;
          C* row = ds.data() + i * tk;
          const int64_t n = causal ? i + 1 : tk;  // P is 0 beyond n, and so is dS
          double dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t j = 0; j < n; ++j) dot += double(prow[j] * row[j]);
          const C d = C(dot);
          for (int64_t j = 0; j < n; ++j) row[j] = prow[j] * (row[j] - d);
          for (int64_t j = n; j < tk; ++j) row[j] = C(0);
        }
        gemm(false, false, tq, hd, tk, scale, ds.data(), tk, ck, ldk, C(0), dq.ptr, dq.ld);  // dQ = s dS K
        gemm(true, false, tk, hd, tq, scale, ds.data(), tk, cq, ldq, C(0), dk.ptr, dk.ld);   // dK = s dSᵀ Q
      }
      dq.store();
      dk.store();
      dv.store();
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_attention) {
  constexpr auto cpu = DeviceType::cpu;
  registry.add_each<AttentionKernel, double, float, bf16_t, f16_t>(
      "scaled_dot_product_attention", cpu, []<class T>() { return &attention_cpu<T>; });
  registry.add_each<AttentionBackwardKernel, double, float, bf16_t, f16_t>(
      "scaled_dot_product_attention_backward", cpu, []<class T>() { return &attention_backward_cpu<T>; });
}

}  // namespace trireme::cpu
