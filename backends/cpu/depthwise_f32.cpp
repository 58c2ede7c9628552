// SPDX-License-Identifier: Apache-2.0
// Depthwise f32 convolution on AVX-512F (see depthwise_f32.hpp).
//
// Per output plane, per output row, up to kV vectors (64 outputs) of the row
// are summed in registers: they start at the bias, and each tap (kh, kw)
// whose input row exists adds w[kh, kw] times the input row read at the
// tap's column offset: one masked load per vector for column stride 1, two
// and a lane permute (the even lanes of 32) for stride 2. Each lane's mask
// says whether its tap's column is inside the image; masked-off lanes keep
// their sum (mask3 FMA), so the padding is left out rather than multiplied
// as zero. The masks and offsets depend on the output column and the tap
// only, so they are worked out once per call, for the whole row.
//
// A plane (56x56 floats, 12 KiB) stays in L1 while its rows are read three
// times each; the call is bound by streaming the planes in and out, so
// there is no blocking over rows. The planes are spread over the pool.

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see f32_gemm.cpp
#endif

#include "backends/cpu/depthwise_f32.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/kernels.hpp"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define SY_DW_AVX512 1
#include <immintrin.h>
#endif

namespace switchyard::backends::cpu {

namespace {
std::atomic<uint64_t> runs{0};
}  // namespace

uint64_t native_depthwise_f32_runs() noexcept { return runs.load(std::memory_order_relaxed); }

#ifndef SY_DW_AVX512

bool depthwise_f32(ThreadPool&, const ConvGeometry&, const float*, const float*, const float*, float*) { return false; }

#else

namespace {

#define SY_DW_TARGET __attribute__((target("avx512f")))
#define SY_DW_ENTRY SY_DW_TARGET __attribute__((noinline))

constexpr int kV = 4;  // vectors of one row segment held in registers

/// Tap kw at vector c of an output row: the input column of lane 0, which
/// input lanes to load (32 for stride 2), which output lanes it adds to.
struct Tap {
  int64_t col = 0;
  uint32_t load = 0;
  uint16_t use = 0;
};

struct Plan {
  const ConvGeometry* g = nullptr;
  const float *x = nullptr, *w = nullptr, *bias = nullptr;
  float* y = nullptr;
  int64_t vectors = 0;           // per output row
  std::vector<Tap> taps;         // [vector * kernel[2] + kw]
  std::vector<uint16_t> stores;  // per vector: output lanes inside the row
};

inline uint32_t lanes(int64_t lo, int64_t hi, int64_t width) {
  lo = std::clamp<int64_t>(lo, 0, width);
  hi = std::clamp<int64_t>(hi, lo, width);
  const uint64_t upto = (uint64_t{1} << hi) - 1, below = (uint64_t{1} << lo) - 1;
  return static_cast<uint32_t>(upto & ~below);
}

Plan plan(const ConvGeometry& g, int64_t stride) {
  Plan p;
  p.g = &g;
  const int64_t width = g.in[2], outs = g.out[2], kw_n = g.kernel[2];
  p.vectors = (outs + 15) / 16;
  p.taps.resize(static_cast<size_t>(p.vectors * kw_n));
  p.stores.resize(static_cast<size_t>(p.vectors));
  for (int64_t c = 0; c < p.vectors; ++c) {
    const int64_t o = 16 * c;
    p.stores[static_cast<size_t>(c)] = static_cast<uint16_t>(lanes(0, outs - o, 16));
    for (int64_t kw = 0; kw < kw_n; ++kw) {
      Tap& t = p.taps[static_cast<size_t>(c * kw_n + kw)];
      t.col = o * stride + kw * g.dilation[2] - g.pad[2];
      // Lane l reads column col + l * stride: inside [0, width) for
      // l in [ceil(-col / stride), ceil((width - col) / stride)).
      const int64_t lo = t.col >= 0 ? 0 : (-t.col + stride - 1) / stride;
      const int64_t hi = width - t.col <= 0 ? 0 : (width - t.col + stride - 1) / stride;
      t.use = static_cast<uint16_t>(lanes(lo, std::min(hi, outs - o), 16));
      t.load = stride == 1 ? t.use : lanes(-t.col, width - t.col, 32);
    }
  }
  return p;
}

/// Vectors [c0, c0 + V) of output row o1 of one plane.
template <int S, int V>
SY_DW_TARGET inline void segment(const Plan& p, const float* xin, const float* wk, float bias, float* out, int64_t o1,
                                 int64_t c0) {
  const ConvGeometry& g = *p.g;
  const int64_t kh_n = g.kernel[1], kw_n = g.kernel[2];
  __m512 acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = _mm512_set1_ps(bias);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t kh = 0; kh < kh_n; ++kh) {
    const int64_t i1 = o1 * g.stride[1] + kh * g.dilation[1] - g.pad[1];
    if (i1 < 0 || i1 >= g.in[1]) continue;
    const float* row = xin + i1 * g.in[2];
    for (int64_t kw = 0; kw < kw_n; ++kw) {
      const __m512 wv = _mm512_set1_ps(wk[kh * kw_n + kw]);
      const Tap* t = p.taps.data() + c0 * kw_n + kw;
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const Tap& tv = t[v * kw_n];
        __m512 xv;
        if constexpr (S == 1) {
          xv = _mm512_maskz_loadu_ps(tv.use, row + tv.col);
        } else {
          const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(tv.load), row + tv.col);
          const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(tv.load >> 16), row + tv.col + 16);
          xv = _mm512_permutex2var_ps(lo, even, hi);
        }
        acc[v] = _mm512_mask3_fmadd_ps(xv, wv, acc[v], tv.use);
      }
    }
  }
  float* dst = out + o1 * g.out[2] + 16 * c0;
