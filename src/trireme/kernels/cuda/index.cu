// CUDA index_select (gather of slices along a dim) and index_add (its scatter-add), the twins of
// kernels/cpu/index.cpp. Indices are read back to the host to validate them before anything is
// written; index_add groups the source positions by destination there, so every destination
// element is summed by one thread in index order (deterministic, the CPU's order).
#include "trireme/kernels/cuda/host_index.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/index.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D>
__global__ void index_select_kernel(const D* x, const int64_t* idx, int64_t n, Split3 sp, D* out) {
  const int64_t total = sp.outer * n * sp.inner, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t c = e % sp.inner, i = (e / sp.inner) % n, o = e / (sp.inner * n);
    out[e] = x[(o * sp.size + idx[i]) * sp.inner + c];
  }
}

// Block (x: outer * groups, y: column tiles); groups = [values | starts | positions].
template <class D>
__global__ void index_add_kernel(const D* src, const int64_t* groups, int64_t num_groups, int64_t n, Split3 sp,
                                 D* out) {
  using A = dacc_t<D>;
  const int64_t grp = int64_t(blockIdx.x) % num_groups, o = int64_t(blockIdx.x) / num_groups;
  const int64_t* starts = groups + num_groups;
  const int64_t* positions = starts + num_groups + 1;
  const int64_t row = groups[grp], p0 = starts[grp], p1 = starts[grp + 1];
  D* dst = out + (o * sp.size + row) * sp.inner;
  const D* sbase = src + o * n * sp.inner;
  for (int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; c < sp.inner; c += int64_t(gridDim.y) * blockDim.x) {
    A acc = to_acc(dst[c]);
    for (int64_t p = p0; p < p1; ++p) acc += to_acc(sbase[positions[p] * sp.inner + c]);
    dst[c] = from_acc<D>(acc);
  }
}

template <class T>
void index_select_cuda(const Tensor& x_in, int64_t dim, const Tensor& index, Tensor& out) {
  using D = device_t<T>;
  const std::vector<int64_t> idx = read_indices_to_host("index_select", index);
  check_index_range("index_select", "index", idx, x_in.size(dim), "a dimension of size");
  if (out.numel() == 0) return;
  const Tensor x = contiguous_on_device(x_in);
  const Tensor dev_idx = upload(idx, x.device());
  const Split3 sp = split_at(x.sizes(), dim);
  LaunchContext ctx(out);
  index_select_kernel<D><<<grid_for(out.numel()), kBlock, 0, ctx.stream>>>(dptr<T>(x), dev_idx.data<int64_t>(),
                                                                           int64_t(idx.size()), sp, dptr<T>(out));
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void index_add_cuda(const Tensor& src_in, int64_t dim, const Tensor& index, Tensor& out) {
  using D = device_t<T>;
  const std::vector<int64_t> idx = read_indices_to_host("index_add", index);
  check_index_range("index_add", "index", idx, out.size(dim), "a dimension of size");
  const int64_t n = int64_t(idx.size());
  if (out.numel() == 0 || n == 0) return;
  TRIREME_CHECK(out.is_contiguous(), "index_add: the destination must be contiguous, got strides ", out.strides());
  const Tensor src = contiguous_on_device(src_in);
  const Split3 sp = split_at(out.sizes(), dim);
  const IndexGroups groups = group_by_value(idx, sp.size);
  const Tensor dev_groups = upload_groups(groups, out.device());
  const int64_t num_groups = int64_t(groups.values.size());
  LaunchContext ctx(out);
  const int threads = sp.inner >= 256 ? 256 : (sp.inner >= 64 ? 64 : 32);
  const int64_t blocks_x = sp.outer * num_groups;
  TRIREME_CHECK(blocks_x < (int64_t(1) << 31), "index_add (CUDA): ", blocks_x, " slices is too many for one launch");
  const dim3 grid(unsigned(blocks_x), unsigned(std::min<int64_t>((sp.inner + threads - 1) / threads, 65535)));
  index_add_kernel<D><<<grid, threads, 0, ctx.stream>>>(dptr<T>(src), dev_groups.data<int64_t>(), num_groups, n, sp,
                                                        dptr<T>(out));
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_index) {
  registry.add_each<IndexSelectKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "index_select", DeviceType::cuda, []<class T>() { return &index_select_cuda<T>; });
  registry.add_each<IndexAddKernel, double, float, bf16_t, f16_t>("index_add", DeviceType::cuda,
                                                                  []<class T>() { return &index_add_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
