// SPDX-License-Identifier: Apache-2.0
// The functional NN ops: argument checks at the call, then one op each.

#include "switchyard/nn.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "op_emit.hpp"

namespace switchyard::nn {

using detail::TensorAccess;
using detail::TensorHandle;
using namespace detail::op_emit;  // NOLINT(google-build-using-namespace)

// --- convolution and pooling ------------------------------------------------

namespace {

std::string spatial_name(const char* stem, size_t n) { return std::string(stem) + std::to_string(n) + "d"; }

// One value per spatial axis from PyTorch's int-or-tuple argument; `fallback`
// fills an empty one.
std::vector<int64_t> per_axis(const std::string& op, const char* arg, const std::vector<int64_t>& v, size_t n,
                              const std::vector<int64_t>& fallback) {
  if (v.empty()) return fallback;
  if (v.size() == 1) return std::vector<int64_t>(n, v[0]);
  if (v.size() != n)
    throw Error(Errc::invalid_argument,
                op + ": " + arg + " needs " +
                    (n == 1 ? std::string("1 value") : "1 or " + std::to_string(n) + " values") + ", got " +
                    std::to_string(v.size()));
  return v;
}

// `what`: the call's name (conv2d, conv_transpose1d, conv), which its
// operand and device errors give.
Tensor emit_conv(const Tensor& input, const Tensor& weight, const Tensor& bias, ConvOp op, const std::string& name) {
  const char* what = name.c_str();
  const auto& x = TensorAccess::handle(input, what);
  const auto& w = TensorAccess::handle(weight, what);
  same_device(what, x, w);
  op.input = as_input(x);
  op.weight = as_input(w);
  if (const auto* b = TensorAccess::handle_or_null(bias)) {
    same_device(what, x, *b);
    op.bias = as_input(*b);
  }
  // The rule names conv1d ... conv_transpose3d itself; a call of that name
  // keeps it, the generic conv() too.
  auto out = new_output(x, unwrap(conv_result(op)));
  op.out = out;
  return emit(x, out, std::move(op));
}

// `called`: the name the caller used where it is not the rule's own (the
// general max_pool / avg_pool, whose rule says max_pool2d and so on).
Tensor emit_pool(const Tensor& input, PoolOp op, const char* called = nullptr) {
  const auto& x = TensorAccess::handle(input, called != nullptr ? called : to_string(op.kind));
  op.in = as_input(x);
  auto out = new_output(x, called != nullptr ? unwrap_as(called, pool_result(op)) : unwrap(pool_result(op)));
  op.out = out;
  return emit(x, out, std::move(op));
}

Tensor conv_nd(size_t n, const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
               const ConvPadding& padding, const Ints& dilation, int64_t groups) {
  const std::string name = spatial_name("conv", n);
  ConvOp op;
  op.stride = per_axis(name, "stride", stride.values, n, std::vector<int64_t>(n, 1));
  op.dilation = per_axis(name, "dilation", dilation.values, n, std::vector<int64_t>(n, 1));
  op.output_padding.assign(n, 0);
  op.groups = groups;
  if (padding.mode.empty()) {
    op.pad_before = per_axis(name, "padding", padding.sizes.values, n, std::vector<int64_t>(n, 0));
    op.pad_after = op.pad_before;
  } else if (padding.mode == "valid") {
    op.pad_before.assign(n, 0);
    op.pad_after.assign(n, 0);
  } else if (padding.mode == "same") {
    for (auto s : op.stride)
      if (s != 1)
        throw Error(
            Errc::invalid_argument,
            name + ": padding=\"same\" is not supported for strided convolutions (stride " + std::to_string(s) + ")");
    const auto& ws = weight.shape();
    op.pad_before.assign(n, 0);
    op.pad_after.assign(n, 0);
    if (ws.rank() == n + 2)  // otherwise the rule reports the weight
      for (size_t i = 0; i < n; ++i) {
        // PyTorch: the total d * (k - 1), the odd element after.
        const int64_t total = op.dilation[i] * (ws.dims[2 + i] - 1);
        op.pad_before[i] = total / 2;
        op.pad_after[i] = total - total / 2;
      }
  } else {
    throw Error(Errc::invalid_argument,
                name + ": padding must be \"same\", \"valid\" or sizes, got \"" + padding.mode + "\"");
  }
  return emit_conv(input, weight, bias, std::move(op), name);
}

Tensor conv_transpose_nd(size_t n, const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
                         const Ints& padding, const Ints& output_padding, int64_t groups, const Ints& dilation) {
  const std::string name = spatial_name("conv_transpose", n);
  ConvOp op;
  op.transposed = true;
  op.stride = per_axis(name, "stride", stride.values, n, std::vector<int64_t>(n, 1));
  op.dilation = per_axis(name, "dilation", dilation.values, n, std::vector<int64_t>(n, 1));
  op.pad_before = per_axis(name, "padding", padding.values, n, std::vector<int64_t>(n, 0));
  op.pad_after = op.pad_before;
  op.output_padding = per_axis(name, "output_padding", output_padding.values, n, std::vector<int64_t>(n, 0));
  op.groups = groups;
  return emit_conv(input, weight, bias, std::move(op), name);
}

PoolOp windowed(PoolKind kind, size_t n, const Ints& kernel_size, const Ints& stride, const Ints& padding,
                const Ints& dilation, bool ceil_mode) {
  const std::string name = spatial_name(kind == PoolKind::avg ? "avg_pool" : "max_pool", n);
  PoolOp op;
  op.kind = kind;
  if (kernel_size.values.empty()) throw Error(Errc::invalid_argument, name + ": kernel_size is empty");
  op.kernel = per_axis(name, "kernel_size", kernel_size.values, n, {});
  op.stride = per_axis(name, "stride", stride.values, n, op.kernel);
  op.pad_before = per_axis(name, "padding", padding.values, n, std::vector<int64_t>(n, 0));
  op.pad_after = op.pad_before;
  op.dilation = per_axis(name, "dilation", dilation.values, n, std::vector<int64_t>(n, 1));
  op.ceil_mode = ceil_mode;
  return op;
}

Tensor max_pool_nd(size_t n, const Tensor& input, const Ints& k, const Ints& s, const Ints& p, const Ints& d,
                   bool ceil_mode) {
  return emit_pool(input, windowed(PoolKind::max, n, k, s, p, d, ceil_mode));
}

std::pair<Tensor, Tensor> with_indices(const Tensor& input, PoolOp op, PoolKind indices_kind,
                                       const char* called = nullptr) {
  PoolOp indices = op;
  indices.kind = indices_kind;
  auto values = emit_pool(input, std::move(op), called);
  return {std::move(values), emit_pool(input, std::move(indices), called)};
}

Tensor avg_pool_nd(size_t n, const Tensor& input, const Ints& k, const Ints& s, const Ints& p, bool ceil_mode,
                   bool count_include_pad, std::optional<int64_t> divisor_override) {
  auto op = windowed(PoolKind::avg, n, k, s, p, Ints(1), ceil_mode);
  op.count_include_pad = count_include_pad;
  if (divisor_override) {
    if (*divisor_override == 0)
      throw Error(Errc::invalid_argument, spatial_name("avg_pool", n) + ": divisor_override must not be zero");
    op.divisor_override = *divisor_override;
  }
  return emit_pool(input, std::move(op));
}

PoolOp adaptive(PoolKind kind, size_t n, const Ints& output_size) {
  PoolOp op;
  op.kind = kind;
  op.output_size = per_axis(spatial_name(kind == PoolKind::adaptive_avg ? "adaptive_avg_pool" : "adaptive_max_pool", n),
                            "output_size", output_size.values, n, {});
  if (op.output_size.empty())
    throw Error(Errc::invalid_argument,
                spatial_name(kind == PoolKind::adaptive_avg ? "adaptive_avg_pool" : "adaptive_max_pool", n) +
                    ": output_size is empty");
  return op;
}

PoolOp general_pool(PoolKind kind, const PoolOptions& o) {
  const size_t n = o.kernel_size.size();
  const std::string name = kind == PoolKind::avg ? "avg_pool" : "max_pool";
  if (n < 1 || n > 3)
    throw Error(Errc::invalid_argument, name + ": kernel_size needs 1 to 3 values, got " + std::to_string(n));
  PoolOp op;
  op.kind = kind;
  op.kernel = o.kernel_size;
  op.stride = per_axis(name, "stride", o.stride, n, o.kernel_size);
  op.pad_before = per_axis(name, "pad_begin", o.pad_begin, n, std::vector<int64_t>(n, 0));
  op.pad_after = per_axis(name, "pad_end", o.pad_end, n, std::vector<int64_t>(n, 0));
  op.dilation = per_axis(name, "dilation", o.dilation, n, std::vector<int64_t>(n, 1));
  op.ceil_mode = o.ceil_mode;
  op.count_include_pad = o.count_include_pad;
  if (o.divisor_override) {
    if (*o.divisor_override == 0) throw Error(Errc::invalid_argument, name + ": divisor_override must not be zero");
    op.divisor_override = *o.divisor_override;
  }
  return op;
}

}  // namespace

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
              const ConvPadding& padding, const Ints& dilation, int64_t groups) {
  return conv_nd(1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
              const ConvPadding& padding, const Ints& dilation, int64_t groups) {
  return conv_nd(2, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
              const ConvPadding& padding, const Ints& dilation, int64_t groups) {
  return conv_nd(3, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
                        const Ints& padding, const Ints& output_padding, int64_t groups, const Ints& dilation) {
  return conv_transpose_nd(1, input, weight, bias, stride, padding, output_padding, groups, dilation);
}
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
                        const Ints& padding, const Ints& output_padding, int64_t groups, const Ints& dilation) {
  return conv_transpose_nd(2, input, weight, bias, stride, padding, output_padding, groups, dilation);
}
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Ints& stride,
                        const Ints& padding, const Ints& output_padding, int64_t groups, const Ints& dilation) {
  return conv_transpose_nd(3, input, weight, bias, stride, padding, output_padding, groups, dilation);
}

Tensor conv(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvOptions& o) {
  const size_t n = weight.rank() >= 3 ? weight.rank() - 2 : 0;
  const std::string name = o.transposed ? "conv_transpose" : "conv";
  if (n < 1 || n > 3)
    throw Error(Errc::shape_mismatch, name + ": weight needs 3 to 5 axes, got " + weight.shape().to_string());
  ConvOp op;
  op.transposed = o.transposed;
  op.groups = o.groups;
  op.stride = per_axis(name, "stride", o.stride, n, std::vector<int64_t>(n, 1));
  op.dilation = per_axis(name, "dilation", o.dilation, n, std::vector<int64_t>(n, 1));
  op.pad_before = per_axis(name, "pad_begin", o.pad_begin, n, std::vector<int64_t>(n, 0));
  op.pad_after = per_axis(name, "pad_end", o.pad_end, n, std::vector<int64_t>(n, 0));
  op.output_padding = per_axis(name, "output_padding", o.output_padding, n, std::vector<int64_t>(n, 0));
  return emit_conv(input, weight, bias, std::move(op), name);
}

Tensor max_pool1d(const Tensor& input, const Ints& k, const Ints& s, const Ints& p, const Ints& d, bool ceil_mode) {
  return max_pool_nd(1, input, k, s, p, d, ceil_mode);
}
Tensor max_pool2d(const Tensor& input, const Ints& k, const Ints& s, const Ints& p, const Ints& d, bool ceil_mode) {
  return max_pool_nd(2, input, k, s, p, d, ceil_mode);
}
Tensor max_pool3d(const Tensor& input, const Ints& k, const Ints& s, const Ints& p, const Ints& d, bool ceil_mode) {
  return max_pool_nd(3, input, k, s, p, d, ceil_mode);
}
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, const Ints& k, const Ints& s, const Ints& p,
                                                  const Ints& d, bool ceil_mode) {
  return with_indices(input, windowed(PoolKind::max, 1, k, s, p, d, ceil_mode), PoolKind::max_indices);
}
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Ints& k, const Ints& s, const Ints& p,
                                                  const Ints& d, bool ceil_mode) {
  return with_indices(input, windowed(PoolKind::max, 2, k, s, p, d, ceil_mode), PoolKind::max_indices);
}
std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, const Ints& k, const Ints& s, const Ints& p,
                                                  const Ints& d, bool ceil_mode) {
  return with_indices(input, windowed(PoolKind::max, 3, k, s, p, d, ceil_mode), PoolKind::max_indices);
}
Tensor avg_pool1d(const Tensor& input, const Ints& k, const Ints& s, const Ints& p, bool ceil_mode,
                  bool count_include_pad) {
  return avg_pool_nd(1, input, k, s, p, ceil_mode, count_include_pad, std::nullopt);
}
Tensor avg_pool2d(const Tensor& input, const Ints& k, const Ints& s, const Ints& p, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool_nd(2, input, k, s, p, ceil_mode, count_include_pad, divisor_override);
}
Tensor avg_pool3d(const Tensor& input, const Ints& k, const Ints& s, const Ints& p, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool_nd(3, input, k, s, p, ceil_mode, count_include_pad, divisor_override);
}
Tensor adaptive_avg_pool1d(const Tensor& input, const Ints& output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_avg, 1, output_size));
}
Tensor adaptive_avg_pool2d(const Tensor& input, const Ints& output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_avg, 2, output_size));
}
Tensor adaptive_avg_pool3d(const Tensor& input, const Ints& output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_avg, 3, output_size));
}
Tensor adaptive_max_pool1d(const Tensor& input, const Ints& output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_max, 1, output_size));
}
Tensor adaptive_max_pool2d(const Tensor& input, const Ints& output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_max, 2, output_size));
}
std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input, const Ints& output_size) {
  return with_indices(input, adaptive(PoolKind::adaptive_max, 1, output_size), PoolKind::adaptive_max_indices);
}
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, const Ints& output_size) {
  return with_indices(input, adaptive(PoolKind::adaptive_max, 2, output_size), PoolKind::adaptive_max_indices);
}

