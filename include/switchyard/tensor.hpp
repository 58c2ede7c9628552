// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::Tensor: ops by name and by operator, reads, moves between devices.

#include <concepts>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "switchyard/device.hpp"
#include "switchyard/messages/op_kinds.hpp"
#include "switchyard/messages/scalar.hpp"
#include "switchyard/messages/std_memory.hpp"

namespace switchyard {

namespace detail {
struct TensorHandle;
struct TensorAccess;
}  // namespace detail

// `Scalar` (messages/scalar.hpp): a bool, integer or floating operand held
// exactly; its C++ type decides promotion as the Python type does in PyTorch.

struct ValuesIndices;

/// One axis of a slice: [start, end) with step (negative indices count
/// from the end; end is clamped as in Python).
struct Slice {
  int64_t start = 0;
  int64_t end = std::numeric_limits<int64_t>::max();
  int64_t step = 1;
};

/// A tensor on one device. Ops return new tensors at once (the work is
/// queued to the device's runner); shapes and dtypes are checked at the
/// call, so bad input throws Error immediately. Copies share the tensor;
/// the last copy going away frees it on the device.
class Tensor {
 public:
  /// An undefined tensor (defined() is false; ops on it throw invalid_tensor).
  Tensor() = default;

  /// False for a default-constructed or moved-from tensor.
  [[nodiscard]] bool defined() const noexcept { return h_ != nullptr; }
  /// Extents, outermost first; known at once (no wait for the device).
  [[nodiscard]] const Shape& shape() const;
  /// Element type.
  [[nodiscard]] DType dtype() const;
  /// Number of elements.
  [[nodiscard]] int64_t numel() const { return shape().numel(); }
  /// Number of axes (0 for a 0-d tensor).
  [[nodiscard]] size_t rank() const { return shape().rank(); }
  /// The device that holds it.
  [[nodiscard]] Device device() const;
  /// Its id on the device (for traces and stats).
  [[nodiscard]] TensorId id() const;

  /// The contents, once computed (the failure of any op it depends on
  /// surfaces here).
  [[nodiscard]] Future<TensorData> read() const;
  /// Blocking convenience: read().get() converted to T (as a cast would).
  template <class T>
  [[nodiscard]] std::vector<T> to_vector() const {
    return read().get().template to_vector<T>();
  }
  /// Blocking: the one element of a tensor with numel() == 1 (any shape),
  /// converted to T as a cast would; throws Error(shape_mismatch) otherwise.
  template <class T>
  [[nodiscard]] T item() const {
    check_item();
    return to_vector<T>().front();
  }
  /// The same values on another device (or backend). Returns at once; ops
  /// on the result wait on the target device until the data arrives.
  [[nodiscard]] Tensor to(const Device& target) const;
  /// A new tensor with the same values (a copy on the device). Tensors are
  /// immutable, so a copy of the handle already behaves as a clone; this
  /// exists for code written against libtorch.
  [[nodiscard]] Tensor clone() const;