#pragma GCC unroll 4
  for (int64_t v = 0; v < V; ++v) _mm512_mask_storeu_ps(dst + 16 * v, p.stores[static_cast<size_t>(c0 + v)], acc[v]);
}

/// A row segment's taps, read once for all its rows: per vector v and
/// kernel column kw, the offset and masks of Tap.
template <int KW, int V>
struct SegmentTaps {
  int64_t col[V][KW];
  __mmask16 use[V][KW], lo[V][KW], hi[V][KW];
};

/// Vectors [c0, c0 + V) of output rows [o1, o1 + R), kernel width KW: R x V
/// sums in registers, so that enough independent FMA chains are in flight
/// (one chain of 9 dependent FMAs per vector would wait on their latency).
template <int S, int KW, int V, int R>
SY_DW_TARGET inline void block(const Plan& p, const SegmentTaps<KW, V>& t, const float* xin, const float* wk,
                               float bias, float* out, int64_t o1, int64_t c0) {
  const ConvGeometry& g = *p.g;
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  __m512 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_set1_ps(bias);
  for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int64_t i1 = (o1 + r) * g.stride[1] + kh * g.dilation[1] - g.pad[1];
      if (i1 < 0 || i1 >= g.in[1]) continue;
      const float* row = xin + i1 * g.in[2];
#pragma GCC unroll 8
      for (int kw = 0; kw < KW; ++kw) {
        const __m512 wv = _mm512_set1_ps(wk[kh * KW + kw]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          __m512 xv;
          if constexpr (S == 1) {
            xv = _mm512_maskz_loadu_ps(t.use[v][kw], row + t.col[v][kw]);
          } else {
            const __m512 l = _mm512_maskz_loadu_ps(t.lo[v][kw], row + t.col[v][kw]);
            const __m512 h = _mm512_maskz_loadu_ps(t.hi[v][kw], row + t.col[v][kw] + 16);
            xv = _mm512_permutex2var_ps(l, even, h);
          }
          acc[r][v] = _mm512_mask3_fmadd_ps(xv, wv, acc[r][v], t.use[v][kw]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float* dst = out + (o1 + r) * g.out[2] + 16 * c0;
#pragma GCC unroll 4
    for (int64_t v = 0; v < V; ++v)
      _mm512_mask_storeu_ps(dst + 16 * v, p.stores[static_cast<size_t>(c0 + v)], acc[r][v]);
  }
}

/// Every output row of one plane, vectors [c0, c0 + V) of each; R rows at a
/// time.
template <int S, int KW, int V>
SY_DW_TARGET inline void column_strip(const Plan& p, const float* xin, const float* wk, float bias, float* out,
                                      int64_t c0) {
  constexpr int R = 8 / V;
  SegmentTaps<KW, V> t;
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v)
#pragma GCC unroll 8
    for (int kw = 0; kw < KW; ++kw) {
      const Tap& tap = p.taps[static_cast<size_t>((c0 + v) * KW + kw)];
      t.col[v][kw] = tap.col;
      t.use[v][kw] = tap.use;
      t.lo[v][kw] = static_cast<__mmask16>(tap.load);
      t.hi[v][kw] = static_cast<__mmask16>(tap.load >> 16);
    }
  const int64_t rows = p.g->out[1];
  int64_t o1 = 0;
  for (; o1 + R <= rows; o1 += R) block<S, KW, V, R>(p, t, xin, wk, bias, out, o1, c0);
  for (; o1 < rows; ++o1) block<S, KW, V, 1>(p, t, xin, wk, bias, out, o1, c0);
}

/// Output planes [begin, end): kernel width KW (0: any, through segment).
template <int S, int KW>
SY_DW_ENTRY void planes(const Plan& p, int64_t begin, int64_t end) {
  const ConvGeometry& g = *p.g;
  const int64_t cog = g.c_out_group(), ksize = g.kernel[1] * g.kernel[2];
  const int64_t full = p.vectors / kV * kV, rest = p.vectors - full;
  for (int64_t pl = begin; pl < end; ++pl) {
    const int64_t n = pl / g.c_out, co = pl % g.c_out;
    const float* xin = p.x + (n * g.c_in + co / cog) * g.in_plane();
    const float* wk = p.w + co * ksize;
    const float b = p.bias != nullptr ? p.bias[co] : 0.0f;
    float* out = p.y + pl * g.out_plane();
    if constexpr (KW > 0) {
      for (int64_t c = 0; c < full; c += kV) column_strip<S, KW, kV>(p, xin, wk, b, out, c);
      switch (rest) {
        case 1:
          column_strip<S, KW, 1>(p, xin, wk, b, out, full);
          break;
        case 2:
          column_strip<S, KW, 2>(p, xin, wk, b, out, full);
          break;
        case 3:
          column_strip<S, KW, 3>(p, xin, wk, b, out, full);
          break;
        default:
          break;
      }
    } else {
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
        for (int64_t c = 0; c < full; c += kV) segment<S, kV>(p, xin, wk, b, out, o1, c);
        switch (rest) {
          case 1:
            segment<S, 1>(p, xin, wk, b, out, o1, full);
            break;
          case 2:
            segment<S, 2>(p, xin, wk, b, out, o1, full);
            break;
          case 3:
            segment<S, 3>(p, xin, wk, b, out, o1, full);
            break;
          default:
            break;
        }
      }
    }
  }
}

}  // namespace

