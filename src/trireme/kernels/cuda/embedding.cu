// CUDA embedding: row gather from a (V, D) table, and its deterministic scatter-add backward, the
// twins of kernels/cpu/embedding.cpp. The ids never leave the device: an id out of range is
// reported through cuda/device_error.h (its output row is zero, its gradient dropped) and thrown
// at the next synchronisation, so the host runs ahead of the GPU. The backward sorts token
// positions by id with CUB's stable radix sort; each run of equal ids is then summed by one block
// per column block in token order: the same order as the CPU kernel, and the same bits on every run.
#include <cub/device/device_radix_sort.cuh>

#include "trireme/cuda/device_error.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/embedding.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D, class I>
__global__ void embedding_kernel(const D* w, int64_t sv, int64_t sd, const I* ids, int64_t n, int64_t dim,
                                 int64_t vocab, cuda::DeviceErrorSlot* err, D* out) {
  const int64_t total = n * dim, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t i = e / dim, j = e % dim;
    const int64_t id = int64_t(ids[i]);
    if (id < 0 || id >= vocab) {
      if (j == 0) cuda::report_index_error(err, cuda::IndexErrorSite::embedding_id, id, i, vocab);
      out[e] = from_acc<D>(dacc_t<D>(0));
      continue;
    }
    out[e] = w[id * sv + j * sd];
  }
}

// keys[i] = ids[i] as i64 (out-of-range ids become `vocab`, sorted last and skipped),
// positions[i] = i.
template <class I>
__global__ void sort_input_kernel(const I* ids, int64_t n, int64_t vocab, int64_t* keys, int64_t* positions) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t id = int64_t(ids[i]);
  keys[i] = (id < 0 || id >= vocab) ? vocab : id;
  positions[i] = i;
}

// Block (b, c) starts a run when sorted key b differs from key b - 1; it adds the gradient rows
// of the run's positions (ascending: the sort is stable) into gw[key] for column block c, one
// column per thread. A frequent id makes a long run (the out-of-shard ids of a vocabulary-parallel
// embedding all map to row 0: half the batch): the block finds the run's end with all its threads
// and keeps 8 rows' loads in flight, adding them in order, so the sum is the CPU's, bit for bit.
template <class D>
__global__ void embedding_backward_kernel(const D* g, const int64_t* keys, const int64_t* positions, int64_t n,
                                          int64_t vocab, int64_t dim, D* gw) {
  using A = dacc_t<D>;
  const int64_t b = blockIdx.x;
  const int64_t row = keys[b];
  if (row >= vocab || (b > 0 && keys[b - 1] == row)) return;  // uniform over the block
  __shared__ unsigned long long run_end;
  if (threadIdx.x == 0) run_end = static_cast<unsigned long long>(n);
  __syncthreads();
  for (int64_t base = b + 1; base < n; base += blockDim.x) {
    const int64_t p = base + threadIdx.x;
    if (p < n && keys[p] != row) atomicMin(&run_end, static_cast<unsigned long long>(p));
    __syncthreads();
    const bool found = run_end != static_cast<unsigned long long>(n);
    __syncthreads();  // every thread has read run_end before the next round may lower it
    if (found) break;
  }
  const int64_t end = static_cast<int64_t>(run_end);
  const int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  constexpr int kInFlight = 8;
  A acc = to_acc(gw[row * dim + j]);
  int64_t p = b;
  for (; p + kInFlight <= end; p += kInFlight) {
    A v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = to_acc(g[positions[p + u] * dim + j]);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) acc += v[u];
  }
  for (; p < end; ++p) acc += to_acc(g[positions[p] * dim + j]);
  gw[row * dim + j] = from_acc<D>(acc);
}

template <class T>
void embedding_cuda(const Tensor& weight, const Tensor& ids, Tensor& out) {
  using D = device_t<T>;
  const int64_t n = ids.numel(), vocab = weight.size(0), dim = weight.size(1);
  if (n == 0 || dim == 0) return;
  LaunchContext ctx(out);
  cuda::DeviceErrorSlot* err = cuda::device_error_slot(out.device().index);
  const int64_t sv = weight.stride(0), sd = weight.stride(1);
  with_index_ptr(ids, [&]<class I>(const I* ip) {
    embedding_kernel<D, I><<<grid_for(n * dim), kBlock, 0, ctx.stream>>>(dptr<T>(weight), sv, sd, ip, n, dim, vocab,
                                                                          err, dptr<T>(out));
  });
  TRIREME_CUDA_CHECK_LAUNCH();
}

// Bits the radix sort needs for keys in [0, vocab].
int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) <= vocab) ++bits;
  return bits;
}

template <class T>
void embedding_backward_cuda(const Tensor& grad, const Tensor& ids, Tensor& grad_weight) {
  using D = device_t<T>;
  const int64_t n = ids.numel(), vocab = grad_weight.size(0), dim = grad_weight.size(1);
  if (n == 0 || dim == 0) return;
  TRIREME_CHECK(n < (int64_t(1) << 31), "embedding backward (CUDA): ", n, " ids is more than one sort handles");
  LaunchContext ctx(grad_weight);
  const Device dev = grad_weight.device();
  // [keys in | keys out | positions in | positions out], then CUB's scratch.
  Tensor buf = Tensor::empty({4 * n}, DType::i64, dev);
  int64_t* keys_in = buf.data<int64_t>();
  int64_t* keys_out = keys_in + n;
  int64_t* pos_in = keys_out + n;
  int64_t* pos_out = pos_in + n;
  with_index_ptr(ids, [&]<class I>(const I* ip) {
    sort_input_kernel<I><<<unsigned((n + 255) / 256), 256, 0, ctx.stream>>>(ip, n, vocab, keys_in, pos_in);
  });
  TRIREME_CUDA_CHECK_LAUNCH();
  size_t scratch_bytes = 0;
  TRIREME_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, scratch_bytes, keys_in, keys_out, pos_in, pos_out, int(n),
                                                     0, key_bits(vocab), ctx.stream));
  Tensor scratch = Tensor::empty({int64_t((scratch_bytes + 7) / 8)}, DType::i64, dev);
  TRIREME_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch.data_ptr(), scratch_bytes, keys_in, keys_out, pos_in,
                                                     pos_out, int(n), 0, key_bits(vocab), ctx.stream));
  const int threads = dim >= 256 ? 256 : 128;
  const dim3 grid(unsigned(n), unsigned((dim + threads - 1) / threads));
  embedding_backward_kernel<D><<<grid, threads, 0, ctx.stream>>>(dptr<T>(grad), keys_out, pos_out, n, vocab, dim,
                                                                 dptr<T>(grad_weight));
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_embedding) {
  registry.add_each<EmbeddingKernel, double, float, bf16_t, f16_t>("embedding", DeviceType::cuda,
                                                                   []<class T>() { return &embedding_cuda<T>; });
  registry.add_each<EmbeddingBackwardKernel, double, float, bf16_t, f16_t>(
      "embedding_backward", DeviceType::cuda, []<class T>() { return &embedding_backward_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
