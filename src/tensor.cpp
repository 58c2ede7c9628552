// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>

#include "core.hpp"
#include "op_emit.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard {

using detail::TensorHandle;
using namespace detail::op_emit;  // NOLINT(google-build-using-namespace)

namespace {

Tensor view(const TensorHandle& h, Shape out_shape, int64_t offset, std::vector<int64_t> strides) {
  auto out = new_output(h, TensorSpec{std::move(out_shape), h.ir.dtype});
  if (auto err = check_view(h.ir.numel(), out.shape, offset, strides)) detail::throw_error(err);
  return emit(h, out, ViewOp{as_input(h), out, offset, std::move(strides)});
}

int64_t axis_of(const char* op, int64_t axis, size_t rank) {
  auto a = normalize_axis(axis, rank);
  if (!a)
    throw Error(Errc::shape_mismatch, std::string(op) + ": axis " + std::to_string(axis) +
                                          " is out of range for rank " + std::to_string(rank));
  return *a;
}

// An axis of a 0-d tensor, where PyTorch takes 0 and -1 as for rank 1.
int64_t scalar_axis_of(const char* op, int64_t axis) {
  if (axis != 0 && axis != -1)
    throw Error(Errc::shape_mismatch,
                std::string(op) + ": axis " + std::to_string(axis) + " is out of range for a 0-d tensor (0 or -1)");
  return 0;
}

// Python slice bounds for a positive step.
void resolve_slice(const char* op, Slice s, int64_t extent, int64_t& start, int64_t& count) {
  if (s.step <= 0)
    throw Error(Errc::invalid_argument, std::string(op) + ": step must be positive, got " + std::to_string(s.step));
  auto clampi = [&](int64_t v) {
    if (v < 0) v += extent;
    return std::clamp<int64_t>(v, 0, extent);
  };
  start = clampi(s.start);
  int64_t end = s.end == std::numeric_limits<int64_t>::max() ? extent : clampi(s.end);
  count = end > start ? (end - start + s.step - 1) / s.step : 0;
}

struct Region {
  Shape shape;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

Region slice_region(const char* op, const Shape& shape, const std::vector<Slice>& slices) {
  if (slices.size() > shape.rank())
    throw Error(Errc::shape_mismatch,
                std::string(op) + ": " + std::to_string(slices.size()) + " slices for shape " + shape.to_string());
  Region r{shape, 0, shape.strides()};
  for (size_t d = 0; d < slices.size(); ++d) {
    int64_t start = 0, count = 0;
    resolve_slice(op, slices[d], shape.dims[d], start, count);
    r.offset += start * r.strides[d];
    r.strides[d] *= slices[d].step;
    r.shape.dims[d] = count;
  }
  return r;
}

Tensor reduce(const Tensor& t, const TensorHandle& h, ReduceKind k, std::vector<int64_t> axes, bool keepdim,
              int64_t correction = 1) {
  (void)t;
  auto spec = unwrap(reduce_result(k, h.ir.shape, h.ir.dtype, axes, keepdim));
  auto out = new_output(h, spec);
  return emit(h, out, ReduceOp{k, as_input(h), out, std::move(axes), keepdim, correction});
}

}  // namespace

const TensorHandle& Tensor::handle(const char* op) const {
  if (!h_) throw Error(Errc::invalid_tensor, std::string(op) + ": use of an empty or moved-from tensor");
  if (auto* recorder = detail::thread_recorder) recorder->saw(h_);
  return *h_;
}

const Shape& Tensor::shape() const { return handle("shape").ir.shape; }
DType Tensor::dtype() const { return handle("dtype").ir.dtype; }
TensorId Tensor::id() const { return handle("id").ir.id; }
Device Tensor::device() const {
  const auto& h = handle("device");
  return Device(h.core, h.device);
}

Future<TensorData> Tensor::read() const {
  const auto& h = handle("read");
  // The handle rides along: dropping the last Tensor right after read()
  // would otherwise send the drop ahead of the read request (it is sent
  // from a spawned actor), and the read would find no tensor.
  return h.core->read(h.device, h.ir, h_);
}

Tensor Tensor::to(const Device& target) const {
  const auto& h = handle("to");
  if (!target.valid()) throw Error(Errc::unknown_device, "to: empty target device");
  if (target.core_ != h.core) throw Error(Errc::device_mismatch, "to: target device belongs to another runtime");
  if (h.core->closed()) throw Error(Errc::runtime_closed, "the runtime is shut down");
  if (target.id() == h.device) return *this;
  TensorIr dst{h.core->new_id(), h.ir.shape, h.ir.dtype, TensorStatus::read_only};
  h.core->bridge(h.device, h.ir.id, target.id(), dst);
  return Tensor(std::make_shared<TensorHandle>(h.core, target.id(), std::move(dst)));
}

Tensor Tensor::clone() const {
  const auto& h = handle("clone");
  return view(h, h.ir.shape, 0, h.ir.shape.strides());  // an identity view copies
}

void Tensor::check_item() const {
  const auto& h = handle("item");
  if (h.ir.numel() != 1)
    throw Error(Errc::shape_mismatch, "item: needs a tensor of one element, got shape " + h.ir.shape.to_string() +
                                          " (" + std::to_string(h.ir.numel()) + " elements)");
}

Tensor& Tensor::assign(const char* op, Tensor result) {
  const auto& h = handle(op);
  if (result.shape() != h.ir.shape)
    throw Error(Errc::shape_mismatch, std::string(op) + ": the result's shape " + result.shape().to_string() +
                                          " differs from the target's " + h.ir.shape.to_string() +
                                          " (a compound assignment keeps the target's shape)");
  if (result.dtype() != h.ir.dtype) {
    // PyTorch's can_cast: never floating -> integer or anything -> bool.
    const DType r = result.dtype();
    if ((is_floating(r) && !is_floating(h.ir.dtype)) || (is_bool(h.ir.dtype) && !is_bool(r)))
      throw Error(Errc::dtype_mismatch, std::string(op) + ": result type " + dt(r) +
                                            " cannot be cast to the target's dtype " + dt(h.ir.dtype));
    result = result.cast(h.ir.dtype);
  }
  *this = std::move(result);
  return *this;
}

// --- element-wise ---------------------------------------------------------

Tensor Tensor::unary(UnaryKind k) const {
  const auto& h = handle(to_string(k));
  auto out = new_output(h, unwrap(unary_result(k, h.ir.shape, h.ir.dtype)));
  OperationIr op(std::in_place_type<UnaryOp>, k, as_input(h), out, 0.0, 0.0);
  return emit(h, std::move(out), std::move(op));
}

Tensor Tensor::clamp(double low, double high) const {
  const auto& h = handle("clamp");
  // low > high is fine: every element becomes high, as in PyTorch.
  if (std::isnan(low) && std::isnan(high))
    throw Error(Errc::invalid_argument, "clamp: give at least one of low and high (both are none)");
  auto out = new_output(h, unwrap(unary_result(UnaryKind::clamp, h.ir.shape, h.ir.dtype)));
  return emit(h, out, UnaryOp{UnaryKind::clamp, as_input(h), out, low, high});
}

Tensor Tensor::clamp_min(double low) const {
  if (std::isnan(low)) throw Error(Errc::invalid_argument, "clamp_min: the bound is NaN");
  return clamp(low, std::numeric_limits<double>::quiet_NaN());
}

Tensor Tensor::clamp_max(double high) const {
  if (std::isnan(high)) throw Error(Errc::invalid_argument, "clamp_max: the bound is NaN");
  return clamp(std::numeric_limits<double>::quiet_NaN(), high);
}

Tensor Tensor::square() const {
  // PyTorch's square is pow(x, 2): bool becomes i64 (2 is an integer).
  if (is_bool(handle("square").ir.dtype)) return cast(DType::i64).square();
  return mul(*this);
}

#define SY_UNARY(name) \
  Tensor Tensor::name() const { return unary(UnaryKind::name); }
#define SY_UNARY_method(name) SY_UNARY(name)
#define SY_UNARY_custom(name)
#define SY_UNARY_ROW(name, rule, entry) SY_UNARY_##entry(name)
SWITCHYARD_UNARY_OPS(SY_UNARY_ROW)
#undef SY_UNARY_ROW
#undef SY_UNARY_custom
#undef SY_UNARY_method
#undef SY_UNARY

Tensor Tensor::binary(BinaryKind k, const Tensor& o) const {
  const auto& a = handle(to_string(k));
  const auto& b = o.handle(to_string(k));
  same_device(to_string(k), a, b);
  auto out = new_output(a, unwrap(binary_result(k, a.ir.shape, a.ir.dtype, b.ir.shape, b.ir.dtype)));
  OperationIr op(std::in_place_type<BinaryOp>, k, as_input(a), as_input(b), out);
  return emit(a, std::move(out), std::move(op));
}

namespace {
// PyTorch's pow(Tensor, Scalar) takes these exponents to other kernels for
// f32, f64 and bf16 tensors (ATen's pow_tensor_scalar: sqrt, rsqrt,
// reciprocal, products), not for f16 and not for a tensor exponent. They
// differ from pow at -inf and -0 (sqrt(-inf) is NaN and sqrt(-0) is -0,
// where pow gives inf and 0), where x * x overflows (1e20 ** -2 is 0 in
// f32) and in rounding; so x.pow(0.5) here is x.sqrt(), and so on.
std::optional<Tensor> torch_scalar_pow(const Tensor& x, BinaryKind k, Scalar s) {
  if (k != BinaryKind::pow || s.kind == ScalarKind::boolean || !x.defined()) return std::nullopt;
  const DType t = x.dtype();
  // u8 to a negative integer power: the scalar, converted to u8 as the op
  // computes, would wrap (-1 to 255). The integer rule instead: 1 / base
  // truncated, so 1 where the base is 1, else 0.
  if (t == DType::u8 && s.kind == ScalarKind::integral && !s.is_unsigned && s.i < 0)
    return x.eq(Scalar(1)).cast(DType::u8);
  if (t != DType::f32 && t != DType::f64 && t != DType::bf16) return std::nullopt;
  const double e = s.kind == ScalarKind::floating ? s.f : static_cast<double>(s.i);
  if (s.kind == ScalarKind::integral && s.is_unsigned)
    return std::nullopt;  // a uint64 beyond int64: no special exponent
  if (e == 0.5) return x.sqrt();
  if (e == -0.5) return x.rsqrt();
  if (e == -1) return x.reciprocal();
  if (e == 2) return x.mul(x);
  if (e == 3) return x.mul(x).mul(x);
  if (e == -2) return x.mul(x).reciprocal();
  return std::nullopt;
}
}  // namespace

Tensor Tensor::binary(BinaryKind k, Scalar s, bool scalar_first) const {
  if (!scalar_first)
    if (auto special = torch_scalar_pow(*this, k, s)) return *special;
  const auto& a = handle(to_string(k));
  // A uint64 past INT64_MAX has no value in an integer or bool op's int64
  // arithmetic: PyTorch refuses it ("Overflow when unpacking long"); it
  // wrapped here (i64 -1 == 2^64 - 1 was true).
  if (s.kind == ScalarKind::integral && s.is_unsigned && s.i < 0 && !is_floating(a.ir.dtype))
    throw Error(Errc::invalid_argument, std::string(to_string(k)) + ": scalar " + s.to_string() +
                                            " does not fit int64, which a " + dt(a.ir.dtype) +
                                            " tensor's op computes in (cast the tensor to a floating dtype first)");
  // The dtype alone first: scalar_result's caf::expected and its copy of the
  // shape cost ~120 instructions per op; it runs only to say why an op fails.
  const auto t = scalar_result_dtype(k, a.ir.dtype, s.kind);
  auto out = t ? TensorIr{a.core->new_id(), a.ir.shape, *t, TensorStatus::not_init}
               : new_output(a, unwrap(scalar_result(k, a.ir.shape, a.ir.dtype, s.kind)));
  // Built in place: the op record is moved only into the queue.
  OperationIr op(std::in_place_type<ScalarOp>, k, as_input(a), s, scalar_first, out);
  return emit(a, std::move(out), std::move(op));
}

#define SY_BINARY(name)                                                              \
  Tensor Tensor::name(const Tensor& o) const { return binary(BinaryKind::name, o); } \
  Tensor Tensor::name(Scalar s) const { return binary(BinaryKind::name, s); }
#define SY_BINARY_ROW(name, rule, entry) SY_BINARY(name)
SWITCHYARD_BINARY_OPS(SY_BINARY_ROW)
#undef SY_BINARY_ROW
#undef SY_BINARY

// --- reductions -------------------------------------------------------------

Tensor Tensor::sum(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("sum"), ReduceKind::sum, std::move(axes), keepdim);
}
Tensor Tensor::mean(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("mean"), ReduceKind::mean, std::move(axes), keepdim);
}
Tensor Tensor::mean(std::vector<int64_t> axes, bool keepdim, DType dtype) const {
  const auto& h = handle("mean");
  if (!is_floating(dtype)) throw Error(Errc::dtype_mismatch, "mean: dtype must be floating, got " + dt(dtype));
  // The rules first, on the input's shape, so an axis error names the input.
  auto check_axes = axes;
  (void)unwrap(reduce_result(ReduceKind::mean, h.ir.shape, dtype, check_axes, keepdim));
  return cast(dtype).mean(std::move(axes), keepdim);
}
Tensor Tensor::prod(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("prod"), ReduceKind::prod, std::move(axes), keepdim);
}
Tensor Tensor::max(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("max"), ReduceKind::max, std::move(axes), keepdim);
}
Tensor Tensor::min(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("min"), ReduceKind::min, std::move(axes), keepdim);
}
Tensor Tensor::any(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("any"), ReduceKind::any, std::move(axes), keepdim);
}
Tensor Tensor::all(std::vector<int64_t> axes, bool keepdim) const {
  return reduce(*this, handle("all"), ReduceKind::all, std::move(axes), keepdim);
}
Tensor Tensor::var(std::vector<int64_t> axes, int64_t correction, bool keepdim) const {
  return reduce(*this, handle("var"), ReduceKind::var, std::move(axes), keepdim, correction);
}
Tensor Tensor::std(std::vector<int64_t> axes, int64_t correction, bool keepdim) const {
  return reduce(*this, handle("std"), ReduceKind::std, std::move(axes), keepdim, correction);
}

