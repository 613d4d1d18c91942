// CPU scaled dot-product attention, forward and backward, fused: the (Tq, Tk) scores are only
// ever held for one tile of kBlockQ queries at a time (a task's scratch), never for a whole
// (batch, head) pair. Each tile is a few small GEMMs (OpenBLAS, single-threaded inside the
// parallel loop) around a row softmax. Math is in acc_t (f32 for bf16/f16, which are converted
// into per-thread scratch first); the forward saves each row's log-sum-exp, from which the
// backward recomputes the probabilities.
//
// Per query tile i (rows of Q), with s = 1/sqrt(hd), M the causal mask (-inf above the diagonal)
// and only the keys that the tile's rows can attend (all, or up to the tile's last row):
//   forward:  S = s Qᵢ Kᵀ + M,  lseᵢ = logsumexp_rows(S),  Pᵢ = exp(S - lseᵢ),  Oᵢ = Pᵢ V
//   backward: Dᵢ = rowsum(dOᵢ ∘ Oᵢ),  dV += Pᵢᵀ dOᵢ,  dP = dOᵢ Vᵀ,  dS = Pᵢ ∘ (dP - Dᵢ),
//             dQᵢ = s dS K,  dK += s dSᵀ Qᵢ
// The forward runs (pair, tile) tasks in parallel; the backward runs pairs in parallel and their
// tiles in order, so dK and dV are summed in a fixed order (bit-identical reruns).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/vec_math.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Query rows per tile: the tile's scores (kBlockQ x Tk in C) stay in cache for the GEMMs after.
constexpr int64_t kBlockQ = 64;

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
// run one task each; hold it to one thread for the duration of a parallel loop.
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
  T* row(int64_t b, int64_t h, int64_t i) const { return base + b * s0 + h * s1 + i * ld; }
};

// Rows [r0, r0 + rows) of a head matrix in the compute type C: the original memory when T == C,
// else a converted copy in scratch. Sets ld to the returned matrix's row stride.
template <class T, class C>
const C* rows_as(const HeadView<T>& v, int64_t b, int64_t h, int64_t r0, int64_t rows, int64_t cols,
                 std::vector<C>& scratch, int64_t& ld) {
  if constexpr (std::is_same_v<T, C>) {
    ld = v.ld;
    return v.row(b, h, r0);
  } else {
    scratch.resize(size_t(std::max<int64_t>(rows * cols, 1)));
    for (int64_t i = 0; i < rows; ++i) {
      const T* src = v.row(b, h, r0 + i);
      for (int64_t j = 0; j < cols; ++j) scratch[size_t(i * cols + j)] = C(src[j]);
    }
    ld = std::max<int64_t>(cols, 1);
    return scratch.data();
  }
}

// Where rows [r0, r0 + rows) of a head result in C go: straight into the output when T == C,
// else through scratch that store() converts.
template <class T, class C>
struct RowsOut {
  const HeadView<T>& view;
  int64_t b, h, r0, rows, cols;
  std::vector<C>& scratch;
  C* ptr;
  int64_t ld;
  RowsOut(const HeadView<T>& v, int64_t b_, int64_t h_, int64_t r0_, int64_t r, int64_t c, std::vector<C>& s)
      : view(v), b(b_), h(h_), r0(r0_), rows(r), cols(c), scratch(s) {
    if constexpr (std::is_same_v<T, C>) {
      ptr = v.row(b, h, r0);
      ld = v.ld;
    } else {
      scratch.resize(size_t(std::max<int64_t>(rows * cols, 1)));
      ptr = scratch.data();
      ld = std::max<int64_t>(cols, 1);
    }
  }
  void zero() {
    for (int64_t i = 0; i < rows; ++i) std::fill(ptr + i * ld, ptr + i * ld + cols, C(0));
  }
  void store() {
    if constexpr (!std::is_same_v<T, C>) {
      for (int64_t i = 0; i < rows; ++i) {
        T* dst = view.row(b, h, r0 + i);
        for (int64_t j = 0; j < cols; ++j) dst[j] = T(scratch[size_t(i * cols + j)]);
      }
    }
  }
};

// Keys that query row i may attend: all tk, or i + 1 when causal.
inline int64_t keys_for(int64_t i, int64_t tk, bool causal) { return causal ? std::min(i + 1, tk) : tk; }

