// Tensor-core fused attention for bf16/f16 (FlashAttention-2 style): mma.sync m16n8k16 with f32
// accumulation, operands staged in shared memory and read with ldmatrix, scores kept in registers.
// Nothing of size Tq x Tk is ever stored; the forward writes each row's log-sum-exp and the
// backward recomputes the probabilities from it.
//
// Blocks have W warps; each warp owns MF fragments of 16 rows of the block's tile (Shapes below
// picks W, MF and the tile sizes per head dim). With MF = 2 every B fragment a warp reads from
// shared memory feeds two mma, which halves the shared-memory reads per mma: at one ldmatrix.x4
// per two mma (MF = 1) they, not the tensor cores, set the pace. The tiles an inner loop walks are
// double-buffered: cp.async brings step i + 1's tiles into shared memory while the tensor cores
// work on step i (pipelined_steps). Scores are kept in the log2 domain (x = s q·k · log2 e, one
// FMA with the row's max) so that exp is one ex2 instruction. Head dims are padded up to HD (32,
// 64 or 128) with zeros in shared memory, which changes no dot product.
//   forward  (grid: query tiles x pairs): Q tile in registers or shared memory, loop over key
//            tiles (causal: up to the tile's last row), online softmax: m, l per row, O rescaled
//            when m grows.
//   backward, deterministic (no atomics): one kernel over key tiles accumulates dK, dV over the
//            query tiles (causal: from the diagonal on), one over query tiles accumulates dQ over
//            the key tiles; both recompute P = exp2(x - lse·log2 e) and use
//            dS = P ∘ (dP - delta) with delta = rowsum(dO ∘ O) (attention.cu).
// Under a causal mask a warp skips a step whose keys all come after its rows, and masks element
// by element only in steps that cross its diagonal.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): lane l holds A rows l/4 and l/4 + 8, columns
// 2(l%4) + {0, 1} and + 8; B columns (n) l/4, rows (k) 2(l%4) + {0, 1} and + 8; C rows l/4 and
// l/4 + 8, columns 2(l%4) + {0, 1}. So a C tile of scores, packed to 16 bits, is an A operand for
// the next product without going through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "trireme/cuda/graph_capture.h"
#include "trireme/kernels/cuda/attention_common.cuh"

