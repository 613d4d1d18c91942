// Pinned (page-locked) host memory: CPU tensors the GPU can copy from and to by DMA, so that a
// non_blocking copy returns at once and runs on a stream while the host and the GPU go on.
//
//   Tensor host = cuda::pin_memory(batch);                              // a pinned CPU copy
//   Tensor dev = to_device(host, Device::cuda(0), /*non_blocking=*/true);  // queued, returns at once
//   y = matmul(dev, w);          // same stream: runs after the copy, no host wait
//
// Note [pinned copies]
// A non_blocking copy involving the host is asynchronous only when the host side is pinned
// (made here); from pageable memory it is done synchronously, as a blocking copy (the driver
// would stage it anyway, and the caller may free the memory at once). While an asynchronous
// copy is pending:
//   - the host must not write a pinned source or read a pinned destination: wait for the copy's
//     stream first (an Event, Stream::synchronize);
//   - freeing the pinned tensor is safe: its memory is released only after every copy queued on
//     it has finished (each copy records an event that the release waits for).
// Work on the device side is ordered by the stream as usual: a consumer on the copy's stream
// needs nothing; one on another stream waits on an Event recorded after the copy.
#pragma once

#include "trireme/core/tensor.h"
#include "trireme/cuda/stream.h"

namespace trireme::cuda {

#ifdef TRIREME_WITH_CUDA
// An uninitialised contiguous CPU tensor in pinned memory (needs a usable GPU).
Tensor empty_pinned(const Shape& sizes, DType dtype);
// A pinned contiguous copy of a CPU tensor (t itself when already pinned and contiguous).
Tensor pin_memory(const Tensor& t);
// True when t is a CPU tensor whose elements lie in memory made by empty_pinned.
bool is_pinned(const Tensor& t);

// For the copy hook (device_copy.cpp): when [ptr, ptr + bytes) lies in pinned memory, records an
// event on `stream` (after the copy just queued there) that the memory's release will wait for,
// and returns true; returns false (recording nothing) for pageable memory.
bool pinned_record_use(const void* ptr, size_t bytes, const Stream& stream);
#else
// Without CUDA there is nothing to pin for: CPU tensors are returned as they are.
inline Tensor empty_pinned(const Shape& sizes, DType dtype) { return Tensor::empty(sizes, dtype); }
inline Tensor pin_memory(const Tensor& t) { return t; }
inline bool is_pinned(const Tensor&) { return false; }
#endif

}  // namespace trireme::cuda
