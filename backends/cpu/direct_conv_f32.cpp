// SPDX-License-Identifier: Apache-2.0
// Direct f32 convolution (direct_conv_f32.hpp).
//
// A register tile is R output positions of one output row (or of two rows
// of a plane narrower than 8) by 32 output channels: 2R accumulators. For
// each term k = (input channel, kernel row, kernel column) of the sum, two
// vectors of the block's packed weights and R broadcasts of image values
// (R positions, `stride` apart, in the zero-padded image) feed 2R FMAs.
// The tile then holds its sums channel-minor, so it is transposed 16 x 16
// in registers and stored as R contiguous values per output channel.
//
// ResNet's planes are 112, 56, 28, 14 and 7 wide: rows of 14 positions, or
// two rows of 7, fill every tile, where the GEMM's 32-wide panels of output
// positions left 23% of lanes idle on 7x7 planes and 12% on 14x14 ones.
//
// Work splits one of two ways. Where the padded image outweighs the
// weights (a CNN's early layers), a work item is a band of output rows over
// every channel: the thread that runs it pads the band's input rows itself
// and packs all the weights once per call, so what a core reads it wrote
// (or, for the layer's output, writes what it reads next). Else the image
// is read in place when no padding is needed, or from one zero-padded copy
// per call (a pass over the input, parallel over planes), and the weights
// of a block of 32 channels, K x 32 floats (590 KiB for 512 x 3 x 3
// inputs), are packed k-major once per work item into a thread-local panel
// that stays in L2; work items run block by block, so a thread that takes
// the next item of the same block keeps its panel.

// GCC 12's _mm512_undefined_*() read themselves (GCC bug 105593); see
// bf16_gemm.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "backends/cpu/direct_conv_f32.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "backends/cpu/aligned_scratch.hpp"
#include "backends/cpu/native_gemm.hpp"
#include "backends/cpu/packed_weights.hpp"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define SY_DIRECT_CONV 1
#include <immintrin.h>

#include "backends/cpu/avx512_transpose.hpp"
#endif

namespace switchyard::backends::cpu {
namespace {

NativeKernelSwitch& direct_switch() {
  static NativeKernelSwitch s(cpu_has_avx512f(), "SWITCHYARD_CPU_DIRECT_CONV");
  return s;
}
std::atomic<uint64_t>& kept_runs() {
  static std::atomic<uint64_t> n{0};
  return n;
}

}  // namespace

bool direct_conv_f32_enabled() noexcept { return direct_switch().enabled() && native_f32_gemm_enabled(); }
bool set_direct_conv_f32(bool on) noexcept { return direct_switch().set(on); }
uint64_t direct_conv_f32_runs() noexcept { return direct_switch().runs(); }
uint64_t direct_conv_f32_kept_runs() noexcept { return kept_runs().load(std::memory_order_relaxed); }

#ifndef SY_DIRECT_CONV

bool direct_conv_f32(Context&, const ConvGeometry&, const float*, const float*, const float*, float*, const float*,
                     F32GemmEpilogue, const Bytes*) {
  return false;
}

#else

namespace {

#define SY_DC_TARGET __attribute__((target("avx512f")))

constexpr int kMaxR = 14;       // positions per tile: 28 accumulators, 2 weight vectors, a broadcast
constexpr int64_t kBlock = 32;  // output channels per block (two vectors)
// Above this many terms a block's panel (K x 32 floats, 1 MiB) would not
// stay in L2; such layers stay on the GEMM, which blocks K.
constexpr int64_t kMaxTerms = 8192;
// Floats of the zero-padded copy of the input (1 GiB).
constexpr int64_t kMaxPadded = int64_t{1} << 28;
// Terms ahead that pack_panel fetches each channel's weights: its 16
// concurrent rows, 4 KiB to 18 KiB apart, defeat the hardware's stream
// detection, and a late layer's weights come from DRAM (measured on
// ResNet-18: 5-9% faster per call with this and the fetch below).
constexpr int64_t kPackAhead = 128;

SY_DC_TARGET inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1u);
}

