// DType names and sizes.
#include "trireme/core/dtype.h"

namespace trireme {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::boolean: return 1;
  }
  TRIREME_FAIL("dtype_size: invalid dtype ", int(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  return "invalid";
}

DType dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(DType(i)) == name) return DType(i);
  }
  TRIREME_FAIL("unknown dtype '", name, "' (expected f64, f32, bf16, f16, i64, i32 or bool)");
}

}  // namespace trireme
