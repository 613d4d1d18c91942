// Storage: allocation and release through the device's allocator.
#include "trireme/core/storage.h"

#include "trireme/core/error.h"
#include "trireme/core/trace_hook.h"

namespace trireme {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type).allocate(nbytes, device);
  if (StorageObserver* o = storage_observer()) o->on_alloc(*this);
}

Storage::Storage(Borrowed, void* data, size_t nbytes, Device device)
    : data_(data), nbytes_(nbytes), device_(device), owned_(false) {
  if (StorageObserver* o = storage_observer()) o->on_alloc(*this);
}

StorageObserver*& storage_observer() {
  thread_local StorageObserver* observer = nullptr;
  return observer;
}

void Storage::release() {
  TRIREME_CHECK(owned_, "Storage::release: the memory is borrowed, not this storage's to give back");
  if (data_) allocator_for(device_.type).deallocate(data_, nbytes_, device_);
  data_ = nullptr;
}

void Storage::reacquire() {
  if (data_ || nbytes_ == 0) return;
  data_ = allocator_for(device_.type).allocate(nbytes_, device_);
}

Storage::~Storage() {
  if (StorageObserver* o = storage_observer()) o->on_free(*this);
  if (data_ && owned_) allocator_for(device_.type).deallocate(data_, nbytes_, device_);
}

}  // namespace trireme
