// SPDX-License-Identifier: Apache-2.0
// f32 GEMM on AVX-512F: kMR x kNR register tiles of FMAs on zmm registers.
//
// Blocking, as BLIS does it, but with each work item owning its B block:
// the result is cut into tiles of at most kMC x kNC per batch entry, taken
// one at a time by the device's threads in one ThreadPool pass. A tile walks
// K in kKC blocks; for each it packs B into panels of kNR columns
// (thread-local, zero-padded in n) and runs the micro-kernel for every kNR
// panel (L1: kKC x kNR floats) against every kMR rows of A (L2: the tile's
// kMC x kKC block). A row-major or shifted-row B is packed one panel at a
// time, right before its micro-kernels, so the panel is still in L1; a
// filled or transposed B a whole kKC x nc block at a time; a tile of few
// rows (kDirectPanels micro-panels) reads a row-major B where it lies, as
// its few micro-kernels per panel would not repay the packing. C itself
// holds the sums between K blocks. Two tiles of one batch entry that share columns pack the same B
// block twice, which costs 1/kMC of the work; in exchange no tile waits for
// another, and B can come from a caller's fill function, or as shifted rows
// of one buffer (a convolution's image read as its column matrix), without
// a column buffer of its own.
// Likewise each tile packs its own kMC x kKC block of A, per K block, into
// panels of kMR rows stored k by k, so that the micro-kernel broadcasts from
// one stream (A's own rows, a power of two apart, would fight over L1 sets).
// Tiles that share rows pack them again, 1/kNC of the work; a pass packing
// all of A before the tiles wrote and read back a CNN's whole weight (9 MiB
// for 512 x 4608) per call, and cost a second wake-up of the pool.
//
// Edges run the same kernel compiled for fewer rows or vectors and store
// under a mask, so neither A nor C needs padding. No product is skipped:
// zero padding of B meets only columns that are never stored.
//
// Compiled with target attributes rather than -march, so the portable build
// carries it, and picked at run time (cpu_has_avx512f); the entry points are
// noinline so that ThreadPool's flattening clones (isa_clones.hpp) do not
// try to inline AVX-512 code into baseline code. It needs no target_clones,
// so the sanitizer builds check it too.

// GCC 12's _mm512_undefined_*() read themselves (GCC bug 105593), which
// -Wmaybe-uninitialized reports inside AVX-512 intrinsics; see bf16_gemm.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same, as -O1 reports it
#endif

#include "backends/cpu/f32_gemm.hpp"

#include <algorithm>
#include <array>
#include <cblas.h>
#include <cctype>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/aligned_scratch.hpp"
#include "backends/cpu/kernels.hpp"
#include "backends/cpu/native_gemm.hpp"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define SY_F32_GEMM 1
#include <immintrin.h>

#include "backends/cpu/avx512_transpose.hpp"
#endif

namespace switchyard::backends::cpu {

bool cpu_has_avx512f() noexcept {
#ifdef SY_F32_GEMM
  // libgcc's and compiler-rt's checks include the OS saving the zmm state.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
#else
  return false;
#endif
}

namespace {

NativeKernelSwitch& kernel_switch() {
  static NativeKernelSwitch s(cpu_has_avx512f(), "SWITCHYARD_CPU_F32_GEMM");
  return s;
}

}  // namespace

bool openblas_runs_avx512() noexcept {
  static const bool avx512 = [] {
    const char* name = openblas_get_corename();
    std::string core = name == nullptr ? "" : name;
    std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
    return core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
  }();
  return avx512;
}

void apply_epilogue(ThreadPool& pool, float* y, const float* add, F32GemmEpilogue ep, int64_t n) {
  if (add == nullptr && !ep.relu) return;
  pool.parallel_for(n, parallel_grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = y[i];
      if (add != nullptr) v = ep.add_first ? add[i] + v : v + add[i];
      if (ep.relu) v = v < 0.0f ? 0.0f : v;
      y[i] = v;
    }
  });
}

bool native_f32_gemm_enabled() noexcept { return kernel_switch().enabled(); }
bool set_native_f32_gemm(bool on) noexcept { return kernel_switch().set(on); }
uint64_t native_f32_gemm_runs() noexcept { return kernel_switch().runs(); }

#ifndef SY_F32_GEMM