Tensor max_pool(const Tensor& input, const PoolOptions& options) {
  return emit_pool(input, general_pool(PoolKind::max, options), "max_pool");
}
std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& input, const PoolOptions& options) {
  return with_indices(input, general_pool(PoolKind::max, options), PoolKind::max_indices, "max_pool_with_indices");
}
Tensor avg_pool(const Tensor& input, const PoolOptions& options) {
  return emit_pool(input, general_pool(PoolKind::avg, options), "avg_pool");
}

// --- normalisation and attention ----------------------------------------------

namespace {

std::string shape_str(const std::vector<int64_t>& d) { return Shape{d}.to_string(); }

/// An optional operand as an input of the op (id 0 when undefined), on x's device.
TensorIr optional_input(const char* op, const TensorHandle& x, const Tensor& t) {
  const TensorHandle* h = TensorAccess::handle_or_null(t);
  if (h == nullptr) return TensorIr{};
  same_device(op, x, *h);
  return as_input(*h);
}

Tensor emit_norm(const char* op, NormKind kind, const Tensor& input, const Tensor& mean, const Tensor& var,
                 const Tensor& weight, const Tensor& bias, int64_t count, double eps) {
  const auto& h = TensorAccess::handle(input, op);
  NormOp o;
  o.kind = kind;
  o.in = as_input(h);
  o.mean = optional_input(op, h, mean);
  o.var = optional_input(op, h, var);
  o.weight = optional_input(op, h, weight);
  o.bias = optional_input(op, h, bias);
  o.count = count;
  o.eps = eps;
  o.out = new_output(h, unwrap(norm_result(kind, o.in, &o.mean, &o.var, &o.weight, &o.bias, count, eps)));
  auto out = o.out;
  return emit(h, out, std::move(o));
}

/// The number of trailing axes `normalized_shape` names, after checking it
/// is a suffix of the input's shape.
int64_t trailing_axes(const char* op, const Tensor& input, const std::vector<int64_t>& normalized_shape) {
  const auto& dims = TensorAccess::handle(input, op).ir.shape.dims;
  const size_t k = normalized_shape.size();
  bool suffix = k <= dims.size() && std::equal(normalized_shape.begin(), normalized_shape.end(), dims.end() - k);
  if (!suffix)
    throw Error(Errc::shape_mismatch, std::string(op) + ": normalized_shape=" + shape_str(normalized_shape) +
                                          " is not a suffix of the input shape " + shape_str(dims));
  return static_cast<int64_t>(k);
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double /*momentum*/, double eps) {
  if (training)
    throw Error(Errc::invalid_argument,
                "batch_norm: training=true is not supported (inference only: pass running statistics)");
  if (!running_mean.defined() || !running_var.defined())
    throw Error(Errc::invalid_argument, "batch_norm: running_mean and running_var are required (inference only)");
  return emit_norm("batch_norm", NormKind::batch, input, running_mean, running_var, weight, bias, 0, eps);
}

Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const int64_t k = trailing_axes("layer_norm", input, normalized_shape);
  return emit_norm("layer_norm", NormKind::layer, input, {}, {}, weight, bias, k, eps);
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  return emit_norm("group_norm", NormKind::group, input, {}, {}, weight, bias, num_groups, eps);
}

Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const int64_t k = trailing_axes("rms_norm", input, normalized_shape);
  const DType t = TensorAccess::handle(input, "rms_norm").ir.dtype;
  // torch.finfo(dtype).eps; integer inputs fail in the rule below.
  const double machine_eps = t == DType::f64 ? std::numeric_limits<double>::epsilon()
                                             : static_cast<double>(std::numeric_limits<float>::epsilon());
  return emit_norm("rms_norm", NormKind::rms, input, {}, {}, weight, {}, k, eps.value_or(machine_eps));
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  if (dropout_p != 0)
    throw Error(Errc::invalid_argument,
                std::string(op) + ": dropout_p must be 0 (no dropout in inference), got " + std::to_string(dropout_p));
  const auto& q = TensorAccess::handle(query, op);
  const auto& k = TensorAccess::handle(key, op);
  const auto& v = TensorAccess::handle(value, op);
  same_device(op, q, k);
  same_device(op, q, v);
  AttentionOp o;
  o.q = as_input(q);
  o.k = as_input(k);
  o.v = as_input(v);
  o.mask = optional_input(op, q, attn_mask);
  o.causal = is_causal;
  auto spec = unwrap(attention_result(o.q, o.k, o.v, &o.mask, is_causal));
  const int64_t E = q.ir.shape.dims.back();
  o.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(E, 1))));
  if (!std::isfinite(o.scale))
    throw Error(Errc::invalid_argument, std::string(op) + ": scale must be finite, got " + std::to_string(o.scale));
  o.out = new_output(q, std::move(spec));
  auto out = o.out;
  return emit(q, out, std::move(o));
}

