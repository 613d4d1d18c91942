// CUDA cross-entropy: fused log-softmax + NLL per row of contiguous (N, C) logits, and its
// backward, the twins of kernels/cpu/loss.cpp. One block per row, read once: the forward keeps a
// running (max, sum of exponentials) per thread, rescaled when the max grows, and combines them
// across the block; rows whose length is a multiple of a 16-byte vector move whole vectors (the
// logits of a GPT are the largest tensor of its step). Targets stay on the device: a
// target out of range is reported through cuda/device_error.h (its row gets loss 0 and is not
// counted) and the count of rows not ignored is summed on the device, so the host never waits.
#include "trireme/kernels/cuda/block_reduce.cuh"
#include "trireme/cuda/device_error.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/cuda/vector_map.cuh"
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

// A running softmax denominator: s = sum of exp(x - m) over the values seen, m their max.
template <class A>
struct RunningSum {
  A m = -std::numeric_limits<A>::infinity();
  A s = A(0);

  // Adds `k` values whose max is `vmax`: the sum is rescaled once if the max grows.
  template <int K>
  __device__ __forceinline__ void add(const A (&v)[K], A vmax) {
    if (vmax > m) {
      s = m == -std::numeric_limits<A>::infinity() ? A(0) : s * m_exp(m - vmax);
      m = vmax;
    }
    if (m == -std::numeric_limits<A>::infinity()) return;  // only -inf so far: every term is 0
#pragma unroll
    for (int e = 0; e < K; ++e) s += m_exp(v[e] - m);
  }

  __device__ __forceinline__ void merge(A om, A os) {
    const A big = om > m ? om : m;
    if (big == -std::numeric_limits<A>::infinity()) return;
    s = (m == big ? s : s * m_exp(m - big)) + (om == big ? os : os * m_exp(om - big));
    m = big;
  }
};

// The block's combined (m, s) in thread 0, merged in a fixed order for a given block size.
template <class A>
__device__ RunningSum<A> block_running_sum(RunningSum<A> r, A* scratch_m, A* scratch_s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) r.merge(__shfl_xor_sync(0xffffffffu, r.m, o), __shfl_xor_sync(0xffffffffu, r.s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    scratch_m[warp] = r.m;
    scratch_s[warp] = r.s;
  }
  __syncthreads();
  RunningSum<A> all;
  if (threadIdx.x == 0)
    for (int k = 0; k < warps; ++k) all.merge(scratch_m[k], scratch_s[k]);
  return all;
}

// V > 1: the row is read as 16-byte vectors (the host checked c % V == 0 and the alignment).
template <class D, class I, int V>
__global__ void cross_entropy_kernel(const D* x, const I* targets, int64_t ts, int64_t c, int64_t ignore_index,
                                     cuda::DeviceErrorSlot* err, dacc_t<D>* losses, dacc_t<D>* lse) {
  using A = dacc_t<D>;
  __shared__ A scratch_m[32], scratch_s[32];
  const int64_t r = blockIdx.x;
  const D* xr = x + r * c;
  RunningSum<A> run;
  for (int64_t k = threadIdx.x; k < c / V; k += blockDim.x) {
    const Packed<D, V> p = reinterpret_cast<const Packed<D, V>*>(xr)[k];
    A v[V];
    A vmax = -std::numeric_limits<A>::infinity();
#pragma unroll
    for (int e = 0; e < V; ++e) {
      v[e] = to_acc(p.v[e]);
      vmax = v[e] > vmax ? v[e] : vmax;
    }
    run.add(v, vmax);
  }
  const RunningSum<A> all = block_running_sum(run, scratch_m, scratch_s);
  if (threadIdx.x == 0) {
    const A m = all.m == -std::numeric_limits<A>::infinity() ? A(0) : all.m;  // an all -inf row
    const A log_s = m_log(all.s);
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

template <class D, class I, int V>
__global__ void cross_entropy_backward_kernel(const D* x, const I* targets, int64_t ts, const dacc_t<D>* lse,
                                              const dacc_t<D>* grad, int64_t gs, int64_t c,
                                              int64_t ignore_index, D* out) {
  using A = dacc_t<D>;
  const int64_t r = blockIdx.x;
  const int64_t t = int64_t(targets[r * ts]);
  Packed<D, V>* orow = reinterpret_cast<Packed<D, V>*>(out + r * c);
  if (t == ignore_index || t < 0 || t >= c) {  // ignored, or out of range (reported by the forward)
    Packed<D, V> zero;
#pragma unroll
    for (int e = 0; e < V; ++e) zero.v[e] = from_acc<D>(A(0));
    for (int64_t k = threadIdx.x; k < c / V; k += blockDim.x) orow[k] = zero;
    return;
  }
  const Packed<D, V>* xrow = reinterpret_cast<const Packed<D, V>*>(x + r * c);
  const A l = lse[r], g = grad[r * gs];
  for (int64_t k = threadIdx.x; k < c / V; k += blockDim.x) {
    const Packed<D, V> p = xrow[k];
    Packed<D, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A q = m_exp(to_acc(p.v[e]) - l);
      o.v[e] = from_acc<D>(k * V + e == t ? (q - A(1)) * g : q * g);  // q - 1 in A: it loses bits once rounded to D
    }
    orow[k] = o;
  }
}

// The widest vector that tiles a row of c elements of D when the tensors start 16-byte aligned.
template <class D>
int row_vector_width(int64_t c, std::initializer_list<const void*> rows_at) {
  constexpr int widest = kVecWidth<D>;
  for (const void* p : rows_at)
    if (!aligned16(p)) return 1;
  return c % widest == 0 ? widest : 1;
}

// Calls fn(std::integral_constant<int, V>) for V = the row vector width (1 or kVecWidth<D>).
template <class D, class Fn>
void with_row_vector(int width, Fn&& fn) {
  if (width == 1) {
    fn(std::integral_constant<int, 1>{});
  } else {
    fn(std::integral_constant<int, kVecWidth<D>>{});
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
    if (n == 0) return;
    with_row_vector<D>(row_vector_width<D>(c, {logits.data_ptr()}), [&](auto v) {
      cross_entropy_kernel<D, I, v><<<unsigned(n), row_block_threads(c / v, 512), 0, ctx.stream>>>(
          dptr<T>(logits), tp, ts, c, ignore_index, err, losses.data<A>(), lse.data<A>());
    });
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
    with_row_vector<D>(row_vector_width<D>(c, {logits.data_ptr(), grad_logits.data_ptr()}), [&](auto v) {
      cross_entropy_backward_kernel<D, I, v><<<unsigned(n), row_block_threads(c / v, 512), 0, ctx.stream>>>(
          dptr<T>(logits), tp, ts, lse.data<A>(), grad.data<A>(), gs, c, ignore_index, dptr<T>(grad_logits));
    });
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