template <class T>
void attention_cpu(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out, Tensor& lse) {
  using C = acc_t<T>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  const int64_t tiles = (tq + kBlockQ - 1) / kBlockQ;
  const C scale = C(1.0 / std::sqrt(double(hd)));
  const HeadView<T> vq(q), vk(k), vv(v), vo(out);
  C* lp = lse.data<C>();
  BlasSingleThread single(nb * nh * tiles > 1 && num_threads() > 1);
  parallel_for(nb * nh * tiles, kBlockQ * tk * hd, [&](int64_t t0, int64_t t1) {
    std::vector<C> sq, sk, sv, so, s;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / tiles, b = p / nh, h = p % nh;
      const int64_t i0 = (t % tiles) * kBlockQ, rows = std::min(kBlockQ, tq - i0);
      const int64_t n = keys_for(i0 + rows - 1, tk, causal);  // keys the tile's last row attends
      C* l = lp + p * tq + i0;
      RowsOut<T, C> o(vo, b, h, i0, rows, hd, so);
      if (n == 0) {  // no keys: zero output, lse -inf
        o.zero();
        o.store();
        std::fill(l, l + rows, -std::numeric_limits<C>::infinity());
        continue;
      }
      int64_t ldq, ldk, ldv;
      const C* cq = rows_as(vq, b, h, i0, rows, hd, sq, ldq);
      const C* ck = rows_as(vk, b, h, 0, n, hd, sk, ldk);
      const C* cv = rows_as(vv, b, h, 0, n, hd, sv, ldv);
      s.resize(size_t(rows * n));  // (rows, n): scores, then probabilities in place
      if (hd > 0) {
        gemm(false, true, rows, n, hd, scale, cq, ldq, ck, ldk, C(0), s.data(), n);
      } else {
        std::fill(s.begin(), s.end(), C(0));
      }
      for (int64_t i = 0; i < rows; ++i) {
        C* row = s.data() + i * n;
        const int64_t m = keys_for(i0 + i, n, causal);
        const C mx = row_max<C>(row, m);
        for (int64_t j = 0; j < m; ++j) row[j] = exp_acc(row[j] - mx);
        const double sum = row_sum(row, m);
        const C inv = C(1.0 / sum);
        for (int64_t j = 0; j < m; ++j) row[j] *= inv;
        for (int64_t j = m; j < n; ++j) row[j] = C(0);
        l[i] = C(double(mx) + std::log(sum));
      }
      if (hd > 0) gemm(false, false, rows, hd, n, C(1), s.data(), n, cv, ldv, C(0), o.ptr, o.ld);
      o.store();
    }
  });
}

template <class T>
void attention_backward_cpu(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, bool causal, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  using C = acc_t<T>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  const C scale = C(1.0 / std::sqrt(double(hd)));
  const HeadView<T> vg(grad), vq(q), vk(k), vv(v), vo(out), vdq(grad_q), vdk(grad_k), vdv(grad_v);
  const C* lp = lse.data<C>();
  BlasSingleThread single(nb * nh > 1 && num_threads() > 1);
  parallel_for(nb * nh, 5 * tq * tk * hd, [&](int64_t p0, int64_t p1) {
    std::vector<C> sg, sq, sk, sv, so, sdq, sdk, sdv, s, ds, dd;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / nh, h = p % nh;
      RowsOut<T, C> dk(vdk, b, h, 0, tk, hd, sdk), dv(vdv, b, h, 0, tk, hd, sdv);
      dk.zero();  // summed over the query tiles below
      dv.zero();
      int64_t ldk, ldv;
      const C* ck = rows_as(vk, b, h, 0, tk, hd, sk, ldk);
      const C* cv = rows_as(vv, b, h, 0, tk, hd, sv, ldv);
      for (int64_t i0 = 0; i0 < tq; i0 += kBlockQ) {
        const int64_t rows = std::min(kBlockQ, tq - i0);
        const int64_t n = keys_for(i0 + rows - 1, tk, causal);
        RowsOut<T, C> dq(vdq, b, h, i0, rows, hd, sdq);
        if (n == 0 || hd == 0) {
          dq.zero();
          dq.store();
          continue;
        }
        int64_t ldq, ldg, ldo;
        const C* cq = rows_as(vq, b, h, i0, rows, hd, sq, ldq);
        const C* cg = rows_as(vg, b, h, i0, rows, hd, sg, ldg);
        const C* co = rows_as(vo, b, h, i0, rows, hd, so, ldo);
        const C* l = lp + p * tq + i0;
        s.resize(size_t(rows * n));
        ds.resize(size_t(rows * n));
        dd.resize(size_t(rows));
        for (int64_t i = 0; i < rows; ++i) {  // D = rowsum(dO ∘ O) = rowsum(P ∘ dP)
          double dot = 0;
          const C* gr = cg + i * ldg;
          const C* orow = co + i * ldo;
#pragma omp simd reduction(+ : dot)
          for (int64_t e = 0; e < hd; ++e) dot += double(gr[e] * orow[e]);
          dd[size_t(i)] = C(dot);
        }
        gemm(false, true, rows, n, hd, scale, cq, ldq, ck, ldk, C(0), s.data(), n);  // S = s Q Kᵀ
        for (int64_t i = 0; i < rows; ++i) {                                          // P = exp(S - lse)
          C* row = s.data() + i * n;
          const int64_t m = keys_for(i0 + i, n, causal);
          const C li = l[i];
          for (int64_t j = 0; j < m; ++j) row[j] = exp_acc(row[j] - li);
          for (int64_t j = m; j < n; ++j) row[j] = C(0);
        }
        gemm(true, false, n, hd, rows, C(1), s.data(), n, cg, ldg, C(1), dv.ptr, dv.ld);  // dV += Pᵀ dO
        gemm(false, true, rows, n, hd, C(1), cg, ldg, cv, ldv, C(0), ds.data(), n);       // dP = dO Vᵀ
        for (int64_t i = 0; i < rows; ++i) {
          const C* prow = s.data() + i * n;
          C* row = ds.data() + i * n;
          const C d = dd[size_t(i)];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) row[j] = prow[j] * (row[j] - d);  // 0 where P is
        }
        gemm(false, false, rows, hd, n, scale, ds.data(), n, ck, ldk, C(0), dq.ptr, dq.ld);  // dQ = s dS K
        gemm(true, false, n, hd, rows, scale, ds.data(), n, cq, ldq, C(1), dk.ptr, dk.ld);   // dK += s dSᵀ Q
        dq.store();
      }
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
