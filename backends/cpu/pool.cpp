// SPDX-License-Identifier: Apache-2.0
// Pooling on the CPU: direct loops over each output element's window,
// parallel over planes (and over output rows when there are few planes).
// Windows and divisors follow PyTorch 1.13's CPU kernels exactly: a max
// keeps the first of equal values and lets a NaN win; an average divides by
// the window clipped to the padded input (count_include_pad), to the input,
// or by divisor_override.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/common/conv_geometry.hpp"
#include "backends/cpu/f32_gemm.hpp"
#include "backends/cpu/kernels.hpp"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define SY_POOL_AVX512 1
#include <immintrin.h>
#endif

namespace switchyard::backends::cpu {
namespace {

struct Window {
  int64_t lo[3], hi[3], step[3];
  int64_t padded = 1;  // elements of the window inside the padded input
};

Window window(const PoolOp& op, const PoolGeometry& g, const int64_t (&o)[3]) {
  Window w{};
  for (int a = 0; a < 3; ++a) {
    if (op.adaptive()) {
      w.lo[a] = adaptive_start(o[a], g.in[a], g.out[a]);
      w.hi[a] = adaptive_end(o[a], g.in[a], g.out[a]);
      w.step[a] = 1;
      w.padded *= w.hi[a] - w.lo[a];
    } else {
      const int64_t start = o[a] * g.stride[a] - g.pad[a];
      w.step[a] = g.dilation[a];
      w.padded *= std::min(start + g.kernel[a], g.in[a] + g.pad_after[a]) - start;
      w.lo[a] = start;
      w.hi[a] = std::min(start + (g.kernel[a] - 1) * g.dilation[a] + 1, g.in[a]);
      if (w.lo[a] < 0) w.lo[a] += ((-w.lo[a] + g.dilation[a] - 1) / g.dilation[a]) * g.dilation[a];
    }
  }
  return w;
}

/// PyTorch's max with a NaN winning: the NaN if either is one.
template <class T>
T nan_max(T best, T v) {
  return v > best || v != v ? v : best;
}

#ifdef SY_POOL_AVX512
#define SY_POOL_TARGET __attribute__((target("avx512f")))
// Entry points noinline, so the pool's ISA clones (isa_clones.hpp) do not
// inline AVX-512 code into baseline code.
#define SY_POOL_ENTRY SY_POOL_TARGET __attribute__((noinline))

/// nan_max on 16 lanes: v where v > best or v is NaN, else best. vmaxps
/// returns its second operand on ties and when either is NaN, so best stays
/// on equal values and when it is the NaN; a NaN v's lanes keep v.
SY_POOL_TARGET inline __m512 nan_max16(__m512 best, __m512 v) {
  return _mm512_mask_max_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v, best);
}

SY_POOL_TARGET inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

SY_POOL_TARGET inline void column_max_block(float* m, const float* const* rows, int64_t count, int64_t c, __mmask16 k) {
  __m512 best = _mm512_maskz_loadu_ps(k, rows[0] + c);
  for (int64_t r = 1; r < count; ++r) best = nan_max16(best, _mm512_maskz_loadu_ps(k, rows[r] + c));
  _mm512_mask_storeu_ps(m + c, k, best);
}

/// m[c] = the nan_max of rows[0][c], rows[1][c], ... in that order, c < n.
SY_POOL_ENTRY void column_max_avx512(float* m, const float* const* rows, int64_t count, int64_t n) {
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) column_max_block(m, rows, count, c, 0xffff);
  if (c < n) column_max_block(m, rows, count, c, first_lanes(n - c));
}

