// CUDA layer norm and RMS norm over the last dim of a contiguous (R, D) x, forward and backward,
// the twins of kernels/cpu/norm.cpp. Rows of up to 2048 take one warp each with the row held in
// registers (read once, statistics by warp shuffles, no block barriers: a GPT's d_model rows
// were latency-bound at one block per row); rows of up to 8192 take one block each, the row
// still in registers; longer rows take one block per row and read it from memory. Row statistics
// accumulate in double as on the CPU. grad_weight/grad_bias are deterministic without atomics:
// each thread sums one column over a fixed chunk of rows into a (chunks, D) scratch, then
// column_sum.cuh's second pass adds the chunks in order; the chunking depends only on the shape.
// An f32 norm's y (forward) or grad (backward) may be bf16/f16 (kernels/nn.h: the edge type O or G);
// a forward may add a residual to x first and write the sum, and a backward may add an addend to
// grad_x and write a 16-bit copy of it (static graphs fold a residual stream's adds and casts into them).
#include <type_traits>

#include "trireme/kernels/cuda/block_reduce.cuh"
#include "trireme/kernels/cuda/column_sum.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/vector_map.cuh"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D>
__device__ __forceinline__ dacc_t<D> param_at(const D* p, int64_t j, dacc_t<D> fill) {
  return p ? to_acc(p[j]) : fill;
}

// An add the compiler may not contract: for f32 and f64, v + addend would become an FMA with the
// product that made v, which is not the add of the rounded v.
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
// a plus b (of D, or widened exactly to D's accumulation type), rounded to D as the add kernel
// rounds: a backward's grad_x plus its addend, a forward's x plus its residual (kernels/nn.h).
template <class D, class R>
__device__ __forceinline__ D add_as_kernel(D a, R b) {
  return from_acc<D>(add_rn(to_acc(a), to_acc(b)));
}

// Centered: layer norm (y = (x - mean) * rstd * w + b); else RMS norm (y = x * rstd * w).
// With a residual (R), the row read is x + residual, written to sum first: each thread reads back
// only the elements it wrote.
template <class D, class O, class R, bool Centered>
__global__ void norm_forward_kernel(const D* x, const R* res, const D* w, const D* b, double eps, int64_t d, O* y,
                                    D* sum, dacc_t<D>* mean, dacc_t<D>* rstd) {
  using A = dacc_t<D>;
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const D* xr = x + r * d;
  if (res) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum[r * d + j] = add_as_kernel(xr[j], res[r * d + j]);
    xr = sum + r * d;
  }
  double mu = 0;
  if constexpr (Centered) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += double(to_acc(xr[j]));
    mu = block_sum(s, scratch) / double(d);
  }
  double ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double c = double(to_acc(xr[j])) - mu;
    ss += c * c;
  }
  const double inv = 1.0 / sqrt(block_sum(ss, scratch) / double(d) + eps);
  if (threadIdx.x == 0) {
    if constexpr (Centered) mean[r] = A(mu);
    rstd[r] = A(inv);
  }
  const A m = A(mu), ri = A(inv);
  O* yr = y + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    A v = (to_acc(xr[j]) - m) * ri * param_at(w, j, A(1));
    if constexpr (Centered) v += param_at(b, j, A(0));
    yr[j] = from_acc<O>(v);
  }
}

// A value of grad_x rounded to the 16-bit edge type G, as the cast kernel rounds it (kernels/nn.h).
template <class G, class D>
__device__ __forceinline__ G to_edge(D v) {
  return from_acc<G>(float(to_acc(v)));
}

// The register-row twins of the two kernels above, for d <= Team * N: a team of Team threads
// takes a row, either one warp (Team 32, rows up to 2048, kWarpRowsPerBlock rows per block, sums
// by shuffles only) or a whole block (Team kBlockTeam, rows up to 8192: the 4096-wide rows of a
// 6.7B GPT read once, where norm_forward_kernel reads them three times with scalar loads). Thread
// l of the team holds the row's vectors l, l + Team, ... of V elements each (V = 1, or a 16-byte
// vector when d and the pointers allow), so each load instruction is one coalesced segment.
inline constexpr int kWarpRowsPerBlock = 8;
inline constexpr int kBlockTeam = 256;

