// Element types: the DType enum, its C++ types, and the wider type low precision accumulates in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "trireme/core/error.h"
#include "trireme/core/half.h"

namespace trireme {

enum class DType : uint8_t { f64, f32, bf16, f16, i64, i32, boolean };
inline constexpr int kNumDTypes = 7;

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ... (also the safetensors names via io/)
DType dtype_from_name(std::string_view name);  // throws on an unknown name
inline bool is_floating(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::f16;
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType.
template <class T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<bf16_t> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16_t> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

// The type arithmetic on T is carried out in: bf16/f16 accumulate in float.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<bf16_t> { using type = float; };
template <> struct acc_type<f16_t> { using type = float; };
template <class T> using acc_t = typename acc_type<T>::type;

// Calls fn.template operator()<T>() with T the C++ type of `t`.
//   dispatch_dtype(x.dtype(), [&]<class T>() { fill<T>(x); });
template <class Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn.template operator()<double>();
    case DType::f32: return fn.template operator()<float>();
    case DType::bf16: return fn.template operator()<bf16_t>();
    case DType::f16: return fn.template operator()<f16_t>();
    case DType::i64: return fn.template operator()<int64_t>();
    case DType::i32: return fn.template operator()<int32_t>();
    case DType::boolean: return fn.template operator()<bool>();
  }
  TRIREME_FAIL("dispatch_dtype: invalid dtype ", int(t));
}

}  // namespace trireme
