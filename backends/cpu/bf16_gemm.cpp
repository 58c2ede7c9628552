// SPDX-License-Identifier: Apache-2.0
// bf16 x bf16 -> bf16 GEMM on VDPBF16PS (AVX512-BF16), f32 accumulation.
//
// VDPBF16PS multiplies 32 bf16 pairs and adds each pair's two products to
// one of 16 f32 lanes: lane j += a[2j] * b[2j] + a[2j+1] * b[2j+1]. So B is
// packed in panels of kNR columns where each 32-bit lane holds the pair
// (b[2q][j], b[2q+1][j]) of two consecutive k, and A needs no packing: the
// pair (a[i][2q], a[i][2q+1]) is already 32 contiguous bits of a row-major
// A, broadcast to all lanes straight from memory. A transposed A is
// transposed once into a scratch copy instead.
//
// Blocking, as BLIS does it: a result tile of at most kMC x kNC per work
// item, taken one at a time by the device's threads in a single
// ThreadPool pass; K split into kKC blocks (f32 partial sums live in a
// per-thread scratch tile between blocks); a kMR x kNR register tile
// (kMR x kNV zmm accumulators) per micro-kernel call, reusing one kKC x kNR
// B micro-panel (L2; 128 KiB) for every row block of A and the kMC x kKC A block
// (L2) for every panel. B is packed one n tile at a time by the first
// tile that needs it, and A's rows are looked at for subnormals by the
// first tile that reads them, so neither needs a pass (and a wake-up of
// the threads) of its own. Edges run the same kernel compiled for fewer
// rows or vectors and store under a mask, so no shape needs padding of A
// or C; B's panels are zero-padded in k (odd K) and n.
//
// Compiled with target attributes rather than -march, so the portable
// build carries it; chosen at run time (cpu_has_bf16_dot). It needs no
// target_clones, so SWITCHYARD_CPU_ONE_LEVEL builds (native, sanitizers)
// keep it too, and ASan and TSan check its packing and threading. The entry points
// are noinline: ThreadPool's run_for_this_cpu clones flatten whatever they
// call, and must not try to inline AVX512-BF16 code into baseline code.

// GCC 12's _mm512_undefined_*() read themselves (GCC bug 105593, fixed in
// 12.3), which -Wmaybe-uninitialized reports inside every AVX-512 shuffle.
// The state is per source location, so it must precede the first include
// of <immintrin.h>.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same, as -O1 reports it
#endif

#include "backends/cpu/bf16_gemm.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/matmul_plan.hpp"
#include "backends/cpu/native_gemm.hpp"

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 16) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define SY_BF16_GEMM 1
#include <immintrin.h>

#include "backends/cpu/avx512_transpose.hpp"
#endif

namespace switchyard::backends::cpu {

bool cpu_has_bf16_dot() noexcept {
#ifdef SY_BF16_GEMM
  // libgcc's and compiler-rt's checks include the OS saving the zmm state.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
#else
  return false;
#endif
}

namespace {

NativeKernelSwitch& kernel_switch() {
  static NativeKernelSwitch s(cpu_has_bf16_dot(), "SWITCHYARD_CPU_BF16_GEMM");
  return s;
}

}  // namespace

uint64_t native_bf16_gemm_runs() noexcept { return kernel_switch().runs(); }
bool native_bf16_gemm_enabled() noexcept { return kernel_switch().enabled(); }
bool set_native_bf16_gemm(bool on) noexcept { return kernel_switch().set(on); }

#ifndef SY_BF16_GEMM

std::optional<Expected<Bytes>> matmul_bf16(Context&, const MatmulOp&, const Inputs&) { return std::nullopt; }

#else

namespace {

#define SY_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define SY_BF16_ENTRY SY_BF16_TARGET __attribute__((noinline))

// 6 x 64: 24 accumulators, and per k pair 4 B loads + 6 broadcasts for 24
// dot products, so loads stay well under the two-per-cycle dot product
// rate; 64 columns divide the power-of-two widths models use. (8 x 48 ran
// as fast within the noise of a shared machine, but leaves a 16-wide edge
// on such widths.)
constexpr int kMR = 6;
constexpr int kNV = 4;
constexpr int64_t kNR = 16 * kNV;
constexpr int64_t kKC = 1024;  // even: only the last K block has an odd tail
constexpr int64_t kMC = 192;   // a multiple of kMR
constexpr int64_t kNC = 8 * kNR;

static_assert(kKC % 2 == 0 && kMC % kMR == 0 && kNC % kNR == 0 && kNR % 32 == 0);

/// Lanes (16-bit) of `v` that hold a bf16 subnormal: exponent 0, mantissa
/// not 0. VDPBF16PS reads them as zero.
SY_BF16_TARGET inline __mmask32 subnormal_lanes(__m512i v) {
  const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7fff));
  return _mm512_cmple_epu16_mask(_mm512_sub_epi16(mag, _mm512_set1_epi16(1)), _mm512_set1_epi16(0x7e));
}
SY_BF16_TARGET inline __mmask16 subnormal_lanes(__m256i v) {
  const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi16(0x7fff));
  return _mm256_cmple_epu16_mask(_mm256_sub_epi16(mag, _mm256_set1_epi16(1)), _mm256_set1_epi16(0x7e));
}

