// SPDX-License-Identifier: Apache-2.0
// Convolution on the CPU. Three paths, picked per op:
//  - 1x1 kernels with stride 1 and no padding are a plain GEMM per image
//    and group (the input already is the column matrix);
//  - depthwise-like ops (one input channel per group) run a direct kernel,
//    parallel over output planes: their GEMMs would be 1 x K x P, all
//    overhead (f32 on AVX-512F: depthwise_f32.cpp, register-blocked);
//  - everything else goes through im2col in tiles of output positions whose
//    column matrix fits in cache, each tile one OpenBLAS GEMM.
// f32 convolutions on a CPU with AVX-512F take other kernels: the dense
// 1-D and 2-D ones (ungrouped, stride 1 or 2, no dilation: ResNet's 3x3,
// stem and downsampling layers) a direct kernel (direct_conv_f32.cpp) that
// packs nothing of the image; the rest of the first and last paths' ops one
// call of the native GEMM (f32_gemm.cpp) per op, over every image and
// group, with the bias as the sums' start; its B panels are packed straight
// from the image (implicit im2col), so no column matrix is written: with
// stride 1 and the input's extent as masked shifted rows of the image,
// otherwise through im2col_rows a few rows at a time. Both give the same
// bits (the same products, summed in the same order).
// Transposed convolution is one GEMM (W^T X) per image and group followed by
// col2im, a scatter-add parallel over output channels (each thread owns its
// planes, so no two threads write one element).
// The im2col/col2im loops run on the device's pool; the GEMMs on OpenBLAS's
// threads, which the backend limits to the pool's size (see cpu_backend.cpp),
// so both phases use the same cores and never both at once.

#include <algorithm>
#include <cblas.h>
#include <cstring>
#include <vector>

#include "backends/common/conv_geometry.hpp"
#include "backends/cpu/chain_heads.hpp"
#include "backends/cpu/depthwise_f32.hpp"
#include "backends/cpu/direct_conv_f32.hpp"
#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/kernels.hpp"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define SY_CONV_AVX512 1
#include <immintrin.h>
#endif

namespace switchyard::backends::cpu {
namespace {

// Bytes of one im2col tile. Measured on this 2-core EPYC (bench/conv_bench,
// 3x3 64ch 56x56): 128 KiB tiles made GEMMs too thin (4x slower), 512 KiB to
// 4 MiB were within noise, so 2 MiB: the two cores' L2 together, few GEMM
// calls per image, and a bounded scratch buffer for large images.
constexpr int64_t tile_bytes = int64_t{1} << 21;

template <class T>
void gemm(bool trans_a, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
          int64_t ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto bm = static_cast<blasint>(m), bn = static_cast<blasint>(n), bk = static_cast<blasint>(k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, CblasNoTrans, bm, bn, bk, 1.0f, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, CblasNoTrans, bm, bn, bk, 1.0, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// Output positions o in [lo, hi) of one axis whose input position
// o * stride + offset lies in [0, extent).
void valid_range(int64_t offset, int64_t stride, int64_t extent, int64_t outs, int64_t& lo, int64_t& hi) {
  // o * stride + offset >= 0  <=>  o >= ceil(-offset / stride)
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // o * stride + offset <= extent - 1
  const int64_t top = extent - 1 - offset;
  hi = top < 0 ? 0 : top / stride + 1;
  lo = std::min(lo, outs);
  hi = std::clamp(hi, lo, outs);
}

// Output position p as (o0, o1, o2), and the step to the next output line.
struct Position {
  int64_t o0 = 0, o1 = 0, o2 = 0;
  Position(const ConvGeometry& g, int64_t p)
      : o0(p / (g.out[1] * g.out[2])), o1(p / g.out[2] % g.out[1]), o2(p % g.out[2]) {}
  void next_line(const ConvGeometry& g) {
    o2 = 0;
    if (++o1 == g.out[1]) {
      o1 = 0;
      ++o0;
    }
  }
};

// Whether every axis has stride 1 and the output's extent: column row
// (c, k) is then the input plane shifted by one offset, but for the
// positions whose tap falls in the padding.
bool same_shape_stride1(const ConvGeometry& g) {
  for (int a = 0; a < 3; ++a)
    if (g.stride[a] != 1 || g.in[a] != g.out[a]) return false;
  return true;
}

#ifdef SY_CONV_AVX512
// dst[i] = src[2 i] for i < n, 16 at a time: two loads, one permute. A
// stride-2 layer's column rows (ResNet's 7x7 stem: 147 rows of 12,544
// positions per image) were copied element by element, 8% of ResNet-18.
// The loads are masked to the elements read, so none passes src[2 (n - 1)].
__attribute__((target("avx512f"))) void copy_even_avx512(const float* src, float* dst, int64_t n) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 lo = _mm512_loadu_ps(src + 2 * i);
    const __m512 hi = _mm512_maskz_loadu_ps(0x7fff, src + 2 * i + 16);
    _mm512_storeu_ps(dst + i, _mm512_permutex2var_ps(lo, even, hi));
  }
  if (i < n) {
    const int64_t reads = 2 * (n - i) - 1;
    const auto mask = [](int64_t k) {
      return k >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(k, 0)) - 1u);
    };
    const __m512 lo = _mm512_maskz_loadu_ps(mask(reads), src + 2 * i);
    const __m512 hi = _mm512_maskz_loadu_ps(mask(reads - 16), src + 2 * i + 16);
    _mm512_mask_storeu_ps(dst + i, mask(n - i), _mm512_permutex2var_ps(lo, even, hi));
  }
}
#endif