bool gemm_f32(ThreadPool&, const F32Gemm&) { return false; }
bool gemm_f32_here(const F32Gemm&) { return false; }
size_t packed_b_floats(const F32Gemm&) { return 0; }
void pack_b(const F32Gemm&, float*) {}

#else

namespace {

#define SY_F32_TARGET __attribute__((target("avx512f")))
#define SY_F32_ENTRY SY_F32_TARGET __attribute__((noinline))

#ifndef SY_F32_MR
#define SY_F32_MR 14
#define SY_F32_NV 2
#endif
#ifndef SY_F32_KC
#define SY_F32_KC 256
#endif

// 14 x 32: 28 accumulators, 2 B vectors and a broadcast in the 32 zmm
// registers; per k 2 loads and 14 broadcasts feed 28 FMAs, well inside two
// loads per cycle.
constexpr int kMR = SY_F32_MR;
constexpr int kNV = SY_F32_NV;
constexpr int64_t kNR = int64_t{16} * kNV;
constexpr int64_t kKC = SY_F32_KC;          // a B micro-panel, kKC x kNR, stays in L1
constexpr int64_t kMC = int64_t{16} * kMR;  // a tile's A block, kMC x kKC, in L2
constexpr int64_t kNC = 32 * kNR;
constexpr int64_t kFillRows = 8;  // rows of B a fill_b call writes (8 x kNC floats: 32 KiB at most)
// A tile of at most this many micro-panels of rows reads a row-major B
// where it lies instead of packing it (see run_tiles).
constexpr int64_t kDirectPanels = 4;

SY_F32_TARGET inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1u);
}

/// How a micro-tile's sums start, on the first K block.
struct TileStart {
  bool load_c = false;          // from C's values
  const float* bias = nullptr;  // plus one value per row (at the tile's first row)
};

/// What happens to a micro-tile's sums before they are stored, on the last
/// K block (F32GemmEpilogue).
struct TileEnd {
  const float* col_bias = nullptr;  // at the tile's first column
  const float* add = nullptr;       // at the tile's first element, ldc apart as C
  bool add_first = false;
  bool relu = false;
};

/// C[R x 16V] (masked to `cols` columns) (+)= the packed A micro-panel
/// (kc x kMR, rows past R unused) * the B micro-panel (kc rows of kNR
/// columns, `ldb` floats apart: packed, or B's own rows).
template <int R, int V>
SY_F32_TARGET void micro(const float* a, const float* b, int64_t ldb, int64_t kc, float* c, int64_t ldc, int64_t cols,
                         const TileStart& s, const TileEnd& e) {
  __m512 acc[R][V];
  __mmask16 m[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) m[v] = mask16(cols - static_cast<int64_t>(16 * v));
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[i][v] =
          s.load_c ? _mm512_maskz_loadu_ps(m[v], c + i * ldc + static_cast<int64_t>(16 * v)) : _mm512_setzero_ps();
      if (s.bias != nullptr) acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_set1_ps(s.bias[i]));
    }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], b + p * ldb + static_cast<int64_t>(16 * v));
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_set1_ps(a[p * kMR + i]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
  if (e.col_bias != nullptr) {
    __m512 bias[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bias[v] = _mm512_maskz_loadu_ps(m[v], e.col_bias + static_cast<int64_t>(16 * v));
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_add_ps(acc[i][v], bias[v]);
  }
  if (e.add != nullptr) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const __m512 r = _mm512_maskz_loadu_ps(m[v], e.add + i * ldc + static_cast<int64_t>(16 * v));
        acc[i][v] = e.add_first ? _mm512_add_ps(r, acc[i][v]) : _mm512_add_ps(acc[i][v], r);
      }
  }
  if (e.relu) {
    // Kept where x is not below 0 (NaN and -0 included), else +0: the
    // scalar relu's x < 0 ? 0 : x, PyTorch's clamp_min(x, 0); max_ps would
    // drop a NaN or -0 depending on the operands' order.
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[i][v] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(acc[i][v], zero, _CMP_NLT_UQ), acc[i][v]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(c + i * ldc + static_cast<int64_t>(16 * v), m[v], acc[i][v]);
}

using MicroFn = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t, int64_t, const TileStart&,
                         const TileEnd&);

