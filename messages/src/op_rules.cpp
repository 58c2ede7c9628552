// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/op_rules.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

namespace switchyard {
namespace {

std::string dt(DType t) { return std::string(name_of(t)); }

caf::error shape_error(std::string what) { return make_error(Errc::shape_mismatch, std::move(what)); }
caf::error dtype_error(std::string what) { return make_error(Errc::dtype_mismatch, std::move(what)); }
caf::error arg_error(std::string what) { return make_error(Errc::invalid_argument, std::move(what)); }

constexpr int64_t max_elements = int64_t{1} << 40;

bool in_range_index_kind(IndexKind k) {
  return static_cast<unsigned>(k) <= static_cast<unsigned>(IndexKind::scatter_amin);
}

}  // namespace

namespace {
// check_shape's rule as a plain test, building no error object.
// The nonzero extents' product is what is bounded, wherever a 0 sits: a
// huge extent before the 0 was refused, after it taken ([2^62, 0] against
// [0, 2^62]).
bool shape_passes(const Shape& s) noexcept {
  if (s.rank() > 16) return false;
  int64_t n = 1;
  for (auto d : s.dims) {
    if (d < 0 || (d > 0 && n > max_elements / d)) return false;
    if (d > 0) n *= d;
  }
  return true;
}
}  // namespace

caf::error check_shape(const Shape& s, const char* what) {
  if (shape_passes(s)) return {};
  // Why not:
  int64_t n = 1;
  for (auto d : s.dims)
    if (d < 0) return shape_error(std::string(what) + " shape " + s.to_string() + " has a negative extent");
  for (auto d : s.dims) {
    if (d > 0 && n > max_elements / d)
      return shape_error(std::string(what) + " shape " + s.to_string() + " is too large");
    if (d > 0) n *= d;
  }
  return shape_error(std::string(what) + " shape " + s.to_string() + " has more than 16 axes");
}

std::vector<int64_t> contiguous_strides(const Shape& s) { return s.strides(); }

namespace {
// The dtype unary op `k` gives a `t` tensor, or nothing where its rule
// rejects `t` (unary_result says why).
std::optional<DType> unary_dtype(UnaryKind k, DType t) noexcept {
  switch (rule_of(k)) {
    case UnaryRule::keep:
      return t;
    case UnaryRule::keep_no_bool:
      if (is_bool(t)) return std::nullopt;
      return t;
    case UnaryRule::to_float:
      return is_floating(t) ? t : default_float;
    case UnaryRule::float_only:
      if (!is_floating(t)) return std::nullopt;
      return t;
    case UnaryRule::integral:
      if (is_floating(t)) return std::nullopt;
      return t;
    case UnaryRule::to_bool:
      return DType::boolean;
  }
  return std::nullopt;
}
}  // namespace

caf::expected<TensorSpec> unary_result(UnaryKind k, const Shape& s, DType t) {
  if (auto r = unary_dtype(k, t)) return TensorSpec{s, *r};
  switch (rule_of(k)) {
    case UnaryRule::keep_no_bool:
      return dtype_error(std::string(to_string(k)) + " is not defined for bool tensors" +
                         (k == UnaryKind::neg ? " (use logical_not)" : ""));
    case UnaryRule::float_only:
      return dtype_error(std::string(to_string(k)) + " needs a floating tensor, got " + dt(t) + " (cast first)");
    case UnaryRule::integral:
      return dtype_error(std::string(to_string(k)) + " needs an integer or bool tensor, got " + dt(t));
    default:
      return arg_error("unknown unary op");
  }
}

namespace {
// The dtype of binary op `k` whose operands promote to `t`, or nothing
// where the rule rejects `t` (binary_dtype says why).
std::optional<DType> rule_dtype(BinaryKind k, DType t) noexcept {
  switch (rule_of(k)) {
    case BinaryRule::compare:
    case BinaryRule::logical:
      return DType::boolean;
    case BinaryRule::bitwise:
      if (is_floating(t)) return std::nullopt;
      return t;
    case BinaryRule::to_float:
      return is_floating(t) ? t : default_float;
    case BinaryRule::no_bool_operand:  // checked on the operands by the callers; here the promoted type
    case BinaryRule::arith_no_bool:
    case BinaryRule::divides:
      if (is_bool(t)) return std::nullopt;
      return t;
    case BinaryRule::arith:
      return t;
  }
  return t;
}

// `operands()` names the operands for an error; only called on failure,
// since every op on the hot path goes through here (client and runner).
template <class Operands>
caf::expected<DType> binary_dtype(BinaryKind k, DType t, Operands operands) {
  if (auto r = rule_dtype(k, t)) return *r;
  if (rule_of(k) == BinaryRule::bitwise)
    return dtype_error(std::string(to_string(k)) + " needs integer or bool operands, got " + operands());
  return dtype_error(std::string(to_string(k)) + " is not defined for bool operands");
}

// The dtype binary op `k` gives operands `ta` and `tb` (`a0`, `b0`: 0-d),
// or nothing where its rule rejects them (binary_result says why).
std::optional<DType> binary_operands_dtype(BinaryKind k, bool a0, DType ta, bool b0, DType tb) noexcept {
  // PyTorch rejects sub with any bool operand, not only bool - bool.
  if (rule_of(k) == BinaryRule::no_bool_operand && (is_bool(ta) || is_bool(tb))) return std::nullopt;
  return rule_dtype(k, result_type(a0, ta, b0, tb));
}
}  // namespace

caf::expected<TensorSpec> binary_result(BinaryKind k, const Shape& a, DType ta, const Shape& b, DType tb) {
  auto shape = broadcast_shapes(a, b);
  if (!shape)
    return shape_error(std::string(to_string(k)) + ": shapes " + a.to_string() + " and " + b.to_string() +
                       " cannot be broadcast together");
  if (auto r = binary_operands_dtype(k, a.rank() == 0, ta, b.rank() == 0, tb)) return TensorSpec{std::move(*shape), *r};
  if (rule_of(k) == BinaryRule::no_bool_operand && (is_bool(ta) || is_bool(tb)))
    return dtype_error(std::string(to_string(k)) +
                       " with a bool operand is not defined (use logical_xor or logical_not), got " + dt(ta) + " and " +
                       dt(tb));
  auto t =
      binary_dtype(k, result_type(a.rank() == 0, ta, b.rank() == 0, tb), [&] { return dt(ta) + " and " + dt(tb); });
  if (!t) return std::move(t.error());
  return TensorSpec{std::move(*shape), *t};
}

DType binary_compute_dtype(const BinaryOp& op) noexcept {
  if (is_comparison(op.kind) || is_logical(op.kind))
    return result_type(op.lhs.shape.rank() == 0, op.lhs.dtype, op.rhs.shape.rank() == 0, op.rhs.dtype);
  return op.out.dtype;
}

DType scalar_compute_dtype(const ScalarOp& op) noexcept {
  if (is_comparison(op.kind) || is_logical(op.kind)) return promote_scalar(op.lhs.dtype, op.scalar.kind);
  return op.out.dtype;
}

std::optional<DType> scalar_result_dtype(BinaryKind k, DType ta, ScalarKind sk) noexcept {
  if (sk != ScalarKind::boolean && sk != ScalarKind::integral && sk != ScalarKind::floating) return std::nullopt;
  if (rule_of(k) == BinaryRule::no_bool_operand && (is_bool(ta) || sk == ScalarKind::boolean)) return std::nullopt;
  return rule_dtype(k, promote_scalar(ta, sk));
}

caf::expected<TensorSpec> scalar_result(BinaryKind k, const Shape& a, DType ta, ScalarKind sk) {
  if (auto t = scalar_result_dtype(k, ta, sk)) return TensorSpec{a, *t};
  static constexpr const char* kinds[] = {"bool", "integer", "float"};
  if (static_cast<size_t>(sk) >= std::size(kinds))
    return arg_error(std::string(to_string(k)) + ": unknown scalar kind " + std::to_string(static_cast<int>(sk)));
  if (rule_of(k) == BinaryRule::no_bool_operand && (is_bool(ta) || sk == ScalarKind::boolean))
    return dtype_error(std::string(to_string(k)) +
                       " with a bool operand is not defined (use logical_xor or logical_not), got " + dt(ta) +
                       " and a " + kinds[static_cast<int>(sk)] + " scalar");
  auto t = binary_dtype(k, promote_scalar(ta, sk),
                        [&] { return dt(ta) + " and a " + kinds[static_cast<int>(sk)] + " scalar"; });
  if (!t) return std::move(t.error());
  return TensorSpec{a, *t};
}

caf::expected<TensorSpec> reduce_result(ReduceKind k, const Shape& s, DType t, std::vector<int64_t>& axes,
                                        bool keepdim) {
  for (auto& ax : axes) {
    auto n = normalize_axis(ax, s.rank());
    if (!n && !(s.rank() == 0 && (ax == 0 || ax == -1)))
      return shape_error(std::string(to_string(k)) + ": axis " + std::to_string(ax) + " is out of range for shape " +
                         s.to_string());
    ax = n ? *n : 0;
  }
  std::sort(axes.begin(), axes.end());
  // PyTorch: "dim 1 appears multiple times in the list of dims".
  if (auto dup = std::adjacent_find(axes.begin(), axes.end()); dup != axes.end())
    return arg_error(std::string(to_string(k)) + ": axis " + std::to_string(*dup) +
                     " appears more than once in the list of axes");
  if (s.rank() == 0) axes.clear();
  if (axes.empty())
    for (size_t i = 0; i < s.rank(); ++i) axes.push_back(static_cast<int64_t>(i));
  Shape out;
  bool reduces_empty_extent = false;  // a flag, not a product: hostile extents overflow
  for (size_t i = 0; i < s.rank(); ++i) {
    bool r = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(i));
    if (r && s.dims[i] == 0) reduces_empty_extent = true;
    if (!r)
      out.dims.push_back(s.dims[i]);
    else if (keepdim)
      out.dims.push_back(1);
  }
  bool needs_elements =
      k == ReduceKind::max || k == ReduceKind::min || k == ReduceKind::argmax || k == ReduceKind::argmin;
  if (needs_elements && reduces_empty_extent && s.numel() == 0 && out.numel() >= 0)
    return shape_error(std::string(to_string(k)) + ": cannot reduce an empty extent of shape " + s.to_string() +
                       " (there is no identity element)");
  switch (k) {
    case ReduceKind::sum:
    case ReduceKind::prod:
      return TensorSpec{out, is_floating(t) ? t : DType::i64};
    case ReduceKind::mean:
    case ReduceKind::var:
    case ReduceKind::std:
      if (!is_floating(t))
        return dtype_error(std::string(to_string(k)) + " needs a floating tensor, got " + dt(t) + " (cast first)");
      return TensorSpec{out, t};
    case ReduceKind::argmax:
    case ReduceKind::argmin:
      if (is_bool(t)) return dtype_error(std::string(to_string(k)) + " is not defined for bool tensors (cast first)");
      return TensorSpec{out, DType::i64};
    case ReduceKind::any:
    case ReduceKind::all:
      return TensorSpec{out, DType::boolean};
    case ReduceKind::max:
    case ReduceKind::min:
      return TensorSpec{out, t};
  }
  return arg_error("unknown reduction");
}