// dst[i] = src[stride i] for i < n where a vector kernel does it (f32,
// stride 2, AVX-512F); false, with nothing written, elsewhere.
template <class T>
bool copy_every_other(int64_t stride, const T* src, T* dst, int64_t n) {
#ifdef SY_CONV_AVX512
  if constexpr (std::is_same_v<T, float>) {
    if (stride == 2 && cpu_has_avx512f()) {
      copy_even_avx512(src, dst, n);
      return true;
    }
  }
#endif
  (void)stride, (void)src, (void)dst, (void)n;
  return false;
}

// Fills rows [r0, r1) of the column matrix for output positions
// [p0, p0 + cols), row r at dst + (r - r0) * ld: row r = (c, k0, k1, k2)
// holds x[c, o * stride - pad + k * dilation]. Walks the positions one
// output line (fixed o0, o1) at a time, without a division per line: the
// native GEMM calls this for a few rows of a few hundred positions at a
// time, so its cost per element competes with the multiply-adds.
template <class T>
void im2col_rows(const ConvGeometry& g, const T* x, int64_t r0, int64_t r1, int64_t p0, int64_t cols, T* dst_rows,
                 int64_t ld) {
  const int64_t ksize = g.kernel_size();
  const bool same = same_shape_stride1(g);
  const Position first(g, p0);
  const int64_t end = p0 + cols;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / ksize;
    int64_t k = r % ksize;
    const int64_t k2 = k % g.kernel[2];
    k /= g.kernel[2];
    const int64_t k1 = k % g.kernel[1];
    const int64_t k0 = k / g.kernel[1];
    const T* plane = x + c * g.in_plane();
    T* dst = dst_rows + (r - r0) * ld;
    const int64_t off0 = k0 * g.dilation[0] - g.pad[0];
    const int64_t off1 = k1 * g.dilation[1] - g.pad[1];
    const int64_t off2 = k2 * g.dilation[2] - g.pad[2];
    int64_t lo2 = 0, hi2 = 0;
    valid_range(off2, g.stride[2], g.in[2], g.out[2], lo2, hi2);
    if (same) {
      // One copy of the shifted plane, then zeros where the tap is in the
      // padding (and where the copy wrapped into a neighbouring line).
      const int64_t delta = (off0 * g.in[1] + off1) * g.in[2] + off2;
      const int64_t a = std::clamp(-delta, p0, end), b = std::clamp(g.in_plane() - delta, a, end);
      std::fill(dst, dst + (a - p0), T(0));
      std::memcpy(dst + (a - p0), plane + a + delta, static_cast<size_t>(b - a) * sizeof(T));
      std::fill(dst + (b - p0), dst + cols, T(0));
    }
    Position o = first;
    for (int64_t p = p0; p < end; o.next_line(g)) {
      const int64_t o2_end = std::min(g.out[2], o.o2 + (end - p));
      T* d = dst + (p - p0) - o.o2;  // d[o2] is position (o0, o1, o2)
      const int64_t i0 = o.o0 * g.stride[0] + off0;
      const int64_t i1 = o.o1 * g.stride[1] + off1;
      if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
        std::fill(d + o.o2, d + o2_end, T(0));
      } else {
        const int64_t a = std::max(o.o2, lo2), b = std::min(o2_end, hi2);
        if (a >= b) {
          std::fill(d + o.o2, d + o2_end, T(0));
        } else {
          std::fill(d + o.o2, d + a, T(0));
          if (!same) {
            const T* src = plane + (i0 * g.in[1] + i1) * g.in[2] + off2;  // src[o2 * stride]
            if (g.stride[2] == 1)
              std::memcpy(d + a, src + a, static_cast<size_t>(b - a) * sizeof(T));
            else if (!copy_every_other(g.stride[2], src + a * g.stride[2], d + a, b - a))
              for (int64_t o2 = a; o2 < b; ++o2) d[o2] = src[o2 * g.stride[2]];
          }
          std::fill(d + b, d + o2_end, T(0));
        }
      }
      p += o2_end - o.o2;
    }
  }
}