namespace trireme::cuda_kernels {
namespace {

constexpr int kKeyTile = 64;  // keys per inner-loop step of the forward
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

// 2^x by the special-function unit alone. exp2f adds a range reduction so that results below
// 2^-126 come out as denormals; here they flush to 0, which no softmax weight notices, and the
// exponentials are most of the non-tensor work of every kernel below.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
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
// The same for 4 bytes (a float of a row of statistics).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Starts copying rows [0, rows) x columns [0, hd) of a global head matrix into a shared tile of
// ROWS x HD, zeros elsewhere, by the block's THREADS threads; 16-byte chunks (hd is a multiple of
// 16 and rows are 16-byte aligned). Complete after the next cp_async_commit's group is waited for.
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(uint16_t* t, const uint16_t* g, int64_t ld, int rows, int hd) {
  constexpr int kChunks = HD / 8, LD = HD + 8;
#pragma unroll
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < rows && col < hd;
    cp_async16(t + r * LD + col, valid ? g + r * ld + col : g, valid);
  }
}

// The key tiles (of BN keys) a block of BM query rows from q0 attends to: all of them, or, causal,
// up to the diagonal of its last row.
template <int BM, int BN>
__device__ __forceinline__ int key_tiles_until(const AttnArgs& a, int q0) {
  const int n = (a.tk + BN - 1) / BN;
  return a.causal ? min(n, (q0 + BM + BN - 1) / BN) : n;
}

// Starts copying key tile kt (BN keys) of pair (b, h)'s K and V into the shared tiles sk and sv.
template <int HD, int BN, int THREADS>
__device__ __forceinline__ void stage_kv(const AttnArgs& a, int b, int h, int kt, uint16_t* sk, uint16_t* sv) {
  const int k0 = kt * BN, rows = min(BN, a.tk - k0);
  load_tile<HD, BN, THREADS>(sk, a.k.row<uint16_t>(b, h, k0), a.k.s2, rows, a.hd);
  load_tile<HD, BN, THREADS>(sv, a.v.row<uint16_t>(b, h, k0), a.v.s2, rows, a.hd);
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

template <int MF, int N>
__device__ __forceinline__ void zero(float (&c)[MF][N][4]) {
#pragma unroll
  for (int f = 0; f < MF; ++f)
#pragma unroll
    for (int i = 0; i < N; ++i) c[f][i][0] = c[f][i][1] = c[f][i][2] = c[f][i][3] = 0.0f;
}

// ---- the two warp-level products every kernel is made of ----
// A warp owns MF fragments of 16 rows; each B fragment read from shared memory feeds all MF of
// them, so MF = 2 halves the shared-memory reads per mma (which bound these loops at MF = 1:
// one ldmatrix.x4 per two mma).

// acc[f] (16 x N) += a[f] · Tᵀ for k-step kk: a[f] the A fragment of the warp's f-th 16 rows, T a
// shared tile stored [n][k] (rows of K, Q, V or dO), so each product row gets its dot product with
// N rows of T.
template <class D, int HD, int N, int MF>
__device__ __forceinline__ void add_rows_times_tile_t(float (&acc)[MF][N / 8][4], const uint32_t (&a)[MF][4],
                                                      const uint16_t* t, int kk, int lane) {
#pragma unroll
  for (int np = 0; np < N / 16; ++np) {
    uint32_t b[4];
    load_b_nk<HD + 8>(b, t, np * 16, kk * 16, lane);
#pragma unroll
    for (int f = 0; f < MF; ++f) {
      mma<D>(acc[f][2 * np], a[f], b[0], b[1]);
      mma<D>(acc[f][2 * np + 1], a[f], b[2], b[3]);
    }
  }
}

// acc[f] (16 x HD) += c[f] · T: c[f] 16 x N scores as C fragments (packed to 16 bits, they are the
// A operand), T an N x HD shared tile stored [k][n].
template <class D, int HD, int N, int MF>
__device__ __forceinline__ void add_scores_times_tile(float (&acc)[MF][HD / 8][4], const float (&c)[MF][N / 8][4],
                                                      const uint16_t* t, int lane) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    uint32_t a[MF][4];
#pragma unroll
    for (int f = 0; f < MF; ++f) c_to_a<D>(a[f], c[f][2 * kk], c[f][2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      uint32_t b[4];
      load_b_kn<HD + 8>(b, t, kk * 16, dp * 16, lane);
#pragma unroll
      for (int f = 0; f < MF; ++f) {
        mma<D>(acc[f][2 * dp], a[f], b[0], b[1]);
        mma<D>(acc[f][2 * dp + 1], a[f], b[2], b[3]);
      }
    }
  }
}

// The A fragments of k-step kk for a warp's MF x 16 rows [w0, w0 + 16 MF) of a shared tile.
template <int HD, int MF>
__device__ __forceinline__ void load_rows_a(uint32_t (&r)[MF][4], const uint16_t* t, int w0, int kk, int lane) {
#pragma unroll
  for (int f = 0; f < MF; ++f) load_a<HD + 8>(r[f], t, w0 + f * 16, kk * 16, lane);
}

// A warp's row fragments for every k-step: in registers (kept, REG) or read again from the shared
// tile at each use (where registers do not allow: head dim 128).
template <int HD, int MF, bool REG>
struct RowFragments {
  uint32_t f[REG ? HD / 16 : 1][MF][4];
  const uint16_t* t;
  int w0;
  __device__ __forceinline__ void init(const uint16_t* tile, int first_row, int lane) {
    t = tile;
    w0 = first_row;
    if constexpr (REG) {
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) load_rows_a<HD, MF>(f[kk], t, w0, kk, lane);
    }
  }
  // Those of step kk (kk a compile-time constant after unrolling).
  __device__ __forceinline__ const uint32_t (&get(int kk, int lane))[MF][4] {
    if constexpr (REG) {
      return f[kk];
    } else {
      load_rows_a<HD, MF>(f[0], t, w0, kk, lane);
      return f[0];
    }
  }
};

