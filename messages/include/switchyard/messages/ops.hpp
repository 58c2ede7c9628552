// SPDX-License-Identifier: Apache-2.0
#pragma once

// The op set as value types: what a client submits and a backend executes
// (include/switchyard/backend.hpp). No CAF here: their wire format (inspect
// overloads) is in operation_ir.hpp, which the actors and the protocol use.

#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "switchyard/messages/op_kinds.hpp"
#include "switchyard/messages/scalar.hpp"
#include "switchyard/messages/tensor_data.hpp"
#include "switchyard/messages/tensor_ir.hpp"

namespace switchyard {

// The op set, in families: every backend implements every family, and a
// kernel is written once per family with the element operation as a
// parameter. Shape and dtype rules for all of them live in op_rules.hpp.

enum class ReduceKind : uint8_t { sum, mean, prod, max, min, argmax, argmin, var, std, any, all };

enum class FillKind : uint8_t { full, arange, eye };
enum class RandomKind : uint8_t { uniform, normal, bernoulli };
/// max_indices / adaptive_max_indices give PyTorch's flat index of the
/// maximum within its input plane (i64); the others give values.
enum class PoolKind : uint8_t { max, max_indices, avg, adaptive_avg, adaptive_max, adaptive_max_indices };

[[nodiscard]] const char* to_string(PoolKind k) noexcept;
// scatter .. scatter_amin were appended after index_select (wire values of
// the first three stay). scatter_reduce(reduce="sum") is scatter_add.
enum class IndexKind : uint8_t { gather, scatter_add, index_select, scatter, scatter_prod, scatter_amax, scatter_amin };
enum class NormKind : uint8_t { batch, layer, group, rms };
enum class ScanKind : uint8_t { cumsum, cumprod };
enum class SortKind : uint8_t { argsort, topk };

[[nodiscard]] const char* to_string(ReduceKind k) noexcept;
[[nodiscard]] const char* to_string(IndexKind k) noexcept;
[[nodiscard]] const char* to_string(NormKind k) noexcept;

/// Uploads host data into a new tensor.
struct FromDataOp {
  TensorIr out;
  TensorData data;
  template <class F>
  void each_input(F&&) {}
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// full(value), arange(start=value, step), eye (ones on the diagonal of the
/// last two axes).
struct FillOp {
  FillKind kind = FillKind::full;
  TensorIr out;
  double value = 0;
  double step = 1;
  template <class F>
  void each_input(F&&) {}
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Counter-based random numbers: element i of the n-th random op after a
/// seed depends only on (seed, n, i), so results do not depend on threads
/// or launch shapes. uniform in [a, b), normal(mean a, std b), bernoulli(p a).
struct RandomOp {
  RandomKind kind = RandomKind::uniform;
  TensorIr out;
  double a = 0;
  double b = 1;
  template <class F>
  void each_input(F&&) {}
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// out = op(in); `a` and `b` are clamp's bounds (NaN where absent).
struct UnaryOp {
  UnaryKind kind = UnaryKind::neg;
  TensorIr in;
  TensorIr out;
  double a = 0;
  double b = 0;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// out = lhs op rhs with NumPy broadcasting; inputs are converted to the
/// promoted dtype first.
struct BinaryOp {
  BinaryKind kind = BinaryKind::add;
  TensorIr lhs;
  TensorIr rhs;
  TensorIr out;
  template <class F>
  void each_input(F&& f) {
    f(lhs);
    f(rhs);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// out = lhs op scalar (or scalar op lhs when `scalar_first`). The scalar
/// travels exactly (int64 / uint64 / double by kind).
struct ScalarOp {
  BinaryKind kind = BinaryKind::add;
  TensorIr lhs;
  Scalar scalar;
  bool scalar_first = false;
  TensorIr out;
  template <class F>
  void each_input(F&& f) {
    f(lhs);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Reduction over `axes` (sorted, unique, non-negative; empty = all axes).
/// `correction` is var/std's Bessel correction.
struct ReduceOp {
  ReduceKind kind = ReduceKind::sum;
  TensorIr in;
  TensorIr out;
  std::vector<int64_t> axes;
  bool keepdim = false;
  int64_t correction = 1;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Numerically stable (log_)softmax along one axis.
struct SoftmaxOp {
  TensorIr in;
  TensorIr out;
  int64_t axis = -1;
  bool log = false;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Batched matrix product over the last two axes with broadcasting of the
/// batch axes; optional transposes of either operand and an optional bias
/// (bias.id == 0 when absent) broadcast onto the result: linear = x W^T + b.
struct MatmulOp {
  TensorIr lhs;
  TensorIr rhs;
  TensorIr bias;
  TensorIr out;
  bool transpose_lhs = false;
  bool transpose_rhs = false;
  [[nodiscard]] bool has_bias() const noexcept { return static_cast<bool>(bias.id); }
  template <class F>
  void each_input(F&& f) {
    f(lhs);
    f(rhs);
    if (has_bias()) f(bias);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Converts every element to out.dtype (C++ conversion; float to integer
/// truncates toward zero, out-of-range values wrap as in PyTorch's CPU path).
struct CastOp {
  TensorIr in;
  TensorIr out;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Strided gather into a fresh contiguous tensor:
///   out[i0..ik] = in_flat[offset + sum_k i_k * strides[k]].
/// Reshape, permute, transpose, expand (stride 0), flip (negative stride),
/// squeeze/unsqueeze and stepped slices are all this one op.
struct ViewOp {
  TensorIr in;
  TensorIr out;
  int64_t offset = 0;
  std::vector<int64_t> strides;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// out = copy of base whose strided region (offset/strides over
/// value.shape, in base's flat layout) is replaced by value.
struct SliceAssignOp {
  TensorIr base;
  TensorIr value;
  TensorIr out;
  int64_t offset = 0;
  std::vector<int64_t> strides;
  template <class F>
  void each_input(F&& f) {
    f(base);
    f(value);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Concatenation along `axis` of same-dtype inputs.
struct CatOp {
  std::vector<TensorIr> inputs;
  TensorIr out;
  int64_t axis = 0;
  template <class F>
  void each_input(F&& f) {
    for (auto& t : inputs) f(t);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Constant padding: `before[k]`/`after[k]` elements on axis k.
struct PadOp {
  TensorIr in;
  TensorIr out;
  std::vector<int64_t> before;
  std::vector<int64_t> after;
  double value = 0;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// gather(in, axis, index), scatter_add(in, axis, index, src),
/// index_select(in, axis, index), scatter(in, axis, index, src) and
/// scatter_reduce(in, axis, index, src, prod|amax|amin, include_self=true)
/// with PyTorch's semantics; indices are i64
/// (or i32), and an index out of range fails the op naming it.
struct IndexOp {
  IndexKind kind = IndexKind::gather;
  TensorIr in;
  TensorIr index;
  TensorIr src;  ///< the scatter kinds only (id 0 otherwise)
  TensorIr out;
  int64_t axis = 0;
  template <class F>
  void each_input(F&& f) {
    f(in);
    f(index);
    if (has_src()) f(src);
  }
  [[nodiscard]] bool has_src() const noexcept { return kind != IndexKind::gather && kind != IndexKind::index_select; }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// out = cond ? lhs : rhs with broadcasting of all three.
struct WhereOp {
  TensorIr cond;
  TensorIr lhs;
  TensorIr rhs;
  TensorIr out;
  template <class F>
  void each_input(F&& f) {
    f(cond);
    f(lhs);
    f(rhs);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Normalisation of `in` (floating); optional operands have id 0 when absent.
///   batch: (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c], the
///          channel axis 1, running statistics (inference);
///   layer: over the last `count` axes, weight/bias of their shape;
///   group: `count` groups of the channel axis 1, per-channel weight/bias;
///   rms:   x / sqrt(mean(x^2 over the last `count` axes) + eps) * weight.
/// Statistics are biased (divide by n), as PyTorch's.
struct NormOp {
  NormKind kind = NormKind::layer;
  TensorIr in;
  TensorIr mean;  ///< batch only: running mean [C]
  TensorIr var;   ///< batch only: running variance [C]
  TensorIr weight;
  TensorIr bias;
  TensorIr out;
  int64_t count = 1;  ///< layer/rms: normalised trailing axes; group: groups
  double eps = 1e-5;
  [[nodiscard]] bool has_weight() const noexcept { return static_cast<bool>(weight.id); }
  [[nodiscard]] bool has_bias() const noexcept { return static_cast<bool>(bias.id); }
  template <class F>
  void each_input(F&& f) {
    f(in);
    if (kind == NormKind::batch) {
      f(mean);
      f(var);
    }
    if (has_weight()) f(weight);
    if (has_bias()) f(bias);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// softmax(q k^T * scale + mask) v over the last two axes, batch axes equal:
/// q [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev]. The mask
/// (id 0 when absent) broadcasts to [..., L, S]: bool keeps where true, a
/// floating mask (q's dtype) is added to the scores. `causal` keeps key j
/// for query i when j <= i. A row with every key masked gives NaN (as the
/// softmax of only -inf does).
struct AttentionOp {
  TensorIr q;
  TensorIr k;
  TensorIr v;
  TensorIr mask;
  TensorIr out;
  bool causal = false;
  double scale = 1;
  [[nodiscard]] bool has_mask() const noexcept { return static_cast<bool>(mask.id); }
  template <class F>
  void each_input(F&& f) {
    f(q);
    f(k);
    f(v);
    if (has_mask()) f(mask);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Inclusive cumulative sum or product along `axis`, computed in out.dtype
/// (the input converted to it first).
struct ScanOp {
  ScanKind kind = ScanKind::cumsum;
  TensorIr in;
  TensorIr out;
  int64_t axis = 0;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// i64 positions along `axis`: argsort (stable; `descending`) or the
/// indices of the `k` largest (`descending`) or smallest elements, in sorted
/// order when `sorted` (otherwise in any order the backend picks). NaN
/// counts as larger than every number, as in PyTorch; equal elements keep
/// their index order.
struct SortOp {
  SortKind kind = SortKind::argsort;
  TensorIr in;
  TensorIr out;
  int64_t axis = -1;
  int64_t k = 0;
  bool descending = false;
  bool sorted = true;
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// The client released its last reference to a tensor.
struct DropOp {
  TensorId id;
  template <class F>
  void each_input(F&&) {}
  template <class F>
  void each_output(F&&) {}
};

/// Restarts the device's random stream.
struct SeedOp {
  uint64_t seed = 0;
  template <class F>
  void each_input(F&&) {}
  template <class F>
  void each_output(F&&) {}
};

/// Convolution (or its transpose) over 1, 2 or 3 spatial axes, PyTorch's
/// layout: input (N, C_in, *spatial) or unbatched (C_in, *spatial); weight
/// (C_out, C_in / groups, *kernel), transposed (C_in, C_out / groups,
/// *kernel); optional bias (C_out) (bias.id == 0 when absent). Every vector
/// has one entry per spatial axis; pads may differ before and after (ONNX's
/// SAME_UPPER/SAME_LOWER, PyTorch's padding="same" with an even kernel).
/// `output_padding` only for transposed convolutions.
struct ConvOp {
  TensorIr input;
  TensorIr weight;
  TensorIr bias;
  TensorIr out;
  std::vector<int64_t> stride;
  std::vector<int64_t> pad_before;
  std::vector<int64_t> pad_after;
  std::vector<int64_t> dilation;
  std::vector<int64_t> output_padding;
  int64_t groups = 1;
  bool transposed = false;
  [[nodiscard]] bool has_bias() const noexcept { return static_cast<bool>(bias.id); }
  [[nodiscard]] size_t spatial() const noexcept { return stride.size(); }
  template <class F>
  void each_input(F&& f) {
    f(input);
    f(weight);
    if (has_bias()) f(bias);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// Pooling over the last `spatial` axes (1 to 3) of an input with at least
/// one more (leading) axis: every leading index is an independent plane.
/// Windowed kinds use kernel/stride/pads/dilation (one entry per spatial
/// axis) and PyTorch's ceil_mode rule; avg divides by divisor_override when
/// it is non-zero, else by the window size (padding included when
/// count_include_pad). Adaptive kinds use output_size only.
struct PoolOp {
  PoolKind kind = PoolKind::max;
  TensorIr in;
  TensorIr out;
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;
  std::vector<int64_t> pad_before;
  std::vector<int64_t> pad_after;
  std::vector<int64_t> dilation;
  std::vector<int64_t> output_size;  ///< adaptive kinds only
  bool ceil_mode = false;
  bool count_include_pad = true;
  int64_t divisor_override = 0;  ///< 0: none
  [[nodiscard]] bool adaptive() const noexcept {
    return kind == PoolKind::adaptive_avg || kind == PoolKind::adaptive_max || kind == PoolKind::adaptive_max_indices;
  }
  [[nodiscard]] size_t spatial() const noexcept { return adaptive() ? output_size.size() : kernel.size(); }
  template <class F>
  void each_input(F&& f) {
    f(in);
  }
  template <class F>
  void each_output(F&& f) {
    f(out);
  }
};

/// One operation as it travels from client to runner.
struct OperationIr {
  using Variant = std::variant<FromDataOp, FillOp, RandomOp, UnaryOp, BinaryOp, ScalarOp, ReduceOp, SoftmaxOp, MatmulOp,
                               CastOp, ViewOp, SliceAssignOp, CatOp, PadOp, IndexOp, WhereOp, DropOp, SeedOp,
                               // Appended: a tag is the index, so new ops go last.
                               ConvOp, PoolOp, NormOp, AttentionOp, ScanOp, SortOp>;
  Variant op;

  OperationIr() = default;
  template <class T, class = std::enable_if_t<!std::is_same_v<std::decay_t<T>, OperationIr>>>
  OperationIr(T&& x) : op(std::forward<T>(x)) {}  // NOLINT(google-explicit-constructor)
  /// Builds alternative T in place from its fields (no temporary to move).
  template <class T, class... Args>
  explicit OperationIr(std::in_place_type_t<T> type, Args&&... fields) : op(type, std::forward<Args>(fields)...) {}

  template <class F>
  void each_input(F&& f) {
    std::visit([&](auto& o) { o.each_input(f); }, op);
  }
  template <class F>
  void each_output(F&& f) {
    std::visit([&](auto& o) { o.each_output(f); }, op);
  }
  /// Short name for traces and errors ("binary.add", "matmul", ...).
  [[nodiscard]] std::string name() const;
};

/// Ops that compute with their elements (the rest create, move, select or
/// convert them): what a dtype's `arithmetic` support covers.
template <class Op>
inline constexpr bool computes_v =
    std::is_same_v<Op, UnaryOp> || std::is_same_v<Op, BinaryOp> || std::is_same_v<Op, ScalarOp> ||
    std::is_same_v<Op, ReduceOp> || std::is_same_v<Op, SoftmaxOp> || std::is_same_v<Op, MatmulOp> ||
    std::is_same_v<Op, ConvOp> || std::is_same_v<Op, PoolOp> || std::is_same_v<Op, NormOp> ||
    std::is_same_v<Op, AttentionOp> || std::is_same_v<Op, ScanOp> || std::is_same_v<Op, SortOp>;
/// Element-wise ops of one input, whose output has the input's shape: an
/// input's shape passed the element-count bound when it was made, so their
/// outputs need no second check.
template <class Op>
inline constexpr bool keeps_shape_v =
    std::is_same_v<Op, UnaryOp> || std::is_same_v<Op, ScalarOp> || std::is_same_v<Op, CastOp>;
/// Ops built on matrix products: what a dtype's `matmul` support covers.
template <class Op>
inline constexpr bool multiplies_v =
    std::is_same_v<Op, MatmulOp> || std::is_same_v<Op, ConvOp> || std::is_same_v<Op, AttentionOp>;

}  // namespace switchyard