template <size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::index_sequence<I...>) {
  return {&micro<static_cast<int>(I / kNV) + 1, static_cast<int>(I % kNV) + 1>...};
}
/// micro<rows, vectors> at [(rows - 1) * kNV + vectors - 1].
constexpr auto kMicro = micro_table(std::make_index_sequence<static_cast<size_t>(kMR) * kNV>{});

/// Packs rows [i0, i0 + kMR) x columns [pc, pc + kc) of A (rows past m are
/// zero) k by k: out[(p - pc) * kMR + r] = A(i0 + r, p).
SY_F32_TARGET void pack_a_panel(const F32Gemm& g, const float* a, int64_t i0, int64_t pc, int64_t kc, float* out) {
  const int64_t rows = std::min<int64_t>(kMR, g.m - i0);
  if (g.a_transposed) {
    // Column p of the panel is kMR contiguous floats of A's row p.
    const __mmask16 m = mask16(rows);
    for (int64_t p = 0; p < kc; ++p)
      _mm512_mask_storeu_ps(out + p * kMR, mask16(kMR), _mm512_maskz_loadu_ps(m, a + (pc + p) * g.lda + i0));
    return;
  }
  // 16 k at a time: the panel's rows (zero past m), transposed, give one
  // column of kMR rows per k.
  static_assert(kMR <= 16);
  const __mmask16 panel_lanes = mask16(kMR);
  // The same rows' next K block is fetched meanwhile: this block's
  // products take far longer than the fetch, and a CNN's late layers read
  // megabytes of weights per call, once, from memory.
  const int64_t ahead = pc + kc < g.k ? kc : 0;
  for (int64_t p0 = 0; p0 < kc; p0 += 16) {
    const __mmask16 m = mask16(kc - p0);
    __m512i r[16];
    for (int t = 0; t < 16; ++t) {
      const float* src = a + (i0 + t) * g.lda + pc + p0;
      if (t < rows && ahead > 0 && pc + ahead + p0 < g.k)
        _mm_prefetch(reinterpret_cast<const char*>(src + ahead), _MM_HINT_T1);
      r[t] = t < rows ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, src)) : _mm512_setzero_si512();
    }
    transpose16x16(r);
    const int64_t n = std::min<int64_t>(16, kc - p0);
    for (int64_t c = 0; c < n; ++c) _mm512_mask_storeu_ps(out + (p0 + c) * kMR, panel_lanes, _mm512_castsi512_ps(r[c]));
  }
}

/// Packs `rows` rows x `cols` columns of a row-major B (rows ld apart) into
/// panels of kNR columns, `panel` floats apart (zero past `cols`). With
/// `ahead` columns (> 0), the same rows that many columns on are fetched
/// into L2 meanwhile.
SY_F32_TARGET void pack_rows(const float* src, int64_t ld, int64_t rows, int64_t cols, float* out, int64_t panel,
                             int64_t ahead = 0) {
  const int64_t panels = (cols + kNR - 1) / kNR;
  for (int64_t p = 0; p < rows; ++p) {
    const float* row = src + p * ld;
    if (ahead > 0)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead + static_cast<int64_t>(16 * v)), _MM_HINT_T1);
    for (int64_t q = 0; q < panels; ++q)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        const int64_t j = q * kNR + static_cast<int64_t>(16 * v);
        _mm512_store_ps(out + q * panel + p * kNR + static_cast<int64_t>(16 * v),
                        _mm512_maskz_loadu_ps(mask16(cols - j), row + j));
      }
  }
}

/// Packs rows [p0, p0 + rows) x columns [j0, j0 + cols) of a B given as
/// shifted rows (F32Gemm::row_offset), panels `panel` floats apart.
SY_F32_TARGET void pack_shifted(const F32Gemm& g, const float* b, int64_t p0, int64_t rows, int64_t j0, int64_t cols,
                                float* out, int64_t panel) {
  const int64_t panels = (cols + kNR - 1) / kNR;
  for (int64_t p = 0; p < rows; ++p) {
    const float* row = b + g.row_offset[p0 + p] + j0;
    const uint16_t* mask = g.row_mask + g.row_class[p0 + p] * g.mask_words + j0 / 16;
    // The same row's next kNR columns (the next panel, packed after this
    // one's micro-kernels) are fetched meanwhile when the rows are long: a
    // 56x56 image (64 channels, 800 KiB) streams in from L3, and the loads
    // here stalled on it; a 14x14 or 7x7 one stays in L2, where the
    // prefetches only cost.
    const bool ahead = g.n >= kNC;
    const float* next = row + kNR;
    for (int64_t q = 0; q < panels; ++q)
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) {
        const int64_t j = q * kNR + static_cast<int64_t>(16 * v);
        const __mmask16 m = j < cols ? static_cast<__mmask16>(mask[j / 16] & mask16(cols - j)) : __mmask16(0);
        if (ahead && j < cols) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T0);
        _mm512_store_ps(out + q * panel + p * kNR + static_cast<int64_t>(16 * v), _mm512_maskz_loadu_ps(m, row + j));
      }
  }
}

