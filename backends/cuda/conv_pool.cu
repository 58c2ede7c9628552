// SPDX-License-Identifier: Apache-2.0
// Convolution and pooling kernels: one thread per output element, the same
// gather formulation as the reference backend (a transposed convolution's
// output element collects the inputs that land on it, so no atomics).
// Direct kernels keep the CUDA backend free of cuDNN; a GEMM path is future
// work (see README, "Neural-network ops").
//
// Storage type S, arithmetic in Opmath<S>: f16 and bf16 accumulate in
// float and round once per output element, as the CPU's widened f32 path.

#include "backends/cuda/device_util.cuh"

namespace switchyard::backends::cuda::kern {
namespace {

template <class S>
__global__ void conv_kernel(ConvGeometry g, const S* x, const S* w, const S* bias, S* y, int64_t n) {
  using T = Opmath<S>;
  const int64_t cig = g.c_in_group(), cog = g.c_out_group();
  SY_GRID_STRIDE(idx, n) {
    int64_t r = idx;
    const int64_t o2 = r % g.out[2];
    r /= g.out[2];
    const int64_t o1 = r % g.out[1];
    r /= g.out[1];
    const int64_t o0 = r % g.out[0];
    r /= g.out[0];
    const int64_t co = r % g.c_out;
    const int64_t b = r / g.c_out;
    const int64_t grp = co / cog;
    const int64_t o[3] = {o0, o1, o2};
    T sum = bias != nullptr ? widen(bias[co]) : T(0);
    for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
      for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
        for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
          const int64_t k[3] = {k0, k1, k2};
          int64_t i[3];
          bool inside = true;
          for (int a = 0; a < 3 && inside; ++a) {
            if (!g.transposed) {
              i[a] = o[a] * g.stride[a] - g.pad[a] + k[a] * g.dilation[a];
            } else {
              const int64_t num = o[a] + g.pad[a] - k[a] * g.dilation[a];
              inside = num >= 0 && num % g.stride[a] == 0;
              i[a] = num / g.stride[a];
            }
            inside = inside && i[a] >= 0 && i[a] < g.in[a];
          }
          if (!inside) continue;
          const int64_t spatial = (i[0] * g.in[1] + i[1]) * g.in[2] + i[2];
          const int64_t kat = (k0 * g.kernel[1] + k1) * g.kernel[2] + k2;
          for (int64_t c = 0; c < cig; ++c) {
            const int64_t ci = grp * cig + c;
            const int64_t w_row = g.transposed ? ci * cog + (co - grp * cog) : co * cig + c;
            sum += widen(x[(b * g.c_in + ci) * g.in_plane() + spatial]) * widen(w[w_row * g.kernel_size() + kat]);
          }
        }
    y[idx] = convert<T, S>(sum);
  }
}

template <class S>
__global__ void pool_kernel(PoolGeometry g, int kind, bool count_include_pad, int64_t divisor_override, const S* x,
                            void* out, int64_t n) {
  using T = Opmath<S>;
  const bool adaptive = kind == p_adaptive_avg || kind == p_adaptive_max || kind == p_adaptive_max_indices;
  const bool want_index = kind == p_max_indices || kind == p_adaptive_max_indices;
  const bool is_max = want_index || kind == p_max || kind == p_adaptive_max;
  SY_GRID_STRIDE(idx, n) {
    const int64_t p = idx / g.out_plane();
    const int64_t r = idx % g.out_plane();
    const int64_t o[3] = {r / (g.out[1] * g.out[2]), (r / g.out[2]) % g.out[1], r % g.out[2]};
    int64_t lo[3], hi[3], step[3], padded = 1;
    for (int a = 0; a < 3; ++a) {
      if (adaptive) {
        lo[a] = adaptive_start(o[a], g.in[a], g.out[a]);
        hi[a] = adaptive_end(o[a], g.in[a], g.out[a]);
        step[a] = 1;
        padded *= hi[a] - lo[a];
      } else {
        const int64_t start = o[a] * g.stride[a] - g.pad[a];
        step[a] = g.dilation[a];
        const int64_t end_pad =
            start + g.kernel[a] < g.in[a] + g.pad_after[a] ? start + g.kernel[a] : g.in[a] + g.pad_after[a];
        padded *= end_pad - start;
        lo[a] = start;
        const int64_t last = start + (g.kernel[a] - 1) * g.dilation[a] + 1;
        hi[a] = last < g.in[a] ? last : g.in[a];
        if (lo[a] < 0) lo[a] += ((-lo[a] + g.dilation[a] - 1) / g.dilation[a]) * g.dilation[a];
      }
    }
    const S* plane = x + p * g.in_plane();
    if (is_max) {
      T best = -infinity<T>();
      int64_t best_at = (lo[0] * g.in[1] + lo[1]) * g.in[2] + lo[2];
      for (int64_t i0 = lo[0]; i0 < hi[0]; i0 += step[0])
        for (int64_t i1 = lo[1]; i1 < hi[1]; i1 += step[1])
          for (int64_t i2 = lo[2]; i2 < hi[2]; i2 += step[2]) {
            const int64_t at = (i0 * g.in[1] + i1) * g.in[2] + i2;
            const T v = widen(plane[at]);
            if (v > best || isnan(v)) {
              best = v;
              best_at = at;
            }
          }
      if (want_index)
        static_cast<int64_t*>(out)[idx] = best_at;
      else
        static_cast<S*>(out)[idx] = convert<T, S>(best);
      continue;
    }
    int64_t inside = 1;
    for (int a = 0; a < 3; ++a) inside *= hi[a] > lo[a] ? hi[a] - lo[a] : 0;
    double sum = 0;
    for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0)
      for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1)
        for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2) sum += widen(plane[(i0 * g.in[1] + i1) * g.in[2] + i2]);
    int64_t divisor = adaptive || count_include_pad ? padded : inside;
    if (!adaptive && divisor_override != 0) divisor = divisor_override;
    static_cast<S*>(out)[idx] = inside == 0 ? S{} : convert<double, S>(sum / static_cast<double>(divisor));
  }
}

