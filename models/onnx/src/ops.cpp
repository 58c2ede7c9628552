// SPDX-License-Identifier: Apache-2.0
// The op table: each ONNX op mapped to Switchyard's ops, directly or by a
// fixed composition. Shape arithmetic on host constants is computed here on
// the host (small integer tensors), so a cached plan skips it.
//
// Adding an op: one entry in op_table() below (attributes it understands, an
// optional load-time check, the implementation). Ops waiting on other
// issues (conv/pool, f16/bf16/i8/i16) slot in the same way.

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <string_view>

#include "onnx_internal.hpp"
#include "switchyard/nn.hpp"

namespace switchyard::onnx {
namespace detail {
namespace {

constexpr int64_t kHostMax = 1 << 16;  // larger results go to the device

using Ints = std::vector<int64_t>;
// A list of values (a subgraph's inputs or outputs); a node returns Outs.
using Values = std::vector<Value>;

Value dev_value(Tensor t) {
  Value v;
  v.dev = std::move(t);
  return v;
}
Value host_value(TensorData d) {
  Value v;
  v.host = std::move(d);
  return v;
}
// A result computed on the host: kept there when small (shape arithmetic
// may fold it), uploaded when large.
Value host_or_dev(const Ctx& ctx, TensorData d) {
  if (d.numel() > kHostMax) return dev_value(ctx.device().from_data(d));
  return host_value(std::move(d));
}

int64_t axis_of(const Ctx& ctx, int64_t axis, size_t rank) {
  auto a = normalize_axis(axis, rank);
  if (!a)
    ctx.fail(Errc::invalid_argument, "axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return *a;
}

Scalar scalar_for(DType t, double v) {
  if (is_floating(t)) return Scalar(v);
  if (is_bool(t)) return Scalar(v != 0);
  return Scalar(static_cast<int64_t>(v));
}

Tensor zeros_like_scalar(const Tensor& x) { return x.device().zeros({}, x.dtype()); }

// Channel vectors [C] against x [N, C, ...].
Tensor per_channel(const Tensor& v, size_t rank) {
  Ints dims(rank, 1);
  dims[1] = v.shape().numel();
  return v.reshape(Shape(dims));
}

// --- host helpers (small tensors, any dtype, byte-exact) ---

TensorData host_reshape(const TensorData& d, Shape s) { return TensorData(std::move(s), d.dtype, d.bytes); }

TensorData host_ints(const Ints& v, Shape s, DType t = DType::i64) {
  switch (t) {
    case DType::i64:
      return TensorData::from(v, std::move(s));
    case DType::i32:
      return TensorData::from(std::vector<int32_t>(v.begin(), v.end()), std::move(s));
    case DType::u8:
      return TensorData::from(std::vector<uint8_t>(v.begin(), v.end()), std::move(s));
    case DType::i8:
      return TensorData::from(std::vector<int8_t>(v.begin(), v.end()), std::move(s));
    case DType::i16:
      return TensorData::from(std::vector<int16_t>(v.begin(), v.end()), std::move(s));
    case DType::f16:
      return TensorData::from(std::vector<Half>(v.begin(), v.end()), std::move(s));
    case DType::bf16:
      return TensorData::from(std::vector<BFloat16>(v.begin(), v.end()), std::move(s));
    case DType::boolean: {
      std::vector<bool> b;
      for (auto x : v) b.push_back(x != 0);
      return TensorData::from(b, std::move(s));
    }
    case DType::f32:
      return TensorData::from(std::vector<float>(v.begin(), v.end()), std::move(s));
    case DType::f64:
      return TensorData::from(std::vector<double>(v.begin(), v.end()), std::move(s));
  }
  return {};
}

TensorData host_doubles(const std::vector<double>& v, Shape s, DType t) {
  if (t == DType::f32) return TensorData::from(std::vector<float>(v.begin(), v.end()), std::move(s));
  if (t == DType::f64) return TensorData::from(v, std::move(s));
  if (t == DType::f16) return TensorData::from(std::vector<Half>(v.begin(), v.end()), std::move(s));
  if (t == DType::bf16) return TensorData::from(std::vector<BFloat16>(v.begin(), v.end()), std::move(s));
  Ints i;
  for (double x : v) i.push_back(static_cast<int64_t>(x));
  return host_ints(i, std::move(s), t);
}

TensorData host_cast(const TensorData& d, DType t) {
  if (d.dtype == t) return d;
  if (is_floating(d.dtype)) {
    auto v = d.to_vector<double>();
    if (t == DType::boolean) {
      Ints i;
      for (double x : v) i.push_back(x != 0);
      return host_ints(i, d.shape, t);
    }
    return host_doubles(v, d.shape, t);
  }
  return host_ints(d.to_vector<int64_t>(), d.shape, t);
}

// Copies elements: out element k comes from source element src_index(k).
template <class F>
TensorData host_gather_elems(const TensorData& d, Shape out_shape, F src_index) {
  const size_t es = size_of(d.dtype);
  const int64_t n = out_shape.numel();
  Bytes b = Bytes::allocate(static_cast<size_t>(n) * es);
  auto* dst = b.mutable_data();
  const auto* src = d.bytes.as<const std::byte>();
  Ints idx(out_shape.rank(), 0);
  for (int64_t k = 0; k < n; ++k) {
    std::memcpy(dst + k * es, src + src_index(idx) * es, es);
    for (int64_t a = static_cast<int64_t>(idx.size()) - 1; a >= 0; --a) {
      if (++idx[a] < out_shape[a]) break;
      idx[a] = 0;
    }
  }
  return TensorData(std::move(out_shape), d.dtype, std::move(b));
}

int64_t linear(const Ints& idx, const Ints& strides) {
  int64_t off = 0;
  for (size_t a = 0; a < idx.size(); ++a) off += idx[a] * strides[a];
  return off;
}

TensorData host_expand(const TensorData& d, const Shape& to) {
  auto st = broadcast_strides(d.shape, to);
  return host_gather_elems(d, to, [&](const Ints& i) { return linear(i, st); });
}

TensorData host_concat(const std::vector<const TensorData*>& parts, int64_t axis) {
  Shape out = parts[0]->shape;
  out.dims[axis] = 0;
  for (auto* p : parts) out.dims[axis] += p->shape[axis];
  // Concatenate by walking the parts: for small host tensors, index math.
  Ints offsets;
  int64_t acc = 0;
  for (auto* p : parts) {
    offsets.push_back(acc);
    acc += p->shape[axis];
  }
  const size_t es = size_of(parts[0]->dtype);
  Bytes b = Bytes::allocate(static_cast<size_t>(out.numel()) * es);
  auto* dst = b.mutable_data();
  Ints idx(out.rank(), 0);
  for (int64_t k = 0; k < out.numel(); ++k) {
    size_t p = std::upper_bound(offsets.begin(), offsets.end(), idx[axis]) - offsets.begin() - 1;
    Ints local = idx;
    local[axis] -= offsets[p];
    std::memcpy(dst + k * es, parts[p]->bytes.as<const std::byte>() + linear(local, parts[p]->shape.strides()) * es,
                es);
    for (int64_t a = static_cast<int64_t>(idx.size()) - 1; a >= 0; --a) {
      if (++idx[a] < out[a]) break;
      idx[a] = 0;
    }
  }
  return TensorData(out, parts[0]->dtype, std::move(b));
}

bool host_small(const Ctx& ctx) {
  if (!ctx.all_host()) return false;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has(i) && ctx.in(i).shape().numel() > kHostMax) return false;
  return true;
}

// --- attributes and axes ---

Ints reduce_axes(Ctx& ctx, size_t rank, bool axes_from_input) {
  Ints axes;
  if (axes_from_input) {
    if (ctx.has(1)) axes = ctx.ints(1);
  } else if (auto a = ctx.attr_ints("axes")) {
    axes = *a;
  }
  for (auto& a : axes) a = axis_of(ctx, a, rank);
  return axes;
}

Shape reduced_shape(const Shape& s, const Ints& axes, bool keep) {
  Shape out;
  for (size_t a = 0; a < s.rank(); ++a) {
    bool r = axes.empty() || std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) != axes.end();
    if (!r)
      out.dims.push_back(s[a]);
    else if (keep)
      out.dims.push_back(1);
  }
  return out;
}

// --- families ---

using UnaryFn = Tensor (*)(const Tensor&);

OpSpec unary(UnaryKind k) {
  return {{}, nullptr, [k](Ctx& ctx) { return Outs{dev_value(ctx.dev(0).unary(k))}; }};
}

OpSpec composed(std::function<Tensor(Ctx&, const Tensor&)> f, std::vector<std::string> attrs = {}) {
  return {std::move(attrs), nullptr, [f = std::move(f)](Ctx& ctx) { return Outs{dev_value(f(ctx, ctx.dev(0)))}; }};
}

// Integer host arithmetic for shape subgraphs (broadcasting).
std::optional<Value> host_binary(Ctx& ctx, const std::string& op) {
  if (!host_small(ctx)) return std::nullopt;
  const TensorData& a = ctx.host(0);
  const TensorData& b = ctx.host(1);
  auto shape = broadcast_shapes(a.shape, b.shape);
  if (!shape) return std::nullopt;
  auto sa = broadcast_strides(a.shape, *shape), sb = broadcast_strides(b.shape, *shape);
  const bool fl = is_floating(a.dtype) || is_floating(b.dtype);
  const bool cmp = op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual";
  if (fl) {
    auto va = a.to_vector<double>(), vb = b.to_vector<double>();
    std::vector<double> out;
    Ints idx(shape->rank(), 0);
    for (int64_t k = 0; k < shape->numel(); ++k) {
      double x = va[linear(idx, sa)], y = vb[linear(idx, sb)], r = 0;
      if (op == "Add")
        r = x + y;
      else if (op == "Sub")
        r = x - y;
      else if (op == "Mul")
        r = x * y;
      else if (op == "Div")
        r = x / y;
      else if (op == "Equal")
        r = x == y;
      else if (op == "Less")
        r = x < y;
      else if (op == "Greater")
        r = x > y;
      else if (op == "LessOrEqual")
        r = x <= y;
      else if (op == "GreaterOrEqual")
        r = x >= y;
      else
        return std::nullopt;
      out.push_back(r);
      for (int64_t ax = static_cast<int64_t>(idx.size()) - 1; ax >= 0; --ax) {
        if (++idx[ax] < (*shape)[ax]) break;
        idx[ax] = 0;
      }
    }
    return host_value(host_doubles(out, *shape, cmp ? DType::boolean : a.dtype));
  }
  auto va = a.to_vector<int64_t>(), vb = b.to_vector<int64_t>();
  Ints out;
  Ints idx(shape->rank(), 0);
  for (int64_t k = 0; k < shape->numel(); ++k) {
    int64_t x = va[linear(idx, sa)], y = vb[linear(idx, sb)], r = 0;
    // Wrapping (as the device's int64 kernels), not signed-overflow UB.
    const auto ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
    if (op == "Add")
      r = static_cast<int64_t>(ux + uy);
    else if (op == "Sub")
      r = static_cast<int64_t>(ux - uy);
    else if (op == "Mul")
      r = static_cast<int64_t>(ux * uy);
    else if (op == "Div") {
      if (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1)) return std::nullopt;
      r = x / y;
    } else if (op == "Equal")
      r = x == y;
    else if (op == "Less")
      r = x < y;
    else if (op == "Greater")
      r = x > y;
    else if (op == "LessOrEqual")
      r = x <= y;
    else if (op == "GreaterOrEqual")
      r = x >= y;
    else if (op == "Mod" || op == "FMod") {
      // ONNX Mod: the divisor's sign (Python), or with fmod=1 the
      // dividend's (C); a zero divisor is the device's error to report.
      if (y == 0 || (x == std::numeric_limits<int64_t>::min() && y == -1)) return std::nullopt;
      r = x % y;
      if (op == "Mod" && r != 0 && ((r < 0) != (y < 0))) r += y;
    } else if (op == "And")
      r = x && y;
    else if (op == "Or")
      r = x || y;
    else
      return std::nullopt;
    out.push_back(r);
    for (int64_t ax = static_cast<int64_t>(idx.size()) - 1; ax >= 0; --ax) {
      if (++idx[ax] < (*shape)[ax]) break;
      idx[ax] = 0;
    }
  }
  return host_value(host_ints(out, *shape, cmp ? DType::boolean : a.dtype));
}

// Integer division truncates (C), as ONNX's Div on integers.
Tensor int_div(const Tensor& a, const Tensor& b) {
  // In integers throughout (through f64, quotients above 2^53 rounded):
  // the floor quotient, plus one where it rounded a negative quotient down.
  Tensor q = a.floor_divide(b);
  Tensor rounded_down = a.remainder(b).ne(Scalar(0)).logical_and(a.lt(Scalar(0)).logical_xor(b.lt(Scalar(0))));
  return q.add(rounded_down.cast(q.dtype()));
}

// C's fmod of integers (the sign of the dividend), exactly: Python's
// remainder has the divisor's sign; where the two differ, fmod is r - b.
Tensor int_fmod(const Tensor& a, const Tensor& b) {
  Tensor r = a.remainder(b);
  Tensor other_sign = r.ne(Scalar(0)).logical_and(r.lt(Scalar(0)).logical_xor(a.lt(Scalar(0))));
  return where(other_sign, r.sub(b), r);
}

// Opset 6 and earlier: binary ops broadcast only with broadcast=1, and
// then B's axes line up with A's from `axis` (default: A's trailing axes),
// not numpy-style from the right. Later opsets dropped both attributes.
const std::vector<std::string> kLegacyBroadcast = {"broadcast", "axis"};

std::string legacy_broadcast_check(const ::onnx::NodeProto& n, int64_t opset) {
  if (opset < 7) return "";
  for (const auto& a : n.attribute())
    if (a.name() == "broadcast" || a.name() == "axis")
      return "attribute '" + a.name() + "' (opset 6 and earlier only; this model is opset " + std::to_string(opset) +
             ")";
  return "";
}

bool legacy_broadcast(const Ctx& ctx) { return ctx.opset() < 7 && ctx.attr_i("broadcast", 0) != 0; }

// B reshaped so that numpy broadcasting lines it up with A from `axis`.
Tensor rhs_operand(Ctx& ctx) {
  if (!legacy_broadcast(ctx)) return ctx.dev(1);
  const Shape &a = ctx.in(0).shape(), &b = ctx.in(1).shape();
  const auto ra = static_cast<int64_t>(a.rank()), rb = static_cast<int64_t>(b.rank());
  int64_t axis = ctx.attr("axis") ? ctx.attr_i("axis", 0) : ra - rb;
  if (axis < 0) axis += ra;
  bool fits = axis >= 0 && axis + rb <= ra;
  for (int64_t i = 0; fits && i < rb; ++i) fits = b[i] == 1 || b[i] == a[axis + i];
  if (!fits)
    ctx.fail(Errc::shape_mismatch, "B " + b.to_string() + " does not broadcast onto A " + a.to_string() +
                                       " from axis " + std::to_string(axis));
  Ints dims(b.dims);
  dims.insert(dims.end(), static_cast<size_t>(ra - axis - rb), 1);
  return ctx.dev(1).reshape(Shape(dims));
}

OpSpec binary(BinaryKind k, const std::string& name) {
  return {kLegacyBroadcast, legacy_broadcast_check, [k, name](Ctx& ctx) {
            if (!legacy_broadcast(ctx))
              if (auto h = host_binary(ctx, name)) return Outs{*h};
            return Outs{dev_value(ctx.dev(0).binary(k, rhs_operand(ctx)))};
          }};
}

OpSpec variadic(BinaryKind k, bool mean) {
  return {{}, nullptr, [k, mean](Ctx& ctx) {
            Tensor acc = ctx.dev(0);
            size_t n = 1;
            for (size_t i = 1; i < ctx.num_inputs(); ++i)
              if (ctx.has(i)) {
                acc = acc.binary(k, ctx.dev(i));
                ++n;
              }
            if (mean) acc = acc.div(scalar_for(acc.dtype(), static_cast<double>(n)));
            return Outs{dev_value(acc)};
          }};
}

// ReduceMax / ReduceMin over no elements: the dtype's lowest / highest value
// (-inf / inf for floats), as ONNX defines it from opset 18 and ONNX Runtime
// answers at every opset. PyTorch refuses such a reduction.
Tensor empty_extreme(const Tensor& x, const Shape& out, bool highest) {
  const DType t = x.dtype();
  if (is_floating(t)) return x.device().full(out, highest ? HUGE_VAL : -HUGE_VAL, t);
  if (t == DType::boolean) return x.device().full(out, highest ? 1 : 0, t);
  if (t == DType::u8) return x.device().full(out, highest ? 255 : 0, t);
  // The signed minimum is a power of two (exact in a double); the maximum
  // is its complement (INT64_MAX is not a double).
  const double lowest = -std::ldexp(1.0, static_cast<int>(size_of(t) * 8 - 1));
  Tensor low = x.device().full(out, lowest, t);
  return highest ? low.bitwise_not() : low;
}

Tensor reduce(const Tensor& x, const std::string& op, const Ints& axes, bool keep) {
  const DType t = x.dtype();
  auto back = [&](const Tensor& r) { return r.dtype() == t ? r : r.cast(t); };
  bool empty = false;
  for (int64_t a : axes) empty = empty || x.shape()[static_cast<size_t>(a)] == 0;  // axes are normalised
  if (op == "ReduceSum") return back(x.sum(axes, keep));
  if (op == "ReduceMean") return x.mean(axes, keep);
  if ((op == "ReduceMax" || op == "ReduceMin") && empty)
    return empty_extreme(x, reduced_shape(x.shape(), axes, keep), op == "ReduceMin");
  if (op == "ReduceMax") return x.max(axes, keep);
  if (op == "ReduceMin") return x.min(axes, keep);
  if (op == "ReduceProd") return back(x.prod(axes, keep));
  if (op == "ReduceL1") return back(x.abs().sum(axes, keep));
  if (op == "ReduceL2") return back(x.mul(x).sum(axes, keep).cast(is_floating(t) ? t : DType::f64).sqrt());
  if (op == "ReduceSumSquare") return back(x.mul(x).sum(axes, keep));
  if (op == "ReduceLogSum") return x.sum(axes, keep).log();
  // ReduceLogSumExp, max-shifted so large inputs do not overflow; an
  // infinite max shifts by 0 instead (inf - inf would be NaN where the
  // answer is +-inf, as PyTorch's logsumexp does), and an empty reduction is
  // log(0) = -inf (there is no max to shift by).
  if (empty) return x.exp().sum(axes, keep).log();
  Tensor m = x.max(axes, true);
  if (is_floating(t)) m = m.masked_fill(m.isinf(), 0);
  Tensor r = x.sub(m).exp().sum(axes, true).log().add(m);
  return keep ? r : r.reshape(reduced_shape(x.shape(), axes, false));
}

OpSpec reduction(const std::string& op) {
  return {{"axes", "keepdims", "noop_with_empty_axes"},
          [op](const ::onnx::NodeProto&, int64_t) { return std::string(); },
          [op](Ctx& ctx) {
            Tensor x = ctx.dev(0);
            const bool from_input = op == "ReduceSum" && ctx.opset() >= 13;
            Ints axes = reduce_axes(ctx, x.rank(), from_input);
            const bool keep = ctx.attr_i("keepdims", 1) != 0;
            if (axes.empty() && ctx.attr_i("noop_with_empty_axes", 0) != 0) return Outs{dev_value(x)};
            if (axes.empty())
              for (size_t a = 0; a < x.rank(); ++a) axes.push_back(static_cast<int64_t>(a));
            return Outs{dev_value(reduce(x, op, axes, keep))};
          }};
}

// Softmax family: opset < 13 flattens to 2-D at `axis` (default 1).
template <class F>
OpSpec softmax_like(F f) {
  return {{"axis"}, nullptr, [f](Ctx& ctx) {
            Tensor x = ctx.dev(0);
            if (ctx.opset() >= 13) return Outs{dev_value(f(x, axis_of(ctx, ctx.attr_i("axis", -1), x.rank())))};
            int64_t axis = axis_of(ctx, ctx.attr_i("axis", 1), std::max<size_t>(x.rank(), 1));
            // [outer, inner] spelled out: -1 cannot be inferred when an
            // extent is 0 (an empty batch).
            int64_t outer = 1, inner = 1;
            for (int64_t a = 0; a < static_cast<int64_t>(x.rank()); ++a) (a < axis ? outer : inner) *= x.shape()[a];
            Tensor y = f(x.reshape({outer, inner}), 1);
            return Outs{dev_value(y.reshape(x.shape()))};
          }};
}

Tensor hardmax(const Tensor& x, int64_t axis) {
  if (x.shape()[axis] == 0) return x;  // empty rows: nothing to mark (argmax has no answer)
  Tensor idx = x.argmax(axis, true);
  Shape s(Ints(x.rank(), 1));
  s.dims[axis] = x.shape()[axis];
  Tensor r = x.device().arange(0, static_cast<double>(x.shape()[axis])).reshape(s);
  return r.eq(idx).cast(x.dtype());
}

std::string pad_mode(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute())
    if (a.name() == "mode" && a.s() != "constant" && a.s() != "edge" && a.s() != "reflect")
      return "attribute mode='" + a.s() + "' (constant, edge and reflect only)";
  return "";
}

Ints norm_ints(const Ctx& ctx, Ints axes, size_t rank) {
  for (auto& a : axes) a = axis_of(ctx, a, rank);
  return axes;
}

Value do_reshape(Ctx& ctx, const Value& x, Ints target, bool allowzero) {
  const Shape& s = x.shape();
  for (size_t a = 0; a < target.size(); ++a)
    if (target[a] == 0 && !allowzero) {
      if (a >= s.rank())
        ctx.fail(Errc::shape_mismatch, "shape copies axis " + std::to_string(a) + " of " + s.to_string());
      target[a] = s[a];
    }
  if (x.host) {
    int64_t known = 1, infer = -1;
    for (size_t a = 0; a < target.size(); ++a) {
      if (target[a] == -1)
        infer = static_cast<int64_t>(a);
      else
        known *= target[a];
    }
    if (infer >= 0) target[infer] = known == 0 ? 0 : s.numel() / known;
    Shape out(target);
    if (out.numel() != s.numel())
      ctx.fail(Errc::shape_mismatch, "cannot reshape " + s.to_string() + " to " + out.to_string());
    Value v = host_value(host_reshape(*x.host, out));
    return v;
  }
  return dev_value(x.dev.reshape(Shape(target)));
}

Value unsqueeze_value(Ctx& ctx, const Value& x, Ints axes) {
  const size_t out_rank = x.shape().rank() + axes.size();
  axes = norm_ints(ctx, axes, out_rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    ctx.fail(Errc::invalid_argument,
             "axes name axis " + std::to_string(*std::adjacent_find(axes.begin(), axes.end())) + " twice");
  Ints dims;
  size_t src = 0;
  for (size_t a = 0; a < out_rank; ++a) {
    if (std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(a)))
      dims.push_back(1);
    else
      dims.push_back(x.shape()[src++]);
  }
  if (x.host) return host_value(host_reshape(*x.host, Shape(dims)));
  return dev_value(x.dev.reshape(Shape(dims)));
}

// One ONNX Slice (starts/ends clamped as ONNX does), by axis.
Value slice_value(Ctx& ctx, const Value& x, const Ints& starts, const Ints& ends, Ints axes, Ints steps) {
  const Shape& s = x.shape();
  if (axes.empty())
    for (size_t a = 0; a < starts.size(); ++a) axes.push_back(static_cast<int64_t>(a));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    ctx.fail(Errc::invalid_argument, "starts, ends, axes and steps differ in length");
  Ints st(s.rank(), 0), en(s.dims), sp(s.rank(), 1);
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = axis_of(ctx, axes[k], s.rank());
    int64_t dim = s[a], step = steps[k];
    if (step == 0) ctx.fail(Errc::invalid_argument, "slice step 0");
    int64_t b = starts[k], e = ends[k];
    if (b < 0) b += dim;
    if (e < 0 && e > std::numeric_limits<int64_t>::min() / 2) e += dim;
    if (e <= std::numeric_limits<int64_t>::min() / 2) e = -1;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      // ONNX clamps a negative step's start to [0, dim - 1] (numpy's -1
      // would make a start still below 0 after adding dim an empty slice).
      b = dim == 0 ? -1 : std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    st[a] = b;
    en[a] = e;
    sp[a] = step;
  }
  // Output extents and the source index of each output position.
  Ints out_dims(s.rank());
  for (size_t a = 0; a < s.rank(); ++a) {
    // Written so that steps near the int64 limits cannot overflow.
    const int64_t span = sp[a] > 0 ? en[a] - st[a] : st[a] - en[a];
    const int64_t stride =
        sp[a] > 0 ? sp[a]
                  : (sp[a] == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -sp[a]);
    out_dims[a] = span > 0 ? 1 + (span - 1) / stride : 0;
  }
  if (x.host) {
    auto strides = s.strides();
    return host_value(host_gather_elems(*x.host, Shape(out_dims), [&](const Ints& i) {
      int64_t off = 0;
      for (size_t a = 0; a < i.size(); ++a) off += (st[a] + i[a] * sp[a]) * strides[a];
      return off;
    }));
  }
  Tensor t = x.dev;
  for (size_t a = 0; a < s.rank(); ++a) {
    if (st[a] == 0 && en[a] == s[a] && sp[a] == 1) continue;
    if (sp[a] > 0) {
      t = t.slice(static_cast<int64_t>(a), Slice{st[a], std::max(en[a], st[a]), sp[a]});
    } else {
      // Negative steps: flip, then a positive step over the mirrored range.
      const int64_t dim = s[a];
      t = t.flip({static_cast<int64_t>(a)});
      int64_t b = dim - 1 - st[a], e = dim - 1 - en[a];
      t = t.slice(static_cast<int64_t>(a), Slice{b, std::max(e, b), -sp[a]});
    }
  }
  return dev_value(t);
}

// Gather/GatherElements indices may be negative: count from the end.
Tensor fix_indices(Ctx& ctx, size_t input, int64_t dim) {
  if (ctx.is_host(input)) {
    auto v = ctx.ints(input);
    for (auto& i : v) {
      if (i < -dim || i >= dim)
        ctx.fail(Errc::index_out_of_range,
                 "index " + std::to_string(i) + " out of range for extent " + std::to_string(dim));
      if (i < 0) i += dim;
    }
    return ctx.device().from_data(host_ints(v, ctx.host(input).shape));
  }
  Tensor idx = ctx.dev(input);
  if (idx.dtype() != DType::i64) idx = idx.cast(DType::i64);
  return where(idx.lt(Scalar(int64_t{0})), idx.add(Scalar(dim)), idx);
}

// GatherND as one index_select: each index tuple becomes a linear index
// into data viewed as [batch * indexed extents, rest...]. A component out of
// range makes the whole linear index invalid (far below -numel), so the
// index_select fails instead of reading another element.
Tensor gather_nd(Ctx& ctx, const Tensor& data, Tensor idx, int64_t batch_dims) {
  const auto& ds = data.shape();
  const auto& is = idx.shape();
  if (is.rank() < 1 || batch_dims < 0 || static_cast<size_t>(batch_dims) >= is.rank() ||
      static_cast<size_t>(batch_dims) > ds.rank())
    ctx.fail(Errc::shape_mismatch, "indices " + is.to_string() + " and batch_dims " + std::to_string(batch_dims) +
                                       " do not fit data " + ds.to_string());
  const auto b = static_cast<size_t>(batch_dims);
  const auto k = static_cast<size_t>(is[is.rank() - 1]);
  if (b + k > ds.rank())
    ctx.fail(Errc::shape_mismatch, "index tuples of " + std::to_string(k) + " entries for data " + ds.to_string() +
                                       " with " + std::to_string(b) + " batch axes");
  for (size_t a = 0; a < b; ++a)
    if (is[a] != ds[a])
      ctx.fail(Errc::shape_mismatch,
               "batch axis " + std::to_string(a) + " differs: indices " + is.to_string() + ", data " + ds.to_string());
  if (idx.dtype() != DType::i64) idx = idx.cast(DType::i64);
  // Per component: negative counts from the end; out of range poisons.
  Ints extents(ds.dims.begin() + static_cast<int64_t>(b), ds.dims.begin() + static_cast<int64_t>(b + k));
  Ints strides(k, 1);
  for (size_t j = k; j-- > 1;) strides[j - 1] = strides[j] * extents[j];
  int64_t block = 1;  // elements of the indexed axes per batch position
  for (auto e : extents) block *= e;
  int64_t rows = block;
  for (size_t a = 0; a < b; ++a) rows *= ds[a];
  Tensor ext = ctx.device().from_data(host_ints(extents, Shape{static_cast<int64_t>(k)}));
  Tensor fixed = where(idx.lt(Scalar(int64_t{0})), idx.add(ext), idx);
  Tensor bad = fixed.lt(Scalar(int64_t{0})).logical_or(fixed.ge(ext)).any({-1});
  Tensor lin = fixed.mul(ctx.device().from_data(host_ints(strides, Shape{static_cast<int64_t>(k)}))).sum({-1});
  if (b > 0) {
    int64_t batches = 1;
    for (size_t a = 0; a < b; ++a) batches *= ds[a];
    Ints bshape(is.rank() - 1, 1);
    for (size_t a = 0; a < b; ++a) bshape[a] = ds[a];
    lin = lin.add(ctx.device().arange(0, static_cast<double>(batches)).reshape(Shape(bshape)).mul(Scalar(block)));
  }
  lin = where(bad, ctx.device().full({}, -static_cast<double>(int64_t{1} << 62), DType::i64), lin);
  Ints rest(ds.dims.begin() + static_cast<int64_t>(b + k), ds.dims.end());
  Ints viewed{rows};
  viewed.insert(viewed.end(), rest.begin(), rest.end());
  Ints out(is.dims.begin(), is.dims.end() - 1);
  out.insert(out.end(), rest.begin(), rest.end());
  return data.reshape(Shape(viewed)).index_select(0, lin.flatten()).reshape(Shape(out));
}

// Einsum by pairwise contraction: each operand's repeated letters become
// its diagonal, letters nobody else needs are summed out, and two operands
// meet in one batched matmul ([batch, left, contracted] @ [batch,
// contracted, right]). "..." becomes one letter per broadcast axis.
struct EinsumTerm {
  Tensor t;
  std::string letters;  // one per axis
};

Tensor sum_letters(EinsumTerm& x, const std::string& keep) {
  Ints axes;
  std::string kept;
  for (size_t a = 0; a < x.letters.size(); ++a)
    if (keep.find(x.letters[a]) == std::string::npos)
      axes.push_back(static_cast<int64_t>(a));
    else
      kept += x.letters[a];
  if (!axes.empty()) {
    x.t = x.t.sum(axes);
    x.letters = kept;
  }
  return x.t;
}