// The sum of v over the team (every thread of it gets it); scratch is used by block teams only.
template <int Team>
__device__ __forceinline__ double team_sum(double v, double* scratch) {
  if constexpr (Team == 32) return warp_sum(v);
  else return block_sum(v, scratch);
}

// The row a thread's team takes, and the thread's place in the team.
template <int Team>
__device__ __forceinline__ int64_t team_row() {
  return Team == 32 ? int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5) : int64_t(blockIdx.x);
}
template <int Team>
__device__ __forceinline__ int team_lane() {
  return Team == 32 ? int(threadIdx.x & 31) : int(threadIdx.x);
}

// Vector k of an optional parameter row, or `fill` everywhere when there is none.
template <int V, class D>
__device__ __forceinline__ Packed<D, V> param_vec(const D* p, int64_t k, dacc_t<D> fill) {
  if (p) return reinterpret_cast<const Packed<D, V>*>(p)[k];
  Packed<D, V> f;
#pragma unroll
  for (int e = 0; e < V; ++e) f.v[e] = from_acc<D>(fill);
  return f;
}

template <class D, class O, class R, bool Centered, int N, int V, int Team>
__global__ void norm_forward_team_kernel(const D* x, const R* res, const D* w, const D* b, double eps, int64_t rows,
                                         int64_t d, O* y, D* sum, dacc_t<D>* mean, dacc_t<D>* rstd) {
  using A = dacc_t<D>;
  using P = Packed<D, V>;
  constexpr int NV = N / V;
  __shared__ double scratch[32];
  const int lane = team_lane<Team>();
  const int64_t r = team_row<Team>();
  if (r >= rows) return;  // whole teams leave together: the sums below see full teams
  const int64_t nvec = d / V;
  const P* xr = reinterpret_cast<const P*>(x + r * d);
  P v[NV];  // as loaded: 16-bit rows take half the registers
  double s = 0;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = lane + Team * i;
    if (k < nvec) {
      v[i] = xr[k];
      if (res) {
        const Packed<R, V> rv = reinterpret_cast<const Packed<R, V>*>(res + r * d)[k];
#pragma unroll
        for (int e = 0; e < V; ++e) v[i].v[e] = add_as_kernel(v[i].v[e], rv.v[e]);
        reinterpret_cast<P*>(sum + r * d)[k] = v[i];
      }
#pragma unroll
      for (int e = 0; e < V; ++e) s += double(to_acc(v[i].v[e]));
    }
  }
  const double mu = Centered ? team_sum<Team>(s, scratch) / double(d) : 0.0;
  double ss = 0;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (lane + Team * i >= nvec) continue;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const double c = double(to_acc(v[i].v[e])) - mu;
      ss += c * c;
    }
  }
  const double inv = 1.0 / sqrt(team_sum<Team>(ss, scratch) / double(d) + eps);
  if (lane == 0) {
    if constexpr (Centered) mean[r] = A(mu);
    rstd[r] = A(inv);
  }
  const A m = A(mu), ri = A(inv);
  Packed<O, V>* yr = reinterpret_cast<Packed<O, V>*>(y + r * d);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = lane + Team * i;
    if (k >= nvec) break;
    const P wv = param_vec<V>(w, k, A(1)), bv = param_vec<V>(Centered ? b : nullptr, k, A(0));
    Packed<O, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_acc<O>((to_acc(v[i].v[e]) - m) * ri * to_acc(wv.v[e]) + to_acc(bv.v[e]));
    yr[k] = o;
  }
}