caf::expected<TensorSpec> softmax_result(const Shape& s, DType t, int64_t& axis) {
  auto n = normalize_axis(axis, std::max<size_t>(s.rank(), 1));
  if (!n) return shape_error("softmax: axis " + std::to_string(axis) + " is out of range for shape " + s.to_string());
  axis = *n;
  if (!is_floating(t)) return dtype_error("softmax needs a floating tensor, got " + dt(t));
  return TensorSpec{s, t};
}

caf::expected<TensorSpec> matmul_result(const Shape& a, DType ta, const Shape& b, DType tb, bool transpose_a,
                                        bool transpose_b) {
  if (a.rank() < 2 || b.rank() < 2)
    return shape_error("matmul: operands need at least 2 axes, got " + a.to_string() + " and " + b.to_string());
  if (ta != tb) return dtype_error("matmul: operands must share a dtype, got " + dt(ta) + " and " + dt(tb));
  if (is_bool(ta)) return dtype_error("matmul is not defined for bool tensors");
  int64_t m = a.dims[a.rank() - (transpose_a ? 1 : 2)];
  int64_t ka = a.dims[a.rank() - (transpose_a ? 2 : 1)];
  int64_t kb = b.dims[b.rank() - (transpose_b ? 1 : 2)];
  int64_t n = b.dims[b.rank() - (transpose_b ? 2 : 1)];
  if (ka != kb)
    return shape_error("matmul: inner extents differ: " + a.to_string() + (transpose_a ? "^T" : "") + " @ " +
                       b.to_string() + (transpose_b ? "^T" : "") + " (" + std::to_string(ka) + " vs " +
                       std::to_string(kb) + ")");
  Shape ba{std::vector<int64_t>(a.dims.begin(), a.dims.end() - 2)};
  Shape bb{std::vector<int64_t>(b.dims.begin(), b.dims.end() - 2)};
  auto batch = broadcast_shapes(ba, bb);
  if (!batch)
    return shape_error("matmul: batch axes " + ba.to_string() + " and " + bb.to_string() +
                       " cannot be broadcast together");
  batch->dims.push_back(m);
  batch->dims.push_back(n);
  return TensorSpec{std::move(*batch), ta};
}

