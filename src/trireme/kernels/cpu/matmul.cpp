// CPU matrix products through OpenBLAS: strided and batched GEMM, bias epilogue, bf16/f16 via f32.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// A (rows, cols) matrix as BLAS sees it: a row-major base pointer, whether it is stored
// transposed, and its leading dimension.
template <class T>
struct BlasMatrix {
  const T* ptr;
  CBLAS_TRANSPOSE trans;
  blasint ld;
};

// Whether a (rows, cols) matrix with element strides (sr, sc) can go to BLAS without a copy:
// row-major (sc == 1) or a transposed row-major matrix (sr == 1). The stride of a size-1 dim
// never matters, so it is replaced by whatever BLAS accepts.
bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, CBLAS_TRANSPOSE& trans, int64_t& ld) {
  {
    int64_t r = rows == 1 ? std::max<int64_t>(cols, 1) : sr, c = cols == 1 ? 1 : sc;
    if (c == 1 && r >= std::max<int64_t>(cols, 1)) {
      trans = CblasNoTrans;
      ld = r;
      return ld <= INT_MAX;
    }
  }
  int64_t r = rows == 1 ? 1 : sr, c = cols == 1 ? std::max<int64_t>(rows, 1) : sc;
  if (r == 1 && c >= std::max<int64_t>(rows, 1)) {
    trans = CblasTrans;
    ld = c;
    return ld <= INT_MAX;
  }
  return false;
}

// Copies a strided (rows, cols) matrix into a contiguous row-major buffer of U.
template <class T, class U>
void pack(const T* p, int64_t rows, int64_t cols, int64_t sr, int64_t sc, U* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = p + i * sr;
    U* d = dst + i * cols;
    if (sc == 1) {
      for (int64_t j = 0; j < cols; ++j) d[j] = U(acc_t<T>(row[j]));
    } else {
      for (int64_t j = 0; j < cols; ++j) d[j] = U(acc_t<T>(row[j * sc]));
    }
  }
}

// Ready-for-BLAS view of one matrix operand, packing into `scratch` when the strides need it.
template <class T, class U>
BlasMatrix<U> blas_operand(const T* p, int64_t rows, int64_t cols, int64_t sr, int64_t sc, std::vector<U>& scratch) {
  if constexpr (std::is_same_v<T, U>) {
    CBLAS_TRANSPOSE trans;
    int64_t ld;
    if (blas_layout(rows, cols, sr, sc, trans, ld)) return {p, trans, blasint(ld)};
  }
  scratch.resize(size_t(rows * cols));
  pack(p, rows, cols, sr, sc, scratch.data());
  return {scratch.data(), CblasNoTrans, blasint(std::max<int64_t>(cols, 1))};
}

inline void gemm(const BlasMatrix<float>& a, const BlasMatrix<float>& b, float* c, int64_t m, int64_t n, int64_t k,
                 int64_t ldc, float beta) {
  cblas_sgemm(CblasRowMajor, a.trans, b.trans, blasint(m), blasint(n), blasint(k), 1.0f, a.ptr, a.ld, b.ptr, b.ld,
              beta, c, blasint(ldc));
}
inline void gemm(const BlasMatrix<double>& a, const BlasMatrix<double>& b, double* c, int64_t m, int64_t n,
                 int64_t k, int64_t ldc, double beta) {
  cblas_dgemm(CblasRowMajor, a.trans, b.trans, blasint(m), blasint(n), blasint(k), 1.0, a.ptr, a.ld, b.ptr, b.ld,
              beta, c, blasint(ldc));
}

// Folds a's batch dims into its row dim when its layout allows it, so that a batch of products
// with one shared b becomes one tall GEMM (the (B, T, C) · (C, N) case). Returns the folded
// row stride through `row_stride`.
bool fold_rows(const Tensor& a, int64_t nb, int64_t& row_stride) {
  int64_t prev_size = 0, prev_stride = 0;
  bool have = false;
  for (int64_t d = nb; d >= 0; --d) {  // the row dim (index nb) and the batch dims before it
    const int64_t s = a.sizes()[size_t(d)], st = a.strides()[size_t(d)];
    if (s == 1) continue;
    if (have && st != prev_stride * prev_size) return false;
    if (!have) row_stride = st;
    have = true;
    prev_size = s;
    prev_stride = st;
  }
  if (!have) row_stride = a.sizes()[size_t(nb) + 1];  // a single row: any stride does
  return true;
}

