// Storage: a block of bytes on one device, owned through its allocator. Tensors view into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "trireme/core/allocator.h"
#include "trireme/core/device.h"

namespace trireme {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Bumped by every in-place write through any tensor on this storage (Note [views and versions]).
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
};

using StoragePtr = std::shared_ptr<Storage>;

}  // namespace trireme
