// SPDX-License-Identifier: Apache-2.0
// The reference backend: the executable specification of the op set.
//
// Every op is a plain loop over output elements. Each element is loaded
// into a `Value` (double for floating dtypes, int64 for integers and bool),
// computed in double or in int64 (integer arithmetic wraps modulo 2^64 and
// is then stored modulo the dtype's width, which equals wrapping in the
// dtype itself), and stored in the tensor's dtype. No threads, no BLAS, no
// vectorisation: when another backend disagrees with this file beyond
// rounding, the other backend is wrong (or this file and the README are).
//
// Storage is the shared HostBuffer, so bridges between cpu and reference
// devices hand over the bytes without copying.

#include "backends/reference/reference_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/common/host_buffer.hpp"
#include "backends/common/number_conversion.hpp"
#include "backends/common/philox.hpp"
#include "backends/reference/conv_pool.hpp"
#include "backends/reference/indexing.hpp"
#include "backends/reference/module_ops.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::reference {
namespace {

// --- elements ---------------------------------------------------------------

/// One element on its way through an op.
struct Value {
  bool floating = false;
  double f = 0;   // when floating
  int64_t i = 0;  // otherwise (bool: 0 or 1)

  static Value of_float(double x) { return Value{true, x, 0}; }
  static Value of_int(int64_t x) { return Value{false, 0, x}; }
  [[nodiscard]] double as_double() const { return floating ? f : static_cast<double>(i); }
  [[nodiscard]] bool truthy() const { return floating ? f != 0 : i != 0; }
};

Value load(const Bytes& b, DType t, int64_t k) {
  switch (t) {
    case DType::f32:
      return Value::of_float(b.as<const float>()[k]);
    case DType::f64:
      return Value::of_float(b.as<const double>()[k]);
    case DType::i32:
      return Value::of_int(b.as<const int32_t>()[k]);
    case DType::i64:
      return Value::of_int(b.as<const int64_t>()[k]);
    case DType::u8:
      return Value::of_int(b.as<const uint8_t>()[k]);
    case DType::boolean:
      return Value::of_int(b.as<const uint8_t>()[k] != 0);
    case DType::f16:
      return Value::of_float(static_cast<float>(b.as<const Half>()[k]));
    case DType::bf16:
      return Value::of_float(static_cast<float>(b.as<const BFloat16>()[k]));
    case DType::i8:
      return Value::of_int(b.as<const int8_t>()[k]);
    case DType::i16:
      return Value::of_int(b.as<const int16_t>()[k]);
  }
  return {};
}

/// Float to integer, the cast rule of the whole runtime: truncate toward
/// zero; finite values in [-2^63, 2^63) go through int64 and then wrap to
/// the target width; NaN, infinities and anything beyond become INT64_MIN
/// (which wraps to 0 for i32 and u8).
int64_t float_to_int(double x) { return float_to_int64(x); }

void store(const Bytes& b, DType t, int64_t k, Value v) {
  // Integer-to-float conversions go straight from int64 so that rounding
  // happens once (int64 -> double -> float could round twice).
  switch (t) {
    case DType::f32:
      writable<float>(b)[k] = v.floating ? static_cast<float>(v.f) : static_cast<float>(v.i);
      break;
    case DType::f64:
      writable<double>(b)[k] = v.floating ? v.f : static_cast<double>(v.i);
      break;
    case DType::i32:  // C++20: integer narrowing is modular
      writable<int32_t>(b)[k] = static_cast<int32_t>(v.floating ? float_to_int(v.f) : v.i);
      break;
    case DType::i64:
      writable<int64_t>(b)[k] = v.floating ? float_to_int(v.f) : v.i;
      break;
    case DType::u8:
      writable<uint8_t>(b)[k] = static_cast<uint8_t>(v.floating ? float_to_int(v.f) : v.i);
      break;
    case DType::boolean:
      writable<uint8_t>(b)[k] = v.truthy() ? 1 : 0;
      break;
    // The 16-bit floats round from float, as c10 converts (a double is
    // rounded twice, an int64 once to float first).
    case DType::f16:
      writable<Half>(b)[k] = Half(v.floating ? static_cast<float>(v.f) : static_cast<float>(v.i));
      break;
    case DType::bf16:
      writable<BFloat16>(b)[k] = BFloat16(v.floating ? static_cast<float>(v.f) : static_cast<float>(v.i));
      break;
    case DType::i8:  // from a float through int32, as PyTorch (1e10 -> 0)
      writable<int8_t>(b)[k] = static_cast<int8_t>(v.floating ? float_to_int32(v.f) : v.i);
      break;
    case DType::i16:
      writable<int16_t>(b)[k] = static_cast<int16_t>(v.floating ? float_to_int32(v.f) : v.i);
      break;
  }
}

/// `v` as it would be stored in dtype `t` (the conversion of a cast).
Value convert(Value v, DType t) {
  auto tmp = Bytes::allocate(8);
  store(tmp, t, 0, v);
  return load(tmp, t, 0);
}

// Integer arithmetic that wraps instead of overflowing (signed overflow is
// undefined in C++; unsigned is modular).
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

Bytes allocate(const TensorIr& t) { return Bytes::allocate(t.bytes()); }

// --- index arithmetic -------------------------------------------------------

DeviceError kernel_error(std::string what) { return DeviceError(Errc::kernel_failure, std::move(what)); }

// --- creation -----------------------------------------------------------------

Expected<Bytes> run_fill(const FillOp& op) {
  auto out = allocate(op.out);
  const int64_t n = op.out.numel();
  const auto& d = op.out.shape.dims;
  for (int64_t k = 0; k < n; ++k) {
    double v = op.value;
    if (op.kind == FillKind::arange) v = op.value + op.step * static_cast<double>(k);
    if (op.kind == FillKind::eye) {
      auto idx = unravel(k, op.out.shape);
      v = idx[d.size() - 2] == idx[d.size() - 1] ? 1 : 0;
    }
    store(out, op.out.dtype, k, Value::of_float(v));
  }
  return out;
}

Expected<Bytes> run_random(const RandomOp& op, uint64_t seed, uint64_t op_index) {
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.out.numel(); ++k) {
    double v = random_value(static_cast<RandomDraw>(op.kind), seed, op_index, static_cast<uint64_t>(k), op.a, op.b);
    store(out, op.out.dtype, k, Value::of_float(v));
  }
  return out;
}