void take_diagonals(Ctx& ctx, EinsumTerm& x) {
  for (size_t p = 0; p < x.letters.size(); ++p)
    for (size_t q = p + 1; q < x.letters.size(); ++q) {
      if (x.letters[p] != x.letters[q]) continue;
      const int64_t n = x.t.shape()[p];
      if (x.t.shape()[q] != n)
        ctx.fail(Errc::shape_mismatch, std::string("letter ") + x.letters[p] + " has extents " + std::to_string(n) +
                                           " and " + std::to_string(x.t.shape()[q]));
      Ints order;
      for (size_t a = 0; a < x.letters.size(); ++a)
        if (a != p && a != q) order.push_back(static_cast<int64_t>(a));
      order.push_back(static_cast<int64_t>(p));
      order.push_back(static_cast<int64_t>(q));
      Ints flat(x.t.shape().dims);
      Shape moved_shape;
      for (auto a : order) moved_shape.dims.push_back(flat[static_cast<size_t>(a)]);
      moved_shape.dims.pop_back();
      moved_shape.dims.back() = n * n;
      Tensor diag_index = ctx.device().arange(0, static_cast<double>(n)).mul(Scalar(n + 1));
      Tensor moved = x.t.permute(order).reshape(moved_shape);
      x.t = moved.index_select(static_cast<int64_t>(moved_shape.rank() - 1), diag_index);
      std::string letters;
      for (size_t a = 0; a + 2 < order.size(); ++a) letters += x.letters[static_cast<size_t>(order[a])];
      letters += x.letters[p];
      x.letters = letters;
      take_diagonals(ctx, x);
      return;
    }
}

Tensor einsum(Ctx& ctx, const std::string& equation, std::vector<Tensor> operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const auto arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> specs;
  for (size_t start = 0;;) {
    auto comma = lhs.find(',', start);
    specs.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (specs.size() != operands.size())
    ctx.fail(Errc::invalid_argument, "equation '" + equation + "' names " + std::to_string(specs.size()) +
                                         " operands, the node has " + std::to_string(operands.size()));
  // "..." -> the letters A, B, ... for the trailing broadcast axes.
  size_t ellipsis_rank = 0;
  for (size_t i = 0; i < specs.size(); ++i)
    if (auto e = specs[i].find("..."); e != std::string::npos) {
      const size_t named = specs[i].size() - 3;
      if (operands[i].rank() < named)
        ctx.fail(Errc::shape_mismatch, "operand " + std::to_string(i) + " has too few axes");
      ellipsis_rank = std::max(ellipsis_rank, operands[i].rank() - named);
    }
  auto expand_ellipsis = [&](const std::string& spec, size_t rank) {
    auto e = spec.find("...");
    if (e == std::string::npos) return spec;
    std::string fill;
    for (size_t a = ellipsis_rank - rank; a < ellipsis_rank; ++a) fill += static_cast<char>('A' + a);
    return spec.substr(0, e) + fill + spec.substr(e + 3);
  };
  std::vector<EinsumTerm> terms;
  std::string all;  // every operand's letters, a repeated one as often as written
  for (size_t i = 0; i < specs.size(); ++i) {
    const size_t named = specs[i].find("...") == std::string::npos ? specs[i].size() : specs[i].size() - 3;
    terms.push_back({operands[i], expand_ellipsis(specs[i], operands[i].rank() - named)});
    all += terms.back().letters;
    if (terms.back().letters.size() != operands[i].rank())
      ctx.fail(Errc::shape_mismatch, "operand " + std::to_string(i) + " of shape " + operands[i].shape().to_string() +
                                         " for subscripts '" + specs[i] + "'");
    take_diagonals(ctx, terms.back());
  }
  std::string out;
  if (arrow != std::string::npos) {
    std::string given = eq.substr(arrow + 2);
    std::string fill;
    for (size_t a = 0; a < ellipsis_rank; ++a) fill += static_cast<char>('A' + a);
    auto e = given.find("...");
    out = e == std::string::npos ? given : given.substr(0, e) + fill + given.substr(e + 3);
  } else {  // implicit: the broadcast axes, then letters written once, in order ('ii' is a trace)
    for (size_t a = 0; a < ellipsis_rank; ++a) out += static_cast<char>('A' + a);
    std::string once;
    for (char c = 'a'; c <= 'z'; ++c)
      if (std::count(all.begin(), all.end(), c) == 1) once += c;
    out += once;
  }
  // Left to right: a letter stays while the output or a later term needs it.
  auto needed_after = [&](size_t i) {
    std::string need = out;
    for (size_t j = i + 1; j < terms.size(); ++j) need += terms[j].letters;
    return need;
  };
  EinsumTerm acc = terms[0];
  sum_letters(acc, needed_after(0));
  for (size_t i = 1; i < terms.size(); ++i) {
    EinsumTerm rhs = terms[i];
    const std::string keep = needed_after(i);
    sum_letters(rhs, keep + acc.letters);
    std::string batch, left, right, contracted;
    for (char c : acc.letters) {
      const bool in_rhs = rhs.letters.find(c) != std::string::npos, kept = keep.find(c) != std::string::npos;
      if (in_rhs && kept)
        batch += c;
      else if (in_rhs)
        contracted += c;
      else
        left += c;
    }
    for (char c : rhs.letters)
      if (acc.letters.find(c) == std::string::npos) right += c;
    auto extent = [&](const EinsumTerm& x, char c) {
      const auto a = x.letters.find(c);
      return a == std::string::npos ? int64_t{1} : x.t.shape()[a];
    };
    auto arrange = [&](EinsumTerm& x, const std::string& a, const std::string& b, const std::string& c) {
      Ints order;
      for (const auto* part : {&a, &b, &c})
        for (char l : *part) {
          const auto at = x.letters.find(l);
          order.push_back(static_cast<int64_t>(at));
        }
      Tensor t = x.t.permute(order);
      // Batch extents broadcast (size 1 against n).
      Ints target;
      for (char l : a) target.push_back(std::max(extent(acc, l), extent(rhs, l)));
      for (size_t k = a.size(); k < order.size(); ++k) target.push_back(t.shape()[k]);
      return t.expand(Shape(target));
    };
    auto product = [](const std::string& letters, const EinsumTerm& x, auto&& ext) {
      int64_t n = 1;
      for (char l : letters) n *= ext(x, l);
      return n;
    };
    int64_t nb = 1;
    for (char l : batch) nb *= std::max(extent(acc, l), extent(rhs, l));
    const int64_t nl = product(left, acc, extent), nc = product(contracted, acc, extent),
                  nr = product(right, rhs, extent);
    Tensor a = arrange(acc, batch, left, contracted).reshape({nb, nl, nc});
    Tensor b = arrange(rhs, batch, contracted, right).reshape({nb, nc, nr});
    Ints shape;
    for (char l : batch) shape.push_back(std::max(extent(acc, l), extent(rhs, l)));
    for (char l : left) shape.push_back(extent(acc, l));
    for (char l : right) shape.push_back(extent(rhs, l));
    std::string letters = batch;
    letters += left;
    letters += right;
    acc = EinsumTerm{a.matmul(b).reshape(Shape(shape)), std::move(letters)};
  }
  sum_letters(acc, out);
  if (acc.letters.size() != out.size())
    ctx.fail(Errc::invalid_argument, "output subscripts '" + out + "' name letters no operand has");
  Ints order;
  for (char c : out) order.push_back(static_cast<int64_t>(acc.letters.find(c)));
  return acc.letters == out ? acc.t : acc.t.permute(order);
}

// --- convolution and pooling (issue 18's native ops) ---

// ONNX's spatial attributes: one entry per spatial axis, defaulting to `fill`.
Ints spatial_attr(const Ctx& ctx, std::string_view name, size_t spatial, int64_t fill) {
  auto v = ctx.attr_ints(name);
  if (!v || v->empty()) return Ints(spatial, fill);
  if (v->size() != spatial)
    ctx.fail(Errc::invalid_argument, std::string(name) + " has " + std::to_string(v->size()) + " entries for " +
                                         std::to_string(spatial) + " spatial axes");
  return *v;
}

// Begin and end pads of a windowed op: explicit `pads`, or auto_pad's SAME_*
// (output extent ceil(in / stride); the odd element goes to the end for
// SAME_UPPER, to the beginning for SAME_LOWER) or VALID (none).
std::pair<Ints, Ints> window_pads(const Ctx& ctx, const Shape& x, const Ints& kernel, const Ints& stride,
                                  const Ints& dilation) {
  const size_t spatial = kernel.size();
  const std::string mode = ctx.attr_s("auto_pad", "NOTSET");
  Ints begin(spatial, 0), end(spatial, 0);
  if (mode == "NOTSET") {
    auto pads = ctx.attr_ints("pads");
    if (pads && !pads->empty()) {
      if (pads->size() != 2 * spatial)
        ctx.fail(Errc::invalid_argument, "pads has " + std::to_string(pads->size()) + " entries for " +
                                             std::to_string(spatial) + " spatial axes (want begins, then ends)");
      begin.assign(pads->begin(), pads->begin() + static_cast<int64_t>(spatial));
      end.assign(pads->begin() + static_cast<int64_t>(spatial), pads->end());
    }
    return {begin, end};
  }
  if (mode == "VALID") return {begin, end};
  if (mode != "SAME_UPPER" && mode != "SAME_LOWER") ctx.fail(Errc::invalid_argument, "auto_pad '" + mode + "'");
  for (size_t a = 0; a < spatial; ++a) {
    const int64_t in = x[a + 2];
    const int64_t out = (in + stride[a] - 1) / stride[a];
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride[a] + (kernel[a] - 1) * dilation[a] + 1 - in);
    const int64_t small = total / 2, large = total - small;
    begin[a] = mode == "SAME_UPPER" ? small : large;
    end[a] = mode == "SAME_UPPER" ? large : small;
  }
  return {begin, end};
}

// Conv/ConvTranspose of given operands with the node's attributes (the
// integer forms pass zero-point-shifted operands).
Tensor conv_of(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool transposed) {
  if (w.rank() < 3) ctx.fail(Errc::shape_mismatch, "weight must have at least 3 axes, got " + w.shape().to_string());
  const size_t spatial = w.rank() - 2;
  if (x.rank() != spatial + 2)
    ctx.fail(Errc::shape_mismatch, "input " + x.shape().to_string() + " and weight " + w.shape().to_string() +
                                       " disagree on the number of spatial axes");
  nn::ConvOptions o;
  o.stride = spatial_attr(ctx, "strides", spatial, 1);
  o.dilation = spatial_attr(ctx, "dilations", spatial, 1);
  o.groups = ctx.attr_i("group", 1);
  o.transposed = transposed;
  Ints kernel(w.shape().dims.begin() + 2, w.shape().dims.end());
  if (auto k = ctx.attr_ints("kernel_shape"); k && !k->empty() && *k != kernel)
    ctx.fail(Errc::shape_mismatch, "kernel_shape disagrees with the weight " + w.shape().to_string());
  if (!transposed) {
    std::tie(o.pad_begin, o.pad_end) = window_pads(ctx, x.shape(), kernel, o.stride, o.dilation);
    return nn::conv(x, w, b, o);
  }
  o.output_padding = spatial_attr(ctx, "output_padding", spatial, 0);
  const std::string mode = ctx.attr_s("auto_pad", "NOTSET");
  auto output_shape = ctx.attr_ints("output_shape");
  if ((output_shape && !output_shape->empty()) || mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    // ONNX: total padding = stride (in - 1) + output_padding + (k - 1) d + 1 - out.
    Ints out(spatial);
    for (size_t a = 0; a < spatial; ++a)
      out[a] = output_shape && !output_shape->empty() ? (*output_shape)[output_shape->size() - spatial + a]
                                                      : x.shape()[a + 2] * o.stride[a];
    o.pad_begin.assign(spatial, 0);
    o.pad_end.assign(spatial, 0);
    for (size_t a = 0; a < spatial; ++a) {
      int64_t total =
          o.stride[a] * (x.shape()[a + 2] - 1) + o.output_padding[a] + (kernel[a] - 1) * o.dilation[a] + 1 - out[a];
      if (total < 0) {  // the output is wider than the kernel reaches: output padding at the end
        o.output_padding[a] -= total;
        total = 0;
      }
      const int64_t small = total / 2, large = total - small;
      o.pad_begin[a] = mode == "SAME_UPPER" ? small : large;
      o.pad_end[a] = mode == "SAME_UPPER" ? large : small;
    }
  } else {
    std::tie(o.pad_begin, o.pad_end) = window_pads(ctx, x.shape(), kernel, o.stride, o.dilation);
  }
  return nn::conv(x, w, b, o);
}

Outs conv_node(Ctx& ctx, bool transposed) {
  return Outs{dev_value(conv_of(ctx, ctx.dev(0), ctx.dev(1), ctx.has(2) ? ctx.dev(2) : Tensor(), transposed))};
}

nn::PoolOptions pool_options(const Ctx& ctx, const Tensor& x, bool with_dilation) {
  auto kernel = ctx.attr_ints("kernel_shape");
  if (!kernel || kernel->empty()) ctx.fail(Errc::invalid_argument, "kernel_shape is required");
  const size_t spatial = kernel->size();
  if (x.rank() != spatial + 2)
    ctx.fail(Errc::shape_mismatch,
             "input " + x.shape().to_string() + " for a kernel of " + std::to_string(spatial) + " axes");
  nn::PoolOptions o;
  o.kernel_size = *kernel;
  o.stride = spatial_attr(ctx, "strides", spatial, 1);
  o.dilation = with_dilation ? spatial_attr(ctx, "dilations", spatial, 1) : Ints(spatial, 1);
  o.ceil_mode = ctx.attr_i("ceil_mode", 0) != 0;
  std::tie(o.pad_begin, o.pad_end) = window_pads(ctx, x.shape(), o.kernel_size, o.stride, o.dilation);
  return o;
}

// PyTorch's pools (and so ours) take pads of at most half the kernel; ONNX
// takes any. Wider pads are applied to the input first: -inf for max
// pooling; for average pooling zeros, with the divisor of
// count_include_pad=0 recovered as the pooled share of real elements.
bool pads_exceed_half(const nn::PoolOptions& o) {
  for (size_t a = 0; a < o.kernel_size.size(); ++a)
    if (o.pad_begin[a] > o.kernel_size[a] / 2 || o.pad_end[a] > o.kernel_size[a] / 2) return true;
  return false;
}

// Also where an input is shorter than its window before padding: PyTorch's
// 3-D pools (and so the op) refuse that, ONNX takes it (1-D and 2-D too).
bool pad_input_first(const nn::PoolOptions& o, const Shape& in) {
  if (pads_exceed_half(o)) return true;
  for (size_t a = 0; a < o.kernel_size.size(); ++a)
    if (in[a + 2] < (o.kernel_size[a] - 1) * o.dilation[a] + 1 && o.pad_begin[a] + o.pad_end[a] > 0) return true;
  return false;
}

Tensor pad_spatial(const Tensor& x, nn::PoolOptions& o, double value) {
  Ints before(x.rank(), 0), after(x.rank(), 0);
  for (size_t a = 0; a < o.kernel_size.size(); ++a) {
    before[a + 2] = o.pad_begin[a];
    after[a + 2] = o.pad_end[a];
  }
  o.pad_begin.assign(o.kernel_size.size(), 0);
  o.pad_end.assign(o.kernel_size.size(), 0);
  return x.pad(before, after, value);
}

// With ceil_mode, a last window that would start in the end padding is
// dropped (PyTorch's rule, and ONNX Runtime's); once wide pads became part
// of the input, the op no longer knew where the input ended and kept it,
// all padding (-inf, NaN or 0). Trims `y` to the lengths `o` (the options
// before the pads were applied) gives an input of shape `in`.
Tensor drop_padding_windows(Tensor y, const Shape& in, const nn::PoolOptions& o) {
  if (!o.ceil_mode) return y;
  for (size_t a = 0; a < o.kernel_size.size(); ++a) {
    const int64_t extent = in[a + 2], reach = (o.kernel_size[a] - 1) * o.dilation[a] + 1;
    const int64_t span = extent + o.pad_begin[a] + o.pad_end[a] - reach;
    if (span < 0) continue;
    int64_t n = (span + o.stride[a] - 1) / o.stride[a] + 1;
    if ((n - 1) * o.stride[a] >= extent + o.pad_begin[a]) --n;
    if (y.shape()[a + 2] > n) y = y.slice(static_cast<int64_t>(a + 2), Slice{0, n});
  }
  return y;
}

Outs max_pool_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  const DType dtype = x.dtype();
  // ONNX pools integers too; PyTorch 1.13 (and so the op) takes floats: f64
  // holds every u8/i32 value and i64 up to 2^53 exactly.
  if (!is_floating(dtype)) x = x.cast(DType::f64);
  auto o = pool_options(ctx, x, true);
  const bool wants_indices = ctx.node().output_size() > 1 && !ctx.node().output(1).empty();
  if (!wants_indices) {
    const auto asked = o;
    const Shape in = x.shape();
    const bool wide = pad_input_first(o, in);
    if (wide) x = pad_spatial(x, o, -std::numeric_limits<double>::infinity());
    Tensor y = nn::max_pool(x, o);
    if (wide) y = drop_padding_windows(y, in, asked);
    return Outs{dev_value(is_floating(dtype) ? y : y.cast(dtype))};
  }
  if (pads_exceed_half(o)) ctx.fail(Errc::unsupported, "Indices with pads wider than half the kernel");
  auto [values, plane_index] = nn::max_pool_with_indices(x, o);
  // ONNX indexes the whole input (row-major over N, C and the spatial axes);
  // PyTorch's indices are within each (n, c) plane.
  const auto& s = x.shape();
  int64_t plane = 1;
  for (size_t a = 2; a < s.rank(); ++a) plane *= s[a];
  if (ctx.attr_i("storage_order", 0) != 0) {
    // Column-major within the plane: the spatial coordinates recombined
    // with the first spatial axis varying fastest.
    Tensor col = zeros_like_scalar(plane_index);
    int64_t row_stride = plane, col_stride = 1;
    for (size_t a = 2; a < s.rank(); ++a) {
      row_stride /= s[a];
      Tensor coord = plane_index.floor_divide(Scalar(row_stride)).remainder(Scalar(s[a]));
      col = col.add(coord.mul(Scalar(col_stride)));
      col_stride *= s[a];
    }
    plane_index = col;
  }
  Ints base_shape(s.rank(), 1);
  base_shape[0] = s[0];
  base_shape[1] = s[1];
  Tensor base = ctx.device().arange(0, static_cast<double>(s[0] * s[1])).reshape(Shape(base_shape)).mul(Scalar(plane));
  return Outs{dev_value(is_floating(dtype) ? values : values.cast(dtype)), dev_value(plane_index.add(base))};
}

Outs avg_pool_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  auto o = pool_options(ctx, x, false);
  o.count_include_pad = ctx.attr_i("count_include_pad", 0) != 0;
  if (!pad_input_first(o, x.shape())) return Outs{dev_value(nn::avg_pool(x, o))};
  const bool include_pad = o.count_include_pad;
  auto po = o;
  Tensor padded = pad_spatial(x, po, 0);
  po.count_include_pad = true;
  Tensor sum_share = drop_padding_windows(nn::avg_pool(padded, po), x.shape(), o);
  if (include_pad) return Outs{dev_value(sum_share)};
  Tensor ones = ctx.device().full(x.shape(), 1, x.dtype());
  auto mo = o;
  Tensor real_share = drop_padding_windows(nn::avg_pool(pad_spatial(ones, mo, 0), po), x.shape(), o);
  return Outs{dev_value(sum_share.div(real_share))};
}

// --- quantization (ONNX's linear 8-bit scheme) ---
//
// Integer arithmetic runs in i32 (matmul) or f64 (conv, which takes floats
// only): every product and partial sum of 8-bit operands is an integer far
// below 2^53, so f64 holds it exactly in any summation order. Rounding is
// half to even (Tensor::round), as ONNX's numpy reference (np.rint).

// The saturation range of a quantized dtype (ONNX opset <= 17: u8, i8).
std::pair<double, double> quant_range(DType t) {
  return t == DType::i8 ? std::pair{-128.0, 127.0} : std::pair{0.0, 255.0};
}

// A zero point's dtype, which is the quantized dtype; UINT8 when absent.
DType zero_point_dtype(const Ctx& ctx, size_t input, std::string_view what) {
  if (!ctx.has(input)) return DType::u8;
  const DType t = ctx.in(input).dtype();
  if (t != DType::u8 && t != DType::i8)
    ctx.fail(Errc::dtype_mismatch, std::string(what) + " must be u8 or i8, got " + std::string(name_of(t)));
  return t;
}

void expect_quantized(const Ctx& ctx, size_t input, std::string_view what, bool i32_too = false) {
  const DType t = ctx.in(input).dtype();
  if (t != DType::u8 && t != DType::i8 && !(i32_too && t == DType::i32))
    ctx.fail(Errc::dtype_mismatch, std::string(what) + " must be u8" + (i32_too ? ", i8 or i32" : " or i8") + ", got " +
                                       std::string(name_of(t)));
}

void expect_same_dtype(const Ctx& ctx, size_t input, size_t like, std::string_view what, std::string_view of) {
  if (ctx.has(input) && ctx.in(input).dtype() != ctx.in(like).dtype())
    ctx.fail(Errc::dtype_mismatch, std::string(what) + " is " + std::string(name_of(ctx.in(input).dtype())) + ", " +
                                       std::string(of) + " is " + std::string(name_of(ctx.in(like).dtype())));
}

// A scale or zero point: per tensor (a scalar or one element) or per slice
// along `axis` (1-D of that axis's extent), shaped to broadcast against a
// tensor of rank `rank`. axis < 0: only per tensor is allowed.
Tensor quant_param(const Ctx& ctx, size_t input, std::string_view what, size_t rank, int64_t axis, int64_t extent) {
  Tensor p = ctx.dev(input);
  const Shape& s = p.shape();
  if (s.rank() <= 1 && s.numel() == 1) return p.reshape({});
  if (axis < 0 || s.rank() != 1 || s[0] != extent)
    ctx.fail(Errc::shape_mismatch,
             std::string(what) + " has shape " + s.to_string() +
                 (axis < 0 ? "; only one value (per tensor) fits here"
                           : "; want one value or " + std::to_string(extent) + " (one per slice)"));
  Ints dims(rank, 1);
  dims[static_cast<size_t>(axis)] = extent;
  return p.reshape(Shape(dims));
}

// saturate(round(v) + zero_point) as `to`; v is floating.
Tensor requantize(const Tensor& v, const Tensor& zero_point, DType to) {
  Tensor q = v.round();
  if (zero_point.defined()) q = q.add(zero_point.cast(q.dtype()));
  auto [lo, hi] = quant_range(to);
  return q.clamp(lo, hi).cast(to);
}

// The per-tensor or per-axis form of QuantizeLinear/DequantizeLinear: the
// axis (opset 13) and its extent, or -1 when the scale is one value.
std::pair<int64_t, int64_t> quant_axis(Ctx& ctx, size_t scale_input, const Shape& x) {
  if (ctx.in(scale_input).shape().numel() == 1 && ctx.in(scale_input).shape().rank() <= 1) return {-1, 1};
  if (ctx.opset() < 13) return {-1, 1};  // quant_param refuses the 1-D scale
  const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 1), x.rank());
  return {axis, x[axis]};
}

Outs quantize_linear(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  const DType xt = x.dtype();
  if (xt != DType::f32 && xt != DType::f64 && xt != DType::i32 && xt != DType::f16 && xt != DType::bf16)
    ctx.fail(Errc::dtype_mismatch, "x must be floating or i32, got " + std::string(name_of(xt)));
  const DType to = zero_point_dtype(ctx, 2, "y_zero_point");
  auto [axis, extent] = quant_axis(ctx, 1, x.shape());
  Tensor scale = quant_param(ctx, 1, "y_scale", x.rank(), axis, extent);
  Tensor zp = ctx.has(2) ? quant_param(ctx, 2, "y_zero_point", x.rank(), axis, extent) : Tensor();
  // numpy's x / y_scale: in f32 for f32 (and half) inputs, f64 for i32 or f64.
  const DType ct = xt == DType::f64 || xt == DType::i32 || scale.dtype() == DType::f64 ? DType::f64 : DType::f32;
  return Outs{dev_value(requantize(x.cast(ct).div(scale.cast(ct)), zp, to))};
}

Outs dequantize_linear(Ctx& ctx) {
  expect_quantized(ctx, 0, "x", true);
  expect_same_dtype(ctx, 2, 0, "x_zero_point", "x");
  Tensor x = ctx.dev(0);
  auto [axis, extent] = quant_axis(ctx, 1, x.shape());
  Tensor scale = quant_param(ctx, 1, "x_scale", x.rank(), axis, extent);
  if (!is_floating(scale.dtype()))
    ctx.fail(Errc::dtype_mismatch, "x_scale must be floating, got " + std::string(name_of(scale.dtype())));
  // (x - zero_point) is exact in f32 for 8-bit values; for i32 the zero
  // point is 0 and the cast rounds as numpy's astype(float32).
  const DType ct = scale.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor v = x.cast(ct);
  if (ctx.has(2)) v = v.sub(quant_param(ctx, 2, "x_zero_point", x.rank(), axis, extent).cast(ct));
  Tensor y = v.mul(scale.cast(ct));
  return Outs{dev_value(y.dtype() == scale.dtype() ? y : y.cast(scale.dtype()))};
}

// DynamicQuantizeLinear (u8): the range [min(x, 0), max(x, 0)] onto
// [0, 255], every step in x's float type as the spec's formula (and
// numpy's reference) computes it.
Outs dynamic_quantize_linear(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  if (!is_floating(x.dtype()))
    ctx.fail(Errc::dtype_mismatch, "x must be floating, got " + std::string(name_of(x.dtype())));
  if (x.numel() == 0) ctx.fail(Errc::shape_mismatch, "x is empty (no range to quantize)");
  const DType t = x.dtype();
  Tensor lo = x.min().minimum(scalar_for(t, 0)), hi = x.max().maximum(scalar_for(t, 0));
  Tensor scale = hi.sub(lo).div(scalar_for(t, 255));
  Tensor zp = requantize(lo.neg().div(scale), Tensor(), DType::u8);
  Tensor y = requantize(x.div(scale), zp, DType::u8);
  return Outs{dev_value(y), dev_value(scale), dev_value(zp)};
}

// A matmul operand's scale or zero point: per tensor, per row of `of`
// ([M] -> [M, 1], broadcasting over [..., M, K]) or per column ([N]).
Tensor matrix_param(const Ctx& ctx, size_t input, std::string_view what, const Tensor& of, bool rows) {
  const size_t r = of.rank();
  if (r < 2) return quant_param(ctx, input, what, 0, -1, 1);
  return quant_param(ctx, input, what, 2, rows ? 0 : 1, of.shape()[rows ? r - 2 : r - 1]);
}

// An 8-bit matmul operand as i32 minus its zero point: per tensor, or per
// row of A ([M] -> [M, 1]) / per column of B ([N]).
Tensor matmul_operand(Ctx& ctx, size_t input, size_t zp_input, bool rows, std::string_view name,
                      std::string_view zp_name) {
  expect_quantized(ctx, input, name);
  if (ctx.has(zp_input)) expect_same_dtype(ctx, zp_input, input, zp_name, name);
  Tensor v = ctx.dev(input).cast(DType::i32);
  if (!ctx.has(zp_input)) return v;
  return v.sub(matrix_param(ctx, zp_input, zp_name, v, rows).cast(DType::i32));
}

Outs matmul_integer(Ctx& ctx) {
  Tensor a = matmul_operand(ctx, 0, 2, true, "A", "a_zero_point");
  Tensor b = matmul_operand(ctx, 1, 3, false, "B", "b_zero_point");
  return Outs{dev_value(a.matmul(b))};
}

// (a_scale * b_scale / y_scale) in the scales' float type, applied to the
// exact i32 product in f64: numpy's reference (an i32 array times an f32
// one is f64) and the spec's order.
Tensor rescale(const Tensor& acc, const Tensor& in_scale, const Tensor& w_scale, const Tensor& y_scale) {
  Tensor m = in_scale.mul(w_scale).div(y_scale);
  return acc.cast(DType::f64).mul(m.cast(DType::f64));
}

void expect_float_scale(const Ctx& ctx, size_t input, std::string_view what) {
  if (!is_floating(ctx.in(input).dtype()))
    ctx.fail(Errc::dtype_mismatch,
             std::string(what) + " must be floating, got " + std::string(name_of(ctx.in(input).dtype())));
}

// QLinearMatMul and QLinearConv share their inputs' layout: the two
// operands' scales at 1 and 4, the output's scale at 6 and zero point at 7.
// Checks the scales; returns the output's dtype (the zero point's).
DType qlinear_output_dtype(const Ctx& ctx, std::string_view lhs_scale, std::string_view rhs_scale) {
  expect_float_scale(ctx, 1, lhs_scale);
  expect_float_scale(ctx, 4, rhs_scale);
  expect_float_scale(ctx, 6, "y_scale");
  return zero_point_dtype(ctx, 7, "y_zero_point");
}

Outs qlinear_matmul(Ctx& ctx) {
  const DType to = qlinear_output_dtype(ctx, "a_scale", "b_scale");
  Tensor a = matmul_operand(ctx, 0, 2, true, "a", "a_zero_point");
  Tensor b = matmul_operand(ctx, 3, 5, false, "b", "b_zero_point");
  Tensor acc = a.matmul(b);
  Tensor a_scale = matrix_param(ctx, 1, "a_scale", a, true);
  Tensor b_scale = matrix_param(ctx, 4, "b_scale", b, false);
  Tensor y_scale = matrix_param(ctx, 6, "y_scale", acc, true);
  Tensor zp = ctx.has(7) ? matrix_param(ctx, 7, "y_zero_point", acc, true) : Tensor();
  return Outs{dev_value(requantize(rescale(acc, a_scale, b_scale, y_scale), zp, to))};
}

// A conv operand as f64 minus its zero point: x per tensor only; w per
// tensor or per output channel ([M] -> [M, 1, ...]).
Tensor conv_operand(Ctx& ctx, size_t input, size_t zp_input, bool per_channel, std::string_view name,
                    std::string_view zp_name) {
  expect_quantized(ctx, input, name);
  if (ctx.has(zp_input)) expect_same_dtype(ctx, zp_input, input, zp_name, name);
  Tensor v = ctx.dev(input).cast(DType::f64);
  if (!ctx.has(zp_input)) return v;
  const int64_t m = v.rank() > 0 ? v.shape()[0] : 1;
  Tensor zp = quant_param(ctx, zp_input, zp_name, v.rank(), per_channel ? 0 : -1, m);
  return v.sub(zp.cast(DType::f64));
}

Outs conv_integer(Ctx& ctx) {
  Tensor x = conv_operand(ctx, 0, 2, false, "x", "x_zero_point");
  Tensor w = conv_operand(ctx, 1, 3, true, "w", "w_zero_point");
  return Outs{dev_value(conv_of(ctx, x, w, Tensor(), false).cast(DType::i32))};
}