caf::error check_view(int64_t in_numel, const Shape& out, int64_t offset, const std::vector<int64_t>& strides) {
  if (strides.size() != out.rank())
    return shape_error("view: " + std::to_string(strides.size()) + " strides for shape " + out.to_string());
  if (out.numel() == 0) return {};
  // 128-bit: offset and strides come from the peer unchecked, and
  // extent * stride overflows int64 for hostile values (16 axes of
  // 2^40 x 2^63 stay far inside 2^127).
  __int128 lo = offset, hi = offset;
  for (size_t i = 0; i < strides.size(); ++i) {
    __int128 span = static_cast<__int128>(out.dims[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  if (lo < 0 || hi >= in_numel) {
    auto clamp64 = [](__int128 v) {
      return std::to_string(static_cast<int64_t>(
          std::clamp<__int128>(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())));
    };
    return make_error(Errc::index_out_of_range, "view: elements " + clamp64(lo) + ".." + clamp64(hi) +
                                                    " fall outside a tensor of " + std::to_string(in_numel) +
                                                    " elements");
  }
  return {};
}

std::optional<ViewMap> compose_views(const ViewMap& first, const Shape& mid, const ViewMap& second, const Shape& out) {
  const size_t r = mid.rank();
  if (first.strides.size() != r || second.strides.size() != out.rank() || mid.numel() == 0 || out.numel() == 0)
    return std::nullopt;
  // An element position of `first`'s result in mixed radix over `mid`:
  // one digit per axis. `second` is linear over the digits when its offset's
  // digits plus every index times its strides' digits stay below each
  // extent: then no index of `second` ever carries.
  std::vector<int64_t> weight(r, 1);
  for (size_t m = r; m-- > 1;) weight[m - 1] = weight[m] * mid.dims[m];
  auto digits = [&](int64_t v) {
    std::vector<int64_t> d(r);
    for (size_t m = 0; m < r; ++m) {
      d[m] = v / weight[m];
      v -= d[m] * weight[m];
    }
    return d;
  };
  if (second.offset < 0 || second.offset >= mid.numel()) return std::nullopt;
  std::vector<int64_t> top = digits(second.offset);
  ViewMap composed;
  composed.offset = first.offset;
  for (size_t m = 0; m < r; ++m) composed.offset += top[m] * first.strides[m];
  composed.strides.assign(out.rank(), 0);
  for (size_t k = 0; k < out.rank(); ++k) {
    if (out.dims[k] == 1) continue;
    const int64_t s = second.strides[k];
    if (s < 0 || s >= mid.numel()) return std::nullopt;
    const auto c = digits(s);
    for (size_t m = 0; m < r; ++m) {
      top[m] += (out.dims[k] - 1) * c[m];
      if (top[m] >= mid.dims[m]) return std::nullopt;
      composed.strides[k] += c[m] * first.strides[m];
    }
  }
  return composed;
}

caf::expected<TensorSpec> cat_result(const std::vector<TensorIr>& inputs, int64_t& axis) {
  if (inputs.empty()) return arg_error("cat: needs at least one tensor");
  const auto& first = inputs.front();
  auto n = normalize_axis(axis, first.shape.rank());
  if (!n)
    return shape_error("cat: axis " + std::to_string(axis) + " is out of range for shape " + first.shape.to_string());
  axis = *n;
  Shape out = first.shape;
  out.dims[axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    if (t.dtype != first.dtype)
      return dtype_error("cat: tensor " + std::to_string(i) + " is " + dt(t.dtype) + ", tensor 0 is " +
                         dt(first.dtype));
    if (t.shape.rank() != first.shape.rank())
      return shape_error("cat: tensor " + std::to_string(i) + " has shape " + t.shape.to_string() + ", tensor 0 has " +
                         first.shape.to_string());
    for (size_t d = 0; d < t.shape.rank(); ++d)
      if (static_cast<int64_t>(d) != axis && t.shape.dims[d] != first.shape.dims[d])
        return shape_error("cat: tensor " + std::to_string(i) + " has shape " + t.shape.to_string() +
                           ", which differs from " + first.shape.to_string() + " off axis " + std::to_string(axis));
    out.dims[axis] += t.shape.dims[axis];
  }
  return TensorSpec{std::move(out), first.dtype};
}

caf::expected<TensorSpec> pad_result(const Shape& s, DType t, const std::vector<int64_t>& before,
                                     const std::vector<int64_t>& after) {
  if (before.size() != s.rank() || after.size() != s.rank())
    return shape_error("pad: needs one (before, after) pair per axis of " + s.to_string());
  Shape out = s;
  for (size_t i = 0; i < s.rank(); ++i) {
    if (before[i] < 0 || after[i] < 0) return arg_error("pad: negative padding on axis " + std::to_string(i));
    int64_t grown = 0;
    if (__builtin_add_overflow(before[i], after[i], &grown) || __builtin_add_overflow(out.dims[i], grown, &out.dims[i]))
      return shape_error("pad: padding of axis " + std::to_string(i) + " of " + s.to_string() + " overflows");
  }
  return TensorSpec{std::move(out), t};
}

caf::expected<TensorSpec> index_result(IndexKind k, const TensorIr& in, const TensorIr& index, const TensorIr* src,
                                       int64_t& axis) {
  if (!in_range_index_kind(k)) return arg_error("unknown index op " + std::to_string(static_cast<int>(k)));
  std::string name = to_string(k);
  if (index.dtype != DType::i64 && index.dtype != DType::i32)
    return dtype_error(name + ": index must be i64 or i32, got " + dt(index.dtype));
  auto n = normalize_axis(axis, std::max<size_t>(in.shape.rank(), 1));
  if (!n)
    return shape_error(name + ": axis " + std::to_string(axis) + " is out of range for shape " + in.shape.to_string());
  axis = *n;
  switch (k) {
    case IndexKind::index_select: {
      if (index.shape.rank() > 1)
        return shape_error("index_select: index must be 0-D or 1-D, got " + index.shape.to_string());
      Shape out = in.shape;
      if (out.rank() > 0) out.dims[axis] = index.shape.numel();
      return TensorSpec{std::move(out), in.dtype};
    }
    case IndexKind::gather: {
      if (index.shape.rank() != in.shape.rank())
        return shape_error("gather: index " + index.shape.to_string() + " must have the rank of input " +
                           in.shape.to_string());
      for (size_t d = 0; d < in.shape.rank(); ++d)
        if (static_cast<int64_t>(d) != axis && index.shape.dims[d] > in.shape.dims[d])
          return shape_error("gather: index " + index.shape.to_string() + " exceeds input " + in.shape.to_string() +
                             " on axis " + std::to_string(d));
      return TensorSpec{index.shape, in.dtype};
    }
    case IndexKind::scatter_add:
    case IndexKind::scatter:
    case IndexKind::scatter_prod:
    case IndexKind::scatter_amax:
    case IndexKind::scatter_amin: {
      if (src == nullptr) return arg_error(name + ": needs a source tensor");
      if (src->dtype != in.dtype)
        return dtype_error(name + ": source is " + dt(src->dtype) + ", input is " + dt(in.dtype));
      if (index.shape.rank() != in.shape.rank() || src->shape.rank() != in.shape.rank())
        return shape_error(name + ": input " + in.shape.to_string() + ", index " + index.shape.to_string() +
                           " and source " + src->shape.to_string() + " must share a rank");
      for (size_t d = 0; d < in.shape.rank(); ++d) {
        if (index.shape.dims[d] > src->shape.dims[d] ||
            (static_cast<int64_t>(d) != axis && index.shape.dims[d] > in.shape.dims[d]))
          return shape_error(name + ": index " + index.shape.to_string() + " exceeds source " + src->shape.to_string() +
                             " or input " + in.shape.to_string() + " on axis " + std::to_string(d));
      }
      return TensorSpec{in.shape, in.dtype};
    }
  }
  return arg_error("unknown index op");
}

namespace {
// An optional per-channel (or per-normalised-element) operand: absent, or
// of `want` shape and the input's dtype.
caf::error check_param(const char* op, const char* what, const TensorIr* p, const Shape& want, DType t,
                       const Shape& input) {
  if (p == nullptr || !p->id) return {};
  if (p->dtype != t)
    return dtype_error(std::string(op) + ": " + what + " is " + dt(p->dtype) + ", input is " + dt(t) +
                       " (they must match)");
  if (p->shape != want)
    return shape_error(std::string(op) + ": " + what + " has shape " + p->shape.to_string() + ", expected " +
                       want.to_string() + " for input " + input.to_string());
  return {};
}
}  // namespace

caf::expected<TensorSpec> norm_result(NormKind k, const TensorIr& in, const TensorIr* mean, const TensorIr* var,
                                      const TensorIr* weight, const TensorIr* bias, int64_t count, double eps) {
  if (static_cast<unsigned>(k) > static_cast<unsigned>(NormKind::rms))
    return arg_error("unknown norm kind " + std::to_string(static_cast<int>(k)));
  const char* op = to_string(k);
  const Shape& s = in.shape;
  if (!is_floating(in.dtype)) return dtype_error(std::string(op) + " needs a floating input, got " + dt(in.dtype));
  if (!(eps >= 0) || std::isinf(eps))
    return arg_error(std::string(op) + ": eps must be finite and non-negative, got " + std::to_string(eps));
  Shape param;  // the shape of weight and bias
  switch (k) {
    case NormKind::batch:
    case NormKind::group: {
      if (s.rank() < 2)
        return shape_error(std::string(op) + ": input " + s.to_string() +
                           " needs at least 2 axes (batch, channels, ...)");
      const int64_t channels = s.dims[1];
      param = Shape{channels};
      if (k == NormKind::group) {
        if (count <= 0) return arg_error("group_norm: num_groups must be positive, got " + std::to_string(count));
        if (channels % count != 0)
          return shape_error("group_norm: channels " + std::to_string(channels) + " of input " + s.to_string() +
                             " are not divisible by num_groups=" + std::to_string(count));
      } else {
        if (mean == nullptr || var == nullptr || !mean->id || !var->id)
          return arg_error("batch_norm: running_mean and running_var are required (inference only)");
        if (auto e = check_param(op, "running_mean", mean, param, in.dtype, s)) return e;
        if (auto e = check_param(op, "running_var", var, param, in.dtype, s)) return e;
      }
      break;
    }
    case NormKind::layer:
    case NormKind::rms: {
      if (count < 1)
        return shape_error(std::string(op) + ": normalized_shape must name at least one axis (as PyTorch), input " +
                           s.to_string());
      if (static_cast<size_t>(count) > s.rank())
        return shape_error(std::string(op) + ": normalized_shape of " + std::to_string(count) +
                           " axes does not fit input " + s.to_string());
      param = Shape{std::vector<int64_t>(s.dims.end() - count, s.dims.end())};
      break;
    }
  }
  if (k != NormKind::batch && ((mean != nullptr && mean->id) || (var != nullptr && var->id)))
    return arg_error(std::string(op) + ": takes no running statistics");
  if (auto e = check_param(op, "weight", weight, param, in.dtype, s)) return e;
  if (k == NormKind::rms && bias != nullptr && bias->id) return arg_error("rms_norm: takes no bias");
  if (auto e = check_param(op, "bias", bias, param, in.dtype, s)) return e;
  return TensorSpec{s, in.dtype};
}

caf::expected<TensorSpec> attention_result(const TensorIr& q, const TensorIr& k, const TensorIr& v,
                                           const TensorIr* mask, bool causal) {
  const char* op = "scaled_dot_product_attention";
  auto shapes = [&] {
    return "q " + q.shape.to_string() + ", k " + k.shape.to_string() + ", v " + v.shape.to_string();
  };
  if (!is_floating(q.dtype)) return dtype_error(std::string(op) + ": needs floating q, k, v, got q " + dt(q.dtype));
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    return dtype_error(std::string(op) + ": q, k, v must share a dtype, got " + dt(q.dtype) + ", " + dt(k.dtype) +
                       ", " + dt(v.dtype));
  const size_t r = q.shape.rank();
  if (r < 2 || k.shape.rank() != r || v.shape.rank() != r)
    return shape_error(std::string(op) + ": q, k, v need the same rank >= 2, got " + shapes());
  for (size_t d = 0; d + 2 < r; ++d)
    if (k.shape.dims[d] != q.shape.dims[d] || v.shape.dims[d] != q.shape.dims[d])
      return shape_error(std::string(op) + ": batch axes differ: " + shapes());
  const int64_t L = q.shape.dims[r - 2], E = q.shape.dims[r - 1];
  const int64_t S = k.shape.dims[r - 2], Ev = v.shape.dims[r - 1];
  if (k.shape.dims[r - 1] != E)
    return shape_error(std::string(op) + ": embedding of k (" + std::to_string(k.shape.dims[r - 1]) +
                       ") differs from q's (" + std::to_string(E) + "): " + shapes());
  if (v.shape.dims[r - 2] != S)
    return shape_error(std::string(op) + ": v has " + std::to_string(v.shape.dims[r - 2]) + " keys, k has " +
                       std::to_string(S) + ": " + shapes());
  Shape scores = q.shape;
  scores.dims[r - 1] = S;
  if (mask != nullptr && mask->id) {
    if (causal) return arg_error(std::string(op) + ": attn_mask and is_causal cannot both be set (as PyTorch)");
    if (mask->dtype != DType::boolean && mask->dtype != q.dtype)
      return dtype_error(std::string(op) + ": attn_mask must be bool or " + dt(q.dtype) + " (q's dtype), got " +
                         dt(mask->dtype));
    auto b = broadcast_shapes(mask->shape, scores);
    if (!b || *b != scores)
      return shape_error(std::string(op) + ": attn_mask " + mask->shape.to_string() +
                         " does not broadcast to the scores " + scores.to_string());
  }
  (void)L;
  Shape out = q.shape;
  out.dims[r - 1] = Ev;
  return TensorSpec{std::move(out), q.dtype};
}

caf::expected<TensorSpec> scan_result(ScanKind k, const Shape& s, DType t, int64_t& axis, std::optional<DType> dtype) {
  if (static_cast<unsigned>(k) > static_cast<unsigned>(ScanKind::cumprod))
    return arg_error("unknown scan kind " + std::to_string(static_cast<int>(k)));
  const char* op = k == ScanKind::cumsum ? "cumsum" : "cumprod";
  auto n = normalize_axis(axis, std::max<size_t>(s.rank(), 1));
  if (!n)
    return shape_error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                       s.to_string());
  axis = *n;
  DType out = dtype ? *dtype : (is_floating(t) ? t : DType::i64);
  if (!is_valid(out)) return dtype_error(std::string(op) + ": invalid dtype");
  if (is_bool(out)) return dtype_error(std::string(op) + " cannot compute in bool (PyTorch has no bool kernel)");
  return TensorSpec{s, out};
}

caf::expected<TensorSpec> sort_result(SortKind k, const Shape& s, DType t, int64_t& axis, int64_t top_k) {
  if (static_cast<unsigned>(k) > static_cast<unsigned>(SortKind::topk))
    return arg_error("unknown sort kind " + std::to_string(static_cast<int>(k)));
  const char* op = k == SortKind::topk ? "topk" : "argsort";
  auto n = normalize_axis(axis, std::max<size_t>(s.rank(), 1));
  if (!n)
    return shape_error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                       s.to_string());
  axis = *n;
  if (k == SortKind::argsort) return TensorSpec{s, DType::i64};
  if (is_bool(t)) return dtype_error("topk is not defined for bool tensors (PyTorch has no bool kernel)");
  const int64_t extent = s.rank() == 0 ? 1 : s.dims[axis];
  if (top_k < 0 || top_k > extent)
    return arg_error("topk: k=" + std::to_string(top_k) + " is out of range for extent " + std::to_string(extent) +
                     " of axis " + std::to_string(axis) + " of " + s.to_string());
  Shape out = s;
  if (out.rank() > 0) out.dims[axis] = top_k;
  return TensorSpec{std::move(out), DType::i64};
}

caf::expected<TensorSpec> where_result(const TensorIr& cond, const TensorIr& a, const TensorIr& b) {
  if (cond.dtype != DType::boolean) return dtype_error("where: condition must be bool, got " + dt(cond.dtype));
  auto s1 = broadcast_shapes(cond.shape, a.shape);
  auto s2 = s1 ? broadcast_shapes(*s1, b.shape) : std::nullopt;
  if (!s2)
    return shape_error("where: shapes " + cond.shape.to_string() + ", " + a.shape.to_string() + " and " +
                       b.shape.to_string() + " cannot be broadcast together");
  return TensorSpec{std::move(*s2), result_type(a.shape.rank() == 0, a.dtype, b.shape.rank() == 0, b.dtype)};
}

// --- convolution and pooling ------------------------------------------------

namespace {

// Arguments arrive from peers unchecked: bound them (2^20) so that every size
// computed from them fits easily in int64 (dims are at most 2^40 already).
constexpr int64_t max_conv_arg = int64_t{1} << 20;

std::string list(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

std::string spatial_name(const char* stem, size_t n) {
  return std::string(stem) + (n >= 1 && n <= 3 ? std::to_string(n) + "d" : "");
}

// Each of `v` is in [lo, max_conv_arg]; `what` names the argument.
caf::error check_args(const std::string& op, const char* what, const std::vector<int64_t>& v, size_t n, int64_t lo) {
  if (v.size() != n)
    return arg_error(op + ": " + what + " has " + std::to_string(v.size()) + " entries for " + std::to_string(n) +
                     " spatial axes");
  for (auto x : v) {
    if (x < lo)
      return arg_error(op + ": " + what + " " + list(v) + " must be " + (lo == 0 ? "non-negative" : "at least 1"));
    if (x > max_conv_arg) return arg_error(op + ": " + what + " " + list(v) + " is too large");
  }
  return {};
}

}  // namespace

caf::expected<TensorSpec> conv_result(const ConvOp& op) {
  const size_t n = op.stride.size();
  const std::string name = spatial_name(op.transposed ? "conv_transpose" : "conv", n);
  if (n < 1 || n > 3) return arg_error("conv: 1, 2 or 3 spatial axes, got " + std::to_string(n));
  if (auto e = check_args(name, "stride", op.stride, n, 1)) return e;
  if (auto e = check_args(name, "dilation", op.dilation, n, 1)) return e;
  if (auto e = check_args(name, "padding (before)", op.pad_before, n, 0)) return e;
  if (auto e = check_args(name, "padding (after)", op.pad_after, n, 0)) return e;
  if (auto e = check_args(name, "output_padding", op.output_padding, n, 0)) return e;
  if (op.groups < 1 || op.groups > max_conv_arg)
    return arg_error(name + ": groups must be positive, got " + std::to_string(op.groups));
  const Shape& x = op.input.shape;
  const Shape& w = op.weight.shape;
  if (x.rank() != n + 1 && x.rank() != n + 2)
    return shape_error(name + ": expected a " + std::to_string(n + 1) + "-D (unbatched) or " + std::to_string(n + 2) +
                       "-D (batched) input, got " + x.to_string());
  if (w.rank() != n + 2)
    return shape_error(name + ": weight must have " + std::to_string(n + 2) + " axes, got " + w.to_string());
  if (!is_floating(op.input.dtype))
    return dtype_error(name + ": needs a floating input (f32 or f64), got " + dt(op.input.dtype));
  if (op.weight.dtype != op.input.dtype)
    return dtype_error(name + ": weight is " + dt(op.weight.dtype) + ", input is " + dt(op.input.dtype) +
                       " (they must match)");
  const bool batched = x.rank() == n + 2;
  const size_t c_axis = batched ? 1 : 0;
  const int64_t c_in = x.dims[c_axis];
  const int64_t g = op.groups;
  int64_t c_out = 0;
  // PyTorch runs an empty batch or 0 channels, not an empty spatial axis
  // (which padding would otherwise turn into a result of the bias alone).
  if (!op.transposed && c_in > 0 && (!batched || x.dims[0] > 0))
    for (size_t i = c_axis + 1; i < x.rank(); ++i)
      if (x.dims[i] == 0)
        return shape_error(name + ": input " + x.to_string() +
                           " is empty on a spatial axis (only an empty batch or 0 channels are supported)");
  if (!op.transposed) {
    if (w.dims[0] % g != 0)
      return shape_error(name + ": given groups=" + std::to_string(g) + ", weight " + w.to_string() +
                         " has out channels not divisible by groups");
    if (w.dims[1] * g != c_in)
      return shape_error(name + ": given groups=" + std::to_string(g) + ", weight " + w.to_string() +
                         " expects input " + x.to_string() + " to have " + std::to_string(w.dims[1] * g) +
                         " channels, but it has " + std::to_string(c_in));
    c_out = w.dims[0];
    for (size_t i = 0; i < n; ++i)
      if (op.output_padding[i] != 0)
        return arg_error(name + ": output_padding " + list(op.output_padding) + " is only for transposed convolutions");
  } else {
    if (c_in % g != 0)
      return shape_error(name + ": input " + x.to_string() +
                         " has channels not divisible by groups=" + std::to_string(g));
    if (w.dims[0] != c_in)
      return shape_error(name + ": given transposed=1, weight " + w.to_string() + " expects input " + x.to_string() +
                         " to have " + std::to_string(w.dims[0]) + " channels, but it has " + std::to_string(c_in));
    c_out = w.dims[1] * g;
    for (size_t i = 0; i < n; ++i)
      if (op.output_padding[i] >= op.stride[i] && op.output_padding[i] >= op.dilation[i])
        return arg_error(name + ": output_padding " + list(op.output_padding) + " must be smaller than either stride " +
                         list(op.stride) + " or dilation " + list(op.dilation));
  }
  if (op.has_bias()) {
    if (op.bias.dtype != op.input.dtype)
      return dtype_error(name + ": bias is " + dt(op.bias.dtype) + ", input is " + dt(op.input.dtype));
    if (op.bias.shape.rank() != 1 || op.bias.shape.dims[0] != c_out)
      return shape_error(name + ": given weight " + w.to_string() + ", expected bias to be 1-D with " +
                         std::to_string(c_out) + " elements, got " + op.bias.shape.to_string());
  }
  Shape out = x;
  out.dims[c_axis] = c_out;
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = x.dims[c_axis + 1 + i];
    const int64_t k = w.dims[2 + i];
    if (k < 1) return shape_error(name + ": weight " + w.to_string() + " has an empty kernel");
    const int64_t effective = op.dilation[i] * (k - 1) + 1;
    if (!op.transposed) {
      const int64_t padded = in + op.pad_before[i] + op.pad_after[i];
      if (padded < effective)
        return shape_error(name + ": padded input " + x.to_string() + " (axis " + std::to_string(c_axis + 1 + i) +
                           ": " + std::to_string(padded) + ") is smaller than the dilated kernel (" +
                           std::to_string(effective) + ") of weight " + w.to_string());
      out.dims[c_axis + 1 + i] = (padded - effective) / op.stride[i] + 1;
    } else {
      const int64_t extent =
          (in - 1) * op.stride[i] - op.pad_before[i] - op.pad_after[i] + effective + op.output_padding[i];
      if (extent < 1 && in > 0)
        return shape_error(name + ": input " + x.to_string() + " with weight " + w.to_string() + ", stride " +
                           list(op.stride) + " and padding gives a non-positive output extent " +
                           std::to_string(extent));
      out.dims[c_axis + 1 + i] = std::max<int64_t>(extent, 0);
    }
  }
  if (auto e = check_shape(out, name.c_str())) return e;
  return TensorSpec{std::move(out), op.input.dtype};
}

int64_t pool_output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad_before, int64_t pad_after,
                           int64_t dilation, bool ceil_mode) {
  // PyTorch's pooling_output_shape_pad_lr: floor (or ceil) division, then
  // in ceil mode the last window must start inside the input or the left
  // padding.
  const int64_t span = in + pad_before + pad_after - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  const int64_t q = span >= 0 ? span / stride : -((-span + stride - 1) / stride);
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad_before) --out;
  return out;
}

