// The CUDA caching allocator (see allocator.h and Note [allocator streams]).
#include "trireme/cuda/allocator.h"

#include <bit>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/graph_capture.h"
#include "trireme/cuda/stream.h"

namespace trireme::cuda {

size_t allocation_size_class(size_t nbytes) {
  constexpr size_t kSmall = size_t(1) << 20, kStep = 512;
  if (nbytes <= kSmall) return std::max<size_t>(kStep, (nbytes + kStep - 1) / kStep * kStep);
  const size_t step = std::bit_floor(nbytes) / 4;
  return (nbytes + step - 1) / step * step;
}

namespace {

// The private pool this thread allocates from (0: none) and its device (Note [graph pools]).
struct RoutedPool {
  int id = 0;
  int device = -1;
};
RoutedPool& routed_pool() {
  thread_local RoutedPool p;
  return p;
}

class CachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    const int d = device.index;
    TRIREME_CHECK(is_available(), "cannot allocate on ", device, ": no usable GPU (", unavailable_reason(), ")");
    TRIREME_CHECK(d >= 0 && d < device_count(), "cannot allocate on ", device, ": no such device (",
                  device_count(), " usable CUDA devices)");
    const size_t size = allocation_size_class(nbytes);
    CUstream_st* stream = current_stream(d).handle();
    const int pool = routed_pool().device == d ? routed_pool().id : 0;
    std::lock_guard lock(mu_);
    DeviceState& st = state(d);
    void* p = nullptr;
    std::vector<void*>& blocks = pool != 0 ? pools_[pool].free[size] : st.free[{stream, size}];
    if (!blocks.empty()) {
      p = blocks.back();
      blocks.pop_back();
    } else {
      p = malloc_from_driver(d, size, nbytes, st);
      if (pool != 0) pools_[pool].reserved += size;
    }
    live_[p] = Block{size, stream, pool};
    st.allocated += int64_t(nbytes);
    st.peak = std::max(st.peak, st.allocated);
    ++st.num_allocs;
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, Device device) override {
    std::lock_guard lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;  // not ours: never happens unless memory is corrupt
    DeviceState& st = state(device.index);
    const Block& b = it->second;
    auto pool = b.pool != 0 ? pools_.find(b.pool) : pools_.end();
    if (pool != pools_.end()) {
      pool->second.free[b.size].push_back(ptr);
    } else {
      st.free[{b.stream, b.size}].push_back(ptr);
    }
    st.allocated -= int64_t(nbytes);
    live_.erase(it);
  }

  MemoryStats stats(Device device) const override {
    std::lock_guard lock(mu_);
    if (size_t(device.index) >= devices_.size()) return {};
    const DeviceState& st = devices_[size_t(device.index)];
    return {st.allocated, st.peak, st.num_allocs, st.reserved};
  }

  void reset_peak(Device device) override {
    std::lock_guard lock(mu_);
    DeviceState& st = state(device.index);
    st.peak = st.allocated;
  }

  int create_pool() {
    std::lock_guard lock(mu_);
    const int id = ++last_pool_;
    pools_[id];
    return id;
  }

  size_t pool_reserved(int id) const {
    std::lock_guard lock(mu_);
    auto it = pools_.find(id);
    return it == pools_.end() ? 0 : it->second.reserved;
  }

  // The caller has waited for the graphs that used the pool's blocks (cudaFree would anyway).
  void release_pool(int id, int device) {
    std::lock_guard lock(mu_);
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    DeviceGuard g(device);
    DeviceState& st = state(device);
    for (auto& [size, blocks] : it->second.free) {
      for (void* p : blocks) {
        cudaFree(p);
        st.reserved -= int64_t(size);
      }
    }
    pools_.erase(it);
  }

  void empty_cache(int device) {
    std::lock_guard lock(mu_);
    for (size_t d = 0; d < devices_.size(); ++d) {
      if (device < 0 || size_t(device) == d) release_cached(int(d), devices_[d]);
    }
  }

 private:
  struct Block {
    size_t size;
    CUstream_st* stream;
    int pool;  // its private pool (0: none)
  };
  struct DeviceState {
    std::map<std::pair<CUstream_st*, size_t>, std::vector<void*>> free;  // (stream, size class) -> blocks
    int64_t allocated = 0, peak = 0, reserved = 0, num_allocs = 0;
  };

  DeviceState& state(int d) {
    if (size_t(d) >= devices_.size()) devices_.resize(size_t(d) + 1);
    return devices_[size_t(d)];
  }

  void* malloc_from_driver(int d, size_t size, size_t nbytes, DeviceState& st) {
    DeviceGuard g(d);
    // During a capture the block becomes part of the graph's memory (Note [graph pools]).
    RelaxedCaptureScope relaxed;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      // Cached blocks of other sizes or streams may be what is missing: give them back, retry.
      cudaGetLastError();
      release_cached(d, st);
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      auto gib = [](double b) { return str_cat(int64_t(b / double(1 << 30) * 100 + 0.5) / 100.0, " GiB"); };
      // The cache was emptied before the retry, so the device's free memory is the largest block
      // there could be; fragmentation inside the driver can make the largest one smaller still.
      TRIREME_FAIL("out of CUDA memory on cuda:", d, " allocating ", gib(double(nbytes)), " (", cudaGetErrorString(err),
                   "): allocated in tensors ", gib(double(st.allocated)), ", reserved by trireme ", gib(double(st.reserved)),
                   " (cached free blocks given back and the allocation retried), free on the device ", gib(double(free_b)),
                   " of ", gib(double(total_b)), "; `trireme estimate` shows what the run needs, and memory.recompute, ",
                   "parallel.zero, a smaller train.batch_size or more parallel.micro_batches need less");
    }
    st.reserved += int64_t(size);
    return p;
  }

  void release_cached(int d, DeviceState& st) {
    DeviceGuard g(d);
    for (auto& [key, blocks] : st.free) {
      for (void* p : blocks) {
        cudaFree(p);
        st.reserved -= int64_t(key.second);
      }
    }
    st.free.clear();
  }

  mutable std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  std::vector<DeviceState> devices_;
  struct PoolState {
    std::map<size_t, std::vector<void*>> free;  // size class -> free blocks
    size_t reserved = 0;                         // taken from the driver
  };
  std::map<int, PoolState> pools_;
  int last_pool_ = 0;
};

CachingAllocator& instance() {
  // Never destroyed: tensors in static storage are freed after static destructors ran, and
  // cudaFree at exit would race the runtime's own teardown.
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

}  // namespace

Allocator& caching_allocator() { return instance(); }
void empty_cache(int device) { instance().empty_cache(device); }

PrivatePool::PrivatePool(int device) : device_(device), id_(instance().create_pool()) {}
PrivatePool::~PrivatePool() { instance().release_pool(id_, device_); }
size_t PrivatePool::reserved_bytes() const { return instance().pool_reserved(id_); }

PrivatePoolScope::PrivatePoolScope(const PrivatePool& pool)
    : previous_pool_(routed_pool().id), previous_device_(routed_pool().device) {
  routed_pool() = {pool.id(), pool.device()};
}
PrivatePoolScope::~PrivatePoolScope() { routed_pool() = {previous_pool_, previous_device_}; }

}  // namespace trireme::cuda
