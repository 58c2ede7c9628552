// SPDX-License-Identifier: Apache-2.0
#pragma once

// Walks an N-dimensional iteration space as rows of its innermost extent,
// with one stride vector per operand. Shared by the host backends' kernels:
// axes that are contiguous for every operand are merged first, so a plain
// contiguous op becomes one long row that the compiler vectorizes.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace switchyard::backends {

template <size_t N>
struct StridedLoop {
  std::vector<int64_t> dims;                    // merged extents, outermost first
  std::array<std::vector<int64_t>, N> strides;  // per operand, per merged axis

  // A span: a Shape's Dims or a vector, without a converting copy.
  StridedLoop(std::span<const int64_t> shape, const std::array<std::vector<int64_t>, N>& s) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;  // size-1 axes contribute nothing
      bool merge = !dims.empty();
      for (size_t k = 0; k < N && merge; ++k) merge = strides[k].back() == s[k][d] * shape[d];
      if (merge) {
        dims.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) strides[k].back() = s[k][d];
      } else {
        dims.push_back(shape[d]);
        for (size_t k = 0; k < N; ++k) strides[k].push_back(s[k][d]);
      }
    }
    if (dims.empty()) {
      dims.push_back(1);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }

  [[nodiscard]] int64_t inner() const { return dims.back(); }
  [[nodiscard]] int64_t rows() const {
    int64_t r = 1;
    for (size_t d = 0; d + 1 < dims.size(); ++d) r *= dims[d];
    return r;
  }
  [[nodiscard]] std::array<int64_t, N> inner_strides() const {
    std::array<int64_t, N> s{};
    for (size_t k = 0; k < N; ++k) s[k] = strides[k].back();
    return s;
  }

  /// Calls f(offsets, n) for rows [row_begin, row_end): offsets are the
  /// element offsets of each operand at the row's start.
  template <class F>
  void for_rows(int64_t row_begin, int64_t row_end, F&& f) const {
    // The constructor always leaves one axis; saying so keeps GCC, which
    // sees `dims.size() - 1` wrap when everything is inlined into the
    // instruction-set clones, from warning about a huge vector.
    if (dims.empty()) return;
    const size_t outer = dims.size() - 1;
    std::vector<int64_t> idx(outer, 0);
    std::array<int64_t, N> off{};
    // Position the odometer at row_begin.
    int64_t r = row_begin;
    for (size_t d = outer; d-- > 0;) {
      idx[d] = r % dims[d];
      r /= dims[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      f(off, dims.back());
      for (size_t d = outer; d-- > 0;) {
        ++idx[d];
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        if (idx[d] < dims[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= idx[d] * strides[k][d];
        idx[d] = 0;
      }
    }
  }
};

}  // namespace switchyard::backends