  /// \name Element-wise, unary
  /// PyTorch's functions of the same names; integer inputs of exp..reciprocal
  /// compute in f32.
  /// @{
  /// -x.
  [[nodiscard]] Tensor neg() const;
  /// |x|.
  [[nodiscard]] Tensor abs() const;
  /// -1, 0 or 1 (NaN: 0).
  [[nodiscard]] Tensor sign() const;
  /// e^x.
  [[nodiscard]] Tensor exp() const;
  /// Natural logarithm.
  [[nodiscard]] Tensor log() const;
  /// log(1 + x), accurate near 0.
  [[nodiscard]] Tensor log1p() const;
  /// e^x - 1, accurate near 0.
  [[nodiscard]] Tensor expm1() const;
  /// Square root.
  [[nodiscard]] Tensor sqrt() const;
  /// 1 / sqrt(x).
  [[nodiscard]] Tensor rsqrt() const;
  /// Sine.
  [[nodiscard]] Tensor sin() const;
  /// Cosine.
  [[nodiscard]] Tensor cos() const;
  /// Hyperbolic tangent.
  [[nodiscard]] Tensor tanh() const;
  /// 1 / (1 + e^-x).
  [[nodiscard]] Tensor sigmoid() const;
  /// max(x, 0) (NaN stays NaN).
  [[nodiscard]] Tensor relu() const;
  /// Gaussian error linear unit (erf form); floating tensors only.
  [[nodiscard]] Tensor gelu() const;
  /// x * sigmoid(x); floating tensors only.
  [[nodiscard]] Tensor silu() const;
  /// Error function.
  [[nodiscard]] Tensor erf() const;
  /// Round down.
  [[nodiscard]] Tensor floor() const;
  /// Round up.
  [[nodiscard]] Tensor ceil() const;
  /// Round half to even.
  [[nodiscard]] Tensor round() const;
  /// 1 / x.
  [[nodiscard]] Tensor reciprocal() const;
  /// x == 0, as bool.
  [[nodiscard]] Tensor logical_not() const;
  /// ~x (integers and bool).
  [[nodiscard]] Tensor bitwise_not() const;
  /// Whether each element is NaN.
  [[nodiscard]] Tensor isnan() const;
  /// Whether each element is infinite.
  [[nodiscard]] Tensor isinf() const;
  /// Limits to [low, high]; a bound may be NaN for "none", but not both
  /// (invalid_argument). low > high gives high everywhere (as PyTorch).
  [[nodiscard]] Tensor clamp(double low, double high) const;
  /// clamp(low, none).
  [[nodiscard]] Tensor clamp_min(double low) const;
  /// clamp(none, high).
  [[nodiscard]] Tensor clamp_max(double high) const;
  /// x * x (bool: as i64, like PyTorch's pow(x, 2)).
  [[nodiscard]] Tensor square() const;
  /// @}