SY_BF16_TARGET inline __mmask16 mask16(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1u);
}
SY_BF16_TARGET inline __mmask32 mask32(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << std::max<int64_t>(n, 0)) - 1u);
}

/// Whether n bf16 values hold a subnormal.
SY_BF16_ENTRY bool has_subnormal(const uint16_t* p, int64_t n) {
  __mmask32 bad = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) bad |= subnormal_lanes(_mm512_loadu_si512(p + i));
  if (i < n) bad |= subnormal_lanes(_mm512_maskz_loadu_epi16(mask32(n - i), p + i));
  return bad != 0;
}

/// Packs panels [p0, p1) of a row-major k x n B: for pair q, rows 2q and
/// 2q+1 interleaved (row 2q+1 is zero past an odd k, columns past n are
/// zero). Row by row, not panel by panel: rows are then read in order, in
/// stretches of the panels' width, instead of as narrow strips 2n bytes
/// apart. Returns whether those columns hold a subnormal.
SY_BF16_ENTRY bool pack_b_rows(const uint16_t* b, int64_t k, int64_t n, int64_t p0, int64_t p1, int64_t panel_elems,
                               uint16_t* out) {
  // vpermt2w indices: 16-bit lanes of x0 (0..31) and x1 (32..63) alternating,
  // for columns 0..15 and 16..31 of a 32-column group.
  alignas(64) static constexpr uint16_t lo_idx[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  __mmask32 bad = 0;
  for (int64_t q = 0; 2 * q < k; ++q) {
    const uint16_t* r0 = b + 2 * q * n;
    const bool second = 2 * q + 1 < k;
    for (int64_t j = p0 * kNR; j < p1 * kNR; j += 32) {
      __m512i x0 = _mm512_setzero_si512(), x1 = _mm512_setzero_si512();
      if (j < n) {
        const __mmask32 m = mask32(n - j);
        x0 = _mm512_maskz_loadu_epi16(m, r0 + j);
        if (second) x1 = _mm512_maskz_loadu_epi16(m, r0 + n + j);
        bad |= subnormal_lanes(x0) | subnormal_lanes(x1);
      }
      uint16_t* dst = out + (j / kNR) * panel_elems + q * 2 * kNR + 2 * (j % kNR);
      _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(x0, lo, x1));
      _mm512_storeu_si512(dst + 32, _mm512_permutex2var_epi16(x0, hi, x1));
    }
  }
  return bad != 0;
}