/// The same from a transposed B (column j at bt + j * ld, kc values; a
/// linear's weight): 16 columns x 16 k at a time, transposed in registers.
SY_F32_TARGET void pack_cols(const float* bt, int64_t ld, int64_t kc, int64_t cols, float* out) {
  const int64_t groups = (cols + 15) / 16;  // of 16 columns; a panel holds kNV
  for (int64_t grp = 0; grp < groups; ++grp) {
    float* dst = out + (grp / kNV) * kc * kNR + (grp % kNV) * 16;
    for (int64_t p0 = 0; p0 < kc; p0 += 16) {
      const __mmask16 m = mask16(kc - p0);
      __m512i r[16];
      for (int t = 0; t < 16; ++t) {
        const int64_t j = grp * 16 + t;
        r[t] = j < cols ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, bt + j * ld + p0)) : _mm512_setzero_si512();
      }
      transpose16x16(r);
      const int64_t n = std::min<int64_t>(16, kc - p0);
      for (int64_t c = 0; c < n; ++c) _mm512_store_ps(dst + (p0 + c) * kNR, _mm512_castsi512_ps(r[c]));
    }
  }
  // Columns past the last group, up to the panel's width, are zero.
  for (int64_t grp = groups; grp % kNV != 0; ++grp) {
    float* dst = out + (grp / kNV) * kc * kNR + (grp % kNV) * 16;
    for (int64_t p = 0; p < kc; ++p) _mm512_store_ps(dst + p * kNR, _mm512_setzero_ps());
  }
}

/// Tile sizes of one call.
/// Columns of B rounded up to whole panels: the row length of pack_b's
/// K blocks.
int64_t padded_width(int64_t n) { return (n + kNR - 1) / kNR * kNR; }

struct Grid {
  int64_t mc = 0, nc = 0, m_tiles = 0, n_tiles = 0;
  [[nodiscard]] int64_t items(int64_t batches) const { return batches * m_tiles * n_tiles; }
};

/// Tiles of at most kMC x kNC, cut finer until each thread has about four
/// to take (so uneven edges even out), as long as they stay at least a few
/// micro-tiles wide: the wider dimension is split first.
Grid plan_grid(const F32Gemm& g, int64_t threads) {
  int64_t mt = (g.m + kMC - 1) / kMC, nt = (g.n + kNC - 1) / kNC;
  const int64_t want = threads > 1 ? 4 * threads : 1;
  while (g.batches * mt * nt < want) {
    const int64_t mc = (g.m + mt - 1) / mt, nc = (g.n + nt - 1) / nt;
    const bool split_n = nc >= 4 * kNR && nc * kMR >= mc * kNR;
    if (split_n)
      ++nt;  // NOLINT(bugprone-branch-clone): n is split first, and again only when m cannot be
    else if (mc >= int64_t{4} * kMR)
      ++mt;
    else if (nc >= 4 * kNR)
      ++nt;
    else
      break;
  }
  // Then up to twice as many, in n alone while tiles stay 4 panels wide: a
  // thread preempted or woken late leaves the other less to wait for at
  // the end, and an n split only packs A's rows again (1/nc of the work).
  while (threads > 1 && g.batches * mt * (nt + 1) <= 2 * want && (g.n + nt) / (nt + 1) >= 4 * kNR) ++nt;
  Grid grid;
  // Tile edges on micro-tile boundaries, so only a matrix's last tile has
  // partial micro-tiles.
  grid.mc = ((g.m + mt - 1) / mt + kMR - 1) / kMR * kMR;
  grid.nc = ((g.n + nt - 1) / nt + kNR - 1) / kNR * kNR;
  grid.m_tiles = (g.m + grid.mc - 1) / grid.mc;
  grid.n_tiles = (g.n + grid.nc - 1) / grid.nc;
  return grid;
}