Tensor one_hot(const Tensor& tensor, int64_t num_classes) {
  const auto& h = TensorAccess::handle(tensor, "one_hot");
  if (h.ir.dtype != DType::i64)
    throw Error(Errc::dtype_mismatch, "one_hot: needs an i64 (index) tensor, got " + dt(h.ir.dtype));
  if (num_classes < -1)
    throw Error(Errc::invalid_argument,
                "one_hot: num_classes must be -1 or non-negative, got " + std::to_string(num_classes));
  // PyTorch refuses 0 classes of an empty tensor as it does -1.
  if (num_classes <= 0 && tensor.numel() == 0)
    throw Error(Errc::invalid_argument,
                "one_hot: cannot infer num_classes of an empty tensor (got " + std::to_string(num_classes) + ")");
  const bool inferred = num_classes == -1;
  if (inferred) {
    // Read on the host anyway: the negative check costs no extra wait.
    num_classes = tensor.max().item<int64_t>() + 1;
    if (tensor.min().item<int64_t>() < 0)
      throw Error(Errc::invalid_argument, "one_hot: class values must be non-negative");
  }
  Shape shape = h.ir.shape;
  shape.dims.push_back(num_classes);
  Shape index_shape = h.ir.shape;
  index_shape.dims.push_back(1);
  Device d = tensor.device();
  Tensor index = tensor.reshape(index_shape);
  // A given class count reads nothing on the host (the call returns at
  // once): a class c >= num_classes fails the scatter on the device, naming
  // c, and a negative one, which the scatter would count from the end, is
  // moved out of its range first, where it fails as c - num_classes.
  if (!inferred) index = where(index.lt(Scalar(0)), index.sub(Scalar(num_classes)), index);
  return d.zeros(shape, DType::i64).scatter(-1, index, d.ones(index_shape, DType::i64));
}

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx) {
  const auto& w = TensorAccess::handle(weight, "embedding");
  const auto& x = TensorAccess::handle(input, "embedding");
  same_device("embedding", x, w);
  if (w.ir.shape.rank() != 2)
    throw Error(Errc::shape_mismatch,
                "embedding: weight must be 2-D [num_embeddings, D], got " + w.ir.shape.to_string());
  if (x.ir.dtype != DType::i64 && x.ir.dtype != DType::i32)
    throw Error(Errc::dtype_mismatch, "embedding: input must be i64 or i32, got " + dt(x.ir.dtype));
  const int64_t n = w.ir.shape.dims[0];
  if (padding_idx && (*padding_idx < -n || *padding_idx >= n))
    throw Error(Errc::invalid_argument, "embedding: padding_idx " + std::to_string(*padding_idx) +
                                            " is out of range for " + std::to_string(n) + " embeddings");
  Shape out = x.ir.shape;
  out.dims.push_back(w.ir.shape.dims[1]);
  return weight.index_select(0, input.reshape(Shape{x.ir.shape.numel()})).reshape(out);
}

