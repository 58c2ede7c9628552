// SPDX-License-Identifier: Apache-2.0
#pragma once

// Host side of the kernels' index math: builds a kern::Layout from a shape
// and per-operand strides. Kept apart from the backend so the host tests
// can check it (with kern::offsets) on machines without a GPU.

#include <array>
#include <initializer_list>
#include <span>
#include <vector>

#include "backends/cuda/kernels.hpp"

namespace switchyard::backends::cuda {

/// Layout over `dims` with N stride vectors (elements), dropping size-1
/// axes and merging axes that are contiguous for every operand (the rule
/// of backends/common/strided_loop.hpp). A flat row-major index over `dims`
/// maps to the same offsets before and after merging. Ranks are at most
/// kern::max_dims (the op rules' limit of 16 axes).
template <int N>
kern::Layout<N> make_layout(std::span<const int64_t> dims, const std::array<std::vector<int64_t>, N>& s) {
  kern::Layout<N> l;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool merge = l.rank > 0;
    for (int k = 0; k < N && merge; ++k) merge = l.strides[k][l.rank - 1] == s[k][d] * dims[d];
    if (merge) {
      l.dims[l.rank - 1] *= dims[d];
      for (int k = 0; k < N; ++k) l.strides[k][l.rank - 1] = s[k][d];
    } else if (l.rank < kern::max_dims) {
      l.dims[l.rank] = dims[d];
      for (int k = 0; k < N; ++k) l.strides[k][l.rank] = s[k][d];
      ++l.rank;
    }
  }
  return l;
}

template <int N>
kern::Layout<N> make_layout(std::initializer_list<int64_t> dims, const std::array<std::vector<int64_t>, N>& s) {
  return make_layout<N>(std::span<const int64_t>(dims.begin(), dims.size()), s);
}

}  // namespace switchyard::backends::cuda
