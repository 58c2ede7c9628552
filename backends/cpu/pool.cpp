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

/// nan_max on 16 lanes: v where v > best or v is NaN, else best.
SY_POOL_TARGET inline __m512 nan_max16(__m512 best, __m512 v) {
  const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(best, take, v);
}

/// m[c] = nan_max(m[c], row[c]) for c < n, 16 at a time.
SY_POOL_ENTRY void max_into_avx512(float* m, const float* row, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = n - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - c)) - 1u);
    _mm512_mask_storeu_ps(m + c, k, nan_max16(_mm512_maskz_loadu_ps(k, m + c), _mm512_maskz_loadu_ps(k, row + c)));
  }
}

/// The column pass for outputs [ox, end) whose windows lie inside the row
/// (column ox * stride - pad onwards, `kernel` wide), stride 1 or 2, 16
/// outputs at a time, each window folded in the scalar loop's order;
/// returns the first output it left to that loop. A stride-2 window's
/// columns come from two loads and a permute, the second load masked to
/// the columns a window reads.
SY_POOL_ENTRY int64_t window_max_avx512(const float* m, int64_t stride, int64_t pad, int64_t kernel, int64_t ox,
                                        int64_t end, float* out) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (; ox + 16 <= end; ox += 16) {
    const float* base = m + ox * stride - pad;
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < kernel; ++j) {
      const __m512 v = stride == 1 ? _mm512_loadu_ps(base + j)
                                   : _mm512_permutex2var_ps(_mm512_loadu_ps(base + j), even,
                                                            _mm512_maskz_loadu_ps(0x7fff, base + j + 16));
      best = nan_max16(best, v);
    }
    _mm512_storeu_ps(out + ox, best);
  }
  // The last 1-15 outputs in one masked pass: scalar, their NaN tests
  // mispredicted on half the lanes and took half the pool's time. Loads
  // are masked to the columns those windows read (inside the row).
  if (const int64_t rest = end - ox; rest > 0) {
    const float* base = m + ox * stride - pad;
    const int64_t span = stride * (rest - 1) + 1;  // columns from each window's j-th
    const auto mask = [](int64_t n) {
      return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
    };
    const __mmask16 lo = mask(span), hi = mask(std::min<int64_t>(span - 16, 15));
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < kernel; ++j) {
      const __m512 v = stride == 1 ? _mm512_maskz_loadu_ps(lo, base + j)
                                   : _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, base + j), even,
                                                            _mm512_maskz_loadu_ps(hi, base + j + 16));
      best = nan_max16(best, v);
    }
    _mm512_mask_storeu_ps(out + ox, mask(rest), best);
    ox = end;
  }
  return ox;
}
#endif

/// Max pooling of floats over 1-D and 2-D windows without dilation or
/// indices (a CNN's max pool), separably: each output row first takes the
/// maximum down its window's input rows (contiguous, vectorised), then
/// across each output's columns. The same values as the window loop: a max
/// of the same set, with a NaN winning.
template <class T>
void max_pool_rows(Context& ctx, const PoolGeometry& g, const T* x, T* y) {
  const int64_t in_h = g.in[1], in_w = g.in[2], out_h = g.out[1], out_w = g.out[2];
  const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(g.kernel[1] * in_w, 1));
  // f32 on AVX-512F: both passes 16 at a time (a ResNet's 3x3 stride-2
  // pool took 1.7 ms of CPU per image element by element), the columns for
  // the outputs whose windows lie inside the row.
  [[maybe_unused]] bool vector = false;
  [[maybe_unused]] int64_t inside_lo = 0, inside_hi = 0;
#ifdef SY_POOL_AVX512
  if constexpr (std::is_same_v<T, float>) {
    vector = cpu_has_avx512f() && (g.stride[2] == 1 || g.stride[2] == 2);
    inside_lo = std::min(out_w, (g.pad[2] + g.stride[2] - 1) / g.stride[2]);
    const int64_t last = in_w + g.pad[2] - g.kernel[2];  // the last window start inside, as ox * stride
    inside_hi = last < 0 ? inside_lo : std::clamp(last / g.stride[2] + 1, inside_lo, out_w);
  }
#endif
  ctx.pool.parallel_for(g.planes * out_h, grain, [&](int64_t b, int64_t e) {
    std::vector<T> column_max(static_cast<size_t>(in_w));
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t p = idx / out_h, oy = idx % out_h;
      const int64_t start = oy * g.stride[1] - g.pad[1];
      const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(start + g.kernel[1], in_h);
      T* m = column_max.data();
      std::fill(m, m + in_w, -std::numeric_limits<T>::infinity());
      for (int64_t r = lo; r < hi; ++r) {
        const T* row = x + (p * in_h + r) * in_w;
#ifdef SY_POOL_AVX512
        if constexpr (std::is_same_v<T, float>) {
          if (vector) {
            max_into_avx512(m, row, in_w);
            continue;
          }
        }
#endif
        for (int64_t c = 0; c < in_w; ++c) m[c] = nan_max(m[c], row[c]);
      }
      T* out = y + idx * out_w;
      const auto window_max = [&](int64_t ox) {
        const int64_t cs = ox * g.stride[2] - g.pad[2];
        const int64_t c_lo = std::max<int64_t>(cs, 0), c_hi = std::min(cs + g.kernel[2], in_w);
        T best = -std::numeric_limits<T>::infinity();
        for (int64_t c = c_lo; c < c_hi; ++c) best = nan_max(best, m[c]);
        out[ox] = best;
      };
      int64_t ox = 0;
#ifdef SY_POOL_AVX512
      if constexpr (std::is_same_v<T, float>) {
        if (vector) {
          for (; ox < inside_lo; ++ox) window_max(ox);
          ox = window_max_avx512(m, g.stride[2], g.pad[2], g.kernel[2], ox, inside_hi, out);
        }
      }
#endif
      for (; ox < out_w; ++ox) window_max(ox);
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
