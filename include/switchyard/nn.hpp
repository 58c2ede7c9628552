// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::nn: functional neural-network ops.

/// Functional neural-network ops (PyTorch 1.13's torch.nn.functional names,
/// argument names and semantics). Each is one op on the tensor's device;
/// bad arguments fail at the call with an Error naming the op, the shapes
/// and the argument.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "switchyard/tensor.hpp"

namespace switchyard::nn {

// --- convolution and pooling ------------------------------------------------
//
// Inputs are batched (N, C, *spatial) or unbatched (C, *spatial), as in
// PyTorch. Sizes (stride, padding, ...) are one int for every spatial axis or
// one per axis. f32 and f64 (average pooling also i64).

/// Per-axis sizes: one value for every spatial axis, or one per axis
/// (PyTorch's int-or-tuple arguments). Empty means "the default".
struct Ints {
  std::vector<int64_t> values;
  Ints() = default;
  Ints(int64_t v) : values{v} {}                          // NOLINT(google-explicit-constructor)
  Ints(std::initializer_list<int64_t> v) : values(v) {}   // NOLINT(google-explicit-constructor)
  Ints(std::vector<int64_t> v) : values(std::move(v)) {}  // NOLINT(google-explicit-constructor)
};

/// A convolution's padding: sizes as Ints, or "valid" (none) or "same"
/// (output extent = input extent; stride 1 only; with an even dilated
/// kernel the extra element goes after, as in PyTorch).
struct ConvPadding {
  Ints sizes;
  std::string mode;                          ///< "" (use sizes), "same" or "valid"
  ConvPadding(int64_t v) : sizes(v) {}       // NOLINT(google-explicit-constructor)
  ConvPadding(int v) : sizes(int64_t{v}) {}  // NOLINT(google-explicit-constructor): `0` is no null pointer here
  ConvPadding(std::initializer_list<int64_t> v) : sizes(v) {}   // NOLINT(google-explicit-constructor)
  ConvPadding(std::vector<int64_t> v) : sizes(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  ConvPadding(const char* m) : mode(m) {}                       // NOLINT(google-explicit-constructor)
  ConvPadding(std::string m) : mode(std::move(m)) {}            // NOLINT(google-explicit-constructor)
};

/// 1-D convolution: input (N, C_in, L), weight (C_out, C_in / groups, k), bias (C_out).
[[nodiscard]] Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Ints& stride = 1,
                            const ConvPadding& padding = 0, const Ints& dilation = 1, int64_t groups = 1);
/// 2-D convolution: input (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW).
[[nodiscard]] Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Ints& stride = 1,
                            const ConvPadding& padding = 0, const Ints& dilation = 1, int64_t groups = 1);
/// 3-D convolution: input (N, C_in, D, H, W), weight (C_out, C_in / groups, kD, kH, kW).
[[nodiscard]] Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Ints& stride = 1,
                            const ConvPadding& padding = 0, const Ints& dilation = 1, int64_t groups = 1);
/// 1-D transposed convolution: weight (C_in, C_out / groups, k).
[[nodiscard]] Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                      const Ints& stride = 1, const Ints& padding = 0, const Ints& output_padding = 0,
                                      int64_t groups = 1, const Ints& dilation = 1);
/// 2-D transposed convolution: weight (C_in, C_out / groups, kH, kW).
[[nodiscard]] Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                      const Ints& stride = 1, const Ints& padding = 0, const Ints& output_padding = 0,
                                      int64_t groups = 1, const Ints& dilation = 1);
/// 3-D transposed convolution: weight (C_in, C_out / groups, kD, kH, kW).
[[nodiscard]] Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                      const Ints& stride = 1, const Ints& padding = 0, const Ints& output_padding = 0,
                                      int64_t groups = 1, const Ints& dilation = 1);

/// Max pooling; `stride` defaults to kernel_size; padding (implicit -inf) is
/// at most half the kernel; ceil_mode rounds the output extent up.
[[nodiscard]] Tensor max_pool1d(const Tensor& input, const Ints& kernel_size, const Ints& stride = {},
                                const Ints& padding = 0, const Ints& dilation = 1, bool ceil_mode = false);
