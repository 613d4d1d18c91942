// The shared cuBLASLt state and the row-major strided-batched GEMM (see blas.cuh).
#include "trireme/kernels/cuda/blas.cuh"

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "trireme/cuda/graph_capture.h"

namespace trireme::cuda_kernels {
namespace {

struct BlasState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::unordered_map<std::string, cublasLtMatmulAlgo_t> algos;  // by problem and alignment
};

BlasState& blas_state() {
  static BlasState* s = new BlasState();  // never destroyed: see the allocator's note on exit
  return *s;
}

template <class C>
constexpr cudaDataType_t real_type() {
  return std::is_same_v<C, double> ? CUDA_R_64F : CUDA_R_32F;
}

struct LayoutHandle {
  cublasLtMatrixLayout_t h = nullptr;
  LayoutHandle(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    TRIREME_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, type, uint64_t(rows), uint64_t(cols), ld));
    if (batch > 1) {
      int32_t count = int32_t(batch);
      TRIREME_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      TRIREME_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                            sizeof(stride)));
    }
  }
  ~LayoutHandle() { cublasLtMatrixLayoutDestroy(h); }
  LayoutHandle(const LayoutHandle&) = delete;
  LayoutHandle& operator=(const LayoutHandle&) = delete;
};

}  // namespace

BlasContext blas_context(int device, cudaStream_t stream) {
  BlasState& st = blas_state();
  std::lock_guard lock(st.mu);
  auto& h = st.handles[device];
  if (!h) TRIREME_CUBLAS_CHECK(cublasLtCreate(&h));
  auto& w = st.workspaces[{device, stream}];
  if (!w) {
    cuda::RelaxedCaptureScope relaxed;  // a stream's first GEMM may be inside a capture, which keeps the workspace
    TRIREME_CUDA_CHECK(cudaMalloc(&w, kBlasWorkspaceBytes));
  }
  return {h, w};
}

size_t pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  size_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

bool matmul_algo(const MatmulProblem& p, cublasLtMatmulAlgo_t& algo) {
  std::string key = p.shape_key;
  key.append(reinterpret_cast<const char*>(p.alignment.data()), sizeof(p.alignment));
  BlasState& st = blas_state();
  std::lock_guard lock(st.mu);
  if (auto it = st.algos.find(key); it != st.algos.end()) {
    algo = it->second;
    return true;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  TRIREME_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = kBlasWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  // Views may start anywhere: tell the heuristic the real alignment so it never picks an
  // algorithm that assumes more.
  const cublasLtMatmulPreferenceAttributes_t min_alignment[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (size_t i = 0; i < p.alignment.size(); ++i) {
    cublasLtMatmulPreferenceSetAttribute(pref, min_alignment[i], &p.alignment[i], sizeof(uint32_t));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  algo = st.algos.emplace(std::move(key), result.algo).first->second;
  return true;
}

// Row-major C (m, n) is column-major Cᵀ (n, m) = op(B)ᵀ op(A)ᵀ: cuBLAS's A slot takes our B
// (column-major: the stored (rows, cols) swapped) and its B slot our A.
template <class C>
void gemm_batched(const LaunchContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const C* a, int64_t lda, int64_t stride_a, const C* b, int64_t ldb, int64_t stride_b, double beta,
                  C* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  TRIREME_CHECK(k > 0, "gemm_batched: k = 0 is the caller's to handle");
  int device = 0;
  TRIREME_CUDA_CHECK(cudaGetDevice(&device));
  const BlasContext bc = blas_context(device, ctx.stream);
  constexpr bool f64 = std::is_same_v<C, double>;
  const cudaDataType_t type = real_type<C>();
  cublasLtMatmulDesc_t desc = nullptr;
  TRIREME_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, type));
  struct DescGuard {
    cublasLtMatmulDesc_t d;
    ~DescGuard() { cublasLtMatmulDescDestroy(d); }
  } guard{desc};
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  TRIREME_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored column-major shapes: B is (k, n) row-major -> (n, k), or (n, k) -> (k, n) when tb.
  LayoutHandle la(type, tb ? k : n, tb ? n : k, ldb, batch, stride_b);
  LayoutHandle lb(type, ta ? m : k, ta ? k : m, lda, batch, stride_a);
  LayoutHandle lc(type, n, m, ldc, batch, stride_c);

  const C al = C(alpha), be = C(beta);
  MatmulProblem problem;
  problem.handle = bc.handle;
  problem.desc = desc;
  problem.a = la.h;
  problem.b = lb.h;
  problem.d = lc.h;
  const int64_t key_parts[] = {device, int64_t(type), ta, tb, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c,
                               batch, beta != 0.0};
  problem.shape_key.assign(reinterpret_cast<const char*>(key_parts), sizeof(key_parts));
  problem.alignment = {uint32_t(pointer_alignment(b)), uint32_t(pointer_alignment(a)), uint32_t(pointer_alignment(c)),
                       uint32_t(pointer_alignment(c))};
  cublasLtMatmulAlgo_t algo;
  TRIREME_CHECK(matmul_algo(problem, algo), "gemm_batched (CUDA): cuBLASLt found no algorithm for m=", m, " n=", n,
                " k=", k, " batch=", batch);
  TRIREME_CUBLAS_CHECK(cublasLtMatmul(bc.handle, desc, &al, b, la.h, a, lb.h, &be, c, lc.h, c, lc.h, &algo,
                                      bc.workspace, kBlasWorkspaceBytes, ctx.stream));
}

template void gemm_batched<float>(const LaunchContext&, bool, bool, int64_t, int64_t, int64_t, double, const float*,
                                  int64_t, int64_t, const float*, int64_t, int64_t, double, float*, int64_t, int64_t,
                                  int64_t);
template void gemm_batched<double>(const LaunchContext&, bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                   int64_t, int64_t, const double*, int64_t, int64_t, double, double*, int64_t, int64_t,
                                   int64_t);

}  // namespace trireme::cuda_kernels
