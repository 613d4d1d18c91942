// CUDA matrix products through cuBLASLt: one wrapper for f64/f32/bf16/f16 (f32 compute for the
// 16-bit types, f64 for f64) with the bias added in the GEMM's epilogue when one is given, and
// the bias gradient's sums, GELU or GELU's gradient there when asked.
// cuBLASLt is column-major; a row-major out (M, N) is the column-major (N, M) product
// b^T · a^T, so `b` goes in cuBLAS's A slot and `a` in its B slot, each transposed or not
// according to which of its last two dims has unit stride (a transposed view costs no copy).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "trireme/kernels/cuda/blas.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

// A matrix operand as cuBLASLt sees it: rows x cols column-major with leading dim ld.
struct Layout {
  bool transpose = false;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;
};

// How logical row-major (r, c) with strides (sr, sc) maps to column-major memory: as the
// (c, r) matrix untransposed when rows are contiguous, else as the (r, c) matrix transposed.
// Returns false when neither dim has unit stride (the caller copies).
bool layout_for(int64_t r, int64_t c, int64_t sr, int64_t sc, Layout& l) {
  if ((sc == 1 || c == 1) && (sr >= c || r == 1)) {
    l.transpose = false;
    l.rows = c;
    l.cols = r;
    l.ld = std::max<int64_t>(r == 1 ? c : sr, std::max<int64_t>(c, 1));
    return true;
  }
  if ((sr == 1 || r == 1) && (sc >= r || c == 1)) {
    l.transpose = true;
    l.rows = r;
    l.cols = c;
    l.ld = std::max<int64_t>(c == 1 ? r : sc, std::max<int64_t>(r, 1));
    return true;
  }
  return false;
}

// The one stride that steps through the flattened batch dims, if there is one.
bool batch_stride_for(const Tensor& t, int64_t& stride) {
  const int64_t nb = t.dim() - 2;
  int64_t expect = -1;
  stride = 0;
  for (int64_t d = nb - 1; d >= 0; --d) {
    const int64_t size = t.sizes()[size_t(d)], s = t.strides()[size_t(d)];
    if (size == 1) continue;
    if (expect < 0) {
      stride = s;
    } else if (s != expect) {
      return false;
    }
    expect = s * size;
  }
  return true;
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.sizes(), t.dtype(), t.device());
  find_kernel<CopyKernel>("copy", t.device(), t.dtype())(t, c);
  return c;
}

template <class T>
constexpr cudaDataType_t cuda_dtype() {
  if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, bf16_t>) return CUDA_R_16BF;
  return CUDA_R_16F;
}

struct MatrixLayoutHandle {
  cublasLtMatrixLayout_t h = nullptr;
  MatrixLayoutHandle(cudaDataType_t type, const Layout& l, int64_t batch) {
    TRIREME_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, type, uint64_t(l.rows), uint64_t(l.cols), l.ld));
    if (batch > 1) {
      int32_t count = int32_t(batch);
      TRIREME_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      TRIREME_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                            &l.batch_stride, sizeof(l.batch_stride)));
    }
  }
  ~MatrixLayoutHandle() { cublasLtMatrixLayoutDestroy(h); }
};

// GELU in the epilogue (linalg.h: MatmulGeluKernel, MatmulGeluBackwardKernel): none; forward,
// writing GELU's input to `pre` (GELU_AUX); backward, reading it from `pre` (DGELU).
enum class Gelu { none, forward, backward };

// Whether cuBLASLt may apply GELU in the epilogue of this product: 2-D, not f64, a k to sum over,
// and GELU's input (cuBLASLt's aux matrix, out's layout) with a leading dim divisible by 8 and
// 16-byte aligned, as cuBLASLt asks.
bool gelu_epilogue_fits(bool f64, int64_t batch, int64_t N, int64_t K, const Tensor& pre) {
  return !f64 && batch == 1 && K > 0 && N % 8 == 0 && pointer_alignment(pre.data_ptr()) >= 16;
}

