// Checked integer arithmetic for sizes that come from input (configs, checkpoints, shards, store
// messages, flags). An overflow is a trireme::Error naming what was being computed, never
// undefined behaviour.
//
//   int64_t bytes = checked_mul(numel, int64_t(dtype_size(dt)), "tensor '", name, "' byte count");
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "trireme/core/error.h"

namespace trireme {

template <class T, class... What>
T checked_mul(T a, T b, What&&... what) {
  static_assert(std::is_integral_v<T>);
  T r;
  TRIREME_CHECK(!__builtin_mul_overflow(a, b, &r), std::forward<What>(what)..., ": ", +a, " x ", +b,
                " overflows a ", sizeof(T) * 8, "-bit integer");
  return r;
}

template <class T, class... What>
T checked_add(T a, T b, What&&... what) {
  static_assert(std::is_integral_v<T>);
  T r;
  TRIREME_CHECK(!__builtin_add_overflow(a, b, &r), std::forward<What>(what)..., ": ", +a, " + ", +b,
                " overflows a ", sizeof(T) * 8, "-bit integer");
  return r;
}

// `v` converted to To, or an error when it does not fit (negative into unsigned, too large).
template <class To, class From, class... What>
To checked_cast(From v, What&&... what) {
  static_assert(std::is_integral_v<To> && std::is_integral_v<From>);
  To r;
  TRIREME_CHECK(!__builtin_add_overflow(v, From(0), &r), std::forward<What>(what)..., ": ", +v,
                " does not fit in the range ", +std::numeric_limits<To>::min(), "..",
                +std::numeric_limits<To>::max());
  return r;
}

}  // namespace trireme