namespace {
// Without an axis: the index into the flattened tensor; keepdim keeps every
// axis with extent 1 (PyTorch), so [2, 3] gives [1, 1].
Tensor arg_extreme(const Tensor& t, const TensorHandle& h, ReduceKind k, std::optional<int64_t> axis, bool keepdim) {
  if (axis) return reduce(t, h, k, {*axis}, keepdim);
  std::vector<int64_t> all_axes;
  (void)unwrap(reduce_result(k, h.ir.shape, h.ir.dtype, all_axes, false));  // bool, empty: named errors
  Tensor flat = t.flatten();
  Tensor r = k == ReduceKind::argmax ? flat.argmax(0) : flat.argmin(0);
  if (!keepdim || h.ir.shape.rank() == 0) return r;
  return r.reshape(Shape(std::vector<int64_t>(h.ir.shape.rank(), 1)));
}
}  // namespace

Tensor Tensor::argmax(std::optional<int64_t> axis, bool keepdim) const {
  return arg_extreme(*this, handle("argmax"), ReduceKind::argmax, axis, keepdim);
}

Tensor Tensor::argmin(std::optional<int64_t> axis, bool keepdim) const {
  return arg_extreme(*this, handle("argmin"), ReduceKind::argmin, axis, keepdim);
}

Tensor Tensor::softmax(int64_t axis) const {
  const auto& h = handle("softmax");
  auto out = new_output(h, unwrap(softmax_result(h.ir.shape, h.ir.dtype, axis)));
  return emit(h, out, SoftmaxOp{as_input(h), out, axis, false});
}