caf::expected<TensorSpec> pool_result(const PoolOp& op) {
  static constexpr const char* stems[] = {"max_pool",          "max_pool",          "avg_pool",
                                          "adaptive_avg_pool", "adaptive_max_pool", "adaptive_max_pool"};
  if (static_cast<size_t>(op.kind) >= std::size(stems))
    return arg_error("pool: unknown kind " + std::to_string(static_cast<int>(op.kind)));
  const size_t n = op.spatial();
  const std::string name = spatial_name(stems[static_cast<int>(op.kind)], n);
  if (n < 1 || n > 3) return arg_error(name + ": 1, 2 or 3 spatial axes, got " + std::to_string(n));
  const Shape& x = op.in.shape;
  if (x.rank() != n + 1 && x.rank() != n + 2)
    return shape_error(name + ": expected a " + std::to_string(n + 1) + "-D (unbatched) or " + std::to_string(n + 2) +
                       "-D (batched) input, got " + x.to_string());
  const bool is_avg = op.kind == PoolKind::avg || op.kind == PoolKind::adaptive_avg;
  if (!is_floating(op.in.dtype) && !(op.kind == PoolKind::avg && op.in.dtype == DType::i64))
    return dtype_error(name + ": not defined for " + dt(op.in.dtype) + " tensors (PyTorch 1.13 CPU takes " +
                       (op.kind == PoolKind::avg ? "f32, f64 and i64" : "f32 and f64") + ")");
  const bool indices = op.kind == PoolKind::max_indices || op.kind == PoolKind::adaptive_max_indices;
  const DType out_dtype = indices ? DType::i64 : op.in.dtype;
  Shape out = x;
  const size_t first = x.rank() - n;
  if (op.adaptive()) {
    if (auto e = check_args(name, "output_size", op.output_size, n, 0)) return e;
    for (size_t i = 0; i < n; ++i) {
      if (x.dims[first + i] == 0) return shape_error(name + ": input " + x.to_string() + " is empty on a pooled axis");
      out.dims[first + i] = op.output_size[i];
    }
    if (auto e = check_shape(out, name.c_str())) return e;
    return TensorSpec{std::move(out), out_dtype};
  }
  if (auto e = check_args(name, "kernel_size", op.kernel, n, 1)) return e;
  if (auto e = check_args(name, "stride", op.stride, n, 1)) return e;
  if (auto e = check_args(name, "dilation", op.dilation, n, 1)) return e;
  if (auto e = check_args(name, "padding (before)", op.pad_before, n, 0)) return e;
  if (auto e = check_args(name, "padding (after)", op.pad_after, n, 0)) return e;
  if (is_avg) {
    for (auto d : op.dilation)
      if (d != 1) return arg_error(name + ": dilation " + list(op.dilation) + " is not supported (only 1)");
  } else if (op.divisor_override != 0) {
    return arg_error(name + ": divisor_override is for avg_pool only");
  }
  if (op.divisor_override < -max_conv_arg || op.divisor_override > max_conv_arg)
    return arg_error(name + ": divisor_override " + std::to_string(op.divisor_override) + " is too large");
  for (size_t i = 0; i < n; ++i) {
    // PyTorch: "pad should be at most half of kernel size".
    if (op.pad_before[i] > op.kernel[i] / 2 || op.pad_after[i] > op.kernel[i] / 2)
      return arg_error(name + ": padding " + list(op.pad_before) + " / " + list(op.pad_after) +
                       " should be at most half of kernel_size " + list(op.kernel));
    out.dims[first + i] = pool_output_extent(x.dims[first + i], op.kernel[i], op.stride[i], op.pad_before[i],
                                             op.pad_after[i], op.dilation[i], op.ceil_mode);
  }
  // PyTorch's avg_pool3d wants the unpadded input at least the kernel's size
  // (its 1-D, 2-D and max pools do not).
  if (is_avg && n == 3)
    for (size_t i = 0; i < n; ++i)
      if (x.dims[first + i] < op.kernel[i])
        return shape_error(name + ": input " + x.to_string() + " is smaller than kernel_size " + list(op.kernel) +
                           " (before padding)");
  // PyTorch's max_pool1d without indices gives an empty result where the
  // window does not fit; the others refuse.
  const bool empty_ok = op.kind == PoolKind::max && n == 1;
  for (size_t i = 0; i < n; ++i)
    if (out.dims[first + i] < (empty_ok ? 0 : 1))
      return shape_error(name + ": input " + x.to_string() + " with kernel_size " + list(op.kernel) + ", stride " +
                         list(op.stride) + ", padding " + list(op.pad_before) + " and dilation " + list(op.dilation) +
                         " gives output " + out.to_string() + ": output size is too small");
  if (auto e = check_shape(out, name.c_str())) return e;
  return TensorSpec{std::move(out), out_dtype};
}

