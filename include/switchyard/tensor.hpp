#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "switchyard/device.hpp"
#include "switchyard/messages/operation_ir.hpp"

namespace switchyard {

namespace detail {
struct TensorHandle;
}

/// A scalar operand: its C++ type decides promotion as the Python type does
/// in PyTorch (bool, integer or floating).
struct Scalar {
  double value;
  ScalarKind kind;
  template <class T>
  requires std::is_arithmetic_v<T> Scalar(T v)  // NOLINT(google-explicit-constructor)
      : value(static_cast<double>(v)),
        kind(std::is_same_v<T, bool> ? ScalarKind::boolean
             : std::is_integral_v<T> ? ScalarKind::integral
                                     : ScalarKind::floating) {}
};

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
  Tensor() = default;

  [[nodiscard]] bool defined() const noexcept { return h_ != nullptr; }
  [[nodiscard]] const Shape& shape() const;
  [[nodiscard]] DType dtype() const;
  [[nodiscard]] int64_t numel() const { return shape().numel(); }
  [[nodiscard]] size_t rank() const { return shape().rank(); }
  [[nodiscard]] Device device() const;
  [[nodiscard]] TensorId id() const;

  /// The contents, once computed (the failure of any op it depends on
  /// surfaces here).
  [[nodiscard]] Future<TensorData> read() const;
  /// Blocking convenience: read().get() converted to T.
  template <class T>
  [[nodiscard]] std::vector<T> to_vector() const {
    return read().get().template to_vector<T>();
  }
  /// The same values on another device (or backend). Returns at once; ops
  /// on the result wait on the target device until the data arrives.
  [[nodiscard]] Tensor to(const Device& target) const;

  // --- element-wise, unary ---
  [[nodiscard]] Tensor neg() const;
  [[nodiscard]] Tensor abs() const;
  [[nodiscard]] Tensor sign() const;
  [[nodiscard]] Tensor exp() const;
  [[nodiscard]] Tensor log() const;
  [[nodiscard]] Tensor log1p() const;
  [[nodiscard]] Tensor expm1() const;
  [[nodiscard]] Tensor sqrt() const;
  [[nodiscard]] Tensor rsqrt() const;
  [[nodiscard]] Tensor sin() const;
  [[nodiscard]] Tensor cos() const;
  [[nodiscard]] Tensor tanh() const;
  [[nodiscard]] Tensor sigmoid() const;
  [[nodiscard]] Tensor relu() const;
  [[nodiscard]] Tensor gelu() const;
  [[nodiscard]] Tensor silu() const;
  [[nodiscard]] Tensor erf() const;
  [[nodiscard]] Tensor floor() const;
  [[nodiscard]] Tensor ceil() const;
  [[nodiscard]] Tensor round() const;
  [[nodiscard]] Tensor reciprocal() const;
  [[nodiscard]] Tensor logical_not() const;
  [[nodiscard]] Tensor bitwise_not() const;
  [[nodiscard]] Tensor isnan() const;
  [[nodiscard]] Tensor isinf() const;
  /// Bounds may be NaN for "none".
  [[nodiscard]] Tensor clamp(double low, double high) const;

  // --- element-wise, binary (broadcasting; tensor or scalar operand) ---
  [[nodiscard]] Tensor add(const Tensor& o) const;
  [[nodiscard]] Tensor sub(const Tensor& o) const;
  [[nodiscard]] Tensor mul(const Tensor& o) const;
  [[nodiscard]] Tensor div(const Tensor& o) const;
  [[nodiscard]] Tensor pow(const Tensor& o) const;
  [[nodiscard]] Tensor remainder(const Tensor& o) const;
  [[nodiscard]] Tensor maximum(const Tensor& o) const;
  [[nodiscard]] Tensor minimum(const Tensor& o) const;
  [[nodiscard]] Tensor atan2(const Tensor& o) const;
  [[nodiscard]] Tensor eq(const Tensor& o) const;
  [[nodiscard]] Tensor ne(const Tensor& o) const;
  [[nodiscard]] Tensor lt(const Tensor& o) const;
  [[nodiscard]] Tensor le(const Tensor& o) const;
  [[nodiscard]] Tensor gt(const Tensor& o) const;
  [[nodiscard]] Tensor ge(const Tensor& o) const;
  [[nodiscard]] Tensor logical_and(const Tensor& o) const;
  [[nodiscard]] Tensor logical_or(const Tensor& o) const;
  [[nodiscard]] Tensor logical_xor(const Tensor& o) const;
  [[nodiscard]] Tensor bitwise_and(const Tensor& o) const;
  [[nodiscard]] Tensor bitwise_or(const Tensor& o) const;
  [[nodiscard]] Tensor bitwise_xor(const Tensor& o) const;
  /// Any binary op against a scalar; `scalar_first` computes s op x.
  [[nodiscard]] Tensor binary(BinaryKind k, Scalar s, bool scalar_first = false) const;
  [[nodiscard]] Tensor binary(BinaryKind k, const Tensor& o) const;
  [[nodiscard]] Tensor unary(UnaryKind k) const;