// --- unary ------------------------------------------------------------------

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

/// A clamp bound for an integer dtype: limited to the dtype's range (a bound
/// beyond it does nothing), then truncated toward zero.
int64_t integer_bound(double v, DType t) {
  switch (t) {
    case DType::i32:
      return float_to_int(std::clamp(v, -2147483648.0, 2147483647.0));
    case DType::u8:
      return float_to_int(std::clamp(v, 0.0, 255.0));
    case DType::i8:
      return float_to_int(std::clamp(v, -128.0, 127.0));
    case DType::i16:
      return float_to_int(std::clamp(v, -32768.0, 32767.0));
    case DType::boolean:
      return float_to_int(std::clamp(v, 0.0, 1.0));
    default:  // i64: its max is 2^63 - 1, which no double holds
      if (v >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
      if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
      return float_to_int(v);
  }
}

/// op(x) where x is already in the op's compute dtype `t`; `lo`/`hi` are
/// clamp's bounds (NaN: absent).
Value unary_value(UnaryKind k, Value x, DType t, double lo, double hi) {
  if (x.floating) {
    const double v = x.f;
    switch (k) {
      case UnaryKind::neg:
        return Value::of_float(-v);
      case UnaryKind::abs:
        return Value::of_float(std::fabs(v));
      case UnaryKind::sign:
        return Value::of_float((v > 0) - (v < 0));  // NaN: 0, as PyTorch
      case UnaryKind::exp:
        return Value::of_float(std::exp(v));
      case UnaryKind::log:
        return Value::of_float(std::log(v));
      case UnaryKind::log1p:
        return Value::of_float(std::log1p(v));
      case UnaryKind::expm1:
        return Value::of_float(std::expm1(v));
      case UnaryKind::sqrt:
        return Value::of_float(std::sqrt(v));
      case UnaryKind::rsqrt:
        return Value::of_float(1 / std::sqrt(v));
      case UnaryKind::sin:
        return Value::of_float(std::sin(v));
      case UnaryKind::cos:
        return Value::of_float(std::cos(v));
      case UnaryKind::tanh:
        return Value::of_float(std::tanh(v));
      case UnaryKind::sigmoid:
        return Value::of_float(1 / (1 + std::exp(-v)));
      case UnaryKind::relu:
        return Value::of_float(v < 0 ? 0 : v);  // NaN and -0 kept, as PyTorch
      case UnaryKind::gelu:
        return Value::of_float(gelu(v));
      case UnaryKind::silu:
        return Value::of_float(v / (1 + std::exp(-v)));
      case UnaryKind::erf:
        return Value::of_float(std::erf(v));
      case UnaryKind::floor:
        return Value::of_float(std::floor(v));
      case UnaryKind::ceil:
        return Value::of_float(std::ceil(v));
      case UnaryKind::round:
        return Value::of_float(std::nearbyint(v));  // half to even
      case UnaryKind::reciprocal:
        return Value::of_float(1 / v);
      case UnaryKind::clamp: {
        double r = v;
        if (std::isnan(r)) return Value::of_float(r);
        if (!std::isnan(lo) && r < lo) r = lo;
        if (!std::isnan(hi) && r > hi) r = hi;
        return Value::of_float(r);
      }
      case UnaryKind::logical_not:
        return Value::of_int(v == 0);
      case UnaryKind::isnan:
        return Value::of_int(std::isnan(v));
      case UnaryKind::isinf:
        return Value::of_int(std::isinf(v));
      case UnaryKind::bitwise_not:
        break;  // excluded by the rules
    }
    return Value::of_float(std::numeric_limits<double>::quiet_NaN());
  }
  const int64_t v = x.i;
  switch (k) {
    case UnaryKind::neg:
      return Value::of_int(wrap_sub(0, v));
    case UnaryKind::abs:
      return Value::of_int(v < 0 ? wrap_sub(0, v) : v);
    case UnaryKind::sign:
      return Value::of_int((v > 0) - (v < 0));
    case UnaryKind::relu:
      return Value::of_int(v > 0 ? v : 0);
    case UnaryKind::floor:
    case UnaryKind::ceil:
    case UnaryKind::round:
      return x;
    case UnaryKind::clamp: {
      // Bounds are first limited to the dtype's range (a bound beyond it
      // does nothing) and truncated toward zero, then compared exactly.
      // low first, then high: with low > high every element becomes high (PyTorch).
      int64_t r = v;
      if (!std::isnan(lo)) r = std::max(r, integer_bound(lo, t));
      if (!std::isnan(hi)) r = std::min(r, integer_bound(hi, t));
      return Value::of_int(r);
    }
    case UnaryKind::logical_not:
      return Value::of_int(v == 0);
    case UnaryKind::bitwise_not:
      return Value::of_int(~v);  // bool: handled by the caller
    case UnaryKind::isnan:
    case UnaryKind::isinf:
      return Value::of_int(0);
    default:
      break;  // the floating family never sees integers (the rules make them float)
  }
  return x;
}

Expected<Bytes> run_unary(const UnaryOp& op, const Bytes& in) {
  const bool predicate = op.out.dtype == DType::boolean && op.in.dtype != DType::boolean;
  // Predicates (isnan, logical_not, ...) look at the input as it is; every
  // other op first converts the input to the result dtype (int -> float for
  // exp and friends), as PyTorch does.
  const DType compute = predicate ? op.in.dtype : op.out.dtype;
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.out.numel(); ++k) {
    Value x = convert(load(in, op.in.dtype, k), compute);
    Value r = unary_value(op.kind, x, compute, op.a, op.b);
    if (op.kind == UnaryKind::bitwise_not && compute == DType::boolean) r = Value::of_int(!x.i);
    store(out, op.out.dtype, k, r);
  }
  return out;
}