/// 2-D max pooling (see max_pool1d).
[[nodiscard]] Tensor max_pool2d(const Tensor& input, const Ints& kernel_size, const Ints& stride = {},
                                const Ints& padding = 0, const Ints& dilation = 1, bool ceil_mode = false);
/// 3-D max pooling (see max_pool1d).
[[nodiscard]] Tensor max_pool3d(const Tensor& input, const Ints& kernel_size, const Ints& stride = {},
                                const Ints& padding = 0, const Ints& dilation = 1, bool ceil_mode = false);
/// Max pooling and the index of each maximum within its input plane (i64,
/// PyTorch's return_indices=True): {values, indices}.
[[nodiscard]] std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, const Ints& kernel_size,
                                                                const Ints& stride = {}, const Ints& padding = 0,
                                                                const Ints& dilation = 1, bool ceil_mode = false);
/// 2-D max_pool with indices (see max_pool1d_with_indices).
[[nodiscard]] std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Ints& kernel_size,
                                                                const Ints& stride = {}, const Ints& padding = 0,
                                                                const Ints& dilation = 1, bool ceil_mode = false);
/// 3-D max_pool with indices (see max_pool1d_with_indices).
[[nodiscard]] std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, const Ints& kernel_size,
                                                                const Ints& stride = {}, const Ints& padding = 0,
                                                                const Ints& dilation = 1, bool ceil_mode = false);
/// Average pooling; count_include_pad counts the zero padding in the
/// divisor; divisor_override replaces the divisor.
[[nodiscard]] Tensor avg_pool1d(const Tensor& input, const Ints& kernel_size, const Ints& stride = {},
                                const Ints& padding = 0, bool ceil_mode = false, bool count_include_pad = true);
/// 2-D average pooling (see avg_pool1d).
[[nodiscard]] Tensor avg_pool2d(const Tensor& input, const Ints& kernel_size, const Ints& stride = {},
                                const Ints& padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                                std::optional<int64_t> divisor_override = std::nullopt);
/// 3-D average pooling (see avg_pool1d).
[[nodiscard]] Tensor avg_pool3d(const Tensor& input, const Ints& kernel_size, const Ints& stride = {},
                                const Ints& padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                                std::optional<int64_t> divisor_override = std::nullopt);
/// Adaptive average pooling to `output_size` (windows [floor(i*L/n), ceil((i+1)*L/n))).
[[nodiscard]] Tensor adaptive_avg_pool1d(const Tensor& input, const Ints& output_size);
/// 2-D adaptive average pooling.
[[nodiscard]] Tensor adaptive_avg_pool2d(const Tensor& input, const Ints& output_size);
/// 3-D adaptive average pooling.
[[nodiscard]] Tensor adaptive_avg_pool3d(const Tensor& input, const Ints& output_size);
/// Adaptive max pooling.
[[nodiscard]] Tensor adaptive_max_pool1d(const Tensor& input, const Ints& output_size);
/// 2-D adaptive max pooling.
[[nodiscard]] Tensor adaptive_max_pool2d(const Tensor& input, const Ints& output_size);
/// Adaptive max pooling and the indices of the maxima: {values, indices}.
[[nodiscard]] std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input, const Ints& output_size);
/// 2-D adaptive max pooling with indices.
[[nodiscard]] std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, const Ints& output_size);

/// The general convolution behind conv*d and conv_transpose*d, with
/// explicit pads before and after each axis (ONNX's pads, auto_pad). The
/// number of spatial axes is the weight's rank - 2; empty vectors mean
/// stride 1, no padding, dilation 1, no output padding.
struct ConvOptions {
  std::vector<int64_t> stride;
  std::vector<int64_t> pad_begin;
  std::vector<int64_t> pad_end;
  std::vector<int64_t> dilation;
  std::vector<int64_t> output_padding;  ///< transposed only
  int64_t groups = 1;
  bool transposed = false;
};
/// Convolution with per-axis begin/end pads (see ConvOptions).
[[nodiscard]] Tensor conv(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvOptions& options);

