// Internal to the CUDA kernels: the text of the headers NVRTC compiles the fused elementwise
// kernels from (element_types.cuh, math.cuh, elementwise_ops.cuh), embedded in the library at
// build time (CMakeLists.txt writes their definition), each under the name it is included by.
#pragma once

#include <vector>

namespace trireme::cuda_kernels {

struct EmbeddedHeader {
  const char* include_name;  // e.g. "trireme/kernels/cuda/math.cuh"
  const char* text;
};
const std::vector<EmbeddedHeader>& fused_headers();

}  // namespace trireme::cuda_kernels