// --- padding and resampling ----------------------------------------------------

namespace {

// One axis of a non-constant pad as one index_select: output position j
// reads input position j - before, extended past the ends by the mode. A
// negative width therefore crops; reflect and replicate still extend the
// whole input and circular wraps the part the crop keeps, as PyTorch 1.13.
Tensor pad_axis(const Tensor& x, int64_t axis, int64_t before, int64_t after, const std::string& mode) {
  if (before == 0 && after == 0) return x;
  const int64_t n = x.shape().dims[static_cast<size_t>(axis)];
  const auto bad = [&](const std::string& rule) {
    return Error(Errc::invalid_argument, "pad: " + mode + " widths (" + std::to_string(before) + ", " +
                                             std::to_string(after) + ") on axis " + std::to_string(axis) + " of " +
                                             x.shape().to_string() + ": " + rule);
  };
  if (mode == "reflect" && (before >= n || after >= n)) throw bad("each must be below the axis's extent");
  if (mode == "circular" && (before > n || after > n)) throw bad("each must be at most the axis's extent");
  if (mode == "replicate" && n == 0) throw bad("the axis is empty");
  const int64_t extent = n + before + after;
  if (extent < 0) throw bad("they crop more than the axis holds");
  const int64_t kept_lo = std::max<int64_t>(-before, 0);
  const int64_t kept = n - kept_lo - std::max<int64_t>(-after, 0);
  if (mode == "circular" && extent > 0 && kept <= 0) throw bad("they crop the whole axis");
  std::vector<int64_t> source(static_cast<size_t>(extent));
  for (int64_t j = 0; j < extent; ++j) {
    int64_t i = j - before;
    if (mode == "reflect")
      i = i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
    else if (mode == "replicate")
      i = std::clamp<int64_t>(i, 0, n - 1);
    else  // circular wraps the part the crop keeps, [kept_lo, kept_lo + kept)
      i = kept_lo + (((j - std::max<int64_t>(before, 0)) % kept) + kept) % kept;
    source[static_cast<size_t>(j)] = i;
  }
  return x.index_select(axis, x.device().tensor(source, {extent}));
}

}  // namespace

Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, const std::string& mode, double value) {
  const auto rank = static_cast<int64_t>(TensorAccess::handle(input, "pad").ir.shape.rank());
  if (pad.size() % 2 != 0)
    throw Error(Errc::invalid_argument, "pad: widths come in (before, after) pairs, got " + std::to_string(pad.size()));
  const auto axes = static_cast<int64_t>(pad.size() / 2);
  if (axes > rank)
    throw Error(Errc::invalid_argument, "pad: " + std::to_string(axes) + " pairs of widths for shape " +
                                            input.shape().to_string() + " (at most one per axis)");
  if (mode == "constant") {
    std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
    for (int64_t k = 0; k < axes; ++k) {
      before[static_cast<size_t>(rank - 1 - k)] = pad[static_cast<size_t>(2 * k)];
      after[static_cast<size_t>(rank - 1 - k)] = pad[static_cast<size_t>(2 * k + 1)];
    }
    return input.pad(std::move(before), std::move(after), value);
  }
  if (mode != "reflect" && mode != "replicate" && mode != "circular")
    throw Error(Errc::invalid_argument,
                "pad: unknown mode \"" + mode + "\" (constant, reflect, replicate or circular)");
  if (value != 0)
    throw Error(Errc::invalid_argument, "pad: a fill value is only for mode constant, got " + std::to_string(value));
  if (mode != "circular" && !is_floating(input.dtype()))
    throw Error(Errc::dtype_mismatch, "pad: mode " + mode + " needs a floating tensor, got " + dt(input.dtype()));
  // PyTorch 1.13's ranks: 1 to 3 padded axes; reflect and replicate take
  // the input with or without its batch axis, circular only with it.
  const bool rank_ok =
      axes >= 1 && axes <= 3 && (mode == "circular" ? rank == axes + 2 : (rank == axes + 1 || rank == axes + 2));
  if (!rank_ok)
    throw Error(Errc::invalid_argument, "pad: mode " + mode + " pads 1 to 3 trailing axes of an input with " +
                                            (mode == "circular" ? "exactly 2" : "1 or 2") + " more axes; got " +
                                            std::to_string(axes) + " pairs of widths for shape " +
                                            input.shape().to_string());
  Tensor out = input;
  for (int64_t k = 0; k < axes; ++k)
    out = pad_axis(out, rank - 1 - k, pad[static_cast<size_t>(2 * k)], pad[static_cast<size_t>(2 * k + 1)], mode);
  return out;
}

