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
  Storage(Borrowed, void* data, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  bool owned() const { return owned_; }  // false for Borrowed memory

  // Note [released storage]
  // A storage may give its bytes back to the allocator and take new ones later while tensors
  // keep referring to it: ZeRO-3 (parallel/fully_sharded.h) holds a block's parameters only
  // between the all-gather before the block runs and the end of its use, and the tensors that
  // autograd saved on them must see the values gathered again for the backward. While released,
  // data() is null and Tensor::data_ptr() refuses to hand out a pointer.
  void release();
  void reacquire();  // allocates nbytes() again (uninitialised); a no-op unless released
  bool released() const { return data_ == nullptr && nbytes_ > 0; }
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
