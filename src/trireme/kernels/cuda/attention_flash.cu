// Tensor-core fused attention for bf16/f16 (FlashAttention-2 style): mma.sync m16n8k16 with f32
// accumulation, operands staged in shared memory and read with ldmatrix, scores kept in registers.
// Nothing of size Tq x Tk is ever stored; the forward writes each row's log-sum-exp and the
// backward recomputes the probabilities from it.
//
// Blocks have 4 warps; each warp owns 16 rows of the block's 64-row tile. The tiles an inner loop
// walks are double-buffered: cp.async brings step i + 1's tiles into shared memory while the
// tensor cores work on step i (pipelined_steps). Scores are kept in the
// log2 domain (x = s q·k · log2 e) so that exp is exp2. Head dims are padded up to HD (32, 64 or
// 128) with zeros in shared memory, which changes no dot product.
//   forward  (grid: query tiles x pairs): Q tile in registers, loop over key tiles (causal: up to
//            the diagonal), online softmax: m, l per row, O rescaled when m grows.
//   backward, deterministic (no atomics): one kernel over key tiles accumulates dK, dV over the
//            query tiles (causal: from the diagonal on), one over query tiles accumulates dQ over
//            the key tiles; both recompute P = exp2(x - lse·log2 e) and use
//            dS = P ∘ (dP - delta) with delta = rowsum(dO ∘ O) from attention_delta.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): lane l holds A rows l/4 and l/4 + 8, columns
// 2(l%4) + {0, 1} and + 8; B columns (n) l/4, rows (k) 2(l%4) + {0, 1} and + 8; C rows l/4 and
// l/4 + 8, columns 2(l%4) + {0, 1}. So a C tile of scores, packed to 16 bits, is an A operand for
// the next product without going through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "trireme/cuda/graph_capture.h"
#include "trireme/kernels/cuda/attention_common.cuh"