// The column matrix's rows for output positions [p0, p0 + cols), in
// parallel over rows.
template <class T>
void im2col(Context& ctx, const ConvGeometry& g, const T* x, int64_t channels, int64_t p0, int64_t cols, T* col) {
  const int64_t rows = channels * g.kernel_size();
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(cols, 1));
  ctx.pool.parallel_for(rows, grain,
                        [&](int64_t rb, int64_t re) { im2col_rows(g, x, rb, re, p0, cols, col + rb * cols, cols); });
}

// Output channels start at their bias (or zero); the GEMMs then accumulate.
template <class T>
void init_output(Context& ctx, T* y, const T* bias, int64_t batch, int64_t channels, int64_t plane) {
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(plane, 1));
  ctx.pool.parallel_for(batch * channels, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::fill(y + i * plane, y + (i + 1) * plane, bias ? bias[i % channels] : T(0));
  });
}

// One input channel per group: each output plane is a sum of K shifted,
// scaled copies of one input plane.
template <class T>
void depthwise(Context& ctx, const ConvGeometry& g, const T* x, const T* w, T* y) {
  const int64_t cog = g.c_out_group();
  const int64_t ksize = g.kernel_size();
  const int64_t planes = g.batch * g.c_out;
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(g.out_plane() * ksize, 1));
  ctx.pool.parallel_for(planes, grain, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const int64_t n = pl / g.c_out, co = pl % g.c_out;
      const T* xin = x + (n * g.c_in + co / cog) * g.in_plane();
      const T* wk = w + co * ksize;
      T* out = y + pl * g.out_plane();
      for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
        for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
          const int64_t off0 = k0 * g.dilation[0] - g.pad[0];
          const int64_t off1 = k1 * g.dilation[1] - g.pad[1];
          const T* wrow = wk + (k0 * g.kernel[1] + k1) * g.kernel[2];
          int64_t lo0, hi0, lo1, hi1;
          valid_range(off0, g.stride[0], g.in[0], g.out[0], lo0, hi0);
          valid_range(off1, g.stride[1], g.in[1], g.out[1], lo1, hi1);
          if (g.kernel[2] == 3 && g.stride[2] == 1) {
            // The common 3-wide row: one pass over each output row adds all
            // three taps where they all hit the input, the edges tap by tap.
            int64_t lo[3], hi[3], off[3];
            for (int k2 = 0; k2 < 3; ++k2) {
              off[k2] = k2 * g.dilation[2] - g.pad[2];
              valid_range(off[k2], 1, g.in[2], g.out[2], lo[k2], hi[k2]);
            }
            const int64_t a = std::max({lo[0], lo[1], lo[2]});
            const int64_t b = std::max(a, std::min({hi[0], hi[1], hi[2]}));
            const T w0 = wrow[0], w1 = wrow[1], w2 = wrow[2];
            for (int64_t o0 = lo0; o0 < hi0; ++o0)
              for (int64_t o1 = lo1; o1 < hi1; ++o1) {
                const T* src = xin + ((o0 * g.stride[0] + off0) * g.in[1] + o1 * g.stride[1] + off1) * g.in[2];
                T* dst = out + (o0 * g.out[1] + o1) * g.out[2];
                const T *s0 = src + off[0], *s1 = src + off[1], *s2 = src + off[2];
                for (int64_t o2 = a; o2 < b; ++o2) dst[o2] += w0 * s0[o2] + w1 * s1[o2] + w2 * s2[o2];
                for (int k2 = 0; k2 < 3; ++k2) {
                  const T* sk = src + off[k2];
                  const T wv = wrow[k2];
                  for (int64_t o2 = lo[k2]; o2 < std::min(a, hi[k2]); ++o2) dst[o2] += wv * sk[o2];
                  for (int64_t o2 = std::max(b, lo[k2]); o2 < hi[k2]; ++o2) dst[o2] += wv * sk[o2];
                }
              }
            continue;
          }
          for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
            const T wv = wrow[k2];
            const int64_t off2 = k2 * g.dilation[2] - g.pad[2];
            int64_t lo2, hi2;
            valid_range(off2, g.stride[2], g.in[2], g.out[2], lo2, hi2);
            for (int64_t o0 = lo0; o0 < hi0; ++o0)
              for (int64_t o1 = lo1; o1 < hi1; ++o1) {
                const T* src = xin + ((o0 * g.stride[0] + off0) * g.in[1] + o1 * g.stride[1] + off1) * g.in[2] + off2;
                T* dst = out + (o0 * g.out[1] + o1) * g.out[2];
                if (g.stride[2] == 1)
                  for (int64_t o2 = lo2; o2 < hi2; ++o2) dst[o2] += wv * src[o2];
                else
                  for (int64_t o2 = lo2; o2 < hi2; ++o2) dst[o2] += wv * src[o2 * g.stride[2]];
              }
          }
        }
    }
  });
}

