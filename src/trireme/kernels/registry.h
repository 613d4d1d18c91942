// The kernel registry: plain functions keyed by (op, device type, dtype).
//
// A kernel family declares its signature type beside its ops (e.g. `using UnaryKernel =
// void (*)(const Tensor& in, Tensor& out)`), and registers its kernels in one line per op that
// lists the dtypes:
//
//   TRIREME_REGISTER_KERNELS(cpu_unary) {
//     registry.add_each<UnaryKernel, double, float, bf16_t, f16_t>(
//         "exp", DeviceType::cpu, []<class T>() { return &unary_cpu<T, ExpOp>; });
//   }
//
// Ops look kernels up with find_kernel<Sig>(op, device, dtype) and call the result; a missing one is
// an error naming all three.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <typeindex>
#include <unordered_map>

#include "trireme/core/device.h"
#include "trireme/core/dtype.h"
#include "trireme/core/error.h"
#include "trireme/kernels/kernel_tape.h"

namespace trireme {

class KernelRegistry {
 public:
  template <class Fn>
  void add(std::string_view op, DeviceType device, DType dtype, Fn fn) {
    static_assert(std::is_pointer_v<Fn>, "kernels are plain function pointers");
    Entry& e = table_[std::string(op)][size_t(device)][size_t(dtype)];
    e.fn = reinterpret_cast<void (*)()>(fn);
    e.type = std::type_index(typeid(Fn));
  }

  template <class Fn, class... Ts, class Make>
  void add_each(std::string_view op, DeviceType device, Make make) {
    (add<Fn>(op, device, dtype_v<Ts>, make.template operator()<Ts>()), ...);
  }

  template <class Fn>
  Fn find(std::string_view op, DeviceType device, DType dtype) const {
    const Entry* e = lookup(op, device, dtype);
    TRIREME_CHECK(e && e->fn, "no kernel for op '", op, "' on device ", device_type_name(device),
                  " for dtype ", dtype_name(dtype), missing_hint(op, device));
    TRIREME_CHECK(e->type == std::type_index(typeid(Fn)), "kernel for op '", op,
                  "' was registered with a different signature than the op expects");
    return reinterpret_cast<Fn>(e->fn);
  }

  bool has(std::string_view op, DeviceType device, DType dtype) const {
    const Entry* e = lookup(op, device, dtype);
    return e && e->fn;
  }

 private:
  struct Entry {
    void (*fn)() = nullptr;
    std::type_index type = std::type_index(typeid(void));
  };
  const Entry* lookup(std::string_view op, DeviceType device, DType dtype) const;
  std::string missing_hint(std::string_view op, DeviceType device) const;

  std::unordered_map<std::string, std::array<std::array<Entry, kNumDTypes>, kNumDeviceTypes>> table_;
};

KernelRegistry& kernel_registry();

// Runs `fn(kernel_registry())` during static initialisation (libtrireme is a shared library, so
// every kernel file's registration runs when it loads).
struct KernelRegistration {
  explicit KernelRegistration(void (*fn)(KernelRegistry&)) { fn(kernel_registry()); }
};

// The kernel as a callable (kernels/kernel_tape.h: a tape records the calls while tracing).
template <class Fn>
KernelCall<Fn> find_kernel(std::string_view op, Device device, DType dtype) {
  return KernelCall<Fn>(kernel_registry().find<Fn>(op, device.type, dtype), op, device, dtype);
}

}  // namespace trireme

#define TRIREME_REGISTER_KERNELS(name)                                                      \
  static void trireme_register_##name(::trireme::KernelRegistry& registry);                \
  static const ::trireme::KernelRegistration trireme_registration_##name(                   \
      &trireme_register_##name);                                                            \
  static void trireme_register_##name([[maybe_unused]] ::trireme::KernelRegistry& registry)