// out = a · b (+ bias), or with Accumulate out = c + a · b (c: out itself or apart from it).
template <class T, bool Accumulate>
void matmul_cpu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c_in, Tensor& out) {
  using U = acc_t<T>;  // the type BLAS computes in: float for bf16/f16
  const int64_t nd = out.dim(), nb = nd - 2;
  const int64_t m = out.sizes()[size_t(nd - 2)], n = out.sizes()[size_t(nd - 1)], k = a.sizes()[size_t(nd - 1)];
  TRIREME_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "matmul: dimensions of ", a.sizes(), " and ",
                b.sizes(), " exceed the BLAS integer range");
  int64_t batch = 1;
  for (int64_t d = 0; d < nb; ++d) batch *= out.sizes()[size_t(d)];
  if (batch == 0 || m == 0 || n == 0) return;

  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const T* pbias = bias.defined() ? bias.data<T>() : nullptr;
  const int64_t bias_stride = bias.defined() ? bias.stride(0) : 0;
  const int64_t sam = a.stride(-2), sak = a.stride(-1), sbk = b.stride(-2), sbn = b.stride(-1);

  // One tall GEMM when b is shared across the batch and a's batch dims fold into its rows.
  int64_t rows = m, row_stride = sam;
  bool b_shared = true;
  for (int64_t d = 0; d < nb; ++d) b_shared = b_shared && (b.strides()[size_t(d)] == 0 || out.sizes()[size_t(d)] == 1);
  if (nb > 0 && b_shared && batch * m <= INT_MAX && fold_rows(a, nb, row_stride)) {
    rows = batch * m;
    batch = 1;
  } else {
    row_stride = sam;
  }

  // Batch offsets of a, b and out for batch item i (row-major over the batch dims).
  auto offsets = [&](int64_t i, int64_t& oa, int64_t& ob) {
    oa = ob = 0;
    for (int64_t d = nb; d-- > 0;) {
      const int64_t s = out.sizes()[size_t(d)], j = i % s;
      i /= s;
      oa += j * a.strides()[size_t(d)];
      ob += j * b.strides()[size_t(d)];
    }
  };

  std::vector<U> sa, sb, sc;  // scratch: packed operands, and the f32 result for bf16/f16
  for (int64_t i = 0; i < batch; ++i) {
    int64_t oa, ob;
    offsets(i, oa, ob);
    T* c = po + i * rows * n;
    U* cu;
    if constexpr (std::is_same_v<T, U>) {
      cu = c;
    } else {
      sc.resize(size_t(rows * n));
      cu = sc.data();
      if (Accumulate) {  // the f32 sum starts from c's values
        const T* from = c_in.data<T>() + i * rows * n;
        for (int64_t j = 0; j < rows * n; ++j) cu[j] = U(acc_t<T>(from[j]));
      }
    }
    if constexpr (std::is_same_v<T, U>) {
      if (Accumulate && c_in.data<T>() != po) std::copy_n(c_in.data<T>() + i * rows * n, rows * n, cu);
    }
    // The bias epilogue: C starts as the bias on every row and the GEMM adds into it (beta = 1).
    if (pbias) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) cu[r * n + j] = U(acc_t<T>(pbias[j * bias_stride]));
      }
    }
    if (k == 0) {
      if (!pbias && !Accumulate) std::fill(cu, cu + rows * n, U(0));
    } else {
      BlasMatrix<U> ma = blas_operand<T, U>(pa + oa, rows, k, row_stride, sak, sa);
      BlasMatrix<U> mb = blas_operand<T, U>(pb + ob, k, n, sbk, sbn, sb);
      gemm(ma, mb, cu, rows, n, k, n, pbias || Accumulate ? U(1) : U(0));
    }
    if constexpr (!std::is_same_v<T, U>) {
      const int64_t total = rows * n;
      parallel_for(total, 1, [&](int64_t s, int64_t e) {
        for (int64_t j = s; j < e; ++j) c[j] = T(cu[j]);
      });
    }
  }
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_matmul) {
  registry.add_each<MatmulKernel, double, float, bf16_t, f16_t>("matmul", DeviceType::cpu, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
      matmul_cpu<T, false>(a, b, bias, Tensor(), out);
    };
  });
  registry.add_each<MatmulAddKernel, double, float, bf16_t, f16_t>("matmul_add", DeviceType::cpu, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out) {
      matmul_cpu<T, true>(a, b, Tensor(), c, out);
    };
  });
}

}  // namespace trireme::cpu