  // --- reductions (empty axes: all; negative axes count from the end) ---
  [[nodiscard]] Tensor sum(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor mean(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor prod(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor max(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor min(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor any(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor all(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  [[nodiscard]] Tensor var(std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false) const;
  [[nodiscard]] Tensor std(std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false) const;
  /// Index of the first extreme element along `axis` (flattened when absent).
  [[nodiscard]] Tensor argmax(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;
  [[nodiscard]] Tensor argmin(std::optional<int64_t> axis = std::nullopt, bool keepdim = false) const;
  [[nodiscard]] Tensor softmax(int64_t axis) const;
  [[nodiscard]] Tensor log_softmax(int64_t axis) const;

  // --- linear algebra ---
  /// PyTorch's matmul: 1-D operands are promoted and the added axis removed,
  /// batch axes broadcast.
  [[nodiscard]] Tensor matmul(const Tensor& o) const;
  /// x W^T + b for W of shape [out, in] (bias optional).
  [[nodiscard]] Tensor linear(const Tensor& weight, const Tensor& bias = Tensor()) const;

  // --- dtype and layout ---
  [[nodiscard]] Tensor cast(DType t) const;
  /// One extent may be -1 (inferred).
  [[nodiscard]] Tensor reshape(Shape s) const;
  [[nodiscard]] Tensor flatten() const;
  [[nodiscard]] Tensor permute(std::vector<int64_t> axes) const;
  [[nodiscard]] Tensor transpose(int64_t a, int64_t b) const;
  /// Transpose of the last two axes.
  [[nodiscard]] Tensor mT() const;
  /// Broadcast to `s` (-1 keeps an extent).
  [[nodiscard]] Tensor expand(Shape s) const;
  [[nodiscard]] Tensor squeeze(std::optional<int64_t> axis = std::nullopt) const;
  [[nodiscard]] Tensor unsqueeze(int64_t axis) const;
  [[nodiscard]] Tensor flip(std::vector<int64_t> axes) const;
  /// Stepped slice along one axis.
  [[nodiscard]] Tensor slice(int64_t axis, Slice s) const;
  /// Slices along the leading axes (one Slice per axis, the rest whole).
  [[nodiscard]] Tensor slice(std::vector<Slice> s) const;
  /// A copy with the sliced region replaced by `value` (broadcast to it).
  [[nodiscard]] Tensor slice_assign(std::vector<Slice> s, const Tensor& value) const;
  [[nodiscard]] Tensor pad(std::vector<int64_t> before, std::vector<int64_t> after, double value = 0) const;
  [[nodiscard]] Tensor gather(int64_t axis, const Tensor& index) const;
  [[nodiscard]] Tensor scatter_add(int64_t axis, const Tensor& index, const Tensor& src) const;
  [[nodiscard]] Tensor index_select(int64_t axis, const Tensor& index) const;
  [[nodiscard]] Tensor masked_fill(const Tensor& mask, Scalar value) const;

  // --- operators ---
  friend Tensor operator+(const Tensor& a, const Tensor& b) { return a.add(b); }
  friend Tensor operator-(const Tensor& a, const Tensor& b) { return a.sub(b); }
  friend Tensor operator*(const Tensor& a, const Tensor& b) { return a.mul(b); }
  friend Tensor operator/(const Tensor& a, const Tensor& b) { return a.div(b); }
  friend Tensor operator+(const Tensor& a, Scalar s) { return a.binary(BinaryKind::add, s); }
  friend Tensor operator-(const Tensor& a, Scalar s) { return a.binary(BinaryKind::sub, s); }
  friend Tensor operator*(const Tensor& a, Scalar s) { return a.binary(BinaryKind::mul, s); }
  friend Tensor operator/(const Tensor& a, Scalar s) { return a.binary(BinaryKind::div, s); }
  friend Tensor operator+(Scalar s, const Tensor& a) { return a.binary(BinaryKind::add, s, true); }
  friend Tensor operator-(Scalar s, const Tensor& a) { return a.binary(BinaryKind::sub, s, true); }
  friend Tensor operator*(Scalar s, const Tensor& a) { return a.binary(BinaryKind::mul, s, true); }
  friend Tensor operator/(Scalar s, const Tensor& a) { return a.binary(BinaryKind::div, s, true); }
  friend Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
  friend Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
  friend Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
  friend Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
  Tensor operator-() const { return neg(); }

 private:
  friend class Device;
  friend class detail::Core;
  friend Tensor cat(const std::vector<Tensor>& tensors, int64_t axis);
  friend Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
  explicit Tensor(std::shared_ptr<detail::TensorHandle> h) : h_(std::move(h)) {}
  const detail::TensorHandle& handle(const char* op) const;
  std::shared_ptr<detail::TensorHandle> h_;
};

/// Concatenation along `axis` (dtypes promoted, one device).
[[nodiscard]] Tensor cat(const std::vector<Tensor>& tensors, int64_t axis = 0);
/// New axis `axis` over equally shaped tensors.
[[nodiscard]] Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);
/// cond ? a : b, broadcasting all three.
[[nodiscard]] Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor matmul(const Tensor& a, const Tensor& b);

template <class T>
Tensor Device::tensor(const std::vector<T>& values, Shape shape) const {
  return from_data(TensorData::from(values, std::move(shape)));
}

}  // namespace switchyard
