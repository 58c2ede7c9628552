// SPDX-License-Identifier: Apache-2.0
// Reductions over any set of axes, and (log_)softmax along one axis.

#include <cmath>
#include <limits>

#include "backends/cpu/loops.hpp"
#include "backends/cpu/vector_math.hpp"

namespace switchyard::backends::cpu {
namespace {

struct Plan {
  std::vector<int64_t> kept_dims, kept_strides;        // input strides of kept axes
  std::vector<int64_t> reduced_dims, reduced_strides;  // input strides of reduced axes
  int64_t reduced_count = 1;
};

Plan make_plan(const Shape& s, const std::vector<int64_t>& axes) {
  Plan p;
  auto strides = s.strides();
  for (size_t d = 0; d < s.rank(); ++d) {
    bool r = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d));
    (r ? p.reduced_dims : p.kept_dims).push_back(s.dims[d]);
    (r ? p.reduced_strides : p.kept_strides).push_back(strides[d]);
    if (r) p.reduced_count *= s.dims[d];
  }
  return p;
}

// Calls visit(x) for every reduced element of the output element whose
// input base offset is `base`.
template <class T, class V>
void for_reduced(const T* in, int64_t base, const StridedLoop<1>& loop, V&& visit) {
  loop.for_rows(0, loop.rows(), [&](const std::array<int64_t, 1>& off, int64_t n) {
    const T* p = in + base + off[0];
    const int64_t s = loop.strides[0].back();
    if (s == 1)
      for (int64_t i = 0; i < n; ++i) visit(p[i]);
    else
      for (int64_t i = 0; i < n; ++i) visit(p[i * s]);
  });
}

template <class T, class R, class Fn>
void reduce_each(Context& ctx, const T* in, R* out, const Plan& plan, int64_t out_numel, Fn fn) {
  StridedLoop<1> loop(plan.reduced_dims, {plan.reduced_strides});
  int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(plan.reduced_count, 1));
  ctx.pool.parallel_for(out_numel, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, base = 0;
      for (size_t d = plan.kept_dims.size(); d-- > 0;) {
        base += (rem % plan.kept_dims[d]) * plan.kept_strides[d];
        rem /= plan.kept_dims[d];
      }
      out[o] = fn(in, base, loop);
    }
  });
}

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

}  // namespace

Expected<Bytes> reduce(Context& ctx, ReduceOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const Plan plan = make_plan(op.in.shape, op.axes);
  const int64_t n_out = op.out.numel();
  const int64_t count = plan.reduced_count;
  visit_dtype(op.in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.bytes[0]->as<const T>();
    switch (op.kind) {
      case ReduceKind::sum:
      case ReduceKind::mean:
      case ReduceKind::prod: {
        const bool prod = op.kind == ReduceKind::prod;
        const bool mean = op.kind == ReduceKind::mean;
        auto body = [&](auto* o) {
          using R = std::remove_pointer_t<decltype(o)>;
          reduce_each(ctx, x, o, plan, n_out, [&](const T* p, int64_t base, const StridedLoop<1>& l) {
            using A = Acc<T>;
            A acc = prod ? A(1) : A(0);
            if (prod)
              for_reduced(p, base, l, [&](T v) { acc = static_cast<A>(acc * static_cast<A>(v)); });
            else
              for_reduced(p, base, l, [&](T v) { acc = static_cast<A>(acc + static_cast<A>(v)); });
            if (mean) return static_cast<R>(static_cast<double>(acc) / static_cast<double>(count));
            return static_cast<R>(acc);
          });
        };
        if (op.out.dtype == DType::i64)
          body(writable<int64_t>(out));
        else if (op.out.dtype == DType::f64)
          body(writable<double>(out));
        else
          body(writable<float>(out));
        break;
      }
      case ReduceKind::max:
      case ReduceKind::min: {
        const bool mx = op.kind == ReduceKind::max;
        reduce_each(ctx, x, writable<T>(out), plan, n_out, [&](const T* p, int64_t base, const StridedLoop<1>& l) {
          bool first = true;
          T best{};
          for_reduced(p, base, l, [&](T v) {
            if constexpr (std::is_floating_point_v<T>) {
              if (std::isnan(best)) return;
              if (std::isnan(v)) {
                best = v;
                first = false;
                return;
              }
            }
            if (first || (mx ? v > best : v < best)) best = v;
            first = false;
          });
          return best;
        });
        break;
      }
      case ReduceKind::argmax:
      case ReduceKind::argmin: {
        const bool mx = op.kind == ReduceKind::argmax;
        reduce_each(ctx, x, writable<int64_t>(out), plan, n_out,
                    [&](const T* p, int64_t base, const StridedLoop<1>& l) {
                      int64_t i = 0, best_i = 0;
                      T best{};
                      bool nan_seen = false;
                      for_reduced(p, base, l, [&](T v) {
                        if (!nan_seen) {
                          if constexpr (std::is_floating_point_v<T>) {
                            if (std::isnan(v)) {
                              nan_seen = true;
                              best_i = i;
                              ++i;
                              return;
                            }
                          }
                          if (i == 0 || (mx ? v > best : v < best)) {
                            best = v;
                            best_i = i;
                          }
                        }
                        ++i;
                      });
                      return best_i;
                    });
        break;
      }
      case ReduceKind::var:
      case ReduceKind::std: {
        const bool sd = op.kind == ReduceKind::std;
        const double denom = static_cast<double>(count - op.correction);
        reduce_each(ctx, x, writable<T>(out), plan, n_out, [&](const T* p, int64_t base, const StridedLoop<1>& l) {
          double sum = 0;
          for_reduced(p, base, l, [&](T v) { sum += static_cast<double>(v); });
          double mean = sum / static_cast<double>(count);
          double sq = 0;
          for_reduced(p, base, l, [&](T v) {
            double d = static_cast<double>(v) - mean;
            sq += d * d;
          });
          // PyTorch divides by max(0, n - correction): inf for a non-zero sum
          // of squares, NaN for zero (0 / 0) or NaN input.
          double var = sq / std::max(0.0, denom);
          return static_cast<T>(sd ? std::sqrt(var) : var);
        });
        break;
      }
      case ReduceKind::any:
      case ReduceKind::all: {
        const bool any = op.kind == ReduceKind::any;
        reduce_each(ctx, x, writable<bool>(out), plan, n_out, [&](const T* p, int64_t base, const StridedLoop<1>& l) {
          bool acc = !any;
          for_reduced(p, base, l, [&](T v) {
            if (any)
              acc = acc || v != T(0);
            else
              acc = acc && v != T(0);
          });
          return acc;
        });
        break;
      }
    }
  });
  return out;
}