SY_F32_ENTRY void run_tiles(const F32Gemm& g, const Grid& grid, std::atomic<int64_t>& next) {
  thread_local AlignedScratch packed, packed_a, filled;
  float* pb = packed.get(static_cast<size_t>(kKC * grid.nc));
  float* pa = packed_a.get(static_cast<size_t>(kKC * grid.mc));
  float* fb = g.fill_b ? filled.get(static_cast<size_t>(kFillRows * grid.nc)) : nullptr;
  const int64_t per_batch = grid.m_tiles * grid.n_tiles;
  const int64_t tiles = g.batches * per_batch;
  for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < tiles;
       item = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t batch = item / per_batch, rest = item % per_batch;
    // Neighbouring items share A's rows and differ in columns.
    const int64_t i0 = (rest / grid.n_tiles) * grid.mc, j0 = (rest % grid.n_tiles) * grid.nc;
    const int64_t i1 = std::min(g.m, i0 + grid.mc), j1 = std::min(g.n, j0 + grid.nc);
    const int64_t cols = j1 - j0;
    // The tile's rows in equal micro-panels (16 rows as 8 + 8, not 14 + 2):
    // a panel of few rows has too few sums in flight to hide the FMAs'
    // latency, and each element's sum is the same whichever panel holds it.
    const int64_t row_panels = (i1 - i0 + kMR - 1) / kMR;
    const int64_t mr = (i1 - i0 + row_panels - 1) / row_panels;
    // A row-major B read where it lies by a tile of few rows: packing a
    // panel cost as much as the few micro-kernels that then used it (a
    // transformer's products at sequence 16 ran at 130 GFLOP/s, 200 without
    // packing); taller tiles use each panel often enough to repay it, and
    // gain from its L1-friendly layout.
    const bool direct_b =
        row_panels <= kDirectPanels && !g.fill_b && g.row_offset == nullptr && !g.b_transposed && g.packed_b == nullptr;
    const F32GemmOperands ops = g.locate(batch);
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      const bool last_block = pc + kc >= g.k;
      for (int64_t ir = i0, q = 0; ir < i1; ir += mr, ++q) pack_a_panel(g, ops.a, ir, pc, kc, pa + q * kc * kMR);
      // This tile's panels of a kept packing (pack_b): K block pc starts
      // after pc rows of the padded width, its panels kc x kNR each.
      const float* kept = g.packed_b != nullptr ? g.packed_b + pc * padded_width(g.n) + j0 * kc : nullptr;
      if (g.fill_b && kept == nullptr) {
        // A few rows at a time, so that what the caller writes is still in
        // L1 when it is packed.
        for (int64_t p = pc; p < pc + kc; p += kFillRows) {
          const int64_t p1 = std::min(pc + kc, p + kFillRows);
          g.fill_b(batch, p, p1, j0, j1, fb, cols);
          pack_rows(fb, cols, p1 - p, cols, pb + (p - pc) * kNR, kc * kNR);
        }
      } else if (kept != nullptr || g.row_offset != nullptr) {
        // Nothing to pack here: a kept packing is ready, and shifted rows
        // are packed panel by panel, below: each is used from L1 right
        // after it is packed, where a whole block (kKC x 800 floats for a
        // batch-8 56x56 conv) was written out to L2 and read back.
      } else if (g.b_transposed) {
        pack_cols(ops.b + j0 * g.ldb + pc, g.ldb, kc, cols, pb);
      }  // else a row-major B: panel by panel too
      for (int64_t jr = j0; jr < j1; jr += kNR) {
        const int64_t jc = std::min(kNR, j1 - jr);
        const int vectors = static_cast<int>((jc + 15) / 16);
        const float* bpanel = pb + (jr - j0) * kc;
        int64_t ldb = kNR;
        if (kept != nullptr) {
          bpanel = kept + (jr - j0) * kc;
        } else if (direct_b) {
          bpanel = ops.b + pc * g.ldb + jr;
          ldb = g.ldb;
        } else if (!g.fill_b && g.row_offset != nullptr) {
          pack_shifted(g, ops.b, pc, kc, jr, jc, pb, kc * kNR);
          bpanel = pb;
        } else if (!g.fill_b && !g.b_transposed) {
          // The next panel's rows are fetched while this one's products
          // run: a model's weights come from L3 or memory on every call,
          // and the packing loads stalled on them (a sixth of a small
          // transformer's time at sequence 16, where each weight row
          // serves few rows of A).
          pack_rows(ops.b + pc * g.ldb + jr, g.ldb, kc, jc, pb, kc * kNR, jr + kNR < j1 ? kNR : 0);
          bpanel = pb;
        }
        for (int64_t ir = i0, q = 0; ir < i1; ir += mr, ++q) {
          const int rows = static_cast<int>(std::min<int64_t>(mr, i1 - ir));
          TileStart s;
          s.load_c = pc > 0 || g.accumulate;
          s.bias = pc == 0 && ops.row_bias != nullptr ? ops.row_bias + ir : nullptr;
          TileEnd e;
          if (last_block) {
            e.col_bias = ops.col_bias != nullptr ? ops.col_bias + jr : nullptr;
            e.add = ops.add != nullptr ? ops.add + ir * g.ldc + jr : nullptr;
            e.add_first = g.epilogue.add_first;
            e.relu = g.epilogue.relu;
          }
          const float* a = pa + q * kc * kMR;
          kMicro[static_cast<size_t>((rows - 1) * kNV + vectors - 1)](a, bpanel, ldb, kc, ops.c + ir * g.ldc + jr,
                                                                      g.ldc, jc, s, e);
        }
      }
    }
  }
}

