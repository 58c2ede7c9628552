// SPDX-License-Identifier: Apache-2.0
#pragma once

// The 16 x 16 transpose of 32-bit lanes that the native GEMMs' packing
// shares: bf16_gemm.cpp moves bf16 k pairs with it, f32_gemm.cpp floats.
// Only for code compiled for AVX-512F or more (a target attribute that
// includes avx512f); include after the pragma that silences GCC 12's
// -Wmaybe-uninitialized inside the intrinsics (see bf16_gemm.cpp).

#if defined(__x86_64__)
#include <cstddef>
#include <immintrin.h>

namespace switchyard::backends::cpu {

/// r[t] (16 lanes of 32 bits) becomes column t of the 16 x 16 matrix the
/// rows r[0..15] form.
__attribute__((target("avx512f"))) inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (std::ptrdiff_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // s[4i + c], 128-bit lane L: rows 4i..4i+3 of column 4L + c.
  __m512i s[16];
  for (int i = 0; i < 4; ++i) {
    s[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    s[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    s[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    s[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i p0 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0x44);
    const __m512i p1 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0xee);
    const __m512i p2 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0x44);
    const __m512i p3 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(p0, p2, 0x88);
    r[c + 4] = _mm512_shuffle_i32x4(p0, p2, 0xdd);
    r[c + 8] = _mm512_shuffle_i32x4(p1, p3, 0x88);
    r[c + 12] = _mm512_shuffle_i32x4(p1, p3, 0xdd);
  }
}

}  // namespace switchyard::backends::cpu
#endif