/// One register tile's operands.
struct Tile {
  const float* x = nullptr;       // the padded image at term 0 of the tile's first position
  int64_t second_row = 0;         // from the first row's positions to the second's (two-row tiles)
  const int64_t* koff = nullptr;  // term k's offset in the padded image
  int64_t terms = 0;
  const float* panel = nullptr;  // the block's weights, [terms][32]
  const float* bias = nullptr;   // at the block's first channel, or null
  int64_t channels = 0;          // of the block's 32 that exist
  float* y = nullptr;            // at (the block's first channel, the tile's first position)
  const float* add = nullptr;    // likewise, or null
  int64_t plane = 0;             // output positions per channel
  F32GemmEpilogue ep;
  /// Weights to fetch into L2 meanwhile (the next block's, in their own
  /// layout): 16 floats from `fetch` for each of the first `fetch_terms`
  /// terms.
  const float* fetch = nullptr;
  int64_t fetch_terms = 0;
};

/// Stores R sums per channel (acc[r][v], lane l: position r, channel
/// 16 v + l) as R contiguous values per channel, after the epilogue: the
/// GEMM's store, so the same bits.
template <int R>
SY_DC_TARGET inline void store_tile(const Tile& t, __m512 (&acc)[R][2]) {
  const __mmask16 m = mask16(R);
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int v = 0; v < 2; ++v) {
    __m512i rows[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) rows[i] = i < R ? _mm512_castps_si512(acc[i < R ? i : 0][v]) : _mm512_setzero_si512();
    transpose16x16(rows);
    const int64_t lanes = std::min<int64_t>(16, t.channels - int64_t{16} * v);
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t at = (int64_t{16} * v + l) * t.plane;
      __m512 s = _mm512_castsi512_ps(rows[l]);
      if (t.add != nullptr) {
        const __m512 r = _mm512_maskz_loadu_ps(m, t.add + at);
        s = t.ep.add_first ? _mm512_add_ps(r, s) : _mm512_add_ps(s, r);
      }
      // The unfused relu's x < 0 ? 0 : x (NaN and -0 kept), as the GEMM.
      if (t.ep.relu) s = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s, zero, _CMP_NLT_UQ), s);
      _mm512_mask_storeu_ps(t.y + at, m, s);
    }
  }
}

/// The tile of R positions, the first `Split` on one row and the rest on
/// the next (Split = R: one row), image positions `Stride` apart.
template <int R, int Split, int Stride>
SY_DC_TARGET __attribute__((noinline)) void run_tile(const Tile& t) {
  __m512 acc[R][2];
  __m512 start[2];
  // 0 + bias, as the GEMM starts its sums (a -0 bias starts at +0).
#pragma GCC unroll 2
  for (int v = 0; v < 2; ++v) {
    const __mmask16 m = mask16(t.channels - int64_t{16} * v);
    start[v] = t.bias != nullptr
                   ? _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, t.bias + int64_t{16} * v))
                   : _mm512_setzero_ps();
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = start[0], acc[r][1] = start[1];
  const float* panel = t.panel;
#pragma GCC unroll 2
  for (int64_t k = 0; k < t.terms; ++k, panel += kBlock) {
    const float* s0 = t.x + t.koff[k];
    const float* s1 = s0 + t.second_row;
    const __m512 w0 = _mm512_load_ps(panel);
    const __m512 w1 = _mm512_load_ps(panel + 16);
    if (k < t.fetch_terms) _mm_prefetch(reinterpret_cast<const char*>(t.fetch + 16 * k), _MM_HINT_T1);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(r < Split ? s0[ptrdiff_t{r} * Stride] : s1[ptrdiff_t{r - Split} * Stride]);
      acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  store_tile<R>(t, acc);
}

