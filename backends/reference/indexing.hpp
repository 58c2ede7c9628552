// SPDX-License-Identifier: Apache-2.0
#pragma once

// Index arithmetic of the reference backend's loops: every element is found
// from its multi-index, the obviously correct way.

#include <cstdint>
#include <vector>

#include "switchyard/messages/shape.hpp"

namespace switchyard::backends::reference {

/// Multi-index of flat position `flat` in row-major `shape`.
[[nodiscard]] inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.rank());
  for (size_t d = shape.rank(); d-- > 0;) {
    idx[d] = flat % shape.dims[d];
    flat /= shape.dims[d];
  }
  return idx;
}

/// Offset of a multi-index under `strides`.
[[nodiscard]] inline int64_t dot(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
  return off;
}

}  // namespace switchyard::backends::reference