/// out[ox] for ox < out_w, 16 at a time: the nan_max of m[ox * stride + j]
/// for j < kernel in that order (stride 1 or 2). m holds -inf past the
/// row wherever a vector of outputs reads (max_pool_rows sizes it).
/// Stride 2 takes a window's columns from two loads and two permutes
/// (even and odd columns), and its third column from the even ones
/// shifted by a lane.
SY_POOL_ENTRY void window_max_avx512(const float* m, int64_t stride, int64_t kernel, int64_t out_w, float* out) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t ox = 0; ox < out_w; ox += 16) {
    const float* base = m + ox * stride;
    __m512 best;
    if (stride == 1) {
      best = _mm512_loadu_ps(base);
      for (int64_t j = 1; j < kernel; ++j) best = nan_max16(best, _mm512_loadu_ps(base + j));
    } else {
      const __m512 lo = _mm512_loadu_ps(base), hi = _mm512_loadu_ps(base + 16);
      const __m512 evens = _mm512_permutex2var_ps(lo, even, hi);
      best = evens;
      if (kernel > 1) best = nan_max16(best, _mm512_permutex2var_ps(lo, odd, hi));
      if (kernel > 2) {
        const __m512i next = _mm512_castps_si512(_mm512_loadu_ps(base + 32));
        best = nan_max16(best,
                         _mm512_castsi512_ps(_mm512_maskz_alignr_epi32(0xffff, next, _mm512_castps_si512(evens), 1)));
      }
      for (int64_t j = 3; j < kernel; ++j)
        best = nan_max16(best, _mm512_permutex2var_ps(_mm512_loadu_ps(base + j), even, _mm512_loadu_ps(base + j + 16)));
    }
    _mm512_mask_storeu_ps(out + ox, first_lanes(out_w - ox), best);
  }
}
#endif

/// Max pooling of floats over 1-D and 2-D windows without dilation or
/// indices (a CNN's max pool), separably: each output row first takes the
/// maximum down its window's input rows, then across each output's
/// columns. The same values as the window loop: a max of the same set, with
/// a NaN winning. The column maxima sit in a buffer with -inf on both sides
/// of the row, so padding and the last vector's extra lanes add nothing to
/// a max and no output needs a clipped window.
template <class T>
void max_pool_rows(Context& ctx, const PoolGeometry& g, const T* x, T* y) {
  const int64_t in_h = g.in[1], in_w = g.in[2], out_h = g.out[1], out_w = g.out[2];
  const int64_t kernel = g.kernel[2], stride = g.stride[2], pad = g.pad[2];
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(g.kernel[1] * in_w, 1));
  // f32 on AVX-512F: both passes 16 at a time (a ResNet's 3x3 stride-2
  // pool took 1.7 ms of CPU per image element by element).
  [[maybe_unused]] bool vector = false;
#ifdef SY_POOL_AVX512
  if constexpr (std::is_same_v<T, float>) vector = cpu_has_avx512f() && (stride == 1 || stride == 2);
#endif
  // Columns of the buffer the windows read (a vector of outputs reads up
  // to 48 past its stride-2 start), the row at [pad, pad + in_w).
  const int64_t out_blocks = (out_w + 15) / 16 * 16;
  const auto size = static_cast<size_t>(std::max(pad + in_w, out_blocks * stride + kernel + 48));
  ctx.pool.parallel_for(g.planes * out_h, grain, [&](int64_t b, int64_t e) {
    std::vector<T> column_max(size, -std::numeric_limits<T>::infinity());
    T* m = column_max.data() + pad;
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t p = idx / out_h, oy = idx % out_h;
      const int64_t start = oy * g.stride[1] - g.pad[1];
      const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(start + g.kernel[1], in_h);
      const T* rows[16];  // window rows; more take the loop below
      const int64_t count = hi - lo;
      for (int64_t r = 0; r < std::min<int64_t>(count, 16); ++r) rows[r] = x + (p * in_h + lo + r) * in_w;
      bool done = false;
#ifdef SY_POOL_AVX512
      if constexpr (std::is_same_v<T, float>) {
        if (vector && count >= 1 && count <= 16) {
          column_max_avx512(m, rows, count, in_w);
          done = true;
        }
      }
#endif
      if (!done) {
        std::fill(m, m + in_w, -std::numeric_limits<T>::infinity());
        for (int64_t r = lo; r < hi; ++r) {
          const T* row = x + (p * in_h + r) * in_w;
          for (int64_t c = 0; c < in_w; ++c) m[c] = nan_max(m[c], row[c]);
        }
      }
      T* out = y + idx * out_w;
#ifdef SY_POOL_AVX512
      if constexpr (std::is_same_v<T, float>) {
        if (vector) {
          window_max_avx512(column_max.data(), stride, kernel, out_w, out);
          continue;
        }
      }
#endif
      for (int64_t ox = 0; ox < out_w; ++ox) {
        const T* window = column_max.data() + ox * stride;
        T best = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < kernel; ++j) best = nan_max(best, window[j]);
        out[ox] = best;
      }
    }
  });
}

