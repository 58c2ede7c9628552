// SPDX-License-Identifier: Apache-2.0
#pragma once

// Ops heading fused chains (Backend::fusible_head): in a CNN a convolution's
// result is read once, by a relu or a residual add and relu; in an MLP or a
// transformer's feed-forward block a linear layer's result by a relu or a
// residual add. Applied in the GEMM's store they cost no pass over memory
// and no op of their own (ResNet-18: 17 relus and 8 adds on activations of
// up to 3 MiB per image; an MLP of three layers: 2 of its 5 ops).

#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/kernels.hpp"

namespace switchyard::backends::cpu {

/// Whether `op` may head a fused chain: an f32 forward convolution that
/// runs on the native GEMM (not depthwise, not empty), which can apply what
/// follows it as it stores its sums.
[[nodiscard]] bool conv_fusible_head(const ConvOp& op);

/// The convolution `op` (inputs as conv() takes them) with `ep` applied to
/// its result as it is stored; `add` (the op's output shape, f32, not
/// overlapping the output) when the epilogue adds a tensor. With the native
/// GEMM switched off since the chain was planned, the epilogue runs as a
/// pass of its own after the unfused kernel: the same bits either way.
Expected<Bytes> conv_fused(Context& ctx, ConvOp& op, const Inputs& in, const float* add, F32GemmEpilogue ep);

/// Whether `op` may head a fused chain: an f32 matmul (a linear layer
/// included, its bias one value per column) that runs on the native GEMM.
[[nodiscard]] bool matmul_fusible_head(const MatmulOp& op);

/// The matmul `op` with its bias, then `ep`, applied as it is stored; as
/// conv_fused otherwise.
Expected<Bytes> matmul_fused(Context& ctx, MatmulOp& op, const Inputs& in, const float* add, F32GemmEpilogue ep);

}  // namespace switchyard::backends::cpu
