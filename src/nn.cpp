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
  if (num_classes == -1) {
    if (tensor.numel() == 0)
      throw Error(Errc::invalid_argument, "one_hot: cannot infer num_classes of an empty tensor");
    num_classes = tensor.max().item<int64_t>() + 1;
  }
  // Negative classes: the scatter below would count them from the end.
  if (tensor.numel() > 0 && tensor.min().item<int64_t>() < 0)
    throw Error(Errc::invalid_argument, "one_hot: class values must be non-negative");
  Shape shape = h.ir.shape;
  shape.dims.push_back(num_classes);
  Shape index_shape = h.ir.shape;
  index_shape.dims.push_back(1);
  Device d = tensor.device();
  Tensor index = tensor.reshape(index_shape);
  // A value >= num_classes fails the scatter at run time, naming it.
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

}  // namespace switchyard::nn
