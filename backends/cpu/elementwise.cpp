// SPDX-License-Identifier: Apache-2.0
// Creation, unary, binary, scalar, cast and where kernels.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/common/number_conversion.hpp"
#include "backends/common/philox.hpp"
#include "backends/cpu/element_fns.hpp"
#include "backends/cpu/half_convert.hpp"
#include "backends/cpu/loops.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::cpu {
namespace {

using namespace element;

Bytes output_for(Context& ctx, const TensorIr& out, const Inputs& in,
                 std::initializer_list<const TensorIr*> candidates) {
  size_t i = 0;
  for (const TensorIr* c : candidates) {
    if (i < in.consumable.size() && in.consumable[i] && c->dtype == out.dtype && c->shape == out.shape)
      return *in.bytes[i];
    ++i;
  }
  return ctx.buffers.allocate(out.bytes());
}

DeviceError unsupported(const std::string& what, DType t) {
  return DeviceError(Errc::unsupported, "cpu: " + what + " is not defined for " + std::string(name_of(t)));
}

}  // namespace

void convert_range(const void* src, DType from, void* dst, DType to, int64_t n) {
  // The widening and narrowing of every 16-bit float op: vectorised.
  if (from == DType::f16 && to == DType::f32)
    return f16_to_f32(static_cast<const Half*>(src), static_cast<float*>(dst), n);
  if (from == DType::f32 && to == DType::f16)
    return f32_to_f16(static_cast<const float*>(src), static_cast<Half*>(dst), n);
  if (from == DType::bf16 && to == DType::f32)
    return bf16_to_f32(static_cast<const BFloat16*>(src), static_cast<float*>(dst), n);
  if (from == DType::f32 && to == DType::bf16)
    return f32_to_bf16(static_cast<const float*>(src), static_cast<BFloat16*>(dst), n);
  visit_dtype(from, [&](auto f) {
    using S = decltype(f);
    visit_dtype(to, [&](auto t) {
      using D = decltype(t);
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        // Out-of-range and NaN float -> integer conversions are undefined
        // in C++; the shared rule goes through int64 and wraps.
        d[i] = backends::convert_element<S, D>(s[i]);
      }
    });
  });
}

void convert(Context& ctx, const void* src, DType from, void* dst, DType to, int64_t n) {
  const size_t from_size = size_of(from), to_size = size_of(to);
  ctx.pool.parallel_for(n, parallel_grain, [&](int64_t b, int64_t e) {
    convert_range(static_cast<const std::byte*>(src) + b * from_size, from, static_cast<std::byte*>(dst) + b * to_size,
                  to, e - b);
  });
}

Bytes as_dtype(Context& ctx, const Bytes& src, DType from, DType to, int64_t n) {
  if (from == to) return src;
  auto out = ctx.buffers.allocate(static_cast<size_t>(n) * size_of(to));
  convert(ctx, src.data(), from, writable_data(out), to, n);
  return out;
}

Expected<Bytes> fill(Context& ctx, FillOp& op) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const int64_t n = op.out.numel();
  visit_dtype(op.out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = writable<T>(out);
    switch (op.kind) {
      case FillKind::full: {
        T v = from_double<T>(op.value);
        ctx.pool.parallel_for(n, parallel_grain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
        break;
      }
      case FillKind::arange:
        for (int64_t i = 0; i < n; ++i) o[i] = from_double<T>(op.value + op.step * static_cast<double>(i));
        break;
      case FillKind::eye: {
        std::fill(o, o + n, T(0));
        const auto& d = op.out.shape.dims;
        int64_t rows = d[d.size() - 2], cols = d[d.size() - 1];
        int64_t mats = rows * cols == 0 ? 0 : n / (rows * cols);
        for (int64_t m = 0; m < mats; ++m)
          for (int64_t i = 0; i < std::min(rows, cols); ++i) o[m * rows * cols + i * cols + i] = T(1);
        break;
      }
    }
  });
  return out;
}

