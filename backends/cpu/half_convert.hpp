// SPDX-License-Identifier: Apache-2.0
#pragma once

// Bulk f16/bf16 <-> f32 conversions with sy::Half's and sy::BFloat16's
// exact results (vectorised; F16C chosen at run time).

#include <cstdint>

#include "switchyard/messages/half.hpp"

namespace switchyard::backends::cpu {

void f16_to_f32(const Half* src, float* dst, int64_t n);
void f32_to_f16(const float* src, Half* dst, int64_t n);
void bf16_to_f32(const BFloat16* src, float* dst, int64_t n);
void f32_to_bf16(const float* src, BFloat16* dst, int64_t n);

}  // namespace switchyard::backends::cpu