namespace {

// PyTorch's scale for one axis: what the kernel multiplies output indices by.
// A given scale factor is used as 1 / factor; align_corners maps corner to
// corner. Kept in the tensor's precision as PyTorch's CPU kernels do.
template <class T>
T source_scale(int64_t in, int64_t out, std::optional<double> factor, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (factor && *factor > 0) return static_cast<T>(1.0 / *factor);
  return static_cast<T>(in) / static_cast<T>(out);
}

std::vector<int64_t> nearest_indices(int64_t in, int64_t out, std::optional<double> factor, bool exact) {
  std::vector<int64_t> idx(static_cast<size_t>(out));
  const float scale = source_scale<float>(in, out, factor, false);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = 0;
    // No shortcut for out == in or 2 * in: PyTorch 1.13 has none when a
    // scale factor is given (floor(5 * 1.1) = 5 outputs of 5 inputs sample
    // 0, 0, 1, 2, 3), and without one the scale is exactly 1 or 1/2.
    if (exact)
      i = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * scale)));
    else
      i = static_cast<int64_t>(std::floor(static_cast<float>(o) * scale));
    idx[static_cast<size_t>(o)] = std::min(i, in - 1);
  }
  return idx;
}

// The two source indices and weights of linear sampling along one axis.
template <class T>
struct LinearTaps {
  std::vector<int64_t> lo, hi;
  std::vector<T> w_lo, w_hi;
};