/// (log_)softmax of one contiguous row, n >= 1. The same special values as
/// the strided loop below: a row of only -inf gives NaN, any NaN gives NaN.
template <class T>
void softmax_row(const T* x, T* y, int64_t n, bool log) {
  T mx = vector_math::max(x, n);
  if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf: avoid inf - inf
  if (log) {
    const T sum = vector_math::exp_sum(x, mx, static_cast<T*>(nullptr), n);
    vector_math::subtract(x, mx, static_cast<T>(std::log(sum)), y, n);
  } else {
    const T sum = vector_math::exp_sum(x, mx, y, n);
    vector_math::scale(y, T(1) / sum, y, n);
  }
}

Expected<Bytes> softmax(Context& ctx, SoftmaxOp& op, const Inputs& in) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const auto& d = op.in.shape.dims;
  int64_t outer = 1, len = d.empty() ? 1 : d[op.axis], inner = 1;
  for (int64_t i = 0; i < op.axis; ++i) outer *= d[i];
  for (size_t i = op.axis + 1; i < d.size(); ++i) inner *= d[i];
  visit_dtype(op.in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const T* x = in.bytes[0]->as<const T>();
      T* y = writable<T>(out);
      int64_t grain = std::max<int64_t>(1, parallel_grain / std::max<int64_t>(len, 1));
      if (inner == 1 && len > 0) {
        // Contiguous rows (softmax over the last axis, the usual case): vectorised.
        ctx.pool.parallel_for(outer, grain, [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) softmax_row(x + r * len, y + r * len, len, op.log);
        });
        return;
      }
      ctx.pool.parallel_for(outer * inner, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t base = (r / inner) * len * inner + r % inner;
          const T* px = x + base;
          T* py = y + base;
          T mx = -std::numeric_limits<T>::infinity();
          for (int64_t i = 0; i < len; ++i) mx = std::max(mx, px[i * inner]);
          if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf: avoid inf - inf
          double sum = 0;
          for (int64_t i = 0; i < len; ++i) sum += std::exp(static_cast<double>(px[i * inner] - mx));
          if (op.log) {
            const T lse = static_cast<T>(std::log(sum));
            for (int64_t i = 0; i < len; ++i) py[i * inner] = px[i * inner] - mx - lse;
          } else {
            const double inv = 1.0 / sum;
            for (int64_t i = 0; i < len; ++i)
              py[i * inner] = static_cast<T>(std::exp(static_cast<double>(px[i * inner] - mx)) * inv);
          }
        }
      });
    }
  });
  return out;
}

}  // namespace switchyard::backends::cpu