bool depthwise_f32(ThreadPool& pool, const ConvGeometry& g, const float* x, const float* w, const float* bias,
                   float* y) {
  if (!native_f32_gemm_enabled() || g.transposed || g.c_in_group() != 1) return false;
  if (g.in[0] != 1 || g.out[0] != 1 || g.kernel[0] != 1) return false;  // 3d
  if (g.stride[2] != 1 && g.stride[2] != 2) return false;
  runs.fetch_add(1, std::memory_order_relaxed);
  Plan p = plan(g, g.stride[2]);
  p.x = x;
  p.w = w;
  p.bias = bias;
  p.y = y;
  const int64_t count = g.batch * g.c_out;
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(g.out_plane() * g.kernel_size(), 1));
  const bool s1 = g.stride[2] == 1;
  if (g.kernel[2] == 3)
    pool.parallel_for(count, grain,
                      [&p, s1](int64_t b, int64_t e) { s1 ? planes<1, 3>(p, b, e) : planes<2, 3>(p, b, e); });
  else
    pool.parallel_for(count, grain,
                      [&p, s1](int64_t b, int64_t e) { s1 ? planes<1, 0>(p, b, e) : planes<2, 0>(p, b, e); });
  return true;
}

#endif  // SY_DW_AVX512

}  // namespace switchyard::backends::cpu