bool pointwise(const ConvGeometry& g) {
  bool p = g.kernel_size() == 1;
  for (int a = 0; a < 3; ++a) p = p && g.stride[a] == 1 && g.pad[a] == 0 && g.in[a] == g.out[a];
  return p;
}

// Sets bits [begin, end) of a mask of 16-bit words, whole words at a time
// (per call this runs over every output position for each tap: bit by bit
// it was 3% of a 64-channel 56x56 layer).
void set_bits(uint16_t* mask, int64_t begin, int64_t end) {
  if (begin >= end) return;
  const auto bits = [](int64_t lo, int64_t hi) {  // bits [lo, hi) of one word, 0 <= lo < hi <= 16
    return static_cast<uint16_t>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  };
  const int64_t first = begin / 16, last = (end - 1) / 16;
  if (first == last) {
    mask[first] = static_cast<uint16_t>(mask[first] | bits(begin % 16, (end - 1) % 16 + 1));
    return;
  }
  mask[first] = static_cast<uint16_t>(mask[first] | bits(begin % 16, 16));
  std::fill(mask + first + 1, mask + last, uint16_t{0xffff});
  mask[last] = static_cast<uint16_t>(mask[last] | bits(0, (end - 1) % 16 + 1));
}

// y = bias + conv(x, w) on the native f32 GEMM: per image and group, C
// (c_out/groups x output positions) = W_g (c_out/groups x c_in/groups * K)
// times the column matrix, which the GEMM packs from the image block by
// block (or reads as it is, for a pointwise conv), then `ep` applied as the
// sums are stored (`add` laid out as y). False when the kernel is off.
// `weight_block`: see direct_conv_f32.
bool forward_native(Context& ctx, const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y,
                    const float* add = nullptr, F32GemmEpilogue ep = {}, const Bytes* weight_block = nullptr) {
  if (direct_conv_f32(ctx, g, x, w, bias, y, add, ep, weight_block)) return true;
  const int64_t cig = g.c_in_group(), cog = g.c_out_group();
  const int64_t rows = cig * g.kernel_size();
  const int64_t out_plane = g.out_plane();
  F32Gemm gemm;
  gemm.m = cog;
  gemm.n = out_plane;
  gemm.k = rows;
  gemm.batches = g.batch * g.groups;
  gemm.lda = rows;
  gemm.ldc = out_plane;
  const auto image = [&g, x, cig](int64_t entry) {
    return x + ((entry / g.groups) * g.c_in + (entry % g.groups) * cig) * g.in_plane();
  };
  // Stride 1 with the input's extent: column row (c, k) is the image's
  // plane c shifted by tap k's offset, zero where that tap is in the padding.
  const bool shifted = !pointwise(g) && same_shape_stride1(g);
  const int64_t ksize = g.kernel_size();
  std::vector<int64_t> row_offset(shifted ? static_cast<size_t>(rows) : 0);
  std::vector<int32_t> row_class(row_offset.size());
  const int64_t mask_words = (out_plane + 15) / 16;
  std::vector<uint16_t> row_mask(shifted ? static_cast<size_t>(ksize * mask_words) : 0);
  if (pointwise(g)) {
    gemm.ldb = out_plane;
  } else if (shifted) {
    for (int64_t k = 0; k < ksize; ++k) {
      const int64_t k2 = k % g.kernel[2], k1 = k / g.kernel[2] % g.kernel[1], k0 = k / g.kernel[2] / g.kernel[1];
      const int64_t off[3] = {k0 * g.dilation[0] - g.pad[0], k1 * g.dilation[1] - g.pad[1],
                              k2 * g.dilation[2] - g.pad[2]};
      int64_t lo[3], hi[3];
      for (int a = 0; a < 3; ++a) valid_range(off[a], 1, g.in[a], g.out[a], lo[a], hi[a]);
      uint16_t* mask = row_mask.data() + k * mask_words;
      for (int64_t o0 = lo[0]; o0 < hi[0]; ++o0)
        for (int64_t o1 = lo[1]; o1 < hi[1]; ++o1) {
          const int64_t line = (o0 * g.out[1] + o1) * g.out[2];
          set_bits(mask, line + lo[2], line + hi[2]);
        }
      const int64_t delta = (off[0] * g.in[1] + off[1]) * g.in[2] + off[2];
      for (int64_t c = 0; c < cig; ++c) {
        row_offset[static_cast<size_t>(c * ksize + k)] = c * g.in_plane() + delta;
        row_class[static_cast<size_t>(c * ksize + k)] = static_cast<int32_t>(k);
      }
    }
    gemm.row_offset = row_offset.data();
    gemm.row_class = row_class.data();
    gemm.row_mask = row_mask.data();
    gemm.mask_words = mask_words;
  } else {
    gemm.fill_b = [&g, image](int64_t entry, int64_t p0, int64_t p1, int64_t j0, int64_t j1, float* dst, int64_t ld) {
      im2col_rows(g, image(entry), p0, p1, j0, j1 - j0, dst, ld);
    };
  }
  gemm.epilogue = ep;
  gemm.locate = [&](int64_t entry) {
    const int64_t n = entry / g.groups, grp = entry % g.groups;
    const int64_t at = (n * g.c_out + grp * cog) * out_plane;
    return F32GemmOperands{w + grp * cog * rows, image(entry), y + at, bias == nullptr ? nullptr : bias + grp * cog,
                           add == nullptr ? nullptr : add + at};
  };
  return gemm_f32(ctx.pool, gemm);
}

