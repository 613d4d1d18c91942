// Note [scalars in device memory]
// A CUDA graph keeps the arguments its kernels were captured with, but some host arguments
// change at every replay of a static step (AdamW's learning rate and bias corrections, a dropout
// stream: the calls a trace marks as refreshed). A kernel wrapper of such a call hands its scalars
// to place_scalars before launching: outside a capture nothing changes (the kernel takes them by
// value); while the replay captures the call, they are stored in a device buffer and the kernel
// reads them there; before each launch of the graph the replay runs the wrapper again with the
// new arguments, place_scalars stores the new scalars in that buffer's host copy and returns
// false, and the wrapper returns without launching (graph/executable.h then copies the buffer to
// the device, ordered before the launch). So the wrapper must call it before it launches or
// allocates anything, with every scalar that may change. A refreshed call whose wrapper does not
// place its scalars runs outside the graph.
//
//   const Scalars* on_device = nullptr;
//   if (!place_scalars(s, on_device)) return;     // a replay's refresh: nothing to launch
//   kernel<<<...>>>(..., s, on_device);           // reads *on_device when it is not null
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>

namespace trireme {

class ScalarSlots {
 public:
  virtual ~ScalarSlots() = default;
  // Stores n bytes; returns where the kernel reads them (capturing) or null (refreshing).
  virtual const void* place(const void* bytes, size_t n, size_t align) = 0;
};

// This thread's slots: set by a replay around the call it captures or refreshes, else null.
ScalarSlots*& active_scalar_slots();

// False: the call only refreshed its scalars; launch nothing. True: launch, reading the scalars
// from `on_device` when it is not null. An array of scalars (a multi-tensor kernel's, one per
// tensor) is placed as one block, on_device[i] being host[i]: a wrapper that launches several
// kernels places all their scalars in one call, before the first launch.
template <class S>
bool place_scalars(std::span<const S> host, const S*& on_device) {
  static_assert(std::is_trivially_copyable_v<S>, "scalars placed in device memory are copied as bytes");
  on_device = nullptr;
  ScalarSlots* slots = active_scalar_slots();
  if (slots == nullptr) [[likely]] return true;
  on_device = static_cast<const S*>(slots->place(host.data(), host.size_bytes(), alignof(S)));
  return on_device != nullptr;
}

// One struct of scalars.
template <class S>
bool place_scalars(const S& host, const S*& on_device) {
  return place_scalars(std::span<const S>(&host, 1), on_device);
}

}  // namespace trireme