Tensor Tensor::log_softmax(int64_t axis) const {
  const auto& h = handle("log_softmax");
  auto out = new_output(h, unwrap(softmax_result(h.ir.shape, h.ir.dtype, axis)));
  return emit(h, out, SoftmaxOp{as_input(h), out, axis, true});
}

// --- linear algebra -----------------------------------------------------------

Tensor Tensor::matmul(const Tensor& o) const {
  const auto& a = handle("matmul");
  const auto& b = o.handle("matmul");
  same_device("matmul", a, b);
  if (a.ir.shape.rank() == 0 || b.ir.shape.rank() == 0)
    throw Error(Errc::shape_mismatch, "matmul: operands must have at least one axis, got " + a.ir.shape.to_string() +
                                          " and " + b.ir.shape.to_string());
  if (a.ir.shape.rank() == 1) {
    auto r = unsqueeze(0).matmul(o);
    return r.squeeze(static_cast<int64_t>(r.rank()) - (b.ir.shape.rank() == 1 ? 1 : 2));
  }
  if (b.ir.shape.rank() == 1) return matmul(o.unsqueeze(1)).squeeze(-1);
  auto out = new_output(a, unwrap(matmul_result(a.ir.shape, a.ir.dtype, b.ir.shape, b.ir.dtype, false, false)));
  return emit(a, out, MatmulOp{as_input(a), as_input(b), TensorIr{}, out, false, false});
}

Tensor Tensor::linear(const Tensor& weight, const Tensor& bias) const {
  const auto& x = handle("linear");
  const auto& w = weight.handle("linear");
  same_device("linear", x, w);
  if (w.ir.shape.rank() != 2)
    throw Error(Errc::shape_mismatch, "linear: weight must be [out, in], got " + w.ir.shape.to_string());
  if (x.ir.shape.rank() == 1) return unsqueeze(0).linear(weight, bias).squeeze(0);
  auto product = matmul_result(x.ir.shape, x.ir.dtype, w.ir.shape, w.ir.dtype, false, true);
  if (!product) {
    // The rule speaks of matmul; the caller called linear.
    auto info = describe(product.error());
    auto msg = info.message;
    if (msg.rfind("matmul", 0) == 0) msg = "linear" + msg.substr(6);
    throw Error(info.code, msg + " (input @ weight^T)");
  }
  auto spec = *product;
  TensorIr bias_ir;
  if (bias.defined()) {
    const auto& b = bias.handle("linear");
    same_device("linear", x, b);
    if (b.ir.dtype != spec.dtype)
      throw Error(Errc::dtype_mismatch, "linear: bias is " + dt(b.ir.dtype) + ", input is " + dt(spec.dtype));
    auto bc = broadcast_shapes(spec.shape, b.ir.shape);
    if (!bc || *bc != spec.shape)
      throw Error(Errc::shape_mismatch,
                  "linear: bias " + b.ir.shape.to_string() + " does not broadcast to " + spec.shape.to_string());
    bias_ir = as_input(b);
  }
  auto out = new_output(x, spec);
  return emit(x, out, MatmulOp{as_input(x), as_input(w), bias_ir, out, false, true});
}

