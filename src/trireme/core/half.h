// 16-bit floating types: bf16 and IEEE f16 as storage types with float conversions.
// Arithmetic is always done in float (see AccType in dtype.h); these only store bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace trireme {

struct bf16_t {
  uint16_t bits = 0;
  bf16_t() = default;
  bf16_t(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a builtin float type
  operator float() const {                  // NOLINT
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // Round to nearest even; NaN stays NaN (quiet). Branch-free, so loops converting arrays vectorise.
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
};

struct f16_t {
  uint16_t bits = 0;
  f16_t() = default;
  f16_t(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }  // NOLINT

  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
      if (man == 0) {
        u = sign;
      } else {  // subnormal: normalise
        int e = -1;
        do {
          ++e;
          man <<= 1;
        } while ((man & 0x400u) == 0);
        u = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
      }
    } else if (exp == 31) {
      u = sign | 0x7f800000u | (man << 13);
    } else {
      u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }

  // Round to nearest even, with overflow to infinity and gradual underflow.
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);       // NaN
    if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u);      // overflow -> inf
    if (absu < 0x38800000u) {                                      // subnormal or zero
      if (absu < 0x33000000u) return uint16_t(sign);               // below half of min subnormal
      uint32_t exp = absu >> 23;
      uint32_t man = (absu & 0x7fffffu) | 0x800000u;
      // value = man * 2^(exp-150) = m * 2^-24  =>  m = man >> (126 - exp), shift in [14, 24]
      uint32_t shift = 126 - exp;
      uint32_t result = man >> shift;
      uint32_t rem = man & ((1u << shift) - 1u);
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (result & 1u))) ++result;
      return uint16_t(sign | result);
    }
    uint32_t rounded = absu + 0xfffu + ((absu >> 13) & 1u);
    return uint16_t(sign | ((rounded - (112u << 23)) >> 13));
  }
};

}  // namespace trireme
