// SPDX-License-Identifier: Apache-2.0
// Creation, unary, binary, scalar, cast and where kernels.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/common/number_conversion.hpp"
#include "backends/common/philox.hpp"
#include "backends/cpu/half_convert.hpp"
#include "backends/cpu/loops.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::cpu {
namespace {

template <class T>
using Wide = std::conditional_t<std::is_signed_v<T>, std::make_unsigned_t<T>, T>;

// Signed overflow wraps (two's complement) instead of being undefined.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  else
    return a + b;
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
  else
    return a - b;
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
  else
    return a * b;
}

template <class T>
T int_pow(T base, T exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == -1) return (exp % 2 == 0) ? 1 : -1;
    return 0;
  }
  T result = 1;
  while (exp > 0) {
    if (exp & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp >>= 1;
  }
  return result;
}

// Python's a // b. Floats follow PyTorch's div_floor: the quotient of the
// exact remainder's complement, so 1.0 // 0.1 == 9 as in Python, and x / 0
// keeps IEEE's inf/NaN. Integers round toward minus infinity; INT_MIN // -1
// wraps (PyTorch's CPU traps there). The caller has refused a zero divisor.
template <class T>
T floor_divide(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
    if (div == 0) return std::copysign(T(0), a / b);
    T floored = std::floor(div);
    if (div - floored > T(0.5)) floored += 1;
    return floored;
  } else if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrap_sub(T(0), a);
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return a / b;
  }
}

template <class T>
T py_remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    if constexpr (std::is_signed_v<T>)
      if (b == -1) return 0;  // avoids INT_MIN % -1 overflow
    T r = a % b;
    if constexpr (std::is_signed_v<T>)
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

template <class T>
T nan_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a > b ? a : b;
}
template <class T>
T nan_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return a < b ? a : b;
}

// Fill values, scalar operands, arange elements, clamp bounds and casts
// use the runtime's one conversion rule, shared with the other backends.
using backends::clamp_bound;
using backends::from_double;

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

// Calls f(fn) with the element function of binary op `k` on T; returns
// false for a kind that T does not support (the op rules exclude those).
template <class T, class F>
bool with_binary(BinaryKind k, F&& f) {
  constexpr bool is_b = std::is_same_v<T, bool>;
  constexpr bool is_f = std::is_floating_point_v<T>;
  switch (k) {
    case BinaryKind::add:
      if constexpr (is_b)
        return f([](T a, T b) -> T { return a || b; });
      else
        return f([](T a, T b) -> T { return wrap_add(a, b); });
    case BinaryKind::sub:
      if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return wrap_sub(a, b); });
    case BinaryKind::mul:
      if constexpr (is_b)
        return f([](T a, T b) -> T { return a && b; });
      else
        return f([](T a, T b) -> T { return wrap_mul(a, b); });
    case BinaryKind::div:
      if constexpr (is_f)
        return f([](T a, T b) -> T { return a / b; });
      else
        return false;
    case BinaryKind::pow:
      if constexpr (is_f)
        return f([](T a, T b) -> T { return std::pow(a, b); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return int_pow(a, b); });
    case BinaryKind::remainder:
      if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return py_remainder(a, b); });
    case BinaryKind::maximum:
      return f([](T a, T b) -> T { return nan_max(a, b); });
    case BinaryKind::minimum:
      return f([](T a, T b) -> T { return nan_min(a, b); });
    case BinaryKind::atan2:
      if constexpr (is_f)
        return f([](T a, T b) -> T { return std::atan2(a, b); });
      else
        return false;
    case BinaryKind::eq:
      return f([](T a, T b) -> bool { return a == b; });
    case BinaryKind::ne:
      return f([](T a, T b) -> bool { return a != b; });
    case BinaryKind::lt:
      return f([](T a, T b) -> bool { return a < b; });
    case BinaryKind::le:
      return f([](T a, T b) -> bool { return a <= b; });
    case BinaryKind::gt:
      return f([](T a, T b) -> bool { return a > b; });
    case BinaryKind::ge:
      return f([](T a, T b) -> bool { return a >= b; });
    case BinaryKind::logical_and:
      return f([](T a, T b) -> bool { return (a != T(0)) && (b != T(0)); });
    case BinaryKind::logical_or:
      return f([](T a, T b) -> bool { return (a != T(0)) || (b != T(0)); });
    case BinaryKind::logical_xor:
      return f([](T a, T b) -> bool { return (a != T(0)) != (b != T(0)); });
    case BinaryKind::bitwise_and:
      if constexpr (is_f)
        return false;
      else
        return f([](T a, T b) -> T { return static_cast<T>(a & b); });
    case BinaryKind::bitwise_or:
      if constexpr (is_f)
        return false;
      else
        return f([](T a, T b) -> T { return static_cast<T>(a | b); });
    case BinaryKind::bitwise_xor:
      if constexpr (is_f)
        return false;
      else
        return f([](T a, T b) -> T { return static_cast<T>(a ^ b); });
    case BinaryKind::floor_divide:
      if constexpr (is_b)
        return false;
      else
        return f([](T a, T b) -> T { return floor_divide(a, b); });
  }
  return false;
}

