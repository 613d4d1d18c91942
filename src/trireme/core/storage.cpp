// Storage: allocation and release through the device's allocator.
#include "trireme/core/storage.h"

namespace trireme {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type).allocate(nbytes, device);
}

Storage::~Storage() {
  if (data_ && owned_) allocator_for(device_.type).deallocate(data_, nbytes_, device_);
}

}  // namespace trireme
