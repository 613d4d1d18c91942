// Internal to the CUDA kernels: deterministic column sums of a tall matrix (bias gradients, the
// parameter gradients of the norms), in two passes without atomics.
//
// Pass 1 splits the rows into chunks (blockIdx.y); a 32 x 8 block owns 32 neighbouring columns
// (a warp reads 32 neighbours of one row: coalesced) and 8 row lanes, which it adds in lane order
// into partial[chunk, column]. Pass 2 adds the chunks of each column in chunk order. The chunking
// depends only on the shape, so results are the same run to run. One thread per column walking
// every row (the first version) left most of the GPU idle: 364 µs for a (16384, 768) bf16 bias
// gradient that a memory-bound pass reads in ~10 µs (bench/gpu/profile.sh).
#pragma once

#include "trireme/kernels/cuda/launch.cuh"

namespace trireme::cuda_kernels {

inline constexpr int kSumCols = 32, kSumLanes = 8;

// Thread (x, 0) gets the sum of column x's lane partials, added in lane order (deterministic).
template <class A>
__device__ __forceinline__ A lanes_total(A (&lanes)[kSumLanes][kSumCols + 1], A acc) {
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  A total = A(0);
  if (threadIdx.y == 0) {
#pragma unroll
    for (int l = 0; l < kSumLanes; ++l) total += lanes[l][threadIdx.x];
  }
  return total;
}

// Column c of chunk k: Σ over rows r of the chunk of load(r, c), in the accumulation type A.
template <class A, class Load>
__global__ void column_partial_kernel(int64_t rows, int64_t cols, int64_t rows_per_chunk, Load load, A* partial) {
  __shared__ A lanes[kSumLanes][kSumCols + 1];
  const int64_t c = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(rows, r0 + rows_per_chunk);
  A acc = A(0);
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kSumLanes) acc += load(r, c);
  const A total = lanes_total(lanes, acc);
  if (threadIdx.y == 0 && c < cols) partial[int64_t(blockIdx.y) * cols + c] = total;
}

// out[c * out_stride] = Σ_k partial[k, c], chunks added in order (lanes, then lane order).
template <class A, class Store>
__global__ void column_finish_kernel(const A* partial, int64_t chunks, int64_t cols, Store store) {
  __shared__ A lanes[kSumLanes][kSumCols + 1];
  const int64_t c = int64_t(blockIdx.x) * kSumCols + threadIdx.x;
  A acc = A(0);
  if (c < cols)
    for (int64_t k = threadIdx.y; k < chunks; k += kSumLanes) acc += partial[k * cols + c];
  const A total = lanes_total(lanes, acc);
  if (threadIdx.y == 0 && c < cols) store(c, total);
}

// How many row chunks: enough blocks for ~4 per SM, each chunk at least 64 rows.
inline int64_t column_sum_chunks(int64_t rows, int64_t cols) {
  const int64_t col_tiles = (cols + kSumCols - 1) / kSumCols;
  const int64_t want = std::max<int64_t>(1, (132 * 4) / std::max<int64_t>(col_tiles, 1));
  return std::max<int64_t>(1, std::min<int64_t>({want, (rows + 63) / 64, 65535}));
}

// Runs pass 1 into `partial` (chunks x cols of A, from the caller's scratch tensor).
template <class A, class Load>
void launch_column_partial(cudaStream_t stream, int64_t rows, int64_t cols, int64_t chunks, Load load, A* partial) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  const dim3 grid(unsigned((cols + kSumCols - 1) / kSumCols), unsigned(chunks));
  column_partial_kernel<A><<<grid, dim3(kSumCols, kSumLanes), 0, stream>>>(rows, cols, rows_per_chunk, load, partial);
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class A, class Store>
void launch_column_finish(cudaStream_t stream, const A* partial, int64_t chunks, int64_t cols, Store store) {
  const unsigned grid = unsigned((cols + kSumCols - 1) / kSumCols);
  column_finish_kernel<A><<<grid, dim3(kSumCols, kSumLanes), 0, stream>>>(partial, chunks, cols, store);
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace trireme::cuda_kernels
