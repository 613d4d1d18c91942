// How far cuBLASLt's first heuristic answer is from the fastest of its candidates, for the GEMMs
// of a GPT training step (forward, input gradient, weight gradient), bf16 with f32 compute.
//   nvcc -O2 -std=c++17 bench/gpu/gemm_algos.cu -lcublasLt -o gemm_algos && ./gemm_algos 16384 4096
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    auto s_ = (x);                                                                     \
    if (int(s_) != 0) {                                                                \
      std::fprintf(stderr, "%s:%d %s failed: %d\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// Random-looking bf16 values in [-1, 1): zeros would draw less power and time optimistically.
__global__ void fill(unsigned short* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const float f = float(x & 0xffff) / 32768.f - 1.f;
    p[i] = (unsigned short)(__float_as_uint(f) >> 16);
  }
}

struct Problem {
  const char* name;
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;  // column-major D (m x n) = op(A) (m x k) * op(B) (k x n)
};

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 16384, d = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int64_t vocab = argc > 3 ? std::atoll(argv[3]) : 50304;
  const int candidates = 16, reps = 10;
  std::vector<Problem> problems;
  const int64_t outs[] = {3 * d, d, 4 * d, d, vocab};
  const int64_t ins[] = {d, d, d, 4 * d, d};
  const char* names[] = {"qkv", "proj", "fc", "fc2", "head"};
  for (int i = 0; i < 5; ++i) {
    const int64_t o = outs[i], in = ins[i];
    // Row-major y (T, o) = x (T, in) W^T: column-major (o, T) = W^T... as trireme's linear maps it.
    problems.push_back({names[i], CUBLAS_OP_T, CUBLAS_OP_N, o, tokens, in});
    problems.push_back({names[i], CUBLAS_OP_N, CUBLAS_OP_N, in, tokens, o});  // dx = g W
    problems.push_back({names[i], CUBLAS_OP_N, CUBLAS_OP_T, in, o, tokens});  // dW = g^T x
  }
  const char* kinds[] = {"fwd", "dgrad", "wgrad"};
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  size_t ws_bytes = size_t(32) << 20;
  void *ws, *A, *B, *D;
  const size_t max_elems = size_t(std::max({vocab, 4 * d})) * size_t(std::max(tokens, 4 * d));
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMalloc(&A, max_elems * 2));
  CK(cudaMalloc(&B, max_elems * 2));
  CK(cudaMalloc(&D, max_elems * 2));
  fill<<<1024, 256>>>(static_cast<unsigned short*>(A), max_elems, 1);
  fill<<<1024, 256>>>(static_cast<unsigned short*>(B), max_elems, 2);
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double total_first = 0, total_best = 0;
  std::printf("| gemm | m n k | first ms | best ms | best index | first TFLOP/s | best TFLOP/s |\n|---|---|---|---|---|---|---|\n");
  for (size_t p = 0; p < problems.size(); ++p) {
    const Problem& pr = problems[p];
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &pr.op_a, sizeof(pr.op_a)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &pr.op_b, sizeof(pr.op_b)));
    const int64_t ar = pr.op_a == CUBLAS_OP_N ? pr.m : pr.k, ac = pr.op_a == CUBLAS_OP_N ? pr.k : pr.m;
    const int64_t br = pr.op_b == CUBLAS_OP_N ? pr.k : pr.n, bc = pr.op_b == CUBLAS_OP_N ? pr.n : pr.k;
    cublasLtMatrixLayout_t la, lb, ld;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ar, ac, ar));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, br, bc, br));
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, pr.m, pr.n, pr.m));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t res[candidates];
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, candidates, res, &found));
    const float alpha = 1, beta = 0;
    double first = 0, best = 1e30;
    int best_i = -1;
    for (int i = 0; i < found; ++i) {
      bool ok = true;
      for (int w = 0; w < 2 && ok; ++w)
        ok = cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res[i].algo, ws, ws_bytes, 0) ==
             CUBLAS_STATUS_SUCCESS;
      if (!ok) continue;
      cudaEventRecord(e0);
      for (int r = 0; r < reps; ++r)
        cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res[i].algo, ws, ws_bytes, 0);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      const double t = ms / reps;
      if (i == 0) first = t;
      if (t < best) best = t, best_i = i;
    }
    const double flop = 2.0 * double(pr.m) * double(pr.n) * double(pr.k);
    std::printf("| %s %s | %lld %lld %lld | %.3f | %.3f | %d of %d | %.0f | %.0f |\n", pr.name, kinds[p % 3],
                (long long)pr.m, (long long)pr.n, (long long)pr.k, first, best, best_i, found, flop / first / 1e9,
                flop / best / 1e9);
    total_first += first;
    total_best += best;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
  }
  std::printf("total: first %.3f ms, best %.3f ms (%.3fx)\n", total_first, total_best, total_first / total_best);
  return 0;
}
