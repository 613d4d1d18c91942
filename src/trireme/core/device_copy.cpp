#include "trireme/core/device_copy.h"

#include <atomic>

namespace trireme {
namespace {
std::atomic<DeviceCopyFn> installed{nullptr};
}

void set_device_copy(DeviceCopyFn fn) { installed.store(fn); }
DeviceCopyFn device_copy_fn() { return installed.load(); }

}  // namespace trireme