namespace trireme::cuda_kernels {
namespace {

constexpr int kTile = 64;      // rows per block tile, and rows per inner-loop tile
constexpr int kThreads = 128;  // 4 warps x 16 rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers ----

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a b for one 16x8x16 step.
template <class D>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as one register of two 16-bit values, x in the low half.
template <class D>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
  if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// ---- fragments from shared tiles with row stride LD (16-bit elements) ----

// A operand (16 x 16) of rows [m0, m0 + 16), columns [k0, k0 + 16) of a row-major tile.
template <int LD>
__device__ __forceinline__ void load_a(uint32_t (&r)[4], const uint16_t* t, int m0, int k0, int lane) {
  ldsm_x4(r, t + (m0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + k0 + (lane >> 4) * 8);
}

// B operands of two n8 tiles, n in [n0, n0 + 16), k in [k0, k0 + 16), from a tile stored [n][k]
// (Kᵀ as B when the tile holds rows of K): r[0..1] for n0, r[2..3] for n0 + 8.
template <int LD>
__device__ __forceinline__ void load_b_nk(uint32_t (&r)[4], const uint16_t* t, int n0, int k0, int lane) {
  ldsm_x4(r, t + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8);
}

// The same from a tile stored [k][n] (V as B when the tile holds rows of V).
template <int LD>
__device__ __forceinline__ void load_b_kn(uint32_t (&r)[4], const uint16_t* t, int k0, int n0, int lane) {
  ldsm_x4_trans(r, t + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

// The A operand for k-step kk of a product whose k dim is the columns of C tiles c[2kk], c[2kk+1].
template <class D>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<D>(c0[0], c0[1]);
  a[1] = pack2<D>(c0[2], c0[3]);
  a[2] = pack2<D>(c1[0], c1[1]);
  a[3] = pack2<D>(c1[2], c1[3]);
}

// 16 bytes from global to shared memory without passing through registers; valid = false
// writes zeros (a source size of 0) and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Starts copying rows [0, rows) x columns [0, hd) of a global head matrix into a shared tile of
// kTile x HD, zeros elsewhere; 16-byte chunks (hd is a multiple of 16 and rows are 16-byte
// aligned). Complete after the next cp_async_commit's group is waited for.
template <int HD>
__device__ __forceinline__ void load_tile(uint16_t* t, const uint16_t* g, int64_t ld, int rows, int hd) {
  constexpr int kChunks = HD / 8, LD = HD + 8;
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < rows && col < hd;
    cp_async16(t + r * LD + col, valid ? g + r * ld + col : g, valid);
  }
}

// Runs body(i, buf) for i in [begin, end) with the shared tiles of step i in buffer buf (0 or 1):
// stage(i, buf) issues step i's copies, and step i + 1's are in flight while step i computes.
// Copies issued before the call (and committed) are complete when the first body runs.
template <class Stage, class Body>
__device__ __forceinline__ void pipelined_steps(int begin, int end, Stage&& stage, Body&& body) {
  if (begin >= end) return;
  stage(begin, 0);
  cp_async_commit();
  for (int i = begin; i < end; ++i) {
    const int buf = (i - begin) & 1;
    if (i + 1 < end) {
      stage(i + 1, buf ^ 1);  // the buffer step i - 1 used: every thread left it (barrier below)
      cp_async_commit();
      cp_async_wait<1>();  // all but the newest group: step i's tiles are here
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    body(i, buf);
    __syncthreads();
  }
}

// The key tiles query tile qt attends to: all of them, or up to the diagonal when causal.
__device__ __forceinline__ int key_tiles_for(const AttnArgs& a, int qt) {
  const int n = (a.tk + kTile - 1) / kTile;
  return a.causal ? min(n, qt + 1) : n;
}

// Starts copying key tile kt of pair (b, h)'s K and V into the shared tiles sk and sv.
template <int HD>
__device__ __forceinline__ void stage_kv(const AttnArgs& a, int b, int h, int kt, uint16_t* sk, uint16_t* sv) {
  const int k0 = kt * kTile, rows = min(kTile, a.tk - k0);
  load_tile<HD>(sk, a.k.row<uint16_t>(b, h, k0), a.k.s2, rows, a.hd);
  load_tile<HD>(sv, a.v.row<uint16_t>(b, h, k0), a.v.s2, rows, a.hd);
}

// Stores a warp's 16 x HD accumulator (scaled by f, rows beyond `rows` and columns beyond hd
// left out) to rows [r0, r0 + 16) of a global head matrix.
template <class D, int HD>
__device__ __forceinline__ void store_rows(const float (&acc)[HD / 8][4], D* g, int64_t ld, int r0, int rows, int hd,
                                           float f0, float f1, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = r0 + (lane >> 2) + half * 8;
    if (r >= rows) continue;
    const float f = half ? f1 : f0;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      const int col = dt * 8 + (lane & 3) * 2;
      if (col < hd)
        *reinterpret_cast<uint32_t*>(g + r * ld + col) = pack2<D>(acc[dt][2 * half] * f, acc[dt][2 * half + 1] * f);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

// ---- the two warp-level products every kernel is made of ----

// acc (16 x kTile) += a · Tᵀ for k-step kk: `a` the warp's A fragment of 16 rows, T a shared tile
// stored [n][k] (rows of K, Q, V or dO), so each product row gets its dot product with kTile rows.
template <class D, int HD>
__device__ __forceinline__ void add_rows_times_tile_t(float (&acc)[kTile / 8][4], const uint32_t (&a)[4],
                                                      const uint16_t* t, int kk, int lane) {
#pragma unroll
  for (int np = 0; np < kTile / 16; ++np) {
    uint32_t b[4];
    load_b_nk<HD + 8>(b, t, np * 16, kk * 16, lane);
    mma<D>(acc[2 * np], a, b[0], b[1]);
    mma<D>(acc[2 * np + 1], a, b[2], b[3]);
  }
}

// acc (16 x HD) += c · T: c the warp's 16 x kTile scores as C fragments (packed to 16 bits, they
// are the A operand), T a kTile x HD shared tile stored [k][n].
template <class D, int HD>
__device__ __forceinline__ void add_scores_times_tile(float (&acc)[HD / 8][4], const float (&c)[kTile / 8][4],
                                                      const uint16_t* t, int lane) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[4];
    c_to_a<D>(a, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b[4];
      load_b_kn<HD + 8>(b, t, kk * 16, dp * 16, lane);
      mma<D>(acc[2 * dp], a, b[0], b[1]);
      mma<D>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// ---- forward ----

template <class D, int HD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(AttnArgs a) {
  constexpr int LD = HD + 8, KS = HD / 16, DT = HD / 8, NT = kTile / 8;
  extern __shared__ __align__(16) uint16_t smem[];  // launch_flash's sizes
  uint16_t *sq = smem, *sk_buf = sq + kTile * LD, *sv_buf = sk_buf + 2 * kTile * LD;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y);  // heaviest causal tiles first (Note [tile order])
  const int pair = blockIdx.x, b = pair / a.nh, h = pair % a.nh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile;
  const float c = float(a.scale) * kLog2e;

  load_tile<HD>(sq, a.q.row<uint16_t>(b, h, q0), a.q.s2, min(kTile, a.tq - q0), a.hd);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) load_a<LD>(qf[kk], sq, warp * 16, kk * 16, lane);

  float o[DT][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  auto stage = [&](int kt, int buf) { stage_kv<HD>(a, b, h, kt, sk_buf + buf * kTile * LD, sv_buf + buf * kTile * LD); };
  pipelined_steps(0, key_tiles_for(a, qt), stage, [&](int kt, int buf) {
    const int k0 = kt * kTile;
    const uint16_t* sk = sk_buf + buf * kTile * LD;
    const uint16_t* sv = sv_buf + buf * kTile * LD;

    float s[NT][4];
    zero(s);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) add_rows_times_tile_t<D, HD>(s, qf[kk], sk, kk, lane);
    const bool masked = k0 + kTile > a.tk || (a.causal && kt == qt);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * c;
        if (masked) {
          const int j = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          const int i = q0 + warp * 16 + (lane >> 2) + (e >> 1) * 8;
          if (j >= a.tk || (a.causal && j > i)) x = -INFINITY;
        }
        s[nt][e] = x;
      }
    }
    // Online softmax, per row half (the 4 lanes of a quad share a row).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing yet: no NaN
      const float alpha = exp2f(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - m_use);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_use);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
    }
    add_scores_times_tile<D, HD>(o, s, sv, lane);  // O += P V
  });
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    const int i = q0 + warp * 16 + (lane >> 2) + r * 8;
    if ((lane & 3) == 0 && i < a.tq)
      static_cast<float*>(a.lse)[int64_t(pair) * a.tq + i] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
  }
  store_rows<D, HD>(o, a.o.row<D>(b, h, q0), a.o.s2, warp * 16, a.tq - q0, a.hd, inv[0], inv[1], lane);
}