// ---- block shapes ----
// Forward: W warps of MF x 16 query rows (a block of BM = 16 W MF), key tiles of kKeyTile.
// dK, dV: W warps of MF x 16 key rows (BN = 16 W MF keys per block), query tiles of BQ.
// dQ: W warps of MF x 16 query rows, key tiles of BN.
// QREG / KVREG: the warp's Q (and dO) or K (and V) fragments stay in registers.
// MINB: blocks per SM that registers are held to (__launch_bounds__; 0 leaves it to the compiler).
template <int MF_, int W_, bool QREG_, int MINB_ = 0>
struct FwdShape {
  static constexpr int MF = MF_, W = W_, BM = 16 * W_ * MF_, BN = kKeyTile, MINB = MINB_;
  static constexpr bool QREG = QREG_;
};
template <int MF_, int W_, int BQ_, bool KVREG_, int MINB_ = 0>
struct KvShape {
  static constexpr int MF = MF_, W = W_, BN = 16 * W_ * MF_, BQ = BQ_, MINB = MINB_;
  static constexpr bool KVREG = KVREG_;
};
template <int MF_, int W_, int BN_, bool QREG_, int MINB_ = 0>
struct QShape {
  static constexpr int MF = MF_, W = W_, BM = 16 * W_ * MF_, BN = BN_, MINB = MINB_;
  static constexpr bool QREG = QREG_;
};

// ---- forward ----

template <class D, int HD, class S>
__global__ void __launch_bounds__(S::W * 32, S::MINB) flash_forward_kernel(AttnArgs a) {
  constexpr int LD = HD + 8, KS = HD / 16, DT = HD / 8, MF = S::MF, BM = S::BM, BN = S::BN, NT = BN / 8;
  constexpr int kThreads = S::W * 32;
  extern __shared__ __align__(16) uint16_t smem[];  // launch_flash's sizes
  uint16_t *sq = smem, *sk_buf = sq + BM * LD, *sv_buf = sk_buf + 2 * BN * LD;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y);  // heaviest causal tiles first (Note [tile order])
  const int pair = blockIdx.x, b = pair / a.nh, h = pair % a.nh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * BM, w0 = warp * 16 * MF;  // the block's first query row; the warp's, in the tile
  const float c = float(a.scale) * kLog2e;       // scale > 0 (1/sqrt(hd))

  load_tile<HD, BM, kThreads>(sq, a.q.row<uint16_t>(b, h, q0), a.q.s2, min(BM, a.tq - q0), a.hd);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  RowFragments<HD, MF, S::QREG> qf;
  qf.init(sq, w0, lane);

  float o[MF][DT][4];
  zero(o);
  // m: the row's running max of raw scores; l: its running sum of exp2((s - m) c).
  float m[MF][2], l[MF][2];
#pragma unroll
  for (int f = 0; f < MF; ++f) m[f][0] = m[f][1] = -INFINITY, l[f][0] = l[f][1] = 0.0f;
  const int kt_end = key_tiles_until<BM, BN>(a, q0);
  auto stage = [&](int kt, int buf) { stage_kv<HD, BN, kThreads>(a, b, h, kt, sk_buf + buf * BN * LD, sv_buf + buf * BN * LD); };
  pipelined_steps(0, kt_end, stage, [&](int kt, int buf) {
    const int k0 = kt * BN;
    if (a.causal && k0 > q0 + w0 + 16 * MF - 1) return;  // every key after every row of the warp
    const uint16_t* sk = sk_buf + buf * BN * LD;
    const uint16_t* sv = sv_buf + buf * BN * LD;

    float s[MF][NT][4];
    zero(s);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) add_rows_times_tile_t<D, HD, BN, MF>(s, qf.get(kk, lane), sk, kk, lane);
    const bool masked = k0 + BN > a.tk || (a.causal && k0 + BN - 1 > q0 + w0);
    // Online softmax, per row half (the 4 lanes of a quad share a row). The max is taken over raw
    // scores and p = exp2(s c - m c) is one FMA and one exp2.
#pragma unroll
    for (int f = 0; f < MF; ++f) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (masked) {
          const int i = q0 + w0 + f * 16 + (lane >> 2) + r * 8;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = k0 + nt * 8 + (lane & 3) * 2 + e;
              if (j >= a.tk || (a.causal && j > i)) s[f][nt][2 * r + e] = -INFINITY;
            }
          }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[f][nt][2 * r], s[f][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[f][r], mx);
        const float mc = m_new == -INFINITY ? 0.0f : m_new * c;  // a row with nothing yet: no NaN
        const float alpha = fast_exp2(fmaf(m[f][r], c, -mc));
        m[f][r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          s[f][nt][2 * r] = fast_exp2(fmaf(s[f][nt][2 * r], c, -mc));
          s[f][nt][2 * r + 1] = fast_exp2(fmaf(s[f][nt][2 * r + 1], c, -mc));
          sum += s[f][nt][2 * r] + s[f][nt][2 * r + 1];
        }
        l[f][r] = l[f][r] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          o[f][dt][2 * r] *= alpha;
          o[f][dt][2 * r + 1] *= alpha;
        }
      }
    }
    add_scores_times_tile<D, HD, BN, MF>(o, s, sv, lane);  // O += P V
  });