template <class D, class G, bool Centered, int N, int V, int Team>
__global__ void norm_backward_x_team_kernel(const G* g, const D* x, const D* w, const dacc_t<D>* mean,
                                            const dacc_t<D>* rstd, const D* addend, int64_t rows, int64_t d, D* gx,
                                            G* gx_edge) {
  using A = dacc_t<D>;
  using P = Packed<D, V>;
  constexpr int NV = N / V;
  __shared__ double scratch[32];
  const int lane = team_lane<Team>();
  const int64_t r = team_row<Team>();
  if (r >= rows) return;
  const int64_t nvec = d / V;
  const Packed<G, V>* gr = reinterpret_cast<const Packed<G, V>*>(g + r * d);
  const P* xr = reinterpret_cast<const P*>(x + r * d);
  const A m = Centered ? mean[r] : A(0), ri = rstd[r];
  Packed<G, V> gv[NV];
  P xv[NV];
  double s_gy = 0, s_gyx = 0;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = lane + Team * i;
    if (k >= nvec) continue;
    gv[i] = gr[k];
    xv[i] = xr[k];
    const P wv = param_vec<V>(w, k, A(1));
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A gy = to_acc(gv[i].v[e]) * to_acc(wv.v[e]);
      if constexpr (Centered) s_gy += double(gy);
      s_gyx += double(gy * ((to_acc(xv[i].v[e]) - m) * ri));
    }
  }
  const A a = Centered ? A(team_sum<Team>(s_gy, scratch) / double(d)) : A(0);
  const A c = A(team_sum<Team>(s_gyx, scratch) / double(d));
  P* out = reinterpret_cast<P*>(gx + r * d);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int64_t k = lane + Team * i;
    if (k >= nvec) break;
    const P wv = param_vec<V>(w, k, A(1));
    P o;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A gy = to_acc(gv[i].v[e]) * to_acc(wv.v[e]), xhat = (to_acc(xv[i].v[e]) - m) * ri;
      o.v[e] = from_acc<D>(ri * (gy - a - xhat * c));
    }
    if (addend) {
      const P av = reinterpret_cast<const P*>(addend + r * d)[k];
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = add_as_kernel(o.v[e], av.v[e]);
    }
    out[k] = o;
    if (gx_edge) {
      Packed<G, V> ev;
#pragma unroll
      for (int e = 0; e < V; ++e) ev.v[e] = to_edge<G>(o.v[e]);
      reinterpret_cast<Packed<G, V>*>(gx_edge + r * d)[k] = ev;
    }
  }
}

// Calls fn(integral_constant N, integral_constant V, integral_constant Team) for the team that
// takes a row of d (a warp up to 2048, a block up to kBlockTeam * 32) and the smallest per-thread
// count N that holds it, V a 16-byte vector of D when `vectors` (d and every row pointer allow
// it), else 1; false (and no call) when d is too long for the register-row kernels.
template <class D, class Fn>
bool with_team(int64_t d, bool vectors, Fn&& fn) {
  constexpr int VW = kVecWidth<D>;
  auto go = [&](auto n, auto team) {
    if constexpr (decltype(n)::value % VW == 0) {
      if (vectors) return fn(n, std::integral_constant<int, VW>{}, team), true;
    }
    return fn(n, std::integral_constant<int, 1>{}, team), true;
  };
  using Warp = std::integral_constant<int, 32>;
  using Block = std::integral_constant<int, kBlockTeam>;
  if (d <= 32 * 4) return go(std::integral_constant<int, 4>{}, Warp{});
  if (d <= 32 * 8) return go(std::integral_constant<int, 8>{}, Warp{});
  if (d <= 32 * 16) return go(std::integral_constant<int, 16>{}, Warp{});
  if (d <= 32 * 32) return go(std::integral_constant<int, 32>{}, Warp{});
  if (d <= 32 * 64) return go(std::integral_constant<int, 64>{}, Warp{});
  if (d <= kBlockTeam * 16) return go(std::integral_constant<int, 16>{}, Block{});
  if (d <= kBlockTeam * 32) return go(std::integral_constant<int, 32>{}, Block{});
  return false;
}