template <class T>
void forward(Context& ctx, const ConvGeometry& g, const T* x, const T* w, T* y) {
  const int64_t cig = g.c_in_group(), cog = g.c_out_group();
  const int64_t ksize = g.kernel_size();
  const int64_t out_plane = g.out_plane();
  if (pointwise(g)) {
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp)
        gemm<T>(false, cog, out_plane, cig, w + grp * cog * cig, cig, x + (n * g.c_in + grp * cig) * g.in_plane(),
                out_plane, T(1), y + (n * g.c_out + grp * cog) * out_plane, out_plane);
    return;
  }
  const int64_t rows = cig * ksize;
  const int64_t tile = std::clamp<int64_t>(tile_bytes / static_cast<int64_t>(sizeof(T)) / std::max<int64_t>(rows, 1),
                                           std::min<int64_t>(out_plane, 64), out_plane);
  auto scratch = ctx.buffers.allocate(static_cast<size_t>(rows * tile) * sizeof(T));
  T* col = writable<T>(scratch);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* xg = x + (n * g.c_in + grp * cig) * g.in_plane();
      const T* wg = w + grp * cog * rows;
      T* yg = y + (n * g.c_out + grp * cog) * out_plane;
      for (int64_t p0 = 0; p0 < out_plane; p0 += tile) {
        const int64_t cols = std::min(tile, out_plane - p0);
        im2col(ctx, g, xg, cig, p0, cols, col);
        gemm<T>(false, cog, cols, rows, wg, rows, col, cols, T(1), yg + p0, out_plane);
      }
    }
}

