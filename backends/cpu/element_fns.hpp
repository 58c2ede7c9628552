// SPDX-License-Identifier: Apache-2.0
#pragma once

// The element functions of the CPU backend's element-wise ops, one per op
// kind and compute type. Both the op-by-op kernels (elementwise.cpp) and the
// fused chains (fused.cpp) call these and nothing else for the arithmetic,
// which is what makes a fused chain give the bits of the unfused ops.

#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/common/number_conversion.hpp"
#include "switchyard/messages/ops.hpp"

namespace switchyard::backends::cpu::element {

template <class T>
using Wide = std::conditional_t<std::is_signed_v<T>, std::make_unsigned_t<T>, T>;

// Signed overflow wraps (two's complement) instead of being undefined.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  else
    return a + b;
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
  else
    return a - b;
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
  else
    return a * b;
}

template <class T>
T int_pow(T base, T exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
    return 0;
  }
  T result = 1;
  while (exp > 0) {
    if (exp & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp >>= 1;
  }
  return result;
}

// Python's a // b. Floats follow PyTorch's div_floor: the quotient of the
// exact remainder's complement, so 1.0 // 0.1 == 9 as in Python, and x / 0
// keeps IEEE's inf/NaN. Integers round toward minus infinity; INT_MIN // -1
// wraps (PyTorch's CPU traps there). The caller has refused a zero divisor.
template <class T>
T floor_divide(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
    if (div == 0) return std::copysign(T(0), a / b);
    T floored = std::floor(div);
    if (div - floored > T(0.5)) floored += 1;
    return floored;
  } else if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_sub(T(0), a);
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return a / b;
  }
}

template <class T>
T py_remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    if constexpr (std::is_signed_v<T>)
      if (b == -1) return 0;  // avoids INT_MIN % -1 overflow
    T r = a % b;
    if constexpr (std::is_signed_v<T>)
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

// On a tie (+0 and -0) the first operand, as std::max and std::min and the
// reference backend.
template <class T>
T nan_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a < b ? b : a;
}
template <class T>
T nan_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return b < a ? b : a;
}

// Fill values, scalar operands, arange elements, clamp bounds and casts
// use the runtime's one conversion rule, shared with the other backends.
using backends::clamp_bound;
using backends::from_double;

// Calls f(fn) with the element function of binary op `k` on T; returns
// false for a kind that T does not support (the op rules exclude those).
template <class T, class F>
bool with_binary(BinaryKind k, F&& f) {
  constexpr bool is_b = std::is_same_v<T, bool>;
  constexpr bool is_f = std::is_floating_point_v<T>;
  switch (k) {
    case BinaryKind::add:
      if constexpr (is_b)
        return f([](T a, T b) -> T { return a || b; });
      else
        return f([](T a, T b) -> T { return wrap_add(a, b); });
    case BinaryKind::sub:
      if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return wrap_sub(a, b); });
    case BinaryKind::mul:
      if constexpr (is_b)
        return f([](T a, T b) -> T { return a && b; });
      else
        return f([](T a, T b) -> T { return wrap_mul(a, b); });
    case BinaryKind::div:
      if constexpr (is_f)
        return f([](T a, T b) -> T { return a / b; });
      else
        return false;
    case BinaryKind::pow:
      if constexpr (is_f)
        return f([](T a, T b) -> T { return std::pow(a, b); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return int_pow(a, b); });
    case BinaryKind::remainder:
      if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return py_remainder(a, b); });
    case BinaryKind::maximum:
      return f([](T a, T b) -> T { return nan_max(a, b); });
    case BinaryKind::minimum:
      return f([](T a, T b) -> T { return nan_min(a, b); });
    case BinaryKind::atan2:
      if constexpr (is_f)
        return f([](T a, T b) -> T { return std::atan2(a, b); });
      else
        return false;
    case BinaryKind::eq:
      return f([](T a, T b) -> bool { return a == b; });
    case BinaryKind::ne:
      return f([](T a, T b) -> bool { return a != b; });
    case BinaryKind::lt:
      return f([](T a, T b) -> bool { return a < b; });
    case BinaryKind::le:
      return f([](T a, T b) -> bool { return a <= b; });
    case BinaryKind::gt:
      return f([](T a, T b) -> bool { return a > b; });
    case BinaryKind::ge:
      return f([](T a, T b) -> bool { return a >= b; });
    case BinaryKind::logical_and:
      return f([](T a, T b) -> bool { return (a != T(0)) && (b != T(0)); });
    case BinaryKind::logical_or:
      return f([](T a, T b) -> bool { return (a != T(0)) || (b != T(0)); });
    case BinaryKind::logical_xor:
      return f([](T a, T b) -> bool { return (a != T(0)) != (b != T(0)); });
    // NOLINTNEXTLINE(bugprone-branch-clone): the bitwise ops differ for integers only
    case BinaryKind::bitwise_and:
      if constexpr (is_f)
        return false;
      else
        return f([](T a, T b) -> T { return static_cast<T>(a & b); });
    case BinaryKind::bitwise_or:
      if constexpr (is_f)
        return false;
      else
        return f([](T a, T b) -> T { return static_cast<T>(a | b); });
    case BinaryKind::bitwise_xor:
      if constexpr (is_f)
        return false;
      else
        return f([](T a, T b) -> T { return static_cast<T>(a ^ b); });
    case BinaryKind::floor_divide:
      if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return floor_divide(a, b); });
  }
  return false;
}