#pragma unroll
  for (int f = 0; f < MF; ++f) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[f][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      inv[r] = lr > 0.0f ? 1.0f / lr : 0.0f;
      const int i = q0 + w0 + f * 16 + (lane >> 2) + r * 8;
      if ((lane & 3) == 0 && i < a.tq)
        static_cast<float*>(a.lse)[int64_t(pair) * a.tq + i] =
            lr > 0.0f ? (m[f][r] * c + log2f(lr)) * kLn2 : -INFINITY;
    }
    store_rows<D, HD>(o[f], a.o.row<D>(b, h, q0), a.o.s2, w0 + f * 16, a.tq - q0, a.hd, inv[0], inv[1], lane);
  }
}

// ---- backward: dK, dV over key tiles ----

template <class D, int HD, class S>
__global__ void __launch_bounds__(S::W * 32, S::MINB) flash_backward_kv_kernel(AttnArgs a) {
  constexpr int LD = HD + 8, KS = HD / 16, DT = HD / 8, MF = S::MF, BN = S::BN, BQ = S::BQ, NT = BQ / 8;
  constexpr int kThreads = S::W * 32;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sk = smem, *sv = sk + BN * LD, *sq_buf = sv + BN * LD, *sg_buf = sq_buf + 2 * BQ * LD;
  float* slse_buf = reinterpret_cast<float*>(sg_buf + 2 * BQ * LD);
  float* sdel_buf = slse_buf + 2 * BQ;
  const int kt = blockIdx.y;  // causal: low key tiles see the most queries and go first (Note [tile order])
  const int pair = blockIdx.x, b = pair / a.nh, h = pair % a.nh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = kt * BN, w0 = warp * 16 * MF;
  const float c = float(a.scale) * kLog2e;
  const float* lse = static_cast<const float*>(a.lse) + int64_t(pair) * a.tq;
  const float* del = static_cast<const float*>(a.delta) + int64_t(pair) * a.tq;

  stage_kv<HD, BN, kThreads>(a, b, h, kt, sk, sv);
  cp_async_commit();  // complete when the first step runs
  RowFragments<HD, MF, S::KVREG> kf, vf;
  float dk[MF][DT][4], dv[MF][DT][4];
  zero(dk);
  zero(dv);
  const int qt_begin = a.causal ? k0 / BQ : 0, qt_end = (a.tq + BQ - 1) / BQ;
  auto stage = [&](int qt, int buf) {
    const int q0 = qt * BQ;
    load_tile<HD, BQ, kThreads>(sq_buf + buf * BQ * LD, a.q.row<uint16_t>(b, h, q0), a.q.s2, min(BQ, a.tq - q0), a.hd);
    load_tile<HD, BQ, kThreads>(sg_buf + buf * BQ * LD, a.dout.row<uint16_t>(b, h, q0), a.dout.s2, min(BQ, a.tq - q0),
                                a.hd);
    // Copied like the tiles: a plain load and store would stall the step's start until the load
    // came back. Padding rows get lse = delta = 0, so P = 2^0 = 1 there, but their Q and dO rows
    // are zeros: Pᵀ dO, dPᵀ and so dSᵀ Q get nothing from them.
    for (int t = threadIdx.x; t < BQ; t += kThreads) {
      const bool in = q0 + t < a.tq;
      cp_async4(slse_buf + buf * BQ + t, lse + (in ? q0 + t : 0), in);
      cp_async4(sdel_buf + buf * BQ + t, del + (in ? q0 + t : 0), in);
    }
  };
  pipelined_steps(qt_begin, qt_end, stage, [&](int qt, int buf) {
    if (qt == qt_begin) {  // K and V are in shared memory from here on
      kf.init(sk, w0, lane);
      vf.init(sv, w0, lane);
    }
    const int q0 = qt * BQ;
    if (a.causal && q0 + BQ - 1 < k0 + w0) return;  // every query before every key of the warp
    const uint16_t* sq = sq_buf + buf * BQ * LD;
    const uint16_t* sg = sg_buf + buf * BQ * LD;
    const float* slse = slse_buf + buf * BQ;
    const float* sdel = sdel_buf + buf * BQ;

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for the warp's 16 MF keys x BQ queries, side by side (two
    // independent chains of mma), then Pᵀ.
    float p[MF][NT][4], ds[MF][NT][4];
    zero(p);
    zero(ds);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      add_rows_times_tile_t<D, HD, BQ, MF>(p, kf.get(kk, lane), sq, kk, lane);
      add_rows_times_tile_t<D, HD, BQ, MF>(ds, vf.get(kk, lane), sg, kk, lane);
    }
    const bool diag = a.causal && k0 + w0 + 16 * MF - 1 > q0;
#pragma unroll
    for (int f = 0; f < MF; ++f) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int iq = nt * 8 + (lane & 3) * 2 + (e & 1);
          float x = fast_exp2(fmaf(p[f][nt][e], c, -slse[iq] * kLog2e));
          if (diag && iq + q0 < k0 + w0 + f * 16 + (lane >> 2) + (e >> 1) * 8) x = 0.0f;
          p[f][nt][e] = x;
        }
      }
    }
    add_scores_times_tile<D, HD, BQ, MF>(dv, p, sg, lane);  // dV += Pᵀ dO
    // dSᵀ = Pᵀ ∘ (dPᵀ - delta)
