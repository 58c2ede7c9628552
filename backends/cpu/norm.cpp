// SPDX-License-Identifier: Apache-2.0
// batch_norm (inference), layer_norm, group_norm and rms_norm.
//
// Each normalised slice (a row for layer/rms, a group for group_norm) is
// read twice: once for its statistics, once to write the result. The
// statistics are two-pass in double (mean, then the sum of squared
// deviations), so a large mean does not cancel the variance as the
// textbook sum-of-squares formula would; the slice is usually still in
// cache for the second pass. The result is computed in double too,
// (x - mean) * scale + shift, and rounded once: the mean rounded to f32
// first, or x * scale + shift folded into f32 constants, cancels for a
// large mean (10000001, 10000003, 9999998 lost up to a third of their
// normalised values), and the reference backend does it so.

#include <cmath>

#include "backends/cpu/loops.hpp"

namespace switchyard::backends::cpu {
namespace {

struct Stats {
  double mean = 0;
  double inv_std = 0;
};

/// Lanes of the statistics' sums: independent partial sums in double,
/// which the compiler keeps in one vector register (a single running sum
/// is a chain of dependent adds, one element per add latency: a layer norm
/// of a transformer's rows took 6% of its forward pass).
constexpr int64_t kLanes = 8;

/// The sum over `n` values of f(x[i]) in double, kLanes partial sums.
template <class T, class F>
double lane_sum(const T* x, int64_t n, F f) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += f(static_cast<double>(x[i + l]));
  for (; i < n; ++i) acc[0] += f(static_cast<double>(x[i]));
  double sum = 0;
  for (double a : acc) sum += a;
  return sum;
}

template <class T>
Stats centred_stats(const T* x, int64_t n, double eps) {
  if (n <= 0) return {0.0, 1.0 / std::sqrt(eps)};
  const double mean = lane_sum(x, n, [](double v) { return v; }) / static_cast<double>(n);
  const double var = lane_sum(x, n, [mean](double v) { return (v - mean) * (v - mean); }) / static_cast<double>(n);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

/// y = (x - mean) * scale + shift over `n` values, in double, rounded once.
template <class T>
void normalise(const T* x, T* y, int64_t n, double mean, double scale, double shift) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<double>(x[i]) - mean) * scale + shift);
}

template <class T>
double mean_square(const T* x, int64_t n) {
  return n > 0 ? lane_sum(x, n, [](double v) { return v * v; }) / static_cast<double>(n) : 0.0;
}

/// A layer or rms norm's row: ((x - mean) * inv_std) * w + b in double,
/// rounded once; one loop per combination of weight and bias, so that each
/// has no branch and vectorises.
template <class T>
void normalise_row(const T* x, T* y, int64_t n, Stats st, const T* w, const T* b) {
  auto at = [](const T* p, int64_t i) { return static_cast<double>(p[i]); };
  if (w != nullptr && b != nullptr)
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((at(x, i) - st.mean) * st.inv_std * at(w, i) + at(b, i));
  else if (w != nullptr)
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((at(x, i) - st.mean) * st.inv_std * at(w, i));
  else if (b != nullptr)
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((at(x, i) - st.mean) * st.inv_std + at(b, i));
  else
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((at(x, i) - st.mean) * st.inv_std);
}

template <class T>
void run_norm(Context& ctx, const NormOp& op, const Inputs& in, T* y) {
  size_t next = 1;
  const T* x = in.bytes[0]->as<const T>();
  const T* mean = nullptr;
  const T* var = nullptr;
  if (op.kind == NormKind::batch) {
    mean = in.bytes[next++]->as<const T>();
    var = in.bytes[next++]->as<const T>();
  }
  const T* w = op.has_weight() ? in.bytes[next++]->as<const T>() : nullptr;
  const T* b = op.has_bias() ? in.bytes[next++]->as<const T>() : nullptr;
  const auto& d = op.in.shape.dims;
  const int64_t numel = op.in.numel();
  if (numel == 0) return;
  const double eps = op.eps;
  switch (op.kind) {
    case NormKind::layer:
    case NormKind::rms: {
      int64_t inner = 1;
      for (size_t i = d.size() - static_cast<size_t>(op.count); i < d.size(); ++i) inner *= d[i];
      const int64_t rows = numel / inner;
      const bool rms = op.kind == NormKind::rms;
      const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(inner, 1));
      ctx.pool.parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const T* px = x + r * inner;
          T* py = y + r * inner;
          const Stats st =
              rms ? Stats{0.0, 1.0 / std::sqrt(mean_square(px, inner) + eps)} : centred_stats(px, inner, eps);
          normalise_row(px, py, inner, st, w, b);
        }
      });
      break;
    }
    case NormKind::group:
    case NormKind::batch: {
      const int64_t channels = d[1];
      int64_t spatial = 1;
      for (size_t i = 2; i < d.size(); ++i) spatial *= d[i];
      const int64_t batch = d[0];
      if (op.kind == NormKind::batch) {
        // One (sample, channel) plane at a time: scale and shift are per channel.
        const int64_t planes = batch * channels;
        const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(spatial, 1));
        ctx.pool.parallel_for(planes, grain, [&](int64_t lo, int64_t hi) {
          for (int64_t p = lo; p < hi; ++p) {
            const int64_t c = p % channels;
            const double inv = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
            const double scale = inv * (w ? static_cast<double>(w[c]) : 1.0);
            normalise(x + p * spatial, y + p * spatial, spatial, static_cast<double>(mean[c]), scale,
                      b ? static_cast<double>(b[c]) : 0.0);
          }
        });
        break;
      }
      const int64_t groups = op.count;
      const int64_t per_group = channels / groups;
      const int64_t group_size = per_group * spatial;
      const int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(group_size, 1));
      ctx.pool.parallel_for(batch * groups, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t g = lo; g < hi; ++g) {
          const T* px = x + g * group_size;
          T* py = y + g * group_size;
          const Stats st = centred_stats(px, group_size, eps);
          const int64_t c0 = (g % groups) * per_group;
          for (int64_t c = 0; c < per_group; ++c) {
            const double scale = st.inv_std * (w ? static_cast<double>(w[c0 + c]) : 1.0);
            normalise(px + c * spatial, py + c * spatial, spatial, st.mean, scale,
                      b ? static_cast<double>(b[c0 + c]) : 0.0);
          }
        }
      });
      break;
    }
  }
}

}  // namespace

Expected<Bytes> norm(Context& ctx, NormOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  if (op.in.dtype == DType::f32)
    run_norm<float>(ctx, op, in, writable<float>(out));
  else if (op.in.dtype == DType::f64)
    run_norm<double>(ctx, op, in, writable<double>(out));
  else
    return DeviceError(Errc::unsupported, "cpu: " + std::string(to_string(op.kind)) + " needs a floating input");
  return out;
}

}  // namespace switchyard::backends::cpu
