// CUDA embedding: row gather from a (V, D) table, and its deterministic scatter-add backward, the
// twins of kernels/cpu/embedding.cpp. The ids are read back to the host to validate them before
// anything is written; the backward groups token positions by id there (a stable counting sort),
// so each (row, column) of the gradient is summed by one thread in token order: no atomics, the
// same order as the CPU kernel, and the same bits on every run.
#include "trireme/kernels/cuda/host_index.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/embedding.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D, class I>
__global__ void embedding_kernel(const D* w, int64_t sv, int64_t sd, const I* ids, int64_t n, int64_t dim, D* out) {
  const int64_t total = n * dim, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t i = e / dim, j = e % dim;
    out[e] = w[int64_t(ids[i]) * sv + j * sd];
  }
}

// Block g.x = distinct id, threads over columns; groups = [values | starts | positions].
template <class D>
__global__ void embedding_backward_kernel(const D* g, const int64_t* groups, int64_t num_groups, int64_t dim, D* gw) {
  using A = dacc_t<D>;
  const int64_t grp = blockIdx.x;
  const int64_t* values = groups;
  const int64_t* starts = groups + num_groups;
  const int64_t* positions = starts + num_groups + 1;
  const int64_t row = values[grp], p0 = starts[grp], p1 = starts[grp + 1];
  for (int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; j < dim; j += int64_t(gridDim.y) * blockDim.x) {
    A acc = to_acc(gw[row * dim + j]);
    for (int64_t p = p0; p < p1; ++p) acc += to_acc(g[positions[p] * dim + j]);
    gw[row * dim + j] = from_acc<D>(acc);
  }
}

template <class T>
void embedding_cuda(const Tensor& weight, const Tensor& ids, Tensor& out) {
  using D = device_t<T>;
  const int64_t n = ids.numel(), vocab = weight.size(0), dim = weight.size(1);
  const std::vector<int64_t> host_ids = read_indices_to_host("embedding", ids);
  check_index_range("embedding", "id", host_ids, vocab, "a vocabulary of size V =");
  if (n == 0 || dim == 0) return;
  LaunchContext ctx(out);
  const int64_t sv = weight.stride(0), sd = weight.stride(1);
  if (ids.dtype() == DType::i64) {
    embedding_kernel<D, int64_t><<<grid_for(n * dim), kBlock, 0, ctx.stream>>>(dptr<T>(weight), sv, sd,
                                                                               ids.data<int64_t>(), n, dim, dptr<T>(out));
  } else {
    embedding_kernel<D, int32_t><<<grid_for(n * dim), kBlock, 0, ctx.stream>>>(dptr<T>(weight), sv, sd,
                                                                               ids.data<int32_t>(), n, dim, dptr<T>(out));
  }
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void embedding_backward_cuda(const Tensor& grad, const Tensor& ids, Tensor& grad_weight) {
  using D = device_t<T>;
  const int64_t vocab = grad_weight.size(0), dim = grad_weight.size(1);
  const std::vector<int64_t> host_ids = read_indices_to_host("embedding", ids);
  check_index_range("embedding", "id", host_ids, vocab, "a vocabulary of size V =");
  if (host_ids.empty() || dim == 0) return;
  const IndexGroups groups = group_by_value(host_ids, vocab);
  const Tensor dev_groups = upload_groups(groups, grad_weight.device());
  const int64_t num_groups = int64_t(groups.values.size());
  LaunchContext ctx(grad_weight);
  const int threads = dim >= 256 ? 256 : 128;
  const dim3 grid(unsigned(num_groups), unsigned(std::min<int64_t>((dim + threads - 1) / threads, 65535)));
  embedding_backward_kernel<D><<<grid, threads, 0, ctx.stream>>>(dptr<T>(grad), dev_groups.data<int64_t>(), num_groups,
                                                                 dim, dptr<T>(grad_weight));
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
