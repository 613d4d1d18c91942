// CUDA cross-entropy: fused log-softmax + NLL per row of contiguous (N, C) logits, and its
// backward, the twins of kernels/cpu/loss.cpp. One block per row. Targets stay on the device: a
// target out of range is reported through cuda/device_error.h (its row gets loss 0 and is not
// counted) and the count of rows not ignored is summed on the device, so the host never waits.
#include "trireme/kernels/cuda/block_reduce.cuh"
#include "trireme/cuda/device_error.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

// A target that the loss counts, or -1 for an ignored row or one out of range (reported).
template <class I>
__device__ __forceinline__ int64_t checked_target(const I* targets, int64_t ts, int64_t r, int64_t c,
                                                  int64_t ignore_index, cuda::DeviceErrorSlot* err) {
  const int64_t t = int64_t(targets[r * ts]);
  if (t == ignore_index) return -1;
  if (t < 0 || t >= c) {
    cuda::report_index_error(err, cuda::IndexErrorSite::cross_entropy_target, t, r, c, ignore_index);
    return -1;
  }
  return t;
}

template <class D, class I>
__global__ void cross_entropy_kernel(const D* x, const I* targets, int64_t ts, int64_t c, int64_t ignore_index,
                                     cuda::DeviceErrorSlot* err, dacc_t<D>* losses, dacc_t<D>* lse) {
  using A = dacc_t<D>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const D* xr = x + r * c;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = max(m, to_acc(xr[j]));
  m = block_max(m, scratch);
  if (isinf(m) && m < A(0)) m = A(0);  // an all -inf row: avoid -inf - -inf
  A s = A(0);
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += m_exp(to_acc(xr[j]) - m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const A log_s = m_log(s);
    lse[r] = m + log_s;
    const int64_t t = checked_target(targets, ts, r, c, ignore_index, err);
    // (m - x_t) + log s keeps the bits that m + log s would round away when |m| is large.
    losses[r] = t < 0 ? A(0) : (m - to_acc(xr[t])) + log_s;
  }
}

// count = the rows whose target is counted: one block, rows in a fixed order per thread.
template <class I, class A>
__global__ void count_targets_kernel(const I* targets, int64_t ts, int64_t n, int64_t c, int64_t ignore_index, A* count) {
  __shared__ A scratch[32];
  A k = A(0);
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    const int64_t t = int64_t(targets[r * ts]);
    k += (t != ignore_index && t >= 0 && t < c) ? A(1) : A(0);
  }
  k = block_sum(k, scratch);
  if (threadIdx.x == 0) *count = k;
}

template <class D, class I>
__global__ void cross_entropy_backward_kernel(const D* x, const I* targets, int64_t ts, const dacc_t<D>* lse,
                                              const dacc_t<D>* grad, int64_t gs, int64_t c,
                                              int64_t ignore_index, D* out) {
  using A = dacc_t<D>;
  const int64_t r = blockIdx.x;
  const int64_t t = int64_t(targets[r * ts]);
  D* orow = out + r * c;
  if (t == ignore_index || t < 0 || t >= c) {  // ignored, or out of range (reported by the forward)
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) orow[j] = from_acc<D>(A(0));
    return;
  }
  const D* xr = x + r * c;
  const A l = lse[r], g = grad[r * gs];
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    const A p = m_exp(to_acc(xr[j]) - l);
    orow[j] = from_acc<D>(j == t ? (p - A(1)) * g : p * g);  // p - 1 in A: it loses bits once rounded to D
  }
}

template <class T>
void cross_entropy_cuda(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& losses,
                        Tensor& lse, Tensor& count) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t n = logits.size(0), c = logits.size(1);
  LaunchContext ctx(logits);
  const int64_t ts = targets.dim() ? targets.stride(0) : 0;
  cuda::DeviceErrorSlot* err = cuda::device_error_slot(logits.device().index);
  with_index_ptr(targets, [&]<class I>(const I* tp) {
    count_targets_kernel<I, A><<<1, 1024, 0, ctx.stream>>>(tp, ts, n, c, ignore_index, count.data<A>());
    if (n > 0)
      cross_entropy_kernel<D, I><<<unsigned(n), row_block_threads(c, 512), 0, ctx.stream>>>(
          dptr<T>(logits), tp, ts, c, ignore_index, err, losses.data<A>(), lse.data<A>());
  });
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void cross_entropy_backward_cuda(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad,
                                 int64_t ignore_index, Tensor& grad_logits) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t n = logits.size(0), c = logits.size(1);
  if (n == 0 || c == 0) return;
  LaunchContext ctx(grad_logits);
  const int64_t ts = targets.dim() ? targets.stride(0) : 0, gs = grad.dim() ? grad.stride(0) : 0;
  with_index_ptr(targets, [&]<class I>(const I* tp) {
    cross_entropy_backward_kernel<D, I><<<unsigned(n), row_block_threads(c, 512), 0, ctx.stream>>>(
        dptr<T>(logits), tp, ts, lse.data<A>(), grad.data<A>(), gs, c, ignore_index, dptr<T>(grad_logits));
  });
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_loss) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<CrossEntropyKernel, double, float, bf16_t, f16_t>(
      "cross_entropy", cuda, []<class T>() { return &cross_entropy_cuda<T>; });
  registry.add_each<CrossEntropyBackwardKernel, double, float, bf16_t, f16_t>(
      "cross_entropy_backward", cuda, []<class T>() { return &cross_entropy_backward_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