// out = a · b (+ bias), or with Accumulate out = c + a · b (c: out itself or apart from it, read
// as cuBLASLt's C operand with D's layout). With row_sums defined (2-D, no bias, not
// Accumulate), also row_sums = a's rows summed: cuBLASLt's BGRADB epilogue sums its B operand
// (our a) over the product's k, where cuBLASLt has an algorithm for it. With gelu (not
// Accumulate, no row_sums, no bias for the backward): GELU or its gradient applied to the product
// in the epilogue, `pre` being GELU's input; where it may not or has no algorithm, the unfused calls.
template <class T, bool Accumulate>
void matmul_cuda(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& c, Tensor& out,
                 Tensor row_sums = Tensor(), Gelu gelu = Gelu::none, Tensor pre = Tensor()) {
  const int64_t M = out.size(-2), N = out.size(-1), K = a_in.size(-1);
  const int64_t batch = shape_numel(Shape(out.sizes().begin(), out.sizes().end() - 2));
  if (out.numel() == 0) return;
  LaunchContext ctx(out);
  const bool f64 = std::is_same_v<T, double>;
  const bool bias_in_epilogue = bias.defined() && !f64;  // cuBLASLt has no f64 bias epilogue
  if (row_sums.defined() && (f64 || K == 0)) {  // nor a bias-gradient one
    matmul_cuda<T, Accumulate>(a_in, b_in, bias, c, out);
    sum_rows_of(a_in, row_sums);
    return;
  }
  auto unfused_gelu = [&] {
    if (gelu == Gelu::forward) {
      matmul_then_gelu(a_in, b_in, bias, out, pre);
    } else {
      matmul_then_gelu_backward(a_in, b_in, pre, out);
    }
  };
  if (gelu != Gelu::none && !gelu_epilogue_fits(f64, batch, N, K, pre)) {
    unfused_gelu();
    return;
  }
  if (K == 0) {
    if (!Accumulate) {
      find_kernel<FillKernel>("fill", out.device(), out.dtype())(out, 0.0);
    } else if (c.data_ptr() != out.data_ptr()) {
      find_kernel<CopyKernel>("copy", out.device(), out.dtype())(c, out);
    }
  } else {
    Tensor a = a_in, b = b_in;
    Layout la, lb;
    int64_t sa = 0, sb = 0;
    if (!layout_for(M, K, a.stride(-2), a.stride(-1), la) || !batch_stride_for(a, sa)) {
      a = contiguous_copy(a);
      layout_for(M, K, a.stride(-2), a.stride(-1), la);
      batch_stride_for(a, sa);
    }
    if (!layout_for(K, N, b.stride(-2), b.stride(-1), lb) || !batch_stride_for(b, sb)) {
      b = contiguous_copy(b);
      layout_for(K, N, b.stride(-2), b.stride(-1), lb);
      batch_stride_for(b, sb);
    }
    la.batch_stride = sa;
    lb.batch_stride = sb;
    Layout lo;
    lo.rows = N;
    lo.cols = M;
    lo.ld = N;
    lo.batch_stride = M * N;

    const cudaDataType_t type = cuda_dtype<T>();
    const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
    cublasLtMatmulDesc_t desc = nullptr;
    TRIREME_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, scale_type));
    struct DescGuard {
      cublasLtMatmulDesc_t d;
      ~DescGuard() { cublasLtMatmulDescDestroy(d); }
    } desc_guard{desc};
    // cuBLAS's A is our b (an N x K operand), its B is our a (K x M).
    const cublasOperation_t op_a = lb.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = la.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    const cublasLtEpilogue_t epilogue = gelu == Gelu::backward ? CUBLASLT_EPILOGUE_DGELU
                                        : gelu == Gelu::forward
                                            ? (bias_in_epilogue ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                        : row_sums.defined() ? CUBLASLT_EPILOGUE_BGRADB
                                        : bias_in_epilogue   ? CUBLASLT_EPILOGUE_BIAS
                                                             : CUBLASLT_EPILOGUE_DEFAULT;
    TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (gelu != Gelu::none) {  // GELU's input: an (N, M) column-major matrix like D
      const void* aux = pre.data_ptr();
      const int64_t aux_ld = N;
      TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
      TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    const void* vector_ptr = row_sums.defined() ? row_sums.data_ptr() : bias_in_epilogue ? bias.data_ptr() : nullptr;
    if (vector_ptr != nullptr) {  // the bias read, or the sums written
      TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector_ptr,
                                                          sizeof(vector_ptr)));
      const int32_t vector_type = int32_t(type);
      TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vector_type,
                                                          sizeof(vector_type)));
    }
    MatrixLayoutHandle desc_a(type, lb, batch), desc_b(type, la, batch), desc_d(type, lo, batch);

    const int dev = out.device().index;
    const BlasContext bc = blas_context(dev, ctx.stream);
    MatmulProblem problem{bc.handle, desc, desc_a.h, desc_b.h, desc_d.h};
    const int64_t key_parts[] = {dev, int64_t(type), op_a, op_b, lb.rows, lb.cols, lb.ld, la.rows, la.cols, la.ld,
                                 lo.ld, batch, lb.batch_stride, la.batch_stride, epilogue, int64_t(Accumulate)};
    problem.shape_key.assign(reinterpret_cast<const char*>(key_parts), sizeof(key_parts));
    const void* c_ptr = Accumulate ? c.data_ptr() : out.data_ptr();
    problem.alignment = {uint32_t(pointer_alignment(b.data_ptr())), uint32_t(pointer_alignment(a.data_ptr())),
                         uint32_t(pointer_alignment(c_ptr)), uint32_t(pointer_alignment(out.data_ptr()))};
    // beta = 1 reads c as C (D's layout; out itself for out += a · b).
    const double alpha64 = 1.0, beta64 = Accumulate ? 1.0 : 0.0;
    const float alpha32 = 1.f, beta32 = Accumulate ? 1.f : 0.f;
    const void* alpha = f64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
    const void* beta = f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
    cublasLtMatmulAlgo_t algo;
    const bool found = matmul_algo(problem, algo);
    if (!found && row_sums.defined()) {  // this layout or type has no bias-gradient epilogue
      matmul_cuda<T, Accumulate>(a_in, b_in, bias, c, out);
      sum_rows_of(a_in, row_sums);
      return;
    }
    if (!found && gelu != Gelu::none) {  // nor a GELU one
      unfused_gelu();
      return;
    }
    TRIREME_CHECK(found, "matmul (CUDA): cuBLASLt found no algorithm for ", a_in.sizes(), " x ", b_in.sizes(), " in ",
                  dtype_name(dtype_v<T>));
    TRIREME_CUBLAS_CHECK(cublasLtMatmul(bc.handle, desc, alpha, b.data_ptr(), desc_a.h, a.data_ptr(), desc_b.h, beta,
                                        c_ptr, desc_d.h, out.data_ptr(), desc_d.h, &algo, bc.workspace,
                                        kBlasWorkspaceBytes, ctx.stream));
  }
  if (bias.defined() && (!bias_in_epilogue || K == 0)) {
    const Shape& shape = out.sizes();
    Shape bias_strides(shape.size(), 0);
    bias_strides.back() = bias.stride(0);
    Tensor bias_view = bias.alias(shape, bias_strides, bias.offset());
    find_kernel<BinaryKernel>("add", out.device(), out.dtype())(out, bias_view, out);
  }
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_matmul) {
  registry.add_each<MatmulKernel, double, float, bf16_t, f16_t>("matmul", DeviceType::cuda, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out) {
      matmul_cuda<T, false>(a, b, bias, Tensor(), out);
    };
  });
  registry.add_each<MatmulAddKernel, double, float, bf16_t, f16_t>("matmul_add", DeviceType::cuda, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out) {
      matmul_cuda<T, true>(a, b, Tensor(), c, out);
    };
  });
  registry.add_each<MatmulRowSumsKernel, double, float, bf16_t, f16_t>("matmul_row_sums", DeviceType::cuda,
                                                                      []<class T>() {
    return +[](const Tensor& a, const Tensor& b, Tensor& out, Tensor& row_sums) {
      matmul_cuda<T, false>(a, b, Tensor(), Tensor(), out, row_sums);
    };
  });
  // 16-bit only: there the epilogue saves a round trip of the product through memory; f32 static
  // runs keep the bits of eager ones (the epilogue's GELU is not the elementwise kernel's).
  registry.add_each<MatmulGeluKernel, bf16_t, f16_t>("matmul_gelu", DeviceType::cuda, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, Tensor& pre) {
      matmul_cuda<T, false>(a, b, bias, Tensor(), out, Tensor(), Gelu::forward, pre);
    };
  });
  registry.add_each<MatmulGeluBackwardKernel, bf16_t, f16_t>("matmul_gelu_backward", DeviceType::cuda, []<class T>() {
    return +[](const Tensor& a, const Tensor& b, const Tensor& pre, Tensor& out) {
      matmul_cuda<T, false>(a, b, Tensor(), Tensor(), out, Tensor(), Gelu::backward, pre);
    };
  });
}

}  // namespace trireme::cuda_kernels