// --- binary -------------------------------------------------------------------

/// Python's remainder: the result takes the divisor's sign.
double float_remainder(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/// Python's a // b on integers: rounds toward minus infinity; INT64_MIN //
/// -1 wraps. b != 0, checked by the caller.
int64_t int_floor_divide(int64_t a, int64_t b) {
  if (b == -1) return wrap_sub(0, a);
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

/// Python's a // b on floats, as PyTorch computes it: from fmod, so that
/// 1.0 // 0.1 == 9; a zero divisor gives IEEE's a / 0.
double float_floor_divide(double a, double b) {
  if (b == 0) return a / b;
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1;
  return floored;
}

int64_t int_remainder(int64_t a, int64_t b) {  // b != 0, checked by the caller
  if (b == -1) return 0;                       // INT64_MIN % -1 overflows
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/// Integer power by squaring, wrapping; negative exponents give 1/base
/// truncated (0 unless base is 1 or -1), as PyTorch's integer pow.
int64_t int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return exp % 2 == 0 ? 1 : -1;
    return 0;
  }
  int64_t r = 1;
  while (exp > 0) {
    if (exp & 1) r = wrap_mul(r, base);
    base = wrap_mul(base, base);
    exp >>= 1;
  }
  return r;
}

/// a op b, both already in the compute dtype. The caller has rejected an
/// integer remainder by zero.
Value binary_value(BinaryKind k, Value a, Value b) {
  switch (k) {
    case BinaryKind::eq:
      return Value::of_int(a.floating ? a.f == b.f : a.i == b.i);
    case BinaryKind::ne:
      return Value::of_int(a.floating ? a.f != b.f : a.i != b.i);
    case BinaryKind::lt:
      return Value::of_int(a.floating ? a.f < b.f : a.i < b.i);
    case BinaryKind::le:
      return Value::of_int(a.floating ? a.f <= b.f : a.i <= b.i);
    case BinaryKind::gt:
      return Value::of_int(a.floating ? a.f > b.f : a.i > b.i);
    case BinaryKind::ge:
      return Value::of_int(a.floating ? a.f >= b.f : a.i >= b.i);
    case BinaryKind::logical_and:
      return Value::of_int(a.truthy() && b.truthy());
    case BinaryKind::logical_or:
      return Value::of_int(a.truthy() || b.truthy());
    case BinaryKind::logical_xor:
      return Value::of_int(a.truthy() != b.truthy());
    default:
      break;
  }
  if (a.floating) {
    const double x = a.f, y = b.f;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (k) {
      case BinaryKind::add:
        return Value::of_float(x + y);
      case BinaryKind::sub:
        return Value::of_float(x - y);
      case BinaryKind::mul:
        return Value::of_float(x * y);
      case BinaryKind::div:
        return Value::of_float(x / y);
      case BinaryKind::pow:
        return Value::of_float(std::pow(x, y));
      case BinaryKind::remainder:
        return Value::of_float(float_remainder(x, y));
      // NaN wins in maximum/minimum (not fmax/fmin).
      case BinaryKind::maximum:
        return Value::of_float(std::isnan(x) || std::isnan(y) ? nan : std::max(x, y));
      case BinaryKind::minimum:
        return Value::of_float(std::isnan(x) || std::isnan(y) ? nan : std::min(x, y));
      case BinaryKind::atan2:
        return Value::of_float(std::atan2(x, y));
      case BinaryKind::floor_divide:
        return Value::of_float(float_floor_divide(x, y));
      default:
        return Value::of_float(nan);  // bitwise: excluded by the rules
    }
  }
  const int64_t x = a.i, y = b.i;
  switch (k) {
    case BinaryKind::add:
      return Value::of_int(wrap_add(x, y));  // bool: stored as x || y
    case BinaryKind::sub:
      return Value::of_int(wrap_sub(x, y));
    case BinaryKind::mul:
      return Value::of_int(wrap_mul(x, y));  // bool: x && y
    case BinaryKind::pow:
      return Value::of_int(int_pow(x, y));
    case BinaryKind::remainder:
      return Value::of_int(int_remainder(x, y));
    case BinaryKind::floor_divide:
      return Value::of_int(int_floor_divide(x, y));
    case BinaryKind::maximum:
      return Value::of_int(std::max(x, y));
    case BinaryKind::minimum:
      return Value::of_int(std::min(x, y));
    case BinaryKind::bitwise_and:
      return Value::of_int(x & y);
    case BinaryKind::bitwise_or:
      return Value::of_int(x | y);
    case BinaryKind::bitwise_xor:
      return Value::of_int(x ^ y);
    default:
      return Value::of_int(0);  // div, atan2: the rules make them float
  }
}

DeviceError check_divisor(BinaryKind k, DType compute, Value divisor) {
  if (divides(k) && !is_floating(compute) && divisor.i == 0)
    return kernel_error(std::string(to_string(k)) + ": integer division by zero");
  return {};
}

Expected<Bytes> run_binary(const BinaryOp& op, const Bytes& lhs, const Bytes& rhs) {
  // Comparisons and logical ops compute in the operands' result_type (0-d
  // operands count less) and produce bool; the rest in the result dtype.
  const DType compute = binary_compute_dtype(op);
  const auto sa = broadcast_strides(op.lhs.shape, op.out.shape);
  const auto sb = broadcast_strides(op.rhs.shape, op.out.shape);
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.out.numel(); ++k) {
    auto idx = unravel(k, op.out.shape);
    Value a = convert(load(lhs, op.lhs.dtype, dot(idx, sa)), compute);
    Value b = convert(load(rhs, op.rhs.dtype, dot(idx, sb)), compute);
    if (auto err = check_divisor(op.kind, compute, b)) return err;
    store(out, op.out.dtype, k, binary_value(op.kind, a, b));
  }
  // A zero divisor that no output element reads (broadcast over an empty
  // extent) still fails, as it does on every other backend.
  if (divides(op.kind) && !is_floating(compute))
    for (int64_t k = 0; k < op.rhs.numel(); ++k)
      if (auto err = check_divisor(op.kind, compute, convert(load(rhs, op.rhs.dtype, k), compute))) return err;
  return out;
}