inline unsigned warp_row_blocks(int64_t rows) { return unsigned((rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock); }

// The grid and block of a team kernel over `rows` rows.
template <int Team>
dim3 team_grid(int64_t rows) { return dim3(Team == 32 ? warp_row_blocks(rows) : unsigned(rows)); }
template <int Team>
dim3 team_block() { return dim3(Team == 32 ? 32 * kWarpRowsPerBlock : Team); }

// Whether rows of d elements of D starting at each pointer (nulls allowed) move as 16-byte vectors.
template <class D>
bool rows_vectorize(int64_t d, std::initializer_list<const void*> ptrs) {
  if (d % kVecWidth<D> != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

// With xhat = (x - mean) * rstd (mean 0 for RMS norm) and gy = grad * w:
//   layer norm: grad_x = rstd * (gy - mean_j(gy) - xhat * mean_j(gy * xhat))
//   RMS norm:   grad_x = rstd * (gy - xhat * mean_j(gy * xhat))
template <class D, class G, bool Centered>
__global__ void norm_backward_x_kernel(const G* g, const D* x, const D* w, const dacc_t<D>* mean,
                                       const dacc_t<D>* rstd, const D* addend, int64_t d, D* gx, G* gx_edge) {
  using A = dacc_t<D>;
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const G* gr = g + r * d;
  const D* xr = x + r * d;
  const A m = Centered ? mean[r] : A(0), ri = rstd[r];
  double s_gy = 0, s_gyx = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const A gy = to_acc(gr[j]) * param_at(w, j, A(1));
    if constexpr (Centered) s_gy += double(gy);
    s_gyx += double(gy * ((to_acc(xr[j]) - m) * ri));
  }
  A a = A(0);
  if constexpr (Centered) a = A(block_sum(s_gy, scratch) / double(d));
  const A c = A(block_sum(s_gyx, scratch) / double(d));
  D* out = gx + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const A xhat = (to_acc(xr[j]) - m) * ri;
    const D v = from_acc<D>(ri * (to_acc(gr[j]) * param_at(w, j, A(1)) - a - xhat * c));
    const D o = addend ? add_as_kernel(v, addend[r * d + j]) : v;
    out[j] = o;
    if (gx_edge) gx_edge[r * d + j] = to_edge<G>(o);
  }
}

// partial_w[c, j] = Σ_{r in chunk c} g[r, j] * xhat[r, j]; partial_b likewise of g.
template <class D, class G>
__global__ void norm_param_partial_kernel(const G* g, const D* x, const dacc_t<D>* mean, const dacc_t<D>* rstd,
                                          int64_t rows, int64_t d, int64_t rows_per_chunk, dacc_t<D>* partial_w,
                                          dacc_t<D>* partial_b) {
  using A = dacc_t<D>;
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, c = blockIdx.y;
  if (j >= d) return;
  const int64_t r0 = c * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  A aw = A(0), ab = A(0);
  for (int64_t r = r0; r < r1; ++r) {
    const A gv = to_acc(g[r * d + j]);
    const A m = mean ? mean[r] : A(0);
    aw += gv * ((to_acc(x[r * d + j]) - m) * rstd[r]);
    ab += gv;
  }
  partial_w[c * d + j] = aw;
  if (partial_b) partial_b[c * d + j] = ab;
}

template <class T>
const device_t<T>* optional_ptr(const Tensor& t) {
  return t.defined() ? dptr<T>(t) : nullptr;
}

template <class T, class GT>
void param_grads(const LaunchContext& ctx, const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                 int64_t rows, int64_t d, Tensor& grad_weight, Tensor& grad_bias) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const bool want_w = grad_weight.defined(), want_b = grad_bias.defined();
  if ((!want_w && !want_b) || d == 0) return;
  // Enough (column, chunk) threads to fill the GPU, each chunk at least 16 rows long.
  const int64_t target_threads = 132 * 2048;
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((rows + 15) / 16, target_threads / d));
  chunks = std::min<int64_t>(chunks, 65535);
  const int64_t rows_per_chunk = rows > 0 ? (rows + chunks - 1) / chunks : 1;
  Tensor partial = Tensor::empty({2, chunks, d}, stat_dtype(dtype_v<T>), x.device());
  A* pw = partial.data<A>();
  A* pb = pw + chunks * d;
  const dim3 grid(unsigned((d + 127) / 128), unsigned(chunks));
  norm_param_partial_kernel<D><<<grid, 128, 0, ctx.stream>>>(dptr<GT>(grad), dptr<T>(x),
                                                             mean.defined() ? mean.data<A>() : nullptr,
                                                             rstd.data<A>(), rows, d, rows_per_chunk, pw, pb);
  TRIREME_CUDA_CHECK_LAUNCH();
  D* gw = want_w ? dptr<T>(grad_weight) : nullptr;
  D* gb = want_b ? dptr<T>(grad_bias) : nullptr;
  if (want_w) launch_column_finish<A>(ctx.stream, pw, chunks, d, [=] __device__(int64_t j, A v) { gw[j] = from_acc<D>(v); });
  if (want_b) launch_column_finish<A>(ctx.stream, pb, chunks, d, [=] __device__(int64_t j, A v) { gb[j] = from_acc<D>(v); });
}