template <class T>
LinearTaps<T> linear_taps(int64_t in, int64_t out, std::optional<double> factor, bool align_corners) {
  LinearTaps<T> taps;
  const T scale = source_scale<T>(in, out, factor, align_corners);
  for (int64_t o = 0; o < out; ++o) {
    // As PyTorch's compute_source_index_and_lambda: an axis whose extent
    // stays is copied, also when a scale factor (1.1 of 5: 5) would move it.
    if (out == in) {
      taps.lo.push_back(o);
      taps.hi.push_back(o);
      taps.w_lo.push_back(T(1));
      taps.w_hi.push_back(T(0));
      continue;
    }
    // As PyTorch's CPU kernels: the source position in double (their
    // accumulate type), the weight rounded to T once, the other weight
    // 1 - it in T. (Rounding the position to T first moved weights by an
    // ulp, and a position of 1 + 4e-8 to exactly 1.)
    double src = align_corners ? static_cast<double>(scale) * static_cast<double>(o)
                               : static_cast<double>(scale) * (static_cast<double>(o) + 0.5) - 0.5;
    if (src < 0) src = 0;
    const auto i0 = std::min(static_cast<int64_t>(src), in - 1);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const auto l1 = static_cast<T>(std::min(std::max(src - static_cast<double>(i0), 0.0), 1.0));
    taps.lo.push_back(i0);
    taps.hi.push_back(i1);
    taps.w_lo.push_back(T(1) - l1);
    taps.w_hi.push_back(l1);
  }
  return taps;
}

}  // namespace

