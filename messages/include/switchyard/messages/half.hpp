// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// The two 16-bit float storage types, as PyTorch's c10::Half and
/// c10::BFloat16 behave: a value converts to float exactly, a float converts
/// back rounding to nearest even (overflow to infinity, NaN stays NaN,
/// subnormals kept), and any other number converts through float first (so
/// a double is rounded twice, as c10 does). Arithmetic happens in float;
/// these types only store. C++17 (the CUDA backend's host code includes it).

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace switchyard {

namespace half_bits {

inline uint32_t bits_of(float f) noexcept {
  uint32_t x = 0;
  std::memcpy(&x, &f, sizeof x);
  return x;
}
inline float float_of(uint32_t x) noexcept {
  float f = 0;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

/// IEEE binary16 bits of `f`, rounded to nearest even.
inline uint16_t f16_from_f32(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN: the quiet NaN c10 writes
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {                        // below 2^-14: subnormal or zero
    // 0.5 has an ulp of 2^-24, the binary16 subnormal step: the float
    // addition rounds to nearest even exactly where binary16 must.
    const uint32_t rounded = bits_of(float_of(magnitude) + 0.5f) - 0x3f000000u;
    return static_cast<uint16_t>(sign | rounded);
  }
  const uint32_t odd = (magnitude >> 13) & 1u;
  // Rebias the exponent (127 -> 15) and round; a carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t rebiased = magnitude - 0x38000000u + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (rebiased >> 13));
}

inline float f32_from_f16(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // mantissa * 2^-24, exact
    return sign != 0 ? -value : value;
  }
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/// bfloat16 bits of `f` (the upper half of a float), rounded to nearest even.
inline uint16_t bf16_from_f32(float f) noexcept {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float f32_from_bf16(uint16_t b) noexcept { return float_of(static_cast<uint32_t>(b) << 16); }

}  // namespace half_bits

/// IEEE 754 binary16 (`DType::f16`).
struct Half {
  uint16_t bits = 0;

  Half() = default;
  // Implicit both ways, as c10::Half: generic code converts with
  // static_cast and reads elements as numbers.
  Half(float f) noexcept : bits(half_bits::f16_from_f32(f)) {}  // NOLINT(google-explicit-constructor)
  template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, float>, int> = 0>
  Half(T v) noexcept : Half(static_cast<float>(v)) {}                        // NOLINT(google-explicit-constructor)
  operator float() const noexcept { return half_bits::f32_from_f16(bits); }  // NOLINT(google-explicit-constructor)

  static Half from_bits(uint16_t b) noexcept {
    Half h;
    h.bits = b;
    return h;
  }
};

/// bfloat16: float's exponent range with an 8-bit significand (`DType::bf16`).
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  BFloat16(float f) noexcept : bits(half_bits::bf16_from_f32(f)) {}  // NOLINT(google-explicit-constructor)
  template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, float>, int> = 0>
  BFloat16(T v) noexcept : BFloat16(static_cast<float>(v)) {}                 // NOLINT(google-explicit-constructor)
  operator float() const noexcept { return half_bits::f32_from_bf16(bits); }  // NOLINT(google-explicit-constructor)

  static BFloat16 from_bits(uint16_t b) noexcept {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

/// Floating types, the 16-bit storage types included.
template <class T>
inline constexpr bool is_float_like_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// The 16-bit float storage types.
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

}  // namespace switchyard