Tensor matmul(const Tensor& a, const Tensor& b) { return a.matmul(b); }

Tensor Tensor::addmm(const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) const {
  const auto& x = handle("addmm");
  const auto& a = mat1.handle("addmm");
  const auto& b = mat2.handle("addmm");
  same_device("addmm", x, a);
  same_device("addmm", x, b);
  if (a.ir.shape.rank() != 2 || b.ir.shape.rank() != 2)
    throw Error(Errc::shape_mismatch,
                "addmm: mat1 and mat2 must be 2-D, got " + a.ir.shape.to_string() + " and " + b.ir.shape.to_string());
  // Half types round once, as PyTorch's addmm (a GEMM with beta): the
  // product, its scaling and the sum stay in f32 until the end. Operands of
  // other dtypes go the plain way, whose matmul refuses the mix.
  const DType t = a.ir.dtype;
  const bool half = (t == DType::f16 || t == DType::bf16) && b.ir.dtype == t && x.ir.dtype == t;
  Tensor product;
  try {
    product = half ? mat1.cast(DType::f32).matmul(mat2.cast(DType::f32)) : mat1.matmul(mat2);
  } catch (const Error& e) {  // name the op the caller called
    std::string msg = e.what();
    if (msg.rfind("matmul", 0) == 0) msg = "addmm" + msg.substr(6);
    throw Error(e.code(), msg);
  }
  auto bc = broadcast_shapes(product.shape(), x.ir.shape);
  if (!bc || *bc != product.shape())
    throw Error(Errc::shape_mismatch, "addmm: input " + x.ir.shape.to_string() + " does not broadcast to the product " +
                                          product.shape().to_string());
  // As PyTorch: beta and alpha must fit the result's dtype, and on integers
  // a float one is truncated (the dtype stays).
  const DType result = half ? t : product.dtype();
  auto factor = [result](Scalar s, const char* name) {
    if (!s.fits(result))
      throw Error(Errc::invalid_argument, std::string("addmm: ") + name + " " + s.to_string() + " does not fit " +
                                              std::string(name_of(result)));
    return !is_floating(result) && s.kind == ScalarKind::floating ? Scalar(s.as<int64_t>()) : s;
  };
  beta = factor(beta, "beta");
  alpha = factor(alpha, "alpha");
  const Scalar one = 1;
  Tensor scaled_product = alpha == one ? product : product.mul(alpha);
  // beta = 0 ignores the input, NaN and infinities included (PyTorch's rule;
  // 0 * NaN would be NaN). Its shape was checked above, and where its dtype
  // is the product's, skipping it changes nothing else.
  if (beta.is_zero() && x.ir.dtype == result) return half ? scaled_product.cast(t) : scaled_product;
  const Tensor input = half ? cast(DType::f32) : *this;
  Tensor sum = scaled_product.add(beta == one ? input : input.mul(beta));
  return half ? sum.cast(t) : sum;
}

Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) {
  return input.addmm(mat1, mat2, beta, alpha);
}

// --- dtype and layout -----------------------------------------------------------

Tensor Tensor::cast(DType t) const {
  const auto& h = handle("cast");
  if (h.ir.dtype == t) return *this;
  auto out = new_output(h, TensorSpec{h.ir.shape, t});
  return emit(h, out, CastOp{as_input(h), out});
}

Tensor Tensor::reshape(Shape s) const {
  const auto& h = handle("reshape");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.rank(); ++i) {
    if (s.dims[i] == -1) {
      if (infer >= 0) throw Error(Errc::shape_mismatch, "reshape: more than one -1 in " + s.to_string());
      infer = static_cast<int64_t>(i);
    } else if (s.dims[i] < 0) {
      throw Error(Errc::shape_mismatch, "reshape: invalid extent in " + s.to_string());
    } else {
      known *= s.dims[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || h.ir.numel() % known != 0)
      throw Error(Errc::shape_mismatch, "reshape: cannot infer -1 in " + s.to_string() + " for " +
                                            std::to_string(h.ir.numel()) + " elements");
    s.dims[infer] = h.ir.numel() / known;
  }
  if (s.numel() != h.ir.numel())
    throw Error(Errc::shape_mismatch, "reshape: " + h.ir.shape.to_string() + " (" + std::to_string(h.ir.numel()) +
                                          " elements) cannot become " + s.to_string());
  auto strides = s.strides();
  return view(h, std::move(s), 0, std::move(strides));
}

Tensor Tensor::flatten() const { return reshape(Shape{-1}); }

Tensor Tensor::permute(std::vector<int64_t> axes) const {
  const auto& h = handle("permute");
  const auto rank = h.ir.shape.rank();
  if (axes.size() != rank)
    throw Error(Errc::shape_mismatch,
                "permute: " + std::to_string(axes.size()) + " axes for shape " + h.ir.shape.to_string());
  std::vector<bool> seen(rank, false);
  auto in_strides = h.ir.shape.strides();
  Shape out;
  std::vector<int64_t> strides;
  for (auto& a : axes) {
    a = axis_of("permute", a, rank);
    if (seen[a]) throw Error(Errc::invalid_argument, "permute: axis " + std::to_string(a) + " repeated");
    seen[a] = true;
    out.dims.push_back(h.ir.shape.dims[a]);
    strides.push_back(in_strides[a]);
  }
  return view(h, std::move(out), 0, std::move(strides));
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  const auto rank = handle("transpose").ir.shape.rank();
  if (rank == 0) {  // PyTorch accepts axes 0 and -1 of a 0-d tensor
    scalar_axis_of("transpose", a);
    scalar_axis_of("transpose", b);
    return *this;
  }
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  std::swap(axes[axis_of("transpose", a, rank)], axes[axis_of("transpose", b, rank)]);
  return permute(std::move(axes));
}

