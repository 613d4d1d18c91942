// CUDA scaled dot-product attention, forward and backward, fused: the (Tq, Tk) scores are never
// stored. bf16/f16 operands go to cuDNN's fused attention first where the build has it
// (attention_cudnn.h). Otherwise bf16/f16 with a head dim that is a multiple of 16 up to 128 (and
// 16-byte aligned rows) take the tensor-core kernels of attention_flash.cu; everything else (f32,
// f64, other head dims, odd strides) takes the simple fused kernels here: one warp per query row
// (forward, dQ) or per key row (dK, dV), 32 keys or queries at a time with an online softmax, math
// in the accumulation type (f32 for 16-bit inputs, no TF32; f64 for f64). All three paths are
// deterministic (no atomics).
//
// With s = 1/sqrt(hd), per row i: lse_i = log Σ_j exp(s q_i·k_j), P_ij = exp(s q_i·k_j - lse_i),
//   forward:  O_i = Σ_j P_ij v_j
//   backward: D_i = dO_i·O_i,  dS_ij = P_ij (dO_i·v_j - D_i),
//             dQ_i = s Σ_j dS_ij k_j,  dK_j = s Σ_i dS_ij q_i,  dV_j = Σ_i P_ij dO_i
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

#include "trireme/core/error.h"
#include "trireme/kernels/cuda/attention_common.cuh"
#include "trireme/kernels/cuda/attention_cudnn.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/math.cuh"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

constexpr int kWarps = 4;  // rows per block of the simple kernels