  /// \name Element-wise, binary
  /// Each takes a tensor (broadcast, promoted by PyTorch's result_type: a
  /// 0-d tensor counts less than a dimensioned one) or a Scalar.
  /// @{
  /// PyTorch's `add`.
  [[nodiscard]] Tensor add(const Tensor& o) const;
  /// `add` with a scalar operand (`x.add(2)`).
  [[nodiscard]] Tensor add(Scalar s) const;
  /// PyTorch's `sub`.
  [[nodiscard]] Tensor sub(const Tensor& o) const;
  /// `sub` with a scalar operand (`x.sub(2)`).
  [[nodiscard]] Tensor sub(Scalar s) const;
  /// PyTorch's `mul`.
  [[nodiscard]] Tensor mul(const Tensor& o) const;
  /// `mul` with a scalar operand (`x.mul(2)`).
  [[nodiscard]] Tensor mul(Scalar s) const;
  /// PyTorch's `div`.
  [[nodiscard]] Tensor div(const Tensor& o) const;
  /// `div` with a scalar operand (`x.div(2)`).
  [[nodiscard]] Tensor div(Scalar s) const;
  /// PyTorch's `pow`.
  [[nodiscard]] Tensor pow(const Tensor& o) const;
  /// `pow` with a scalar operand (`x.pow(2)`).
  [[nodiscard]] Tensor pow(Scalar s) const;
  /// PyTorch's `remainder`.
  [[nodiscard]] Tensor remainder(const Tensor& o) const;
  /// `remainder` with a scalar operand (`x.remainder(2)`).
  [[nodiscard]] Tensor remainder(Scalar s) const;
  /// PyTorch's `maximum`.
  [[nodiscard]] Tensor maximum(const Tensor& o) const;
  /// `maximum` with a scalar operand (`x.maximum(2)`).
  [[nodiscard]] Tensor maximum(Scalar s) const;
  /// PyTorch's `minimum`.
  [[nodiscard]] Tensor minimum(const Tensor& o) const;
  /// `minimum` with a scalar operand (`x.minimum(2)`).
  [[nodiscard]] Tensor minimum(Scalar s) const;
  /// PyTorch's `atan2`.
  [[nodiscard]] Tensor atan2(const Tensor& o) const;
  /// `atan2` with a scalar operand (`x.atan2(2)`).
  [[nodiscard]] Tensor atan2(Scalar s) const;
  /// PyTorch's `eq`.
  [[nodiscard]] Tensor eq(const Tensor& o) const;
  /// `eq` with a scalar operand (`x.eq(2)`).
  [[nodiscard]] Tensor eq(Scalar s) const;
  /// PyTorch's `ne`.
  [[nodiscard]] Tensor ne(const Tensor& o) const;
  /// `ne` with a scalar operand (`x.ne(2)`).
  [[nodiscard]] Tensor ne(Scalar s) const;
  /// PyTorch's `lt`.
  [[nodiscard]] Tensor lt(const Tensor& o) const;
  /// `lt` with a scalar operand (`x.lt(2)`).
  [[nodiscard]] Tensor lt(Scalar s) const;
  /// PyTorch's `le`.
  [[nodiscard]] Tensor le(const Tensor& o) const;
  /// `le` with a scalar operand (`x.le(2)`).
  [[nodiscard]] Tensor le(Scalar s) const;
  /// PyTorch's `gt`.
  [[nodiscard]] Tensor gt(const Tensor& o) const;
  /// `gt` with a scalar operand (`x.gt(2)`).
  [[nodiscard]] Tensor gt(Scalar s) const;
  /// PyTorch's `ge`.
  [[nodiscard]] Tensor ge(const Tensor& o) const;
  /// `ge` with a scalar operand (`x.ge(2)`).
  [[nodiscard]] Tensor ge(Scalar s) const;
  /// PyTorch's `logical_and`.
  [[nodiscard]] Tensor logical_and(const Tensor& o) const;
  /// `logical_and` with a scalar operand (`x.logical_and(2)`).
  [[nodiscard]] Tensor logical_and(Scalar s) const;
  /// PyTorch's `logical_or`.
  [[nodiscard]] Tensor logical_or(const Tensor& o) const;
  /// `logical_or` with a scalar operand (`x.logical_or(2)`).
  [[nodiscard]] Tensor logical_or(Scalar s) const;
  /// PyTorch's `logical_xor`.
  [[nodiscard]] Tensor logical_xor(const Tensor& o) const;
  /// `logical_xor` with a scalar operand (`x.logical_xor(2)`).
  [[nodiscard]] Tensor logical_xor(Scalar s) const;
  /// PyTorch's `bitwise_and`.
  [[nodiscard]] Tensor bitwise_and(const Tensor& o) const;
  /// `bitwise_and` with a scalar operand (`x.bitwise_and(2)`).
  [[nodiscard]] Tensor bitwise_and(Scalar s) const;
  /// PyTorch's `bitwise_or`.
  [[nodiscard]] Tensor bitwise_or(const Tensor& o) const;
  /// `bitwise_or` with a scalar operand (`x.bitwise_or(2)`).
  [[nodiscard]] Tensor bitwise_or(Scalar s) const;
  /// PyTorch's `bitwise_xor`.
  [[nodiscard]] Tensor bitwise_xor(const Tensor& o) const;
  /// `bitwise_xor` with a scalar operand (`x.bitwise_xor(2)`).
  [[nodiscard]] Tensor bitwise_xor(Scalar s) const;
  /// PyTorch 1.13's `floor_divide` (Python's `//`: rounds toward minus
  /// infinity; an integer division by zero fails the op).
  [[nodiscard]] Tensor floor_divide(const Tensor& o) const;
  /// `floor_divide` with a scalar operand (`x.floor_divide(2)`).
  [[nodiscard]] Tensor floor_divide(Scalar s) const;
  /// Any binary op against a scalar; `scalar_first` computes s op x.
  [[nodiscard]] Tensor binary(BinaryKind k, Scalar s, bool scalar_first = false) const;
  /// Any binary op against a tensor.
  [[nodiscard]] Tensor binary(BinaryKind k, const Tensor& o) const;
  /// Any unary op (clamp: use clamp()).
  [[nodiscard]] Tensor unary(UnaryKind k) const;
  /// @}