Outs qlinear_conv(Ctx& ctx) {
  const DType to = qlinear_output_dtype(ctx, "x_scale", "w_scale");
  Tensor x = conv_operand(ctx, 0, 2, false, "x", "x_zero_point");
  Tensor w = conv_operand(ctx, 3, 5, true, "w", "w_zero_point");
  Tensor b;
  if (ctx.has(8)) {
    if (ctx.in(8).dtype() != DType::i32)
      ctx.fail(Errc::dtype_mismatch, "B must be i32, got " + std::string(name_of(ctx.in(8).dtype())));
    b = ctx.dev(8).cast(DType::f64);
  }
  Tensor acc = conv_of(ctx, x, w, b, false);
  // Scales per tensor, w_scale also per output channel (axis 1 of y).
  const int64_t m = w.shape()[0];
  Tensor x_scale = quant_param(ctx, 1, "x_scale", acc.rank(), -1, 1);
  Tensor w_scale = quant_param(ctx, 4, "w_scale", acc.rank(), 1, m);
  Tensor y_scale = quant_param(ctx, 6, "y_scale", acc.rank(), -1, 1);
  Tensor zp = ctx.has(7) ? quant_param(ctx, 7, "y_zero_point", acc.rank(), -1, 1) : Tensor();
  return Outs{dev_value(requantize(rescale(acc, x_scale, w_scale, y_scale), zp, to))};
}

// LRN: x / (bias + alpha / size * sum of x^2 over the channel window)^beta,
// the window [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]: the
// squares padded with zeros on axis 1, summed over `size` shifted slices.
Outs lrn_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  if (!is_floating(x.dtype()))
    ctx.fail(Errc::dtype_mismatch, "x must be floating, got " + std::string(name_of(x.dtype())));
  if (x.rank() < 2) ctx.fail(Errc::shape_mismatch, "x must be [N, C, ...], got " + x.shape().to_string());
  const int64_t size = ctx.attr_i("size", 0);
  if (size < 1) ctx.fail(Errc::invalid_argument, "size must be at least 1, got " + std::to_string(size));
  const DType t = x.dtype();
  const int64_t c = x.shape()[1];
  Ints before(x.rank(), 0), after(x.rank(), 0);
  before[1] = (size - 1) / 2;
  after[1] = size - 1 - before[1];
  Tensor sq = x.mul(x).pad(before, after);
  Tensor sum = sq.slice(1, Slice{0, c});
  for (int64_t k = 1; k < size; ++k) sum = sum.add(sq.slice(1, Slice{k, k + c}));
  const double alpha = ctx.attr_f("alpha", 1e-4f), beta = ctx.attr_f("beta", 0.75f), bias = ctx.attr_f("bias", 1.0f);
  Tensor denom =
      sum.mul(scalar_for(t, alpha / static_cast<double>(size))).add(scalar_for(t, bias)).pow(scalar_for(t, beta));
  return Outs{dev_value(x.div(denom))};
}

// ReverseSequence: along the time axis, batch entry b reverses its first
// sequence_lens[b] steps; one gather with the source step of every
// (time, batch) position, broadcast over the remaining axes.
Outs reverse_sequence_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  const int64_t batch_axis = ctx.attr_i("batch_axis", 1), time_axis = ctx.attr_i("time_axis", 0);
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
    ctx.fail(Errc::invalid_argument, "batch_axis " + std::to_string(batch_axis) + " and time_axis " +
                                         std::to_string(time_axis) + " (one must be 0, the other 1)");
  if (x.rank() < 2) ctx.fail(Errc::shape_mismatch, "input must have at least 2 axes, got " + x.shape().to_string());
  const int64_t steps = x.shape()[time_axis], batch = x.shape()[batch_axis];
  Tensor lens = ctx.dev(1);
  if (lens.shape() != Shape{batch})
    ctx.fail(Errc::shape_mismatch,
             "sequence_lens has shape " + lens.shape().to_string() + ", want [" + std::to_string(batch) + "]");
  Ints tshape(x.rank(), 1), bshape(x.rank(), 1);
  tshape[time_axis] = steps;
  bshape[batch_axis] = batch;
  Tensor t = ctx.device().arange(0, static_cast<double>(steps)).reshape(Shape(tshape));
  Tensor len = lens.cast(DType::i64).clamp(0, static_cast<double>(steps)).reshape(Shape(bshape));
  Tensor src = where(t.lt(len), len.sub(Scalar(int64_t{1})).sub(t), t);
  Ints full(x.shape().dims);
  return Outs{dev_value(x.gather(time_axis, src.expand(Shape(full))))};
}

// MaxUnpool: values scattered to their flat indices in the unpooled shape
// ((in - 1) * stride - pads + kernel). With output_shape, ONNX's test case
// keeps each index's coordinates in that inferred shape and pads the
// output at the end of each axis up to the requested extents.
Outs max_unpool_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  auto kernel = ctx.attr_ints("kernel_shape");
  if (!kernel || kernel->empty()) ctx.fail(Errc::invalid_argument, "kernel_shape is required");
  const size_t spatial = kernel->size();
  if (x.rank() != spatial + 2)
    ctx.fail(Errc::shape_mismatch,
             "input " + x.shape().to_string() + " for a kernel of " + std::to_string(spatial) + " axes");
  const Ints stride = spatial_attr(ctx, "strides", spatial, 1);
  const Ints pads = ctx.attr_ints("pads").value_or(Ints(2 * spatial, 0));
  if (pads.size() != 2 * spatial)
    ctx.fail(Errc::invalid_argument,
             "pads has " + std::to_string(pads.size()) + " entries for " + std::to_string(spatial) + " spatial axes");
  if (ctx.in(1).shape() != x.shape())
    ctx.fail(Errc::shape_mismatch, "indices " + ctx.in(1).shape().to_string() + " for input " + x.shape().to_string());
  Ints inferred{x.shape()[0], x.shape()[1]};
  for (size_t a = 0; a < spatial; ++a)
    inferred.push_back((x.shape()[a + 2] - 1) * stride[a] - pads[a] - pads[a + spatial] + (*kernel)[a]);
  const Shape shape(inferred);
  Tensor idx = ctx.dev(1).cast(DType::i64).flatten();
  Tensor y = ctx.device().zeros({shape.numel()}, x.dtype()).scatter(0, idx, x.flatten()).reshape(shape);
  if (!ctx.has(2) || ctx.in(2).shape().numel() == 0) return Outs{dev_value(y)};
  const Ints want = ctx.ints(2);
  if (want.size() != inferred.size())
    ctx.fail(Errc::shape_mismatch, "output_shape has " + std::to_string(want.size()) + " entries for rank " +
                                       std::to_string(inferred.size()));
  Ints before(want.size(), 0), after(want.size(), 0);
  for (size_t a = 0; a < want.size(); ++a) {
    if (want[a] < inferred[a] || (a < 2 && want[a] != inferred[a]))
      ctx.fail(Errc::shape_mismatch,
               "output_shape " + Shape(want).to_string() + " is smaller than the unpooled " + shape.to_string());
    after[a] = want[a] - inferred[a];
  }
  return Outs{dev_value(y.pad(before, after))};
}

// LpPool: (sum over the window of |x|^p)^(1/p); the window sum is the
// average pool (zero pads counted) times the kernel's element count.
Outs lp_pool_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  if (!is_floating(x.dtype()))
    ctx.fail(Errc::dtype_mismatch, "x must be floating, got " + std::string(name_of(x.dtype())));
  auto o = pool_options(ctx, x, false);
  const double p = static_cast<double>(ctx.attr_i("p", 2));
  const DType t = x.dtype();
  Tensor powed = p == 1 ? x.abs() : p == 2 ? x.mul(x) : x.abs().pow(scalar_for(t, p));
  if (pad_input_first(o, x.shape())) powed = pad_spatial(powed, o, 0);
  o.count_include_pad = true;
  int64_t window = 1;
  for (auto k : o.kernel_size) window *= k;
  Tensor sum = nn::avg_pool(powed, o).mul(scalar_for(t, static_cast<double>(window)));
  if (p == 1) return Outs{dev_value(sum)};
  return Outs{dev_value(p == 2 ? sum.sqrt() : sum.pow(scalar_for(t, 1.0 / p)))};
}

// Det: Gaussian elimination with partial pivoting over the batch at once,
// unrolled over the (static) matrix extent: the product of the pivots,
// negated for each row swap.
Outs det_node(Ctx& ctx) {
  Tensor a = ctx.dev(0);
  const DType t = a.dtype();
  if (!is_floating(t)) ctx.fail(Errc::dtype_mismatch, "x must be floating, got " + std::string(name_of(t)));
  const Shape& s = a.shape();
  if (s.rank() < 2 || s[s.rank() - 1] != s[s.rank() - 2])
    ctx.fail(Errc::shape_mismatch, "x must be [..., M, M], got " + s.to_string());
  const int64_t n = s[s.rank() - 1];
  const Shape batch_shape(Ints(s.dims.begin(), s.dims.end() - 2));
  const int64_t batch = batch_shape.numel();
  const Device& d = ctx.device();
  a = a.reshape({batch, n, n});
  Tensor det = d.full({batch}, 1, t);
  Tensor rows = d.arange(0, static_cast<double>(n)).reshape({1, n});
  Tensor zero = d.zeros({}, t);
  for (int64_t k = 0; k < n; ++k) {
    Tensor col = a.slice(1, Slice{k, n}).slice(2, Slice{k, k + 1}).reshape({batch, n - k});
    Tensor p = col.abs().argmax(1).add(Scalar(k)).reshape({batch, 1});
    // Swap rows k and p of each matrix.
    Tensor kk = d.full({}, static_cast<double>(k), DType::i64);
    Tensor perm = where(rows.eq(Scalar(k)), p, where(rows.eq(p), kk, rows));
    a = a.gather(1, perm.reshape({batch, n, 1}).expand({batch, n, n}));
    det = where(p.reshape({batch}).ne(Scalar(k)), det.neg(), det);
    Tensor pivot = a.slice(1, Slice{k, k + 1}).slice(2, Slice{k, k + 1});  // [batch, 1, 1]
    det = det.mul(pivot.reshape({batch}));
    if (k + 1 == n) break;
    // A zero pivot means a zero column below it: nothing to eliminate.
    Tensor below = a.slice(1, Slice{k + 1, n});
    Tensor f = where(pivot.eq(Scalar(0.0)), zero, below.slice(2, Slice{k, k + 1}).div(pivot));
    below = below.sub(f.mul(a.slice(1, Slice{k, k + 1})));
    a = cat({a.slice(1, Slice{0, k + 1}), below}, 1);
  }
  return Outs{dev_value(det.reshape(batch_shape))};
}

Tensor scatter_nd(Ctx& ctx, const Tensor& data, Tensor idx, const Tensor& updates) {
  const auto& ds = data.shape();
  const auto& is = idx.shape();
  if (is.rank() < 1) ctx.fail(Errc::shape_mismatch, "indices must have at least one axis");
  const auto k = static_cast<size_t>(is[is.rank() - 1]);
  if (k > ds.rank())
    ctx.fail(Errc::shape_mismatch, "index tuples of " + std::to_string(k) + " entries for data " + ds.to_string());
  if (idx.dtype() != DType::i64) idx = idx.cast(DType::i64);
  Ints extents(ds.dims.begin(), ds.dims.begin() + static_cast<int64_t>(k));
  Ints strides(k, 1);
  for (size_t j = k; j-- > 1;) strides[j - 1] = strides[j] * extents[j];
  int64_t rows = 1;
  for (auto e : extents) rows *= e;
  Tensor ext = ctx.device().from_data(host_ints(extents, Shape{static_cast<int64_t>(k)}));
  Tensor fixed = where(idx.lt(Scalar(int64_t{0})), idx.add(ext), idx);
  Tensor bad = fixed.lt(Scalar(int64_t{0})).logical_or(fixed.ge(ext)).any({-1});
  Tensor lin = fixed.mul(ctx.device().from_data(host_ints(strides, Shape{static_cast<int64_t>(k)}))).sum({-1});
  // A component out of range makes the row index `rows` (out of range too),
  // so the scatter fails instead of writing another row.
  lin = where(bad, ctx.device().full({}, static_cast<double>(rows), DType::i64), lin).flatten();
  Ints rest(ds.dims.begin() + static_cast<int64_t>(k), ds.dims.end());
  int64_t row = 1;
  for (auto e : rest) row *= e;
  const int64_t m = lin.shape()[0];
  Tensor flat = data.reshape({rows, row});
  Tensor upd = updates.reshape({m, row});
  Tensor index = lin.reshape({m, 1}).expand({m, row});
  const std::string reduction = ctx.attr_s("reduction", "none");
  Tensor out = reduction == "none"  ? flat.scatter(0, index, upd)
               : reduction == "add" ? flat.scatter_add(0, index, upd)
                                    : flat.scatter_reduce(0, index, upd, "prod");
  return out.reshape(ds);
}

// BatchNormalization: inference, or (opset 14+) training_mode=1 with its
// batch statistics and the updated running mean and variance; the opset-6/9
// training form (is_test=0, five outputs with the saved statistics) is not.
std::string no_training_outputs(const ::onnx::NodeProto& n, int64_t) {
  bool training = false;
  for (const auto& a : n.attribute()) {
    if (a.name() == "training_mode" && a.i() != 0) training = true;
    if (a.name() == "spatial" && a.i() != 1) return "spatial=0";
    if (a.name() == "is_test" && a.i() == 0) return "is_test=0 (training statistics of opset 6-9)";
  }
  if (!training && n.output_size() > 1) return "the running mean/variance outputs without training_mode=1";
  if (n.output_size() > 3) return "more than three outputs (the saved statistics of opset 6-9)";
  return "";
}

// x - mean and the biased variance over `axes` (kept): where every composed
// normalisation starts.
struct Moments {
  Tensor mean, centred, var;
};
Moments moments(const Tensor& x, const Ints& axes) {
  Tensor mean = x.mean(axes, true);
  Tensor d = x.sub(mean);
  Tensor var = d.mul(d).mean(axes, true);
  return {std::move(mean), std::move(d), std::move(var)};
}

// BatchNormalization with training_mode=1: normalised by the batch's own
// mean and (biased) variance over every axis but the channels, and the
// running statistics moved toward them by 1 - momentum (ONNX 14's formula).
Outs batch_norm_training(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  const size_t r = x.rank();
  if (r < 2)
    ctx.fail(Errc::unsupported, "training_mode=1 on an input of rank " + std::to_string(r) + " (needs [N, C, ...])");
  Ints axes{0};
  for (size_t a = 2; a < r; ++a) axes.push_back(static_cast<int64_t>(a));
  const auto [mean, d, var] = moments(x, axes);
  const double eps = ctx.attr_f("epsilon", 1e-5f), momentum = ctx.attr_f("momentum", 0.9f);
  Tensor y = d.mul(var.add(scalar_for(x.dtype(), eps)).rsqrt())
                 .mul(per_channel(ctx.dev(1), r))
                 .add(per_channel(ctx.dev(2), r));
  const Shape channels{x.shape()[1]};
  auto running = [&](const Tensor& before, const Tensor& batch) {
    Tensor now = batch.reshape(channels).cast(before.dtype());
    return before.mul(scalar_for(before.dtype(), momentum)).add(now.mul(scalar_for(before.dtype(), 1.0 - momentum)));
  };
  return Outs{dev_value(y), dev_value(running(ctx.dev(3), mean)), dev_value(running(ctx.dev(4), var))};
}

// NegativeLogLikelihoodLoss over log-probabilities [N, C, d...] and targets
// [N, d...]: gather the target class, weight, ignore, reduce.
Tensor nll_loss(Ctx& ctx, const Tensor& logp, Tensor target, const Tensor& weight) {
  const int64_t ignore = ctx.attr_i("ignore_index", std::numeric_limits<int64_t>::min());
  target = target.cast(DType::i64);
  Tensor keep;
  if (ignore != std::numeric_limits<int64_t>::min()) {
    keep = target.ne(Scalar(ignore));
    target = where(keep, target, ctx.device().zeros({}, DType::i64));
  }
  Tensor picked = logp.gather(1, target.unsqueeze(1)).squeeze(1).neg();
  Tensor w;
  if (weight.defined()) w = weight.index_select(0, target.reshape({-1})).reshape(target.shape());
  if (keep.defined()) {
    Tensor k = keep.cast(logp.dtype());
    w = w.defined() ? w.mul(k) : k;
  }
  if (w.defined()) picked = picked.mul(w);
  const std::string reduction = ctx.attr_s("reduction", "mean");
  if (reduction == "none") return picked;
  if (reduction == "sum") return picked.sum();
  if (w.defined()) return picked.sum().div(w.sum());
  return picked.mean();
}

std::string known_reduction(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute())
    if (a.name() == "reduction" && a.s() != "none" && a.s() != "sum" && a.s() != "mean")
      return "reduction='" + a.s() + "'";
  return "";
}

// --- recurrent layers (RNN, GRU, LSTM), unrolled over the sequence ---

// x / (1 + |x|).
// The hyperbolic functions and their inverses, which the op set composes:
// in f64 (a narrower input is widened and the result rounded once), by
// formulas that neither overflow before the result does nor cancel near
// their zeros: sinh(89) is 2.2e38 in f32, where exp(89) overflowed, and
// asinh(1e-7) is 1e-7, where log(x + sqrt(x^2 + 1)) gave 1.19e-7.
constexpr double kLn2 = 0.693147180559945309417;
constexpr double kHuge = 268435456.0;  // 2^28: past it, sqrt(x^2 +- 1) is x in f64

Tensor sinh_of(const Tensor& x) {
  const Tensor ax = x.abs();
  // Near 0 by expm1 (no cancellation); past it by exp(|x| - ln 2), which is
  // e^|x| / 2 without overflowing first.
  const Tensor near = x.expm1().sub(x.neg().expm1()).mul(Scalar(0.5));
  const Tensor far = ax.sub(Scalar(kLn2)).exp().sub(ax.neg().sub(Scalar(kLn2)).exp()).mul(x.sign());
  return where(ax.lt(Scalar(1.0)), near, far);
}

Tensor cosh_of(const Tensor& x) {
  const Tensor ax = x.abs();
  return ax.sub(Scalar(kLn2)).exp().add(ax.neg().sub(Scalar(kLn2)).exp());
}

Tensor asinh_of(const Tensor& x) {
  const Tensor ax = x.abs();
  // log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) is log(|x| + sqrt(x^2 + 1)) without
  // the cancellation near 0; a huge |x| takes log(|x|) + ln 2.
  const Tensor sq = ax.mul(ax);
  const Tensor small = ax.add(sq.div(sq.add(Scalar(1.0)).sqrt().add(Scalar(1.0)))).log1p();
  const Tensor r = where(ax.gt(Scalar(kHuge)), ax.log().add(Scalar(kLn2)), small);
  return where(x.lt(Scalar(0.0)), r.neg(), r);
}

Tensor acosh_of(const Tensor& x) {
  // log1p(t + sqrt(2t + t^2)) with t = x - 1: exact near 1; NaN below it.
  const Tensor t = x.sub(Scalar(1.0));
  const Tensor near = t.add(t.mul(t).add(t.mul(Scalar(2.0))).sqrt()).log1p();
  return where(x.gt(Scalar(kHuge)), x.log().add(Scalar(kLn2)), near);
}

template <class F>
Tensor hyperbolic(const Tensor& x, F f) {
  if (x.dtype() == DType::f64) return f(x);
  return f(x.cast(DType::f64)).cast(x.dtype());
}

Tensor softsign(const Tensor& x) { return x.div(x.abs().add(scalar_for(x.dtype(), 1))); }
// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
Tensor softplus(const Tensor& x) { return x.relu().add(x.abs().neg().exp().log1p()); }

// The activations with an alpha (and beta), for the ops of those names and
// for a recurrent op's `activations` alike.
Tensor leaky_relu(const Tensor& x, double alpha) {
  return where(x.lt(Scalar(0.0)), x.mul(scalar_for(x.dtype(), alpha)), x);
}
Tensor elu(const Tensor& x, double alpha) {
  return where(x.lt(Scalar(0.0)), x.expm1().mul(scalar_for(x.dtype(), alpha)), x);
}
Tensor thresholded_relu(const Tensor& x, double alpha) { return where(x.gt(Scalar(alpha)), x, zeros_like_scalar(x)); }
Tensor hard_sigmoid(const Tensor& x, double alpha, double beta) {
  return x.mul(scalar_for(x.dtype(), alpha)).add(scalar_for(x.dtype(), beta)).clamp(0, 1);
}

// The activations a recurrent op's `activations` may name (PyTorch exports
// RNN's nonlinearity='relu' as Relu), case-insensitively as ONNX Runtime
// reads them, with whether each takes an alpha and a beta from the node's
// activation_alpha / activation_beta and its defaults when those lists run
// out: its ONNX operator's, as the spec says (ONNX Runtime has 0 for the
// three without an entry in its table: Affine, ThresholdedRelu and
// ScaledTanh, which makes an Affine or a ScaledTanh without values 0).
struct RnnActivationKind {
  const char* name;
  bool takes_alpha, takes_beta;
  float alpha, beta;
};
constexpr std::array<RnnActivationKind, 11> rnn_activation_kinds{{{"tanh", false, false, 0, 0},
                                                                  {"sigmoid", false, false, 0, 0},
                                                                  {"relu", false, false, 0, 0},
                                                                  {"softsign", false, false, 0, 0},
                                                                  {"softplus", false, false, 0, 0},
                                                                  {"affine", true, true, 1.0f, 0},
                                                                  {"leakyrelu", true, false, 0.01f, 0},
                                                                  {"thresholdedrelu", true, false, 1.0f, 0},
                                                                  {"scaledtanh", true, true, 1.0f, 1.0f},
                                                                  {"hardsigmoid", true, true, 0.2f, 0.5f},
                                                                  {"elu", true, false, 1.0f, 0}}};

const RnnActivationKind* rnn_activation_kind(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& k : rnn_activation_kinds)
    if (name == k.name) return &k;
  return nullptr;
}

using RnnActivation = std::function<Tensor(const Tensor&)>;

RnnActivation rnn_activation(const RnnActivationKind& kind, double alpha, double beta) {
  const std::string_view name = kind.name;
  auto times = [](const Tensor& x, double k) { return x.mul(scalar_for(x.dtype(), k)); };
  if (name == "tanh") return [](const Tensor& x) { return x.tanh(); };
  if (name == "sigmoid") return [](const Tensor& x) { return x.sigmoid(); };
  if (name == "relu") return [](const Tensor& x) { return x.relu(); };
  if (name == "softsign") return softsign;
  if (name == "softplus") return softplus;
  if (name == "affine") return [=](const Tensor& x) { return times(x, alpha).add(scalar_for(x.dtype(), beta)); };
  if (name == "leakyrelu") return [=](const Tensor& x) { return leaky_relu(x, alpha); };
  if (name == "thresholdedrelu") return [=](const Tensor& x) { return thresholded_relu(x, alpha); };
  if (name == "scaledtanh") return [=](const Tensor& x) { return times(times(x, beta).tanh(), alpha); };
  if (name == "hardsigmoid") return [=](const Tensor& x) { return hard_sigmoid(x, alpha, beta); };
  return [=](const Tensor& x) { return elu(x, alpha); };
}

// The node's activations in its list's order (both directions), each with
// the alpha and beta it consumes from activation_alpha / activation_beta
// in that order, as ONNX Runtime reads them; `names` as the node gives
// them or the op's defaults per direction.
std::vector<RnnActivation> rnn_activations(const std::vector<std::string>& names, const std::vector<float>& alphas,
                                           const std::vector<float>& betas) {
  std::vector<RnnActivation> out;
  size_t next_alpha = 0, next_beta = 0;
  for (const auto& name : names) {
    const auto* kind = rnn_activation_kind(name);
    double alpha = kind->alpha, beta = kind->beta;
    if (kind->takes_alpha && next_alpha < alphas.size()) alpha = alphas[next_alpha++];
    if (kind->takes_beta && next_beta < betas.size()) beta = betas[next_beta++];
    out.push_back(rnn_activation(*kind, alpha, beta));
  }
  return out;
}

// f (gates), g (cell input) and h (cell output) as ONNX names them: RNN
// has f, GRU f and g, LSTM all three, per direction.
const std::vector<std::string>& rnn_default_activations(const std::string& op) {
  static const std::map<std::string, std::vector<std::string>> defaults = {
      {"RNN", {"Tanh"}}, {"GRU", {"Sigmoid", "Tanh"}}, {"LSTM", {"Sigmoid", "Tanh", "Tanh"}}};
  return defaults.at(op);
}

std::string rnn_check(const ::onnx::NodeProto& n, int64_t) {
  std::string direction = "forward";
  for (const auto& a : n.attribute())
    if (a.name() == "direction") direction = a.s();
  const size_t directions = direction == "bidirectional" ? 2 : 1;
  for (const auto& a : n.attribute()) {
    if (a.name() == "clip" && !(a.f() > 0)) return "clip=" + std::to_string(a.f()) + " (a clip must be positive)";
    if (a.name() == "activations") {
      const size_t want = rnn_default_activations(n.op_type()).size() * directions;
      if (static_cast<size_t>(a.strings_size()) != want)
        return "activations lists " + std::to_string(a.strings_size()) + " functions; direction '" + direction +
               "' takes " + std::to_string(want);
      for (const auto& name : a.strings())
        if (rnn_activation_kind(name) == nullptr)
          return "activation " + name +
                 " (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign "
                 "and Softplus are supported)";
    }
  }
  return "";
}

// One direction over X [seq, batch, in]; returns Y [seq, batch, hidden], H, C.
struct RnnState {
  Tensor y, h, c;
};

RnnState rnn_direction(Ctx& ctx, const std::string& op, const Tensor& x, int64_t d, int64_t hidden, bool reverse) {
  const int64_t gates = op == "RNN" ? 1 : op == "GRU" ? 3 : 4;
  // This direction's f, g, h (the defaults where the node names none).
  const size_t per_direction = rnn_default_activations(op).size();
  std::vector<std::string> names;
  if (auto a = ctx.attr("activations"); a && a->strings_size() > 0)
    names.assign(a->strings().begin(), a->strings().end());
  else
    for (int64_t k = 0; k <= d; ++k)
      for (const auto& name : rnn_default_activations(op)) names.push_back(name);
  auto floats = [&](const char* attr) {
    std::vector<float> v;
    if (auto a = ctx.attr(attr)) v.assign(a->floats().begin(), a->floats().end());
    return v;
  };
  const auto acts = rnn_activations(names, floats("activation_alpha"), floats("activation_beta"));
  const size_t first = static_cast<size_t>(d) * per_direction;
  // `clip` bounds every activation's input to [-clip, clip] (ONNX's cell
  // clipping; ONNX Runtime clips the cell state before h too).
  const RnnActivation f_act = acts[first];
  const RnnActivation g_act = per_direction > 1 ? acts[first + 1] : nullptr;
  const RnnActivation h_raw = per_direction > 2 ? acts[first + 2] : nullptr;
  const std::optional<double> clip = ctx.attr("clip") ? std::optional<double>(ctx.attr_f("clip", 0)) : std::nullopt;
  auto clipped = [clip](const RnnActivation& act) {
    return [act, clip](const Tensor& t) { return act(clip ? t.clamp(-*clip, *clip) : t); };
  };
  const auto f = clipped(f_act);
  const auto g = clipped(g_act);
  const auto h_act = clipped(h_raw);
  const bool input_forget = ctx.attr_i("input_forget", 0) != 0;
  const int64_t seq = x.shape()[0], batch = x.shape()[1];
  Tensor w = ctx.dev(1).slice(0, Slice{d, d + 1}).reshape({gates * hidden, -1});
  Tensor r = ctx.dev(2).slice(0, Slice{d, d + 1}).reshape({gates * hidden, hidden});
  Tensor wb, rb;
  if (ctx.has(3)) {
    Tensor b = ctx.dev(3).slice(0, Slice{d, d + 1}).reshape({2 * gates * hidden});
    wb = b.slice(0, Slice{0, gates * hidden});
    rb = b.slice(0, Slice{gates * hidden, 2 * gates * hidden});
  } else {
    wb = ctx.device().zeros({gates * hidden}, x.dtype());
    rb = wb;
  }
  // sequence_lens: entry b takes steps [0, lens[b]) (a reverse direction
  // starts at lens[b] - 1); past them its state stays and its Y is 0. Each
  // step then keeps the new state only where it is valid, through a
  // [batch, 1] mask; lengths that all equal the sequence need none.
  std::vector<int64_t> lens;
  if (ctx.has(4)) {
    lens = ctx.ints(4);
    if (static_cast<int64_t>(lens.size()) != batch)
      ctx.fail(Errc::invalid_argument,
               "sequence_lens has " + std::to_string(lens.size()) + " entries for a batch of " + std::to_string(batch));
    for (size_t b = 0; b < lens.size(); ++b)
      if (lens[b] < 0 || lens[b] > seq)
        ctx.fail(Errc::invalid_argument, "sequence_lens[" + std::to_string(b) + "] is " + std::to_string(lens[b]) +
                                             ", outside [0, " + std::to_string(seq) + "] (the sequence's length)");
    if (std::all_of(lens.begin(), lens.end(), [&](int64_t l) { return l == seq; })) lens.clear();
  }
  // Masks by how many entries are still valid at a step (lens sorted
  // or not, the set of valid entries changes at most batch times).
  std::map<Ints, Tensor> masks;
  auto valid_at = [&](int64_t t) -> Tensor {
    Ints valid(lens.size());
    for (size_t b = 0; b < lens.size(); ++b) valid[b] = t < lens[b] ? 1 : 0;
    auto [it, fresh] = masks.try_emplace(valid);
    if (fresh) it->second = ctx.device().from_data(host_ints(valid, Shape{batch, 1}, DType::boolean));
    return it->second;
  };
  // initial_h and initial_c: [directions, batch, hidden], or with
  // layout=1 [batch, directions, hidden] (as X and the outputs are then).
  const bool batch_first = ctx.attr_i("layout", 0) != 0;
  const int64_t directions = ctx.attr_s("direction", "forward") == "bidirectional" ? 2 : 1;
  auto initial = [&](size_t input) {
    if (!ctx.has(input)) return ctx.device().zeros({batch, hidden}, x.dtype());
    const Tensor given = ctx.dev(input);
    const Shape want = batch_first ? Shape{batch, directions, hidden} : Shape{directions, batch, hidden};
    if (given.shape() != want)
      ctx.fail(Errc::shape_mismatch,
               std::string(input == 5 ? "initial_h" : "initial_c") + " has shape " + given.shape().to_string() +
                   ", want " + want.to_string() +
                   (batch_first ? " ([batch, directions, hidden], layout=1)" : " ([directions, batch, hidden])"));
    return given.slice(batch_first ? 1 : 0, Slice{d, d + 1}).reshape({batch, hidden});
  };
  Tensor h = initial(5), c = op == "LSTM" ? initial(6) : Tensor();
  Tensor p;
  if (op == "LSTM" && ctx.has(7)) p = ctx.dev(7).slice(0, Slice{d, d + 1}).reshape({3 * hidden});
  auto gate = [&](const Tensor& t, int64_t k) { return t.slice(1, Slice{k * hidden, (k + 1) * hidden}); };
  auto vec = [&](const Tensor& t, int64_t k) { return t.slice(0, Slice{k * hidden, (k + 1) * hidden}); };
  // Input projections of every step at once.
  Tensor xw = x.matmul(w.mT()).add(wb);
  const bool lbr = ctx.attr_i("linear_before_reset", 0) != 0;
  std::vector<Tensor> ys(static_cast<size_t>(seq));
  const Tensor zero = zeros_like_scalar(x);
  for (int64_t step = 0; step < seq; ++step) {
    const int64_t t = reverse ? seq - 1 - step : step;
    Tensor xt = xw.slice(0, Slice{t, t + 1}).reshape({batch, gates * hidden});
    const Tensor h_before = h, c_before = c;
    if (op == "RNN") {
      h = f(xt.add(h.matmul(r.mT())).add(rb));
    } else if (op == "GRU") {
      Tensor rz = h.matmul(r.slice(0, Slice{0, 2 * hidden}).mT()).add(rb.slice(0, Slice{0, 2 * hidden}));
      Tensor z = f(gate(xt, 0).add(gate(rz, 0)));
      Tensor rr = f(gate(xt, 1).add(gate(rz, 1)));
      Tensor r_h = r.slice(0, Slice{2 * hidden, 3 * hidden});
      Tensor hh = lbr ? g(gate(xt, 2).add(rr.mul(h.matmul(r_h.mT()).add(vec(rb, 2)))))
                      : g(gate(xt, 2).add(rr.mul(h).matmul(r_h.mT())).add(vec(rb, 2)));
      h = z.neg().add(Scalar(1.0)).mul(hh).add(z.mul(h));
    } else {  // LSTM, gates i, o, f, c; peepholes i, o, f
      Tensor all = xt.add(h.matmul(r.mT())).add(rb);
      Tensor gi = gate(all, 0), go = gate(all, 1), gf = gate(all, 2), gc = gate(all, 3);
      if (p.defined()) {
        gi = gi.add(vec(p, 0).mul(c));
        gf = gf.add(vec(p, 2).mul(c));
      }
      // input_forget couples the gates: f = 1 - i.
      Tensor i = f(gi), forget = input_forget ? i.neg().add(Scalar(1.0)) : f(gf);
      c = forget.mul(c).add(i.mul(g(gc)));
      if (p.defined()) go = go.add(vec(p, 1).mul(c));
      h = f(go).mul(h_act(c));
    }
    if (!lens.empty()) {
      const Tensor valid = valid_at(t);
      ys[static_cast<size_t>(t)] = where(valid, h, zero);
      h = where(valid, h, h_before);
      if (c.defined()) c = where(valid, c, c_before);
      continue;
    }
    ys[static_cast<size_t>(t)] = h;
  }
  return {stack(ys, 0), h, c};
}