using TileFn = void (*)(const Tile&);

template <int Stride, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> one_row_tiles(std::index_sequence<I...>) {
  return {&run_tile<static_cast<int>(I) + 1, static_cast<int>(I) + 1, Stride>...};
}
/// run_tile<R, R, stride> at [stride - 1][R - 1].
constexpr std::array<std::array<TileFn, kMaxR>, 2> kOneRow = {one_row_tiles<1>(std::make_index_sequence<kMaxR>{}),
                                                              one_row_tiles<2>(std::make_index_sequence<kMaxR>{})};
/// Two rows of 7 (a 7-wide plane), at [stride - 1].
constexpr std::array<TileFn, 2> kTwoRows = {&run_tile<14, 7, 1>, &run_tile<14, 7, 2>};

/// panel[k * 32 + j] = w[(oc0 + j) * terms + k], zero past c_out: 16
/// channels x 16 terms at a time, transposed in registers.
SY_DC_TARGET void pack_panel(const float* w, int64_t terms, int64_t c_out, int64_t oc0, float* panel) {
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t rows = std::clamp<int64_t>(c_out - oc0 - 16 * half, 0, 16);
    const float* src = w + (oc0 + 16 * half) * terms;
    for (int64_t k0 = 0; k0 < terms; k0 += 16) {
      const __mmask16 m = mask16(terms - k0);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) {
        if (i < rows && k0 + kPackAhead < terms)
          _mm_prefetch(reinterpret_cast<const char*>(src + i * terms + k0 + kPackAhead), _MM_HINT_T0);
        r[i] = i < rows ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + i * terms + k0)) : _mm512_setzero_si512();
      }
      transpose16x16(r);
      const int64_t n = std::min<int64_t>(16, terms - k0);
      for (int64_t c = 0; c < n; ++c) _mm512_store_ps(panel + (k0 + c) * kBlock + 16 * half, _mm512_castsi512_ps(r[c]));
    }
  }
}

/// The image as the tiles read it: padded (or the input itself when no
/// padding is needed), `rows` x `cols` per plane.
struct Image {
  const float* data = nullptr;
  int64_t rows = 0, cols = 0;
  [[nodiscard]] int64_t plane() const { return rows * cols; }
};

/// How the output positions of one image split into work: units of one
/// output row (or of two, for 7-wide planes), each cut into tiles.
struct Layout {
  bool two_rows = false;
  int64_t units = 0;       // per image
  int64_t row_tiles = 0;   // tiles per output row (one-row units)
  int64_t tile_width = 0;  // positions per tile, but the last of a row
};

Layout plan_layout(const ConvGeometry& g) {
  Layout l;
  const int64_t w = g.out[2], h = g.out[1];
  l.two_rows = w == 7 && h >= 2;
  l.units = l.two_rows ? (h + 1) / 2 : h;
  // As many tiles as 14 positions need, as even as they come (15 -> 8 + 7).
  l.row_tiles = (w + kMaxR - 1) / kMaxR;
  l.tile_width = (w + l.row_tiles - 1) / l.row_tiles;
  return l;
}

/// Fills `out` with rows [first, first + rows) of the zero-padded image of
/// `channels` planes of `in` (each `in_h` x `in_w`, `top` and `left` zero
/// rows and columns before it), `cols` columns per row; `plane` floats
/// apart in `out`. Row -top is the padded image's first.
void pad_rows(const float* in, int64_t channels, int64_t in_h, int64_t in_w, int64_t top, int64_t left, int64_t first,
              int64_t rows, int64_t cols, float* out, int64_t plane) {
  const int64_t lead = std::min(left, cols);
  const int64_t cols_in = std::clamp<int64_t>(cols - left, 0, in_w);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < rows; ++i) {
      float* row = out + c * plane + i * cols;
      const int64_t ih = first + i - top;
      if (ih < 0 || ih >= in_h) {
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      std::fill(row, row + lead, 0.0f);
      std::memcpy(row + lead, in + (c * in_h + ih) * in_w, static_cast<size_t>(cols_in) * sizeof(float));
      std::fill(row + lead + cols_in, row + cols, 0.0f);
    }
  }
}

}  // namespace