  /// \name Reductions
  /// Empty axes: all; negative axes count from the end; an axis named twice is
  /// invalid_argument, as in PyTorch. Each also takes a single axis without
  /// braces: x.sum(1), x.max(-1, true).
  /// @{
  /// Sum (integers and bool: as i64).
  [[nodiscard]] Tensor sum(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Mean of a floating tensor.
  [[nodiscard]] Tensor mean(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Mean computed in `dtype` (the input is cast first, as PyTorch's dtype=).
  [[nodiscard]] Tensor mean(std::vector<int64_t> axes, bool keepdim, DType dtype) const;
  /// Mean of every element, computed in `dtype`.
  [[nodiscard]] Tensor mean(DType dtype) const { return mean({}, false, dtype); }
  /// Product (integers and bool: as i64).
  [[nodiscard]] Tensor prod(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Largest element (NaN wins); PyTorch's amax.
  [[nodiscard]] Tensor max(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Smallest element (NaN wins); PyTorch's amin.
  [[nodiscard]] Tensor min(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Whether any element is non-zero.
  [[nodiscard]] Tensor any(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Whether every element is non-zero.
  [[nodiscard]] Tensor all(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  /// Variance with Bessel's `correction` (n - correction <= 0: inf, or NaN
  /// when every element equals the mean).
  [[nodiscard]] Tensor var(std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false) const;
  /// Standard deviation, sqrt(var).
  [[nodiscard]] Tensor std(std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false) const;
  // One axis without braces (a template, so that `{}` and `{1}` still pick
  // the vector overloads above).
#define SY_SINGLE_AXIS(name)                                                \
  /** `name` over a single axis, given without braces. */                   \
  template <std::integral I>                                                \
  [[nodiscard]] Tensor name(I axis, bool keepdim = false) const {           \
    return name(std::vector<int64_t>{static_cast<int64_t>(axis)}, keepdim); \
  }
  SY_SINGLE_AXIS(sum)
  SY_SINGLE_AXIS(mean)
  SY_SINGLE_AXIS(prod)
  SY_SINGLE_AXIS(max)
  SY_SINGLE_AXIS(min)
  SY_SINGLE_AXIS(any)
  SY_SINGLE_AXIS(all)
#undef SY_SINGLE_AXIS
  /// Index of the first extreme element along `axis`; without an axis, of
  /// the flattened tensor (keepdim: every axis kept with extent 1). Not
  /// defined for bool (as PyTorch).
  [[nodiscard]] Tensor argmax(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;
  /// argmax's counterpart for the smallest element.
  [[nodiscard]] Tensor argmin(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;
  /// exp(x) / sum(exp(x)) along `axis`, computed stably.
  [[nodiscard]] Tensor softmax(int64_t axis) const;
  /// log(softmax(x)) along `axis`, computed stably.
  [[nodiscard]] Tensor log_softmax(int64_t axis) const;
  /// @}

  /// \name Linear algebra
  /// @{
  /// PyTorch's matmul: 1-D operands are promoted and the added axis removed,
  /// batch axes broadcast.
  [[nodiscard]] Tensor matmul(const Tensor& o) const;
  /// x W^T + b for W of shape [out, in] (bias optional, of the product's
  /// dtype: PyTorch 1.13 refuses a bias of another dtype too).
  [[nodiscard]] Tensor linear(const Tensor& weight, const Tensor& bias = Tensor()) const;
  /// beta * x + alpha * (mat1 @ mat2) for 2-D mat1 and mat2 (x broadcast to
  /// the product), composed of matmul, mul and add as PyTorch's addmm.
  [[nodiscard]] Tensor addmm(const Tensor& mat1, const Tensor& mat2, Scalar beta = 1, Scalar alpha = 1) const;
  /// @}

  /// \name Dtype and layout
  /// @{
  /// The values converted to `t` (itself when already of `t`).
  [[nodiscard]] Tensor cast(DType t) const;
  /// One extent may be -1 (inferred).
  [[nodiscard]] Tensor reshape(Shape s) const;
  /// reshape({-1}).
  [[nodiscard]] Tensor flatten() const;
  /// Axes reordered: result axis i is input axis axes[i].
  [[nodiscard]] Tensor permute(std::vector<int64_t> axes) const;
  /// Two axes swapped (a 0-d tensor accepts 0 and -1).
  [[nodiscard]] Tensor transpose(int64_t a, int64_t b) const;
  /// Transpose of the last two axes.
  [[nodiscard]] Tensor mT() const;
  /// Broadcast to `s` (-1 keeps an extent).
  [[nodiscard]] Tensor expand(Shape s) const;
  /// Drops extent-1 axes (all, or the one given if its extent is 1).
  [[nodiscard]] Tensor squeeze(std::optional<int64_t> axis = std::nullopt) const;
  /// Inserts an extent-1 axis at `axis`.
  [[nodiscard]] Tensor unsqueeze(int64_t axis) const;
  /// Reverses the given axes (a 0-d tensor accepts 0 and -1).
  [[nodiscard]] Tensor flip(const std::vector<int64_t>& axes) const;
  /// Stepped slice along one axis.
  [[nodiscard]] Tensor slice(int64_t axis, Slice s) const;
  /// Slices along the leading axes (one Slice per axis, the rest whole).
  [[nodiscard]] Tensor slice(const std::vector<Slice>& s) const;
  /// A copy with the sliced region replaced by `value` (broadcast to it).
  [[nodiscard]] Tensor slice_assign(const std::vector<Slice>& s, const Tensor& value) const;
  /// Constant padding, `before[k]` / `after[k]` elements on axis k; a
  /// negative width crops instead (as F.pad), down to an empty axis.
  [[nodiscard]] Tensor pad(std::vector<int64_t> before, std::vector<int64_t> after, double value = 0) const;
  /// The lower triangle of the last two axes (column - row <= diagonal),
  /// zeros elsewhere; at least 2 axes.
  [[nodiscard]] Tensor tril(int64_t diagonal = 0) const;
  /// The upper triangle of the last two axes (column - row >= diagonal),
  /// zeros elsewhere; at least 2 axes.
  [[nodiscard]] Tensor triu(int64_t diagonal = 0) const;
  /// PyTorch's repeat: the tensor tiled repeats[k] times along axis k; more
  /// repeats than axes add leading axes, fewer are refused.
  [[nodiscard]] Tensor repeat(std::vector<int64_t> repeats) const;
  /// torch.tile: as repeat, but fewer reps than axes are padded with 1s in
  /// front.
  [[nodiscard]] Tensor tile(std::vector<int64_t> reps) const;
  /// torch.roll: elements shifted by shifts[k] along dims[k], wrapping
  /// around; with no dims, over the flattened tensor (one shift).
  [[nodiscard]] Tensor roll(std::vector<int64_t> shifts, std::vector<int64_t> dims = {}) const;
  /// torch.roll with one shift (over the flattened tensor without a dim).
  [[nodiscard]] Tensor roll(int64_t shift, std::optional<int64_t> dim = std::nullopt) const;
  /// out[..i..] = x[..index[..i..]..] along `axis` (PyTorch's gather).
  [[nodiscard]] Tensor gather(int64_t axis, const Tensor& index) const;
  /// A copy of x with src added at the positions index names along `axis`.
  [[nodiscard]] Tensor scatter_add(int64_t axis, const Tensor& index, const Tensor& src) const;
  /// The slices index names along `axis`.
  [[nodiscard]] Tensor index_select(int64_t axis, const Tensor& index) const;
  /// value where the bool `mask` is true, x elsewhere; a value outside x's
  /// dtype's range is invalid_argument (PyTorch's overflow check).
  [[nodiscard]] Tensor masked_fill(const Tensor& mask, Scalar value) const;
  /// @}

  /// \name Scans, sorting, scatter
  /// libtorch's names.
  /// @{
  /// Inclusive cumulative sum along `dim`; integer and bool inputs give i64
  /// unless `dtype` is given (the input is converted to it first).
  [[nodiscard]] Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  /// Inclusive cumulative product along `dim`, dtype rule as cumsum.
  [[nodiscard]] Tensor cumprod(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  /// Sorted values and their i64 positions along `dim`. Always stable
  /// (equal elements keep their order, whatever `stable` says); NaN sorts
  /// above every number, as in PyTorch.
  [[nodiscard]] ValuesIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  /// The positions sort() gives.
  [[nodiscard]] Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  /// The k largest (smallest) elements along `dim` and their positions;
  /// ties in index order (PyTorch's CPU order among ties is unspecified).
  [[nodiscard]] ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  /// A copy of x with src written at the positions index names along `dim`
  /// (with repeated positions the last in index order wins).
  [[nodiscard]] Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  /// A copy of x combined with src at the positions index names: reduce is
  /// "sum", "prod", "amax" or "amin"; include_self = true only.
  [[nodiscard]] Tensor scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                                      bool include_self = true) const;
  /// @}

  /// \name Operators
  /// Comparisons are tensor-valued (bool tensors), as in libtorch.
  /// @{
  /// a + b: `add`.
  friend Tensor operator+(const Tensor& a, const Tensor& b) { return a.add(b); }
  /// a - b: `sub`.
  friend Tensor operator-(const Tensor& a, const Tensor& b) { return a.sub(b); }
  /// a * b: `mul`.
  friend Tensor operator*(const Tensor& a, const Tensor& b) { return a.mul(b); }
  /// a / b: `div`.
  friend Tensor operator/(const Tensor& a, const Tensor& b) { return a.div(b); }
  /// a + s: `add` with a scalar.
  friend Tensor operator+(const Tensor& a, Scalar s) { return a.binary(BinaryKind::add, s); }
  /// a - s: `sub` with a scalar.
  friend Tensor operator-(const Tensor& a, Scalar s) { return a.binary(BinaryKind::sub, s); }
  /// a * s: `mul` with a scalar.
  friend Tensor operator*(const Tensor& a, Scalar s) { return a.binary(BinaryKind::mul, s); }
  /// a / s: `div` with a scalar.
  friend Tensor operator/(const Tensor& a, Scalar s) { return a.binary(BinaryKind::div, s); }
  /// s + a: `add` with the scalar first.
  friend Tensor operator+(Scalar s, const Tensor& a) { return a.binary(BinaryKind::add, s, true); }
  /// s - a: `sub` with the scalar first.
  friend Tensor operator-(Scalar s, const Tensor& a) { return a.binary(BinaryKind::sub, s, true); }
  /// s * a: `mul` with the scalar first.
  friend Tensor operator*(Scalar s, const Tensor& a) { return a.binary(BinaryKind::mul, s, true); }
  /// s / a: `div` with the scalar first.
  friend Tensor operator/(Scalar s, const Tensor& a) { return a.binary(BinaryKind::div, s, true); }
  /// a < b: `lt`.
  friend Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
  /// a <= b: `le`.
  friend Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
  /// a > b: `gt`.
  friend Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
  /// a >= b: `ge`.
  friend Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
  /// a == b: `eq`.
  friend Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
  /// a != b: `ne`.
  friend Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
  /// a < s: `lt` with a scalar.
  friend Tensor operator<(const Tensor& a, Scalar s) { return a.binary(BinaryKind::lt, s); }
  /// a <= s: `le` with a scalar.
  friend Tensor operator<=(const Tensor& a, Scalar s) { return a.binary(BinaryKind::le, s); }
  /// a > s: `gt` with a scalar.
  friend Tensor operator>(const Tensor& a, Scalar s) { return a.binary(BinaryKind::gt, s); }
  /// a >= s: `ge` with a scalar.
  friend Tensor operator>=(const Tensor& a, Scalar s) { return a.binary(BinaryKind::ge, s); }
  /// a == s: `eq` with a scalar.
  friend Tensor operator==(const Tensor& a, Scalar s) { return a.binary(BinaryKind::eq, s); }
  /// a != s: `ne` with a scalar.
  friend Tensor operator!=(const Tensor& a, Scalar s) { return a.binary(BinaryKind::ne, s); }
  /// s < a: `lt` with the scalar first.
  friend Tensor operator<(Scalar s, const Tensor& a) { return a.binary(BinaryKind::lt, s, true); }
  /// s <= a: `le` with the scalar first.
  friend Tensor operator<=(Scalar s, const Tensor& a) { return a.binary(BinaryKind::le, s, true); }
  /// s > a: `gt` with the scalar first.
  friend Tensor operator>(Scalar s, const Tensor& a) { return a.binary(BinaryKind::gt, s, true); }
  /// s >= a: `ge` with the scalar first.
  friend Tensor operator>=(Scalar s, const Tensor& a) { return a.binary(BinaryKind::ge, s, true); }
  /// s == a: `eq` with the scalar first.
  friend Tensor operator==(Scalar s, const Tensor& a) { return a.binary(BinaryKind::eq, s, true); }
  /// s != a: `ne` with the scalar first.
  friend Tensor operator!=(Scalar s, const Tensor& a) { return a.binary(BinaryKind::ne, s, true); }
  /// -x.
  Tensor operator-() const { return neg(); }
  /// @}

  /// \name Compound assignments
  /// Compound assignments REBIND this handle to a new tensor (tensors are
  /// immutable on the device, so other copies of the old handle keep the
  /// old values: no aliasing surprises). As libtorch's in-place ops, the
  /// result keeps this tensor's shape and dtype: an operand that would
  /// broadcast it to another shape is shape_mismatch, and a result of a
  /// higher category (i32 += 0.5, bool += 1) is dtype_mismatch.
  /// @{
  /// x = x + o (rebinds; see above).
  Tensor& operator+=(const Tensor& o) { return assign("+=", add(o)); }
  /// x = x - o (rebinds).
  Tensor& operator-=(const Tensor& o) { return assign("-=", sub(o)); }
  /// x = x * o (rebinds).
  Tensor& operator*=(const Tensor& o) { return assign("*=", mul(o)); }
  /// x = x / o (rebinds).
  Tensor& operator/=(const Tensor& o) { return assign("/=", div(o)); }
  /// x = x + s (rebinds).
  Tensor& operator+=(Scalar s) { return assign("+=", add(s)); }
  /// x = x - s (rebinds).
  Tensor& operator-=(Scalar s) { return assign("-=", sub(s)); }
  /// x = x * s (rebinds).
  Tensor& operator*=(Scalar s) { return assign("*=", mul(s)); }
  /// x = x / s (rebinds).
  Tensor& operator/=(Scalar s) { return assign("/=", div(s)); }
  /// @}

 private:
  friend class Device;
  friend class detail::Core;
  friend struct detail::TensorAccess;
  friend Tensor cat(const std::vector<Tensor>& tensors, int64_t axis);
  friend Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
  explicit Tensor(std::shared_ptr<detail::TensorHandle> h) : h_(std::move(h)) {}
  const detail::TensorHandle& handle(const char* op) const;
  void check_item() const;
  Tensor& assign(const char* op, Tensor result);
  std::shared_ptr<detail::TensorHandle> h_;
};

/// What sort() and topk() give: the values and their i64 positions.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};

/// Concatenation along `axis` (dtypes promoted, one device).
[[nodiscard]] Tensor cat(const std::vector<Tensor>& tensors, int64_t axis = 0);
/// New axis `axis` over equally shaped tensors.
[[nodiscard]] Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);
/// cond ? a : b, broadcasting all three.
[[nodiscard]] Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// a.matmul(b).
[[nodiscard]] Tensor matmul(const Tensor& a, const Tensor& b);
/// input.addmm(mat1, mat2, beta, alpha), libtorch's argument order.
[[nodiscard]] Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, Scalar beta = 1,
                           Scalar alpha = 1);

/// Prints shape, dtype, device and the values (blocks for the read), the
/// middle of long axes elided as "..." (as PyTorch: a tensor of more than
/// 1000 elements shows 3 at each end of every axis). A failed tensor prints
/// its error instead of values; an undefined one "Tensor(undefined)".
std::ostream& operator<<(std::ostream& os, const Tensor& t);

template <class T>
Tensor Device::tensor(const std::vector<T>& values, Shape shape) const {
  // Checked here so that a short list is an Error like every other bad input.
  check_values(values.size(), shape);
  return from_data(TensorData::from(values, std::move(shape)));
}

}  // namespace switchyard
