// Internal to the CUDA kernels: integer index tensors read back to the host (to validate them
// before any data is touched, as the CPU kernels do) and grouped by value, which is what the
// deterministic scatter-add kernels (embedding, index_add) walk; and the host transfers they
// need, made with the copy kernel and the CUDA runtime (kernels sit below ops).
#pragma once

#include <string>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::cuda_kernels {

// t itself when contiguous, else a contiguous copy on t's device.
Tensor contiguous_on_device(const Tensor& t);

// n elements of `dtype` from host memory as a 1-D tensor on `device` (complete on return).
Tensor upload(const void* data, int64_t n, DType dtype, Device device);
template <class T>
Tensor upload(const std::vector<T>& data, Device device) {
  return upload(data.data(), int64_t(data.size()), dtype_v<T>, device);
}

// The values of a 1-D (or flattened contiguous) i64/i32 tensor on any device, as i64 on the host.
// Throws naming `op` when the dtype is not an index type. Synchronises with the device.
std::vector<int64_t> read_indices_to_host(const char* op, const Tensor& index);

// Throws "<op>: <what> <v> (at position <i>) is out of range for <range_text> <size>" on the
// first value outside [0, size).
void check_index_range(const char* op, const char* what, const std::vector<int64_t>& idx, int64_t size,
                       const std::string& range_text);

// Positions grouped by value, each group in position order (a stable counting sort):
// values[g] is the g-th distinct value, and positions[starts[g] .. starts[g+1]) where it occurs.
struct IndexGroups {
  std::vector<int64_t> values, starts, positions;
};
IndexGroups group_by_value(const std::vector<int64_t>& idx, int64_t size);

// The groups on `device` as one i64 tensor [values | starts | positions].
Tensor upload_groups(const IndexGroups& groups, Device device);

}  // namespace trireme::cuda_kernels