Tensor interpolate(const Tensor& input, const std::vector<int64_t>& size, const std::vector<double>& scale_factor,
                   const std::string& mode, std::optional<bool> align_corners) {
  const auto& h = TensorAccess::handle(input, "interpolate");
  const auto& shape = h.ir.shape;
  const auto rank = shape.rank();
  if (rank < 3 || rank > 5)
    throw Error(Errc::shape_mismatch,
                "interpolate: input must be (N, C, d1[, d2[, d3]]), got shape " + shape.to_string());
  const size_t spatial = rank - 2;
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  const char* linear_mode = spatial == 1 ? "linear" : spatial == 2 ? "bilinear" : "trilinear";
  if (!nearest && mode != linear_mode) {
    if (mode == "linear" || mode == "bilinear" || mode == "trilinear")
      throw Error(Errc::invalid_argument, "interpolate: mode " + mode + " is for " +
                                              (mode == "linear"     ? "3"
                                               : mode == "bilinear" ? "4"
                                                                    : "5") +
                                              "-D input, got shape " + shape.to_string());
    throw Error(Errc::invalid_argument,
                "interpolate: unknown mode \"" + mode + "\" (nearest, nearest-exact, linear, bilinear or trilinear)");
  }
  if (nearest && align_corners)
    throw Error(Errc::invalid_argument, "interpolate: align_corners is only for the linear modes, not " + mode);
  const auto t = h.ir.dtype;
  if (!is_floating(t) && !(nearest && t == DType::u8))
    throw Error(Errc::dtype_mismatch, "interpolate: mode " + mode + " is not defined for " + dt(t) +
                                          (nearest ? " (f32, f64 or u8)" : " (f32 or f64)"));
  if (size.empty() == scale_factor.empty())
    throw Error(Errc::invalid_argument, "interpolate: give either size or scale_factor, not both or neither");
  const auto per_axis = [&](size_t given, const char* what) {
    if (given != 1 && given != spatial)
      throw Error(Errc::invalid_argument, std::string("interpolate: ") + what + " has " + std::to_string(given) +
                                              " values for " + std::to_string(spatial) + " spatial axes of " +
                                              shape.to_string());
  };
  std::vector<int64_t> out_size(spatial);
  std::vector<std::optional<double>> factors(spatial);
  if (!size.empty()) {
    per_axis(size.size(), "size");
    for (size_t k = 0; k < spatial; ++k) out_size[k] = size[size.size() == 1 ? 0 : k];
  } else {
    per_axis(scale_factor.size(), "scale_factor");
    for (size_t k = 0; k < spatial; ++k) {
      const double f = scale_factor[scale_factor.size() == 1 ? 0 : k];
      if (!(f > 0) || !std::isfinite(f))
        throw Error(Errc::invalid_argument,
                    "interpolate: scale_factor must be positive and finite, got " + std::to_string(f));
      factors[k] = f;
      out_size[k] = static_cast<int64_t>(std::floor(static_cast<double>(shape.dims[k + 2]) * f));
    }
  }
  for (size_t k = 0; k < spatial; ++k)
    if (out_size[k] <= 0 || shape.dims[k + 2] <= 0)
      throw Error(Errc::invalid_argument, "interpolate: input extent " + std::to_string(shape.dims[k + 2]) +
                                              " and output extent " + std::to_string(out_size[k]) +
                                              " of spatial axis " + std::to_string(k) + " must both be positive");
  auto device = input.device();
  // The 16-bit floats blend in f32 and round once at the end (PyTorch's
  // opmath), instead of rounding every weight and partial sum.
  const bool widen = !nearest && is_half(t);
  Tensor out = widen ? input.cast(DType::f32) : input;
  // The innermost axis first, each one as gathers (and, for the linear
  // modes, one weighted sum), which is PyTorch's separable order of sums.
  for (size_t k = spatial; k-- > 0;) {
    const auto axis = static_cast<int64_t>(k + 2);
    const int64_t in_extent = shape.dims[k + 2], out_extent = out_size[k];
    if (nearest) {
      auto idx = nearest_indices(in_extent, out_extent, factors[k], mode == "nearest-exact");
      out = out.index_select(axis, device.tensor(idx, {out_extent}));
      continue;
    }
    // Weights broadcast along `axis`: shape [out_extent, 1, ...].
    Shape weight_shape;
    weight_shape.dims.assign(rank - static_cast<size_t>(axis), 1);
    weight_shape.dims[0] = out_extent;
    const bool corners = align_corners.value_or(false);
    auto gather = [&](const std::vector<int64_t>& idx) {
      return out.index_select(axis, device.tensor(idx, {out_extent}));
    };
    if (t == DType::f64) {
      auto taps = linear_taps<double>(in_extent, out_extent, factors[k], corners);
      out = gather(taps.lo) * device.tensor(taps.w_lo, weight_shape) +
            gather(taps.hi) * device.tensor(taps.w_hi, weight_shape);
      continue;
    }
    // f32 (and the 16-bit floats, widened): PyTorch's compiled kernel sums
    // as fma(lo, w_lo, hi * w_hi), the second product rounded, the rest
    // rounded once. In f64 lo * w_lo is exact and the sum is rounded once
    // more than fma would (a difference only where that lands on an f32
    // tie): bit for bit with PyTorch in 1-D, where a plain sum of two
    // rounded products was an ulp off in most outputs.
    auto taps = linear_taps<float>(in_extent, out_extent, factors[k], corners);
    std::vector<double> w_lo(taps.w_lo.begin(), taps.w_lo.end());
    const Tensor high = gather(taps.hi) * device.tensor(taps.w_hi, weight_shape);
    out =
        (gather(taps.lo).cast(DType::f64) * device.tensor(w_lo, weight_shape) + high.cast(DType::f64)).cast(DType::f32);
  }
  return widen ? out.cast(t) : out;
}

}  // namespace switchyard::nn