template <class T>
void pool_typed(Context& ctx, const PoolOp& op, const PoolGeometry& g, const T* x, void* y_raw) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op.kind == PoolKind::max && g.in[0] == 1 && g.out[0] == 1 && g.kernel[0] == 1 && g.dilation[1] == 1 &&
        g.dilation[2] == 1) {
      max_pool_rows(ctx, g, x, static_cast<T*>(y_raw));
      return;
    }
  }
  const bool want_index = op.kind == PoolKind::max_indices || op.kind == PoolKind::adaptive_max_indices;
  const bool is_max = want_index || op.kind == PoolKind::max || op.kind == PoolKind::adaptive_max;
  const int64_t out_plane = g.out_plane();
  const int64_t in_plane = g.in_plane();
  const int64_t work = g.planes * out_plane;
  int64_t window_size = 1;
  for (int a = 0; a < 3; ++a)
    window_size *= op.adaptive() ? (g.in[a] + g.out[a] - 1) / std::max<int64_t>(g.out[a], 1) + 1 : g.kernel[a];
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(window_size, 1));
  ctx.pool.parallel_for(work, grain, [&](int64_t b, int64_t e) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t p = idx / out_plane;
      int64_t r = idx % out_plane;
      const int64_t o[3] = {r / (g.out[1] * g.out[2]), (r / g.out[2]) % g.out[1], r % g.out[2]};
      const Window w = window(op, g, o);
      const T* plane = x + p * in_plane;
      if (is_max) {
        using Acc = std::conditional_t<std::is_floating_point_v<T>, T, double>;
        Acc best = -std::numeric_limits<Acc>::infinity();
        int64_t best_at = (w.lo[0] * g.in[1] + w.lo[1]) * g.in[2] + w.lo[2];
        for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; i0 += w.step[0])
          for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; i1 += w.step[1]) {
            const int64_t row = (i0 * g.in[1] + i1) * g.in[2];
            for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; i2 += w.step[2]) {
              const Acc v = static_cast<Acc>(plane[row + i2]);
              if (v > best || std::isnan(v)) {
                best = v;
                best_at = row + i2;
              }
            }
          }
        if (want_index)
          static_cast<int64_t*>(y_raw)[idx] = best_at;
        else
          static_cast<T*>(y_raw)[idx] = static_cast<T>(best);
        continue;
      }
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      Acc sum = 0;
      int64_t inside = 1;
      for (int a = 0; a < 3; ++a) inside *= std::max<int64_t>(w.hi[a] - w.lo[a], 0);
      for (int64_t i0 = w.lo[0]; i0 < w.hi[0]; ++i0)
        for (int64_t i1 = w.lo[1]; i1 < w.hi[1]; ++i1) {
          const T* row = plane + (i0 * g.in[1] + i1) * g.in[2];
          for (int64_t i2 = w.lo[2]; i2 < w.hi[2]; ++i2) {
            if constexpr (std::is_floating_point_v<T>)
              sum += row[i2];
            else  // wraps like PyTorch's int64 sum instead of overflowing
              sum = static_cast<Acc>(static_cast<uint64_t>(sum) + static_cast<uint64_t>(row[i2]));
          }
        }
      int64_t divisor = op.adaptive() || op.count_include_pad ? w.padded : inside;
      if (!op.adaptive() && op.divisor_override != 0) divisor = op.divisor_override;
      T* y = static_cast<T*>(y_raw);
      if (inside == 0)
        y[idx] = T(0);
      else if constexpr (std::is_floating_point_v<T>)
        y[idx] = static_cast<T>(sum / static_cast<double>(divisor));
      else
        y[idx] = static_cast<T>(sum / divisor);
    }
  });
}

}  // namespace

Expected<Bytes> pool(Context& ctx, PoolOp& op, const Inputs& in) {
  const PoolGeometry g = pool_geometry(op);
  auto out = ctx.buffers.allocate(op.out.bytes());
  void* y = writable<std::byte>(out);
  switch (op.in.dtype) {
    case DType::f32:
      pool_typed<float>(ctx, op, g, in.bytes[0]->as<const float>(), y);
      break;
    case DType::f64:
      pool_typed<double>(ctx, op, g, in.bytes[0]->as<const double>(), y);
      break;
    case DType::i64:
      pool_typed<int64_t>(ctx, op, g, in.bytes[0]->as<const int64_t>(), y);
      break;
    default:
      return DeviceError(Errc::unsupported,
                         "cpu: " + OperationIr(op).name() + " is not defined for " + std::string(name_of(op.in.dtype)));
  }
  return out;
}

}  // namespace switchyard::backends::cpu
