// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace switchyard {

/// Extents of a tensor, outermost first. A rank-0 shape is a scalar with one
/// element; an extent of 0 makes an empty tensor.
struct Shape {
  std::vector<int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(std::vector<int64_t> d) : dims(std::move(d)) {}

  [[nodiscard]] size_t rank() const noexcept { return dims.size(); }
  [[nodiscard]] int64_t operator[](size_t i) const { return dims[i]; }
  /// Number of elements (1 for rank 0).
  /// Wraps (no UB) for hostile shapes whose product overflows; validate()
  /// rejects those before any backend sees them.
  [[nodiscard]] int64_t numel() const noexcept {
    uint64_t n = 1;
    for (auto d : dims) n *= static_cast<uint64_t>(d);
    return static_cast<int64_t>(n);
  }
  /// Row-major strides in elements.
  [[nodiscard]] std::vector<int64_t> strides() const;
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Shape&, const Shape&) = default;
};

/// NumPy broadcasting of two shapes; nullopt where they are incompatible.
[[nodiscard]] std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

/// Strides that read a tensor of shape `from` as if it had the broadcast
/// shape `to` (0 on broadcast axes). Precondition: `from` broadcasts to `to`.
[[nodiscard]] std::vector<int64_t> broadcast_strides(const Shape& from, const Shape& to);

/// Resolves a possibly negative axis against `rank`; nullopt if out of range.
[[nodiscard]] std::optional<int64_t> normalize_axis(int64_t axis, size_t rank) noexcept;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Shape& x) {
  return f(x.dims);
}

}  // namespace switchyard
