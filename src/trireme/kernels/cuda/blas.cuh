// Internal to the CUDA kernels: the per-device cuBLASLt handle and per-stream workspace that
// every GEMM shares, the algorithm each GEMM runs, and a row-major strided-batched GEMM for
// kernels that need products of their own (attention), in f32 (no TF32: CUBLAS_COMPUTE_32F) or
// f64.
//
//   // C[i] = 0.5 * A[i] · B[i]ᵀ for i < batch; A (m, k), B (n, k), C (m, n), all row-major
//   gemm_batched<float>(ctx, false, true, m, n, k, 0.5, a, lda, m * lda, b, ldb, n * ldb, 0.0, c, n, m * n, batch);
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <string>

#include "trireme/kernels/cuda/launch.cuh"

#define TRIREME_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                                   \
    cublasStatus_t trireme_st_ = (expr);                                                                 \
    TRIREME_CHECK(trireme_st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt error ", int(trireme_st_), " (",       \
                  cublasLtGetStatusString(trireme_st_), ") in ", #expr);                                 \
  } while (0)

namespace trireme::cuda_kernels {

inline constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;  // what cuBLAS recommends for Hopper

struct BlasContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // kBlasWorkspaceBytes, used by one stream only
};

// Created on first use and kept for the life of the process (streams may run GEMMs at once, so
// each (device, stream) has its own workspace).
BlasContext blas_context(int device, cudaStream_t stream);

// The largest power of two (at most 256) that divides the address: what cuBLASLt may assume.
size_t pointer_alignment(const void* p);

// One GEMM as cuBLASLt's heuristic is asked about it.
struct MatmulProblem {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // C takes D's layout
  std::string shape_key;                // everything that defines the problem but its addresses
  std::array<uint32_t, 4> alignment{};  // the bytes A, B, C and D's addresses are aligned to
};

// The heuristic's first answer for `p`, asked once per problem and alignment (the query costs
// tens of microseconds), or false when cuBLASLt has no algorithm for it. Timing the heuristic's
// first eight candidates instead was measured and gained nothing in a training step
// (docs/PERFORMANCE.md, "GEMM algorithms").
bool matmul_algo(const MatmulProblem& p, cublasLtMatmulAlgo_t& algo);

// Row-major C[i] = alpha · op(A[i]) · op(B[i]) + beta · C[i] for i < batch, op(A) (m, k),
// op(B) (k, n), C (m, n); ta / tb mean A / B are stored transposed ((k, m) / (n, k)). Leading
// dims are row strides; stride_* step between batch entries. C is float or double.
template <class C>
void gemm_batched(const LaunchContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const C* a, int64_t lda, int64_t stride_a, const C* b, int64_t ldb, int64_t stride_b, double beta,
                  C* c, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace trireme::cuda_kernels