Expected<Bytes> run_scalar(const ScalarOp& op, const Bytes& lhs) {
  const DType compute = scalar_compute_dtype(op);
  // The scalar enters exactly: an integer as int64 (a uint64 by its bits,
  // which wrap alike), a float as double, then converted like an element.
  const Value s = convert(op.scalar.kind == ScalarKind::floating ? Value::of_float(op.scalar.f)
                          : (op.scalar.is_unsigned && is_floating(compute))
                              ? Value::of_float(static_cast<double>(static_cast<uint64_t>(op.scalar.i)))
                              : Value::of_int(op.scalar.i),
                          compute);
  if (auto err = check_divisor(op.kind, compute, op.scalar_first ? Value::of_int(1) : s)) return err;
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.lhs.numel(); ++k) {
    Value x = convert(load(lhs, op.lhs.dtype, k), compute);
    if (op.scalar_first)
      if (auto err = check_divisor(op.kind, compute, x)) return err;
    store(out, op.out.dtype, k, op.scalar_first ? binary_value(op.kind, s, x) : binary_value(op.kind, x, s));
  }
  return out;
}

Expected<Bytes> run_cast(const CastOp& op, const Bytes& in) {
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.in.numel(); ++k) store(out, op.out.dtype, k, load(in, op.in.dtype, k));
  return out;
}