#pragma unroll
    for (int f = 0; f < MF; ++f) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          ds[f][nt][e] = p[f][nt][e] * (ds[f][nt][e] - sdel[nt * 8 + (lane & 3) * 2 + (e & 1)]);
      }
    }
    add_scores_times_tile<D, HD, BQ, MF>(dk, ds, sq, lane);  // dK += dSᵀ Q (scaled at the end)
  });
  const float scale = float(a.scale);
#pragma unroll
  for (int f = 0; f < MF; ++f) {
    store_rows<D, HD>(dk[f], a.dk.row<D>(b, h, k0), a.dk.s2, w0 + f * 16, a.tk - k0, a.hd, scale, scale, lane);
    store_rows<D, HD>(dv[f], a.dv.row<D>(b, h, k0), a.dv.s2, w0 + f * 16, a.tk - k0, a.hd, 1.0f, 1.0f, lane);
  }
}

// ---- backward: dQ over query tiles ----

template <class D, int HD, class S>
__global__ void __launch_bounds__(S::W * 32, S::MINB) flash_backward_q_kernel(AttnArgs a) {
  constexpr int LD = HD + 8, KS = HD / 16, DT = HD / 8, MF = S::MF, BM = S::BM, BN = S::BN, NT = BN / 8;
  constexpr int kThreads = S::W * 32;
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t *sq = smem, *sg = sq + BM * LD, *sk_buf = sg + BM * LD, *sv_buf = sk_buf + 2 * BN * LD;
  const int qt = int(gridDim.y) - 1 - int(blockIdx.y);
  const int pair = blockIdx.x, b = pair / a.nh, h = pair % a.nh;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * BM, w0 = warp * 16 * MF;
  const float c = float(a.scale) * kLog2e;

  load_tile<HD, BM, kThreads>(sq, a.q.row<uint16_t>(b, h, q0), a.q.s2, min(BM, a.tq - q0), a.hd);
  load_tile<HD, BM, kThreads>(sg, a.dout.row<uint16_t>(b, h, q0), a.dout.s2, min(BM, a.tq - q0), a.hd);
  float lse2[MF][2], del[MF][2];
#pragma unroll
  for (int f = 0; f < MF; ++f) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = q0 + w0 + f * 16 + (lane >> 2) + r * 8;
      const int64_t at = int64_t(pair) * a.tq + i;
      lse2[f][r] = i < a.tq ? static_cast<const float*>(a.lse)[at] * kLog2e : INFINITY;
      del[f][r] = i < a.tq ? static_cast<const float*>(a.delta)[at] : 0.0f;
    }
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  RowFragments<HD, MF, S::QREG> qf, gf;
  qf.init(sq, w0, lane);
  gf.init(sg, w0, lane);
  float dq[MF][DT][4];
  zero(dq);
  const int kt_end = key_tiles_until<BM, BN>(a, q0);
  auto stage = [&](int kt, int buf) { stage_kv<HD, BN, kThreads>(a, b, h, kt, sk_buf + buf * BN * LD, sv_buf + buf * BN * LD); };
  pipelined_steps(0, kt_end, stage, [&](int kt, int buf) {
    const int k0 = kt * BN;
    if (a.causal && k0 > q0 + w0 + 16 * MF - 1) return;  // every key after every row of the warp
    const uint16_t* sk = sk_buf + buf * BN * LD;
    const uint16_t* sv = sv_buf + buf * BN * LD;

    float p[MF][NT][4], ds[MF][NT][4];
    zero(p);
    zero(ds);
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      add_rows_times_tile_t<D, HD, BN, MF>(p, qf.get(kk, lane), sk, kk, lane);   // S = Q Kᵀ
      add_rows_times_tile_t<D, HD, BN, MF>(ds, gf.get(kk, lane), sv, kk, lane);  // dP = dO Vᵀ
    }
    const bool masked = k0 + BN > a.tk || (a.causal && k0 + BN - 1 > q0 + w0);
#pragma unroll
    for (int f = 0; f < MF; ++f) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          float x = fast_exp2(fmaf(p[f][nt][e], c, -lse2[f][r]));
          if (masked) {
            const int j = k0 + nt * 8 + (lane & 3) * 2 + (e & 1);
            const int i = q0 + w0 + f * 16 + (lane >> 2) + r * 8;
            if (j >= a.tk || (a.causal && j > i)) x = 0.0f;
          }
          ds[f][nt][e] = x * (ds[f][nt][e] - del[f][r]);
        }
      }
    }
    add_scores_times_tile<D, HD, BN, MF>(dq, ds, sk, lane);  // dQ += dS K (scaled at the end)
  });
  const float scale = float(a.scale);