// Adds column rows (co, k) of one image and group into the output planes.
template <class T>
void col2im(Context& ctx, const ConvGeometry& g, const T* col, int64_t channels, T* y) {
  const int64_t ksize = g.kernel_size();
  const int64_t in_plane = g.in_plane();
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(in_plane * ksize, 1));
  ctx.pool.parallel_for(channels, grain, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      T* plane = y + c * g.out_plane();
      for (int64_t k = 0; k < ksize; ++k) {
        const int64_t k2 = k % g.kernel[2], k1 = (k / g.kernel[2]) % g.kernel[1], k0 = k / g.kernel[2] / g.kernel[1];
        const T* src = col + (c * ksize + k) * in_plane;
        const int64_t off0 = k0 * g.dilation[0] - g.pad[0];
        const int64_t off1 = k1 * g.dilation[1] - g.pad[1];
        const int64_t off2 = k2 * g.dilation[2] - g.pad[2];
        // Input position i lands on output i * stride + off.
        int64_t lo0, hi0, lo1, hi1, lo2, hi2;
        valid_range(off0, g.stride[0], g.out[0], g.in[0], lo0, hi0);
        valid_range(off1, g.stride[1], g.out[1], g.in[1], lo1, hi1);
        valid_range(off2, g.stride[2], g.out[2], g.in[2], lo2, hi2);
        for (int64_t i0 = lo0; i0 < hi0; ++i0)
          for (int64_t i1 = lo1; i1 < hi1; ++i1) {
            const T* s = src + (i0 * g.in[1] + i1) * g.in[2];
            T* d = plane + ((i0 * g.stride[0] + off0) * g.out[1] + i1 * g.stride[1] + off1) * g.out[2] + off2;
            if (g.stride[2] == 1)
              for (int64_t i2 = lo2; i2 < hi2; ++i2) d[i2] += s[i2];
            else
              for (int64_t i2 = lo2; i2 < hi2; ++i2) d[i2 * g.stride[2]] += s[i2];
          }
      }
    }
  });
}

// col (m x n) = w^T x, w being k x m, on the native f32 GEMM; false when it
// is off (or for f64).
template <class T>
bool transposed_gemm_native(Context& ctx, int64_t m, int64_t n, int64_t k, const T* w, const T* x, T* col) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    return gemm_f32(ctx.pool, single_product(m, n, k, {w, m, true}, {x, n, false}, col, n));
  }
}