namespace {

caf::error expect_out(const char* op, const TensorIr& out, const caf::expected<TensorSpec>& spec) {
  if (!spec) return spec.error();
  if (out.shape != spec->shape || out.dtype != spec->dtype)
    return make_error(Errc::protocol_error, std::string(op) + ": declared output " + out.shape.to_string() + " " +
                                                dt(out.dtype) + " differs from the rules' " + spec->shape.to_string() +
                                                " " + dt(spec->dtype));
  return {};
}

struct Validator {
  caf::error operator()(FromDataOp& x) {
    if (x.data.shape != x.out.shape || x.data.dtype != x.out.dtype)
      return make_error(Errc::protocol_error, "from_data: data " + x.data.shape.to_string() + " " + dt(x.data.dtype) +
                                                  " differs from tensor " + x.out.shape.to_string() + " " +
                                                  dt(x.out.dtype));
    if (x.data.bytes.size() != x.out.bytes())
      return make_error(Errc::protocol_error, "from_data: " + std::to_string(x.data.bytes.size()) + " bytes for " +
                                                  std::to_string(x.out.bytes()) + " expected");
    return {};
  }
  caf::error operator()(FillOp& x) {
    if (x.kind == FillKind::arange && x.out.shape.rank() != 1) return shape_error("arange: output must be 1-D");
    if (x.kind == FillKind::eye && x.out.shape.rank() < 2) return shape_error("eye: output needs at least 2 axes");
    return {};
  }
  caf::error operator()(RandomOp& x) {
    if (x.kind != RandomKind::bernoulli && !is_floating(x.out.dtype))
      return dtype_error("random: uniform and normal need a floating dtype, got " + dt(x.out.dtype));
    if (x.kind == RandomKind::bernoulli && !(x.a >= 0 && x.a <= 1))
      return arg_error("bernoulli: probability " + std::to_string(x.a) + " is outside [0, 1]");
    return {};
  }
  caf::error operator()(UnaryOp& x) {
    return expect_out(to_string(x.kind), x.out, unary_result(x.kind, x.in.shape, x.in.dtype));
  }
  caf::error operator()(BinaryOp& x) {
    return expect_out(to_string(x.kind), x.out,
                      binary_result(x.kind, x.lhs.shape, x.lhs.dtype, x.rhs.shape, x.rhs.dtype));
  }
  caf::error operator()(ScalarOp& x) {
    return expect_out(to_string(x.kind), x.out, scalar_result(x.kind, x.lhs.shape, x.lhs.dtype, x.scalar.kind));
  }
  caf::error operator()(ReduceOp& x) {
    return expect_out(to_string(x.kind), x.out, reduce_result(x.kind, x.in.shape, x.in.dtype, x.axes, x.keepdim));
  }
  caf::error operator()(SoftmaxOp& x) {
    return expect_out("softmax", x.out, softmax_result(x.in.shape, x.in.dtype, x.axis));
  }
  caf::error operator()(MatmulOp& x) {
    auto spec = matmul_result(x.lhs.shape, x.lhs.dtype, x.rhs.shape, x.rhs.dtype, x.transpose_lhs, x.transpose_rhs);
    if (spec && x.has_bias()) {
      if (x.bias.dtype != spec->dtype)
        return dtype_error("linear: bias is " + dt(x.bias.dtype) + ", product is " + dt(spec->dtype));
      auto b = broadcast_shapes(spec->shape, x.bias.shape);
      if (!b || *b != spec->shape)
        return shape_error("linear: bias " + x.bias.shape.to_string() + " does not broadcast to " +
                           spec->shape.to_string());
    }
    return expect_out("matmul", x.out, spec);
  }
  caf::error operator()(CastOp& x) { return expect_out("cast", x.out, TensorSpec{x.in.shape, x.out.dtype}); }
  caf::error operator()(ViewOp& x) {
    if (x.in.dtype != x.out.dtype) return dtype_error("view: changes dtype");
    return check_view(x.in.numel(), x.out.shape, x.offset, x.strides);
  }
  caf::error operator()(SliceAssignOp& x) {
    if (x.base.dtype != x.value.dtype || x.out.dtype != x.base.dtype)
      return dtype_error("slice_assign: value is " + dt(x.value.dtype) + ", base is " + dt(x.base.dtype));
    if (x.out.shape != x.base.shape) return shape_error("slice_assign: output must have the base's shape");
    return check_view(x.base.numel(), x.value.shape, x.offset, x.strides);
  }
  caf::error operator()(CatOp& x) { return expect_out("cat", x.out, cat_result(x.inputs, x.axis)); }
  caf::error operator()(PadOp& x) {
    return expect_out("pad", x.out, pad_result(x.in.shape, x.in.dtype, x.before, x.after));
  }
  caf::error operator()(IndexOp& x) {
    return expect_out("index", x.out, index_result(x.kind, x.in, x.index, x.has_src() ? &x.src : nullptr, x.axis));
  }
  caf::error operator()(NormOp& x) {
    return expect_out(to_string(x.kind), x.out,
                      norm_result(x.kind, x.in, &x.mean, &x.var, &x.weight, &x.bias, x.count, x.eps));
  }
  caf::error operator()(AttentionOp& x) {
    if (!std::isfinite(x.scale)) return arg_error("scaled_dot_product_attention: scale must be finite");
    return expect_out("scaled_dot_product_attention", x.out, attention_result(x.q, x.k, x.v, &x.mask, x.causal));
  }
  caf::error operator()(ScanOp& x) {
    return expect_out("scan", x.out, scan_result(x.kind, x.in.shape, x.in.dtype, x.axis, x.out.dtype));
  }
  caf::error operator()(SortOp& x) {
    return expect_out("sort", x.out, sort_result(x.kind, x.in.shape, x.in.dtype, x.axis, x.k));
  }
  caf::error operator()(WhereOp& x) { return expect_out("where", x.out, where_result(x.cond, x.lhs, x.rhs)); }
  caf::error operator()(DropOp&) { return {}; }
  caf::error operator()(SeedOp&) { return {}; }
  caf::error operator()(ConvOp& x) { return expect_out("conv", x.out, conv_result(x)); }
  caf::error operator()(PoolOp& x) { return expect_out("pool", x.out, pool_result(x)); }
};

// Enums arrive as raw bytes from a peer: an out-of-range kind must fail
// here, not reach a backend's switch.
template <class E>
bool in_range(E e, E last) {
  return static_cast<unsigned>(e) <= static_cast<unsigned>(last);
}

struct KindChecker {
  caf::error bad(const char* what, unsigned v) const {
    return make_error(Errc::protocol_error, std::string(what) + ": unknown kind " + std::to_string(v));
  }
  template <class Op, class E>
  caf::error check(const Op&, const char* what, E kind, E last) const {
    return in_range(kind, last) ? caf::error{} : bad(what, static_cast<unsigned>(kind));
  }
  caf::error operator()(const FillOp& x) const { return check(x, "fill", x.kind, FillKind::eye); }
  caf::error operator()(const RandomOp& x) const { return check(x, "random", x.kind, RandomKind::bernoulli); }
  caf::error operator()(const UnaryOp& x) const {
    return check(x, "unary", x.kind, static_cast<UnaryKind>(unary_kind_count - 1));
  }
  caf::error operator()(const BinaryOp& x) const {
    return check(x, "binary", x.kind, static_cast<BinaryKind>(binary_kind_count - 1));
  }
  caf::error operator()(const ScalarOp& x) const {
    // Tested before an error exists: each caf::error made and destroyed is
    // an out-of-line call into CAF, and every scalar op of a local batch
    // comes here.
    if (!in_range(x.kind, static_cast<BinaryKind>(binary_kind_count - 1)))
      return bad("scalar", static_cast<unsigned>(x.kind));
    if (!in_range(x.scalar.kind, ScalarKind::floating))
      return bad("scalar operand", static_cast<unsigned>(x.scalar.kind));
    if (x.scalar.kind == ScalarKind::boolean && x.scalar.i != 0 && x.scalar.i != 1)
      return make_error(Errc::protocol_error, "scalar: a bool operand holds " + std::to_string(x.scalar.i));
    return {};
  }
  caf::error operator()(const ReduceOp& x) const { return check(x, "reduce", x.kind, ReduceKind::all); }
  caf::error operator()(const PoolOp& x) const { return check(x, "pool", x.kind, PoolKind::adaptive_max_indices); }
  caf::error operator()(const IndexOp& x) const { return check(x, "index", x.kind, IndexKind::scatter_amin); }
  caf::error operator()(const NormOp& x) const { return check(x, "norm", x.kind, NormKind::rms); }
  caf::error operator()(const ScanOp& x) const { return check(x, "scan", x.kind, ScanKind::cumprod); }
  caf::error operator()(const SortOp& x) const { return check(x, "sort", x.kind, SortKind::topk); }
  template <class Op>
  caf::error operator()(const Op&) const {
    return {};
  }
};

}  // namespace