template <class A>
__device__ __forceinline__ A warp_sum(A x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
template <class A>
__device__ __forceinline__ A warp_max(A x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Σ_d x[d] y[d] over one lane's own rows (no cross-lane work).
template <class D, class A>
__device__ __forceinline__ A dot_row(const A* x, const D* y, int hd) {
  A acc = A(0);
  for (int d = 0; d < hd; ++d) acc += x[d] * to_acc(y[d]);
  return acc;
}

// acc[d] = acc[d] * keep + Σ_{jj < cnt} w_jj rows(first + jj)[d] for d < hd, w_jj the weight
// that lane jj holds. Every lane runs every step: the shuffles need all 32.
template <class D, class A>
__device__ __forceinline__ void add_weighted_rows(A* acc, A keep, A w, const HeadPtr& rows, int b, int h, int first,
                                                  int cnt, int hd, int lane) {
  for (int d0 = 0; d0 < hd; d0 += 32) {
    const int d = d0 + lane;
    A o = d < hd ? acc[d] * keep : A(0);
    for (int jj = 0; jj < cnt; ++jj) {
      const A wj = __shfl_sync(0xffffffffu, w, jj);
      if (d < hd) o += wj * to_acc(rows.row<D>(b, h, first + jj)[d]);
    }
    if (d < hd) acc[d] = o;
  }
}

// ---- simple forward: one warp per query row ----
template <class D>
__global__ void attention_forward_simple(AttnArgs a) {
  using A = dacc_t<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * kWarps + warp, pair = blockIdx.y, b = pair / a.nh, h = pair % a.nh;
  if (i >= a.tq) return;  // whole warps only: no block-wide sync below
  A* qs = reinterpret_cast<A*>(smem_raw) + warp * 2 * a.hd;
  A* acc = qs + a.hd;
  const D* q = a.q.row<D>(b, h, i);
  for (int d = lane; d < a.hd; d += 32) {
    qs[d] = to_acc(q[d]);
    acc[d] = A(0);
  }
  __syncwarp();
  const A scale = A(a.scale);
  const int n = a.causal ? min(i + 1, a.tk) : a.tk;
  A m = -std::numeric_limits<A>::infinity(), l = A(0);
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    const A x = j < n ? dot_row(qs, a.k.row<D>(b, h, j), a.hd) * scale : -std::numeric_limits<A>::infinity();
    const A m_new = max(m, warp_max(x));  // finite: key j0 is valid
    const A alpha = m_exp(m - m_new);
    const A p = j < n ? m_exp(x - m_new) : A(0);
    l = l * alpha + warp_sum(p);
    m = m_new;
    add_weighted_rows<D>(acc, alpha, p, a.v, b, h, j0, min(32, n - j0), a.hd, lane);
  }
  const A inv = l > A(0) ? A(1) / l : A(0);
  D* out = a.o.row<D>(b, h, i);
  for (int d = lane; d < a.hd; d += 32) out[d] = from_acc<D>(acc[d] * inv);
  if (lane == 0)
    static_cast<A*>(a.lse)[int64_t(pair) * a.tq + i] = l > A(0) ? m + m_log(l) : -std::numeric_limits<A>::infinity();
}

// ---- delta = rowsum(dO ∘ O) (both paths) ----

// One warp per row, for any head dim and alignment.
template <class D>
__global__ void attention_delta_kernel(AttnArgs a, int64_t rows) {
  using A = dacc_t<D>;
  const int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int i = int(r % a.tq), pair = int(r / a.tq), b = pair / a.nh, h = pair % a.nh;
  const D* g = a.dout.row<D>(b, h, i);
  const D* o = a.o.row<D>(b, h, i);
  A acc = A(0);
  for (int d = lane; d < a.hd; d += 32) acc += to_acc(g[d]) * to_acc(o[d]);
  acc = warp_sum(acc);
  if (lane == 0) static_cast<A*>(a.delta)[r] = acc;
}

// 16-bit rows that are 16-byte aligned with hd a multiple of 8 (the tensor-core path's operands):
// kDeltaLanes lanes a row, each reading 8 elements of dO and of O with one 16-byte load apiece. A
// warp a row read 2 bytes a lane: 47 µs for GPT-2 124M's 50 MB at hd 64 on an H200 (~1 TB/s).
constexpr int kDeltaLanes = 8;

template <class D>
__global__ void attention_delta_vec_kernel(AttnArgs a, int64_t rows) {
  using A = dacc_t<D>;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r = t / kDeltaLanes;
  const int part = int(t % kDeltaLanes);
  A acc = A(0);
  if (r < rows) {  // every lane stays for the shuffles below
    const int i = int(r % a.tq), pair = int(r / a.tq), b = pair / a.nh, h = pair % a.nh;
    const D* g = a.dout.row<D>(b, h, i);
    const D* o = a.o.row<D>(b, h, i);
    for (int d = part * 8; d < a.hd; d += kDeltaLanes * 8) {
      const uint4 gv = *reinterpret_cast<const uint4*>(g + d), ov = *reinterpret_cast<const uint4*>(o + d);
      const D* ge = reinterpret_cast<const D*>(&gv);
      const D* oe = reinterpret_cast<const D*>(&ov);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc += to_acc(ge[e]) * to_acc(oe[e]);
    }
  }
#pragma unroll
  for (int off = kDeltaLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (r < rows && part == 0) static_cast<A*>(a.delta)[r] = acc;
}

// ---- simple backward, dQ: one warp per query row ----
template <class D>
__global__ void attention_backward_q_simple(AttnArgs a) {
  using A = dacc_t<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * kWarps + warp, pair = blockIdx.y, b = pair / a.nh, h = pair % a.nh;
  if (i >= a.tq) return;
  A* qs = reinterpret_cast<A*>(smem_raw) + warp * 3 * a.hd;
  A* gs = qs + a.hd;
  A* acc = gs + a.hd;
  const D* q = a.q.row<D>(b, h, i);
  const D* g = a.dout.row<D>(b, h, i);
  for (int d = lane; d < a.hd; d += 32) {
    qs[d] = to_acc(q[d]);
    gs[d] = to_acc(g[d]);
    acc[d] = A(0);
  }
  __syncwarp();
  const A scale = A(a.scale);
  const A lse = static_cast<const A*>(a.lse)[int64_t(pair) * a.tq + i];
  const A del = static_cast<const A*>(a.delta)[int64_t(pair) * a.tq + i];
  const int n = a.causal ? min(i + 1, a.tk) : a.tk;
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    A ds = A(0);
    if (j < n) {
      const A p = m_exp(dot_row(qs, a.k.row<D>(b, h, j), a.hd) * scale - lse);
      ds = p * (dot_row(gs, a.v.row<D>(b, h, j), a.hd) - del);
    }
    add_weighted_rows<D>(acc, A(1), ds, a.k, b, h, j0, min(32, n - j0), a.hd, lane);
  }
  D* dq = a.dq.row<D>(b, h, i);
  for (int d = lane; d < a.hd; d += 32) dq[d] = from_acc<D>(acc[d] * scale);
}

// ---- simple backward, dK and dV: one warp per key row ----
template <class D>
__global__ void attention_backward_kv_simple(AttnArgs a) {
  using A = dacc_t<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j = blockIdx.x * kWarps + warp, pair = blockIdx.y, b = pair / a.nh, h = pair % a.nh;
  if (j >= a.tk) return;
  A* ks = reinterpret_cast<A*>(smem_raw) + warp * 4 * a.hd;
  A* vs = ks + a.hd;
  A* dk = vs + a.hd;
  A* dv = dk + a.hd;
  const D* k = a.k.row<D>(b, h, j);
  const D* v = a.v.row<D>(b, h, j);
  for (int d = lane; d < a.hd; d += 32) {
    ks[d] = to_acc(k[d]);
    vs[d] = to_acc(v[d]);
    dk[d] = dv[d] = A(0);
  }
  __syncwarp();
  const A scale = A(a.scale);
  const A* lse = static_cast<const A*>(a.lse) + int64_t(pair) * a.tq;
  const A* del = static_cast<const A*>(a.delta) + int64_t(pair) * a.tq;
  for (int i0 = a.causal ? j : 0; i0 < a.tq; i0 += 32) {
    const int i = i0 + lane;
    A p = A(0), ds = A(0);
    if (i < a.tq) {
      p = m_exp(dot_row(ks, a.q.row<D>(b, h, i), a.hd) * scale - lse[i]);
      ds = p * (dot_row(vs, a.dout.row<D>(b, h, i), a.hd) - del[i]);
    }
    const int cnt = min(32, a.tq - i0);
    for (int d0 = 0; d0 < a.hd; d0 += 32) {
      const int d = d0 + lane;
      A xk = d < a.hd ? dk[d] : A(0), xv = d < a.hd ? dv[d] : A(0);
      for (int ii = 0; ii < cnt; ++ii) {
        const A pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
        if (d < a.hd) {
          xv += pi * to_acc(a.dout.row<D>(b, h, i0 + ii)[d]);
          xk += dsi * to_acc(a.q.row<D>(b, h, i0 + ii)[d]);
        }
      }
      if (d < a.hd) {
        dk[d] = xk;
        dv[d] = xv;
      }
    }
  }
  D* gk = a.dk.row<D>(b, h, j);
  D* gv = a.dv.row<D>(b, h, j);
  for (int d = lane; d < a.hd; d += 32) {
    gk[d] = from_acc<D>(dk[d] * scale);
    gv[d] = from_acc<D>(dv[d]);
  }
}

// ---- host side ----

template <class T>
HeadPtr head_ptr(const Tensor& t) {
  return {t.data<T>(), t.stride(0), t.stride(1), t.stride(2)};
}

// Whether the tensor-core kernels take these operands: 16-bit, hd a multiple of 16 up to 128,
// 16-byte aligned rows.
template <class T>
bool flash_eligible(int64_t hd, std::initializer_list<const Tensor*> ts) {
  if constexpr (!std::is_same_v<T, bf16_t> && !std::is_same_v<T, f16_t>) {
    return false;
  } else {
    if (hd == 0 || hd % 16 != 0 || hd > 128) return false;
    for (const Tensor* t : ts) {
      if (reinterpret_cast<uintptr_t>(t->data<T>()) % 16 != 0) return false;
      for (int d = 0; d < 3; ++d)
        if (t->size(d) > 1 && t->stride(d) % 8 != 0) return false;
    }
    return true;
  }
}

// Block size and dynamic shared memory of the simple kernels: `per_row` values of A per warp.
template <class A>
std::pair<int, size_t> simple_launch(int64_t hd, int per_row) {
  const size_t bytes = size_t(kWarps) * size_t(per_row) * size_t(hd) * sizeof(A);
  TRIREME_CHECK(bytes <= 48 * 1024, "scaled_dot_product_attention (CUDA): head dim ", hd, " is too large for ",
                sizeof(A) == 8 ? "f64" : "this dtype", " (the fused kernels keep ", per_row,
                " rows of it per warp in 48 KiB of shared memory)");
  return {kWarps * 32, bytes};
}

void check_pairs(int64_t pairs) {
  TRIREME_CHECK(pairs <= 65535, "scaled_dot_product_attention (CUDA): batch x heads = ", pairs,
                " is more than the 65535 the kernels' grid allows");
}

template <class T>
void attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out, Tensor& lse) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  if (nb * nh * tq == 0) return;
  LaunchContext ctx(out);
  if (tk == 0) {  // nothing to attend to: zeros and lse -inf, as on the CPU
    if (out.numel()) find_kernel<FillKernel>("fill", out.device(), out.dtype())(out, 0.0);
    find_kernel<FillKernel>("fill", lse.device(), lse.dtype())(lse, -std::numeric_limits<double>::infinity());
    return;
  }
  check_pairs(nb * nh);
  AttnArgs a;
  a.q = head_ptr<T>(q);
  a.k = head_ptr<T>(k);
  a.v = head_ptr<T>(v);
  a.o = head_ptr<T>(out);
  a.lse = lse.data<A>();
  a.nh = int(nh);
  a.tq = int(tq);
  a.tk = int(tk);
  a.hd = int(hd);
  a.causal = causal;
  a.scale = 1.0 / std::sqrt(double(hd));
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
    if (cudnn_attention_forward(q, k, v, causal, out, lse, ctx.stream)) return;
    if (flash_eligible<T>(hd, {&q, &k, &v, &out})) {
      flash_attention_forward<D>(a, int(nb), ctx.stream);
      return;
    }
  }
  auto [threads, smem] = simple_launch<A>(hd, 2);
  const dim3 grid(unsigned((tq + kWarps - 1) / kWarps), unsigned(nb * nh));
  attention_forward_simple<D><<<grid, threads, smem, ctx.stream>>>(a);
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void attention_backward_cuda(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, bool causal, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t nb = q.size(0), nh = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  LaunchContext ctx(grad_q);
  if (nb * nh == 0 || tq == 0 || tk == 0 || hd == 0) {  // degenerate: every gradient is zero (or empty)
    for (Tensor* t : {&grad_q, &grad_k, &grad_v})
      if (t->numel()) find_kernel<FillKernel>("fill", t->device(), t->dtype())(*t, 0.0);
    return;
  }
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
    if (cudnn_attention_backward(grad, q, k, v, out, lse, causal, grad_q, grad_k, grad_v, ctx.stream)) return;
  }
  check_pairs(nb * nh);
  Tensor delta = Tensor::empty({nb, nh, tq}, lse.dtype(), lse.device());
  AttnArgs a;
  a.q = head_ptr<T>(q);
  a.k = head_ptr<T>(k);
  a.v = head_ptr<T>(v);
  a.o = head_ptr<T>(out);
  a.dout = head_ptr<T>(grad);
  a.dq = head_ptr<T>(grad_q);
  a.dk = head_ptr<T>(grad_k);
  a.dv = head_ptr<T>(grad_v);
  a.lse = const_cast<A*>(lse.data<A>());
  a.delta = delta.data<A>();
  a.nh = int(nh);
  a.tq = int(tq);
  a.tk = int(tk);
  a.hd = int(hd);
  a.causal = causal;
  a.scale = 1.0 / std::sqrt(double(hd));
  const int64_t rows = nb * nh * tq;
  if constexpr (std::is_same_v<T, bf16_t> || std::is_same_v<T, f16_t>) {
    if (flash_eligible<T>(hd, {&q, &k, &v, &out, &grad, &grad_q, &grad_k, &grad_v})) {
      const int64_t threads = rows * kDeltaLanes;  // a thread per 8 elements of a row: no grid-stride loop
      attention_delta_vec_kernel<D><<<unsigned((threads + kBlock - 1) / kBlock), kBlock, 0, ctx.stream>>>(a, rows);
      TRIREME_CUDA_CHECK_LAUNCH();
      flash_attention_backward<D>(a, int(nb), ctx.stream);
      return;
    }
  }
  attention_delta_kernel<D><<<unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, ctx.stream>>>(a, rows);
  TRIREME_CUDA_CHECK_LAUNCH();
  {
    auto [threads, smem] = simple_launch<A>(hd, 3);
    const dim3 grid(unsigned((tq + kWarps - 1) / kWarps), unsigned(nb * nh));
    attention_backward_q_simple<D><<<grid, threads, smem, ctx.stream>>>(a);
    TRIREME_CUDA_CHECK_LAUNCH();
  }
  {
    auto [threads, smem] = simple_launch<A>(hd, 4);
    const dim3 grid(unsigned((tk + kWarps - 1) / kWarps), unsigned(nb * nh));
    attention_backward_kv_simple<D><<<grid, threads, smem, ctx.stream>>>(a);
    TRIREME_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_attention) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<AttentionKernel, double, float, bf16_t, f16_t>(
      "scaled_dot_product_attention", cuda, []<class T>() { return &attention_cuda<T>; });
  registry.add_each<AttentionBackwardKernel, double, float, bf16_t, f16_t>(
      "scaled_dot_product_attention_backward", cuda, []<class T>() { return &attention_backward_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
