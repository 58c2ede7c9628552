// SPDX-License-Identifier: Apache-2.0
#pragma once

/// Functional neural-network ops (PyTorch 1.13's torch.nn.functional names,
/// argument names and semantics). Each is one op on the tensor's device;
/// bad arguments fail at the call with an Error naming the op, the shapes
/// and the argument.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "switchyard/tensor.hpp"

namespace switchyard::nn {

// --- convolution and pooling ------------------------------------------------

// --- normalisation and attention ----------------------------------------------

// --- padding and resampling (composed of layout and element-wise ops) -----------

/// F.pad: `pad` holds (before, after) widths from the last axis backwards,
/// as PyTorch's; mode "constant" (negative widths crop), "reflect" (widths
/// below the axis's extent), "replicate" or "circular" (widths up to the
/// extent). reflect and replicate need a floating tensor, as PyTorch 1.13.
[[nodiscard]] Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, const std::string& mode = "constant",
                         double value = 0);

/// F.interpolate over the spatial axes of an (N, C, d1[, d2[, d3]]) tensor:
/// mode "nearest", "nearest-exact" (f32, f64, u8), "linear", "bilinear",
/// "trilinear" (f32, f64; one, two or three spatial axes). Give `size` or
/// `scale_factor` (one value for every spatial axis, or one per axis); a
/// scale factor sizes the output as floor(extent * factor) and is also the
/// scale the sampling uses, as PyTorch without recompute_scale_factor.
/// `align_corners` only with the linear modes (default false).
[[nodiscard]] Tensor interpolate(const Tensor& input, const std::vector<int64_t>& size,
                                 const std::vector<double>& scale_factor = {}, const std::string& mode = "nearest",
                                 std::optional<bool> align_corners = std::nullopt);

}  // namespace switchyard::nn