Expected<Bytes> run_where(const WhereOp& op, const Bytes& cond, const Bytes& lhs, const Bytes& rhs) {
  const auto sc = broadcast_strides(op.cond.shape, op.out.shape);
  const auto sa = broadcast_strides(op.lhs.shape, op.out.shape);
  const auto sb = broadcast_strides(op.rhs.shape, op.out.shape);
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.out.numel(); ++k) {
    auto idx = unravel(k, op.out.shape);
    Value v = load(cond, DType::boolean, dot(idx, sc)).truthy() ? load(lhs, op.lhs.dtype, dot(idx, sa))
                                                                : load(rhs, op.rhs.dtype, dot(idx, sb));
    store(out, op.out.dtype, k, v);
  }
  return out;
}

// --- reductions -----------------------------------------------------------------

Expected<Bytes> run_reduce(const ReduceOp& op, const Bytes& in) {
  // out element o reduces every input element whose kept coordinates
  // equal o's; walk the input once per output element.
  const Shape& s = op.in.shape;
  std::vector<bool> reduced(s.rank(), false);
  for (auto a : op.axes) reduced[a] = true;
  int64_t count = 1;
  for (size_t d = 0; d < s.rank(); ++d)
    if (reduced[d]) count *= s.dims[d];
  const bool floating = is_floating(op.in.dtype);
  auto out = allocate(op.out);
  const int64_t n_out = op.out.numel();
  // Group input elements by output position.
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(n_out));
  Shape kept;
  for (size_t d = 0; d < s.rank(); ++d)
    if (!reduced[d]) kept.dims.push_back(s.dims[d]);
  const auto kept_strides = kept.strides();
  for (int64_t k = 0; k < s.numel(); ++k) {
    auto idx = unravel(k, s);
    int64_t o = 0;
    for (size_t d = 0, j = 0; d < s.rank(); ++d)
      if (!reduced[d]) o += idx[d] * kept_strides[j++];
    members[o].push_back(k);
  }
  for (int64_t o = 0; o < n_out; ++o) {
    const auto& m = members[o];
    Value r;
    switch (op.kind) {
      case ReduceKind::sum:
      case ReduceKind::prod: {
        const bool prod = op.kind == ReduceKind::prod;
        double f = prod ? 1 : 0;
        int64_t i = prod ? 1 : 0;
        for (auto k : m) {
          Value v = load(in, op.in.dtype, k);
          if (floating)
            f = prod ? f * v.f : f + v.f;
          else
            i = prod ? wrap_mul(i, v.i) : wrap_add(i, v.i);
        }
        r = floating ? Value::of_float(f) : Value::of_int(i);
        break;
      }
      case ReduceKind::mean:
      case ReduceKind::var:
      case ReduceKind::std: {
        double sum = 0;
        for (auto k : m) sum += load(in, op.in.dtype, k).f;
        const double mean = sum / static_cast<double>(count);  // empty: NaN
        if (op.kind == ReduceKind::mean) {
          r = Value::of_float(mean);
          break;
        }
        double sq = 0;
        for (auto k : m) sq += (load(in, op.in.dtype, k).f - mean) * (load(in, op.in.dtype, k).f - mean);
        const double denom = static_cast<double>(count - op.correction);
        // PyTorch divides by max(0, n - correction): a non-zero sum of
        // squares over nothing is inf, 0 / 0 (and NaN input) is NaN.
        const double var = sq / std::max(0.0, denom);
        r = Value::of_float(op.kind == ReduceKind::std ? std::sqrt(var) : var);
        break;
      }
      case ReduceKind::max:
      case ReduceKind::min:
      case ReduceKind::argmax:
      case ReduceKind::argmin: {
        // The first extreme element wins; a NaN is the extreme of all (the
        // first NaN for argmax/argmin). Empty extents are rejected by the rules.
        const bool want_max = op.kind == ReduceKind::max || op.kind == ReduceKind::argmax;
        int64_t best = 0;
        Value bv = m.empty() ? Value{} : load(in, op.in.dtype, m[0]);
        for (size_t j = 1; j < m.size(); ++j) {
          if (floating && std::isnan(bv.f)) break;
          Value v = load(in, op.in.dtype, m[j]);
          bool better = floating ? (std::isnan(v.f) || (want_max ? v.f > bv.f : v.f < bv.f))
                                 : (want_max ? v.i > bv.i : v.i < bv.i);
          if (better) {
            best = static_cast<int64_t>(j);
            bv = v;
          }
        }
        r = (op.kind == ReduceKind::max || op.kind == ReduceKind::min) ? bv : Value::of_int(best);
        break;
      }
      case ReduceKind::any:
      case ReduceKind::all: {
        bool any = false, all = true;
        for (auto k : m) {
          bool t = load(in, op.in.dtype, k).truthy();
          any = any || t;
          all = all && t;
        }
        r = Value::of_int(op.kind == ReduceKind::any ? any : all);
        break;
      }
    }
    store(out, op.out.dtype, o, r);
  }
  return out;
}

