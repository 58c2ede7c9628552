// SPDX-License-Identifier: Apache-2.0
// Bulk conversions between the 16-bit floats and f32: every f16/bf16 op on
// this backend widens its operands and narrows its result, so these loops
// are its bandwidth. f16 uses the F16C instructions (vcvtph2ps/vcvtps2ph,
// round to nearest even, subnormals kept) when the CPU has them, chosen at
// run time, not by -march; bf16 is integer arithmetic the compiler
// vectorises, for each instruction-set level (isa_clones.hpp). Both give exactly sy::Half's / sy::BFloat16's results.

#include "backends/cpu/half_convert.hpp"

#include <cstring>

#include "backends/cpu/isa_clones.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SY_HAVE_F16C_PATH 1
#endif

namespace switchyard::backends::cpu {
namespace {

#ifdef SY_HAVE_F16C_PATH
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = Half(src[i]);
}

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

}  // namespace

void f16_to_f32(const Half* src, float* dst, int64_t n) {
#ifdef SY_HAVE_F16C_PATH
  if (cpu_has_f16c()) return f16_to_f32_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void f32_to_f16(const float* src, Half* dst, int64_t n) {
#ifdef SY_HAVE_F16C_PATH
  if (cpu_has_f16c()) return f32_to_f16_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
}

SWITCHYARD_ISA_CLONES void bf16_to_f32(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i].bits) << 16;
    std::memcpy(dst + i, &bits, sizeof bits);
  }
}

SWITCHYARD_ISA_CLONES void f32_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  // BFloat16(float) without its branch, so that the loop vectorises.
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x = 0;
    std::memcpy(&x, src + i, sizeof x);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (x >> 16) | 0x40u;
    dst[i].bits = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

}  // namespace switchyard::backends::cpu
