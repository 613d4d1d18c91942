// Internal to the CUDA kernels: the multi-tensor launches (optim.cu's scale_many, reduce.cu's
// sum_squares_many) give each tensor of a table a run of the launch's blocks; a block finds its
// tensor by binary search over the runs' first blocks.
#pragma once

#include <cstdint>

namespace trireme::cuda_kernels {

// The last k < count with first[k] <= block: the tensor whose run holds `block`, for `first`
// ascending (a tensor without blocks, whose run is empty, is never the answer).
__device__ __forceinline__ int tensor_of_block(const int64_t* first, int count, int64_t block) {
  int k = 0;
  for (int lo = 0, hi = count - 1; lo <= hi;) {
    const int mid = (lo + hi) / 2;
    if (first[mid] <= block) {
      k = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return k;
}

}  // namespace trireme::cuda_kernels