Tensor Tensor::mT() const {
  if (handle("mT").ir.shape.rank() < 2)
    throw Error(Errc::shape_mismatch, "mT: needs at least 2 axes, got " + shape().to_string());
  return transpose(-2, -1);
}

Tensor Tensor::expand(Shape s) const {
  const auto& h = handle("expand");
  const auto& in = h.ir.shape;
  if (s.rank() < in.rank())
    throw Error(Errc::shape_mismatch, "expand: cannot expand " + in.to_string() + " to fewer axes " + s.to_string());
  auto in_strides = in.strides();
  std::vector<int64_t> strides(s.rank(), 0);
  size_t lead = s.rank() - in.rank();
  for (size_t i = 0; i < s.rank(); ++i) {
    if (i < lead) {
      if (s.dims[i] < 0)
        throw Error(Errc::shape_mismatch, "expand: -1 is not allowed for a new axis in " + s.to_string());
      continue;
    }
    int64_t d = in.dims[i - lead];
    if (s.dims[i] == -1) s.dims[i] = d;
    if (s.dims[i] == d) {
      strides[i] = in_strides[i - lead];
    } else if (d != 1) {
      throw Error(Errc::shape_mismatch, "expand: " + in.to_string() + " cannot be expanded to " + s.to_string());
    }
  }
  if (auto err = check_shape(s, "expand: result")) detail::throw_error(err);
  return view(h, std::move(s), 0, std::move(strides));
}

Tensor Tensor::squeeze(std::optional<int64_t> axis) const {
  const auto& h = handle("squeeze");
  Shape out;
  std::optional<int64_t> a;
  if (axis)
    a = h.ir.shape.rank() == 0 ? scalar_axis_of("squeeze", *axis) : axis_of("squeeze", *axis, h.ir.shape.rank());
  for (size_t i = 0; i < h.ir.shape.rank(); ++i) {
    bool drop = h.ir.shape.dims[i] == 1 && (!a || *a == static_cast<int64_t>(i));
    if (!drop) out.dims.push_back(h.ir.shape.dims[i]);
  }
  auto strides = out.strides();
  return view(h, std::move(out), 0, std::move(strides));
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  const auto& h = handle("unsqueeze");
  auto a = axis_of("unsqueeze", axis, h.ir.shape.rank() + 1);
  Shape out = h.ir.shape;
  out.dims.insert(out.dims.begin() + a, 1);
  auto strides = out.strides();
  return view(h, std::move(out), 0, std::move(strides));
}

Tensor Tensor::flip(const std::vector<int64_t>& axes) const {
  const auto& h = handle("flip");
  auto strides = h.ir.shape.strides();
  int64_t offset = 0;
  std::vector<bool> seen(h.ir.shape.rank(), false);
  if (h.ir.shape.rank() == 0) {  // axes 0 and -1 name a 0-d tensor's one element
    for (auto a : axes) scalar_axis_of("flip", a);
    if (axes.size() > 1) throw Error(Errc::invalid_argument, "flip: axis 0 repeated");
    return *this;
  }
  for (auto a : axes) {
    a = axis_of("flip", a, h.ir.shape.rank());
    if (seen[a]) throw Error(Errc::invalid_argument, "flip: axis " + std::to_string(a) + " repeated");
    seen[a] = true;
    if (h.ir.shape.dims[a] > 0) offset += (h.ir.shape.dims[a] - 1) * strides[a];
    strides[a] = -strides[a];
  }
  if (h.ir.numel() == 0) offset = 0;
  return view(h, h.ir.shape, offset, std::move(strides));
}

Tensor Tensor::slice(int64_t axis, Slice s) const {
  const auto& h = handle("slice");
  auto a = axis_of("slice", axis, h.ir.shape.rank());
  std::vector<Slice> all(a + 1);
  all[a] = s;
  return slice(all);
}

Tensor Tensor::slice(const std::vector<Slice>& s) const {
  const auto& h = handle("slice");
  auto r = slice_region("slice", h.ir.shape, s);
  if (r.shape.numel() == 0) r.offset = 0;
  return view(h, std::move(r.shape), r.offset, std::move(r.strides));
}

Tensor Tensor::slice_assign(const std::vector<Slice>& s, const Tensor& value) const {
  const auto& h = handle("slice_assign");
  const auto& v = value.handle("slice_assign");
  same_device("slice_assign", h, v);
  auto r = slice_region("slice_assign", h.ir.shape, s);
  auto bc = broadcast_shapes(r.shape, v.ir.shape);
  if (!bc || *bc != r.shape)
    throw Error(Errc::shape_mismatch, "slice_assign: value " + v.ir.shape.to_string() +
                                          " does not broadcast to the region " + r.shape.to_string());
  Tensor val = value.cast(h.ir.dtype);
  if (val.shape() != r.shape) val = val.expand(r.shape);
  const auto& vh = val.handle("slice_assign");
  auto out = new_output(h, TensorSpec{h.ir.shape, h.ir.dtype});
  if (r.shape.numel() == 0) r.offset = 0;
  return emit(h, out, SliceAssignOp{as_input(h), as_input(vh), out, r.offset, std::move(r.strides)});
}

namespace {
// tril and triu: a mask from two aranges, then where.
Tensor triangle(const Tensor& x, const TensorHandle& h, const char* op, int64_t diagonal, bool lower) {
  const auto rank = h.ir.shape.rank();
  if (rank < 2)
    throw Error(Errc::shape_mismatch,
                std::string(op) + ": the input needs at least 2 axes, got shape " + h.ir.shape.to_string());
  const int64_t rows = h.ir.shape.dims[rank - 2], cols = h.ir.shape.dims[rank - 1];
  auto d = x.device();
  auto offset = d.arange(0, static_cast<double>(cols)).reshape({1, cols}) -
                d.arange(0, static_cast<double>(rows)).reshape({rows, 1});
  auto keep = lower ? offset <= Scalar(diagonal) : offset >= Scalar(diagonal);
  return where(keep, x, d.zeros({}, h.ir.dtype));
}
}  // namespace