/// The general windowed pooling behind max_pool*d and avg_pool*d: one entry
/// per spatial axis in kernel_size (which sets their number); empty vectors
/// mean stride = kernel_size, no padding, dilation 1.
struct PoolOptions {
  std::vector<int64_t> kernel_size;
  std::vector<int64_t> stride;
  std::vector<int64_t> pad_begin;
  std::vector<int64_t> pad_end;
  std::vector<int64_t> dilation;  ///< max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;            ///< average pooling only
  std::optional<int64_t> divisor_override;  ///< average pooling only
};
/// Max pooling with per-axis begin/end pads (see PoolOptions).
[[nodiscard]] Tensor max_pool(const Tensor& input, const PoolOptions& options);
/// Max pooling with per-axis pads, and the indices of the maxima.
[[nodiscard]] std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& input, const PoolOptions& options);
/// Average pooling with per-axis begin/end pads (see PoolOptions).
[[nodiscard]] Tensor avg_pool(const Tensor& input, const PoolOptions& options);

// --- normalisation and attention ----------------------------------------------

/// Batch normalisation with running statistics (inference):
/// (x - running_mean[c]) / sqrt(running_var[c] + eps) * weight[c] + bias[c]
/// over channel axis 1 of input [N, C, ...]. training = true is refused
/// (no batch statistics); momentum only matters in training and is ignored.
[[nodiscard]] Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                                double momentum = 0.1, double eps = 1e-5);
/// Normalises over the trailing axes `normalized_shape` (biased variance);
/// weight and bias, when given, have that shape.
[[nodiscard]] Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape,
                                const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);
/// Normalises input [N, C, ...] over `num_groups` groups of channels; weight
/// and bias, when given, are per channel [C].
[[nodiscard]] Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = {},
                                const Tensor& bias = {}, double eps = 1e-5);
/// x / sqrt(mean(x^2 over normalized_shape) + eps) * weight (PyTorch 2.x's
/// rms_norm; eps defaults to the dtype's machine epsilon, as there).
[[nodiscard]] Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape,
                              const Tensor& weight = {}, std::optional<double> eps = std::nullopt);
/// softmax(q k^T * scale + mask) v for q [..., L, E], k [..., S, E],
/// v [..., S, Ev] (PyTorch 2.x's function; batch axes equal). A bool mask
/// keeps where true, a floating one is added; is_causal keeps key j <= query
/// i (not together with a mask); scale defaults to 1/sqrt(E); dropout_p must
/// be 0. Never holds the whole score matrix: memory grows with L + S, not L*S.
[[nodiscard]] Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                  const Tensor& attn_mask = {}, double dropout_p = 0,
                                                  bool is_causal = false, std::optional<double> scale = std::nullopt);
/// i64 one-hot rows of an i64 tensor: out[..., c] = (x[...] == c); with
/// num_classes = -1 the class count is max(x) + 1 (a read of x). Values
/// outside [0, num_classes) fail (as PyTorch).
[[nodiscard]] Tensor one_hot(const Tensor& tensor, int64_t num_classes = -1);
/// weight[input] for an integer input of any shape: rows of weight
/// [num_embeddings, D], giving input.shape + [D]. padding_idx only affects
/// gradients in PyTorch, so the forward pass ignores it (it is checked).
[[nodiscard]] Tensor embedding(const Tensor& input, const Tensor& weight,
                               std::optional<int64_t> padding_idx = std::nullopt);

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
/// scale the sampling uses, as PyTorch without recompute_scale_factor
/// (except that the linear modes copy an axis whose extent stays, as
/// PyTorch 1.13's kernels do; nearest samples it through 1 / factor).
/// `align_corners` only with the linear modes (default false).
[[nodiscard]] Tensor interpolate(const Tensor& input, const std::vector<int64_t>& size,
                                 const std::vector<double>& scale_factor = {}, const std::string& mode = "nearest",
                                 std::optional<bool> align_corners = std::nullopt);

}  // namespace switchyard::nn
