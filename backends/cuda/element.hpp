// SPDX-License-Identifier: Apache-2.0
#pragma once

// Element types of the CUDA kernels and the one conversion rule between
// them. f16 and bf16 are stored as CUDA's own __half and __nv_bfloat16 and
// computed in float (their "opmath" type, as in PyTorch): a kernel loads an
// element with widen(), computes in Opmath<T> and stores with one rounding
// (convert<Opmath<T>, T>), exactly the CPU backend's "widen, compute in
// f32, round once".
//
// Host and device: the host tests check these very functions against the
// CPU backend's sy::Half / sy::BFloat16 (the device runs the same code with
// the hardware's conversion instructions, which round the same way).

#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "backends/common/number_conversion.hpp"

namespace switchyard::backends::cuda::kern {

/// The 16-bit float storage types.
template <class T>
inline constexpr bool is_half16_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
/// Floating storage types: float, double and the 16-bit ones.
template <class T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_half16_v<T>;
/// The type an element of storage type T is computed in.
template <class T>
using Opmath = std::conditional_t<is_half16_v<T>, float, T>;

/// T's value in its compute type (exact).
template <class T>
SY_HOST_DEVICE inline Opmath<T> widen(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return v;
}

/// T's value as a double (exact): what accumulations in double read.
template <class T>
SY_HOST_DEVICE inline double to_double(T v) {
  return static_cast<double>(widen(v));
}

/// A float rounded to nearest even into a 16-bit type: overflow gives
/// infinity, subnormals are kept, and NaN becomes the quiet NaN that
/// sy::Half writes (sign | 0x7e00) or, for bf16, keeps its sign and upper
/// payload with the quiet bit set, as sy::BFloat16 (CUDA's own conversions
/// write a canonical 0x7fff instead, which would differ from the CPU).
template <class H>
SY_HOST_DEVICE inline H round_to(float v) {
  static_assert(is_half16_v<H>);
  if (v != v) {
    uint32_t x = 0;
    std::memcpy(&x, &v, sizeof x);
    if constexpr (std::is_same_v<H, __half>) {
      __half_raw r;
      r.x = static_cast<unsigned short>(((x >> 16) & 0x8000u) | 0x7e00u);
      return __half(r);
    } else {
      __nv_bfloat16_raw r;
      r.x = static_cast<unsigned short>((x >> 16) | 0x40u);
      return __nv_bfloat16(r);
    }
  }
  if constexpr (std::is_same_v<H, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

/// Element S converted to element D with the runtime's cast rule
/// (backends::convert_element): a 16-bit float converts through float both
/// ways, so a double or an int64 is rounded to float first, as c10 does.
template <class S, class D>
SY_HOST_DEVICE inline D convert(S v) {
  if constexpr (std::is_same_v<S, D>)
    return v;
  else if constexpr (is_half16_v<S>)
    return convert<float, D>(widen(v));
  else if constexpr (is_half16_v<D>)
    return round_to<D>(backends::convert_element<S, float>(v));
  else
    return backends::convert_element<S, D>(v);
}

/// A double (fill value, scalar operand, arange element) in storage type T.
template <class T>
SY_HOST_DEVICE inline T from_double(double v) {
  return convert<double, T>(v);
}

/// The bits of a 16-bit storage value (tests and host code).
template <class H>
inline uint16_t bits_of_half(H h) {
  static_assert(is_half16_v<H>);
  uint16_t b = 0;
  std::memcpy(&b, &h, sizeof b);
  return b;
}

}  // namespace switchyard::backends::cuda::kern