// ---- backward: dK, dV over key tiles ----

template <class D, int HD>
__global__ void __launch_bounds__(kThreads) flash_backward_kv_kernel(AttnArgs a) {
  constexpr int LD = HD + 8, KS = HD / 16, DT = HD / 8, NT = kTile / 8;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sk = smem, *sv = sk + kTile * LD, *sq_buf = sv + kTile * LD, *sg_buf = sq_buf + 2 * kTile * LD;
  float* slse_buf = reinterpret_cast<float*>(sg_buf + 2 * kTile * LD);
  float* sdel_buf = slse_buf + 2 * kTile;
  const int kt = blockIdx.y;  // causal: low key tiles see the most queries and go first (Note [tile order])
  const int pair = blockIdx.x, b = pair / a.nh, h = pair % a.nh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = kt * kTile;
  const float c = float(a.scale) * kLog2e;
  const float* lse = static_cast<const float*>(a.lse) + int64_t(pair) * a.tq;
  const float* del = static_cast<const float*>(a.delta) + int64_t(pair) * a.tq;

  stage_kv<HD>(a, b, h, kt, sk, sv);
  cp_async_commit();  // complete when the first step runs
  float dk[DT][4], dv[DT][4];
  zero(dk);
  zero(dv);
  const int qt_end = (a.tq + kTile - 1) / kTile;
  auto stage = [&](int qt, int buf) {
    const int q0 = qt * kTile;
    load_tile<HD>(sq_buf + buf * kTile * LD, a.q.row<uint16_t>(b, h, q0), a.q.s2, min(kTile, a.tq - q0), a.hd);
    load_tile<HD>(sg_buf + buf * kTile * LD, a.dout.row<uint16_t>(b, h, q0), a.dout.s2, min(kTile, a.tq - q0), a.hd);
    for (int t = threadIdx.x; t < kTile; t += kThreads) {  // plain stores: visible after the step's barrier
      const bool in = q0 + t < a.tq;
      slse_buf[buf * kTile + t] = in ? lse[q0 + t] * kLog2e : INFINITY;  // padding rows: P = 0
      sdel_buf[buf * kTile + t] = in ? del[q0 + t] : 0.0f;
    }
  };
  pipelined_steps(a.causal ? kt : 0, qt_end, stage, [&](int qt, int buf) {
    const int q0 = qt * kTile;
    const uint16_t* sq = sq_buf + buf * kTile * LD;
    const uint16_t* sg = sg_buf + buf * kTile * LD;
    const float* slse = slse_buf + buf * kTile;
    const float* sdel = sdel_buf + buf * kTile;

    // Sᵀ = K Qᵀ for the warp's 16 keys x 64 queries, then Pᵀ.
    float p[NT][4];
    zero(p);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t ka[4];
      load_a<LD>(ka, sk, warp * 16, kk * 16, lane);
      add_rows_times_tile_t<D, HD>(p, ka, sq, kk, lane);
    }
    const bool diag = a.causal && qt == kt;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int iq = nt * 8 + (lane & 3) * 2 + (e & 1);
        float x = exp2f(p[nt][e] * c - slse[iq]);
        if (diag && iq + q0 < k0 + warp * 16 + (lane >> 2) + (e >> 1) * 8) x = 0.0f;
        p[nt][e] = x;
      }
    }
    add_scores_times_tile<D, HD>(dv, p, sg, lane);  // dV += Pᵀ dO
    // dPᵀ = V dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ - delta)
    float ds[NT][4];
    zero(ds);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t va[4];
      load_a<LD>(va, sv, warp * 16, kk * 16, lane);
      add_rows_times_tile_t<D, HD>(ds, va, sg, kk, lane);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = p[nt][e] * (ds[nt][e] - sdel[nt * 8 + (lane & 3) * 2 + (e & 1)]);
    }
    add_scores_times_tile<D, HD>(dk, ds, sq, lane);  // dK += dSᵀ Q (scaled at the end)
  });
  const float scale = float(a.scale);
  store_rows<D, HD>(dk, a.dk.row<D>(b, h, k0), a.dk.s2, warp * 16, a.tk - k0, a.hd, scale, scale, lane);
  store_rows<D, HD>(dv, a.dv.row<D>(b, h, k0), a.dv.s2, warp * 16, a.tk - k0, a.hd, 1.0f, 1.0f, lane);
}