Expected<Bytes> run_softmax(const SoftmaxOp& op, const Bytes& in) {
  // Stable form: subtract the row maximum before exponentiating. A row of
  // only -inf has no finite maximum and gives NaN, as in PyTorch.
  const auto& d = op.in.shape.dims;
  const int64_t len = d.empty() ? 1 : d[op.axis];
  const int64_t stride = d.empty() ? 1 : op.in.shape.strides()[op.axis];
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.in.numel(); ++k) {
    const int64_t pos = d.empty() ? 0 : unravel(k, op.in.shape)[op.axis];
    const int64_t row = k - pos * stride;  // flat index of the row's first element
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < len; ++j) mx = std::max(mx, load(in, op.in.dtype, row + j * stride).f);
    double sum = 0;
    bool nan = false;
    for (int64_t j = 0; j < len; ++j) {
      double v = load(in, op.in.dtype, row + j * stride).f;
      nan = nan || std::isnan(v);
      sum += std::exp(v - mx);
    }
    const double x = load(in, op.in.dtype, k).f;
    double y = op.log ? x - mx - std::log(sum) : std::exp(x - mx) / sum;
    if (nan || std::isinf(mx)) y = std::numeric_limits<double>::quiet_NaN();
    store(out, op.out.dtype, k, Value::of_float(y));
  }
  return out;
}

// --- matmul -------------------------------------------------------------------

Expected<Bytes> run_matmul(const MatmulOp& op, const Bytes& lhs, const Bytes& rhs, const Bytes* bias) {
  const Shape& a = op.lhs.shape;
  const Shape& b = op.rhs.shape;
  const Shape& o = op.out.shape;
  const size_t r = o.rank();
  const int64_t k_len = op.transpose_lhs ? a.dims[a.rank() - 2] : a.dims[a.rank() - 1];
  // Batch axes broadcast: an operand's batch index is the output's with
  // broadcast axes pinned to 0.
  const Shape out_batch{std::vector<int64_t>(o.dims.begin(), o.dims.end() - 2)};
  const Shape a_batch{std::vector<int64_t>(a.dims.begin(), a.dims.end() - 2)};
  const Shape b_batch{std::vector<int64_t>(b.dims.begin(), b.dims.end() - 2)};
  const auto sa = broadcast_strides(a_batch, out_batch);
  const auto sb = broadcast_strides(b_batch, out_batch);
  const auto s_bias = bias ? broadcast_strides(op.bias.shape, o) : std::vector<int64_t>{};
  const int64_t a_rows = a.dims[a.rank() - 2], a_cols = a.dims[a.rank() - 1];
  const int64_t b_rows = b.dims[b.rank() - 2], b_cols = b.dims[b.rank() - 1];
  const bool floating = is_floating(op.out.dtype);
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.out.numel(); ++k) {
    auto idx = unravel(k, o);
    const int64_t i = idx[r - 2], j = idx[r - 1];
    std::vector<int64_t> batch(idx.begin(), idx.end() - 2);
    const int64_t a_base = dot(batch, sa) * a_rows * a_cols;
    const int64_t b_base = dot(batch, sb) * b_rows * b_cols;
    double f = 0;
    int64_t n = 0;
    for (int64_t p = 0; p < k_len; ++p) {
      Value x = load(lhs, op.lhs.dtype, a_base + (op.transpose_lhs ? p * a_cols + i : i * a_cols + p));
      Value y = load(rhs, op.rhs.dtype, b_base + (op.transpose_rhs ? j * b_cols + p : p * b_cols + j));
      if (floating)
        f += x.f * y.f;
      else
        n = wrap_add(n, wrap_mul(x.i, y.i));
    }
    if (bias) {
      Value c = load(*bias, op.bias.dtype, dot(idx, s_bias));
      if (floating)
        f += c.f;
      else
        n = wrap_add(n, c.i);
    }
    store(out, op.out.dtype, k, floating ? Value::of_float(f) : Value::of_int(n));
  }
  return out;
}

// --- layout ---------------------------------------------------------------------

/// Element copy without conversion (layout ops never change the dtype).
void copy_element(const Bytes& src, int64_t from, const Bytes& dst, int64_t to, size_t elem) {
  std::memcpy(writable_data(dst) + to * static_cast<int64_t>(elem), src.data() + from * static_cast<int64_t>(elem),
              elem);
}

Expected<Bytes> run_view(const ViewOp& op, const Bytes& in) {
  auto out = allocate(op.out);
  const size_t elem = size_of(op.out.dtype);
  for (int64_t k = 0; k < op.out.numel(); ++k)
    copy_element(in, op.offset + dot(unravel(k, op.out.shape), op.strides), out, k, elem);
  return out;
}

Expected<Bytes> run_slice_assign(const SliceAssignOp& op, const Bytes& base, const Bytes& value) {
  auto out = allocate(op.out);
  if (op.out.bytes() > 0) std::memcpy(writable_data(out), base.data(), op.out.bytes());
  const size_t elem = size_of(op.out.dtype);
  for (int64_t k = 0; k < op.value.numel(); ++k)
    copy_element(value, k, out, op.offset + dot(unravel(k, op.value.shape), op.strides), elem);
  return out;
}