Tensor Tensor::tril(int64_t diagonal) const { return triangle(*this, handle("tril"), "tril", diagonal, true); }
Tensor Tensor::triu(int64_t diagonal) const { return triangle(*this, handle("triu"), "triu", diagonal, false); }

Tensor Tensor::repeat(std::vector<int64_t> repeats) const {
  const auto& h = handle("repeat");
  const auto rank = h.ir.shape.rank();
  if (repeats.size() < rank)
    throw Error(Errc::invalid_argument, "repeat: " + std::to_string(repeats.size()) + " repeats for shape " +
                                            h.ir.shape.to_string() + " (give at least one per axis)");
  for (auto r : repeats)
    if (r < 0) throw Error(Errc::invalid_argument, "repeat: repeats must not be negative, got " + std::to_string(r));
  // The input's shape with leading 1s, then one strided view of shape
  // [r0, d0, r1, d1, ...] whose repeat axes have stride 0, then a reshape.
  Shape padded;
  padded.dims.assign(repeats.size() - rank, 1);
  padded.dims.insert(padded.dims.end(), h.ir.shape.dims.begin(), h.ir.shape.dims.end());
  const auto strides = padded.strides();
  Shape spread, result;
  std::vector<int64_t> spread_strides;
  for (size_t k = 0; k < repeats.size(); ++k) {
    spread.dims.push_back(repeats[k]);
    spread.dims.push_back(padded.dims[k]);
    spread_strides.push_back(0);
    spread_strides.push_back(strides[k]);
    // Checked before multiplying: 4 x 2^62 wrapped to an extent of 0.
    if (padded.dims[k] > 0 && repeats[k] > std::numeric_limits<int64_t>::max() / padded.dims[k])
      throw Error(Errc::shape_mismatch,
                  "repeat: " + h.ir.shape.to_string() + " repeated " + Shape(repeats).to_string() + " is too large");
    result.dims.push_back(repeats[k] * padded.dims[k]);
  }
  if (auto err = check_shape(result, "repeat: result")) detail::throw_error(err);
  return view(h, std::move(spread), 0, std::move(spread_strides)).reshape(std::move(result));
}

Tensor Tensor::tile(std::vector<int64_t> reps) const {
  const auto rank = handle("tile").ir.shape.rank();
  if (reps.size() < rank) reps.insert(reps.begin(), rank - reps.size(), 1);
  return repeat(std::move(reps));
}

Tensor Tensor::roll(std::vector<int64_t> shifts, std::vector<int64_t> dims) const {
  const auto& h = handle("roll");
  if (dims.empty()) {
    if (shifts.size() != 1)
      throw Error(Errc::invalid_argument,
                  "roll: without dims, give exactly one shift (got " + std::to_string(shifts.size()) + ")");
    return flatten().roll(shifts, {0}).reshape(h.ir.shape);
  }
  if (shifts.size() != dims.size())
    throw Error(Errc::invalid_argument, "roll: " + std::to_string(shifts.size()) + " shifts for " +
                                            std::to_string(dims.size()) + " dims (give one shift per dim)");
  Tensor out = *this;
  for (size_t k = 0; k < dims.size(); ++k) {
    const auto axis = axis_of("roll", dims[k], h.ir.shape.rank());
    const int64_t n = h.ir.shape.dims[axis];
    if (n == 0) continue;
    const int64_t s = ((shifts[k] % n) + n) % n;
    if (s == 0) continue;
    out = cat({out.slice(axis, {n - s, n}), out.slice(axis, {0, n - s})}, axis);
  }
  return out;
}

Tensor Tensor::roll(int64_t shift, std::optional<int64_t> dim) const {
  return dim ? roll(std::vector<int64_t>{shift}, {*dim}) : roll(std::vector<int64_t>{shift});
}

Tensor Tensor::pad(std::vector<int64_t> before, std::vector<int64_t> after, double value) const {
  const auto& h = handle("pad");
  if (before.size() == h.ir.shape.rank() && after.size() == h.ir.shape.rank() &&
      (std::any_of(before.begin(), before.end(), [](int64_t v) { return v < 0; }) ||
       std::any_of(after.begin(), after.end(), [](int64_t v) { return v < 0; }))) {
    // Negative widths crop first, as F.pad: the input is narrowed to
    // [-before, extent + after) for negative widths (that range must not be
    // negative), then padded with the positive widths. So the PadOp itself
    // stays non-negative.
    std::vector<Slice> keep;
    std::vector<int64_t> pad_before, pad_after;
    for (size_t d = 0; d < h.ir.shape.rank(); ++d) {
      const int64_t n = h.ir.shape.dims[d];
      // Checked before any arithmetic: widths come from the caller unchecked.
      const bool crops_too_much =
          before[d] < -n || after[d] < -n || std::min<int64_t>(before[d], 0) + std::min<int64_t>(after[d], 0) < -n;
      if (crops_too_much)
        throw Error(Errc::shape_mismatch, "pad: widths " + std::to_string(before[d]) + " and " +
                                              std::to_string(after[d]) + " crop more than the " + std::to_string(n) +
                                              " elements of axis " + std::to_string(d) + " of " +
                                              h.ir.shape.to_string());
      const int64_t lo = -std::min<int64_t>(before[d], 0);
      const int64_t hi = n + std::min<int64_t>(after[d], 0);
      keep.push_back(Slice{lo, hi, 1});
      pad_before.push_back(std::max<int64_t>(before[d], 0));
      pad_after.push_back(std::max<int64_t>(after[d], 0));
    }
    return slice(keep).pad(std::move(pad_before), std::move(pad_after), value);
  }
  auto out = new_output(h, unwrap(pad_result(h.ir.shape, h.ir.dtype, before, after)));
  return emit(h, out, PadOp{as_input(h), out, std::move(before), std::move(after), value});
}