/// Packs panel `panel` of a B given as its n x k transpose (linear's
/// weight): each k pair of a column is already 32 contiguous bits of a
/// row, so packing is a 32-bit transpose, 16 x 16 at a time.
SY_BF16_ENTRY bool pack_b_cols(const uint16_t* bt, int64_t k, int64_t n, int64_t panel, uint16_t* out) {
  const int64_t j0 = panel * kNR;
  const int64_t pairs = (k + 1) / 2;
  __mmask32 bad = 0;
  for (int v = 0; v < kNV; ++v) {
    for (int64_t q0 = 0; q0 < pairs; q0 += 16) {
      // The mask stops at k: an odd k's last pair gets a zero high half.
      const __mmask32 m = mask32(k - 2 * q0);
      __m512i r[16];
      for (int t = 0; t < 16; ++t) {
        const int64_t j = j0 + 16 * v + t;
        r[t] = j < n ? _mm512_maskz_loadu_epi16(m, bt + j * k + 2 * q0) : _mm512_setzero_si512();
        bad |= subnormal_lanes(r[t]);
      }
      transpose16x16(r);
      const int64_t nq = std::min<int64_t>(16, pairs - q0);
      for (int64_t c = 0; c < nq; ++c) _mm512_storeu_si512(out + (q0 + c) * 2 * kNR + 32 * v, r[c]);
    }
  }
  return bad != 0;
}

/// Where a micro-tile's sums go.
struct TileOut {
  float* partial = nullptr;  // f32 sums between K blocks (row stride ld_partial)
  int64_t ld_partial = 0;
  bool load_partial = false;  // start from the previous blocks' sums
  bool final = false;         // last K block: add the bias, round, store to c
  uint16_t* c = nullptr;      // the tile's first element
  int64_t ldc = 0;
  int64_t cols = 0;                // valid columns (the rest is padding)
  const uint16_t* bias = nullptr;  // at the tile's first element, or null
  int64_t bias_row_stride = 0;
  bool bias_per_column = false;  // else one value per row
};

/// f32 -> bf16, round to nearest even, NaN kept quiet: f32_to_bf16's
/// arithmetic (half_convert.cpp) on 16 lanes, so both paths round alike.
SY_BF16_TARGET inline __m256i narrow(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

SY_BF16_TARGET inline __m512 widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/// One k pair: acc[i][v] += a pair of row i (or, for an odd K's last k,
/// the pair (a, 0), whose zero meets B's zero padding) . B pair vector v.
/// (A helper, not a lambda: GCC does not give lambdas the target
/// attribute of the function they are written in.)
template <int MR, int NV, bool Tail>
SY_BF16_TARGET inline void dot_step(__m512 (&acc)[MR][NV], const uint16_t* a, int64_t lda, int64_t q,
                                    const uint16_t* bq) {
  __m512bh bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bq + 32 * v);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    int32_t pair = 0;
    if constexpr (Tail)
      pair = a[i * lda + 2 * q];
    else
      std::memcpy(&pair, a + i * lda + 2 * q, sizeof pair);
    const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
  }
}

/// acc[MR x 16NV] (+)= A[MR x (2 pairs + tail)] * packed B micro-panel,
/// then stored to o. a: rows at stride lda, from the block's first k.
template <int MR, int NV>
SY_BF16_TARGET void micro(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t pairs, bool tail,
                          const TileOut& o) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      acc[i][v] = o.load_partial ? _mm512_loadu_ps(o.partial + i * o.ld_partial + 16 * v) : _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) dot_step<MR, NV, false>(acc, a, lda, q, b + q * 2 * kNR);
  if (tail) dot_step<MR, NV, true>(acc, a, lda, pairs, b + pairs * 2 * kNR);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (!o.final) {
        _mm512_storeu_ps(o.partial + i * o.ld_partial + 16 * v, acc[i][v]);
        continue;
      }
      const __mmask16 m = mask16(o.cols - 16 * v);
      __m512 x = acc[i][v];
      if (o.bias != nullptr) {
        const uint16_t* br = o.bias + i * o.bias_row_stride;
        // The f32 path adds the widened bias to the f32 product, then
        // rounds: the same single rounding.
        x = _mm512_add_ps(x, o.bias_per_column ? widen(_mm256_maskz_loadu_epi16(m, br + 16 * v))
                                               : _mm512_castsi512_ps(_mm512_set1_epi32(int32_t{br[0]} << 16)));
      }
      _mm256_mask_storeu_epi16(o.c + i * o.ldc + 16 * v, m, narrow(x));
    }
  }
}

using MicroFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, bool, const TileOut&);

template <size_t... I>
constexpr std::array<MicroFn, sizeof...(I)> micro_table(std::index_sequence<I...>) {
  return {&micro<static_cast<int>(I / kNV) + 1, static_cast<int>(I % kNV) + 1>...};
}
/// micro<rows, vectors> at [(rows - 1) * kNV + vectors - 1].
constexpr auto kMicro = micro_table(std::make_index_sequence<kMR * kNV>{});

/// Everything the work items share.
struct Gemm {
  int64_t m = 0, n = 0, k = 0;
  const MatmulDims* dims = nullptr;
  const uint16_t* a = nullptr;  // row-major m x k matrices (lda = k)
  const uint16_t* b = nullptr;  // the rhs as given
  bool b_transposed = false;
  uint16_t* packed_b = nullptr;
  int64_t panels = 0, panel_elems = 0;
  uint16_t* c = nullptr;
  const uint16_t* bias = nullptr;
  std::vector<int64_t> bias_strides;  // per result axis, 0 where broadcast
  int64_t nc = kNC;                   // n tile width: kNC, or less so that every thread starts on a B block of its own
  int64_t m_tiles = 0, n_tiles = 0;
  // Per (rhs matrix, n tile): 0 not packed, 1 being packed, 2 packed. The
  // first tile that needs a block packs it, so packing overlaps the other
  // threads' products and needs no pass (and wake-up) of its own.
  std::atomic<uint8_t>* b_state = nullptr;
  // Per (lhs matrix, m tile), when the lhs is not transposed: whether a
  // tile has looked for subnormals in those rows yet.
  std::atomic<uint8_t>* a_scanned = nullptr;
  std::atomic<bool>* subnormal = nullptr;

  [[nodiscard]] int64_t packed_matrix_elems() const { return panels * panel_elems; }

  [[nodiscard]] int64_t bias_offset(int64_t batch) const {
    int64_t off = 0;
    const auto& bd = dims->batch_dims;
    for (size_t i = bd.size(); i-- > 0;) {
      off += (batch % bd[i]) * bias_strides[i];
      batch /= bd[i];
    }
    return off;
  }
};

/// Packs block (bm, nt) of B unless another tile has; waits while another
/// thread packs it (a bounded wait: that thread is inside pack_b_*).
SY_BF16_TARGET void ensure_packed(const Gemm& g, int64_t bm, int64_t nt) {
  std::atomic<uint8_t>& state = g.b_state[bm * g.n_tiles + nt];
  if (state.load(std::memory_order_acquire) == 2) return;
  uint8_t expected = 0;
  if (state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
    const int64_t p0 = nt * (g.nc / kNR), p1 = std::min(g.panels, p0 + g.nc / kNR);
    const uint16_t* b = g.b + bm * g.k * g.n;
    uint16_t* out = g.packed_b + bm * g.packed_matrix_elems();
    bool found = false;
    if (g.b_transposed)
      for (int64_t p = p0; p < p1; ++p) found = pack_b_cols(b, g.k, g.n, p, out + p * g.panel_elems) || found;
    else
      found = pack_b_rows(b, g.k, g.n, p0, p1, g.panel_elems, out);
    if (found) g.subnormal->store(true, std::memory_order_relaxed);
    state.store(2, std::memory_order_release);
    return;
  }
  for (int spins = 0; state.load(std::memory_order_acquire) != 2; ++spins) {
    if (spins < 1000)
      _mm_pause();
    else
      std::this_thread::yield();  // the packer may have lost its core
  }
}