OpSpec recurrent(const std::string& op) {
  std::vector<std::string> attrs = {"activations", "activation_alpha", "activation_beta", "clip",
                                    "direction",   "hidden_size",      "layout"};
  if (op == "GRU") attrs.push_back("linear_before_reset");
  if (op == "LSTM") attrs.push_back("input_forget");
  return {attrs, rnn_check, [op](Ctx& ctx) {
            Tensor x = ctx.dev(0);
            const bool batch_first = ctx.attr_i("layout", 0) != 0;
            if (batch_first) x = x.transpose(0, 1);
            const std::string dir = ctx.attr_s("direction", "forward");
            const int64_t hidden = ctx.attr_i("hidden_size", ctx.in(2).shape()[2]);
            std::vector<RnnState> runs;
            if (dir == "forward" || dir == "bidirectional") runs.push_back(rnn_direction(ctx, op, x, 0, hidden, false));
            if (dir == "reverse") runs.push_back(rnn_direction(ctx, op, x, 0, hidden, true));
            if (dir == "bidirectional") runs.push_back(rnn_direction(ctx, op, x, 1, hidden, true));
            if (runs.empty()) ctx.fail(Errc::unsupported, "direction '" + dir + "'");
            std::vector<Tensor> ys, hs, cs;
            for (auto& rs : runs) {
              ys.push_back(rs.y.unsqueeze(1));  // [seq, 1, batch, hidden]
              hs.push_back(rs.h.unsqueeze(0));
              if (rs.c.defined()) cs.push_back(rs.c.unsqueeze(0));
            }
            Tensor y = cat(ys, 1), yh = cat(hs, 0);
            if (batch_first) {
              y = y.permute({2, 0, 1, 3});  // [batch, seq, dirs, hidden]
              yh = yh.transpose(0, 1);
            }
            Outs out{dev_value(y), dev_value(yh)};
            if (!cs.empty()) {
              Tensor yc = cat(cs, 0);
              out.push_back(dev_value(batch_first ? yc.transpose(0, 1) : yc));
            }
            return out;
          }};
}

// --- Resize / Upsample: separable per axis; the source taps (indices and
// weights) of every output position are computed on the host from the
// shapes, so the device sees index_selects and element-wise ops only ---

// Every attribute value is checked here, at load: a bad coordinate or
// rounding mode failed only once a run reached the node.
std::string resize_check(const ::onnx::NodeProto& n, int64_t opset) {
  auto one_of = [](const std::string& v, std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* name) { return v == name; });
  };
  for (const auto& a : n.attribute()) {
    if (a.name() == "mode" && !one_of(a.s(), {"nearest", "linear", "cubic"}))
      return "mode='" + a.s() + "' (nearest, linear and cubic only)";
    // tf_half_pixel_for_nn is opsets 11-12 only; opset 13 dropped it.
    if (a.name() == "coordinate_transformation_mode" &&
        !one_of(a.s(), {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"}) &&
        !(a.s() == "tf_half_pixel_for_nn" && opset < 13))
      return "coordinate_transformation_mode='" + a.s() + "' (opset " + std::to_string(opset) +
             " knows half_pixel, pytorch_half_pixel, align_corners, asymmetric, " +
             (opset < 13 ? "tf_half_pixel_for_nn, " : "") + "tf_crop_and_resize)";
    if (a.name() == "nearest_mode" && !one_of(a.s(), {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}))
      return "nearest_mode='" + a.s() + "' (round_prefer_floor, round_prefer_ceil, floor or ceil)";
  }
  return "";
}

// How one node resizes: ONNX's attributes (opset 10 and Upsample fix the
// coordinate and rounding modes) and, for tf_crop_and_resize, the roi.
struct ResizeMode {
  std::string mode, coord, nearest;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  std::vector<double> roi;  // starts of every axis, then ends
};

// ONNX's cubic convolution weights for the taps at distances 1 + r, r,
// 1 - r and 2 - r from the source coordinate (r its fractional part).
std::array<double, 4> cubic_weights(double r, double a) {
  auto near = [a](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };       // |d| <= 1
  auto far = [a](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };  // 1 < |d| < 2
  return {far(1 + r), near(r), near(1 - r), far(2 - r)};
}

// The source coordinate of output position o along an axis of extent `in`
// resized to `out` (scale: out / in unless given), as ONNX's reference.
double resize_source(Ctx& ctx, const ResizeMode& m, int64_t o, int64_t in, int64_t out, double scale, int64_t axis,
                     size_t rank) {
  // In f32, as ONNX Runtime and PyTorch compute it (the scale is an f32 in
  // the model): in double, 3 / 0.6f is 4.9999998 and a nearest
  // downsampling picked the pixel before theirs.
  const auto sf = static_cast<float>(scale), of = static_cast<float>(o);
  const float width = static_cast<float>(in) * sf;  // the unrounded resized extent
  const std::string& c = m.coord;
  if (c == "half_pixel") return (of + 0.5f) / sf - 0.5f;
  if (c == "pytorch_half_pixel") return out > 1 ? (of + 0.5f) / sf - 0.5f : -0.5f;
  if (c == "align_corners") return width == 1 ? 0.0f : of * static_cast<float>(in - 1) / (width - 1);
  if (c == "asymmetric") return of / sf;
  if (c == "tf_half_pixel_for_nn") return (of + 0.5f) / sf;
  if (c == "tf_crop_and_resize") {
    const double begin = m.roi[static_cast<size_t>(axis)], end = m.roi[rank + static_cast<size_t>(axis)];
    const double span = (end - begin) * static_cast<double>(in - 1);
    return begin * static_cast<double>(in - 1) + (out == 1 ? span / 2 : static_cast<double>(o) * span / (out - 1));
  }
  ctx.fail(Errc::unsupported, "coordinate_transformation_mode '" + c + "'");
}

Tensor resize_axis(Ctx& ctx, const Tensor& x, int64_t axis, int64_t out, double scale, const ResizeMode& m) {
  const int64_t in = x.shape()[axis];
  const size_t taps = m.mode == "nearest" ? 1 : m.mode == "linear" ? 2 : 4;
  std::vector<Ints> index(taps);
  std::vector<std::vector<double>> weight(taps);
  std::vector<bool> outside;  // tf_crop_and_resize: takes extrapolation_value
  auto clampi = [&](double v) { return std::clamp<int64_t>(static_cast<int64_t>(v), 0, in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    const double src = resize_source(ctx, m, o, in, out, scale, axis, x.rank());
    outside.push_back(m.coord == "tf_crop_and_resize" && (src < 0 || src > static_cast<double>(in - 1)));
    if (m.mode == "nearest") {
      double r = 0;
      if (m.nearest == "round_prefer_floor")
        r = std::ceil(src - 0.5);
      else if (m.nearest == "round_prefer_ceil")
        r = std::floor(src + 0.5);
      else if (m.nearest == "floor")
        r = std::floor(src);
      else if (m.nearest == "ceil")
        r = std::ceil(src);
      else
        ctx.fail(Errc::unsupported, "nearest_mode '" + m.nearest + "'");
      index[0].push_back(clampi(r));
      weight[0].push_back(1);
      continue;
    }
    // The taps around src (the input's edge repeated beyond it); with
    // exclude_outside, taps beyond the edge weigh 0 and the rest are
    // renormalized.
    const double f = std::floor(src), r = src - f;
    std::vector<double> w;
    if (m.mode == "linear")
      w = {1 - r, r};
    else {
      auto c = cubic_weights(r, m.cubic_a);
      w.assign(c.begin(), c.end());
    }
    const auto first = static_cast<int64_t>(f) - (taps == 4 ? 1 : 0);
    double total = 0;
    for (size_t k = 0; k < taps; ++k) {
      const int64_t i = first + static_cast<int64_t>(k);
      if (m.exclude_outside && (i < 0 || i >= in)) w[k] = 0;
      total += w[k];
    }
    for (size_t k = 0; k < taps; ++k) {
      index[k].push_back(std::clamp<int64_t>(first + static_cast<int64_t>(k), 0, in - 1));
      weight[k].push_back(m.exclude_outside && total != 0 ? w[k] / total : w[k]);
    }
  }
  const Device& d = ctx.device();
  Ints wshape(x.rank(), 1);
  wshape[axis] = out;
  // Integers come widened to f32 (resize()) but for nearest, which copies.
  const DType t = x.dtype();
  Tensor y;
  for (size_t k = 0; k < taps; ++k) {
    Tensor v = x.index_select(axis, d.from_data(TensorData::from(index[k], {out})));
    if (m.mode != "nearest") v = v.cast(t).mul(d.from_data(host_doubles(weight[k], {out}, t)).reshape(Shape(wshape)));
    y = y.defined() ? y.add(v) : v;
  }
  if (std::find(outside.begin(), outside.end(), true) != outside.end()) {
    Tensor mask = d.from_data(TensorData::from(outside, {out})).reshape(Shape(wshape));
    y = where(mask, d.full({}, m.extrapolation, t), y);
  }
  return y;
}

// A shape a node computed from its inputs' values: no negative extent and
// at most 2^40 elements (the runtime's bound), refused at this node.
void check_result_shape(Ctx& ctx, const std::string& what, const Shape& s) {
  int64_t elements = 1;
  for (auto d : s.dims) {
    if (d < 0) ctx.fail(Errc::invalid_argument, what + " " + s.to_string() + " has a negative extent");
    if (d > 0 && elements > (int64_t{1} << 40) / d)
      ctx.fail(Errc::invalid_argument, what + " " + s.to_string() + " is too large (over 2^40 elements)");
    elements *= d;
  }
}

// Output extents floor(extent * scale), the scales checked first (a NaN or
// 1e30 scale cast to int64 was undefined and read back as INT64_MIN).
Ints scaled_extents(Ctx& ctx, const Shape& shape, const std::vector<double>& scales) {
  Ints out;
  for (size_t a = 0; a < shape.rank(); ++a) {
    // In f32, as ONNX Runtime, PyTorch's exports and ONNX's shape
    // inference take it (11/7 as f32 times 7 is 11; in double 10.99...).
    const double e = std::floor(static_cast<double>(static_cast<float>(shape[a]) * static_cast<float>(scales[a])));
    if (!std::isfinite(scales[a]) || scales[a] <= 0 || e > static_cast<double>(int64_t{1} << 40))
      ctx.fail(Errc::invalid_argument, "scale " + std::to_string(scales[a]) + " of axis " + std::to_string(a) +
                                           " must be a positive finite number giving at most 2^40 elements");
    out.push_back(static_cast<int64_t>(e));
  }
  return out;
}

Tensor resize(Ctx& ctx, Tensor x, const Ints& out_dims, const std::vector<double>& scales, const ResizeMode& m) {
  // The whole output's size first: axes are resized one at a time, each
  // with host tables as long as its extent, so sizes of 2^40 (or scales of
  // 1e9) ran for a minute and several GB before anything refused them.
  check_result_shape(ctx, "output shape", Shape(out_dims));
  // Integers are interpolated in f32 over every axis and truncated once at
  // the end, as ONNX's reference and ONNX Runtime do (a truncation per axis
  // gave values one lower).
  const DType t = x.dtype();
  const bool widen = !is_floating(t) && m.mode != "nearest";
  if (widen) x = x.cast(DType::f32);
  for (size_t a = 0; a < x.rank(); ++a)
    if (out_dims[a] != x.shape()[a] || scales[a] != 1.0 || m.coord == "tf_crop_and_resize")
      x = resize_axis(ctx, x, static_cast<int64_t>(a), out_dims[a], scales[a], m);
  return widen ? x.cast(t) : x;
}

// --- window functions (opset 17): computed on the host in f64 from the
// size, like Range and EyeLike; cos of 2 pi n / N with N = size
// (periodic) or size - 1 (symmetric) ---

/// A load check for an op whose attribute `name` names a dtype: "" when
/// Switchyard has it (or the node leaves it out), else "`label` TYPE, which
/// Switchyard lacks".
std::function<std::string(const ::onnx::NodeProto&, int64_t)> dtype_attribute_check(std::string name,
                                                                                    std::string label) {
  return [name = std::move(name), label = std::move(label)](const ::onnx::NodeProto& n, int64_t) -> std::string {
    for (const auto& a : n.attribute())
      if (a.name() == name && !to_dtype(static_cast<int32_t>(a.i())))
        return label + " " + onnx_type_name(static_cast<int32_t>(a.i())) + ", which Switchyard lacks";
    return "";
  };
}

std::string window_check(const ::onnx::NodeProto& n, int64_t opset) {
  return dtype_attribute_check("output_datatype", "output_datatype")(n, opset);
}

// `terms` are the coefficients a_k of sum_k (-1)^k a_k cos(2 pi k n / N).
OpSpec window(std::vector<double> terms) {
  return {{"output_datatype", "periodic"}, window_check, [terms = std::move(terms)](Ctx& ctx) {
            const auto size = ctx.ints(0);
            if (size.size() != 1) ctx.fail(Errc::shape_mismatch, "size must hold one value");
            if (size[0] < 0) ctx.fail(Errc::invalid_argument, "size " + std::to_string(size[0]));
            const DType to = *to_dtype(static_cast<int32_t>(ctx.attr_i("output_datatype", 1)));
            const double span = static_cast<double>(ctx.attr_i("periodic", 1) != 0 ? size[0] : size[0] - 1);
            std::vector<double> v;
            v.reserve(static_cast<size_t>(size[0]));
            for (int64_t i = 0; i < size[0]; ++i) {
              double w = 0, sign = 1;
              for (size_t k = 0; k < terms.size(); ++k, sign = -sign)
                w += sign * terms[k] * std::cos(2 * std::numbers::pi * static_cast<double>(k * i) / span);
              v.push_back(w);
            }
            return Outs{host_or_dev(ctx, host_doubles(v, {size[0]}, to))};
          }};
}

// --- data-dependent shapes: the input is read on the host (a sync with
// the device; a plan that follows from a computed value is not cached) and
// the result computed there, or its indices fed to an index_select ---

// Elements of host data as doubles (floats) or int64 (integers, bool), so
// that comparisons are exact for both.
template <class F>
auto with_elements(const TensorData& d, F f) {
  if (is_floating(d.dtype)) return f(d.to_vector<double>());
  return f(d.to_vector<int64_t>());
}

Outs nonzero_node(Ctx& ctx) {
  const TensorData& x = ctx.host(0);
  const Shape& s = x.shape;
  const auto r = static_cast<int64_t>(s.rank());
  Ints flat;
  with_elements(x, [&](const auto& v) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] != 0) flat.push_back(static_cast<int64_t>(i));
    return 0;
  });
  const auto n = static_cast<int64_t>(flat.size());
  Ints out(static_cast<size_t>(r * n));
  const auto strides = s.strides();
  for (int64_t k = 0; k < n; ++k)
    for (int64_t a = 0; a < r; ++a) out[static_cast<size_t>(a * n + k)] = flat[k] / strides[a] % s[a];
  return Outs{host_or_dev(ctx, host_ints(out, {r, n}))};
}

// Compress: the positions where the condition holds (it may be shorter
// than the axis), picked from the device data by one index_select.
Outs compress_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  const TensorData& cond = ctx.host(1);
  if (cond.shape.rank() != 1) ctx.fail(Errc::shape_mismatch, "condition must be 1-D, got " + cond.shape.to_string());
  int64_t axis = 0;
  if (ctx.attr("axis"))
    axis = axis_of(ctx, ctx.attr_i("axis", 0), x.rank());
  else
    x = x.flatten();
  const auto c = cond.to_vector<int64_t>();
  if (static_cast<int64_t>(c.size()) > x.shape()[axis])
    ctx.fail(Errc::shape_mismatch, "condition has " + std::to_string(c.size()) + " entries for an axis of extent " +
                                       std::to_string(x.shape()[axis]));
  Ints picked;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] != 0) picked.push_back(static_cast<int64_t>(i));
  const auto n = static_cast<int64_t>(picked.size());
  return Outs{dev_value(x.index_select(axis, ctx.device().from_data(host_ints(picked, {n}))))};
}

// Unique over elements (no axis: the flattened input) or slices along
// `axis`; sorted ascending (slices lexicographically) or in order of first
// occurrence. Outputs Y, the first occurrence of each, the inverse indices
// and the counts.
Outs unique_node(Ctx& ctx) {
  const TensorData& in = ctx.host(0);
  const bool has_axis = ctx.attr("axis") != nullptr;
  const TensorData x = has_axis ? in : host_reshape(in, {in.numel()});
  const int64_t axis = has_axis ? axis_of(ctx, ctx.attr_i("axis", 0), x.shape.rank()) : 0;
  const int64_t extent = x.shape[axis];
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < axis; ++a) outer *= x.shape[a];
  for (size_t a = static_cast<size_t>(axis) + 1; a < x.shape.rank(); ++a) inner *= x.shape[a];
  Ints first, inverse(static_cast<size_t>(extent)), counts;
  with_elements(x, [&](const auto& v) {
    // Slice i's elements in row-major order, compared as tuples.
    auto slice = [&](int64_t i) {
      std::vector<typename std::decay_t<decltype(v)>::value_type> e;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < inner; ++k) e.push_back(v[static_cast<size_t>((o * extent + i) * inner + k)]);
      return e;
    };
    std::vector<decltype(slice(0))> keys;
    for (int64_t i = 0; i < extent; ++i) {
      auto key = slice(i);
      auto it = std::find(keys.begin(), keys.end(), key);
      if (it == keys.end()) {
        inverse[static_cast<size_t>(i)] = static_cast<int64_t>(keys.size());
        keys.push_back(std::move(key));
        first.push_back(i);
        counts.push_back(1);
      } else {
        inverse[static_cast<size_t>(i)] = it - keys.begin();
        ++counts[static_cast<size_t>(it - keys.begin())];
      }
    }
    if (ctx.attr_i("sorted", 1) == 0) return 0;
    Ints order(keys.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
    Ints rank_of(keys.size()), sorted_first, sorted_counts;
    for (size_t k = 0; k < order.size(); ++k) {
      rank_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
      sorted_first.push_back(first[static_cast<size_t>(order[k])]);
      sorted_counts.push_back(counts[static_cast<size_t>(order[k])]);
    }
    for (auto& i : inverse) i = rank_of[static_cast<size_t>(i)];
    first = std::move(sorted_first);
    counts = std::move(sorted_counts);
    return 0;
  });
  Shape ys = x.shape;
  ys.dims[static_cast<size_t>(axis)] = static_cast<int64_t>(first.size());
  const auto strides = x.shape.strides();
  TensorData y = host_gather_elems(x, ys, [&](const Ints& i) {
    int64_t off = 0;
    for (size_t a = 0; a < i.size(); ++a)
      off += (static_cast<int64_t>(a) == axis ? first[static_cast<size_t>(i[a])] : i[a]) * strides[a];
    return off;
  });
  const auto u = static_cast<int64_t>(first.size());
  return Outs{host_or_dev(ctx, std::move(y)), host_or_dev(ctx, host_ints(first, {u})),
              host_or_dev(ctx, host_ints(inverse, {extent})), host_or_dev(ctx, host_ints(counts, {u}))};
}

// NonMaxSuppression, per batch and class as ONNX's reference: boxes above
// score_threshold in descending score (ties: lower index first), each kept
// unless its IoU with a kept box exceeds iou_threshold, at most
// max_output_boxes_per_class of them.
Outs nms_node(Ctx& ctx) {
  const TensorData& boxes = ctx.host(0);
  const TensorData& scores = ctx.host(1);
  if (boxes.shape.rank() != 3 || boxes.shape[2] != 4)
    ctx.fail(Errc::shape_mismatch, "boxes must be [batches, boxes, 4], got " + boxes.shape.to_string());
  if (scores.shape.rank() != 3 || scores.shape[0] != boxes.shape[0] || scores.shape[2] != boxes.shape[1])
    ctx.fail(Errc::shape_mismatch,
             "scores " + scores.shape.to_string() + " do not fit boxes " + boxes.shape.to_string());
  const int64_t max_out = ctx.has(2) && ctx.in(2).shape().numel() > 0 ? ctx.ints(2).at(0) : 0;
  const double iou_max = ctx.has(3) && ctx.in(3).shape().numel() > 0 ? ctx.host(3).at(0) : 0.0;
  const bool by_score = ctx.has(4) && ctx.in(4).shape().numel() > 0;
  const double score_min = by_score ? ctx.host(4).at(0) : 0.0;
  const bool center = ctx.attr_i("center_point_box", 0) != 0;
  const auto b = boxes.to_vector<double>(), sc = scores.to_vector<double>();
  const int64_t batches = boxes.shape[0], n = boxes.shape[1], classes = scores.shape[1];
  // Corners (y1, x1, y2, x2) with y1 <= y2, x1 <= x2.
  auto corners = [&](int64_t bi, int64_t i) {
    const double* p = &b[static_cast<size_t>((bi * n + i) * 4)];
    if (center) return std::array<double, 4>{p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
    return std::array<double, 4>{std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]),
                                 std::max(p[1], p[3])};
  };
  auto overlaps = [&](const std::array<double, 4>& p, const std::array<double, 4>& q) {
    const double h = std::min(p[2], q[2]) - std::max(p[0], q[0]), w = std::min(p[3], q[3]) - std::max(p[1], q[1]);
    if (h <= 0 || w <= 0) return false;
    const double inter = h * w, ap = (p[2] - p[0]) * (p[3] - p[1]), aq = (q[2] - q[0]) * (q[3] - q[1]);
    const double uni = ap + aq - inter;
    if (ap <= 0 || aq <= 0 || uni <= 0) return false;
    return inter / uni > iou_max;
  };
  Ints selected;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t c = 0; c < classes; ++c) {
      const double* s = &sc[static_cast<size_t>((bi * classes + c) * n)];
      Ints order;
      for (int64_t i = 0; i < n; ++i)
        if (!by_score || s[i] > score_min) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return s[p] > s[q]; });
      std::vector<std::array<double, 4>> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        auto box = corners(bi, i);
        if (std::any_of(kept.begin(), kept.end(), [&](const auto& k) { return overlaps(k, box); })) continue;
        kept.push_back(box);
        selected.insert(selected.end(), {bi, c, i});
      }
    }
  return Outs{host_or_dev(ctx, host_ints(selected, {static_cast<int64_t>(selected.size()) / 3, 3}))};
}

// --- sampling at computed coordinates: GridSample and RoiAlign gather
// taps of X viewed flat and weight them; out-of-range taps weigh 0 ---

std::string grid_sample_check(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "mode" && a.s() != "bilinear" && a.s() != "nearest" && a.s() != "bicubic")
      return "mode='" + a.s() + "' (bilinear, nearest and bicubic only)";
    if (a.name() == "padding_mode" && a.s() != "zeros" && a.s() != "border" && a.s() != "reflection")
      return "padding_mode='" + a.s() + "' (zeros, border and reflection only)";
  }
  return "";
}

// A coordinate folded back into [0, size - 1] as PyTorch's grid_sample
// (which ONNX's tests follow): border clamps, reflection mirrors at the
// edges (pixel centres with align_corners, pixel borders without), then
// clamps.
Tensor grid_padded(const Tensor& c, int64_t size, const std::string& padding, bool align) {
  const DType t = c.dtype();
  const double hi = static_cast<double>(size - 1);
  if (padding == "zeros") return c;
  if (padding == "border") return c.clamp(0, hi);
  const double lo2 = align ? 0 : -1, hi2 = align ? 2 * hi : 2 * static_cast<double>(size) - 1;
  if (lo2 == hi2) return c.mul(scalar_for(t, 0));
  const double low = lo2 / 2, span = (hi2 - lo2) / 2;
  Tensor in = c.sub(scalar_for(t, low)).abs();
  Tensor flips = in.div(scalar_for(t, span)).floor();
  Tensor extra = in.sub(flips.mul(scalar_for(t, span)));
  Tensor odd = flips.sub(flips.div(scalar_for(t, 2)).floor().mul(scalar_for(t, 2))).ne(Scalar(0.0));
  Tensor r = where(odd, extra.neg().add(scalar_for(t, span + low)), extra.add(scalar_for(t, low)));
  return r.clamp(0, hi);
}

Outs grid_sample_node(Ctx& ctx) {
  Tensor x = ctx.dev(0), grid = ctx.dev(1);
  if (x.rank() != 4) ctx.fail(Errc::shape_mismatch, "X must be [N, C, H, W], got " + x.shape().to_string());
  const auto& s = x.shape();
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  if (grid.rank() != 4 || grid.shape()[0] != n || grid.shape()[3] != 2)
    ctx.fail(Errc::shape_mismatch,
             "grid must be [" + std::to_string(n) + ", H_out, W_out, 2], got " + grid.shape().to_string());
  const DType xt = x.dtype();
  if (!is_floating(xt)) ctx.fail(Errc::dtype_mismatch, "X must be floating, got " + std::string(name_of(xt)));
  const DType t = xt == DType::f64 ? DType::f64 : DType::f32;
  const std::string mode = ctx.attr_s("mode", "bilinear"), padding = ctx.attr_s("padding_mode", "zeros");
  const bool align = ctx.attr_i("align_corners", 0) != 0;
  const int64_t ho = grid.shape()[1], wo = grid.shape()[2];
  grid = grid.cast(t).reshape({n, ho * wo, 2});
  auto unnormalize = [&](const Tensor& g, int64_t size) {
    const auto sz = static_cast<double>(size);
    return align ? g.add(scalar_for(t, 1)).mul(scalar_for(t, (sz - 1) / 2))
                 : g.add(scalar_for(t, 1)).mul(scalar_for(t, sz)).sub(scalar_for(t, 1)).div(scalar_for(t, 2));
  };
  Tensor ix = unnormalize(grid.slice(2, Slice{0, 1}).reshape({n, ho * wo}), w);
  Tensor iy = unnormalize(grid.slice(2, Slice{1, 2}).reshape({n, ho * wo}), h);
  Tensor flat = x.cast(t).reshape({n, c, h * w});
  // The value at integer tap (ty, tx) times `weight`; 0 outside the input.
  auto tap = [&](const Tensor& ty, const Tensor& tx, const Tensor& weight) {
    Tensor inside = tx.ge(Scalar(0.0))
                        .logical_and(tx.le(Scalar(static_cast<double>(w - 1))))
                        .logical_and(ty.ge(Scalar(0.0)))
                        .logical_and(ty.le(Scalar(static_cast<double>(h - 1))));
    Tensor lin = ty.clamp(0, static_cast<double>(h - 1))
                     .mul(scalar_for(t, static_cast<double>(w)))
                     .add(tx.clamp(0, static_cast<double>(w - 1)))
                     .cast(DType::i64);
    Tensor v = flat.gather(2, lin.reshape({n, 1, ho * wo}).expand({n, c, ho * wo}));
    return v.mul(weight.mul(inside.cast(t)).reshape({n, 1, ho * wo}));
  };
  Tensor y;
  auto accumulate = [&](const Tensor& v) { y = y.defined() ? y.add(v) : v; };
  if (mode == "bicubic") {
    // Taps floor - 1 .. floor + 2 of the unpadded coordinate, each folded
    // by the padding mode (PyTorch's order), A = -0.75.
    Tensor x0 = ix.floor(), y0 = iy.floor();
    Tensor rx = ix.sub(x0), ry = iy.sub(y0);
    const double a = -0.75;
    auto weights = [&](const Tensor& r) {
      auto near = [&](const Tensor& d) {
        return d.mul(scalar_for(t, a + 2)).sub(scalar_for(t, a + 3)).mul(d).mul(d).add(scalar_for(t, 1));
      };
      auto far = [&](const Tensor& d) {
        return d.mul(scalar_for(t, a))
            .sub(scalar_for(t, 5 * a))
            .mul(d)
            .add(scalar_for(t, 8 * a))
            .mul(d)
            .sub(scalar_for(t, 4 * a));
      };
      Tensor one_minus = r.neg().add(scalar_for(t, 1));
      return std::array<Tensor, 4>{far(r.add(scalar_for(t, 1))), near(r), near(one_minus),
                                   far(one_minus.add(scalar_for(t, 1)))};
    };
    auto wx = weights(rx), wy = weights(ry);
    for (int64_t j = 0; j < 4; ++j) {
      Tensor ty = grid_padded(y0.add(scalar_for(t, static_cast<double>(j - 1))), h, padding, align).floor();
      for (int64_t i = 0; i < 4; ++i) {
        Tensor tx = grid_padded(x0.add(scalar_for(t, static_cast<double>(i - 1))), w, padding, align).floor();
        accumulate(tap(ty, tx, wy[j].mul(wx[i])));
      }
    }
  } else {
    ix = grid_padded(ix, w, padding, align);
    iy = grid_padded(iy, h, padding, align);
    if (mode == "nearest") {
      accumulate(tap(iy.round(), ix.round(), ctx.device().full({}, 1, t)));
    } else {
      Tensor x0 = ix.floor(), y0 = iy.floor();
      Tensor x1 = x0.add(scalar_for(t, 1)), y1 = y0.add(scalar_for(t, 1));
      Tensor wx1 = ix.sub(x0), wy1 = iy.sub(y0);
      Tensor wx0 = wx1.neg().add(scalar_for(t, 1)), wy0 = wy1.neg().add(scalar_for(t, 1));
      accumulate(tap(y0, x0, wy0.mul(wx0)));
      accumulate(tap(y0, x1, wy0.mul(wx1)));
      accumulate(tap(y1, x0, wy1.mul(wx0)));
      accumulate(tap(y1, x1, wy1.mul(wx1)));
    }
  }
  y = y.reshape({n, c, ho, wo});
  return Outs{dev_value(y.dtype() == xt ? y : y.cast(xt))};
}

