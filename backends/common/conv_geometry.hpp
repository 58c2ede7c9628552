// SPDX-License-Identifier: Apache-2.0
#pragma once

// ConvGeometry / PoolGeometry of validated ops (host side).

#include "backends/common/conv_shapes.hpp"
#include "switchyard/messages/ops.hpp"

namespace switchyard::backends {

/// Geometry of a validated ConvOp (pad_after only shapes the output, which
/// the op's `out` already has).
inline ConvGeometry conv_geometry(const ConvOp& op) {
  ConvGeometry g;
  const size_t n = op.spatial();
  const auto& x = op.input.shape.dims;
  const auto& w = op.weight.shape.dims;
  const auto& y = op.out.shape.dims;
  const bool batched = x.size() == n + 2;
  const size_t c = batched ? 1 : 0;
  g.batch = batched ? x[0] : 1;
  g.groups = op.groups;
  g.c_in = x[c];
  g.c_out = y[c];
  g.transposed = op.transposed;
  const size_t skip = 3 - n;
  for (size_t i = 0; i < n; ++i) {
    g.in[skip + i] = x[c + 1 + i];
    g.out[skip + i] = y[c + 1 + i];
    g.kernel[skip + i] = w[2 + i];
    g.stride[skip + i] = op.stride[i];
    g.pad[skip + i] = op.pad_before[i];
    g.dilation[skip + i] = op.dilation[i];
  }
  return g;
}

inline PoolGeometry pool_geometry(const PoolOp& op) {
  PoolGeometry g;
  const size_t n = op.spatial();
  const auto& x = op.in.shape.dims;
  const auto& y = op.out.shape.dims;
  const size_t first = x.size() - n;
  for (size_t i = 0; i < first; ++i) g.planes *= x[i];
  const size_t skip = 3 - n;
  for (size_t i = 0; i < n; ++i) {
    g.in[skip + i] = x[first + i];
    g.out[skip + i] = y[first + i];
    if (!op.adaptive()) {
      g.kernel[skip + i] = op.kernel[i];
      g.stride[skip + i] = op.stride[i];
      g.pad[skip + i] = op.pad_before[i];
      g.pad_after[skip + i] = op.pad_after[i];
      g.dilation[skip + i] = op.dilation[i];
    }
  }
  return g;
}

}  // namespace switchyard::backends