namespace {
// validate()'s checks of a tensor as plain tests, building no error object.
bool tensor_passes(const TensorIr& t, bool input) noexcept {
  return t.id && is_valid(t.dtype) && (!input || in_range(t.status, TensorStatus::read_write)) && shape_passes(t.shape);
}

constexpr auto last_unary = static_cast<UnaryKind>(unary_kind_count - 1);
constexpr auto last_binary = static_cast<BinaryKind>(binary_kind_count - 1);

// Unary, binary and scalar ops are most of what a remote batch holds (and
// every op of a fused chain is validated before it joins the chain). This
// accepts such an op only if it passes every check validate() makes, through
// the same rules (unary_dtype, binary_operands_dtype, scalar_result_dtype),
// without the error objects and spec copies of the full checks, ~400
// instructions per op; an op it does not accept takes the full checks,
// which say why.
bool passes_quickly(const OperationIr& op) noexcept {
  if (const auto* x = std::get_if<ScalarOp>(&op.op)) {
    return in_range(x->kind, last_binary) && in_range(x->scalar.kind, ScalarKind::floating) &&
           (x->scalar.kind != ScalarKind::boolean || x->scalar.i == 0 || x->scalar.i == 1) &&
           tensor_passes(x->lhs, true) && tensor_passes(x->out, false) && x->out.shape == x->lhs.shape &&
           scalar_result_dtype(x->kind, x->lhs.dtype, x->scalar.kind) == x->out.dtype;
  }
  if (const auto* x = std::get_if<UnaryOp>(&op.op)) {
    return in_range(x->kind, last_unary) && tensor_passes(x->in, true) && tensor_passes(x->out, false) &&
           x->out.shape == x->in.shape && unary_dtype(x->kind, x->in.dtype) == x->out.dtype;
  }
  if (const auto* x = std::get_if<BinaryOp>(&op.op)) {
    if (!in_range(x->kind, last_binary) || !tensor_passes(x->lhs, true) || !tensor_passes(x->rhs, true) ||
        !tensor_passes(x->out, false))
      return false;
    if (x->lhs.shape == x->rhs.shape) {
      if (x->out.shape != x->lhs.shape) return false;
    } else if (broadcast_shapes(x->lhs.shape, x->rhs.shape) != x->out.shape) {
      return false;
    }
    return binary_operands_dtype(x->kind, x->lhs.shape.rank() == 0, x->lhs.dtype, x->rhs.shape.rank() == 0,
                                 x->rhs.dtype) == x->out.dtype;
  }
  return false;
}
}  // namespace