#pragma unroll
  for (int f = 0; f < MF; ++f)
    store_rows<D, HD>(dq[f], a.dq.row<D>(b, h, q0), a.dq.s2, w0 + f * 16, a.tq - q0, a.hd, scale, scale, lane);
}

// Launches `kernel` with `threads` threads and `bytes` of dynamic shared memory (above the 48 KiB
// default for the larger tiles).
template <class Kernel>
void launch_with_smem(Kernel kernel, dim3 grid, int threads, size_t bytes, cudaStream_t stream, const AttnArgs& a) {
  if (bytes > 48 * 1024) {
    cuda::RelaxedCaptureScope relaxed;  // an attribute of the kernel, not work on the stream
    TRIREME_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    // All of L1 as shared memory, so that as many blocks fit as registers allow (the tiles come in
    // by cp.async.cg, which does not go through L1).
    TRIREME_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared)));
  }
  kernel<<<grid, threads, bytes, stream>>>(a);
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <int HD>
constexpr size_t tile_bytes(int rows) {
  return size_t(rows) * (HD + 8) * sizeof(uint16_t);
}

template <class D, int HD, class S>
void launch_forward(const AttnArgs& a, int pairs, cudaStream_t stream) {
  const dim3 grid(unsigned(pairs), unsigned((a.tq + S::BM - 1) / S::BM));
  // Q, 2 x (K, V)
  launch_with_smem(flash_forward_kernel<D, HD, S>, grid, S::W * 32,
                   tile_bytes<HD>(S::BM) + 4 * tile_bytes<HD>(S::BN), stream, a);
}
template <class D, int HD, class S>
void launch_backward_kv(const AttnArgs& a, int pairs, cudaStream_t stream) {
  const dim3 grid(unsigned(pairs), unsigned((a.tk + S::BN - 1) / S::BN));
  // K, V, 2 x (Q, dO, lse, delta)
  launch_with_smem(flash_backward_kv_kernel<D, HD, S>, grid, S::W * 32,
                   2 * tile_bytes<HD>(S::BN) + 4 * tile_bytes<HD>(S::BQ) + 4 * S::BQ * sizeof(float), stream, a);
}
template <class D, int HD, class S>
void launch_backward_q(const AttnArgs& a, int pairs, cudaStream_t stream) {
  const dim3 grid(unsigned(pairs), unsigned((a.tq + S::BM - 1) / S::BM));
  // Q, dO, 2 x (K, V)
  launch_with_smem(flash_backward_q_kernel<D, HD, S>, grid, S::W * 32,
                   2 * tile_bytes<HD>(S::BM) + 4 * tile_bytes<HD>(S::BN), stream, a);
}