// RoiAlign as ONNX's reference (ONNX Runtime's kernel): each output bin
// averages (or takes the largest weighted tap of) a grid of bilinear
// samples, gathered as rows of X viewed [N * H * W, C].
struct RoiAlign {
  int64_t ph, pw, ratio;
  double scale;
  bool half_pixel, is_max;
};

// A fixed sampling_ratio: every roi has the same grid of samples, so the
// device computes their coordinates from the rois (no sync). Per axis a
// sample at -1 or beyond the extent counts as 0; otherwise it is clamped
// at 0 and its low tap at extent - 1.
Tensor roi_align_device(Ctx& ctx, const Tensor& x, const RoiAlign& p) {
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const DType t = x.dtype();
  Tensor rois = ctx.dev(1).cast(t);
  const int64_t num = rois.shape()[0], g = p.ratio;
  auto col = [&](int64_t k) {
    return rois.slice(1, Slice{k, k + 1}).mul(scalar_for(t, p.scale)).sub(scalar_for(t, p.half_pixel ? 0.5 : 0));
  };
  // One axis: [num, bins * g] sample taps (low, high), weights and validity.
  struct Axis {
    Tensor lo, hi, wlo, whi, out;
  };
  auto axis = [&](const Tensor& begin, const Tensor& end, int64_t bins, int64_t extent) {
    Tensor len = end.sub(begin);
    if (!p.half_pixel) len = len.clamp_min(1);
    std::vector<double> f;  // sample offsets in bins: bin + (i + 0.5) / g
    for (int64_t b = 0; b < bins; ++b)
      for (int64_t i = 0; i < g; ++i)
        f.push_back(static_cast<double>(b) + (static_cast<double>(i) + 0.5) / static_cast<double>(g));
    Tensor at = begin.add(len.div(scalar_for(t, static_cast<double>(bins)))
                              .mul(ctx.device().from_data(host_doubles(f, {1, bins * g}, t))));
    const auto last = static_cast<double>(extent - 1);
    Tensor out = at.lt(Scalar(-1.0)).logical_or(at.gt(Scalar(static_cast<double>(extent))));
    Tensor v = at.clamp_min(0);
    Tensor lo = v.floor();
    Tensor edge = lo.ge(Scalar(last));
    Tensor top = ctx.device().full({}, last, t);
    lo = where(edge, top, lo);
    Tensor hi = where(edge, top, lo.add(scalar_for(t, 1)));
    Tensor frac = where(edge, lo, v).sub(lo);
    return Axis{lo, hi, frac.neg().add(scalar_for(t, 1)), frac, out};
  };
  Axis ay = axis(col(1), col(3), p.ph, h), ax = axis(col(0), col(2), p.pw, w);
  const int64_t sy = p.ph * g, sx = p.pw * g;
  // Rows of the flat X: batch * H * W + y * W + x; a batch index outside
  // [0, N) poisons the row so that the gather fails.
  Tensor b = ctx.dev(2).cast(DType::i64).reshape({num, 1, 1});
  Tensor base = where(b.lt(Scalar(int64_t{0})).logical_or(b.ge(Scalar(n))),
                      ctx.device().full({}, -static_cast<double>(int64_t{1} << 62), DType::i64), b.mul(Scalar(h * w)));
  Tensor valid = ay.out.reshape({num, sy, 1}).logical_or(ax.out.reshape({num, 1, sx})).logical_not().cast(t);
  if (!p.is_max) valid = valid.div(scalar_for(t, static_cast<double>(g * g)));
  Tensor table = x.reshape({n, c, h * w}).permute({0, 2, 1}).reshape({n * h * w, c});
  Tensor y;
  for (const auto& [ty, wy] : {std::pair{ay.lo, ay.wlo}, std::pair{ay.hi, ay.whi}})
    for (const auto& [tx, wx] : {std::pair{ax.lo, ax.wlo}, std::pair{ax.hi, ax.whi}}) {
      Tensor row = ty.reshape({num, sy, 1}).mul(scalar_for(t, static_cast<double>(w))).add(tx.reshape({num, 1, sx}));
      row = row.cast(DType::i64).add(base);
      Tensor weight = wy.reshape({num, sy, 1}).mul(wx.reshape({num, 1, sx})).mul(valid);
      Tensor v = table.index_select(0, row.flatten()).mul(weight.reshape({num * sy * sx, 1}));
      y = !y.defined() ? v : p.is_max ? y.maximum(v) : y.add(v);
    }
  y = y.reshape({num, p.ph, g, p.pw, g, c});
  return (p.is_max ? y.max({2, 4}) : y.sum({2, 4})).permute({0, 3, 1, 2});
}

// sampling_ratio 0: each roi's grid is ceil(roi extent / bins) samples a
// side, which depends on the rois' values: they are read on the host (a
// sync), which lays out every sample's four taps.
// MaxRoiPool (opset 1; torchvision's roi_pool exports to it) as ONNX
// Runtime's kernel (Caffe's): each roi's corners scaled and rounded half
// away from zero, its extent at least 1, bin k of P covering
// [floor(k * e / P), ceil((k + 1) * e / P)) from the corner in f32, clamped
// to the image; an empty bin is 0. The rois are read on the host; max being
// separable, each roi is one row-bin max and one column-bin max per bin.
Outs max_roi_pool_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  if (x.rank() != 4) ctx.fail(Errc::shape_mismatch, "X must be [N, C, H, W], got " + x.shape().to_string());
  const TensorData& rois = ctx.host(1);
  if (rois.shape.rank() != 2 || rois.shape[1] != 5)
    ctx.fail(Errc::shape_mismatch, "rois must be [num_rois, 5], got " + rois.shape.to_string());
  const auto pooled = ctx.attr_ints("pooled_shape");
  if (!pooled || pooled->size() != 2 || (*pooled)[0] < 1 || (*pooled)[1] < 1 || (*pooled)[0] > 4096 ||
      (*pooled)[1] > 4096)
    ctx.fail(Errc::invalid_argument, "pooled_shape must be two extents from 1 to 4096");
  const int64_t ph = (*pooled)[0], pw = (*pooled)[1];
  const float scale = ctx.attr_f("spatial_scale", 1.0f);
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const auto r = rois.to_vector<double>();
  // Bin k of `bins` over a roi of extent `e` from `start`, clamped to [0, limit).
  auto window = [](int64_t k, int64_t bins, int64_t e, int64_t start, int64_t limit) {
    const float size = static_cast<float>(e) / static_cast<float>(bins);
    const auto lo = static_cast<int64_t>(std::floor(static_cast<float>(k) * size));
    const auto hi = static_cast<int64_t>(std::ceil(static_cast<float>(k + 1) * size));
    return std::pair{std::clamp<int64_t>(lo + start, 0, limit), std::clamp<int64_t>(hi + start, 0, limit)};
  };
  std::vector<Tensor> per_roi;
  for (int64_t k = 0; k < rois.shape[0]; ++k) {
    const double* roi = &r[static_cast<size_t>(k * 5)];
    if (!(roi[0] >= 0 && roi[0] < static_cast<double>(n)))
      ctx.fail(Errc::index_out_of_range,
               "roi " + std::to_string(k) + " names batch " + std::to_string(roi[0]) + " of " + std::to_string(n));
    auto corner = [&](int i) {
      const float v = std::round(static_cast<float>(roi[i]) * scale);
      if (!(std::abs(v) < 1e15f)) ctx.fail(Errc::invalid_argument, "roi " + std::to_string(k) + " is not finite");
      return static_cast<int64_t>(v);
    };
    const int64_t sw = corner(1), sh = corner(2), ew = corner(3), eh = corner(4);
    const int64_t rh = std::max<int64_t>(eh - sh + 1, 1), rw = std::max<int64_t>(ew - sw + 1, 1);
    const auto b = static_cast<int64_t>(roi[0]);
    Tensor image = x.slice(0, Slice{b, b + 1}).reshape({c, h, w});
    std::vector<Tensor> rows;
    for (int64_t i = 0; i < ph; ++i) {
      const auto [lo, hi] = window(i, ph, rh, sh, h);
      rows.push_back(lo < hi ? image.slice(1, Slice{lo, hi}).max({1}) : ctx.device().zeros({c, w}, x.dtype()));
    }
    Tensor by_rows = stack(rows, 1);  // [C, ph, W]
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < pw; ++j) {
      const auto [lo, hi] = window(j, pw, rw, sw, w);
      cols.push_back(lo < hi ? by_rows.slice(2, Slice{lo, hi}).max({2}) : ctx.device().zeros({c, ph}, x.dtype()));
    }
    per_roi.push_back(stack(cols, 2));  // [C, ph, pw]
  }
  if (per_roi.empty()) return Outs{dev_value(ctx.device().zeros({0, c, ph, pw}, x.dtype()))};
  return Outs{dev_value(stack(per_roi, 0))};
}

Tensor roi_align_host(Ctx& ctx, const Tensor& x, const RoiAlign& p) {
  const TensorData& rois = ctx.host(1);
  const auto batch = ctx.ints(2);
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  const int64_t num = rois.shape[0], ph = p.ph, pw = p.pw, ratio = p.ratio;
  const double scale = p.scale;
  const bool half_pixel = p.half_pixel, is_max = p.is_max;
  const auto r = rois.to_vector<double>();
  // Per bin, its taps (row of the flat X, weight); padded to the most taps
  // of any bin with weight-0 taps (avg) or copies of the bin's first (max).
  std::vector<std::vector<std::pair<int64_t, double>>> bins;
  size_t most = 1;
  for (int64_t k = 0; k < num; ++k) {
    const int64_t b = batch[static_cast<size_t>(k)];
    if (b < 0 || b >= n)
      ctx.fail(Errc::index_out_of_range, "batch index " + std::to_string(b) + " for a batch of " + std::to_string(n));
    const double off = half_pixel ? 0.5 : 0;
    const double x1 = r[k * 4] * scale - off, y1 = r[k * 4 + 1] * scale - off;
    double rw = r[k * 4 + 2] * scale - off - x1, rh = r[k * 4 + 3] * scale - off - y1;
    if (!half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    const double bh = rh / static_cast<double>(ph), bw = rw / static_cast<double>(pw);
    const auto gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(ph)));
    const auto gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(pw)));
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    for (int64_t py = 0; py < ph; ++py)
      for (int64_t px = 0; px < pw; ++px) {
        auto& bin = bins.emplace_back();
        for (int64_t iy = 0; iy < gh; ++iy)
          for (int64_t jx = 0; jx < gw; ++jx) {
            double yy =
                y1 + static_cast<double>(py) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
            double xx =
                x1 + static_cast<double>(px) * bw + (static_cast<double>(jx) + 0.5) * bw / static_cast<double>(gw);
            if (yy < -1.0 || yy > static_cast<double>(h) || xx < -1.0 || xx > static_cast<double>(w)) {
              for (int q = 0; q < 4; ++q) bin.emplace_back(b * h * w, 0.0);
              continue;
            }
            yy = std::max(yy, 0.0);
            xx = std::max(xx, 0.0);
            auto ylo = static_cast<int64_t>(yy), xlo = static_cast<int64_t>(xx);
            int64_t yhi = ylo + 1, xhi = xlo + 1;
            if (ylo >= h - 1) yhi = ylo = h - 1, yy = static_cast<double>(ylo);
            if (xlo >= w - 1) xhi = xlo = w - 1, xx = static_cast<double>(xlo);
            const double ly = yy - static_cast<double>(ylo), lx = xx - static_cast<double>(xlo);
            const double hy = 1 - ly, hx = 1 - lx, div = is_max ? 1 : count;
            const int64_t base = b * h * w;
            bin.emplace_back(base + ylo * w + xlo, hy * hx / div);
            bin.emplace_back(base + ylo * w + xhi, hy * lx / div);
            bin.emplace_back(base + yhi * w + xlo, ly * hx / div);
            bin.emplace_back(base + yhi * w + xhi, ly * lx / div);
          }
        if (bin.empty()) bin.emplace_back(b * h * w, 0.0);
        most = std::max(most, bin.size());
      }
  }
  Ints index;
  std::vector<double> weight;
  for (auto& bin : bins) {
    const auto fill = is_max ? bin.front() : std::pair<int64_t, double>{bin.front().first, 0.0};
    bin.resize(most, fill);
    for (auto& [i, wt] : bin) {
      index.push_back(i);
      weight.push_back(wt);
    }
  }
  const auto rows = static_cast<int64_t>(index.size());
  const Device& d = ctx.device();
  Tensor table = x.reshape({n, c, h * w}).permute({0, 2, 1}).reshape({n * h * w, c});
  Tensor v = table.index_select(0, d.from_data(host_ints(index, {rows})))
                 .mul(d.from_data(host_doubles(weight, {rows, 1}, x.dtype())))
                 .reshape({num, ph, pw, static_cast<int64_t>(most), c});
  Tensor y = is_max ? v.max({3}) : v.sum({3});
  return y.permute({0, 3, 1, 2});
}

Outs roi_align_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  if (x.rank() != 4) ctx.fail(Errc::shape_mismatch, "X must be [N, C, H, W], got " + x.shape().to_string());
  if (!is_floating(x.dtype()))
    ctx.fail(Errc::dtype_mismatch, "X must be floating, got " + std::string(name_of(x.dtype())));
  const Shape& rs = ctx.in(1).shape();
  if (rs.rank() != 2 || rs[1] != 4) ctx.fail(Errc::shape_mismatch, "rois must be [num_rois, 4], got " + rs.to_string());
  if (ctx.in(2).shape() != Shape{rs[0]})
    ctx.fail(Errc::shape_mismatch,
             "batch_indices has shape " + ctx.in(2).shape().to_string() + " for " + std::to_string(rs[0]) + " rois");
  const RoiAlign p{ctx.attr_i("output_height", 1),
                   ctx.attr_i("output_width", 1),
                   ctx.attr_i("sampling_ratio", 0),
                   ctx.attr_f("spatial_scale", 1.0f),
                   ctx.opset() >= 16 && ctx.attr_s("coordinate_transformation_mode", "half_pixel") == "half_pixel",
                   ctx.attr_s("mode", "avg") == "max"};
  if (p.ph < 1 || p.pw < 1) ctx.fail(Errc::invalid_argument, "output_height and output_width must be at least 1");
  if (p.ratio > 0) return Outs{dev_value(roi_align_device(ctx, x, p))};
  return Outs{dev_value(roi_align_host(ctx, x, p))};
}

// --- control flow: subgraphs run by the loader on this run's values;
// conditions and trip counts are read on the host (a sync when the device
// computed them, and then the model is replanned on every run) ---

// A subgraph's results for the node's outputs: their count must match.
Values expect_outputs(Ctx& ctx, Values outs, size_t want, std::string_view what) {
  if (outs.size() != want)
    ctx.fail(Errc::invalid_argument, std::string(what) + " has " + std::to_string(outs.size()) +
                                         " outputs, the node expects " + std::to_string(want));
  return outs;
}

Outs to_outs(Values v) { return {std::make_move_iterator(v.begin()), std::make_move_iterator(v.end())}; }

bool read_flag(Ctx& ctx, const Value& v, std::string_view what) {
  const TensorData& d = ctx.read(v);
  if (d.numel() != 1)
    ctx.fail(Errc::shape_mismatch, std::string(what) + " must hold one value, got shape " + d.shape.to_string());
  return d.at(0) != 0;
}

// Values stacked along a new axis (host data stays on the host while small).
Value stack_values(Ctx& ctx, const std::vector<Value>& parts, int64_t axis) {
  std::vector<Value> lifted;
  bool host = true;
  for (const auto& p : parts) {
    if (!p.is_tensor()) ctx.fail(Errc::invalid_argument, std::string("cannot stack ") + p.kind_name());
    lifted.push_back(unsqueeze_value(ctx, p, {axis}));
    host = host && lifted.back().host && p.shape().numel() * static_cast<int64_t>(parts.size()) <= kHostMax;
  }
  if (host) {
    std::vector<const TensorData*> data;
    data.reserve(lifted.size());
    for (const auto& v : lifted) data.push_back(&*v.host);
    return host_value(host_concat(data, axis));
  }
  std::vector<Tensor> tensors;
  tensors.reserve(lifted.size());
  for (const auto& v : lifted) tensors.push_back(v.dev.defined() ? v.dev : ctx.device().from_data(*v.host));
  return dev_value(cat(tensors, axis));
}

// Element t along `axis`, that axis dropped.
Value take_along(Ctx& ctx, const Value& x, int64_t axis, int64_t t) {
  Value s = slice_value(ctx, x, {t}, {t + 1}, {axis}, {});
  Ints dims = s.shape().dims;
  dims.erase(dims.begin() + axis);
  return do_reshape(ctx, s, dims, true);
}

Outs if_node(Ctx& ctx) {
  const bool taken = read_flag(ctx, ctx.in(0), "cond");
  const auto want = static_cast<size_t>(ctx.node().output_size());
  return to_outs(expect_outputs(ctx, ctx.run_subgraph(taken ? "then_branch" : "else_branch", {}), want,
                                taken ? "then_branch" : "else_branch"));
}

// A scan output of a loop that ran no iteration: no element was made, so
// its dtype and element shape come from the body's declared output (unknown
// extents 0, no shape: rank 1), as ONNX Runtime makes it.
Value empty_scan_output(Ctx& ctx, size_t body_output) {
  const auto& outputs = ctx.attr("body")->g().output();
  const auto& type = outputs.at(static_cast<int>(body_output)).type();
  const std::optional<DType> dtype = type.has_tensor_type() ? to_dtype(type.tensor_type().elem_type()) : std::nullopt;
  if (!dtype)
    ctx.fail(Errc::unsupported, "scan output '" + outputs.at(static_cast<int>(body_output)).name() +
                                    "' of a loop that ran no iteration: the body declares no tensor type for it");
  Ints dims{0};
  if (type.tensor_type().has_shape())
    for (const auto& d : type.tensor_type().shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : 0);
  return dev_value(ctx.device().zeros(Shape(dims), *dtype));
}

// Loop: body(iteration, cond, carried...) -> (cond, carried..., scan...),
// while the trip count (M) and the condition allow; scan outputs stacked.
Outs loop_node(Ctx& ctx) {
  const bool has_trip = ctx.has(0) && ctx.in(0).shape().numel() > 0, has_cond = ctx.has(1);
  if (!has_trip && !has_cond) ctx.fail(Errc::unsupported, "a loop with neither M nor cond never ends");
  const int64_t trip = has_trip ? ctx.ints(0).at(0) : 0;
  bool cond = has_cond ? read_flag(ctx, ctx.in(1), "cond") : true;
  Values carried;
  for (size_t i = 2; i < ctx.num_inputs(); ++i) carried.push_back(ctx.value(i));
  const auto outputs = static_cast<size_t>(ctx.node().output_size());
  if (outputs < carried.size()) ctx.fail(Errc::invalid_argument, "fewer outputs than loop-carried values");
  std::vector<Values> scans(outputs - carried.size());
  for (int64_t i = 0; (!has_trip || i < trip) && cond; ++i) {
    Values in{host_value(host_ints({i}, {})), host_value(host_ints({cond ? 1 : 0}, {}, DType::boolean))};
    in.insert(in.end(), carried.begin(), carried.end());
    Values out = expect_outputs(ctx, ctx.run_subgraph("body", std::move(in)), 1 + outputs, "body");
    // Without a cond input the body's condition is ignored (ONNX's spec).
    if (has_cond) cond = read_flag(ctx, out[0], "the body's cond");
    for (size_t k = 0; k < carried.size(); ++k) carried[k] = out[1 + k];
    for (size_t k = 0; k < scans.size(); ++k) scans[k].push_back(out[1 + carried.size() + k]);
  }
  Values result = carried;
  for (size_t k = 0; k < scans.size(); ++k)
    result.push_back(scans[k].empty() ? empty_scan_output(ctx, 1 + carried.size() + k)
                                      : stack_values(ctx, scans[k], 0));
  return to_outs(std::move(result));
}

// Scan over `seq` steps: body(state..., scan input slices...) ->
// (state..., scan output elements...). Returns the final states, then
// the scan outputs stacked along their axes.
Values scan_steps(Ctx& ctx, Values state, const Values& scan_in, const Ints& in_axes, const Ints& in_dirs,
                  const Ints& out_axes, const Ints& out_dirs, size_t outputs) {
  int64_t seq = -1;
  for (size_t j = 0; j < scan_in.size(); ++j) {
    const int64_t len = scan_in[j].shape()[in_axes[j]];
    if (seq >= 0 && len != seq)
      ctx.fail(Errc::shape_mismatch,
               "scan inputs differ in length (" + std::to_string(seq) + " and " + std::to_string(len) + ")");
    seq = len;
  }
  if (seq < 1) ctx.fail(Errc::unsupported, "a scan of no steps");
  const size_t n_state = state.size();
  if (outputs < n_state) ctx.fail(Errc::invalid_argument, "fewer outputs than state values");
  std::vector<Values> scans(outputs - n_state);
  for (int64_t t = 0; t < seq; ++t) {
    Values in = state;
    for (size_t j = 0; j < scan_in.size(); ++j)
      in.push_back(take_along(ctx, scan_in[j], in_axes[j], in_dirs[j] != 0 ? seq - 1 - t : t));
    Values out = expect_outputs(ctx, ctx.run_subgraph("body", std::move(in)), outputs, "body");
    for (size_t k = 0; k < n_state; ++k) state[k] = out[k];
    for (size_t k = 0; k < scans.size(); ++k) scans[k].push_back(out[n_state + k]);
  }
  for (size_t k = 0; k < scans.size(); ++k) {
    if (k < out_dirs.size() && out_dirs[k] != 0) std::reverse(scans[k].begin(), scans[k].end());
    const auto rank = static_cast<size_t>(scans[k][0].shape().rank()) + 1;
    state.push_back(stack_values(ctx, scans[k], axis_of(ctx, k < out_axes.size() ? out_axes[k] : 0, rank)));
  }
  return state;
}

// Scan-9 and later: axes and directions per scan input and output. Scan-8:
// sequence_lens first, every input batched on axis 0 and scanned on axis 1
// (each batch entry its own scan).
Outs scan_node(Ctx& ctx) {
  const int64_t m = ctx.attr_i("num_scan_inputs", 0);
  const bool v8 = ctx.opset() < 9;
  const size_t first = v8 ? 1 : 0;
  if (m < 1 || first + static_cast<size_t>(m) > ctx.num_inputs())
    ctx.fail(Errc::invalid_argument,
             "num_scan_inputs " + std::to_string(m) + " for " + std::to_string(ctx.num_inputs() - first) + " inputs");
  const size_t n_state = ctx.num_inputs() - first - static_cast<size_t>(m);
  const auto outputs = static_cast<size_t>(ctx.node().output_size());
  Values state, scan_in;
  for (size_t i = first; i < first + n_state; ++i) state.push_back(ctx.in(i));
  for (size_t i = first + n_state; i < ctx.num_inputs(); ++i) scan_in.push_back(ctx.in(i));
  if (!v8) {
    Ints in_axes = ctx.attr_ints("scan_input_axes").value_or(Ints(static_cast<size_t>(m), 0));
    for (size_t j = 0; j < in_axes.size() && j < scan_in.size(); ++j)
      in_axes[j] = axis_of(ctx, in_axes[j], scan_in[j].shape().rank());
    const Ints in_dirs = ctx.attr_ints("scan_input_directions").value_or(Ints(static_cast<size_t>(m), 0));
    if (in_axes.size() != scan_in.size() || in_dirs.size() != scan_in.size())
      ctx.fail(Errc::invalid_argument, "scan_input_axes and scan_input_directions need one entry per scan input");
    return to_outs(scan_steps(ctx, state, scan_in, in_axes, in_dirs, ctx.attr_ints("scan_output_axes").value_or(Ints{}),
                              ctx.attr_ints("scan_output_directions").value_or(Ints{}), outputs));
  }
  if (ctx.has(0)) {
    const int64_t seq = scan_in[0].shape().rank() > 1 ? scan_in[0].shape()[1] : -1;
    for (auto len : ctx.ints(0))
      if (len != seq)
        ctx.fail(Errc::unsupported, "sequence_lens shorter than the sequence (" + std::to_string(len) + " of " +
                                        std::to_string(seq) + ")");
  }
  const Ints dirs = ctx.attr_ints("directions").value_or(Ints(static_cast<size_t>(m), 0));
  if (dirs.size() != scan_in.size()) ctx.fail(Errc::invalid_argument, "directions needs one entry per scan input");
  const int64_t batch = scan_in[0].shape().rank() > 0 ? scan_in[0].shape()[0] : 0;
  std::vector<Values> per_batch;
  for (int64_t b = 0; b < batch; ++b) {
    Values st, sc;
    for (const auto& v : state) st.push_back(take_along(ctx, v, 0, b));
    for (const auto& v : scan_in) sc.push_back(take_along(ctx, v, 0, b));
    per_batch.push_back(scan_steps(ctx, st, sc, Ints(sc.size(), 0), dirs, {}, {}, outputs));
  }
  if (per_batch.empty()) ctx.fail(Errc::unsupported, "a scan over an empty batch");
  Values result;
  for (size_t k = 0; k < outputs; ++k) {
    Values parts;
    for (auto& r : per_batch) parts.push_back(r[k]);
    result.push_back(stack_values(ctx, parts, 0));
  }
  return to_outs(std::move(result));
}

// --- sequences and optionals (issue 19): lists of tensor values and
// empty-or-one values, held by the loader (no device op of their own) ---

// Input i as a sequence; anything else fails naming the input.
const Value& seq_input(Ctx& ctx, size_t i) {
  const Value& v = ctx.value(i);
  if (v.kind != Value::Kind::sequence)
    ctx.fail(Errc::invalid_argument, "input " + std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(i)) +
                                         "') is " + v.kind_name() + ", expected a sequence");
  return v;
}

// A sequence's dtype: its declared one, else its first element's.
std::optional<DType> seq_dtype(const Value& seq) {
  if (seq.elem_dtype) return seq.elem_dtype;
  if (!seq.items.empty()) return seq.items.front().dtype();
  return std::nullopt;
}

// The position in input `input` (a scalar, or one value), negative counted
// from the end: [-n, n - 1], or [-n, n] where `insert` (n: at the end).
int64_t seq_position(Ctx& ctx, size_t input, int64_t n, bool insert) {
  const Ints p = ctx.ints(input);
  if (p.size() != 1)
    ctx.fail(Errc::shape_mismatch,
             "position (input " + std::to_string(input) + ") must hold one value, got " + std::to_string(p.size()));
  const int64_t hi = insert ? n : n - 1;
  if (p[0] < -n || p[0] > hi)
    ctx.fail(Errc::index_out_of_range, "position " + std::to_string(p[0]) + " is out of range for a sequence of " +
                                           std::to_string(n) + " tensors (valid: " + std::to_string(-n) + " to " +
                                           std::to_string(hi) + ")");
  return p[0] < 0 ? p[0] + n : p[0];
}

// A tensor joining a sequence must have its dtype.
void check_seq_dtype(Ctx& ctx, const std::optional<DType>& want, const Value& t, size_t input) {
  if (want && t.dtype() != *want)
    ctx.fail(Errc::dtype_mismatch, "input " + std::to_string(input) + " ('" +
                                       ctx.node().input(static_cast<int>(input)) + "') is " +
                                       std::string(name_of(t.dtype())) + ", the sequence holds " +
                                       std::string(name_of(*want)) + " (a sequence holds one dtype)");
}

Outs sequence_construct(Ctx& ctx) {
  std::vector<Value> items;
  std::optional<DType> dt;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Value& t = ctx.in(i);
    check_seq_dtype(ctx, dt, t, i);
    dt = t.dtype();
    items.push_back(t);
  }
  return Outs{Value::sequence(std::move(items), dt)};
}

Outs sequence_empty(Ctx& ctx) {
  const auto onnx_type = static_cast<int32_t>(ctx.attr_i("dtype", ::onnx::TensorProto::FLOAT));
  auto dt = to_dtype(onnx_type);
  if (!dt) ctx.fail(Errc::unsupported, "dtype " + onnx_type_name(onnx_type) + ", which Switchyard lacks");
  return Outs{Value::sequence({}, dt)};
}

Outs sequence_insert(Ctx& ctx) {
  Value seq = seq_input(ctx, 0);
  const Value& t = ctx.in(1);
  check_seq_dtype(ctx, seq_dtype(seq), t, 1);
  const auto n = static_cast<int64_t>(seq.items.size());
  const int64_t at = ctx.has(2) ? seq_position(ctx, 2, n, true) : n;
  seq.items.insert(seq.items.begin() + at, t);
  seq.elem_dtype = t.dtype();
  return Outs{std::move(seq)};
}

Outs sequence_erase(Ctx& ctx) {
  Value seq = seq_input(ctx, 0);
  const auto n = static_cast<int64_t>(seq.items.size());
  if (n == 0) ctx.fail(Errc::index_out_of_range, "cannot erase from an empty sequence");
  const int64_t at = ctx.has(1) ? seq_position(ctx, 1, n, false) : n - 1;
  seq.elem_dtype = seq_dtype(seq);
  seq.items.erase(seq.items.begin() + at);
  return Outs{std::move(seq)};
}

Outs sequence_at(Ctx& ctx) {
  const Value& seq = seq_input(ctx, 0);
  const int64_t at = seq_position(ctx, 1, static_cast<int64_t>(seq.items.size()), false);
  return Outs{seq.items[static_cast<size_t>(at)]};
}

Outs sequence_length(Ctx& ctx) {
  return Outs{host_value(host_ints({static_cast<int64_t>(seq_input(ctx, 0).items.size())}, {}))};
}

