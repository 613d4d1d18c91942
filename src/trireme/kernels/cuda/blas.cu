// The shared cuBLASLt state and the row-major strided-batched GEMM (see blas.cuh).
#include "trireme/kernels/cuda/blas.cuh"

#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "trireme/cuda/graph_capture.h"

namespace trireme::cuda_kernels {
namespace {

// An algorithm chosen for a problem, valid for operands at least as aligned as these.
struct ChosenAlgo {
  cublasLtMatmulAlgo_t algo;
  std::array<uint32_t, 4> alignment;
};

struct BlasState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::unordered_map<std::string, std::vector<ChosenAlgo>> algos;  // by MatmulProblem::shape_key
};

BlasState& blas_state() {
  static BlasState* s = new BlasState();  // never destroyed: see the allocator's note on exit
  return *s;
}

// Of the algorithms chosen for a problem, one valid for operands of this alignment: the one
// chosen for the most aligned operands among those.
const ChosenAlgo* usable(const std::vector<ChosenAlgo>& chosen, const std::array<uint32_t, 4>& alignment) {
  const ChosenAlgo* best = nullptr;
  for (const ChosenAlgo& c : chosen) {
    bool fits = true;
    for (size_t i = 0; i < alignment.size(); ++i) fits = fits && c.alignment[i] <= alignment[i];
    if (fits && (best == nullptr || best->alignment < c.alignment)) best = &c;
  }
  return best;
}

// Up to `count` (at most kMatmulCandidates) of the heuristic's answers for the problem,
// best-ranked first.
struct Candidates {
  std::array<cublasLtMatmulHeuristicResult_t, kMatmulCandidates> results{};
  int count = 0;
};

Candidates heuristic_candidates(const MatmulProblem& p, int count) {
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
  Candidates c;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc, p.a, p.b, p.d, p.d, pref, count,
                                                               c.results.data(), &c.count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS) c.count = 0;
  return c;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return true;  // the stream cannot say: do not synchronize with it
  }
  return status != cudaStreamCaptureStatusNone;
}

struct TimingEvents {
  std::vector<cudaEvent_t> events;
  explicit TimingEvents(size_t n) : events(n, nullptr) {
    for (cudaEvent_t& e : events) TRIREME_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~TimingEvents() {
    for (cudaEvent_t e : events) {
      if (e) cudaEventDestroy(e);
    }
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
};

// The index of the candidate whose launches take least time on `stream`: each runs once to warm
// up, then kTimedRuns times between two events. A candidate cuBLASLt refuses is passed over.
int fastest(const Candidates& candidates, cudaStream_t stream, const MatmulLaunch& launch) {
  constexpr int kTimedRuns = 2;
  const size_t n = size_t(candidates.count);
  TimingEvents timing(2 * n);
  const std::vector<cudaEvent_t>& events = timing.events;
  std::vector<char> ran(n, 0);
  cudaEvent_t last = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const cublasLtMatmulAlgo_t& algo = candidates.results[i].algo;
    if (launch(algo) != CUBLAS_STATUS_SUCCESS) continue;
    TRIREME_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    for (int r = 0; r < kTimedRuns; ++r) TRIREME_CUBLAS_CHECK(launch(algo));
    TRIREME_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
    ran[i] = 1;
    last = events[2 * i + 1];
  }
  if (last == nullptr) return 0;
  TRIREME_CUDA_CHECK(cudaEventSynchronize(last));
  int best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    float ms = 0;
    if (ran[i] && cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]) == cudaSuccess && ms < best_ms) {
      best = int(i);
      best_ms = ms;
    }
  }
  return best;
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

bool matmul_algo(const MatmulProblem& p, cudaStream_t stream, bool may_time, const MatmulLaunch& launch,
                 cublasLtMatmulAlgo_t& algo) {
  BlasState& st = blas_state();
  {
    std::lock_guard lock(st.mu);
    auto it = st.algos.find(p.shape_key);
    if (it != st.algos.end()) {
      if (const ChosenAlgo* c = usable(it->second, p.alignment)) {
        algo = c->algo;
        return true;
      }
    }
  }
  // Chosen without the lock: timing waits for the stream, whose earlier work may wait for another
  // thread's.
  static const bool experiment_off = std::getenv("TRIREME_EXPERIMENT_UNTIMED") != nullptr;  // EXPERIMENT, remove
  const bool time_them = !experiment_off && may_time && p.flops >= kTimedMatmulFlops && !capturing(stream);
  const Candidates candidates = heuristic_candidates(p, time_them ? kMatmulCandidates : 1);
  if (candidates.count == 0) return false;
  const int pick = time_them && candidates.count > 1 ? fastest(candidates, stream, launch) : 0;
  std::lock_guard lock(st.mu);
  std::vector<ChosenAlgo>& chosen = st.algos[p.shape_key];
  if (const ChosenAlgo* c = usable(chosen, p.alignment)) {  // another thread chose meanwhile
    algo = c->algo;
  } else {
    algo = candidates.results[size_t(pick)].algo;
    chosen.push_back({algo, p.alignment});
  }
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
  problem.flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  const auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(bc.handle, desc, &al, b, la.h, a, lb.h, &be, c, lc.h, c, lc.h, &algo, bc.workspace,
                          kBlasWorkspaceBytes, ctx.stream);
  };
  cublasLtMatmulAlgo_t algo;
  // C is read when beta != 0, so a repeated launch would not give the same result.
  TRIREME_CHECK(matmul_algo(problem, ctx.stream, beta == 0.0, launch, algo),
                "gemm_batched (CUDA): cuBLASLt found no algorithm for m=", m, " n=", n, " k=", k, " batch=", batch);
  TRIREME_CUBLAS_CHECK(launch(algo));
}

template void gemm_batched<float>(const LaunchContext&, bool, bool, int64_t, int64_t, int64_t, double, const float*,
                                  int64_t, int64_t, const float*, int64_t, int64_t, double, float*, int64_t, int64_t,
                                  int64_t);
template void gemm_batched<double>(const LaunchContext&, bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                   int64_t, int64_t, const double*, int64_t, int64_t, double, double*, int64_t, int64_t,
                                   int64_t);

}  // namespace trireme::cuda_kernels
