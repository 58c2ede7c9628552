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

}  // namespace switchyard::nn