caf::error validate(OperationIr& op) {
  if (passes_quickly(op)) return {};
  if (auto err = std::visit(KindChecker{}, op.op)) return err;
  caf::error err;
  op.each_input([&](TensorIr& t) {
    if (err) return;
    if (!t.id)
      err = make_error(Errc::protocol_error, op.name() + ": input without an id");
    else if (!is_valid(t.dtype))
      err = make_error(Errc::protocol_error, op.name() + ": input with an invalid dtype");
    else if (!in_range(t.status, TensorStatus::read_write))
      err = make_error(Errc::protocol_error, op.name() + ": input with an invalid status");
    else
      err = check_shape(t.shape, "input");
  });
  op.each_output([&](TensorIr& t) {
    if (err) return;
    if (!t.id)
      err = make_error(Errc::protocol_error, op.name() + ": output without an id");
    else if (!is_valid(t.dtype))
      err = make_error(Errc::protocol_error, op.name() + ": output with an invalid dtype");
    else
      err = check_shape(t.shape, "output");
  });
  if (err) return err;
  return std::visit(Validator{}, op.op);
}

caf::error validate_local(OperationIr& op) {
  // The second check of these cost ~400 instructions per op (the rules
  // again, every shape, the visits), a tenth of a tiny op's whole cost.
  if (std::holds_alternative<UnaryOp>(op.op) || std::holds_alternative<BinaryOp>(op.op) ||
      std::holds_alternative<ScalarOp>(op.op))
    return std::visit(KindChecker{}, op.op);
  // A matmul's (Tensor::matmul and ::linear, the only clients that make
  // one) were ~1,300 instructions, twice per op (fusion's look and the run),
  // for what matmul_result and the bias checks said at the call.
  if (std::holds_alternative<MatmulOp>(op.op)) return {};
  return validate(op);
}

caf::error validate_data(const TensorData& data) {
  if (!is_valid(data.dtype)) return make_error(Errc::protocol_error, "tensor data with an invalid dtype");
  if (auto err = check_shape(data.shape, "tensor data")) return err;
  auto want = static_cast<size_t>(data.shape.numel()) * size_of(data.dtype);
  if (data.bytes.size() != want)
    return make_error(Errc::protocol_error, "tensor data of shape " + data.shape.to_string() + " " + dt(data.dtype) +
                                                " carries " + std::to_string(data.bytes.size()) + " bytes, expected " +
                                                std::to_string(want));
  return {};
}

caf::error validate_data(const TensorData& data, const Shape& shape, DType dtype) {
  if (auto err = validate_data(data)) return err;
  if (data.shape != shape || data.dtype != dtype)
    return make_error(Errc::protocol_error, "tensor data of " + data.shape.to_string() + " " + dt(data.dtype) +
                                                ", expected " + shape.to_string() + " " + dt(dtype));
  return {};
}

}  // namespace switchyard
