// SPDX-License-Identifier: Apache-2.0
#pragma once

// Depthwise f32 convolution (one input channel per group, MobileNet's 3x3
// layers) on AVX-512F: a direct kernel that holds a row segment of up to 64
// outputs in zmm registers, starts it at the bias and adds every tap into it
// before one store. Runs with the native f32 GEMM's switch
// (native_f32_gemm_enabled(): SWITCHYARD_CPU_F32_GEMM=0 turns both off).

#include <cstdint>

#include "backends/common/conv_shapes.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace switchyard::backends::cpu {

/// y = bias + conv(x, w) for a forward conv with one input channel per
/// group, over 1 or 2 spatial axes, column stride 1 or 2 (any row stride,
/// padding, dilation, kernel size or channel multiplier). Every output
/// element is written. Taps over the padding are left out of the sums, as
/// the reference backend does (an Inf weight there gives no NaN). False
/// (nothing written) when the kernel is off or the geometry is another.
[[nodiscard]] bool depthwise_f32(ThreadPool& pool, const ConvGeometry& g, const float* x, const float* w,
                                 const float* bias, float* y);

/// How many convolutions depthwise_f32 has run in this process (the tests
/// check that the path they mean to test ran).
[[nodiscard]] uint64_t native_depthwise_f32_runs() noexcept;

}  // namespace switchyard::backends::cpu