// ---- backward: dQ over query tiles ----

template <class D, int HD>
__global__ void __launch_bounds__(kThreads) flash_backward_q_kernel(AttnArgs a) {
  constexpr int LD = HD + 8, KS = HD / 16, DT = HD / 8, NT = kTile / 8;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sq = smem, *sg = sq + kTile * LD, *sk_buf = sg + kTile * LD, *sv_buf = sk_buf + 2 * kTile * LD;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y);
  const int pair = blockIdx.x, b = pair / a.nh, h = pair % a.nh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile;
  const float c = float(a.scale) * kLog2e;

  load_tile<HD>(sq, a.q.row<uint16_t>(b, h, q0), a.q.s2, min(kTile, a.tq - q0), a.hd);
  load_tile<HD>(sg, a.dout.row<uint16_t>(b, h, q0), a.dout.s2, min(kTile, a.tq - q0), a.hd);
  float lse2[2], del[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = q0 + warp * 16 + (lane >> 2) + r * 8;
    const int64_t at = int64_t(pair) * a.tq + i;
    lse2[r] = i < a.tq ? static_cast<const float*>(a.lse)[at] * kLog2e : INFINITY;
    del[r] = i < a.tq ? static_cast<const float*>(a.delta)[at] : 0.0f;
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KS][4], gf[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    load_a<LD>(qf[kk], sq, warp * 16, kk * 16, lane);
    load_a<LD>(gf[kk], sg, warp * 16, kk * 16, lane);
  }
  float dq[DT][4];
  zero(dq);
  auto stage = [&](int kt, int buf) { stage_kv<HD>(a, b, h, kt, sk_buf + buf * kTile * LD, sv_buf + buf * kTile * LD); };
  pipelined_steps(0, key_tiles_for(a, qt), stage, [&](int kt, int buf) {
    const int k0 = kt * kTile;
    const uint16_t* sk = sk_buf + buf * kTile * LD;
    const uint16_t* sv = sv_buf + buf * kTile * LD;

    float p[NT][4], ds[NT][4];
    zero(p);
    zero(ds);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4], bv[4];
        load_b_nk<LD>(bk, sk, np * 16, kk * 16, lane);
        mma<D>(p[2 * np], qf[kk], bk[0], bk[1]);
        mma<D>(p[2 * np + 1], qf[kk], bk[2], bk[3]);
        load_b_nk<LD>(bv, sv, np * 16, kk * 16, lane);
        mma<D>(ds[2 * np], gf[kk], bv[0], bv[1]);
        mma<D>(ds[2 * np + 1], gf[kk], bv[2], bv[3]);
      }
    }
    const bool masked = k0 + kTile > a.tk || (a.causal && kt == qt);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float x = exp2f(p[nt][e] * c - lse2[r]);
        if (masked) {
          const int j = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
          const int i = q0 + warp * 16 + (lane >> 2) + r * 8;
          if (j >= a.tk || (a.causal && j > i)) x = 0.0f;
        }
        ds[nt][e] = x * (ds[nt][e] - del[r]);
      }
    }
    add_scores_times_tile<D, HD>(dq, ds, sk, lane);  // dQ += dS K (scaled at the end)
  });
  const float scale = float(a.scale);
  store_rows<D, HD>(dq, a.dq.row<D>(b, h, q0), a.dq.s2, warp * 16, a.tq - q0, a.hd, scale, scale, lane);
}