// Note [tile order]
// Under a causal mask a tile's work grows with how many keys its queries see: the last query
// tiles (and, in the key-side backward, the first key tiles) are the heaviest, up to T/tile
// times the lightest. The grid is (batch x head pairs, tiles) with the pairs varying fastest, and
// the CTA scheduler hands out blocks in that order, so every pair's heaviest tile starts in the
// first waves and the last wave holds only light tiles: the kernel ends with a short tail. (With
// the tiles varying fastest, each pair's tiles ran heavy to light one pair after another, so the
// last pairs' heavy tiles started in the last waves.)
// Block shapes per head dim, each the fastest measured on an H200 (CUPTI kernel times of
// bench/attention_step, bf16, causal; docs/PERFORMANCE.md has the figures and what lost).
//   forward: 4 warps x 32 query rows at every head dim (16 rows a warp: hd 64 150 -> 134 us,
//     hd 128 348 -> 262 us); Q's fragments stay in registers up to hd 64, at 128 they do not fit
//     beside a 32 x 128 accumulator and are read again from shared memory.
//   dK, dV at hd 64: 4 warps x 32 keys, query tiles of 32 (236 -> 225 us against 16 keys a warp
//     with K, V in registers); at hd 128 32 keys a warp do not fit: 16 keys, query tiles of 64.
//   dQ at hd 64: 16 rows a warp, Q and dO read from shared memory, held to 128 registers so that
//     4 blocks (16 warps) share an SM (205 -> 193 us against the compiler's 134 registers, 3
//     blocks); at hd 128 Q and dO stay in registers (425 us; 500 with them in shared memory).
//   hd 32 keeps the 16-rows-a-warp backward (not measured).
template <int HD>
struct Shapes;
template <>
struct Shapes<32> {
  using Fwd = FwdShape<2, 4, true>;
  using Kv = KvShape<1, 4, 64, true>;
  using Q = QShape<1, 4, 64, false>;
};
template <>
struct Shapes<64> {
  using Fwd = FwdShape<2, 4, true>;
  using Kv = KvShape<2, 4, 32, false>;
  using Q = QShape<1, 4, 64, false, 4>;
};
template <>
struct Shapes<128> {
  using Fwd = FwdShape<2, 4, false>;
  using Kv = KvShape<1, 4, 64, false>;
  using Q = QShape<1, 4, 64, true>;
};

template <class D, int HD>
void launch_flash(const AttnArgs& a, int nb, cudaStream_t stream, bool backward) {
  const int pairs = nb * a.nh;
  if (!backward) {
    launch_forward<D, HD, typename Shapes<HD>::Fwd>(a, pairs, stream);
    return;
  }
  launch_backward_kv<D, HD, typename Shapes<HD>::Kv>(a, pairs, stream);
  launch_backward_q<D, HD, typename Shapes<HD>::Q>(a, pairs, stream);
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