Expected<Bytes> random(Context& ctx, RandomOp& op) {
  auto out = ctx.buffers.allocate(op.out.bytes());
  const uint64_t seed = ctx.seed, index = ctx.random_ops++;
  const auto draw = static_cast<RandomDraw>(op.kind);
  visit_dtype(op.out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = writable<T>(out);
    ctx.pool.parallel_for(op.out.numel(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        o[i] = static_cast<T>(random_value(draw, seed, index, static_cast<uint64_t>(i), op.a, op.b));
    });
  });
  return out;
}

Expected<Bytes> unary(Context& ctx, UnaryOp& op, const Inputs& in) {
  const DType compute = unary_compute_dtype(op);
  const bool predicate = is_predicate(op.kind);
  Bytes src = as_dtype(ctx, *in.bytes[0], op.in.dtype, compute, op.in.numel());
  Bytes out = (!predicate && compute == op.in.dtype) ? output_for(ctx, op.out, in, {&op.in})
                                                     : ctx.buffers.allocate(op.out.bytes());
  bool ok = visit_compute_dtype(compute, [&](auto tag) {
    using T = decltype(tag);
    return with_unary<T>(op.kind, op.a, op.b, [&](auto fn) {
      using R = decltype(fn(T{}));
      // Buffers are contiguous and the shapes equal: one flat loop.
      flat1<T, R>(ctx, src.as<const T>(), writable<R>(out), op.out.numel(), fn);
      return true;
    });
  });
  if (!ok) return unsupported(to_string(op.kind), compute);
  return out;
}

namespace {
DeviceError division_by_zero(BinaryKind k) {
  return DeviceError(Errc::kernel_failure, std::string(to_string(k)) + ": integer division by zero");
}

template <class T>
bool has_zero(Context&, const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] == T(0)) return true;
  return false;
}
}  // namespace

Expected<Bytes> binary(Context& ctx, BinaryOp& op, const Inputs& in) {
  const DType compute = binary_compute_dtype(op);
  Bytes a = as_dtype(ctx, *in.bytes[0], op.lhs.dtype, compute, op.lhs.numel());
  Bytes b = as_dtype(ctx, *in.bytes[1], op.rhs.dtype, compute, op.rhs.numel());
  if (divides(op.kind) && !is_floating(compute)) {
    bool zero = visit_compute_dtype(compute, [&](auto tag) {
      using T = decltype(tag);
      return has_zero(ctx, b.as<const T>(), op.rhs.numel());
    });
    if (zero) return division_by_zero(op.kind);
  }
  Bytes out =
      compute == op.out.dtype ? output_for(ctx, op.out, in, {&op.lhs, &op.rhs}) : ctx.buffers.allocate(op.out.bytes());
  bool ok = visit_compute_dtype(compute, [&](auto tag) {
    using T = decltype(tag);
    return with_binary<T>(op.kind, [&](auto fn) {
      using R = decltype(fn(T{}, T{}));
      if (op.lhs.shape == op.out.shape && op.rhs.shape == op.out.shape)
        flat2<T, R>(ctx, a.as<const T>(), b.as<const T>(), writable<R>(out), op.out.numel(), fn);
      else
        map2<T, R>(ctx, a.as<const T>(), broadcast_strides(op.lhs.shape, op.out.shape), b.as<const T>(),
                   broadcast_strides(op.rhs.shape, op.out.shape), writable<R>(out), op.out.shape, fn);
      return true;
    });
  });
  if (!ok) return unsupported(to_string(op.kind), compute);
  return out;
}