/// One row of A (m = 1): a product with a vector, which reads each element
/// of B once and so runs at the speed B streams from memory. The tiles
/// above would pack B (a batch-1 linear's whole weight) into panels first,
/// on one thread below a million multiply-adds: ResNet-18's 512 -> 1000
/// classifier took 2.2x ONNX Runtime's time. Each element of C is summed
/// as in the micro-kernel (its start, then one FMA per k in order, then
/// the epilogue), so a row gets the same bits alone as in a batch.
constexpr int64_t kRowCols = 256;  // C columns per work item, B row-major (16 vectors of sums)
constexpr int64_t kRowRows = 32;   // C columns (rows of B) per work item, B transposed
constexpr int64_t kRowAhead = 64;
constexpr int64_t kRowsAhead = 16;

struct RowProduct {
  const F32Gemm& g;
  int64_t items_per_batch = 0;
};

/// The sums' start for lanes `m` of columns [j, j + 16): C's values or 0,
/// plus the row's bias.
SY_F32_TARGET inline __m512 row_start(const F32Gemm& g, const F32GemmOperands& ops, int64_t j, __mmask16 m) {
  __m512 acc = g.accumulate ? _mm512_maskz_loadu_ps(m, ops.c + j) : _mm512_setzero_ps();
  if (ops.row_bias != nullptr) acc = _mm512_add_ps(acc, _mm512_set1_ps(ops.row_bias[0]));
  return acc;
}

/// The epilogue (TileEnd's order) and the masked store of columns [j, j + 16).
SY_F32_TARGET inline void row_finish(const F32Gemm& g, const F32GemmOperands& ops, int64_t j, __mmask16 m, __m512 acc) {
  if (ops.col_bias != nullptr) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, ops.col_bias + j));
  if (ops.add != nullptr) {
    const __m512 r = _mm512_maskz_loadu_ps(m, ops.add + j);
    acc = g.epilogue.add_first ? _mm512_add_ps(r, acc) : _mm512_add_ps(acc, r);
  }
  if (g.epilogue.relu) acc = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(acc, _mm512_setzero_ps(), _CMP_NLT_UQ), acc);
  _mm512_mask_storeu_ps(ops.c + j, m, acc);
}

