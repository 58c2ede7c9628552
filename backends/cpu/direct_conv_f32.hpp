// SPDX-License-Identifier: Apache-2.0
#pragma once

// Direct f32 convolution on AVX-512F for the dense 2-D layers of CNNs
// (ResNet's 3x3 and strided layers): output channels across the vector
// lanes, a row of output positions in registers, the image read where it
// lies. The native GEMM (f32_gemm.cpp) packs a column matrix from the image
// for every tile and every call and runs its 32-wide register tiles across
// output positions, which leave lanes idle on 7x7 and 14x14 planes; here
// nothing of the image is packed, and the only per-call packing is one
// panel of weights per block of 32 output channels, kept in L2 while every
// position of the block runs against it. Runs with the native f32 GEMM's
// switch (SWITCHYARD_CPU_F32_GEMM=0 turns both off) and has its own,
// SWITCHYARD_CPU_DIRECT_CONV=0, so the two paths can be compared.

#include <cstdint>

#include "backends/common/conv_shapes.hpp"
#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/kernels.hpp"

namespace switchyard::backends::cpu {

/// Whether direct_conv_f32 runs at all: AVX-512F, the native f32 GEMM on,
/// and not switched off (SWITCHYARD_CPU_DIRECT_CONV, set_direct_conv_f32).
[[nodiscard]] bool direct_conv_f32_enabled() noexcept;

/// Switches the kernel on or off for the process and returns the previous
/// setting (tests and benchmarks compare it with the GEMM path).
bool set_direct_conv_f32(bool on) noexcept;

/// How many convolutions the kernel has run in this process.
[[nodiscard]] uint64_t direct_conv_f32_runs() noexcept;
/// How many of them read their weights' packing kept from an earlier call.
[[nodiscard]] uint64_t direct_conv_f32_kept_runs() noexcept;

/// y = bias + conv(x, w), then `ep` (with `add` laid out as y), for a
/// forward, ungrouped convolution over 1 or 2 spatial axes with stride 1 or
/// 2 on both, no dilation, at least 16 output channels, and not pointwise
/// (1x1, stride 1, no padding: a plain GEMM does that). Every product of
/// the sum is taken, the padding's zeros included, in the native GEMM's
/// order, so the bits are the native GEMM path's. False (nothing written)
/// when the kernel is off or the geometry is another. `weight_block`, when
/// given, is the block `w` lies in, for the packing kept between calls
/// (ctx.packed); the caller leaves it null for a weight it may overwrite.
[[nodiscard]] bool direct_conv_f32(Context& ctx, const ConvGeometry& g, const float* x, const float* w,
                                   const float* bias, float* y, const float* add, F32GemmEpilogue ep,
                                   const Bytes* weight_block = nullptr);

}  // namespace switchyard::backends::cpu
