// CPU matrix products: strided and batched GEMM with a bias epilogue. f32 and bf16 through
// oneDNN (bf16 read as it is, on AMX tiles where the CPU has them), f16 converted to f32, f64
// through OpenBLAS; every product accumulates in f32 or f64.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/onednn_gemm.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// A (rows, cols) matrix as the GEMM sees it: a row-major base pointer, whether it is stored
// transposed, and its leading dimension.
template <class T>
struct GemmMatrix {
  const T* ptr;
  bool trans;
  int64_t ld;
};

// Whether a (rows, cols) matrix with element strides (sr, sc) can go to the GEMM without a copy:
// row-major (sc == 1) or a transposed row-major matrix (sr == 1). The stride of a size-1 dim
// never matters, so it is replaced by whatever the GEMM accepts.
bool gemm_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool& trans, int64_t& ld) {
  {
    int64_t r = rows == 1 ? std::max<int64_t>(cols, 1) : sr, c = cols == 1 ? 1 : sc;
    if (c == 1 && r >= std::max<int64_t>(cols, 1)) {
      trans = false;
      ld = r;
      return ld <= INT_MAX;
    }
  }
  int64_t r = rows == 1 ? 1 : sr, c = cols == 1 ? std::max<int64_t>(rows, 1) : sc;
  if (r == 1 && c >= std::max<int64_t>(rows, 1)) {
    trans = true;
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

// Ready-for-GEMM view of one matrix operand, packing into `scratch` when the strides or the
// type need it.
template <class T, class U>
GemmMatrix<U> gemm_operand(const T* p, int64_t rows, int64_t cols, int64_t sr, int64_t sc, std::vector<U>& scratch) {
  if constexpr (std::is_same_v<T, U>) {
    bool trans;
    int64_t ld;
    if (gemm_layout(rows, cols, sr, sc, trans, ld)) return {p, trans, ld};
  }
  scratch.resize(size_t(rows * cols));
  pack(p, rows, cols, sr, sc, scratch.data());
  return {scratch.data(), false, std::max<int64_t>(cols, 1)};
}

// c = a · b + beta c, beta 0 or 1.
inline void gemm(const GemmMatrix<double>& a, const GemmMatrix<double>& b, double* c, int64_t m, int64_t n, int64_t k,
                 int64_t ldc, double beta) {
  auto trans = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  cblas_dgemm(CblasRowMajor, trans(a.trans), trans(b.trans), blasint(m), blasint(n), blasint(k), 1.0, a.ptr,
              blasint(a.ld), b.ptr, blasint(b.ld), beta, c, blasint(ldc));
}
inline void gemm(const GemmMatrix<float>& a, const GemmMatrix<float>& b, float* c, int64_t m, int64_t n, int64_t k,
                 int64_t ldc, float beta) {
  onednn_gemm(GemmType::f32, {a.ptr, a.trans, a.ld}, {b.ptr, b.trans, b.ld}, GemmType::f32, c, ldc, m, n, k, nullptr, 0,
              beta != 0);
}

template <class T> constexpr GemmType gemm_type = std::is_same_v<T, bf16_t> ? GemmType::bf16 : GemmType::f32;

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
// The GEMM reads its inputs as In: T itself, or f32 for bf16/f16 converted first. f32 and bf16
// read as they are go to oneDNN whole (kDirect); the others get their bias and sum here and, when
// converted, a f32 result rounded to T once.
template <class T, class In, bool Accumulate>
void matmul_cpu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c_in, Tensor& out) {
  using U = acc_t<T>;  // the type the GEMM accumulates in: float for bf16/f16
  constexpr bool kDirect = std::is_same_v<In, T> && (std::is_same_v<T, float> || std::is_same_v<T, bf16_t>);
  const int64_t nd = out.dim(), nb = nd - 2;
  const int64_t m = out.sizes()[size_t(nd - 2)], n = out.sizes()[size_t(nd - 1)], k = a.sizes()[size_t(nd - 1)];
  TRIREME_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "matmul: dimensions of ", a.sizes(), " and ",
                b.sizes(), " exceed the GEMM's integer range");
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

  std::vector<In> sa, sb;  // scratch: packed operands
  std::vector<U> sc;       // the f32 result of a converting GEMM
  for (int64_t i = 0; i < batch; ++i) {
    int64_t oa, ob;
    offsets(i, oa, ob);
    T* c = po + i * rows * n;
    if (Accumulate && c_in.data<T>() != po && (std::is_same_v<T, U> || kDirect)) {
      std::copy_n(c_in.data<T>() + i * rows * n, rows * n, c);
    }
    if constexpr (kDirect) {  // oneDNN reads and writes T itself, the bias and the sum included
      if (k == 0) {
        if (!Accumulate) {
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < n; ++j) c[r * n + j] = pbias ? pbias[j * bias_stride] : T(0);
          }
        }
      } else {
        GemmMatrix<T> ma = gemm_operand<T, T>(pa + oa, rows, k, row_stride, sak, sa);
        GemmMatrix<T> mb = gemm_operand<T, T>(pb + ob, k, n, sbk, sbn, sb);
        onednn_gemm(gemm_type<T>, {ma.ptr, ma.trans, ma.ld}, {mb.ptr, mb.trans, mb.ld}, gemm_type<T>, c, n, rows, n,
                    k, pbias, bias_stride, Accumulate);
      }
    } else {  // the bias and the sum here, in U; a converting GEMM's result rounded to T once
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
      // C starts as the bias on every row and the GEMM adds into it (beta = 1).
      if (pbias) {
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < n; ++j) cu[r * n + j] = U(acc_t<T>(pbias[j * bias_stride]));
        }
      }
      if (k == 0) {
        if (!pbias && !Accumulate) std::fill(cu, cu + rows * n, U(0));
      } else {
        GemmMatrix<In> ma = gemm_operand<T, In>(pa + oa, rows, k, row_stride, sak, sa);
        GemmMatrix<In> mb = gemm_operand<T, In>(pb + ob, k, n, sbk, sbn, sb);
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
}

