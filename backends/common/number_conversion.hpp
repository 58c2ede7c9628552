// SPDX-License-Identifier: Apache-2.0
#pragma once

// The runtime's one rule for turning a number into an element of a dtype,
// shared by the CPU backend (g++) and the CUDA backend's host code and
// kernels (nvcc), so a fill value, a scalar operand, an arange element, a
// pad value or a cast gives the same bits on every device.
//
//   to bool            v != 0
//   to f32 / f64       the C++ conversion (round to nearest)
//   to f16 / bf16      through float, round to nearest even (half.hpp)
//   float to integer   truncation toward zero through int64, then wrapping
//                      to the width (-1.0 -> u8 255); NaN, infinities and
//                      values outside [-2^63, 2^63) become INT64_MIN wrapped;
//                      to i8 and i16 through int32 instead (INT32_MIN), as
//                      PyTorch's casts do
//                      (a plain static_cast is undefined there; the same
//                      rule as switchyard::float_to_int64 in scalar.hpp)
//   integer to integer wrapping (two's complement)
//
// A clamp bound is different: it is first limited to the dtype's range, so
// a bound beyond it does nothing instead of wrapping around (clamp_bound).
//
// No <cmath>, no std::numeric_limits in the device paths: both are host-only
// in device code without --expt-relaxed-constexpr. A NaN fails both range
// comparisons, and so do the infinities, which makes isfinite unnecessary.

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "switchyard/messages/half.hpp"

#ifndef SY_HOST_DEVICE  // also defined (identically) by philox.hpp
#if defined(__CUDACC__)
#define SY_HOST_DEVICE __host__ __device__
#else
#define SY_HOST_DEVICE
#endif
#endif

namespace switchyard::backends {

/// 2^63: values in [-2^63, 2^63) convert to int64 without overflow (both
/// bounds are exact in float and double, so every representable one does).
inline constexpr double int64_limit = 9223372036854775808.0;
inline constexpr int64_t int64_lowest = -9223372036854775807LL - 1;

/// A floating value (float or double) as int64: truncation toward zero, or
/// INT64_MIN for NaN, infinities and values outside [-2^63, 2^63).
template <class F>
SY_HOST_DEVICE inline int64_t float_to_int64(F v) {
  return (v >= F(-int64_limit) && v < F(int64_limit)) ? static_cast<int64_t>(v) : int64_lowest;
}

/// A floating value as int32: truncation toward zero, or INT32_MIN for NaN,
/// infinities and values outside [-2^31, 2^31) (x86's cvttss2si, which
/// PyTorch's casts to i8 and i16 go through: 1e10 -> i16 gives 0).
template <class F>
SY_HOST_DEVICE inline int32_t float_to_int32(F v) {
  return (v >= F(-2147483648.0) && v < F(2147483648.0)) ? static_cast<int32_t>(v) : int32_t(-2147483647 - 1);
}

template <class D>
inline constexpr bool narrow_int_v = std::is_same_v<D, int8_t> || std::is_same_v<D, int16_t>;

/// Element S converted to element D with the runtime's cast rule.
template <class S, class D>
SY_HOST_DEVICE inline D convert_element(S v) {
  if constexpr (std::is_same_v<D, bool>)
    return v != S(0);
  else if constexpr (std::is_floating_point_v<S> && narrow_int_v<D>)
    return static_cast<D>(float_to_int32(v));
  else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>)
    return static_cast<D>(float_to_int64(v));
  else if constexpr (is_half_v<S> && std::is_integral_v<D>)  // host only, as Half is
    return convert_element<float, D>(static_cast<float>(v));
  else
    return static_cast<D>(v);
}

/// A double (fill value, scalar operand, arange element, pad value) in T.
template <class T>
SY_HOST_DEVICE inline T from_double(double v) {
  return convert_element<double, T>(v);
}

/// A clamp bound in T: for integer T saturated to T's range first, so
/// clamp(-1, 2) on u8 clamps to [0, 2] rather than [255, 2], and a bound of
/// 1e30 on i64 is INT64_MAX. Host only (computed once per launch).
template <class T>
inline T clamp_bound(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // T's max as a double may round up (i64: to 2^63): compare with >=.
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    // NaN means "no bound" to the callers; it never reaches here.
    return from_double<T>(v);
  } else {
    return from_double<T>(v);
  }
}

/// The bit pattern of from_double<T>(v) in the low sizeof(T) bytes (for
/// kernels that fill by width, not by dtype).
template <class T>
inline uint64_t bits_of(double v) {
  const T x = from_double<T>(v);
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  return bits;
}

}  // namespace switchyard::backends