/// Columns [j, j + 16V) of C with B row-major (masked to j1): V vectors
/// of sums in registers, one row of B at a time, so each row's part is
/// read as one contiguous run.
template <int V>
SY_F32_TARGET void row_times_rows(const F32Gemm& g, const F32GemmOperands& ops, int64_t j, int64_t j1) {
  const int64_t a_step = g.a_transposed ? g.lda : 1;
  __mmask16 m[V];
  __m512 acc[V];
#pragma GCC unroll 16
  for (int64_t v = 0; v < V; ++v) {
    m[v] = mask16(j1 - j - 16 * v);
    acc[v] = row_start(g, ops, j + 16 * v, m[v]);
  }
  const float* b = ops.b + j;
  for (int64_t p = 0; p < g.k; ++p, b += g.ldb) {
    // The same columns some rows on: the hardware prefetcher does not
    // follow a walk down the rows.
    if (p + kRowsAhead < g.k)
#pragma GCC unroll 16
      for (int64_t v = 0; v < V; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(b + kRowsAhead * g.ldb + 16 * v), _MM_HINT_T0);
    const __m512 x = _mm512_set1_ps(ops.a[p * a_step]);
#pragma GCC unroll 16
    for (int64_t v = 0; v < V; ++v) acc[v] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m[v], b + 16 * v), acc[v]);
  }
#pragma GCC unroll 16
  for (int64_t v = 0; v < V; ++v) row_finish(g, ops, j + 16 * v, m[v], acc[v]);
}

using RowsFn = void (*)(const F32Gemm&, const F32GemmOperands&, int64_t, int64_t);
template <size_t... I>
constexpr std::array<RowsFn, sizeof...(I)> rows_table(std::index_sequence<I...>) {
  return {&row_times_rows<static_cast<int>(I) + 1>...};
}
constexpr auto kRowsKernel = rows_table(std::make_index_sequence<kRowCols / 16>{});

/// Columns [j0, j1) of C with B transposed (C's column j is B's row j, a
/// linear layer's weight): 16 rows of B read side by side, 16 k at a time,
/// turned into 16 vectors of one k each, so each lane still sums in k order.
SY_F32_TARGET void row_times_cols(const F32Gemm& g, const F32GemmOperands& ops, int64_t j0, int64_t j1) {
  const int64_t a_step = g.a_transposed ? g.lda : 1;
  for (int64_t j = j0; j < j1; j += 16) {
    const int64_t rows = std::min<int64_t>(16, j1 - j);
    const __mmask16 m = mask16(rows);
    __m512 acc = row_start(g, ops, j, m);
    for (int64_t p = 0; p < g.k; p += 16) {
      const int64_t depth = std::min<int64_t>(16, g.k - p);
      const __mmask16 km = mask16(depth);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) {
        if (i < rows) _mm_prefetch(reinterpret_cast<const char*>(ops.b + (j + i) * g.ldb + p + kRowAhead), _MM_HINT_T0);
        r[i] = i < rows ? _mm512_castps_si512(_mm512_maskz_loadu_ps(km, ops.b + (j + i) * g.ldb + p))
                        : _mm512_setzero_si512();
      }
      transpose16x16(r);
      for (int64_t q = 0; q < depth; ++q)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(ops.a[(p + q) * a_step]), _mm512_castsi512_ps(r[q]), acc);
    }
    row_finish(g, ops, j, m, acc);
  }
}

SY_F32_ENTRY void run_row_items(const RowProduct& rp, std::atomic<int64_t>& next) {
  const F32Gemm& g = rp.g;
  const int64_t width = g.b_transposed ? kRowRows : kRowCols;
  const int64_t items = g.batches * rp.items_per_batch;
  for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < items;
       item = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t batch = item / rp.items_per_batch;
    const int64_t j0 = item % rp.items_per_batch * width, j1 = std::min(g.n, j0 + width);
    const F32GemmOperands ops = g.locate(batch);
    if (g.b_transposed)
      row_times_cols(g, ops, j0, j1);
    else
      kRowsKernel[static_cast<size_t>((j1 - j0 + 15) / 16 - 1)](g, ops, j0, j1);
  }
}

/// Whether `g` is a product of one row with a B in memory (not filled or
/// shifted rows: a convolution's).
bool one_row(const F32Gemm& g) { return g.m == 1 && !g.fill_b && g.row_offset == nullptr; }

void run_one_row(ThreadPool& pool, const F32Gemm& g) {
  RowProduct rp{g, 0};
  const int64_t width = g.b_transposed ? kRowRows : kRowCols;
  rp.items_per_batch = (g.n + width - 1) / width;
  // Threads pay off once B is larger than L2 can hand one core quickly
  // (a quarter million floats, 1 MiB; the classifier above is 2 MiB).
  const bool serial = g.batches * g.n * g.k < (int64_t{1} << 18);
  run_work_items(pool, serial, [&](std::atomic<int64_t>& next) { run_row_items(rp, next); });
}