template <class T>
T gelu(T x) {
  return static_cast<T>(0.5) * x * (static_cast<T>(1) + std::erf(x * static_cast<T>(0.70710678118654752440)));
}

template <class T, class F>
bool with_unary(UnaryKind k, double lo, double hi, F&& f) {
  constexpr bool is_b = std::is_same_v<T, bool>;
  constexpr bool is_f = std::is_floating_point_v<T>;
  switch (k) {
    case UnaryKind::neg:
      if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return wrap_sub(T(0), x); });
    case UnaryKind::abs:
      if constexpr (is_b || std::is_unsigned_v<T>)
        return f([](T x) -> T { return x; });
      else
        return f([](T x) -> T { return x < 0 ? wrap_sub(T(0), x) : x; });
    case UnaryKind::sign:
      if constexpr (is_b)
        return f([](T x) -> T { return x; });
      else
        return f([](T x) -> T { return static_cast<T>((T(0) < x) - (x < T(0))); });
    case UnaryKind::relu:  // NaN stays NaN, as PyTorch's clamp_min(x, 0)
      if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x > T(0) || x != x ? x : T(0); });
    case UnaryKind::floor:
      if constexpr (is_f)
        return f([](T x) -> T { return std::floor(x); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x; });
    case UnaryKind::ceil:
      if constexpr (is_f)
        return f([](T x) -> T { return std::ceil(x); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x; });
    case UnaryKind::round:
      if constexpr (is_f)
        return f([](T x) -> T { return std::nearbyint(x); });
      else if constexpr (is_b)
        return false;
      else
        return f([](T x) -> T { return x; });
    case UnaryKind::clamp:
      if constexpr (is_b)
        return false;
      else {
        bool has_lo = !std::isnan(lo), has_hi = !std::isnan(hi);
        T l = has_lo ? clamp_bound<T>(lo) : T(0), h = has_hi ? clamp_bound<T>(hi) : T(0);
        return f([=](T x) -> T {
          if constexpr (is_f)
            if (std::isnan(x)) return x;
          if (has_lo && x < l) x = l;
          if (has_hi && x > h) x = h;
          return x;
        });
      }
    case UnaryKind::logical_not:
      return f([](T x) -> bool { return x == T(0); });
    case UnaryKind::bitwise_not:
      if constexpr (is_f)
        return false;
      else if constexpr (is_b)
        return f([](T x) -> T { return !x; });
      else
        return f([](T x) -> T { return static_cast<T>(~x); });
    case UnaryKind::isnan:
      if constexpr (is_f)
        return f([](T x) -> bool { return std::isnan(x); });
      else
        return f([](T) -> bool { return false; });
    case UnaryKind::isinf:
      if constexpr (is_f)
        return f([](T x) -> bool { return std::isinf(x); });
      else
        return f([](T) -> bool { return false; });
    default:
      break;
  }
  // The floating family: the rules make the output (and compute) type float.
  if constexpr (is_f) {
    switch (k) {
      case UnaryKind::exp:
        return f([](T x) -> T { return std::exp(x); });
      case UnaryKind::log:
        return f([](T x) -> T { return std::log(x); });
      case UnaryKind::log1p:
        return f([](T x) -> T { return std::log1p(x); });
      case UnaryKind::expm1:
        return f([](T x) -> T { return std::expm1(x); });
      case UnaryKind::sqrt:
        return f([](T x) -> T { return std::sqrt(x); });
      case UnaryKind::rsqrt:
        return f([](T x) -> T { return T(1) / std::sqrt(x); });
      case UnaryKind::sin:
        return f([](T x) -> T { return std::sin(x); });
      case UnaryKind::cos:
        return f([](T x) -> T { return std::cos(x); });
      case UnaryKind::tanh:
        return f([](T x) -> T { return std::tanh(x); });
      case UnaryKind::sigmoid:
        return f([](T x) -> T { return T(1) / (T(1) + std::exp(-x)); });
      case UnaryKind::gelu:
        return f([](T x) -> T { return gelu(x); });
      case UnaryKind::silu:
        return f([](T x) -> T { return x / (T(1) + std::exp(-x)); });
      case UnaryKind::erf:
        return f([](T x) -> T { return std::erf(x); });
      case UnaryKind::reciprocal:
        return f([](T x) -> T { return T(1) / x; });
      default:
        break;
    }
  }
  return false;
}

