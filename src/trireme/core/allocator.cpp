// The CPU allocator (64-byte aligned, with counters) and the per-device-type allocator table.
#include "trireme/core/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <new>

#include "trireme/core/error.h"

namespace trireme {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    // 64-byte alignment suits AVX-512 loads and cache lines; aligned_alloc needs a multiple.
    size_t rounded = (std::max<size_t>(nbytes, 1) + 63) & ~size_t(63);
    void* p = std::aligned_alloc(64, rounded);
    if (!p) {
      TRIREME_FAIL("out of CPU memory allocating ", nbytes, " bytes (", allocated_.load(),
                   " bytes already in use)");
    }
    int64_t now = allocated_.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    ++num_allocs_;
    return p;
  }
  void deallocate(void* ptr, size_t nbytes, Device) override {
    std::free(ptr);
    allocated_.fetch_sub(int64_t(nbytes));
  }
  MemoryStats stats(Device) const override {
    return {allocated_.load(), peak_.load(), num_allocs_.load()};
  }
  void reset_peak(Device) override { peak_.store(allocated_.load()); }

 private:
  std::atomic<int64_t> allocated_{0}, peak_{0}, num_allocs_{0};
};

std::array<Allocator*, kNumDeviceTypes>& allocator_table() {
  static CpuAllocator cpu;
  static std::array<Allocator*, kNumDeviceTypes> table{&cpu, nullptr};
  return table;
}

}  // namespace

Allocator& allocator_for(DeviceType type) {
  Allocator* a = allocator_table()[size_t(type)];
  TRIREME_CHECK(a != nullptr, "no allocator for device type ", device_type_name(type),
                " (was trireme built with CUDA, and is a GPU present?)");
  return *a;
}

void set_allocator(DeviceType type, Allocator* allocator) { allocator_table()[size_t(type)] = allocator; }

}  // namespace trireme