// The input type of T's GEMMs: bf16 as it is where oneDNN has bf16 GEMMs (AVX-512; AMX tiles
// where present), f16 always as f32 (oneDNN's f16 GEMMs need AVX512-FP16).
template <class T, bool Accumulate>
void matmul_for(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c_in, Tensor& out) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    if (onednn_has_bf16_gemm()) return matmul_cpu<T, bf16_t, Accumulate>(a, b, bias, c_in, out);
  }
  matmul_cpu<T, acc_t<T>, Accumulate>(a, b, bias, c_in, out);
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_matmul) {
  registry.add_each<MatmulKernel, double, float, bf16_t, f16_t>("matmul", DeviceType::cpu, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
      matmul_for<T, false>(a, b, bias, Tensor(), out);
    };
  });
  registry.add_each<MatmulAddKernel, double, float, bf16_t, f16_t>("matmul_add", DeviceType::cpu, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out) {
      matmul_for<T, true>(a, b, Tensor(), c, out);
    };
  });
  registry.add_each<MatmulRowSumsKernel, double, float, bf16_t, f16_t>("matmul_row_sums", DeviceType::cpu, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums) {
      matmul_for<T, false>(a, b, Tensor(), Tensor(), out);
      sum_rows_of(a, row_sums);
    };
  });
  // No epilogue to fuse into on the CPU: registered so that static mode folds the same calls on
  // every device (graph/gemm_folds.h), with the unfused calls' bits.
  registry.add_each<MatmulGeluKernel, double, float, bf16_t, f16_t>("matmul_gelu", DeviceType::cpu, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, Tensor& pre) {
      matmul_then_gelu(a, b, bias, out, pre);
    };
  });
  registry.add_each<MatmulGeluBackwardKernel, double, float, bf16_t, f16_t>("matmul_gelu_backward", DeviceType::cpu,
                                                                           []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& pre, Tensor& out) {
      matmul_then_gelu_backward(a, b, pre, out);
    };
  });
}

}  // namespace trireme::cpu