template <class T>
void transposed(Context& ctx, const ConvGeometry& g, const T* x, const T* w, T* y) {
  const int64_t cig = g.c_in_group(), cog = g.c_out_group();
  const int64_t ksize = g.kernel_size();
  const int64_t in_plane = g.in_plane();
  const int64_t rows = cog * ksize;
  auto scratch = ctx.buffers.allocate(static_cast<size_t>(rows * in_plane) * sizeof(T));
  T* col = writable<T>(scratch);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      // col (cog*K x P_in) = W_g^T, W_g being (cig x cog*K), times X_g (cig x P_in).
      const T* wg = w + grp * cig * rows;
      const T* xg = x + (n * g.c_in + grp * cig) * in_plane;
      if (!transposed_gemm_native(ctx, rows, in_plane, cig, wg, xg, col))
        gemm<T>(true, rows, in_plane, cig, wg, rows, xg, in_plane, T(0), col, in_plane);
      col2im(ctx, g, col, cog, y + (n * g.c_out + grp * cog) * g.out_plane());
    }
}

// The epilogue as a pass of its own over y (n values; `add` laid out as
// y), for when the native GEMM is off: the same steps in the same order.
bool depthwise_like(const ConvGeometry& g) { return g.c_in_group() == 1 && g.groups > 1; }

}  // namespace

bool conv_fusible_head(const ConvOp& op) {
  if (op.transposed || op.input.dtype != DType::f32 || op.weight.dtype != DType::f32 || op.out.dtype != DType::f32 ||
      (op.has_bias() && op.bias.dtype != DType::f32) || op.out.numel() == 0 || !native_f32_gemm_enabled())
    return false;
  const ConvGeometry g = conv_geometry(op);
  return g.c_in > 0 && !depthwise_like(g);
}

Expected<Bytes> conv_fused(Context& ctx, ConvOp& op, const Inputs& in, const float* add, F32GemmEpilogue ep) {
  const ConvGeometry g = conv_geometry(op);
  auto out = ctx.buffers.allocate(op.out.bytes());
  const float* x = in.bytes[0]->as<const float>();
  const float* w = in.bytes[1]->as<const float>();
  const float* bias = op.has_bias() ? in.bytes[2]->as<const float>() : nullptr;
  float* y = writable<float>(out);
  if (!forward_native(ctx, g, x, w, bias, y, add, ep, kept_block(in, 1))) {
    // Switched off since the chain was planned (the tests toggle it).
    init_output<float>(ctx, y, bias, g.batch, g.c_out, g.out_plane());
    forward<float>(ctx, g, x, w, y);
    apply_epilogue(ctx.pool, y, add, ep, op.out.numel());
  }
  return out;
}

Expected<Bytes> conv(Context& ctx, ConvOp& op, const Inputs& in) {
  const ConvGeometry g = conv_geometry(op);
  auto out = ctx.buffers.allocate(op.out.bytes());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.bytes[0]->as<const T>();
    const T* w = in.bytes[1]->as<const T>();
    const T* bias = op.has_bias() ? in.bytes[2]->as<const T>() : nullptr;
    T* y = writable<T>(out);
    const bool depthwise_like = cpu::depthwise_like(g);
    if constexpr (std::is_same_v<T, float>) {
      if (!g.transposed && !depthwise_like && op.out.numel() > 0 && g.c_in > 0 &&
          forward_native(ctx, g, x, w, bias, y, nullptr, {}, kept_block(in, 1)))
        return;
      if (!g.transposed && depthwise_like && depthwise_f32(ctx.pool, g, x, w, bias, y)) return;
    }
    init_output<T>(ctx, y, bias, g.batch, g.c_out, g.out_plane());
    if (op.out.numel() == 0 || g.c_in == 0) return;
    if (g.transposed)
      transposed<T>(ctx, g, x, w, y);
    else if (depthwise_like)
      depthwise<T>(ctx, g, x, w, y);
    else
      forward<T>(ctx, g, x, w, y);
  };
  if (op.out.dtype == DType::f32)
    run(float{});
  else if (op.out.dtype == DType::f64)
    run(double{});
  else
    return DeviceError(Errc::unsupported, "cpu: " + OperationIr(op).name() + " needs f32 or f64");
  return out;
}

}  // namespace switchyard::backends::cpu
