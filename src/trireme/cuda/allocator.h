// The CUDA caching allocator (installed for DeviceType::cuda when libtrireme loads): device memory kept in size-class free lists per device and stream,
// so steady-state training allocates nothing from the driver (cudaMalloc/cudaFree synchronize
// and cost microseconds to milliseconds each).
//
//   Tensor x = Tensor::empty({1024, 1024}, DType::f32, Device::cuda(0));   // cudaMalloc once
//   x = Tensor();                                                            // back to the cache
//   MemoryStats s = memory_stats(Device::cuda(0));   // allocated 0, reserved 4 MiB
//   cuda::empty_cache();                              // reserved 0
//
// Note [allocator streams]
// A freed block goes back to the free list of the stream that was current when it was
// allocated, and only an allocation on that same stream reuses it. Work on one stream runs in
// order, so the reuse can never overtake a kernel still reading the old tensor. A tensor used on
// a second stream must stay alive (be referenced) until that stream's work on it is done.
#pragma once

#include <cstddef>

#include "trireme/core/allocator.h"

namespace trireme::cuda {

Allocator& caching_allocator();  // the one installed for DeviceType::cuda

// Returns the cached (free) blocks of a device to the driver (-1: every device). Waits for the
// device first, as cudaFree does.
void empty_cache(int device = -1);

// The bytes a request of `nbytes` occupies: 512-byte steps up to 1 MiB, then four steps per
// power of two (at most 25% over, and few enough classes that blocks get reused).
size_t allocation_size_class(size_t nbytes);

// Note [graph pools]
// A CUDA graph keeps the addresses of the temporaries its kernels allocated while it was
// captured (reduction partials, sort scratch) and uses them at every launch, so they must not be
// handed to anyone else while the graph lives. While a PrivatePoolScope is alive, this thread's
// allocations on the pool's device come from that pool (new blocks from the driver), and the
// pool's blocks go back to it when freed, for the pool's own later allocations only. Destroying
// the pool (after the graphs that use it) gives its free blocks back to the driver; a block still
// in use then joins the ordinary free lists when it is freed.
//
//   cuda::PrivatePool pool(0);
//   { cuda::PrivatePoolScope in(pool); /* capture */ }
class PrivatePool {
 public:
  explicit PrivatePool(int device);
  ~PrivatePool();
  PrivatePool(const PrivatePool&) = delete;
  PrivatePool& operator=(const PrivatePool&) = delete;
  int device() const { return device_; }
  int id() const { return id_; }
  size_t reserved_bytes() const;  // what the pool took from the driver

 private:
  int device_;
  int id_;
};

class PrivatePoolScope {
 public:
  explicit PrivatePoolScope(const PrivatePool& pool);
  ~PrivatePoolScope();
  PrivatePoolScope(const PrivatePoolScope&) = delete;
  PrivatePoolScope& operator=(const PrivatePoolScope&) = delete;

 private:
  int previous_pool_, previous_device_;
};

}  // namespace trireme::cuda
