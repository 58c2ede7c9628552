// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "switchyard/messages/half.hpp"

namespace switchyard {

/// Element type of a tensor. `boolean` is stored as one byte holding 0 or 1.
/// The order is the wire tag: new types are only appended.
enum class DType : uint8_t { f32, f64, i32, i64, u8, boolean, f16, bf16, i8, i16 };

inline constexpr DType all_dtypes[] = {DType::f32,     DType::f64, DType::i32,  DType::i64, DType::u8,
                                       DType::boolean, DType::f16, DType::bf16, DType::i8,  DType::i16};

/// Bytes per element.
[[nodiscard]] constexpr size_t size_of(DType t) noexcept {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
      return 2;
    case DType::u8:
    case DType::i8:
    case DType::boolean:
      return 1;
  }
  return 0;
}

[[nodiscard]] constexpr std::string_view name_of(DType t) noexcept {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i8:
      return "i8";
    case DType::i16:
      return "i16";
  }
  return "invalid";
}

[[nodiscard]] std::optional<DType> parse_dtype(std::string_view name) noexcept;

[[nodiscard]] constexpr bool is_valid(DType t) noexcept {
  return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DType::i16);
}
[[nodiscard]] constexpr bool is_half(DType t) noexcept { return t == DType::f16 || t == DType::bf16; }
[[nodiscard]] constexpr bool is_floating(DType t) noexcept { return t == DType::f32 || t == DType::f64 || is_half(t); }
[[nodiscard]] constexpr bool is_integral(DType t) noexcept {
  return t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::i8 || t == DType::i16;
}
[[nodiscard]] constexpr bool is_bool(DType t) noexcept { return t == DType::boolean; }

/// PyTorch's default floating type: results of true division or of float
/// scalars applied to integer tensors.
inline constexpr DType default_float = DType::f32;

/// Type promotion between two tensors, PyTorch's table: bool < integers <
/// floats as categories; within a category the wider type wins; f16 with
/// bf16 gives f32 (neither holds the other); u8 with a signed integer gives
/// the narrowest signed type holding both (i8 -> i16).
[[nodiscard]] constexpr DType promote(DType a, DType b) noexcept {
  if (a == b) return a;
  if (is_floating(a) || is_floating(b)) {
    if (!is_floating(a)) return b;
    if (!is_floating(b)) return a;
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    if (a == DType::f32 || b == DType::f32) return DType::f32;
    return DType::f32;  // {f16, bf16}
  }
  if (is_bool(a)) return b;
  if (is_bool(b)) return a;
  // Both integral and different: order by width, u8 and i8 share a width.
  auto width = [](DType t) { return t == DType::i64 ? 8 : t == DType::i32 ? 4 : t == DType::i16 ? 2 : 1; };
  if (width(a) != width(b)) return width(a) > width(b) ? a : b;
  return DType::i16;  // {u8, i8}
}

/// Kind of a C++ scalar taking part in an op (PyTorch decides by the Python
/// type of the scalar, not by its value; so do we, by the C++ type).
enum class ScalarKind : uint8_t { boolean, integral, floating };

/// Promotion of a tensor with a scalar: the scalar only matters when its
/// category is higher than the tensor's.
[[nodiscard]] constexpr DType promote_scalar(DType t, ScalarKind s) noexcept {
  if (s == ScalarKind::floating && !is_floating(t)) return default_float;
  if (s == ScalarKind::integral && is_bool(t)) return DType::i64;
  return t;
}

/// Maps C++ element types to DType.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::boolean;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct dtype_of<int16_t> {
  static constexpr DType value = DType::i16;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

/// Calls `f(T{})` for the dtypes whose C++ type has arithmetic of its own
/// (all but f16 and bf16), and `other(t)` for the rest (and invalid values).
/// What a kernel that computes in its element type dispatches on.
template <class F, class Other>
decltype(auto) visit_arithmetic_dtype(DType t, F&& f, Other&& other) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::i8:
      return f(int8_t{});
    case DType::i16:
      return f(int16_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::i64:
      return f(int64_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::boolean:
      return f(bool{});
    default:
      return other(t);
  }
}

/// Calls `f(T{})` with the C++ type stored for `t` (bool for boolean,
/// Half and BFloat16 for the 16-bit floats; bool for an invalid value).
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  if (t == DType::f16) return f(Half{});
  if (t == DType::bf16) return f(BFloat16{});
  return visit_arithmetic_dtype(t, f, [&](DType) { return f(bool{}); });
}

}  // namespace switchyard