// i64 average pools: sums wrap like PyTorch's int64 arithmetic, division
// truncates toward zero.
__global__ void pool_i64_kernel(PoolGeometry g, bool count_include_pad, int64_t divisor_override, const int64_t* x,
                                int64_t* out, int64_t n) {
  SY_GRID_STRIDE(idx, n) {
    const int64_t p = idx / g.out_plane();
    const int64_t r = idx % g.out_plane();
    const int64_t o[3] = {r / (g.out[1] * g.out[2]), (r / g.out[2]) % g.out[1], r % g.out[2]};
    int64_t lo[3], hi[3], padded = 1, inside = 1;
    for (int a = 0; a < 3; ++a) {
      const int64_t start = o[a] * g.stride[a] - g.pad[a];
      const int64_t end_pad =
          start + g.kernel[a] < g.in[a] + g.pad_after[a] ? start + g.kernel[a] : g.in[a] + g.pad_after[a];
      padded *= end_pad - start;
      lo[a] = start < 0 ? 0 : start;
      hi[a] = start + g.kernel[a] < g.in[a] ? start + g.kernel[a] : g.in[a];
      inside *= hi[a] > lo[a] ? hi[a] - lo[a] : 0;
    }
    const int64_t* plane = x + p * g.in_plane();
    uint64_t sum = 0;
    for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0)
      for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1)
        for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2)
          sum += static_cast<uint64_t>(plane[(i0 * g.in[1] + i1) * g.in[2] + i2]);
    int64_t divisor = count_include_pad ? padded : inside;
    if (divisor_override != 0) divisor = divisor_override;
    out[idx] = inside == 0 ? 0 : static_cast<int64_t>(sum) / divisor;
  }
}

}  // namespace

cudaError_t conv(Launch l, DType t, const ConvGeometry& g, const void* in, const void* weight, const void* bias,
                 void* out) {
  const int64_t n = g.batch * g.c_out * g.out_plane();
  return by_float_dtype(t, [&](auto tag) {
    using S = decltype(tag);
    return launch(l, n, conv_kernel<S>, g, static_cast<const S*>(in), static_cast<const S*>(weight),
                  static_cast<const S*>(bias), static_cast<S*>(out), n);
  });
}

cudaError_t pool(Launch l, DType t, int kind, const PoolGeometry& g, bool count_include_pad, int64_t divisor_override,
                 const void* in, void* out) {
  const int64_t n = g.planes * g.out_plane();
  if (t == DType::i64 && kind == p_avg)
    return launch(l, n, pool_i64_kernel, g, count_include_pad, divisor_override, static_cast<const int64_t*>(in),
                  static_cast<int64_t*>(out), n);
  return by_float_dtype(t, [&](auto tag) {
    using S = decltype(tag);
    return launch(l, n, pool_kernel<S>, g, kind, count_include_pad, divisor_override, static_cast<const S*>(in), out,
                  n);
  });
}

}  // namespace switchyard::backends::cuda::kern