Expected<Bytes> run_cat(const CatOp& op, std::span<const Bytes* const> in) {
  auto out = allocate(op.out);
  const size_t elem = size_of(op.out.dtype);
  const auto out_strides = op.out.shape.strides();
  int64_t start = 0;  // position of this input along the axis
  for (size_t t = 0; t < op.inputs.size(); ++t) {
    const Shape& s = op.inputs[t].shape;
    for (int64_t k = 0; k < s.numel(); ++k) {
      auto idx = unravel(k, s);
      idx[op.axis] += start;
      copy_element(*in[t], k, out, dot(idx, out_strides), elem);
    }
    start += s.dims[op.axis];
  }
  return out;
}

Expected<Bytes> run_pad(const PadOp& op, const Bytes& in) {
  auto out = allocate(op.out);
  for (int64_t k = 0; k < op.out.numel(); ++k) store(out, op.out.dtype, k, Value::of_float(op.value));
  const size_t elem = size_of(op.out.dtype);
  const auto out_strides = op.out.shape.strides();
  for (int64_t k = 0; k < op.in.numel(); ++k) {
    auto idx = unravel(k, op.in.shape);
    for (size_t d = 0; d < idx.size(); ++d) idx[d] += op.before[d];
    copy_element(in, k, out, dot(idx, out_strides), elem);
  }
  return out;
}

/// Index value `v` resolved against `extent`; negative values count from
/// the end (an extension over PyTorch, which rejects them).
Expected<int64_t> resolve_index(const char* op, int64_t v, int64_t extent, int64_t axis) {
  if (v < -extent || v >= extent)
    return DeviceError(Errc::index_out_of_range, std::string(op) + ": index " + std::to_string(v) +
                                                     " is out of range for extent " + std::to_string(extent) +
                                                     " of axis " + std::to_string(axis));
  return v < 0 ? v + extent : v;
}

Expected<Bytes> run_index(const IndexOp& op, const Bytes& in, const Bytes& index, const Bytes* src) {
  const Shape& s = op.in.shape;
  const int64_t extent = s.rank() == 0 ? 1 : s.dims[op.axis];
  const auto in_strides = s.strides();
  const size_t elem = size_of(op.in.dtype);
  auto out = allocate(op.out);
  switch (op.kind) {
    case IndexKind::index_select: {
      // out[..., i, ...] = in[..., index[i], ...]
      for (int64_t k = 0; k < op.out.numel(); ++k) {
        auto idx = unravel(k, op.out.shape);
        if (s.rank() > 0) {
          auto v = resolve_index("index_select", load(index, op.index.dtype, idx[op.axis]).i, extent, op.axis);
          if (!v) return std::move(v.error());
          idx[op.axis] = *v;
        }
        copy_element(in, dot(idx, in_strides), out, k, elem);
      }
      // Indices that select into an empty result are still checked.
      for (int64_t k = 0; k < op.index.numel(); ++k)
        if (auto v = resolve_index("index_select", load(index, op.index.dtype, k).i, extent, op.axis); !v)
          return std::move(v.error());
      return out;
    }
    case IndexKind::gather: {
      // out[i][j][k] = in[i][index[i][j][k]][k]   (axis 1)
      for (int64_t k = 0; k < op.out.numel(); ++k) {
        auto idx = unravel(k, op.out.shape);
        auto v = resolve_index("gather", load(index, op.index.dtype, k).i, extent, op.axis);
        if (!v) return std::move(v.error());  // a 0-d input's one index too
        if (s.rank() > 0) idx[op.axis] = *v;
        copy_element(in, dot(idx, in_strides), out, k, elem);
      }
      return out;
    }
    case IndexKind::scatter_add:
    case IndexKind::scatter:
    case IndexKind::scatter_prod:
    case IndexKind::scatter_amax:
    case IndexKind::scatter_amin: {
      // out = in; out[i][index[i][j][k]][k] (op)= src[i][j][k]   (axis 1),
      // in the order of the index's elements.
      if (op.out.bytes() > 0) std::memcpy(writable_data(out), in.data(), op.out.bytes());
      const auto src_strides = op.src.shape.strides();
      const char* name = to_string(op.kind);
      for (int64_t k = 0; k < op.index.numel(); ++k) {
        auto idx = unravel(k, op.index.shape);
        Value add = load(*src, op.src.dtype, dot(idx, src_strides));
        auto v = resolve_index(name, load(index, op.index.dtype, k).i, extent, op.axis);
        if (!v) return std::move(v.error());
        if (s.rank() > 0) idx[op.axis] = *v;
        const int64_t o = dot(idx, in_strides);
        Value cur = load(out, op.out.dtype, o);
        Value next = add;
        switch (op.kind) {
          case IndexKind::scatter_add:
            next = cur.floating ? Value::of_float(cur.f + add.f) : Value::of_int(wrap_add(cur.i, add.i));
            break;
          case IndexKind::scatter_prod:
            next = cur.floating ? Value::of_float(cur.f * add.f) : Value::of_int(wrap_mul(cur.i, add.i));
            break;
          case IndexKind::scatter_amax:
          case IndexKind::scatter_amin: {
            const bool mx = op.kind == IndexKind::scatter_amax;
            if (cur.floating && (std::isnan(cur.f) || std::isnan(add.f)))
              next = std::isnan(add.f) ? add : cur;  // NaN propagates
            else if (cur.floating)
              next = (mx ? add.f > cur.f : add.f < cur.f) ? add : cur;
            else
              next = (mx ? add.i > cur.i : add.i < cur.i) ? add : cur;
            break;
          }
          default:  // scatter: the later write wins
            break;
        }
        store(out, op.out.dtype, o, next);
      }
      return out;
    }
  }
  return DeviceError(Errc::unsupported, "reference: unknown index op");
}

