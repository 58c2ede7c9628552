// SPDX-License-Identifier: Apache-2.0
// The reference backend's convolution and pooling: one plain loop per
// output element, sums in double (i64 average pools in int64), written
// straight from PyTorch's definitions. The executable specification the
// fast kernels are tested against.

#include "backends/reference/conv_pool.hpp"

#include <cmath>
#include <limits>

#include "backends/common/conv_geometry.hpp"
#include "backends/common/number_conversion.hpp"

namespace switchyard::backends::reference {
namespace {

double load_float(const Bytes& b, DType t, int64_t k) {
  return visit_dtype(t, [&](auto tag) { return static_cast<double>(b.as<const decltype(tag)>()[k]); });
}

// Rounded as a cast would (f16/bf16 through float).
void store_float(const Bytes& b, DType t, int64_t k, double v) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    writable<T>(b)[k] = convert_element<double, T>(v);
  });
}

}  // namespace

Expected<Bytes> run_conv(const ConvOp& op, const Bytes& input, const Bytes& weight, const Bytes* bias) {
  const ConvGeometry g = conv_geometry(op);
  const DType t = op.out.dtype;
  Bytes out = Bytes::allocate(op.out.bytes());
  const int64_t cig = g.c_in_group(), cog = g.c_out_group();
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t co = 0; co < g.c_out; ++co) {
      const int64_t grp = co / cog;
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            double sum = bias != nullptr ? load_float(*bias, t, co) : 0.0;
            for (int64_t c = 0; c < cig; ++c)
              for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
                for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
                  for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                    const int64_t o[3] = {o0, o1, o2}, k[3] = {k0, k1, k2};
                    int64_t i[3];
                    bool inside = true;
                    for (int a = 0; a < 3; ++a) {
                      if (!g.transposed) {
                        // out position o reads input o * stride - pad + k * dilation.
                        i[a] = o[a] * g.stride[a] - g.pad[a] + k[a] * g.dilation[a];
                      } else {
                        // input position i writes out i * stride - pad + k * dilation.
                        const int64_t num = o[a] + g.pad[a] - k[a] * g.dilation[a];
                        if (num < 0 || num % g.stride[a] != 0) {
                          inside = false;
                          break;
                        }
                        i[a] = num / g.stride[a];
                      }
                      if (i[a] < 0 || i[a] >= g.in[a]) {
                        inside = false;
                        break;
                      }
                    }
                    if (!inside) continue;
                    const int64_t ci = grp * cig + c;
                    const int64_t x_at = (((n * g.c_in + ci) * g.in[0] + i[0]) * g.in[1] + i[1]) * g.in[2] + i[2];
                    // weight (C_out, C_in/groups, k) or, transposed, (C_in, C_out/groups, k)
                    const int64_t w_row = g.transposed ? ci * cog + (co - grp * cog) : co * cig + c;
                    const int64_t w_at = ((w_row * g.kernel[0] + k0) * g.kernel[1] + k1) * g.kernel[2] + k2;
                    sum += load_float(input, t, x_at) * load_float(weight, t, w_at);
                  }
            const int64_t y_at = (((n * g.c_out + co) * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2;
            store_float(out, t, y_at, sum);
          }
    }
  return out;
}

Expected<Bytes> run_pool(const PoolOp& op, const Bytes& input) {
  const PoolGeometry g = pool_geometry(op);
  const DType t = op.in.dtype;
  Bytes out = Bytes::allocate(op.out.bytes());
  const bool want_index = op.kind == PoolKind::max_indices || op.kind == PoolKind::adaptive_max_indices;
  const bool is_max = want_index || op.kind == PoolKind::max || op.kind == PoolKind::adaptive_max;
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          const int64_t o[3] = {o0, o1, o2};
          // The window on each axis: [lo, hi) stepping by dilation, and for
          // avg the padded extent that count_include_pad divides by.
          int64_t lo[3], hi[3], step[3], padded[3];
          for (int a = 0; a < 3; ++a) {
            if (op.adaptive()) {
              lo[a] = adaptive_start(o[a], g.in[a], g.out[a]);
              hi[a] = adaptive_end(o[a], g.in[a], g.out[a]);
              step[a] = 1;
              padded[a] = hi[a] - lo[a];
            } else {
              const int64_t start = o[a] * g.stride[a] - g.pad[a];
              step[a] = g.dilation[a];
              padded[a] = std::min(start + g.kernel[a], g.in[a] + g.pad_after[a]) - start;
              lo[a] = start;
              hi[a] = std::min(start + (g.kernel[a] - 1) * g.dilation[a] + 1, g.in[a]);
              while (lo[a] < 0) lo[a] += g.dilation[a];
            }
          }
          const int64_t y_at = ((p * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2;
          if (is_max) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t best_at = (lo[0] * g.in[1] + lo[1]) * g.in[2] + lo[2];
            for (int64_t i0 = lo[0]; i0 < hi[0]; i0 += step[0])
              for (int64_t i1 = lo[1]; i1 < hi[1]; i1 += step[1])
                for (int64_t i2 = lo[2]; i2 < hi[2]; i2 += step[2]) {
                  const int64_t at = (i0 * g.in[1] + i1) * g.in[2] + i2;
                  const double v = load_float(input, t, p * g.in_plane() + at);
                  // PyTorch: a NaN wins (the last one seen), ties keep the first.
                  if (v > best || std::isnan(v)) {
                    best = v;
                    best_at = at;
                  }
                }
            if (want_index)
              writable<int64_t>(out)[y_at] = best_at;
            else
              store_float(out, t, y_at, best);
            continue;
          }
          // Averages: the divisor counts the window inside the padded input
          // (count_include_pad), or only the elements inside the input.
          int64_t inside = 1, with_pad = 1;
          for (int a = 0; a < 3; ++a) {
            inside *= std::max<int64_t>(hi[a] - lo[a], 0);
            with_pad *= padded[a];
          }
          int64_t divisor = op.adaptive() || op.count_include_pad ? with_pad : inside;
          if (!op.adaptive() && op.divisor_override != 0) divisor = op.divisor_override;
          if (t == DType::i64) {
            int64_t sum = 0;
            for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0)
              for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1)
                for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2)
                  sum = static_cast<int64_t>(
                      static_cast<uint64_t>(sum) +
                      static_cast<uint64_t>(
                          input.as<const int64_t>()[p * g.in_plane() + (i0 * g.in[1] + i1) * g.in[2] + i2]));
            writable<int64_t>(out)[y_at] = inside == 0 ? 0 : sum / divisor;
          } else {
            double sum = 0;
            for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0)
              for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1)
                for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2)
                  sum += load_float(input, t, p * g.in_plane() + (i0 * g.in[1] + i1) * g.in[2] + i2);
            store_float(out, t, y_at, inside == 0 ? 0.0 : sum / static_cast<double>(divisor));
          }
        }
  return out;
}

}  // namespace switchyard::backends::reference