/// Result tiles of (batch, m tile, n tile), full K each, taken one at a
/// time from `next` until none is left: tiles differ in size at the edges,
/// and the pool's chunks (a few per thread) would leave a thread idle for
/// up to a chunk at the end. Tiles next to each other in that order have
/// different n tiles, so threads starting together pack different blocks.
SY_BF16_ENTRY void run_tiles(const Gemm& g, std::atomic<int64_t>& next) {
  // Partial sums between K blocks; per thread, reused, so no op pays for
  // fresh pages.
  thread_local std::vector<float> partial;
  const bool blocked = g.k > kKC;
  if (blocked && partial.size() < static_cast<size_t>(kMC * kNC)) partial.resize(kMC * kNC);
  const size_t rank = g.bias_strides.size();
  const int64_t bias_rs = rank >= 2 ? g.bias_strides[rank - 2] : 0;
  const bool bias_cols = rank >= 1 && g.bias_strides[rank - 1] != 0;
  const int64_t tiles = g.dims->batches * g.m_tiles * g.n_tiles;
  for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < tiles;
       item = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t batch = item / (g.m_tiles * g.n_tiles);
    const int64_t rest = item % (g.m_tiles * g.n_tiles);
    const int64_t i0 = (rest / g.n_tiles) * kMC, j0 = (rest % g.n_tiles) * g.nc;
    const int64_t i1 = std::min(g.m, i0 + kMC), j1 = std::min(g.n, j0 + g.nc);
    // An operand with a subnormal sends the op to the f32 path: stop.
    if (g.subnormal->load(std::memory_order_relaxed)) return;
    const auto [am, bm] = g.dims->operands(batch);
    const uint16_t* a = g.a + am * g.m * g.k;
    if (g.a_scanned != nullptr && g.a_scanned[am * g.m_tiles + i0 / kMC].exchange(1, std::memory_order_relaxed) == 0 &&
        has_subnormal(a + i0 * g.k, (i1 - i0) * g.k))
      g.subnormal->store(true, std::memory_order_relaxed);
    ensure_packed(g, bm, j0 / g.nc);
    const uint16_t* pb = g.packed_b + bm * g.packed_matrix_elems();
    uint16_t* c = g.c + batch * g.m * g.n;
    const uint16_t* bias = g.bias == nullptr ? nullptr : g.bias + g.bias_offset(batch);
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      TileOut o;
      o.ld_partial = kNC;
      o.load_partial = pc > 0;
      o.final = pc + kc == g.k;
      o.ldc = g.n;
      o.bias_row_stride = bias_rs;
      o.bias_per_column = bias_cols;
      for (int64_t jr = j0; jr < j1; jr += kNR) {
        o.cols = std::min(kNR, j1 - jr);
        const int vectors = static_cast<int>((o.cols + 15) / 16);
        const uint16_t* bpanel = pb + (jr / kNR) * g.panel_elems + (pc / 2) * 2 * kNR;
        for (int64_t ir = i0; ir < i1; ir += kMR) {
          const int rows = static_cast<int>(std::min<int64_t>(kMR, i1 - ir));
          o.partial = blocked ? partial.data() + (ir - i0) * kNC + (jr - j0) : nullptr;
          o.c = c + ir * g.n + jr;
          o.bias = bias == nullptr ? nullptr : bias + ir * bias_rs + (bias_cols ? jr : 0);
          kMicro[static_cast<size_t>((rows - 1) * kNV + vectors - 1)](a + ir * g.k + pc, g.k, bpanel, kc / 2,
                                                                      (kc & 1) != 0, o);
        }
      }
    }
  }
}

/// dst (m x k, row-major) = the k x m matrix src, transposed.
void transpose_into(const uint16_t* src, int64_t k, int64_t m, uint16_t* dst) {
  constexpr int64_t block = 64;
  for (int64_t p0 = 0; p0 < k; p0 += block)
    for (int64_t i0 = 0; i0 < m; i0 += block)
      for (int64_t p = p0; p < std::min(k, p0 + block); ++p)
        for (int64_t i = i0; i < std::min(m, i0 + block); ++i) dst[i * k + p] = src[p * m + i];
}

}  // namespace

