// Allocators: raw device memory behind an interface, one per device type, with usage counters.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trireme/core/device.h"

namespace trireme {

struct MemoryStats {
  int64_t allocated_bytes = 0;  // live now
  int64_t peak_bytes = 0;       // high-water mark since the last reset
  int64_t num_allocs = 0;
  int64_t reserved_bytes = 0;   // held from the device, live or cached (caching allocators)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  virtual MemoryStats stats(Device device) const = 0;
  virtual void reset_peak(Device device) = 0;
};

// The allocator registered for a device type; the CPU one always exists.
Allocator& allocator_for(DeviceType type);
// Backends (e.g. CUDA) install theirs at start-up; the pointer must outlive the process.
void set_allocator(DeviceType type, Allocator* allocator);

inline MemoryStats memory_stats(Device d) { return allocator_for(d.type).stats(d); }
inline void reset_peak_memory(Device d) { allocator_for(d.type).reset_peak(d); }

}  // namespace trireme