Expected<Bytes> scalar(Context& ctx, ScalarOp& op, const Inputs& in) {
  const DType compute = scalar_compute_dtype(op);
  if (divides(op.kind) && !is_floating(compute) && !op.scalar_first &&
      visit_compute_dtype(compute, [&](auto tag) { return op.scalar.as<decltype(tag)>() == decltype(tag)(0); }))
    return division_by_zero(op.kind);
  Bytes a = as_dtype(ctx, *in.bytes[0], op.lhs.dtype, compute, op.lhs.numel());
  if (divides(op.kind) && !is_floating(compute) && op.scalar_first) {
    bool zero = visit_compute_dtype(compute, [&](auto tag) {
      using T = decltype(tag);
      return has_zero(ctx, a.as<const T>(), op.lhs.numel());
    });
    if (zero) return division_by_zero(op.kind);
  }
  Bytes out = compute == op.out.dtype ? output_for(ctx, op.out, in, {&op.lhs}) : ctx.buffers.allocate(op.out.bytes());
  bool ok = visit_compute_dtype(compute, [&](auto tag) {
    using T = decltype(tag);
    const T s = op.scalar.as<T>();  // exact for integers of any width
    return with_binary<T>(op.kind, [&](auto fn) {
      using R = decltype(fn(T{}, T{}));
      const int64_t n = op.out.numel();
      if (op.scalar_first)
        flat1<T, R>(ctx, a.as<const T>(), writable<R>(out), n, [=](T x) { return fn(s, x); });
      else
        flat1<T, R>(ctx, a.as<const T>(), writable<R>(out), n, [=](T x) { return fn(x, s); });
      return true;
    });
  });
  if (!ok) return unsupported(to_string(op.kind), compute);
  return out;
}

bool scalar_tiny_in_place(const ScalarOp& op, const Bytes& lhs) {
  // Below this many elements the loop is a few instructions and the general
  // path's fixed cost is everything; above it scalar() splits the loop
  // across the pool and runs it at the CPU's vector level.
  constexpr int64_t tiny = 64;
  // The IEEE operations only: exact in any order and at any vector level,
  // so this loop gives the same bits as scalar()'s. pow, remainder and the
  // rest keep the one path.
  const auto k = op.kind;
  if (k != BinaryKind::add && k != BinaryKind::sub && k != BinaryKind::mul && k != BinaryKind::div) return false;
  if (op.lhs.dtype != op.out.dtype || op.out.numel() > tiny) return false;
  auto in_place = [&](auto tag) {
    using T = decltype(tag);
    T* x = writable<T>(lhs);
    const T s = op.scalar.as<T>();  // as scalar() converts it
    const int64_t n = op.out.numel();
    return with_binary<T>(k, [&](auto fn) {
      if (op.scalar_first)
        for (int64_t i = 0; i < n; ++i) x[i] = fn(s, x[i]);
      else
        for (int64_t i = 0; i < n; ++i) x[i] = fn(x[i], s);
      return true;
    });
  };
  if (op.out.dtype == DType::f32) return in_place(float{});
  if (op.out.dtype == DType::f64) return in_place(double{});
  return false;
}

Expected<Bytes> cast(Context& ctx, CastOp& op, const Inputs& in) {
  if (op.in.dtype == op.out.dtype) return *in.bytes[0];
  auto out = ctx.buffers.allocate(op.out.bytes());
  convert(ctx, in.bytes[0]->data(), op.in.dtype, writable_data(out), op.out.dtype, op.in.numel());
  return out;
}

Expected<Bytes> where(Context& ctx, WhereOp& op, const Inputs& in) {
  Bytes a = as_dtype(ctx, *in.bytes[1], op.lhs.dtype, op.out.dtype, op.lhs.numel());
  Bytes b = as_dtype(ctx, *in.bytes[2], op.rhs.dtype, op.out.dtype, op.rhs.numel());
  auto out = ctx.buffers.allocate(op.out.bytes());
  const auto* c = in.bytes[0]->as<const uint8_t>();
  visit_dtype(op.out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.as<const T>();
    const T* y = b.as<const T>();
    T* o = writable<T>(out);
    StridedLoop<4> loop(op.out.shape.dims,
                        {broadcast_strides(op.cond.shape, op.out.shape), broadcast_strides(op.lhs.shape, op.out.shape),
                         broadcast_strides(op.rhs.shape, op.out.shape), op.out.shape.strides()});
    parallel_rows(ctx, loop, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& s) {
      for (int64_t i = 0; i < n; ++i)
        o[off[3] + i * s[3]] = c[off[0] + i * s[0]] ? x[off[1] + i * s[1]] : y[off[2] + i * s[2]];
    });
  });
  return out;
}

}  // namespace switchyard::backends::cpu
