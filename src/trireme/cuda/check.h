// Internal to the CUDA backend: turning CUDA runtime errors into trireme::Error.
#pragma once

#include <cuda_runtime.h>

#include "trireme/core/error.h"

// Throws trireme::Error naming the call, the error and where it happened.
//   TRIREME_CUDA_CHECK(cudaMemcpyAsync(...));
#define TRIREME_CUDA_CHECK(expr)                                                                  \
  do {                                                                                            \
    cudaError_t trireme_cuda_err_ = (expr);                                                       \
    if (trireme_cuda_err_ != cudaSuccess) [[unlikely]] {                                          \
      TRIREME_FAIL("CUDA error ", int(trireme_cuda_err_), " (", cudaGetErrorString(trireme_cuda_err_), \
                   ") in ", #expr, " at ", __FILE__, ":", __LINE__);                             \
    }                                                                                             \
  } while (0)

// After a kernel launch: configuration errors surface here, execution errors at the next sync.
#define TRIREME_CUDA_CHECK_LAUNCH() TRIREME_CUDA_CHECK(cudaGetLastError())