// --- the backend ----------------------------------------------------------------

class ReferenceBackend final : public HostBackend {
 public:
  [[nodiscard]] std::string_view kind() const noexcept override { return "reference"; }
  DeviceError execute(OperationIr& op, std::span<BufferPtr> inputs, std::span<BufferPtr> outputs) override {
    std::vector<const Bytes*> in;
    for (auto& b : inputs) {
      in.push_back(host_bytes(b));
      if (in.back() == nullptr) return DeviceError(Errc::invalid_tensor, "reference: input buffer of another backend");
    }
    auto result = std::visit([&](auto& o) { return run(o, in); }, op.op);
    if (!result) return std::move(result.error());
    outputs[0] = std::make_shared<HostBuffer>(std::move(*result));
    return {};
  }

  void seed(uint64_t s) override {
    seed_ = s;
    random_ops_ = 0;
  }

 private:
  using In = std::vector<const Bytes*>;
  Expected<Bytes> run(FromDataOp& o, const In&) { return o.data.bytes; }
  Expected<Bytes> run(FillOp& o, const In&) { return run_fill(o); }
  Expected<Bytes> run(RandomOp& o, const In&) { return run_random(o, seed_, random_ops_++); }
  Expected<Bytes> run(UnaryOp& o, const In& in) { return run_unary(o, *in[0]); }
  Expected<Bytes> run(BinaryOp& o, const In& in) { return run_binary(o, *in[0], *in[1]); }
  Expected<Bytes> run(ScalarOp& o, const In& in) { return run_scalar(o, *in[0]); }
  Expected<Bytes> run(ReduceOp& o, const In& in) { return run_reduce(o, *in[0]); }
  Expected<Bytes> run(SoftmaxOp& o, const In& in) { return run_softmax(o, *in[0]); }
  Expected<Bytes> run(MatmulOp& o, const In& in) {
    return run_matmul(o, *in[0], *in[1], o.has_bias() ? in[2] : nullptr);
  }
  Expected<Bytes> run(CastOp& o, const In& in) { return run_cast(o, *in[0]); }
  Expected<Bytes> run(ViewOp& o, const In& in) { return run_view(o, *in[0]); }
  Expected<Bytes> run(SliceAssignOp& o, const In& in) { return run_slice_assign(o, *in[0], *in[1]); }
  Expected<Bytes> run(CatOp& o, const In& in) { return run_cat(o, in); }
  Expected<Bytes> run(PadOp& o, const In& in) { return run_pad(o, *in[0]); }
  Expected<Bytes> run(IndexOp& o, const In& in) { return run_index(o, *in[0], *in[1], o.has_src() ? in[2] : nullptr); }
  Expected<Bytes> run(NormOp& o, const In& in) { return run_norm(o, in); }
  Expected<Bytes> run(AttentionOp& o, const In& in) { return run_attention(o, in); }
  Expected<Bytes> run(ScanOp& o, const In& in) { return run_scan(o, in); }
  Expected<Bytes> run(SortOp& o, const In& in) { return run_sort(o, in); }
  Expected<Bytes> run(WhereOp& o, const In& in) { return run_where(o, *in[0], *in[1], *in[2]); }
  Expected<Bytes> run(ConvOp& o, const In& in) { return run_conv(o, *in[0], *in[1], o.has_bias() ? in[2] : nullptr); }
  Expected<Bytes> run(PoolOp& o, const In& in) { return run_pool(o, *in[0]); }
  Expected<Bytes> run(DropOp&, const In&) {
    return DeviceError(Errc::protocol_error, "reference: drop is handled by the runner");
  }
  Expected<Bytes> run(SeedOp&, const In&) {
    return DeviceError(Errc::protocol_error, "reference: seed is handled by the runner");
  }

  uint64_t seed_ = 0;
  uint64_t random_ops_ = 0;  // random ops run since the seed: the philox counter's high word
};

}  // namespace

BackendKind backend_kind() {
  return BackendKind{
      "reference",
      [] { return 1 << 16; },
      [] { return std::string{}; },
      [](int, const DeviceOptions&) -> std::unique_ptr<Backend> { return std::make_unique<ReferenceBackend>(); },
  };
}

}  // namespace switchyard::backends::reference