// SplitToSequence: pieces of one along the axis (dropped unless keepdims)
// without `split`; chunks of `split` (a scalar; the last may be shorter) or
// the sizes `split` lists (which must add up to the axis).
Outs split_to_sequence(Ctx& ctx) {
  const Value& x = ctx.in(0);
  const Shape& s = x.shape();
  const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), s.rank());
  const int64_t len = s[axis];
  Ints sizes;
  bool squeeze = false;
  if (!ctx.has(1)) {
    sizes.assign(static_cast<size_t>(len), 1);
    squeeze = ctx.attr_i("keepdims", 1) == 0;
  } else if (ctx.in(1).shape().rank() == 0) {
    const int64_t chunk = ctx.ints(1).at(0);
    if (chunk <= 0) ctx.fail(Errc::invalid_argument, "split " + std::to_string(chunk) + " must be positive");
    for (int64_t at = 0; at < len; at += chunk) sizes.push_back(std::min(chunk, len - at));
  } else {
    sizes = ctx.ints(1);
    int64_t sum = 0;
    for (auto n : sizes) {
      if (n < 0) ctx.fail(Errc::invalid_argument, "split sizes must not be negative");
      sum += n;
    }
    if (sum != len)
      ctx.fail(Errc::shape_mismatch,
               "split sizes add up to " + std::to_string(sum) + ", the axis has " + std::to_string(len));
  }
  std::vector<Value> items;
  int64_t at = 0;
  for (auto n : sizes) {
    Value piece = slice_value(ctx, x, {at}, {at + n}, {axis}, {1});
    if (squeeze) {
      Ints dims = piece.shape().dims;
      dims.erase(dims.begin() + axis);
      piece = do_reshape(ctx, piece, dims, true);
    }
    items.push_back(std::move(piece));
    at += n;
  }
  return Outs{Value::sequence(std::move(items), x.dtype())};
}

// ConcatFromSequence: Concat of the elements along `axis`, or stacked along
// a new axis (new_axis=1, where axis may be rank: the end).
Outs concat_from_sequence(Ctx& ctx) {
  const Value& seq = seq_input(ctx, 0);
  const auto* a = ctx.attr("axis");
  if (a == nullptr) ctx.fail(Errc::invalid_argument, "attribute 'axis' is required");
  if (seq.items.empty())
    ctx.fail(Errc::invalid_argument, "input 0 ('" + ctx.node().input(0) + "') is an empty sequence");
  const auto& first = seq.items.front();
  for (size_t k = 1; k < seq.items.size(); ++k)
    if (seq.items[k].dtype() != first.dtype())
      ctx.fail(Errc::dtype_mismatch, "element " + std::to_string(k) + " is " +
                                         std::string(name_of(seq.items[k].dtype())) + ", element 0 is " +
                                         std::string(name_of(first.dtype())));
  const size_t rank = first.shape().rank();
  // new_axis: each element unsqueezed at the axis (which may be rank: the
  // end), then concatenated there; shapes must then agree but for the axis.
  const bool stack = ctx.attr_i("new_axis", 0) != 0;
  if (!stack && rank == 0) ctx.fail(Errc::invalid_argument, "cannot concatenate scalars (without new_axis)");
  const int64_t axis = axis_of(ctx, a->i(), stack ? rank + 1 : rank);
  std::vector<Value> items = seq.items;
  if (stack)
    for (auto& v : items) v = unsqueeze_value(ctx, v, {axis});
  const Shape& s0 = items.front().shape();
  for (size_t k = 1; k < items.size(); ++k) {
    const Shape& sk = items[k].shape();
    bool ok = sk.rank() == s0.rank();
    for (size_t d = 0; ok && d < s0.rank(); ++d) ok = static_cast<int64_t>(d) == axis || sk[d] == s0[d];
    if (!ok)
      ctx.fail(Errc::shape_mismatch,
               "element " + std::to_string(k) + " has shape " + seq.items[k].shape().to_string() + ", element 0 " +
                   first.shape().to_string() +
                   (stack ? " (stacked elements must agree)" : " (only axis " + std::to_string(axis) + " may differ)"));
  }
  bool host = true;
  int64_t total = 0;
  for (const auto& v : items) {
    host = host && v.host.has_value();
    total += v.shape().numel();
  }
  if (host && total <= kHostMax) {
    std::vector<const TensorData*> parts;
    parts.reserve(items.size());
    for (const auto& v : items) parts.push_back(&*v.host);
    return Outs{host_value(host_concat(parts, axis))};
  }
  std::vector<Tensor> parts;
  for (const auto& v : items) {
    Tensor t = v.dev.defined() ? v.dev : ctx.device().from_data(*v.host);
    parts.push_back(t.device() == ctx.device() ? t : t.to(ctx.device()));
  }
  return Outs{dev_value(cat(parts, axis))};
}

// SequenceMap: the body once per element of the first input; every other
// input that is a sequence (of the same length) gives its element too, a
// tensor is given whole. Output j collects the body's output j.
Outs sequence_map(Ctx& ctx) {
  const Value& first = seq_input(ctx, 0);
  const size_t n = first.items.size();
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    const Value& v = ctx.value(i);
    if (v.kind == Value::Kind::none)
      ctx.fail(Errc::invalid_argument, "input " + std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(i)) +
                                           "') is an empty optional");
    if (v.kind == Value::Kind::sequence && v.items.size() != n)
      ctx.fail(Errc::shape_mismatch, "input " + std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(i)) +
                                         "') holds " + std::to_string(v.items.size()) + " tensors, input 0 holds " +
                                         std::to_string(n));
  }
  const auto outputs = static_cast<size_t>(ctx.node().output_size());
  std::vector<std::vector<Value>> collected(outputs);
  for (size_t k = 0; k < n; ++k) {
    Values in;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      const Value& v = ctx.value(i);
      in.push_back(v.kind == Value::Kind::sequence ? v.items[k] : v);
    }
    Values out = expect_outputs(ctx, ctx.run_subgraph("body", std::move(in)), outputs, "body");
    for (size_t j = 0; j < outputs; ++j) {
      if (!out[j].is_tensor())
        ctx.fail(Errc::invalid_argument,
                 "the body's output " + std::to_string(j) + " is " + out[j].kind_name() + ", expected a tensor");
      collected[j].push_back(std::move(out[j]));
    }
  }
  Outs result;
  for (auto& items : collected) {
    std::optional<DType> dt;
    if (!items.empty()) dt = items.front().dtype();
    result.push_back(Value::sequence(std::move(items), dt));
  }
  return result;
}

Outs optional_node(Ctx& ctx) {
  if (ctx.has(0)) return Outs{ctx.value(0)};
  if (ctx.attr("type") == nullptr)
    ctx.fail(Errc::invalid_argument, "an Optional without an input needs the attribute 'type'");
  return Outs{Value::none()};
}

Outs optional_has_element(Ctx& ctx) {
  const bool has = ctx.has(0) && ctx.value(0).kind != Value::Kind::none;
  return Outs{host_value(host_ints({has ? 1 : 0}, {}, DType::boolean))};
}

Outs optional_get_element(Ctx& ctx) {
  const Value& v = ctx.value(0);
  if (v.kind == Value::Kind::none)
    ctx.fail(Errc::invalid_argument, "input 0 ('" + ctx.node().input(0) + "') is an empty optional");
  return Outs{v};
}

// --- spectral ops (opset 17): the DFT as two matmuls against cos and
// sin matrices computed on the host from the (static) lengths ---

// The DFT of re (+ i im) along the last axis, zero-padded or cut to n
// points; `bins` outputs (n, or n / 2 + 1 one-sided). Returns [..., bins, 2].
Tensor dft_last_axis(Ctx& ctx, Tensor re, Tensor im, int64_t n, int64_t bins, bool inverse) {
  const int64_t len = re.shape()[re.rank() - 1];
  const auto last = static_cast<int64_t>(re.rank()) - 1;
  auto fit = [&](const Tensor& t) {
    if (len == n) return t;
    if (len > n) return t.slice(last, Slice{0, n});
    Ints before(t.rank(), 0), after(t.rank(), 0);
    after[static_cast<size_t>(last)] = n - len;
    return t.pad(before, after);
  };
  re = fit(re);
  if (im.defined()) im = fit(im);
  // W[j, k] = exp(-+ 2 pi i j k / n) = c + i d; inverse also scales by 1/n.
  std::vector<double> c, d;
  const double sign = inverse ? 1 : -1, scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = 0; k < bins; ++k) {
      // j * k mod n keeps the angle small, so large products stay exact.
      const double theta = 2 * std::numbers::pi * static_cast<double>((j * k) % n) / static_cast<double>(n);
      c.push_back(std::cos(theta) * scale);
      d.push_back(sign * std::sin(theta) * scale);
    }
  const DType t = re.dtype();
  Tensor cm = ctx.device().from_data(host_doubles(c, {n, bins}, t));
  Tensor dm = ctx.device().from_data(host_doubles(d, {n, bins}, t));
  Tensor out_re = re.matmul(cm), out_im = re.matmul(dm);
  if (im.defined()) {
    out_re = out_re.sub(im.matmul(dm));
    out_im = out_im.add(im.matmul(cm));
  }
  return stack({out_re, out_im}, -1);
}

// x [..., 1 or 2] as its real part and (for complex input) imaginary part.
std::pair<Tensor, Tensor> complex_parts(Ctx& ctx, const Tensor& x) {
  const auto r = static_cast<int64_t>(x.rank());
  const int64_t comp = r > 0 ? x.shape()[r - 1] : 0;
  if (r < 2 || (comp != 1 && comp != 2))
    ctx.fail(Errc::shape_mismatch,
             "input must end in an axis of 1 (real) or 2 (complex), got " + x.shape().to_string());
  if (!is_floating(x.dtype()))
    ctx.fail(Errc::dtype_mismatch, "input must be floating, got " + std::string(name_of(x.dtype())));
  Tensor re = x.slice(r - 1, Slice{0, 1}).squeeze(r - 1);
  return {re, comp == 2 ? x.slice(r - 1, Slice{1, 2}).squeeze(r - 1) : Tensor()};
}

Outs dft_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  auto [re, im] = complex_parts(ctx, x);
  const auto rank = static_cast<int64_t>(re.rank());  // without the complex axis
  // A negative axis counts from the back of the input, complex axis
  // included (so -2 is the last signal axis).
  const int64_t given = ctx.attr_i("axis", 1), axis = given < 0 ? given + rank + 1 : given;
  if (axis < 0 || axis >= rank)
    ctx.fail(Errc::invalid_argument, "axis " + std::to_string(given) + " for input " + x.shape().to_string());
  const bool inverse = ctx.attr_i("inverse", 0) != 0, onesided = ctx.attr_i("onesided", 0) != 0;
  const int64_t n = ctx.has(1) && ctx.in(1).shape().numel() > 0 ? ctx.ints(1).at(0) : re.shape()[axis];
  if (n < 1) ctx.fail(Errc::invalid_argument, "dft_length " + std::to_string(n));
  if (onesided && inverse) ctx.fail(Errc::unsupported, "onesided with inverse");
  auto to_last = [&](const Tensor& t) { return axis == rank - 1 ? t : t.transpose(axis, rank - 1); };
  re = to_last(re);
  if (im.defined()) im = to_last(im);
  Tensor y = dft_last_axis(ctx, re, im, n, onesided ? n / 2 + 1 : n, inverse);  // [..., bins, 2]
  return Outs{dev_value(axis == rank - 1 ? y : y.transpose(axis, rank - 1))};
}

// STFT: frames of frame_length every frame_step samples, times the
// window, each transformed (one-sided by default).
Outs stft_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  auto [re, im] = complex_parts(ctx, x);
  if (re.rank() != 2)
    ctx.fail(Errc::shape_mismatch, "signal must be [batch, length, 1 or 2], got " + x.shape().to_string());
  const int64_t step = ctx.ints(1).at(0);
  Tensor window = ctx.has(2) ? ctx.dev(2) : Tensor();
  int64_t frame = ctx.has(3) ? ctx.ints(3).at(0) : -1;
  if (window.defined()) {
    if (window.rank() != 1) ctx.fail(Errc::shape_mismatch, "window must be 1-D, got " + window.shape().to_string());
    if (frame >= 0 && frame != window.shape()[0])
      ctx.fail(Errc::shape_mismatch,
               "frame_length " + std::to_string(frame) + " and a window of " + std::to_string(window.shape()[0]));
    frame = window.shape()[0];
  }
  const int64_t length = re.shape()[1];
  if (frame < 1 || frame > length || step < 1)
    ctx.fail(Errc::invalid_argument, "frame_length " + std::to_string(frame) + " and frame_step " +
                                         std::to_string(step) + " for a signal of " + std::to_string(length));
  const int64_t frames = 1 + (length - frame) / step, batch = re.shape()[0];
  Ints index;
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t k = 0; k < frame; ++k) index.push_back(f * step + k);
  Tensor idx = ctx.device().from_data(host_ints(index, {frames * frame}));
  auto framed = [&](const Tensor& t) {
    Tensor v = t.index_select(1, idx).reshape({batch, frames, frame});
    return window.defined() ? v.mul(window.cast(v.dtype())) : v;
  };
  const bool onesided = ctx.attr_i("onesided", 1) != 0;
  return Outs{dev_value(dft_last_axis(ctx, framed(re), im.defined() ? framed(im) : Tensor(), frame,
                                      onesided ? frame / 2 + 1 : frame, false))};
}

// MelWeightMatrix as ONNX's reference computes it (mel edges spaced by
// (high - low) / (bins + 2), bin indices floor((dft_length + 1) f / rate)),
// on the host.
Outs mel_weight_matrix_node(Ctx& ctx) {
  auto one = [&](size_t i) { return ctx.host(i).at(0); };
  const auto mels = static_cast<int64_t>(one(0)), dft = static_cast<int64_t>(one(1));
  const double rate = one(2);
  const float lower = static_cast<float>(one(3)), upper = static_cast<float>(one(4));
  if (mels < 1 || dft < 1 || rate <= 0)
    ctx.fail(Errc::invalid_argument, "num_mel_bins, dft_length and sample_rate must be positive");
  const int64_t spectrum = dft / 2 + 1;
  // The edges' mels in f32, as the reference's f32 inputs make numpy do.
  auto mel = [](float hz) { return 2595.0f * std::log10(1.0f + hz / 700.0f); };
  const float low = mel(lower), high = mel(upper);
  const double step = static_cast<double>(high - low) / static_cast<double>(mels + 2);
  Ints edge;
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700 * (std::pow(10.0, (static_cast<double>(i) * step + low) / 2595) - 1);
    edge.push_back(static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / rate)));
  }
  std::vector<double> w(static_cast<size_t>(spectrum * mels), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& {
    if (j < 0 || j >= spectrum)
      ctx.fail(Errc::invalid_argument,
               "mel band edge " + std::to_string(j) + " beyond the " + std::to_string(spectrum) + " spectrum bins");
    return w[static_cast<size_t>(j * mels + i)];
  };
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t lo = edge[i], mid = edge[i + 1], hi = edge[i + 2];
    if (mid == lo)
      at(mid, i) = 1;
    else
      for (int64_t j = lo; j <= mid; ++j) at(j, i) = static_cast<double>(j - lo) / static_cast<double>(mid - lo);
    if (hi > mid)
      for (int64_t j = mid; j < hi; ++j) at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - mid);
  }
  const DType to = *to_dtype(static_cast<int32_t>(ctx.attr_i("output_datatype", 1)));
  return Outs{host_or_dev(ctx, host_doubles(w, {spectrum, mels}, to))};
}

// BitShift on u8 (the only unsigned dtype Switchyard has): through f64,
// where x * 2^y and floor(x / 2^y) are exact; shifts of 8 or more give 0.
Outs bit_shift_node(Ctx& ctx) {
  Tensor x = ctx.dev(0), y = ctx.dev(1);
  if (x.dtype() != DType::u8 || y.dtype() != DType::u8)
    ctx.fail(Errc::dtype_mismatch,
             "x and y must be u8, got " + std::string(name_of(x.dtype())) + " and " + std::string(name_of(y.dtype())));
  Tensor p = ctx.device().full({}, 2, DType::f64).pow(y.cast(DType::f64).clamp(0, 8));
  Tensor xf = x.cast(DType::f64);
  const bool left = ctx.attr_s("direction", "") == "LEFT";
  Tensor r = left ? xf.mul(p).remainder(Scalar(256.0)) : xf.div(p).floor();
  return Outs{dev_value(r.cast(DType::u8))};
}

// --- TfIdfVectorizer over integer tokens: every pool n-gram counted by
// comparing shifted slices of X with its tokens (the pool is a fixed,
// small attribute), then scattered to its output index by a matmul ---

std::string tfidf_check(const ::onnx::NodeProto& n, int64_t) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "pool_strings") return "attribute 'pool_strings' (string tokens)";
    if (a.name() == "mode" && a.s() != "TF" && a.s() != "IDF" && a.s() != "TFIDF")
      return "mode='" + a.s() + "' (TF, IDF or TFIDF)";
  }
  return "";
}

// Counts as ONNX's reference (ONNX Runtime's kernel) does: an n-gram of
// n >= 2 at every skip distance d in 1 .. max_skip_count + 1 (tokens d
// apart), a unigram once.
Outs tfidf_node(Ctx& ctx) {
  Tensor x = ctx.dev(0);
  if (x.dtype() != DType::i32 && x.dtype() != DType::i64)
    ctx.fail(Errc::dtype_mismatch, "X must be i32 or i64, got " + std::string(name_of(x.dtype())));
  if (x.rank() != 1 && x.rank() != 2)
    ctx.fail(Errc::shape_mismatch, "X must be [C] or [N, C], got " + x.shape().to_string());
  const bool batched = x.rank() == 2;
  const int64_t rows = batched ? x.shape()[0] : 1, len = x.shape()[x.rank() - 1];
  x = x.cast(DType::i64).reshape({rows, len});
  const Ints pool = ctx.attr_ints("pool_int64s").value_or(Ints{});
  const Ints starts = ctx.attr_ints("ngram_counts").value_or(Ints{});
  const Ints indexes = ctx.attr_ints("ngram_indexes").value_or(Ints{});
  const int64_t min_n = ctx.attr_i("min_gram_length", 1), max_n = ctx.attr_i("max_gram_length", 1);
  const int64_t max_skip = ctx.attr_i("max_skip_count", 0);
  if (starts.empty() || indexes.empty() || min_n < 1 || max_n < min_n || max_skip < 0)
    ctx.fail(Errc::invalid_argument, "ngram_counts, ngram_indexes, min/max_gram_length or max_skip_count is off");
  const int64_t out_size = *std::max_element(indexes.begin(), indexes.end()) + 1;
  const Device& d = ctx.device();
  std::vector<Tensor> counts;   // per n-gram length present in the pool: [rows, grams]
  size_t entry = 0;             // n-grams so far (their position in ngram_indexes)
  std::vector<double> scatter;  // [entries, out_size] one-hot
  for (size_t k = 0; k < starts.size(); ++k) {
    const auto n = static_cast<int64_t>(k) + 1;
    const int64_t begin = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size()) || (end - begin) % n != 0)
      ctx.fail(Errc::invalid_argument, "ngram_counts does not split pool_int64s into " + std::to_string(n) + "-grams");
    const int64_t grams = (end - begin) / n;
    if (grams == 0) continue;
    Tensor c;
    if (n >= min_n && n <= max_n)
      for (int64_t dist = 1; dist <= (n == 1 ? 1 : max_skip + 1); ++dist) {
        const int64_t positions = len - (n - 1) * dist;
        if (positions <= 0) break;
        Tensor hit;
        for (int64_t j = 0; j < n; ++j) {
          Ints tokens;
          for (int64_t g = 0; g < grams; ++g) tokens.push_back(pool[static_cast<size_t>(begin + g * n + j)]);
          Tensor at = x.slice(1, Slice{j * dist, j * dist + positions}).reshape({rows, positions, 1});
          Tensor eq = at.eq(d.from_data(host_ints(tokens, {1, 1, grams})));
          hit = hit.defined() ? hit.logical_and(eq) : eq;
        }
        Tensor sum = hit.cast(DType::f32).sum({1});
        c = c.defined() ? c.add(sum) : sum;
      }
    counts.push_back(c.defined() ? c : d.zeros({rows, grams}));
    for (int64_t g = 0; g < grams; ++g, ++entry) {
      if (entry >= indexes.size()) ctx.fail(Errc::invalid_argument, "fewer ngram_indexes than n-grams in the pool");
      std::vector<double> row(static_cast<size_t>(out_size), 0.0);
      row[static_cast<size_t>(indexes[entry])] = 1;
      scatter.insert(scatter.end(), row.begin(), row.end());
    }
  }
  const auto entries = static_cast<int64_t>(entry);
  Tensor y = cat(counts, 1).matmul(d.from_data(host_doubles(scatter, {entries, out_size}, DType::f32)));
  const std::string mode = ctx.attr_s("mode", "TF");
  if (mode != "TF") {
    auto a = ctx.attr("weights");
    std::vector<double> wv = a ? std::vector<double>(a->floats().begin(), a->floats().end())
                               : std::vector<double>(static_cast<size_t>(out_size), 1.0);
    if (static_cast<int64_t>(wv.size()) != out_size)
      ctx.fail(Errc::invalid_argument,
               "weights has " + std::to_string(wv.size()) + " entries for " + std::to_string(out_size) + " outputs");
    Tensor w = d.from_data(host_doubles(wv, {1, out_size}, DType::f32));
    y = mode == "TFIDF" ? y.mul(w) : where(y.gt(Scalar(0.0)), w, d.zeros({}, DType::f32));
  }
  return Outs{dev_value(batched ? y : y.reshape({out_size}))};
}

