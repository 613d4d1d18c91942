// CUDA kernels of the vocabulary-parallel cross-entropy (see kernels/nn.h), the twins of
// kernels/cpu/vocab_parallel_loss.cpp: a block per row for the two forward passes, a grid-stride
// pass for the gradient. Together they read a rank's logits three times and write the gradient
// once, where the op built from generic ops made ~12 f32 passes and saved the probabilities and a
// one-hot matrix in f32.
#include <limits>

#include "trireme/cuda/device_error.h"
#include "trireme/kernels/cuda/block_reduce.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class I>
__device__ __forceinline__ int64_t target_at(const I* t, int64_t ts, int64_t r) {
  return int64_t(t[r * ts]);
}

template <class D>
__global__ void row_max_kernel(const D* x, int64_t vl, int64_t real, dacc_t<D>* row_max) {
  using A = dacc_t<D>;
  __shared__ A scratch[32];
  const D* xr = x + int64_t(blockIdx.x) * vl;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = max(m, to_acc(xr[j]));
  m = block_max(m, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <class D, class I>
__global__ void row_stats_kernel(const D* x, const I* targets, int64_t ts, int64_t n, int64_t vl, int64_t start,
                                 int64_t real, int64_t vocab_size, int64_t ignore_index, const dacc_t<D>* row_max,
                                 cuda::DeviceErrorSlot* err, dacc_t<D>* stats) {
  using A = dacc_t<D>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const D* xr = x + r * vl;
  A m = row_max[r];
  if (isinf(m) && m < A(0)) m = A(0);  // an all -inf row: avoid -inf - -inf
  A s = A(0);
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) s += m_exp(to_acc(xr[j]) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const int64_t t = target_at(targets, ts, r);
    if (t != ignore_index && (t < 0 || t >= vocab_size))
      cuda::report_index_error(err, cuda::IndexErrorSite::vocab_parallel_target, t, r, vocab_size, ignore_index);
    const int64_t local = t - start;
    stats[r] = s;
    stats[n + r] = local >= 0 && local < real ? to_acc(xr[local]) - m : A(0);
  }
}

template <class D, class I>
__global__ void grad_kernel(const D* x, const I* targets, int64_t ts, int64_t n, int64_t vl, int64_t start,
                            int64_t real, const dacc_t<D>* lse, const dacc_t<D>* grad_row, D* out) {
  using A = dacc_t<D>;
  const int64_t total = n * vl, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t r = e / vl, j = e % vl;
    A v = A(0);
    if (j < real) {
      const A one = (j == target_at(targets, ts, r) - start) ? A(1) : A(0);
      v = (m_exp(to_acc(x[e]) - lse[r]) - one) * grad_row[r];
    }
    out[e] = from_acc<D>(v);
  }
}

template <class T>
void row_max_cuda(const Tensor& logits, int64_t real, Tensor& row_max) {
  using D = device_t<T>;
  const int64_t n = logits.size(0);
  if (n == 0) return;
  LaunchContext ctx(logits);
  row_max_kernel<D><<<unsigned(n), row_block_threads(real, 512), 0, ctx.stream>>>(dptr<T>(logits), logits.size(1),
                                                                                  real, row_max.data<dacc_t<D>>());
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void row_stats_cuda(const Tensor& logits, const Tensor& targets, int64_t start, int64_t real, int64_t vocab_size,
                    int64_t ignore_index, const Tensor& row_max, Tensor& stats) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t n = logits.size(0);
  if (n == 0) return;
  LaunchContext ctx(logits);
  cuda::DeviceErrorSlot* err = cuda::device_error_slot(logits.device().index);
  const int64_t ts = targets.dim() ? targets.stride(0) : 0;
  with_index_ptr(targets, [&]<class I>(const I* tp) {
    row_stats_kernel<D, I><<<unsigned(n), row_block_threads(real, 512), 0, ctx.stream>>>(
        dptr<T>(logits), tp, ts, n, logits.size(1), start, real, vocab_size, ignore_index, row_max.data<A>(), err,
        stats.data<A>());
  });
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void grad_cuda(const Tensor& logits, const Tensor& targets, int64_t start, int64_t real, const Tensor& lse,
               const Tensor& grad_row, Tensor& grad_logits) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t n = logits.size(0), vl = logits.size(1);
  if (n * vl == 0) return;
  LaunchContext ctx(grad_logits);
  const int64_t ts = targets.dim() ? targets.stride(0) : 0;
  with_index_ptr(targets, [&]<class I>(const I* tp) {
    grad_kernel<D, I><<<grid_for(n * vl), kBlock, 0, ctx.stream>>>(dptr<T>(logits), tp, ts, n, vl, start, real,
                                                                  lse.data<A>(), grad_row.data<A>(),
                                                                  dptr<T>(grad_logits));
  });
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_vocab_parallel_loss) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<VocabRowMaxKernel, double, float, bf16_t, f16_t>("vocab_row_max", cuda,
                                                                     []<class T>() { return &row_max_cuda<T>; });
  registry.add_each<VocabRowStatsKernel, double, float, bf16_t, f16_t>("vocab_row_stats", cuda,
                                                                       []<class T>() { return &row_stats_cuda<T>; });
  registry.add_each<VocabGradKernel, double, float, bf16_t, f16_t>("vocab_grad", cuda,
                                                                   []<class T>() { return &grad_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
