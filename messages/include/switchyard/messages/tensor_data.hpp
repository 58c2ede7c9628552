// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// CAF-free (a public header uses it); its inspect overload is in inspect.hpp.
#include "switchyard/messages/bytes.hpp"
#include "switchyard/messages/dtype.hpp"
#include "switchyard/messages/scalar.hpp"
#include "switchyard/messages/shape.hpp"

namespace switchyard {

/// Host-side contents of a tensor: owned bytes (little-endian, row-major,
/// contiguous) with their shape and dtype. What reads return, what from-data
/// ops and bridges carry.
struct TensorData {
  Shape shape;
  DType dtype = DType::f32;
  Bytes bytes;

  TensorData() = default;
  /// Checks that `bytes` holds exactly numel * size_of(dtype) bytes.
  TensorData(Shape s, DType t, Bytes b);

  template <class T>
  [[nodiscard]] static TensorData from(std::span<const T> values, Shape s) {
    if (static_cast<int64_t>(values.size()) != s.numel())
      throw Error(Errc::invalid_argument,
                  "TensorData: " + std::to_string(values.size()) + " values do not fill shape " + s.to_string());
    return TensorData(std::move(s), dtype_of_v<T>, Bytes::copy_of(values.data(), values.size_bytes()));
  }
  template <class T>
  [[nodiscard]] static TensorData from(const std::vector<T>& values, Shape s) {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<uint8_t> tmp(values.begin(), values.end());
      auto d = from<uint8_t>(std::span<const uint8_t>(tmp), std::move(s));
      d.dtype = DType::boolean;
      return d;
    } else {
      return from<T>(std::span<const T>(values), std::move(s));
    }
  }

  [[nodiscard]] int64_t numel() const noexcept { return shape.numel(); }

  /// Typed view; throws if T does not match the dtype. Only on a TensorData
  /// that lives on (a variable): `t.read().get().as<float>()` would be a view
  /// into a temporary, so that does not compile (keep the data, or use
  /// to_vector).
  template <class T>
  std::span<const T> as() && = delete;
  template <class T>
  [[nodiscard]] std::span<const T> as() const& {
    check_dtype(dtype_of_v<T>);
    return {bytes.as<const T>(), static_cast<size_t>(numel())};
  }
  /// Element `v` of a tensor as T, by the rule of a cast to T's dtype
  /// (scalar.hpp, README "Casts"): a float truncates toward zero through
  /// int64 (through int32 for a signed T of 1 or 2 bytes), and NaN, ±inf
  /// and values beyond become that type's minimum, then wrap to T; a plain
  /// static_cast is undefined there.
  template <class T, class S>
  [[nodiscard]] static T element_as(S v) noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      return static_cast<double>(v) != 0.0;
    } else if constexpr (std::is_integral_v<T> && !std::is_integral_v<S>) {
      const auto d = static_cast<double>(v);
      if constexpr (std::is_signed_v<T> && sizeof(T) <= 2) {
        const bool fits = d >= -2147483648.0 && d < 2147483648.0;
        return static_cast<T>(fits ? static_cast<int32_t>(d) : std::numeric_limits<int32_t>::min());
      } else {
        return static_cast<T>(float_to_int64(d));
      }
    } else {
      // NOLINTNEXTLINE(bugprone-signed-char-misuse): i8 elements are numbers, sign extension is meant
      return static_cast<T>(v);
    }
  }

  /// Copy converted to T (any dtype to any arithmetic T), each element as
  /// element_as: the values a cast to T's dtype would give.
  template <class T>
  [[nodiscard]] std::vector<T> to_vector() const {
    std::vector<T> out(static_cast<size_t>(numel()));
    visit_dtype(dtype, [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) {
        // Bytes from the wire may hold any value; loading one as bool is UB.
        const auto* src = bytes.as<const uint8_t>();
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(src[i] != 0);
      } else {
        const S* src = bytes.as<const S>();
        for (size_t i = 0; i < out.size(); ++i) out[i] = element_as<T>(src[i]);
      }
    });
    return out;
  }
  /// Element i converted to double, whatever the dtype.
  [[nodiscard]] double at(int64_t i) const;

 private:
  void check_dtype(DType expected) const;
};

/// Makes every byte of a bool tensor 0 or 1. Kernels load bool elements as
/// `bool`, for which any other byte is undefined behaviour; our own code only
/// writes 0 and 1, a peer's bytes are not trusted.
void canonicalize_bools(TensorData& x) noexcept;

}  // namespace switchyard