std::map<std::string, OpSpec, std::less<>> build_table() {
  std::map<std::string, OpSpec, std::less<>> t;
  // --- element-wise unary, direct ---
  t["Abs"] = unary(UnaryKind::abs);
  t["Neg"] = {{}, nullptr, [](Ctx& ctx) {
                if (host_small(ctx) && !is_floating(ctx.in(0).dtype())) {
                  auto v = ctx.ints(0);
                  for (auto& x : v) x = -x;
                  return Outs{host_value(host_ints(v, ctx.in(0).shape(), ctx.in(0).dtype()))};
                }
                return Outs{dev_value(ctx.dev(0).neg())};
              }};
  t["Exp"] = unary(UnaryKind::exp);
  t["Log"] = unary(UnaryKind::log);
  t["Sqrt"] = unary(UnaryKind::sqrt);
  t["Reciprocal"] = unary(UnaryKind::reciprocal);
  t["Sin"] = unary(UnaryKind::sin);
  t["Cos"] = unary(UnaryKind::cos);
  t["Tanh"] = unary(UnaryKind::tanh);
  t["Sigmoid"] = unary(UnaryKind::sigmoid);
  t["Relu"] = unary(UnaryKind::relu);
  t["Erf"] = unary(UnaryKind::erf);
  // On the host for small host values (sizes computed in floats, as
  // Resize's from scales), so a plan stays cacheable.
  auto rounding = [](UnaryKind k, double (*f)(double)) -> OpSpec {
    return {{}, nullptr, [k, f](Ctx& ctx) {
              if (host_small(ctx) && is_floating(ctx.in(0).dtype())) {
                std::vector<double> v = ctx.host(0).to_vector<double>();
                for (auto& x : v) x = f(x);
                return Outs{host_value(host_doubles(v, ctx.in(0).shape(), ctx.in(0).dtype()))};
              }
              return Outs{dev_value(ctx.dev(0).unary(k))};
            }};
  };
  t["Floor"] = rounding(UnaryKind::floor, [](double x) { return std::floor(x); });
  t["Ceil"] = rounding(UnaryKind::ceil, [](double x) { return std::ceil(x); });
  t["Round"] = unary(UnaryKind::round);
  // NaN stays NaN, as numpy and ONNX Runtime give it (the runtime's sign,
  // as PyTorch's, maps NaN to 0).
  t["Sign"] = composed([](Ctx&, const Tensor& x) {
    Tensor s = x.sign();
    return is_floating(x.dtype()) ? where(x.isnan(), x, s) : s;
  });
  t["Not"] = unary(UnaryKind::logical_not);
  t["IsNaN"] = unary(UnaryKind::isnan);
  t["IsInf"] = composed(
      [](Ctx& ctx, const Tensor& x) {
        Tensor inf = x.isinf();
        const bool neg = ctx.attr_i("detect_negative", 1) != 0, pos = ctx.attr_i("detect_positive", 1) != 0;
        if (neg && pos) return inf;
        if (!neg && !pos) return inf.logical_and(Scalar(false));
        return inf.logical_and(pos ? x.gt(Scalar(0.0)) : x.lt(Scalar(0.0)));
      },
      {"detect_negative", "detect_positive"});
  // --- element-wise unary, composed ---
  t["Tan"] = composed([](Ctx&, const Tensor& x) { return x.sin().div(x.cos()); });
  t["Atan"] = composed([](Ctx&, const Tensor& x) { return x.atan2(scalar_for(x.dtype(), 1)); });
  t["Asin"] =
      composed([](Ctx&, const Tensor& x) { return x.atan2(x.mul(x).neg().add(scalar_for(x.dtype(), 1)).sqrt()); });
  t["Acos"] =
      composed([](Ctx&, const Tensor& x) { return x.mul(x).neg().add(scalar_for(x.dtype(), 1)).sqrt().atan2(x); });
  t["Sinh"] = composed([](Ctx&, const Tensor& x) { return hyperbolic(x, sinh_of); });
  t["Cosh"] = composed([](Ctx&, const Tensor& x) { return hyperbolic(x, cosh_of); });
  t["Asinh"] = composed([](Ctx&, const Tensor& x) { return hyperbolic(x, asinh_of); });
  t["Acosh"] = composed([](Ctx&, const Tensor& x) { return hyperbolic(x, acosh_of); });
  t["Atanh"] = composed([](Ctx&, const Tensor& x) {
    Scalar one = scalar_for(x.dtype(), 1);
    return x.add(one).div(x.neg().add(one)).log().mul(scalar_for(x.dtype(), 0.5));
  });
  t["Softsign"] = composed([](Ctx&, const Tensor& x) { return softsign(x); });
  t["Softplus"] = composed([](Ctx&, const Tensor& x) { return softplus(x); });
  t["Mish"] = composed([](Ctx&, const Tensor& x) { return x.mul(softplus(x).tanh()); });
  t["LeakyRelu"] =
      composed([](Ctx& ctx, const Tensor& x) { return leaky_relu(x, ctx.attr_f("alpha", 0.01f)); }, {"alpha"});
  t["Elu"] = composed([](Ctx& ctx, const Tensor& x) { return elu(x, ctx.attr_f("alpha", 1.0f)); }, {"alpha"});
  t["Selu"] = composed(
      [](Ctx& ctx, const Tensor& x) {
        const double alpha = ctx.attr_f("alpha", 1.67326319217681884765625f);
        const double gamma = ctx.attr_f("gamma", 1.05070102214813232421875f);
        return where(x.le(Scalar(0.0)), x.expm1().mul(scalar_for(x.dtype(), alpha)), x)
            .mul(scalar_for(x.dtype(), gamma));
      },
      {"alpha", "gamma"});
  t["Celu"] = composed(
      [](Ctx& ctx, const Tensor& x) {
        const double alpha = ctx.attr_f("alpha", 1.0f);
        Tensor neg = x.div(scalar_for(x.dtype(), alpha)).expm1().mul(scalar_for(x.dtype(), alpha)).clamp_max(0);
        return x.relu().add(neg);
      },
      {"alpha"});
  t["ThresholdedRelu"] =
      composed([](Ctx& ctx, const Tensor& x) { return thresholded_relu(x, ctx.attr_f("alpha", 1.0f)); }, {"alpha"});
  t["HardSigmoid"] = composed(
      [](Ctx& ctx, const Tensor& x) { return hard_sigmoid(x, ctx.attr_f("alpha", 0.2f), ctx.attr_f("beta", 0.5f)); },
      {"alpha", "beta"});
  t["HardSwish"] = composed([](Ctx&, const Tensor& x) {
    return x.mul(x.mul(scalar_for(x.dtype(), 1.0 / 6)).add(scalar_for(x.dtype(), 0.5)).clamp(0, 1));
  });
  t["Shrink"] = composed(
      [](Ctx& ctx, const Tensor& x) {
        const double bias = ctx.attr_f("bias", 0), lambd = ctx.attr_f("lambd", 0.5f);
        Tensor zero = zeros_like_scalar(x);
        Tensor hi = where(x.gt(Scalar(lambd)), x.sub(scalar_for(x.dtype(), bias)), zero);
        return where(x.lt(Scalar(-lambd)), x.add(scalar_for(x.dtype(), bias)), hi);
      },
      {"bias", "lambd"});
  t["PRelu"] = {{}, nullptr, [](Ctx& ctx) {
                  Tensor x = ctx.dev(0), slope = ctx.dev(1);
                  // Before opset 7 a 1-D slope of extent C applied along axis 1.
                  if (ctx.opset() < 7 && slope.rank() == 1 && x.rank() > 2 && slope.shape()[0] == x.shape()[1])
                    slope = per_channel(slope, x.rank());
                  return Outs{dev_value(where(x.lt(Scalar(0.0)), x.mul(slope), x))};
                }};
  t["Clip"] = {{"min", "max"}, nullptr, [](Ctx& ctx) {
                 Tensor x = ctx.dev(0);
                 double lo = NAN, hi = NAN;
                 if (ctx.opset() < 11) {
                   if (auto a = ctx.attr("min")) lo = a->f();
                   if (auto a = ctx.attr("max")) hi = a->f();
                 } else {
                   if (ctx.has(1)) lo = ctx.host(1).at(0);
                   if (ctx.has(2)) hi = ctx.host(2).at(0);
                 }
                 if (std::isnan(lo) && std::isnan(hi)) return Outs{dev_value(x)};
                 if (!is_floating(x.dtype()) && ctx.opset() >= 11) {
                   // Integer bounds as integers: through a double, a bound
                   // above 2^53 would move. min(max(x, lo), hi), as clamp.
                   if (ctx.has(1)) x = x.binary(BinaryKind::maximum, Scalar(ctx.host(1).to_vector<int64_t>().at(0)));
                   if (ctx.has(2)) x = x.binary(BinaryKind::minimum, Scalar(ctx.host(2).to_vector<int64_t>().at(0)));
                   return Outs{dev_value(x)};
                 }
                 return Outs{dev_value(x.clamp(lo, hi))};
               }};
  // --- binary ---
  t["Add"] = binary(BinaryKind::add, "Add");
  t["Sub"] = binary(BinaryKind::sub, "Sub");
  t["Mul"] = binary(BinaryKind::mul, "Mul");
  t["Div"] = {kLegacyBroadcast, legacy_broadcast_check, [](Ctx& ctx) {
                if (!legacy_broadcast(ctx))
                  if (auto h = host_binary(ctx, "Div")) return Outs{*h};
                Tensor a = ctx.dev(0), b = rhs_operand(ctx);
                if (!is_floating(a.dtype())) return Outs{dev_value(int_div(a, b))};
                return Outs{dev_value(a.div(b))};
              }};
  t["Pow"] = {kLegacyBroadcast, legacy_broadcast_check, [](Ctx& ctx) {
                Tensor a = ctx.dev(0);
                // x^2 with a constant 2 (exported LayerNorms' variance) as x * x:
                // one rounding, as a correctly rounded pow, without libm's pow.
                if (ctx.is_host(1) && ctx.host(1).shape.numel() == 1 && ctx.host(1).at(0) == 2.0 &&
                    is_floating(a.dtype()) && ctx.in(1).shape().rank() <= a.shape().rank())
                  return Outs{dev_value(a.mul(a))};
                Tensor r = a.pow(rhs_operand(ctx));
                return Outs{dev_value(r.dtype() == a.dtype() ? r : r.cast(a.dtype()))};
              }};
  t["Mod"] = {{"fmod"}, nullptr, [](Ctx& ctx) {
                // Integer shape arithmetic (window padding: size % window) on the host.
                if (ctx.all_host() && !is_floating(ctx.in(0).dtype()) && !is_floating(ctx.in(1).dtype()))
                  if (auto h = host_binary(ctx, ctx.attr_i("fmod", 0) == 0 ? "Mod" : "FMod")) return Outs{*h};
                Tensor a = ctx.dev(0), b = ctx.dev(1);
                if (ctx.attr_i("fmod", 0) == 0) return Outs{dev_value(a.remainder(b))};
                if (!is_floating(a.dtype())) return Outs{dev_value(int_fmod(a, b))};
                // C fmod: the sign of the dividend.
                Tensor af = a.cast(DType::f64), bf = b.cast(DType::f64);
                Tensor q = af.div(bf);
                Tensor r = af.sub(q.abs().floor().mul(q.sign()).mul(bf));
                return Outs{dev_value(r.cast(a.dtype()))};
              }};
  t["Equal"] = binary(BinaryKind::eq, "Equal");
  t["Less"] = binary(BinaryKind::lt, "Less");
  t["LessOrEqual"] = binary(BinaryKind::le, "LessOrEqual");
  t["Greater"] = binary(BinaryKind::gt, "Greater");
  t["GreaterOrEqual"] = binary(BinaryKind::ge, "GreaterOrEqual");
  t["And"] = binary(BinaryKind::logical_and, "And");
  t["Or"] = binary(BinaryKind::logical_or, "Or");
  t["Xor"] = binary(BinaryKind::logical_xor, "Xor");
  t["Max"] = variadic(BinaryKind::maximum, false);
  t["Min"] = variadic(BinaryKind::minimum, false);
  t["Sum"] = variadic(BinaryKind::add, false);
  t["Mean"] = variadic(BinaryKind::add, true);
  t["Where"] = {{}, nullptr, [](Ctx& ctx) {
                  if (host_small(ctx)) {
                    const TensorData &c = ctx.host(0), &a = ctx.host(1), &b = ctx.host(2);
                    auto s1 = broadcast_shapes(c.shape, a.shape);
                    auto s = s1 ? broadcast_shapes(*s1, b.shape) : std::nullopt;
                    if (s && a.dtype == b.dtype) {
                      auto ce = host_expand(c, *s), ae = host_expand(a, *s), be = host_expand(b, *s);
                      auto cv = ce.to_vector<int64_t>();
                      const size_t es = size_of(a.dtype);
                      Bytes out = Bytes::allocate(static_cast<size_t>(s->numel()) * es);
                      for (size_t k = 0; k < cv.size(); ++k)
                        std::memcpy(out.mutable_data() + k * es, (cv[k] ? ae : be).bytes.as<const std::byte>() + k * es,
                                    es);
                      return Outs{host_value(TensorData(*s, a.dtype, std::move(out)))};
                    }
                  }
                  return Outs{dev_value(where(ctx.dev(0), ctx.dev(1), ctx.dev(2)))};
                }};
  // --- dtype ---
  t["Cast"] = {{"to", "saturate"}, dtype_attribute_check("to", "cast to"), [](Ctx& ctx) {
                 DType to = *to_dtype(static_cast<int32_t>(ctx.attr_i("to", 1)));
                 if (host_small(ctx)) return Outs{host_value(host_cast(ctx.host(0), to))};
                 return Outs{dev_value(ctx.dev(0).cast(to))};
               }};
  t["CastLike"] = {{"saturate"}, nullptr, [](Ctx& ctx) {
                     DType to = ctx.in(1).dtype();
                     if (host_small(ctx)) return Outs{host_value(host_cast(ctx.host(0), to))};
                     return Outs{dev_value(ctx.dev(0).cast(to))};
                   }};
  // --- constants and shapes (host) ---
  t["Identity"] = {{}, nullptr, [](Ctx& ctx) { return Outs{ctx.value(0)}; }};
  t["Dropout"] = {{"ratio", "seed", "is_test"},
                  [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                    for (const auto& a : n.attribute())
                      if (a.name() == "is_test" && a.i() == 0) return "is_test=0 (training dropout)";
                    return "";
                  },
                  [](Ctx& ctx) {
                    // Training mode keeps each element with probability
                    // 1 - ratio (0.5 by default), from the device's random
                    // stream, and scales it by 1 / (1 - ratio): y = mask * x
                    // * scale as ONNX's reference (a dropped NaN stays NaN).
                    // At ratio 0 it is the identity with a mask of all true.
                    if (ctx.has(2) && ctx.host(2).at(0) != 0) {
                      const double ratio = ctx.has(1) ? ctx.host(1).at(0) : 0.5;
                      if (!(ratio >= 0 && ratio < 1))
                        ctx.fail(Errc::invalid_argument,
                                 "ratio " + std::to_string(ratio) + " in training mode must lie in [0, 1)");
                      if (ratio != 0) {
                        Tensor x = ctx.dev(0);
                        Tensor keep = ctx.device().uniform(x.shape(), 0, 1, DType::f64).ge(ratio);
                        Outs out{dev_value(keep.cast(x.dtype()).mul(x).mul(1.0 / (1.0 - ratio)))};
                        if (ctx.node().output_size() > 1) out.push_back(dev_value(keep));
                        return out;
                      }
                    }
                    Outs out{ctx.in(0)};
                    if (ctx.node().output_size() > 1)
                      out.push_back(dev_value(ctx.device().ones(ctx.in(0).shape(), DType::boolean)));
                    return out;
                  }};
  // --- random values, from the device's stream ---
  // Device::seed restarts the stream; a node's `seed` attribute is taken
  // but does not make its values repeat from run to run (they are the
  // stream's next ones), and no runtime reproduces the values ONNX's own
  // tests expect (numpy's stream): the conformance run checks what the op
  // promises instead.
  // At load: the dtype, and the attributes that make a draw impossible
  // (a missing or negative shape, low > high, a negative scale, NaN).
  const auto random_float_dtype = [](const ::onnx::NodeProto& n, int64_t) -> std::string {
    const bool sized = n.op_type() == "RandomUniform" || n.op_type() == "RandomNormal";
    bool has_shape = false;
    float low = 0, high = 1;
    for (const auto& a : n.attribute()) {
      if (a.name() == "dtype") {
        const auto dt = to_dtype(static_cast<int32_t>(a.i()));
        if (!dt || !is_floating(*dt))
          return "dtype " + onnx_type_name(static_cast<int32_t>(a.i())) + " (a floating-point type is needed)";
      }
      if (a.name() == "shape") {
        has_shape = true;
        for (int64_t d : a.ints())
          if (d < 0) return "shape has a negative extent (" + std::to_string(d) + ")";
      }
      if (a.name() == "low") low = a.f();
      if (a.name() == "high") high = a.f();
      if (a.name() == "scale" && !(a.f() >= 0)) return "scale " + std::to_string(a.f()) + " (must be at least 0)";
      if (a.name() == "mean" && std::isnan(a.f())) return "mean is NaN";
    }
    if (sized && !has_shape) return "no shape attribute";
    if (!(low <= high)) return "low " + std::to_string(low) + " above high " + std::to_string(high) + " (or NaN)";
    return "";
  };
  const auto random_dtype = [](Ctx& ctx, std::optional<DType> like) {
    if (ctx.attr("dtype")) return *to_dtype(static_cast<int32_t>(ctx.attr_i("dtype", 1)));
    return like ? *like : DType::f32;
  };
  const auto random_shape = [](Ctx& ctx) {
    auto dims = ctx.attr_ints("shape");
    if (!dims) ctx.fail(Errc::invalid_argument, "no shape attribute");
    Shape s(*dims);
    check_result_shape(ctx, "shape", s);
    return s;
  };
  // The four draws differ in their distribution (uniform in [low, high),
  // normal(mean, scale)) and in where the shape comes from: the `shape`
  // attribute, or for the Like forms the input's shape (and its dtype
  // unless `dtype` says otherwise).
  const auto random_draw = [=](bool normal, bool like) -> OpSpec {
    std::vector<std::string> attributes = normal ? std::vector<std::string>{"dtype", "mean", "scale", "seed"}
                                                 : std::vector<std::string>{"dtype", "high", "low", "seed"};
    if (!like) attributes.emplace_back("shape");
    return {attributes, random_float_dtype, [=](Ctx& ctx) {
              const Shape s = like ? ctx.in(0).shape() : random_shape(ctx);
              const DType dt = random_dtype(ctx, like ? std::optional<DType>(ctx.in(0).dtype()) : std::nullopt);
              const Device& d = ctx.device();
              return Outs{dev_value(normal ? d.normal(s, ctx.attr_f("mean", 0.0f), ctx.attr_f("scale", 1.0f), dt)
                                           : d.uniform(s, ctx.attr_f("low", 0.0f), ctx.attr_f("high", 1.0f), dt))};
            }};
  };
  t["RandomUniform"] = random_draw(false, false);
  t["RandomNormal"] = random_draw(true, false);
  t["RandomUniformLike"] = random_draw(false, true);
  t["RandomNormalLike"] = random_draw(true, true);
  // 1 where a uniform draw in [0, 1) falls below the element's probability:
  // probability 1 always gives 1, 0 never does.
  t["Bernoulli"] = {{"dtype", "seed"}, dtype_attribute_check("dtype", "dtype"), [=](Ctx& ctx) {
                      Tensor p = ctx.dev(0);
                      Tensor draw =
                          ctx.device().uniform(p.shape(), 0, 1, p.dtype() == DType::f64 ? DType::f64 : DType::f32);
                      return Outs{dev_value(draw.lt(p.cast(draw.dtype())).cast(random_dtype(ctx, p.dtype())))};
                    }};
  // Multinomial: sample_size draws per row from softmax(input) (the input
  // holds unnormalised log-probabilities): class k where the cumulative
  // probability before k is at most a uniform draw and the one through k
  // above it, counted as the classes whose cumulative sum is at most the
  // draw (the last class takes draws past a sum rounded below 1).
  t["Multinomial"] = {
      {"dtype", "sample_size", "seed"},
      [](const ::onnx::NodeProto& n, int64_t) -> std::string {
        for (const auto& a : n.attribute()) {
          if (a.name() == "dtype" && a.i() != ::onnx::TensorProto::INT32 && a.i() != ::onnx::TensorProto::INT64)
            return "dtype " + onnx_type_name(static_cast<int32_t>(a.i())) + " (INT32 or INT64 only)";
          if (a.name() == "sample_size" && a.i() < 1) return "sample_size=" + std::to_string(a.i()) + " (at least 1)";
        }
        return "";
      },
      [](Ctx& ctx) {
        Tensor x = ctx.dev(0);
        if (x.rank() != 2)
          ctx.fail(Errc::shape_mismatch, "input must be [batch_size, class_size], got " + x.shape().to_string());
        const int64_t batch = x.shape()[0], classes = x.shape()[1];
        if (classes == 0 && batch > 0) ctx.fail(Errc::invalid_argument, "no classes to draw from");
        const int64_t samples = ctx.attr_i("sample_size", 1);
        check_result_shape(ctx, "output", Shape{batch, samples});
        const DType out =
            ctx.attr_i("dtype", ::onnx::TensorProto::INT32) == ::onnx::TensorProto::INT64 ? DType::i64 : DType::i32;
        Tensor cdf = x.cast(DType::f64).softmax(1).cumsum(1).reshape({batch, 1, classes});
        Tensor draw = ctx.device().uniform({batch, samples, 1}, 0, 1, DType::f64);
        Tensor k = cdf.le(draw).cast(DType::i64).sum({2}, false).clamp(0, std::max<int64_t>(classes - 1, 0));
        return Outs{dev_value(k.cast(out))};
      }};
  t["Constant"] = {{"value", "value_float", "value_floats", "value_int", "value_ints"}, nullptr, [](Ctx& ctx) {
                     if (auto a = ctx.attr("value")) return Outs{host_value(to_data(a->t(), "."))};
                     if (auto a = ctx.attr("value_float"))
                       return Outs{host_value(TensorData::from(std::vector<float>{a->f()}, {}))};
                     if (auto a = ctx.attr("value_int")) return Outs{host_value(host_ints({a->i()}, {}))};
                     if (auto a = ctx.attr("value_floats")) {
                       std::vector<float> v(a->floats().begin(), a->floats().end());
                       return Outs{host_value(TensorData::from(v, {static_cast<int64_t>(v.size())}))};
                     }
                     if (auto a = ctx.attr_ints("value_ints"))
                       return Outs{host_value(host_ints(*a, {static_cast<int64_t>(a->size())}))};
                     ctx.fail(Errc::invalid_argument, "no value attribute");
                   }};
  t["Shape"] = {{"start", "end"}, nullptr, [](Ctx& ctx) {
                  const auto& dims = ctx.in(0).shape().dims;
                  const int64_t r = static_cast<int64_t>(dims.size());
                  int64_t b = ctx.attr_i("start", 0), e = ctx.attr_i("end", r);
                  if (b < 0) b += r;
                  if (e < 0) e += r;
                  b = std::clamp<int64_t>(b, 0, r);
                  e = std::clamp<int64_t>(e, b, r);
                  Ints v(dims.begin() + b, dims.begin() + e);
                  return Outs{host_value(host_ints(v, {static_cast<int64_t>(v.size())}))};
                }};
  t["Size"] = {{}, nullptr, [](Ctx& ctx) { return Outs{host_value(host_ints({ctx.in(0).shape().numel()}, {}))}; }};
  t["ConstantOfShape"] = {{"value"}, nullptr, [](Ctx& ctx) {
                            Shape s(ctx.ints(0));
                            check_result_shape(ctx, "shape", s);  // here, not in the node reading it first
                            TensorData v = TensorData::from(std::vector<float>{0.0f}, {1});
                            if (auto a = ctx.attr("value")) v = to_data(a->t(), ".");
                            if (s.numel() <= kHostMax)
                              return Outs{host_value(host_expand(host_reshape(v, Shape(Ints(s.rank(), 1))), s))};
                            return Outs{dev_value(ctx.device().full(s, v.at(0), v.dtype))};
                          }};
  // Experimental in ONNX 1.0-1.3 and gone since (no schema in ONNX's
  // registry), but PyTorch's exports at opsets 7-8 fill an LSTM's missing
  // initial state with it: a shape from the input (input_as_shape=1: the
  // input's values; else its shape) or the `shape` attribute, extra_shape
  // appended, filled with `value` as `dtype` (FLOAT by default).
  t["ConstantFill"] = {
      {"dtype", "extra_shape", "input_as_shape", "shape", "value"},
      [](const ::onnx::NodeProto& n, int64_t) -> std::string {
        for (const auto& a : n.attribute())
          if (a.name() == "dtype" && !to_dtype(static_cast<int32_t>(a.i())))
            return "dtype " + onnx_type_name(static_cast<int32_t>(a.i()));
        return "";
      },
      [](Ctx& ctx) {
        Ints dims;
        if (ctx.has(0)) {
          if (ctx.attr("shape") != nullptr) ctx.fail(Errc::invalid_argument, "both an input and the shape attribute");
          if (ctx.attr_i("input_as_shape", 0) != 0) {
            dims = ctx.ints(0);
          } else {
            const auto& in = ctx.in(0).shape().dims;
            dims.assign(in.begin(), in.end());
          }
        } else {
          dims = ctx.attr_ints("shape").value_or(Ints{});
        }
        if (auto extra = ctx.attr_ints("extra_shape")) dims.insert(dims.end(), extra->begin(), extra->end());
        const Shape s(dims);
        check_result_shape(ctx, "shape", s);
        const DType t = *to_dtype(static_cast<int32_t>(ctx.attr_i("dtype", 1)));
        const double value = ctx.attr_f("value", 0.0f);
        if (s.numel() <= kHostMax)
          return Outs{host_value(host_doubles(std::vector<double>(static_cast<size_t>(s.numel()), value), s, t))};
        return Outs{dev_value(ctx.device().full(s, value, t))};
      }};
  t["Range"] = {{}, nullptr, [](Ctx& ctx) {
                  const TensorData& s = ctx.host(0);
                  if (!is_floating(s.dtype)) {
                    // Integers exactly (2^53 + 1 .. went through double).
                    const int64_t first = ctx.ints(0).at(0), limit = ctx.ints(1).at(0), delta = ctx.ints(2).at(0);
                    if (delta == 0) ctx.fail(Errc::invalid_argument, "delta 0");
                    const __int128 span = static_cast<__int128>(limit) - first;
                    const __int128 count = span / delta + (span % delta != 0 && (span > 0) == (delta > 0) ? 1 : 0);
                    if (count > (__int128{1} << 40))
                      ctx.fail(Errc::invalid_argument, "a range of more than 2^40 elements is too large (start " +
                                                           std::to_string(first) + ", limit " + std::to_string(limit) +
                                                           ", delta " + std::to_string(delta) + ")");
                    const auto n = static_cast<int64_t>(std::max<__int128>(count, 0));
                    if (n <= kHostMax) {
                      Ints v(static_cast<size_t>(n));
                      for (int64_t i = 0; i < n; ++i)
                        v[static_cast<size_t>(i)] = static_cast<int64_t>(first + static_cast<__int128>(i) * delta);
                      return Outs{host_value(host_ints(v, {n}, s.dtype))};
                    }
                  }
                  const double start = s.at(0), limit = ctx.host(1).at(0), delta = ctx.host(2).at(0);
                  if (delta == 0) ctx.fail(Errc::invalid_argument, "delta 0");
                  // In double first: a count past int64 (-2^62 to 2^62) cast
                  // to int64 was undefined and came out as an empty range.
                  const double count = std::ceil((limit - start) / delta);
                  if (!(count <= static_cast<double>(int64_t{1} << 40)))
                    ctx.fail(Errc::invalid_argument, "a range of " + std::to_string(count) +
                                                         " elements is too large (start " + std::to_string(start) +
                                                         ", limit " + std::to_string(limit) + ", delta " +
                                                         std::to_string(delta) + ")");
                  const int64_t n = std::max<int64_t>(static_cast<int64_t>(count), 0);
                  if (n > kHostMax)
                    return Outs{dev_value(ctx.device().arange(start, start + n * delta, delta, s.dtype))};
                  std::vector<double> v;
                  for (int64_t i = 0; i < n; ++i) v.push_back(start + static_cast<double>(i) * delta);
                  return Outs{host_value(host_doubles(v, {n}, s.dtype))};
                }};
  t["EyeLike"] = {{"dtype", "k"}, dtype_attribute_check("dtype", "dtype"), [](Ctx& ctx) {
                    const Shape& s = ctx.in(0).shape();
                    DType dt =
                        ctx.attr("dtype") ? *to_dtype(static_cast<int32_t>(ctx.attr_i("dtype", 1))) : ctx.in(0).dtype();
                    const int64_t k = ctx.attr_i("k", 0);
                    Ints v(static_cast<size_t>(s.numel()), 0);
                    for (int64_t i = 0; i < s[0]; ++i)
                      if (i + k >= 0 && i + k < s[1]) v[i * s[1] + i + k] = 1;
                    return Outs{host_value(host_ints(v, s, dt))};
                  }};
  // --- layout ---
  t["Reshape"] = {{"allowzero"}, nullptr, [](Ctx& ctx) {
                    Ints target = ctx.opset() < 5 ? *ctx.attr_ints("shape") : ctx.ints(1);
                    return Outs{do_reshape(ctx, ctx.in(0), target, ctx.attr_i("allowzero", 0) != 0)};
                  }};
  t["Flatten"] = {{"axis"}, nullptr, [](Ctx& ctx) {
                    const Shape& s = ctx.in(0).shape();
                    int64_t axis = ctx.attr_i("axis", 1);
                    const auto r = static_cast<int64_t>(s.rank());
                    if (axis < -r || axis > r)
                      ctx.fail(Errc::invalid_argument, "axis " + std::to_string(axis) + " out of range for rank " +
                                                           std::to_string(r) + " (Flatten takes [" +
                                                           std::to_string(-r) + ", " + std::to_string(r) + "])");
                    if (axis < 0) axis += r;
                    int64_t outer = 1;
                    for (int64_t a = 0; a < axis; ++a) outer *= s[a];
                    int64_t inner = outer == 0 ? 0 : s.numel() / std::max<int64_t>(outer, 1);
                    if (outer == 0) {
                      inner = 1;
                      for (size_t a = axis; a < s.rank(); ++a) inner *= s[a];
                    }
                    return Outs{do_reshape(ctx, ctx.in(0), {outer, inner}, true)};
                  }};
  t["Squeeze"] = {
      {"axes"}, nullptr, [](Ctx& ctx) {
        const Shape& s = ctx.in(0).shape();
        Ints axes = ctx.opset() < 13 ? ctx.attr_ints("axes").value_or(Ints{}) : (ctx.has(1) ? ctx.ints(1) : Ints{});
        axes = norm_ints(ctx, axes, s.rank());
        Ints dims;
        for (size_t a = 0; a < s.rank(); ++a) {
          bool drop =
              axes.empty() ? s[a] == 1 : std::find(axes.begin(), axes.end(), static_cast<int64_t>(a)) != axes.end();
          if (drop && s[a] != 1)
            ctx.fail(Errc::shape_mismatch,
                     "squeeze of axis " + std::to_string(a) + " of extent " + std::to_string(s[a]));
          if (!drop) dims.push_back(s[a]);
        }
        return Outs{do_reshape(ctx, ctx.in(0), dims, true)};
      }};
  t["Unsqueeze"] = {{"axes"}, nullptr, [](Ctx& ctx) {
                      Ints axes = ctx.opset() < 13 ? ctx.attr_ints("axes").value_or(Ints{}) : ctx.ints(1);
                      return Outs{unsqueeze_value(ctx, ctx.in(0), axes)};
                    }};
  t["Transpose"] = {{"perm"}, nullptr, [](Ctx& ctx) {
                      const auto rank = static_cast<int64_t>(ctx.in(0).shape().rank());
                      Ints perm = ctx.attr_ints("perm").value_or(Ints{});
                      if (perm.empty())
                        for (int64_t a = rank - 1; a >= 0; --a) perm.push_back(a);
                      // Small host values (pads reordered for Pad) stay on the host.
                      Ints sorted = perm;
                      std::sort(sorted.begin(), sorted.end());
                      bool is_perm = static_cast<int64_t>(perm.size()) == rank;
                      for (int64_t a = 0; is_perm && a < rank; ++a) is_perm = sorted[static_cast<size_t>(a)] == a;
                      if (host_small(ctx) && is_perm) {
                        const TensorData& d = ctx.host(0);
                        const Ints strides = d.shape.strides();
                        Shape out;
                        for (auto a : perm) out.dims.push_back(d.shape[static_cast<size_t>(a)]);
                        return Outs{host_value(host_gather_elems(d, out, [&](const Ints& o) {
                          int64_t at = 0;
                          for (size_t k = 0; k < perm.size(); ++k) at += o[k] * strides[static_cast<size_t>(perm[k])];
                          return at;
                        }))};
                      }
                      return Outs{dev_value(ctx.dev(0).permute(perm))};
                    }};
  t["Expand"] = {{}, nullptr, [](Ctx& ctx) {
                   Shape want(ctx.ints(1));
                   auto out = broadcast_shapes(ctx.in(0).shape(), want);
                   if (!out)
                     ctx.fail(Errc::shape_mismatch,
                              "cannot expand " + ctx.in(0).shape().to_string() + " to " + want.to_string());
                   if (ctx.in(0).host && out->numel() <= kHostMax)
                     return Outs{host_value(host_expand(*ctx.in(0).host, *out))};
                   return Outs{dev_value(ctx.dev(0).expand(*out))};
                 }};
  t["Concat"] = {{"axis"}, nullptr, [](Ctx& ctx) {
                   const size_t rank = ctx.in(0).shape().rank();
                   const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), rank);
                   if (host_small(ctx)) {
                     std::vector<const TensorData*> parts;
                     for (size_t i = 0; i < ctx.num_inputs(); ++i)
                       if (ctx.has(i)) parts.push_back(&ctx.host(i));
                     return Outs{host_value(host_concat(parts, axis))};
                   }
                   std::vector<Tensor> parts;
                   for (size_t i = 0; i < ctx.num_inputs(); ++i)
                     if (ctx.has(i)) parts.push_back(ctx.dev(i));
                   return Outs{dev_value(cat(parts, axis))};
                 }};
  t["Split"] = {
      {"axis", "split"}, nullptr, [](Ctx& ctx) {
        const Shape& s = ctx.in(0).shape();
        const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), s.rank());
        const int64_t parts = ctx.node().output_size();
        Ints sizes = ctx.opset() < 13 ? ctx.attr_ints("split").value_or(Ints{}) : (ctx.has(1) ? ctx.ints(1) : Ints{});
        if (sizes.empty()) {
          const int64_t each = (s[axis] + parts - 1) / parts;
          for (int64_t p = 0; p < parts; ++p) sizes.push_back(std::min(each, s[axis] - p * each));
        } else {
          // The spec: one non-negative size per output, summing to
          // the axis (slices past the end were silently short).
          int64_t sum = 0;
          bool valid = static_cast<int64_t>(sizes.size()) == parts;
          for (auto n : sizes) {
            valid = valid && n >= 0 && n <= s[axis];
            sum += valid ? n : 0;
          }
          if (!valid || sum != s[axis]) {
            std::string list;
            for (auto n : sizes) list += (list.empty() ? "" : ", ") + std::to_string(n);
            ctx.fail(Errc::invalid_argument, "split [" + list + "] must give " + std::to_string(parts) +
                                                 " non-negative sizes summing to axis " + std::to_string(axis) +
                                                 "'s extent " + std::to_string(s[axis]));
          }
        }
        Outs out;
        int64_t at = 0;
        for (auto n : sizes) {
          out.push_back(slice_value(ctx, ctx.in(0), {at}, {at + n}, {axis}, {1}));
          at += n;
        }
        return out;
      }};
  t["Slice"] = {{"starts", "ends", "axes"}, nullptr, [](Ctx& ctx) {
                  if (ctx.opset() < 10)
                    return Outs{slice_value(ctx, ctx.in(0), *ctx.attr_ints("starts"), *ctx.attr_ints("ends"),
                                            ctx.attr_ints("axes").value_or(Ints{}), {})};
                  return Outs{slice_value(ctx, ctx.in(0), ctx.ints(1), ctx.ints(2), ctx.has(3) ? ctx.ints(3) : Ints{},
                                          ctx.has(4) ? ctx.ints(4) : Ints{})};
                }};
  t["Gather"] = {{"axis"}, nullptr, [](Ctx& ctx) {
                   const Shape& s = ctx.in(0).shape();
                   const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), s.rank());
                   const Shape& is = ctx.in(1).shape();
                   Ints out_dims(s.dims.begin(), s.dims.begin() + axis);
                   out_dims.insert(out_dims.end(), is.dims.begin(), is.dims.end());
                   out_dims.insert(out_dims.end(), s.dims.begin() + axis + 1, s.dims.end());
                   if (host_small(ctx)) {
                     auto idx = ctx.ints(1);
                     for (auto& i : idx) {
                       if (i < -s[axis] || i >= s[axis])
                         ctx.fail(Errc::index_out_of_range, "index " + std::to_string(i) + " out of range");
                       if (i < 0) i += s[axis];
                     }
                     auto strides = s.strides();
                     const size_t ir = is.rank();
                     auto is_strides = is.strides();
                     return Outs{host_value(host_gather_elems(*ctx.in(0).host, Shape(out_dims), [&](const Ints& o) {
                       int64_t off = 0;
                       for (int64_t a = 0; a < axis; ++a) off += o[a] * strides[a];
                       int64_t flat = 0;
                       for (size_t k = 0; k < ir; ++k) flat += o[axis + k] * is_strides[k];
                       off += idx[flat] * strides[axis];
                       for (size_t a = axis + 1; a < s.rank(); ++a) off += o[a + ir - 1] * strides[a];
                       return off;
                     }))};
                   }
                   Tensor idx = fix_indices(ctx, 1, s[axis]).reshape({-1});
                   return Outs{dev_value(ctx.dev(0).index_select(axis, idx).reshape(Shape(out_dims)))};
                 }};
  t["GatherElements"] = {{"axis"}, nullptr, [](Ctx& ctx) {
                           Tensor x = ctx.dev(0);
                           const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), x.rank());
                           return Outs{dev_value(x.gather(axis, fix_indices(ctx, 1, x.shape()[axis])))};
                         }};
  t["Tile"] = {{}, nullptr, [](Ctx& ctx) {
                 Tensor x = ctx.dev(0);
                 Ints reps = ctx.ints(1);
                 if (reps.size() != x.rank()) ctx.fail(Errc::shape_mismatch, "repeats must have one entry per axis");
                 return Outs{dev_value(x.repeat(reps))};
               }};
  t["Pad"] = {{"mode", "pads", "value"}, pad_mode, [](Ctx& ctx) {
                Tensor x = ctx.dev(0);
                Ints pads = ctx.opset() < 11 ? *ctx.attr_ints("pads") : ctx.ints(1);
                double value = ctx.opset() < 11 ? ctx.attr_f("value", 0) : (ctx.has(2) ? ctx.host(2).at(0) : 0.0);
                const size_t r = x.rank();
                if (pads.size() != 2 * r) ctx.fail(Errc::shape_mismatch, "pads must have 2 * rank entries");
                const std::string mode = ctx.attr_s("mode", "constant");
                if (mode == "constant") {
                  const Ints lo(pads.begin(), pads.begin() + r), hi(pads.begin() + r, pads.end());
                  // An int64 fill beyond 2^53 is not a double: the given
                  // value goes in where a padded mask of ones says "not x".
                  constexpr int64_t exact = int64_t{1} << 53;
                  if (ctx.opset() >= 11 && ctx.has(2) && x.dtype() == DType::i64) {
                    const int64_t v = ctx.host(2).to_vector<int64_t>().at(0);
                    if (v > exact || v < -exact) {
                      Tensor inside = x.device().ones(x.shape(), DType::boolean).pad(lo, hi, 0);
                      return Outs{dev_value(where(inside, x.pad(lo, hi, 0), ctx.dev(2).reshape(Shape{})))};
                    }
                  }
                  return Outs{dev_value(x.pad(lo, hi, value))};
                }
                // edge / reflect, axis by axis: slices of the border (flipped for
                // reflect) concatenated on both sides; negative widths crop first.
                for (size_t a = 0; a < r; ++a) {
                  const int64_t ax = static_cast<int64_t>(a);
                  int64_t before = pads[a], after = pads[a + r];
                  const bool cropped = before < 0 || after < 0;
                  if (cropped) {
                    const int64_t n = x.shape()[a];
                    x = x.slice(ax, Slice{std::max<int64_t>(-before, 0), n - std::max<int64_t>(-after, 0)});
                    before = std::max<int64_t>(before, 0);
                    after = std::max<int64_t>(after, 0);
                  }
                  if (before == 0 && after == 0) continue;
                  const int64_t n = x.shape()[a];
                  if (n == 0 || (mode == "reflect" && (before >= n || after >= n)))
                    ctx.fail(Errc::invalid_argument,
                             mode + " padding of " + std::to_string(std::max(before, after)) + " on axis " +
                                 std::to_string(a) + " of extent " + std::to_string(n) +
                                 (cropped ? " (after its negative pad's crop, which comes first)" : ""));
                  auto border = [&](int64_t width, bool front) {
                    if (mode == "edge") {
                      Shape s = x.shape();
                      s.dims[a] = width;
                      return x.slice(ax, front ? Slice{0, 1} : Slice{n - 1, n}).expand(s);
                    }
                    return x.slice(ax, front ? Slice{1, width + 1} : Slice{n - 1 - width, n - 1}).flip({ax});
                  };
                  std::vector<Tensor> parts;
                  if (before > 0) parts.push_back(border(before, true));
                  parts.push_back(x);
                  if (after > 0) parts.push_back(border(after, false));
                  x = cat(parts, ax);
                }
                return Outs{dev_value(x)};
              }};
  t["DepthToSpace"] = {{"blocksize", "mode"}, nullptr, [](Ctx& ctx) {
                         Tensor x = ctx.dev(0);
                         const int64_t b = ctx.attr_i("blocksize", 1);
                         const auto& s = x.shape();
                         const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
                         Tensor y = ctx.attr_s("mode", "DCR") == "DCR"
                                        ? x.reshape({n, b, b, c / (b * b), h, w}).permute({0, 3, 4, 1, 5, 2})
                                        : x.reshape({n, c / (b * b), b, b, h, w}).permute({0, 1, 4, 2, 5, 3});
                         return Outs{dev_value(y.reshape({n, c / (b * b), h * b, w * b}))};
                       }};
  t["SpaceToDepth"] = {{"blocksize"}, nullptr, [](Ctx& ctx) {
                         Tensor x = ctx.dev(0);
                         const int64_t b = ctx.attr_i("blocksize", 1);
                         const auto& s = x.shape();
                         const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
                         Tensor y = x.reshape({n, c, h / b, b, w / b, b}).permute({0, 3, 5, 1, 2, 4});
                         return Outs{dev_value(y.reshape({n, c * b * b, h / b, w / b}))};
                       }};
  // --- convolution and pooling (native ops) ---
  t["Conv"] = {{"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}, nullptr, [](Ctx& ctx) {
                 return conv_node(ctx, false);
               }};
  t["ConvTranspose"] = {
      {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"},
      nullptr,
      [](Ctx& ctx) { return conv_node(ctx, true); }};
  t["MaxPool"] = {{"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"},
                  nullptr,
                  max_pool_node};
  t["AveragePool"] = {
      {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}, nullptr, avg_pool_node};
  t["HannWindow"] = window({0.5, 0.5});
  t["HammingWindow"] = window({25.0 / 46, 21.0 / 46});
  t["BlackmanWindow"] = window({0.42, 0.5, 0.08});
  t["LRN"] = {{"alpha", "beta", "bias", "size"}, nullptr, lrn_node};
  t["ReverseSequence"] = {{"batch_axis", "time_axis"}, nullptr, reverse_sequence_node};
  t["MaxUnpool"] = {{"kernel_shape", "pads", "strides"}, nullptr, max_unpool_node};
  t["LpPool"] = {{"auto_pad", "kernel_shape", "p", "pads", "strides"},
                 [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                   for (const auto& a : n.attribute())
                     if (a.name() == "p" && a.i() < 1) return "p=" + std::to_string(a.i()) + " (p >= 1 only)";
                   return "";
                 },
                 lp_pool_node};
  t["LpNormalization"] = {{"axis", "p"},
                          [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                            for (const auto& a : n.attribute())
                              if (a.name() == "p" && a.i() != 1 && a.i() != 2)
                                return "p=" + std::to_string(a.i()) + " (1 and 2 only)";
                            return "";
                          },
                          [](Ctx& ctx) {
                            Tensor x = ctx.dev(0);
                            const int64_t axis = axis_of(ctx, ctx.attr_i("axis", -1), x.rank());
                            Tensor norm =
                                ctx.attr_i("p", 2) == 1 ? x.abs().sum({axis}, true) : x.mul(x).sum({axis}, true).sqrt();
                            // An all-zero vector stays zero (ONNX Runtime,
                            // PyTorch's F.normalize), not 0 / 0.
                            norm = norm.masked_fill(norm.eq(Scalar(0.0)), Scalar(1.0));
                            return Outs{dev_value(x.div(norm))};
                          }};
  t["Det"] = {{}, nullptr, det_node};
  // --- quantization ---
  t["QuantizeLinear"] = {{"axis"}, nullptr, quantize_linear};
  t["DequantizeLinear"] = {{"axis"}, nullptr, dequantize_linear};
  t["DynamicQuantizeLinear"] = {{}, nullptr, dynamic_quantize_linear};
  t["MatMulInteger"] = {{}, nullptr, matmul_integer};
  t["QLinearMatMul"] = {{}, nullptr, qlinear_matmul};
  t["ConvInteger"] = {{"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}, nullptr, conv_integer};
  t["QLinearConv"] = {{"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}, nullptr, qlinear_conv};
  // TopK-1 (opsets 1-9, as PyTorch exports topk there) takes k as an
  // attribute; from opset 10 it is input 1.
  t["TopK"] = {{"axis", "largest", "sorted", "k"},
               [](const ::onnx::NodeProto& n, int64_t opset) -> std::string {
                 if (opset < 10) return "";
                 for (const auto& a : n.attribute())
                   if (a.name() == "k")
                     return "attribute 'k' (opset 9 and earlier; this model is opset " + std::to_string(opset) +
                            ": K is input 1)";
                 return "";
               },
               [](Ctx& ctx) {
                 Tensor x = ctx.dev(0);
                 const int64_t axis = axis_of(ctx, ctx.attr_i("axis", -1), x.rank());
                 if (ctx.opset() < 10 && !ctx.attr("k")) ctx.fail(Errc::invalid_argument, "attribute 'k' is missing");
                 const auto k = ctx.opset() < 10 ? std::vector<int64_t>{ctx.attr_i("k", -1)} : ctx.ints(1);
                 if (k.size() != 1) ctx.fail(Errc::shape_mismatch, "K must hold one value");
                 auto [values, indices] =
                     x.topk(k[0], axis, ctx.attr_i("largest", 1) != 0, ctx.attr_i("sorted", 1) != 0);
                 return Outs{dev_value(values), dev_value(indices)};
               }};
  t["GatherND"] = {{"batch_dims"}, nullptr, [](Ctx& ctx) {
                     return Outs{dev_value(gather_nd(ctx, ctx.dev(0), ctx.dev(1), ctx.attr_i("batch_dims", 0)))};
                   }};
  t["Einsum"] = {{"equation"}, nullptr, [](Ctx& ctx) {
                   std::vector<Tensor> operands;
                   for (size_t i = 0; i < ctx.num_inputs(); ++i) operands.push_back(ctx.dev(i));
                   const DType t = operands.empty() ? DType::f32 : operands.front().dtype();
                   Tensor y = einsum(ctx, ctx.attr_s("equation", ""), std::move(operands));
                   // Its output has the inputs' type: a sum over an axis of
                   // integers gave i64, as PyTorch's sum does.
                   return Outs{dev_value(y.dtype() == t ? y : y.cast(t))};
                 }};
  t["Trilu"] = {{"upper"}, nullptr, [](Ctx& ctx) {
                  Tensor x = ctx.dev(0);
                  const int64_t k = ctx.has(1) ? ctx.ints(1).at(0) : 0;
                  return Outs{dev_value(ctx.attr_i("upper", 1) != 0 ? x.triu(k) : x.tril(k))};
                }};
  t["OneHot"] = {{"axis"}, nullptr, [](Ctx& ctx) {
                   Tensor idx = ctx.dev(0).cast(DType::i64);
                   const double depth_value = ctx.host(1).at(0);
                   if (!(depth_value >= 0 && depth_value <= static_cast<double>(int64_t{1} << 40)))
                     ctx.fail(Errc::invalid_argument,
                              "depth " + std::to_string(depth_value) + " must be a non-negative number of classes");
                   const auto depth = static_cast<int64_t>(depth_value);
                   Tensor values = ctx.dev(2);
                   const int64_t out_rank = static_cast<int64_t>(idx.rank()) + 1;
                   int64_t axis = ctx.attr_i("axis", -1);
                   if (axis < 0) axis += out_rank;
                   idx = where(idx.lt(Scalar(int64_t{0})), idx.add(Scalar(depth)), idx).unsqueeze(axis);
                   Ints rs(out_rank, 1);
                   rs[axis] = depth;
                   Tensor hot = ctx.device().arange(0, static_cast<double>(depth)).reshape(Shape(rs)).eq(idx);
                   Tensor off = values.slice(0, Slice{0, 1}).reshape({}), on = values.slice(0, Slice{1, 2}).reshape({});
                   return Outs{dev_value(where(hot, on, off))};
                 }};
  // --- linear algebra ---
  t["MatMul"] = {{}, nullptr, [](Ctx& ctx) { return Outs{dev_value(ctx.dev(0).matmul(ctx.dev(1)))}; }};
  t["Gemm"] = {{"alpha", "beta", "transA", "transB", "broadcast"}, nullptr, [](Ctx& ctx) {
                 Tensor a = ctx.dev(0), b = ctx.dev(1);
                 const double alpha = ctx.attr_f("alpha", 1), beta = ctx.attr_f("beta", 1);
                 // The exporters' nn.Linear: x W^T + b is one linear op (no
                 // transpose of W on every run).
                 if (!ctx.attr_i("transA", 0) && ctx.attr_i("transB", 0) && alpha == 1 && beta == 1 &&
                     (!ctx.has(2) || (ctx.in(2).shape().rank() == 1 && ctx.in(2).dtype() == a.dtype())))
                   return Outs{dev_value(a.linear(b, ctx.has(2) ? ctx.dev(2) : Tensor()))};
                 if (ctx.attr_i("transA", 0)) a = a.mT();
                 if (ctx.attr_i("transB", 0)) b = b.mT();
                 Tensor y = a.matmul(b);
                 if (alpha != 1) y = y.mul(scalar_for(y.dtype(), alpha));
                 // beta = 0 leaves C out, NaN and inf included (ONNX
                 // Runtime, PyTorch's addmm).
                 if (ctx.has(2) && beta != 0) {
                   Tensor c = ctx.dev(2);
                   if (beta != 1) c = c.mul(scalar_for(c.dtype(), beta));
                   y = y.add(c);
                 }
                 return Outs{dev_value(y)};
               }};
  // --- softmax family ---
  t["Softmax"] = softmax_like([](const Tensor& x, int64_t a) { return x.softmax(a); });
  t["LogSoftmax"] = softmax_like([](const Tensor& x, int64_t a) { return x.log_softmax(a); });
  t["Hardmax"] = softmax_like(hardmax);
  // --- reductions ---
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    t[op] = reduction(op);
  for (const char* op : {"ArgMax", "ArgMin"}) {
    const bool is_max = std::string(op) == "ArgMax";
    t[op] = {{"axis", "keepdims", "select_last_index"}, nullptr, [is_max](Ctx& ctx) {
               Tensor x = ctx.dev(0);
               const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), x.rank());
               const bool keep = ctx.attr_i("keepdims", 1) != 0;
               if (ctx.attr_i("select_last_index", 0) == 0)
                 return Outs{dev_value(is_max ? x.argmax(axis, keep) : x.argmin(axis, keep))};
               Tensor f = x.flip({axis});
               Tensor i = is_max ? f.argmax(axis, keep) : f.argmin(axis, keep);
               return Outs{dev_value(i.neg().add(Scalar(x.shape()[axis] - 1)))};
             }};
  }
  t["GlobalAveragePool"] = composed([](Ctx&, const Tensor& x) {
    Ints axes;
    for (size_t a = 2; a < x.rank(); ++a) axes.push_back(static_cast<int64_t>(a));
    return x.mean(axes, true);
  });
  // (sum over the spatial axes of |x|^p)^(1/p), as LpPool over the whole plane.
  t["GlobalLpPool"] = {{"p"},
                       [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                         for (const auto& a : n.attribute())
                           if (a.name() == "p" && a.i() < 1) return "p=" + std::to_string(a.i()) + " (p >= 1 only)";
                         return "";
                       },
                       [](Ctx& ctx) {
                         Tensor x = ctx.dev(0);
                         const DType t = x.dtype();
                         if (!is_floating(t))
                           ctx.fail(Errc::dtype_mismatch, "x must be floating, got " + std::string(name_of(t)));
                         Ints axes;
                         for (size_t a = 2; a < x.rank(); ++a) axes.push_back(static_cast<int64_t>(a));
                         const double p = static_cast<double>(ctx.attr_i("p", 2));
                         Tensor powed = p == 1 ? x.abs() : p == 2 ? x.mul(x) : x.abs().pow(scalar_for(t, p));
                         Tensor sum = powed.sum(axes, true);
                         if (sum.dtype() != t) sum = sum.cast(t);
                         if (p == 1) return Outs{dev_value(sum)};
                         return Outs{dev_value(p == 2 ? sum.sqrt() : sum.pow(scalar_for(t, 1.0 / p)))};
                       }};
  t["GlobalMaxPool"] = composed([](Ctx&, const Tensor& x) {
    Ints axes;
    for (size_t a = 2; a < x.rank(); ++a) axes.push_back(static_cast<int64_t>(a));
    return x.max(axes, true);
  });
  // --- normalization, composed of reductions and element-wise ops ---
  t["LayerNormalization"] = {
      {"axis", "epsilon", "stash_type"}, nullptr, [](Ctx& ctx) {
        Tensor x = ctx.dev(0);
        const int64_t axis = axis_of(ctx, ctx.attr_i("axis", -1), x.rank());
        Ints axes;
        for (int64_t a = axis; a < static_cast<int64_t>(x.rank()); ++a) axes.push_back(a);
        const float eps = ctx.attr_f("epsilon", 1e-5f);
        // One native op when only Y is wanted and scale/bias have the
        // normalized shape; the statistics outputs need the composition.
        const auto& node = ctx.node();
        const bool stats_wanted =
            (node.output_size() > 1 && !node.output(1).empty()) || (node.output_size() > 2 && !node.output(2).empty());
        Ints normalized(x.shape().dims.begin() + axis, x.shape().dims.end());
        if (!stats_wanted && ctx.in(1).shape().dims == normalized &&
            (!ctx.has(2) || ctx.in(2).shape().dims == normalized) && is_floating(x.dtype()))
          return Outs{dev_value(nn::layer_norm(x, normalized, ctx.dev(1), ctx.has(2) ? ctx.dev(2) : Tensor(), eps))};
        const auto [mean, d, var] = moments(x, axes);
        Tensor inv = var.add(scalar_for(x.dtype(), eps)).rsqrt();
        Tensor y = d.mul(inv).mul(ctx.dev(1));
        if (ctx.has(2)) y = y.add(ctx.dev(2));
        return Outs{dev_value(y), dev_value(mean), dev_value(inv)};
      }};
  t["BatchNormalization"] = {
      {"epsilon", "momentum", "spatial", "training_mode", "is_test"}, no_training_outputs, [](Ctx& ctx) {
        if (ctx.attr_i("training_mode", 0) != 0) return batch_norm_training(ctx);
        Tensor x = ctx.dev(0);
        const size_t r = x.rank();
        bool per_channel_stats = r >= 2;
        for (size_t i = 1; i <= 4; ++i) per_channel_stats = per_channel_stats && ctx.in(i).shape().rank() == 1;
        if (per_channel_stats)
          return Outs{dev_value(nn::batch_norm(x, ctx.dev(3), ctx.dev(4), ctx.dev(1), ctx.dev(2), false, 0.1,
                                               ctx.attr_f("epsilon", 1e-5f)))};
        Tensor scale = per_channel(ctx.dev(1), r), bias = per_channel(ctx.dev(2), r);
        Tensor mean = per_channel(ctx.dev(3), r), var = per_channel(ctx.dev(4), r);
        Tensor inv = var.add(scalar_for(var.dtype(), ctx.attr_f("epsilon", 1e-5f))).rsqrt();
        return Outs{dev_value(x.sub(mean).mul(inv).mul(scale).add(bias))};
      }};
  t["InstanceNormalization"] = {
      {"epsilon"}, nullptr, [](Ctx& ctx) {
        Tensor x = ctx.dev(0);
        const size_t r = x.rank();
        // Instance norm is group norm with one group per channel.
        if (r >= 3 && is_floating(x.dtype()))
          return Outs{dev_value(nn::group_norm(x, x.shape()[1], ctx.dev(1), ctx.dev(2), ctx.attr_f("epsilon", 1e-5f)))};
        Ints axes;
        for (size_t a = 2; a < r; ++a) axes.push_back(static_cast<int64_t>(a));
        const auto m = moments(x, axes);
        Tensor inv = m.var.add(scalar_for(x.dtype(), ctx.attr_f("epsilon", 1e-5f))).rsqrt();
        return Outs{dev_value(m.centred.mul(inv).mul(per_channel(ctx.dev(1), r)).add(per_channel(ctx.dev(2), r)))};
      }};
  t["MeanVarianceNormalization"] = {
      {"axes"}, nullptr, [](Ctx& ctx) {
        Tensor x = ctx.dev(0);
        Ints axes = norm_ints(ctx, ctx.attr_ints("axes").value_or(Ints{0, 2, 3}), x.rank());
        const auto m = moments(x, axes);
        return Outs{dev_value(m.centred.div(m.var.sqrt()))};
      }};
  t["NegativeLogLikelihoodLoss"] = {{"ignore_index", "reduction"}, known_reduction, [](Ctx& ctx) {
                                      Tensor w = ctx.has(2) ? ctx.dev(2) : Tensor();
                                      return Outs{dev_value(nll_loss(ctx, ctx.dev(0), ctx.dev(1), w))};
                                    }};
  t["SoftmaxCrossEntropyLoss"] = {{"ignore_index", "reduction"}, known_reduction, [](Ctx& ctx) {
                                    Tensor logp = ctx.dev(0).log_softmax(1);
                                    Tensor w = ctx.has(2) ? ctx.dev(2) : Tensor();
                                    return Outs{dev_value(nll_loss(ctx, logp, ctx.dev(1), w)), dev_value(logp)};
                                  }};
  // CumSum keeps the input's dtype (ONNX), unlike PyTorch's i64 for
  // integers; exclusive shifts the input by one along the axis first.
  t["CumSum"] = {{"exclusive", "reverse"}, nullptr, [](Ctx& ctx) {
                   Tensor x = ctx.dev(0);
                   const int64_t axis = axis_of(ctx, ctx.ints(1).at(0), x.rank());
                   const bool excl = ctx.attr_i("exclusive", 0) != 0, rev = ctx.attr_i("reverse", 0) != 0;
                   if (rev) x = x.flip({axis});
                   if (excl) {
                     Ints before(x.rank(), 0), after(x.rank(), 0);
                     before[static_cast<size_t>(axis)] = 1;
                     after[static_cast<size_t>(axis)] = -1;
                     x = x.pad(before, after);
                   }
                   Tensor y = x.cumsum(axis, x.dtype());
                   return Outs{dev_value(rev ? y.flip({axis}) : y)};
                 }};
  // ScatterElements: none (indices assumed unique, as ONNX leaves duplicates
  // undefined) or add.
  // ScatterElements: none (repeated indices: the last wins, as ONNX's
  // reference), add, mul, max, min.
  for (const char* op : {"ScatterElements", "Scatter"})
    t[op] = {{"axis", "reduction"},
             [](const ::onnx::NodeProto& n, int64_t) -> std::string {
               for (const auto& a : n.attribute())
                 if (a.name() == "reduction" && a.s() != "none" && a.s() != "add" && a.s() != "mul" && a.s() != "max" &&
                     a.s() != "min")
                   return "reduction='" + a.s() + "'";
               return "";
             },
             [](Ctx& ctx) {
               Tensor x = ctx.dev(0), src = ctx.dev(2);
               const int64_t axis = axis_of(ctx, ctx.attr_i("axis", 0), x.rank());
               Tensor idx = fix_indices(ctx, 1, x.shape()[axis]);
               const std::string reduction = ctx.attr_s("reduction", "none");
               if (reduction == "none") return Outs{dev_value(x.scatter(axis, idx, src))};
               const char* reduce = reduction == "add"   ? "sum"
                                    : reduction == "mul" ? "prod"
                                    : reduction == "max" ? "amax"
                                                         : "amin";
               return Outs{dev_value(x.scatter_reduce(axis, idx, src, reduce))};
             }};
  // ScatterND: index tuples become linear indices into data viewed as
  // [indexed extents, rest], then one scatter of whole rows.
  t["ScatterND"] = {{"reduction"},
                    [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                      for (const auto& a : n.attribute())
                        if (a.name() == "reduction" && a.s() != "none" && a.s() != "add" && a.s() != "mul")
                          return "reduction='" + a.s() + "'";
                      return "";
                    },
                    [](Ctx& ctx) { return Outs{dev_value(scatter_nd(ctx, ctx.dev(0), ctx.dev(1), ctx.dev(2)))}; }};
  t["Resize"] = {{"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                  "extrapolation_value"},
                 resize_check,
                 [](Ctx& ctx) {
                   Tensor x = ctx.dev(0);
                   const size_t r = x.rank();
                   std::vector<double> scales;
                   Ints out(r);
                   const size_t scales_at = ctx.opset() < 11 ? 1 : 2;
                   if (ctx.opset() >= 11 && ctx.has(3) && ctx.in(3).shape().numel() > 0) {
                     out = ctx.ints(3);
                     if (out.size() != r) ctx.fail(Errc::shape_mismatch, "sizes must have one entry per axis");
                     for (size_t a = 0; a < r; ++a)
                       scales.push_back(static_cast<double>(out[a]) / static_cast<double>(x.shape()[a]));
                   } else if (ctx.has(scales_at) && ctx.in(scales_at).shape().numel() > 0) {
                     scales = ctx.host(scales_at).to_vector<double>();
                     if (scales.size() != r) ctx.fail(Errc::shape_mismatch, "scales must have one entry per axis");
                     out = scaled_extents(ctx, x.shape(), scales);
                   } else {
                     ctx.fail(Errc::invalid_argument, "neither scales nor sizes given");
                   }
                   ResizeMode m;
                   m.mode = ctx.attr_s("mode", "nearest");
                   m.coord =
                       ctx.opset() < 11 ? "asymmetric" : ctx.attr_s("coordinate_transformation_mode", "half_pixel");
                   m.nearest = ctx.opset() < 11 ? "floor" : ctx.attr_s("nearest_mode", "round_prefer_floor");
                   m.cubic_a = ctx.attr_f("cubic_coeff_a", -0.75f);
                   m.exclude_outside = ctx.attr_i("exclude_outside", 0) != 0;
                   m.extrapolation = ctx.attr_f("extrapolation_value", 0);
                   if (m.coord == "tf_crop_and_resize") {
                     if (!ctx.has(1) || ctx.in(1).shape().numel() != static_cast<int64_t>(2 * r))
                       ctx.fail(Errc::invalid_argument,
                                "tf_crop_and_resize needs roi with 2 * rank (" + std::to_string(2 * r) + ") entries");
                     m.roi = ctx.host(1).to_vector<double>();
                   }
                   return Outs{dev_value(resize(ctx, x, out, scales, m))};
                 }};
  t["Upsample"] = {{"mode", "scales"},
                   [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                     for (const auto& a : n.attribute())
                       if (a.name() == "mode" && a.s() != "nearest" && a.s() != "linear")
                         return "mode='" + a.s() + "' (nearest and linear only)";
                     return "";
                   },
                   [](Ctx& ctx) {
                     Tensor x = ctx.dev(0);
                     std::vector<double> scales;
                     if (auto a = ctx.attr("scales"))
                       scales.assign(a->floats().begin(), a->floats().end());
                     else
                       scales = ctx.host(1).to_vector<double>();
                     if (scales.size() != x.rank())
                       ctx.fail(Errc::shape_mismatch, "scales must have one entry per axis");
                     const Ints out = scaled_extents(ctx, x.shape(), scales);
                     return Outs{dev_value(resize(ctx, x, out, scales,
                                                  ResizeMode{ctx.attr_s("mode", "nearest"), "asymmetric", "floor"}))};
                   }};
  for (const char* op : {"RNN", "GRU", "LSTM"}) t[op] = recurrent(op);
  t["GridSample"] = {{"align_corners", "mode", "padding_mode"}, grid_sample_check, grid_sample_node};
  t["RoiAlign"] = {
      {"coordinate_transformation_mode", "mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"},
      [](const ::onnx::NodeProto& n, int64_t) -> std::string {
        for (const auto& a : n.attribute()) {
          if (a.name() == "mode" && a.s() != "avg" && a.s() != "max") return "mode='" + a.s() + "' (avg and max only)";
          if (a.name() == "coordinate_transformation_mode" && a.s() != "half_pixel" && a.s() != "output_half_pixel")
            return "coordinate_transformation_mode='" + a.s() + "'";
        }
        return "";
      },
      roi_align_node};
  t["MaxRoiPool"] = {{"pooled_shape", "spatial_scale"}, nullptr, max_roi_pool_node};
  t["If"] = {{"then_branch", "else_branch"}, nullptr, if_node};
  t["SequenceConstruct"] = {{}, nullptr, sequence_construct};
  t["SequenceEmpty"] = {{"dtype"}, nullptr, sequence_empty};
  t["SequenceInsert"] = {{}, nullptr, sequence_insert};
  t["SequenceErase"] = {{}, nullptr, sequence_erase};
  t["SequenceAt"] = {{}, nullptr, sequence_at};
  t["SequenceLength"] = {{}, nullptr, sequence_length};
  t["SplitToSequence"] = {{"axis", "keepdims"}, nullptr, split_to_sequence};
  t["ConcatFromSequence"] = {{"axis", "new_axis"}, nullptr, concat_from_sequence};
  t["SequenceMap"] = {{"body"}, nullptr, sequence_map};
  t["Optional"] = {{"type"}, nullptr, optional_node};
  t["OptionalHasElement"] = {{}, nullptr, optional_has_element};
  t["OptionalGetElement"] = {{}, nullptr, optional_get_element};
  t["Loop"] = {{"body"}, nullptr, loop_node};
  t["Scan"] = {{"body", "num_scan_inputs", "directions", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                "scan_output_directions"},
               nullptr,
               scan_node};
  t["DFT"] = {{"axis", "inverse", "onesided"}, nullptr, dft_node};
  t["STFT"] = {{"onesided"}, nullptr, stft_node};
  t["MelWeightMatrix"] = {{"output_datatype"}, window_check, mel_weight_matrix_node};
  t["BitShift"] = {{"direction"},
                   [](const ::onnx::NodeProto& n, int64_t) -> std::string {
                     for (const auto& a : n.attribute())
                       if (a.name() == "direction")
                         return a.s() == "LEFT" || a.s() == "RIGHT" ? "" : "direction='" + a.s() + "' (LEFT or RIGHT)";
                     return "direction is required (LEFT or RIGHT)";
                   },
                   bit_shift_node};
  t["TfIdfVectorizer"] = {{"max_gram_length", "max_skip_count", "min_gram_length", "mode", "ngram_counts",
                           "ngram_indexes", "pool_int64s", "pool_strings", "weights"},
                          tfidf_check,
                          tfidf_node};
  t["NonZero"] = {{}, nullptr, nonzero_node};
  t["Compress"] = {{"axis"}, nullptr, compress_node};
  t["Unique"] = {{"axis", "sorted"}, nullptr, unique_node};
  t["NonMaxSuppression"] = {{"center_point_box"}, nullptr, nms_node};
  return t;
}

}  // namespace

const std::map<std::string, OpSpec, std::less<>>& op_table() {
  static const auto table = build_table();
  return table;
}

namespace {

/// softmax(a b) v, the Attention node fusion writes for MatMul(a, b) ->
/// Softmax over the last axis -> MatMul(., v) (b = k transposed by
/// key_perm when the exporter's Transpose was folded in). One
/// scaled_dot_product_attention (scale 1: an exporter scales a or b itself)
/// where it takes the shapes: floating a, b, v of one rank and dtype with
/// equal batch axes; the three ops, with ONNX's broadcasting, otherwise.
Outs fused_attention(Ctx& ctx) {
  const Tensor a = ctx.dev(0), k = ctx.dev(1), v = ctx.dev(2);
  const auto perm = ctx.attr_ints("key_perm");
  const size_t r = a.rank();
  bool is_perm = !perm || perm->size() == k.rank();
  if (perm && is_perm) {
    Ints sorted = *perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) is_perm = is_perm && sorted[i] == static_cast<int64_t>(i);
  }
  Shape b = k.shape();
  if (perm && is_perm)
    for (size_t i = 0; i < perm->size(); ++i) b.dims[i] = k.shape()[static_cast<size_t>((*perm)[i])];
  bool one_op = is_perm && r >= 2 && b.rank() == r && v.rank() == r &&
                (a.dtype() == DType::f32 || a.dtype() == DType::f64) && k.dtype() == a.dtype() &&
                v.dtype() == a.dtype() && a.shape()[r - 1] == b[r - 2] && b[r - 1] == v.shape()[r - 2];
  for (size_t d = 0; one_op && d + 2 < r; ++d) one_op = a.shape()[d] == b[d] && v.shape()[d] == b[d];
  if (one_op) {
    // The key is b transposed in its last two axes: k by perm with its last two swapped.
    Ints key_axes = perm ? *perm : Ints{};
    if (!perm)
      for (size_t i = 0; i < r; ++i) key_axes.push_back(static_cast<int64_t>(i));
    std::swap(key_axes[r - 2], key_axes[r - 1]);
    return Outs{dev_value(nn::scaled_dot_product_attention(a, k.permute(key_axes), v, Tensor(), 0, false, 1.0))};
  }
  const Tensor bt = perm ? k.permute(*perm) : k;
  return Outs{dev_value(a.matmul(bt).softmax(-1).matmul(v))};
}

}  // namespace

const std::map<std::string, OpSpec, std::less<>>& fused_op_table() {
  static const std::map<std::string, OpSpec, std::less<>> table{
      {"Attention", {{"key_perm"}, nullptr, fused_attention}}};
  return table;
}

}  // namespace detail

std::vector<std::string> supported_ops() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : detail::op_table()) names.push_back(name);
  for (const auto& [name, spec] : detail::training_op_table())
    names.push_back(std::string(detail::training_domain) + "." + name);
  return names;
}

}  // namespace switchyard::onnx