caf::error unsupported(const std::string& what, DType t) {
  return make_error(Errc::unsupported, "cpu: " + what + " is not defined for " + std::string(name_of(t)));
}

}  // namespace

void convert(Context& ctx, const void* src, DType from, void* dst, DType to, int64_t n) {
  // The widening and narrowing of every 16-bit float op: vectorised.
  auto chunked = [&](auto convert_range, auto* s, auto* d) {
    ctx.pool.parallel_for(n, parallel_grain, [&](int64_t b, int64_t e) { convert_range(s + b, d + b, e - b); });
  };
  if (from == DType::f16 && to == DType::f32)
    return chunked(f16_to_f32, static_cast<const Half*>(src), static_cast<float*>(dst));
  if (from == DType::f32 && to == DType::f16)
    return chunked(f32_to_f16, static_cast<const float*>(src), static_cast<Half*>(dst));
  if (from == DType::bf16 && to == DType::f32)
    return chunked(bf16_to_f32, static_cast<const BFloat16*>(src), static_cast<float*>(dst));
  if (from == DType::f32 && to == DType::bf16)
    return chunked(f32_to_bf16, static_cast<const float*>(src), static_cast<BFloat16*>(dst));
  visit_dtype(from, [&](auto f) {
    using S = decltype(f);
    visit_dtype(to, [&](auto t) {
      using D = decltype(t);
      const S* s = static_cast<const S*>(src);
      D* d = static_cast<D*>(dst);
      ctx.pool.parallel_for(n, parallel_grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          // Out-of-range and NaN float -> integer conversions are undefined
          // in C++; the shared rule goes through int64 and wraps.
          d[i] = backends::convert_element<S, D>(s[i]);
        }
      });
    });
  });
}

Bytes as_dtype(Context& ctx, const Bytes& src, DType from, DType to, int64_t n) {
  if (from == to) return src;
  auto out = ctx.buffers.allocate(static_cast<size_t>(n) * size_of(to));
  convert(ctx, src.data(), from, writable_data(out), to, n);
  return out;
}

caf::expected<Bytes> fill(Context& ctx, FillOp& op) {
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

caf::expected<Bytes> random(Context& ctx, RandomOp& op) {
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

caf::expected<Bytes> unary(Context& ctx, UnaryOp& op, const Inputs& in) {
  const bool predicate =
      op.kind == UnaryKind::logical_not || op.kind == UnaryKind::isnan || op.kind == UnaryKind::isinf;
  const DType compute = predicate ? op.in.dtype : op.out.dtype;
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
caf::error division_by_zero(BinaryKind k) {
  return make_error(Errc::kernel_failure, std::string(to_string(k)) + ": integer division by zero");
}

template <class T>
bool has_zero(Context&, const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] == T(0)) return true;
  return false;
}
}  // namespace

caf::expected<Bytes> binary(Context& ctx, BinaryOp& op, const Inputs& in) {
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

caf::expected<Bytes> scalar(Context& ctx, ScalarOp& op, const Inputs& in) {
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

caf::expected<Bytes> cast(Context& ctx, CastOp& op, const Inputs& in) {
  if (op.in.dtype == op.out.dtype) return *in.bytes[0];
  auto out = ctx.buffers.allocate(op.out.bytes());
  convert(ctx, in.bytes[0]->data(), op.in.dtype, writable_data(out), op.out.dtype, op.in.numel());
  return out;
}

caf::expected<Bytes> where(Context& ctx, WhereOp& op, const Inputs& in) {
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