namespace {
// PyTorch's gather and scatters take a 1-D index (and source) into a 0-d
// input as into its one element: torch.gather(tensor(3.5), 0, zeros(2))
// is [3.5, 3.5], and a scatter's result stays 0-d.
bool vector_into_scalar(const TensorHandle& in, const TensorHandle& index, const TensorHandle* src, int64_t axis) {
  return in.ir.shape.rank() == 0 && index.ir.shape.rank() == 1 && (src == nullptr || src->ir.shape.rank() == 1) &&
         (axis == 0 || axis == -1);
}
}  // namespace

Tensor Tensor::gather(int64_t axis, const Tensor& index) const {
  const auto& h = handle("gather");
  const auto& i = index.handle("gather");
  same_device("gather", h, i);
  if (vector_into_scalar(h, i, nullptr, axis)) return reshape(Shape{1}).gather(0, index);
  auto in = as_input(h), idx = as_input(i);
  auto spec = unwrap(index_result(IndexKind::gather, in, idx, nullptr, axis));
  // A 0-d gather goes through extent-1 vectors, where every backend checks
  // the index (PyTorch: "index 5 is out of bounds for dimension 0 with size 1").
  if (h.ir.shape.rank() == 0) return reshape(Shape{1}).gather(0, index.reshape(Shape{1})).reshape(Shape{});
  auto out = new_output(h, std::move(spec));
  return emit(h, out, IndexOp{IndexKind::gather, in, idx, TensorIr{}, out, axis});
}

Tensor Tensor::scatter_add(int64_t axis, const Tensor& index, const Tensor& src) const {
  const auto& h = handle("scatter_add");
  const auto& i = index.handle("scatter_add");
  const auto& s = src.handle("scatter_add");
  same_device("scatter_add", h, i);
  same_device("scatter_add", h, s);
  if (vector_into_scalar(h, i, &s, axis)) return reshape(Shape{1}).scatter_add(0, index, src).reshape(Shape{});
  auto in = as_input(h), idx = as_input(i), sr = as_input(s);
  auto spec = unwrap(index_result(IndexKind::scatter_add, in, idx, &sr, axis));
  if (h.ir.shape.rank() == 0)  // as gather: through extent-1 vectors
    return reshape(Shape{1}).scatter_add(0, index.reshape(Shape{1}), src.reshape(Shape{1})).reshape(Shape{});
  auto out = new_output(h, std::move(spec));
  return emit(h, out, IndexOp{IndexKind::scatter_add, in, idx, sr, out, axis});
}

Tensor Tensor::index_select(int64_t axis, const Tensor& index) const {
  const auto& h = handle("index_select");
  const auto& i = index.handle("index_select");
  same_device("index_select", h, i);
  auto in = as_input(h), idx = as_input(i);
  auto out = new_output(h, unwrap(index_result(IndexKind::index_select, in, idx, nullptr, axis)));
  return emit(h, out, IndexOp{IndexKind::index_select, in, idx, TensorIr{}, out, axis});
}

// --- scans, sorting, scatter (issue 18) ------------------------------------------

namespace {
Tensor scan(const TensorHandle& h, ScanKind k, int64_t dim, std::optional<DType> dtype) {
  auto out = new_output(h, unwrap(scan_result(k, h.ir.shape, h.ir.dtype, dim, dtype)));
  return emit(h, out, ScanOp{k, as_input(h), out, dim});
}
}  // namespace

Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const {
  return scan(handle("cumsum"), ScanKind::cumsum, dim, dtype);
}

Tensor Tensor::cumprod(int64_t dim, std::optional<DType> dtype) const {
  return scan(handle("cumprod"), ScanKind::cumprod, dim, dtype);
}

namespace {
// argsort's op, for argsort and sort (named as called).
Tensor sort_order(const Tensor& t, const char* op, int64_t dim, bool descending) {
  const auto& h = detail::TensorAccess::handle(t, op);
  auto out = new_output(h, unwrap_as(op, sort_result(SortKind::argsort, h.ir.shape, h.ir.dtype, dim, 0)));
  return emit(h, out, SortOp{SortKind::argsort, as_input(h), out, dim, 0, descending, true});
}
}  // namespace

Tensor Tensor::argsort(int64_t dim, bool descending, bool /*stable: always*/) const {
  return sort_order(*this, "argsort", dim, descending);
}

ValuesIndices Tensor::sort(int64_t dim, bool descending, bool /*stable: always*/) const {
  Tensor indices = sort_order(*this, "sort", dim, descending);
  return {gather(dim, indices), indices};
}

ValuesIndices Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  const auto& h = handle("topk");
  auto out = new_output(h, unwrap(sort_result(SortKind::topk, h.ir.shape, h.ir.dtype, dim, k)));
  Tensor indices = emit(h, out, SortOp{SortKind::topk, as_input(h), out, dim, k, largest, sorted});
  return {gather(dim, indices), indices};
}

Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src) const {
  return scatter_reduce(dim, index, src, "", true);
}

