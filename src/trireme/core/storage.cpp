// Storage: allocation and release through the device's allocator.
#include "trireme/core/storage.h"

#include "trireme/core/error.h"

namespace trireme {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type).allocate(nbytes, device);
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
  if (data_ && owned_) allocator_for(device_.type).deallocate(data_, nbytes_, device_);
}

}  // namespace trireme