// Launches `kernel` with `bytes` of dynamic shared memory (above the 48 KiB default for HD = 128).
template <class Kernel>
void launch_with_smem(Kernel kernel, dim3 grid, size_t bytes, cudaStream_t stream, const AttnArgs& a) {
  if (bytes > 48 * 1024) {
    cuda::RelaxedCaptureScope relaxed;  // an attribute of the kernel, not work on the stream
    TRIREME_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  }
  kernel<<<grid, kThreads, bytes, stream>>>(a);
  TRIREME_CUDA_CHECK_LAUNCH();
}

// Note [tile order]
// Under a causal mask a tile's work grows with how many keys its queries see: the last query
// tiles (and, in the key-side backward, the first key tiles) are the heaviest, up to T/kTile
// times the lightest. The grid is (batch x head pairs, tiles) with the pairs varying fastest, and
// the CTA scheduler hands out blocks in that order, so every pair's heaviest tile starts in the
// first waves and the last wave holds only light tiles: the kernel ends with a short tail. (With
// the tiles varying fastest, each pair's tiles ran heavy to light one pair after another, so the
// last pairs' heavy tiles started in the last waves.)
template <class D, int HD>
void launch_flash(const AttnArgs& a, int nb, cudaStream_t stream, bool backward) {
  constexpr size_t tile_bytes = size_t(kTile) * (HD + 8) * sizeof(uint16_t);
  const int pairs = nb * a.nh;
  const dim3 q_grid(unsigned(pairs), unsigned((a.tq + kTile - 1) / kTile));
  if (!backward) {
    launch_with_smem(flash_forward_kernel<D, HD>, q_grid, 5 * tile_bytes, stream, a);  // Q, 2 x (K, V)
    return;
  }
  const dim3 k_grid(unsigned(pairs), unsigned((a.tk + kTile - 1) / kTile));
  // K, V, 2 x (Q, dO, lse, delta); and Q, dO, 2 x (K, V).
  launch_with_smem(flash_backward_kv_kernel<D, HD>, k_grid, 6 * tile_bytes + 4 * kTile * sizeof(float), stream, a);
  launch_with_smem(flash_backward_q_kernel<D, HD>, q_grid, 6 * tile_bytes, stream, a);
}

template <class D>
void dispatch_hd(const AttnArgs& a, int nb, cudaStream_t stream, bool backward) {
  if (a.hd <= 32) {
    launch_flash<D, 32>(a, nb, stream, backward);
  } else if (a.hd <= 64) {
    launch_flash<D, 64>(a, nb, stream, backward);
  } else {
    launch_flash<D, 128>(a, nb, stream, backward);
  }
}

}  // namespace

template <class D>
void flash_attention_forward(const AttnArgs& a, int nb, cudaStream_t stream) {
  dispatch_hd<D>(a, nb, stream, false);
}
template <class D>
void flash_attention_backward(const AttnArgs& a, int nb, cudaStream_t stream) {
  dispatch_hd<D>(a, nb, stream, true);
}

template void flash_attention_forward<__nv_bfloat16>(const AttnArgs&, int, cudaStream_t);
template void flash_attention_forward<__half>(const AttnArgs&, int, cudaStream_t);
template void flash_attention_backward<__nv_bfloat16>(const AttnArgs&, int, cudaStream_t);
template void flash_attention_backward<__half>(const AttnArgs&, int, cudaStream_t);

}  // namespace trireme::cuda_kernels