std::optional<Expected<Bytes>> matmul_bf16(Context& ctx, const MatmulOp& op, const Inputs& in) {
  if (op.out.dtype != DType::bf16 || op.lhs.dtype != DType::bf16 || op.rhs.dtype != DType::bf16) return std::nullopt;
  if (op.has_bias() && op.bias.dtype != DType::bf16) return std::nullopt;
  if (!native_bf16_gemm_enabled()) return std::nullopt;
  const MatmulDims d = plan_matmul(op);
  if (d.m == 0 || d.n == 0 || d.k == 0 || d.batches == 0) return std::nullopt;  // nothing to multiply

  Gemm g;
  g.m = d.m;
  g.n = d.n;
  g.k = d.k;
  g.dims = &d;
  g.b = in.bytes[1]->as<const uint16_t>();
  g.b_transposed = op.transpose_rhs;
  g.panels = (d.n + kNR - 1) / kNR;
  g.panel_elems = (d.k + 1) / 2 * 2 * kNR;
  const int64_t a_matrices = op.lhs.numel() / (d.m * d.k);
  const int64_t b_matrices = op.rhs.numel() / (d.k * d.n);
  const uint16_t* lhs = in.bytes[0]->as<const uint16_t>();

  Bytes packed = ctx.buffers.allocate(static_cast<size_t>(b_matrices * g.packed_matrix_elems()) * 2);
  g.packed_b = writable<uint16_t>(packed);
  Bytes a_copy;
  if (op.transpose_lhs) {
    a_copy = ctx.buffers.allocate(static_cast<size_t>(op.lhs.numel()) * 2);
    g.a = writable<uint16_t>(a_copy);
  } else {
    g.a = lhs;
  }

  // Below about a million multiply-adds threads cost more than they save.
  const bool serial = d.batches * d.m * d.n * d.k < (int64_t{1} << 20);
  std::atomic<bool> subnormal{false};
  g.subnormal = &subnormal;

  // A transposed lhs (only the wire protocol sets it) is transposed first,
  // and looked at for subnormals then.
  if (op.transpose_lhs) {
    ctx.pool.parallel_for(a_matrices, serial ? a_matrices : 1, [&](int64_t begin, int64_t end) {
      for (int64_t matrix = begin; matrix < end; ++matrix) {
        const uint16_t* src = lhs + matrix * d.m * d.k;
        if (has_subnormal(src, d.m * d.k)) subnormal.store(true, std::memory_order_relaxed);
        transpose_into(src, d.k, d.m, writable<uint16_t>(a_copy) + matrix * d.m * d.k);
      }
    });
    if (subnormal.load(std::memory_order_relaxed)) return std::nullopt;
  }

  auto out = ctx.buffers.allocate(op.out.bytes());
  g.c = writable<uint16_t>(out);
  if (op.has_bias()) {
    g.bias = in.bytes[2]->as<const uint16_t>();
    g.bias_strides = broadcast_strides(op.bias.shape, op.out.shape);
  }
  g.m_tiles = (d.m + kMC - 1) / kMC;
  // Threads start on different n tiles (see run_tiles), so give each one
  // a B block to pack while the others pack theirs.
  const auto threads = static_cast<int64_t>(ctx.pool.threads());
  g.nc = std::clamp((d.n + threads - 1) / threads + kNR - 1, kNR, kNC) / kNR * kNR;
  g.n_tiles = (d.n + g.nc - 1) / g.nc;
  std::vector<std::atomic<uint8_t>> b_state(static_cast<size_t>(b_matrices * g.n_tiles));
  g.b_state = b_state.data();
  std::vector<std::atomic<uint8_t>> a_scanned(op.transpose_lhs ? 0 : static_cast<size_t>(a_matrices * g.m_tiles));
  g.a_scanned = op.transpose_lhs ? nullptr : a_scanned.data();
  run_work_items(ctx.pool, serial, [&](std::atomic<int64_t>& next) { run_tiles(g, next); });
  // Every tile of an lhs matrix in the batch has run, so every row block
  // that any tile reads has been looked at, and every B block packed.
  if (subnormal.load(std::memory_order_relaxed)) return std::nullopt;
  kernel_switch().count_run();
  return Expected<Bytes>(std::move(out));
}

#endif  // SY_BF16_GEMM

}  // namespace switchyard::backends::cpu