// The host side of both norms (Centered: layer norm): T the input's element type, O the type of y,
// R the residual's.
template <class T, class O, class R, bool Centered>
void norm_forward_cuda(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                       Tensor& y, Tensor& sum, Tensor* mean, Tensor& rstd) {
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  const bool with_residual = residual.defined();
  check_norm_residual(Centered ? "layer_norm" : "rms_norm", x, residual, sum);
  if (rows == 0) return;
  LaunchContext ctx(y);
  const D* b = Centered ? optional_ptr<T>(bias) : nullptr;
  A* pm = Centered ? mean->data<A>() : nullptr;
  const device_t<R>* res = with_residual ? dptr<R>(residual) : nullptr;
  D* ps = with_residual ? dptr<T>(sum) : nullptr;
  const bool vec = rows_vectorize<D>(d, {x.data_ptr(), y.data_ptr(), optional_ptr<T>(weight), b, res, ps});
  const bool by_team = with_team<D>(d, vec, [&](auto n, auto v, auto team) {
    norm_forward_team_kernel<D, device_t<O>, device_t<R>, Centered, n, v, team>
        <<<team_grid<team>(rows), team_block<team>(), 0, ctx.stream>>>(dptr<T>(x), res, optional_ptr<T>(weight), b, eps,
                                                                         rows, d, dptr<O>(y), ps, pm, rstd.data<A>());
  });
  if (!by_team)
    norm_forward_kernel<D, device_t<O>, device_t<R>, Centered><<<unsigned(rows), row_block_threads(d), 0, ctx.stream>>>(
        dptr<T>(x), res, optional_ptr<T>(weight), b, eps, d, dptr<O>(y), ps, pm, rstd.data<A>());
  TRIREME_CUDA_CHECK_LAUNCH();
}