template <class T>
T gelu(T x) {
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + std::erf(x * static_cast<T>(0.70710678118654752440)));
}

template <class T, class F>
bool with_unary(UnaryKind k, double lo, double hi, F&& f) {
  constexpr bool is_b = std::is_same_v<T, bool>;
  constexpr bool is_f = std::is_floating_point_v<T>;
  switch (k) {
    // Floats flip or clear the sign bit (0 - x would keep +0 and -0 as they
    // are); integers wrap.
    case UnaryKind::neg:
      if constexpr (is_b)
        return false;
      else if constexpr (is_f)
        return f([](T x) -> T { return -x; });
      else
        return f([](T x) -> T { return wrap_sub(T(0), x); });
    case UnaryKind::abs:
      if constexpr (is_b || std::is_unsigned_v<T>)
        return f([](T x) -> T { return x; });
      else if constexpr (is_f)
        return f([](T x) -> T { return std::fabs(x); });
      else
        return f([](T x) -> T { return x < 0 ? wrap_sub(T(0), x) : x; });
    case UnaryKind::sign:
      if constexpr (is_b)
        return f([](T x) -> T { return x; });
      else
        return f([](T x) -> T { return static_cast<T>((T(0) < x) - (x < T(0))); });
    case UnaryKind::relu:  // PyTorch's clamp_min(x, 0): NaN stays NaN, -0 stays -0
      if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x < T(0) ? T(0) : x; });
    // NOLINTNEXTLINE(bugprone-branch-clone): floor, ceil and round differ for floats only
    case UnaryKind::floor:
      if constexpr (is_f)
        return f([](T x) -> T { return std::floor(x); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x; });
    case UnaryKind::ceil:
      if constexpr (is_f)
        return f([](T x) -> T { return std::ceil(x); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x; });
    case UnaryKind::round:
      if constexpr (is_f)
        return f([](T x) -> T { return std::nearbyint(x); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x; });
    case UnaryKind::clamp:
      if constexpr (is_b)
        return false;
      else {
        bool has_lo = !std::isnan(lo), has_hi = !std::isnan(hi);
        T l = has_lo ? clamp_bound<T>(lo) : T(0), h = has_hi ? clamp_bound<T>(hi) : T(0);
        return f([=](T x) -> T {
          if constexpr (is_f)
            if (std::isnan(x)) return x;
          if (has_lo && x < l) x = l;
          if (has_hi && x > h) x = h;
          return x;
        });
      }
    case UnaryKind::logical_not:
      return f([](T x) -> bool { return x == T(0); });
    case UnaryKind::bitwise_not:
      if constexpr (is_f)
        return false;
      else if constexpr (is_b)
        return f([](T x) -> T { return !x; });
      else
        return f([](T x) -> T { return static_cast<T>(~x); });
    case UnaryKind::isnan:
      if constexpr (is_f)
        return f([](T x) -> bool { return std::isnan(x); });
      else
        return f([](T) -> bool { return false; });
    case UnaryKind::isinf:
      if constexpr (is_f)
        return f([](T x) -> bool { return std::isinf(x); });
      else
        return f([](T) -> bool { return false; });
    default:
      break;
  }
  // The floating family: the rules make the output (and compute) type float.
  if constexpr (is_f) {
    switch (k) {
      case UnaryKind::exp:
        return f([](T x) -> T { return std::exp(x); });
      case UnaryKind::log:
        return f([](T x) -> T { return std::log(x); });
      case UnaryKind::log1p:
        return f([](T x) -> T { return std::log1p(x); });
      case UnaryKind::expm1:
        return f([](T x) -> T { return std::expm1(x); });
      case UnaryKind::sqrt:
        return f([](T x) -> T { return std::sqrt(x); });
      case UnaryKind::rsqrt:
        return f([](T x) -> T { return T(1) / std::sqrt(x); });
      case UnaryKind::sin:
        return f([](T x) -> T { return std::sin(x); });
      case UnaryKind::cos:
        return f([](T x) -> T { return std::cos(x); });
      case UnaryKind::tanh:
        return f([](T x) -> T { return std::tanh(x); });
      case UnaryKind::sigmoid:
        return f([](T x) -> T { return T(1) / (T(1) + std::exp(-x)); });
      case UnaryKind::gelu:
        return f([](T x) -> T { return gelu(x); });
      case UnaryKind::silu:
        return f([](T x) -> T { return x / (T(1) + std::exp(-x)); });
      case UnaryKind::erf:
        return f([](T x) -> T { return std::erf(x); });
      case UnaryKind::reciprocal:
        return f([](T x) -> T { return T(1) / x; });
      default:
        break;
    }
  }
  return false;
}

/// The unary kinds whose result is bool whatever their input's dtype.
[[nodiscard]] constexpr bool is_predicate(UnaryKind k) noexcept {
  return k == UnaryKind::logical_not || k == UnaryKind::isnan || k == UnaryKind::isinf;
}

/// The dtype a unary op computes in: its input's for the predicates, its
/// output's for the rest (an integer input of a floating op is converted
/// first).
[[nodiscard]] inline DType unary_compute_dtype(const UnaryOp& op) noexcept {
  return is_predicate(op.kind) ? op.in.dtype : op.out.dtype;
}

}  // namespace switchyard::backends::cpu::element