Tensor Tensor::scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                              bool include_self) const {
  IndexKind k = IndexKind::scatter;
  if (reduce == "sum")
    k = IndexKind::scatter_add;
  else if (reduce == "prod")
    k = IndexKind::scatter_prod;
  else if (reduce == "amax")
    k = IndexKind::scatter_amax;
  else if (reduce == "amin")
    k = IndexKind::scatter_amin;
  else if (!reduce.empty())
    throw Error(Errc::invalid_argument,
                "scatter_reduce: reduce must be \"sum\", \"prod\", \"amax\" or \"amin\", got \"" + reduce + "\"" +
                    (reduce == "mean" ? " (mean is not supported)" : ""));
  const char* name = reduce.empty() ? "scatter" : "scatter_reduce";
  if (!include_self) throw Error(Errc::invalid_argument, std::string(name) + ": include_self=false is not supported");
  const auto& h = handle(name);
  const auto& i = index.handle(name);
  const auto& s = src.handle(name);
  same_device(name, h, i);
  same_device(name, h, s);
  if (vector_into_scalar(h, i, &s, dim))
    return reshape(Shape{1}).scatter_reduce(0, index, src, reduce).reshape(Shape{});
  auto in = as_input(h), idx = as_input(i), sr = as_input(s);
  auto spec = unwrap_as(name, index_result(k, in, idx, &sr, dim));
  if (h.ir.shape.rank() == 0)  // as gather: through extent-1 vectors
    return reshape(Shape{1}).scatter_reduce(0, index.reshape(Shape{1}), src.reshape(Shape{1}), reduce).reshape(Shape{});
  auto out = new_output(h, std::move(spec));
  return emit(h, out, IndexOp{k, in, idx, sr, out, dim});
}

Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  const auto& h = handle("masked_fill");
  const auto& m = mask.handle("masked_fill");
  same_device("masked_fill", h, m);
  if (m.ir.dtype != DType::boolean)
    throw Error(Errc::dtype_mismatch, "masked_fill: mask must be bool, got " + dt(m.ir.dtype));
  // Either may broadcast to the other (PyTorch: ones(3).masked_fill(mask[2, 1], v) is [2, 3]).
  if (!broadcast_shapes(h.ir.shape, m.ir.shape))
    throw Error(Errc::shape_mismatch,
                "masked_fill: mask " + m.ir.shape.to_string() + " does not broadcast with " + h.ir.shape.to_string());
  if (!value.fits(h.ir.dtype))
    throw Error(Errc::invalid_argument, "masked_fill: value " + value.to_string() + " cannot be converted to " +
                                            dt(h.ir.dtype) + " without overflow");
  // The fill value as a 0-d tensor of x's dtype, converted exactly (a fill
  // op carries a double, which would round an i64 beyond 2^53).
  Tensor fill = visit_dtype(h.ir.dtype, [&](auto tag) {
    using T = decltype(tag);
    return device().tensor(std::vector<T>{value.as<T>()}, Shape{});
  });
  return where(mask, fill, *this);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const auto& c = cond.handle("where");
  const auto& x = a.handle("where");
  const auto& y = b.handle("where");
  same_device("where", c, x);
  same_device("where", c, y);
  auto out = new_output(c, unwrap(where_result(as_input(c), as_input(x), as_input(y))));
  return emit(c, out, WhereOp{as_input(c), as_input(x), as_input(y), out});
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t axis) {
  if (tensors.empty()) throw Error(Errc::invalid_argument, "cat: needs at least one tensor");
  const auto& first = tensors.front().handle("cat");
  DType t = first.ir.dtype;
  for (const auto& x : tensors) {
    same_device("cat", first, x.handle("cat"));
    t = promote(t, x.dtype());
  }
  // PyTorch's legacy rule: a 1-D empty tensor joins any cat (it is left
  // out, after counting in the dtype), so cat({empty, x}) is x.
  auto legacy_empty = [](const Tensor& x) { return x.shape().rank() == 1 && x.shape()[0] == 0; };
  const bool skip_empty = !std::all_of(tensors.begin(), tensors.end(), legacy_empty);
  std::vector<Tensor> cast_inputs;
  std::vector<TensorIr> inputs;
  for (const auto& x : tensors) {
    if (skip_empty && legacy_empty(x)) continue;
    cast_inputs.push_back(x.cast(t));
    inputs.push_back(as_input(cast_inputs.back().handle("cat")));
  }
  // Of only such tensors the result is one too, whatever the axis (PyTorch
  // checks no axis then).
  if (!skip_empty) axis = 0;
  auto out = new_output(first, unwrap(cat_result(inputs, axis)));
  return emit(first, out, CatOp{std::move(inputs), out, axis});
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t axis) {
  if (tensors.empty()) throw Error(Errc::invalid_argument, "stack: needs at least one tensor");
  const auto& s = tensors.front().shape();
  auto a = axis_of("stack", axis, s.rank() + 1);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].shape() != s)
      throw Error(Errc::shape_mismatch, "stack: tensor " + std::to_string(i) + " has shape " +
                                            tensors[i].shape().to_string() + ", tensor 0 has " + s.to_string());
    parts.push_back(tensors[i].unsqueeze(a));
  }
  return cat(parts, a);
}

// --- printing -------------------------------------------------------------------

namespace {

// PyTorch's summary rule: beyond 1000 elements show `edge` per end of an axis.
constexpr int64_t print_threshold = 1000;
constexpr int64_t print_edge = 3;

void print_values(std::ostream& os, const std::vector<double>& v, const std::vector<int64_t>& ints, DType t,
                  const Shape& s, size_t axis, int64_t offset, bool summarize) {
  const bool integral = !is_floating(t);
  auto element = [&](int64_t k) {
    if (is_bool(t))
      os << (ints[static_cast<size_t>(k)] != 0 ? "true" : "false");
    else if (integral)
      os << ints[static_cast<size_t>(k)];
    else
      os << v[static_cast<size_t>(k)];
  };
  if (s.rank() == 0) {
    element(0);
    return;
  }
  const int64_t n = s.dims[axis];
  const int64_t stride = s.strides()[axis];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * print_edge && i == print_edge) {
      os << "..., ";
      i = n - print_edge;
    }
    if (axis + 1 == s.rank())
      element(offset + i * stride);
    else
      print_values(os, v, ints, t, s, axis + 1, offset + i * stride, summarize);
    if (i + 1 < n) os << ", ";
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << t.shape().to_string() << ", dtype=" << name_of(t.dtype()) << ", device=" << t.device().name()
     << ")\n";
  try {
    auto data = t.read().get();
    const bool integral = !is_floating(data.dtype);
    std::vector<double> v;
    std::vector<int64_t> ints;
    if (integral)
      ints = data.to_vector<int64_t>();
    else
      v = data.to_vector<double>();
    std::ostringstream body;
    // Enough significant digits to tell neighbouring values apart.
    body.precision(data.dtype == DType::f64 ? 15 : data.dtype == DType::f32 ? 7 : data.dtype == DType::f16 ? 5 : 4);
    print_values(body, v, ints, data.dtype, data.shape, 0, 0, data.shape.numel() > print_threshold);
    os << body.str();
  } catch (const Error& e) {
    os << "<failed: " << e.what() << ">";
  }
  return os;
}

}  // namespace switchyard
