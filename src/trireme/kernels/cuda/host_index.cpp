// Index tensors read back to the host, validated and grouped by value (see host_index.h).
#include "trireme/kernels/cuda/host_index.h"

#include <cstring>

#include "trireme/cuda/device_copy.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {

Tensor contiguous_on_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.sizes(), t.dtype(), t.device());
  find_kernel<CopyKernel>("copy", t.device(), t.dtype())(t, c);
  return c;
}

Tensor upload(const void* data, int64_t n, DType dtype, Device device) {
  Tensor out = Tensor::empty({n}, dtype, device);
  if (n == 0) return out;
  if (device.is_cpu()) {
    std::memcpy(out.data_ptr(), data, size_t(n) * dtype_size(dtype));
  } else {
    const Tensor host = Tensor::borrowed(const_cast<void*>(data), {n}, dtype, Device::cpu());
    cuda::device_copy(host, out, /*non_blocking=*/false);
  }
  return out;
}

std::vector<int64_t> read_indices_to_host(const char* op, const Tensor& index) {
  TRIREME_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, op, ": indices must be i64 or i32, got ",
                index.dtype());
  Tensor host = contiguous_on_device(index);
  if (!host.device().is_cpu()) {
    Tensor on_device = host;
    host = Tensor::empty(on_device.sizes(), on_device.dtype(), Device::cpu());
    cuda::device_copy(on_device, host, /*non_blocking=*/false);
  }
  std::vector<int64_t> out(size_t(host.numel()));
  if (host.dtype() == DType::i64) {
    const int64_t* p = host.data<int64_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  } else {
    const int32_t* p = host.data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
  return out;
}

void check_index_range(const char* op, const char* what, const std::vector<int64_t>& idx, int64_t size,
                       const std::string& range_text) {
  for (size_t i = 0; i < idx.size(); ++i) {
    TRIREME_CHECK(idx[i] >= 0 && idx[i] < size, op, ": ", what, " ", idx[i], " (at position ", i,
                  ") is out of range for ", range_text, " ", size);
  }
}

IndexGroups group_by_value(const std::vector<int64_t>& idx, int64_t size) {
  std::vector<int64_t> count(size_t(size) + 1, 0);
  for (int64_t v : idx) ++count[size_t(v) + 1];
  for (size_t v = 1; v < count.size(); ++v) count[v] += count[v - 1];  // count[v] = first slot of v
  IndexGroups g;
  g.positions.resize(idx.size());
  std::vector<int64_t> next(count.begin(), count.end() - 1);
  for (size_t i = 0; i < idx.size(); ++i) g.positions[size_t(next[size_t(idx[i])]++)] = int64_t(i);
  for (int64_t v = 0; v < size; ++v) {
    if (count[size_t(v) + 1] == count[size_t(v)]) continue;
    g.values.push_back(v);
    g.starts.push_back(count[size_t(v)]);
  }
  g.starts.push_back(int64_t(idx.size()));
  return g;
}

Tensor upload_groups(const IndexGroups& g, Device device) {
  std::vector<int64_t> packed;
  packed.reserve(g.values.size() + g.starts.size() + g.positions.size());
  packed.insert(packed.end(), g.values.begin(), g.values.end());
  packed.insert(packed.end(), g.starts.begin(), g.starts.end());
  packed.insert(packed.end(), g.positions.begin(), g.positions.end());
  return upload(packed, device);
}

}  // namespace trireme::cuda_kernels