bool direct_conv_f32(Context& ctx, const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y,
                     const float* add, F32GemmEpilogue ep, const Bytes* weight_block) {
  if (!direct_conv_f32_enabled()) return false;
  const int64_t stride = g.stride[2];
  const int64_t terms = g.c_in * g.kernel_size();
  const bool pointwise = g.kernel_size() == 1 && stride == 1 && g.pad[1] == 0 && g.pad[2] == 0;
  if (g.transposed || g.groups != 1 || g.in[0] != 1 || g.out[0] != 1 || g.kernel[0] != 1 || g.dilation[1] != 1 ||
      g.dilation[2] != 1 || (stride != 1 && stride != 2) || (g.stride[1] != stride && g.out[1] != 1) || g.c_out < 16 ||
      g.c_in <= 0 || terms > kMaxTerms || pointwise || g.batch * g.out_plane() == 0)
    return false;

  // The padded image: rows and columns the taps reach, zero outside the
  // input (and the input's rows and columns past the last tap left out).
  const int64_t kh = g.kernel[1], kw = g.kernel[2];
  const int64_t hp = (g.out[1] - 1) * stride + kh, wp = (g.out[2] - 1) * stride + kw;
  const int64_t top = g.pad[1], left = g.pad[2];
  const bool in_place = top == 0 && left == 0 && hp <= g.in[1] && wp <= g.in[2];
  // The copy doubles the input's memory; past this the GEMM, which needs
  // none, takes the layer.
  if (!in_place &&
      static_cast<double>(g.batch) * static_cast<double>(g.c_in) * static_cast<double>(hp) * static_cast<double>(wp) >
          static_cast<double>(kMaxPadded))
    return false;
  direct_switch().count_run();

  const Layout layout = plan_layout(g);
  const int64_t blocks = (g.c_out + kBlock - 1) / kBlock;
  const auto threads = static_cast<int64_t>(ctx.pool.threads());
  const int64_t out_plane = g.out_plane();
  const size_t step = static_cast<size_t>(stride - 1);
  // Below about a million multiply-adds threads cost more than they save.
  const bool serial = g.batch * g.c_out * out_plane * terms < (int64_t{1} << 20);

  // Runs output units [u0, u1) of image n against the packed block `block`
  // (t's panel, bias and channels set): `image` is that image's padded
  // planes (or a part of them from output row oh0 on), `cols` floats a row.
  const auto run_units = [&](Tile& t, int64_t n, int64_t block, const float* image, int64_t cols, int64_t oh0,
                             int64_t u0, int64_t u1, const auto& next_fetch) {
    const int64_t out_at = (n * g.c_out + block * kBlock) * out_plane;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t oh = layout.two_rows ? 2 * u : u;
      const float* row = image + (oh - oh0) * stride * cols;
      if (layout.two_rows && oh + 1 < g.out[1]) {
        t.x = row;
        t.second_row = stride * cols;
        t.y = y + out_at + oh * g.out[2];
        t.add = add != nullptr ? add + out_at + oh * g.out[2] : nullptr;
        next_fetch();
        kTwoRows[step](t);
        continue;
      }
      for (int64_t ow = 0; ow < g.out[2]; ow += layout.tile_width) {
        const int64_t width = std::min(layout.tile_width, g.out[2] - ow);
        t.x = row + ow * stride;
        t.second_row = 0;
        t.y = y + out_at + oh * g.out[2] + ow;
        t.add = add != nullptr ? add + out_at + oh * g.out[2] + ow : nullptr;
        next_fetch();
        kOneRow[step][static_cast<size_t>(width - 1)](t);
      }
    }
  };
  const auto start_tile = [&](const float* panel, int64_t block, const int64_t* koff) {
    Tile t;
    t.koff = koff;
    t.terms = terms;
    t.panel = panel;
    t.bias = bias != nullptr ? bias + block * kBlock : nullptr;
    t.channels = std::min(kBlock, g.c_out - block * kBlock);
    t.plane = out_plane;
    t.ep = ep;
    return t;
  };
  const auto offsets = [&](int64_t plane, int64_t cols) {
    std::vector<int64_t> koff(static_cast<size_t>(terms));
    for (int64_t c = 0, k = 0; c < g.c_in; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) koff[static_cast<size_t>(k++)] = c * plane + i * cols + j;
    return koff;
  };

  // Every block's panel, kept between calls when the weight is a model's
  // (packed again per call otherwise, below).
  const float* prepacked = nullptr;
  if (ctx.packed != nullptr && weight_block != nullptr && weight_block->as<float>() == w) {
    // The packing depends on the weights' shape as the kernel reads it.
    const uint64_t layout = uint64_t{1} << 60 | static_cast<uint64_t>(terms) << 24 | static_cast<uint64_t>(g.c_out);
    prepacked = ctx.packed->find(*weight_block, layout, static_cast<size_t>(blocks * terms * kBlock), [&](float* out) {
      ctx.pool.parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
        for (int64_t block = b; block < e; ++block)
          pack_panel(w, terms, g.c_out, block * kBlock, out + block * terms * kBlock);
      });
    });
  }
  if (prepacked != nullptr) kept_runs().fetch_add(1, std::memory_order_relaxed);
  const auto panel_of = [&](int64_t block) { return prepacked + block * terms * kBlock; };

  // Where the image outweighs the weights (a CNN's early layers), each work
  // item is a band of output rows over all channels, padded by the thread
  // that reads it, and each thread packs all the weights once. Split by
  // channel blocks instead, the padded copy was written by one core and
  // read by the other: on the 2-vCPU VM a cache line between the cores
  // costs ~220 ns, and ResNet's 56x56 layers ran at 280-306 GFLOP/s on
  // two cores against 196 on one (700 us with the input read in place).
  // Row bands also keep a layer's output rows on the core that reads
  // them next (the next layer's band is the same rows).
  if (!in_place && !serial && threads > 1 && g.c_in * hp * wp >= g.c_out * terms) {
    const int64_t chunks = std::clamp<int64_t>((2 * threads + g.batch - 1) / g.batch, 1, layout.units);
    const int64_t items = g.batch * chunks;
    const int64_t most_units = (layout.units + chunks - 1) / chunks;
    const int64_t most_rows = std::min(g.out[1], layout.two_rows ? 2 * most_units : most_units);
    const int64_t band_rows = (most_rows - 1) * stride + kh;
    const int64_t band_plane = band_rows * wp;
    const std::vector<int64_t> koff = offsets(band_plane, wp);
    const auto take = [&](std::atomic<int64_t>& next) {
      thread_local AlignedScratch weights, band;
      float* panels = prepacked != nullptr ? nullptr : weights.get(static_cast<size_t>(blocks * terms * kBlock));
      float* patch = band.get(static_cast<size_t>(g.c_in * band_plane));
      std::vector<char> packed(static_cast<size_t>(blocks), 0);
      for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < items;
           item = next.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t n = item / chunks, chunk = item % chunks;
        const int64_t u0 = layout.units * chunk / chunks, u1 = layout.units * (chunk + 1) / chunks;
        if (u0 == u1) continue;
        const int64_t oh0 = layout.two_rows ? 2 * u0 : u0;
        const int64_t oh1 = std::min(g.out[1], layout.two_rows ? 2 * u1 : u1);
        pad_rows(x + n * g.c_in * g.in_plane(), g.c_in, g.in[1], g.in[2], top, left, oh0 * stride,
                 (oh1 - oh0 - 1) * stride + kh, wp, patch, band_plane);
        for (int64_t block = 0; block < blocks; ++block) {
          const float* panel = prepacked != nullptr ? panel_of(block) : panels + block * terms * kBlock;
          if (prepacked == nullptr && packed[static_cast<size_t>(block)] == 0) {
            pack_panel(w, terms, g.c_out, block * kBlock, panels + block * terms * kBlock);
            packed[static_cast<size_t>(block)] = 1;
          }
          Tile t = start_tile(panel, block, koff.data());
          run_units(t, n, block, patch, wp, oh0, u0, u1, [] {});
        }
      }
    };
    run_work_items(ctx.pool, serial, take);
    return true;
  }

  Image img{x, g.in[1], g.in[2]};
  Bytes padded;
  if (!in_place) {
    padded = ctx.buffers.allocate(static_cast<size_t>(g.batch * g.c_in * hp * wp) * sizeof(float));
    auto* dst = writable<float>(padded);
    img = Image{dst, hp, wp};
    const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(hp * wp, 1));
    ctx.pool.parallel_for(g.batch * g.c_in, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        pad_rows(x + p * g.in_plane(), 1, g.in[1], g.in[2], top, left, 0, hp, wp, dst + p * hp * wp, hp * wp);
    });
  }
  const std::vector<int64_t> koff = offsets(img.plane(), img.cols);

  // At least four items per thread where the rows allow, so uneven ends
  // even out; items run block-major, so neighbours share a panel.
  const int64_t chunks =
      std::clamp<int64_t>((4 * threads + blocks * g.batch - 1) / (blocks * g.batch), 1, layout.units);
  const int64_t items = blocks * g.batch * chunks;
  const auto take = [&](std::atomic<int64_t>& next) {
    thread_local AlignedScratch scratch;
    float* own_panel = prepacked != nullptr ? nullptr : scratch.get(static_cast<size_t>(terms * kBlock));
    int64_t packed = -1;  // the block whose weights own_panel holds, in this call
    for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < items;
         item = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t block = item / (g.batch * chunks), n = item / chunks % g.batch, chunk = item % chunks;
      if (prepacked == nullptr && packed != block) {
        pack_panel(w, terms, g.c_out, block * kBlock, own_panel);
        packed = block;
      }
      Tile t = start_tile(prepacked != nullptr ? panel_of(block) : own_panel, block, koff.data());
      // The block this thread likely takes next, when the threads take
      // turns, unless it is this one: its weights (or its kept panel) come
      // from memory (a late layer's from DRAM) while this block's products
      // run, a line per term.
      const int64_t ahead = (item + (serial ? 1 : threads)) / (g.batch * chunks);
      const int64_t fetch_from = ahead * kBlock * terms;  // floats of w, or of the kept panels
      const int64_t fetch_width =
          prepacked != nullptr ? kBlock : std::min(g.c_out, (ahead + 1) * kBlock) - ahead * kBlock;
      const int64_t fetch_floats = ahead != block && ahead < blocks ? fetch_width * terms : 0;
      const float* fetch_base = prepacked != nullptr ? prepacked : w;
      int64_t fetched = 0;
      const auto next_fetch = [&] {
        t.fetch_terms = std::clamp<int64_t>((fetch_floats - fetched) / 16, 0, terms);
        t.fetch = t.fetch_terms > 0 ? fetch_base + fetch_from + fetched : nullptr;
        fetched += t.fetch_terms * 16;
      };
      const int64_t u0 = layout.units * chunk / chunks, u1 = layout.units * (chunk + 1) / chunks;
      run_units(t, n, block, img.data + n * g.c_in * img.plane(), img.cols, 0, u0, u1, next_fetch);
    }
  };
  run_work_items(ctx.pool, serial, take);
  return true;
}

#endif  // SY_DIRECT_CONV

}  // namespace switchyard::backends::cpu