/// K = 0: C is its start (bias or 0), or keeps its values plus the bias;
/// then the epilogue.
void empty_sum(const F32Gemm& g) {
  for (int64_t batch = 0; batch < g.batches; ++batch) {
    const F32GemmOperands ops = g.locate(batch);
    for (int64_t i = 0; i < g.m; ++i) {
      float* row = ops.c + i * g.ldc;
      const float* add = ops.add != nullptr ? ops.add + i * g.ldc : nullptr;
      const float bias = ops.row_bias != nullptr ? ops.row_bias[i] : 0.0f;
      for (int64_t j = 0; j < g.n; ++j) {
        float x = g.accumulate ? (ops.row_bias != nullptr ? row[j] + bias : row[j]) : bias;
        if (ops.col_bias != nullptr) x += ops.col_bias[j];
        if (add != nullptr) x = g.epilogue.add_first ? add[j] + x : x + add[j];
        if (g.epilogue.relu) x = x < 0.0f ? 0.0f : x;
        row[j] = x;
      }
    }
  }
}

}  // namespace

namespace {

/// gemm_f32 over the pool's threads, or on the calling thread alone when
/// `pool` is null.
bool run_gemm(ThreadPool* pool, const F32Gemm& g) {
  if (!native_f32_gemm_enabled()) return false;
  kernel_switch().count_run();
  if (g.m == 0 || g.n == 0 || g.batches == 0) return true;
  if (g.k == 0) {
    empty_sum(g);
    return true;
  }
  if (one_row(g)) {
    if (pool != nullptr) {
      run_one_row(*pool, g);
    } else {
      const int64_t width = g.b_transposed ? kRowRows : kRowCols;
      std::atomic<int64_t> next{0};
      run_row_items(RowProduct{g, (g.n + width - 1) / width}, next);
    }
    return true;
  }
  // Below about two million multiply-adds (~20 us on one core) threads cost
  // more than they save: the MLP at batch 64, whose 64 x 128 x 128 product
  // is 2^20, took 65 us a call split over two threads and 47-57 us on one
  // (a parked kernel thread's wake-up costs ~13 us on the 2-core VM).
  const bool serial = pool == nullptr || g.batches * g.m * g.n * g.k < (int64_t{1} << 21);
  // A product one thread runs is one tile where it fits: tiles cut for
  // threads that do not come packed A's rows once per column tile and B's
  // columns once per row tile, and left a short row panel (the MLP's
  // 64 x 128 x 128 product ran as 42 + 22 rows by 2 x 64 columns).
  const Grid grid = plan_grid(g, serial ? 1 : static_cast<int64_t>(pool->threads()));
  if (pool == nullptr) {
    std::atomic<int64_t> next{0};
    run_tiles(g, grid, next);
    return true;
  }
  run_work_items(*pool, serial, [&](std::atomic<int64_t>& next) { run_tiles(g, grid, next); });
  return true;
}

}  // namespace

bool gemm_f32(ThreadPool& pool, const F32Gemm& g) { return run_gemm(&pool, g); }

size_t packed_b_floats(const F32Gemm& g) {
  if (g.batches != 1 || g.m <= 1 || g.k == 0 || g.n == 0 || g.fill_b || g.row_offset != nullptr) return 0;
  return static_cast<size_t>(g.k * padded_width(g.n));
}

void pack_b(const F32Gemm& g, float* out) {
  const float* b = g.locate(0).b;
  for (int64_t pc = 0; pc < g.k; pc += kKC) {
    const int64_t kc = std::min(kKC, g.k - pc);
    float* block = out + pc * padded_width(g.n);
    if (g.b_transposed)
      pack_cols(b + pc, g.ldb, kc, g.n, block);
    else
      pack_rows(b + pc * g.ldb, g.ldb, kc, g.n, block, kc * kNR);
  }
}
bool gemm_f32_here(const F32Gemm& g) { return run_gemm(nullptr, g); }

#endif  // SY_F32_GEMM

}  // namespace switchyard::backends::cpu