// T the input's element type, GT the type of grad; grad_bias only for layer norm (Centered).
template <class T, class GT, bool Centered>
void norm_backward_cuda(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor* mean,
                        const Tensor& rstd, const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge,
                        Tensor& grad_weight, Tensor& grad_bias) {
  TRIREME_CHECK(!grad_x_edge.defined() || (!std::is_same_v<T, GT> && grad_x_edge.dtype() == dtype_v<GT>),
                Centered ? "layer_norm_backward" : "rms_norm_backward",
                ": grad_x_edge must have grad's 16-bit edge dtype beside an f32 x, got ", grad_x_edge.dtype());
  using D = device_t<T>;
  using A = dacc_t<D>;
  const int64_t d = x.size(-1), rows = d ? x.numel() / d : 0;
  LaunchContext ctx(x);
  if (rows == 0) {  // no rows: parameter gradients are zero
    for (Tensor* t : {&grad_weight, &grad_bias})
      if (t->defined() && t->numel() > 0)
        TRIREME_CUDA_CHECK(cudaMemsetAsync(t->data_ptr(), 0, size_t(t->numel()) * sizeof(T), ctx.stream));
    return;
  }
  const A* pm = Centered ? mean->data<A>() : nullptr;
  if (grad_x.defined()) {
    const D* add = optional_ptr<T>(addend);
    device_t<GT>* edge = grad_x_edge.defined() ? dptr<GT>(grad_x_edge) : nullptr;
    const bool vec = rows_vectorize<D>(
        d, {grad.data_ptr(), x.data_ptr(), grad_x.data_ptr(), optional_ptr<T>(weight), add, edge});
    const bool by_team = with_team<D>(d, vec, [&](auto n, auto v, auto team) {
      norm_backward_x_team_kernel<D, device_t<GT>, Centered, n, v, team>
          <<<team_grid<team>(rows), team_block<team>(), 0, ctx.stream>>>(
              dptr<GT>(grad), dptr<T>(x), optional_ptr<T>(weight), pm, rstd.data<A>(), add, rows, d, dptr<T>(grad_x),
              edge);
    });
    if (!by_team)
      norm_backward_x_kernel<D, device_t<GT>, Centered><<<unsigned(rows), row_block_threads(d), 0, ctx.stream>>>(
          dptr<GT>(grad), dptr<T>(x), optional_ptr<T>(weight), pm, rstd.data<A>(), add, d, dptr<T>(grad_x), edge);
    TRIREME_CUDA_CHECK_LAUNCH();
  }
  Tensor no_mean;
  param_grads<T, GT>(ctx, grad, x, Centered ? *mean : no_mean, rstd, rows, d, grad_weight, grad_bias);
}

// The registered kernels: the edge type (kernels/nn.h) picked at the call.
template <class T>
void layer_norm_cuda(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                     Tensor& y, Tensor& sum, Tensor& mean, Tensor& rstd) {
  dispatch_norm_edge<T>("layer_norm", y.dtype(), [&]<class O>() {
    dispatch_norm_residual<T, O>("layer_norm", residual, [&]<class R>() {
      norm_forward_cuda<T, O, R, true>(x, residual, weight, bias, eps, y, sum, &mean, rstd);
    });
  });
}

template <class T>
void layer_norm_backward_cuda(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                              const Tensor& rstd, const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge,
                              Tensor& grad_weight, Tensor& grad_bias) {
  dispatch_norm_edge<T>("layer_norm_backward", grad.dtype(), [&]<class G>() {
    norm_backward_cuda<T, G, true>(grad, x, weight, &mean, rstd, addend, grad_x, grad_x_edge, grad_weight, grad_bias);
  });
}

template <class T>
void rms_norm_cuda(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps, Tensor& y, Tensor& sum,
                   Tensor& rstd) {
  Tensor no_bias;
  dispatch_norm_edge<T>("rms_norm", y.dtype(), [&]<class O>() {
    dispatch_norm_residual<T, O>("rms_norm", residual, [&]<class R>() {
      norm_forward_cuda<T, O, R, false>(x, residual, weight, no_bias, eps, y, sum, nullptr, rstd);
    });
  });
}

template <class T>
void rms_norm_backward_cuda(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                            const Tensor& addend, Tensor& grad_x, Tensor& grad_x_edge, Tensor& grad_weight) {
  Tensor no_bias;
  dispatch_norm_edge<T>("rms_norm_backward", grad.dtype(), [&]<class G>() {
    norm_backward_cuda<T, G, false>(grad, x, weight, nullptr, rstd, addend, grad_x, grad_x_edge, grad_weight, no_bias);
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_norm) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<LayerNormKernel, double, float, bf16_t, f16_t>(
      "layer_norm", cuda, []<class T>() { return &layer_norm_cuda<T>; });
  registry.add_each<LayerNormBackwardKernel, double, float, bf16_t, f16_t>(
      "layer_norm_backward", cuda, []<class T>() { return &layer_norm_backward_cuda<T>; });
  registry.add_each<RmsNormKernel, double, float, bf16_t, f16_t>(
      "rms_norm", cuda, []<class T>() { return &rms_norm_cuda<T>; });
  registry.add_each<RmsNormBackwardKernel, double, float, bf16_t, f16_t>(
      "rms_norm_backward", cuda, []<class T>() { return &rms_norm_backward_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
