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
  // Memory someone else allocated and frees: this storage never frees it, and the owner must keep
  // it alive (and unchanged) for as long as any tensor on it is used (Tensor::borrowed).
  struct Borrowed {};
  Storage(Borrowed, void* data, size_t nbytes, Device device) : data_(data), nbytes_(nbytes), device_(device), owned_(false) {}
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
  bool owned_ = true;
  uint64_t version_ = 0;
};

using StoragePtr = std::shared_ptr<Storage>;

}  // namespace trireme
