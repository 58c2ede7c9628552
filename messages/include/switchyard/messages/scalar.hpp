// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "switchyard/messages/dtype.hpp"

namespace switchyard {

/// The runtime's float-to-integer rule: truncate toward zero; finite values
/// in [-2^63, 2^63) go through int64 (and then wrap to a narrower integer);
/// NaN, infinities and anything beyond become INT64_MIN. The bounds are
/// exact powers of two, so every double that int64 can hold converts.
[[nodiscard]] constexpr int64_t float_to_int64(double x) noexcept {
  constexpr double limit = 9223372036854775808.0;  // 2^63
  if (x >= -limit && x < limit) return static_cast<int64_t>(x);
  return std::numeric_limits<int64_t>::min();
}

/// A scalar operand. Its C++ type decides promotion as the Python type does
/// in PyTorch (bool, integer or floating), and its value is held exactly:
/// integers as int64 or uint64 (by their signedness), floating values as
/// double. So `x + (int64_t{1} << 62) + 1` on an i64 tensor is exact.
struct Scalar {
  ScalarKind kind = ScalarKind::floating;
  bool is_unsigned = false;  ///< integral only: `i` holds a uint64's bits
  int64_t i = 0;             ///< boolean (0 or 1) and integral values
  double f = 0;              ///< floating values

  Scalar() = default;
  /// Any C++ arithmetic value; its type picks the kind.
  template <class T>
  requires std::is_arithmetic_v<T> Scalar(T v)  // NOLINT(google-explicit-constructor)
  {
    if constexpr (std::is_same_v<T, bool>) {
      kind = ScalarKind::boolean;
      i = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      kind = ScalarKind::integral;
      is_unsigned = std::is_unsigned_v<T> && sizeof(T) == 8;
      i = static_cast<int64_t>(v);  // uint64 above INT64_MAX: its bits (modular since C++20)
    } else {
      kind = ScalarKind::floating;
      f = static_cast<double>(v);
    }
  }

  /// The value converted to T with the runtime's cast rules: integers wrap
  /// modulo T's width, floats truncate toward zero (float_to_int64), bool
  /// is "non-zero".
  template <class T>
  [[nodiscard]] T as() const noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      return kind == ScalarKind::floating ? f != 0 : i != 0;
    } else if constexpr (is_float_like_v<T>) {  // f16/bf16: through float, as c10
      if (kind == ScalarKind::floating) return static_cast<T>(f);
      return is_unsigned ? static_cast<T>(static_cast<uint64_t>(i)) : static_cast<T>(i);
    } else {
      return static_cast<T>(kind == ScalarKind::floating ? float_to_int64(f) : i);
    }
  }
  /// The value as a double (rounded for integers beyond 2^53).
  [[nodiscard]] double to_double() const noexcept { return as<double>(); }
  /// True when the value is zero (of any kind).
  [[nodiscard]] bool is_zero() const noexcept { return kind == ScalarKind::floating ? f == 0 : i == 0; }
  /// Whether the value fits dtype `t` by PyTorch's rule for filling a
  /// tensor (c10's `overflows`): integers must lie in t's range (negative
  /// values down to -max for u8, which wrap), floats must be finite and in
  /// range for integers, and at most infinite for floats. Bool takes all.
  [[nodiscard]] bool fits(DType t) const noexcept;
  /// "2", "-3.5", "true" (for error messages).
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Scalar& a, const Scalar& b) noexcept {
    return a.kind == b.kind && a.is_unsigned == b.is_unsigned && a.i == b.i &&
           std::bit_cast<uint64_t>(a.f) == std::bit_cast<uint64_t>(b.f);
  }
};

/// The dtype PyTorch's `result_type` gives for two tensor operands: a
/// dimensioned tensor's dtype wins over a 0-d tensor's unless the 0-d one
/// is of a higher category (bool < integer < floating); between two 0-d or
/// two dimensioned tensors, plain promotion. `sub(i32[1], i64[])` is i32.
[[nodiscard]] constexpr DType result_type(bool a_is_0d, DType a, bool b_is_0d, DType b) noexcept {
  if (a_is_0d == b_is_0d) return promote(a, b);
  const DType dim = a_is_0d ? b : a;
  const DType zero = a_is_0d ? a : b;
  // c10's combine_categories(higher = dimensioned, lower = 0-d).
  if (is_floating(dim)) return dim;
  if (is_bool(dim) || is_floating(zero)) return promote(dim, zero);
  return dim;
}

}  // namespace switchyard
