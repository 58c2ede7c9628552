// SPDX-License-Identifier: Apache-2.0
// The optimizer ops of ONNX's ai.onnx.preview.training domain (version 1):
// Adagrad, Adam and Momentum, each one step of its update rule over any
// number of tensors. The scalar coefficients (learning rate, step count) are
// read on the host and folded into scalars; the element-wise work is the op
// set's, in the tensors' own dtype, in the order ONNX's reference writes it.

#include <cmath>
#include <string>

#include "onnx_internal.hpp"

namespace switchyard::onnx::detail {

namespace {

Value on_device(Tensor t) {
  Value v;
  v.dev = std::move(t);
  return v;
}

/// How an optimizer node's inputs split: R, T, then `groups` lists of n
/// tensors each (X, G, and the op's state), with `outputs_per` lists of n
/// outputs. Checks the counts, dtypes and shapes, naming what is wrong.
struct Operands {
  double rate = 0;
  int64_t step = 0;
  size_t n = 0;

  Operands(Ctx& ctx, size_t groups, size_t outputs_per) {
    const size_t inputs = ctx.num_inputs();
    if (inputs < 2 + groups || (inputs - 2) % groups != 0)
      ctx.fail(Errc::invalid_argument,
               std::to_string(inputs) + " inputs: takes R, T and " + std::to_string(groups) + " lists of equal length");
    n = (inputs - 2) / groups;
    const auto outputs = static_cast<size_t>(ctx.node().output_size());
    if (outputs != outputs_per * n)
      ctx.fail(Errc::invalid_argument, std::to_string(outputs) + " outputs for " + std::to_string(n) +
                                           " tensors: takes " + std::to_string(outputs_per * n));
    const TensorData& r = ctx.host(0);
    if (r.numel() != 1 || !is_floating(r.dtype))
      ctx.fail(Errc::invalid_argument, "R (the learning rate) must be one float or double value, got " +
                                           std::string(name_of(r.dtype)) + " " + r.shape.to_string());
    const TensorData& t = ctx.host(1);
    if (t.numel() != 1 || t.dtype != DType::i64)
      ctx.fail(Errc::invalid_argument, "T (the update count) must be one int64 value, got " +
                                           std::string(name_of(t.dtype)) + " " + t.shape.to_string());
    rate = r.to_vector<double>().front();
    step = t.to_vector<int64_t>().front();
    for (size_t i = 0; i < n; ++i) {
      const Tensor x = ctx.dev(2 + i);
      if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
        ctx.fail(Errc::dtype_mismatch, "tensor " + std::to_string(i) + " to optimize ('" +
                                           ctx.node().input(static_cast<int>(2 + i)) + "') is " +
                                           std::string(name_of(x.dtype())) + ": takes float or double");
      for (size_t g = 1; g < groups; ++g) {
        const size_t at = 2 + g * n + i;
        const Tensor other = ctx.dev(at);
        if (other.dtype() != x.dtype() || other.shape() != x.shape())
          ctx.fail(Errc::invalid_argument,
                   "input " + std::to_string(at) + " ('" + ctx.node().input(static_cast<int>(at)) + "') is " +
                       std::string(name_of(other.dtype())) + " " + other.shape().to_string() + ", its tensor " +
                       std::to_string(i) + " ('" + ctx.node().input(static_cast<int>(2 + i)) + "') is " +
                       std::string(name_of(x.dtype())) + " " + x.shape().to_string());
      }
    }
  }

  /// Tensor i of input list `group` (0: X, 1: G, then the op's state).
  [[nodiscard]] Tensor operand(const Ctx& ctx, size_t group, size_t i) const { return ctx.dev(2 + group * n + i); }
};

/// G + norm_coefficient * X, as ONNX's reference regularizes the gradient.
Tensor regularized(const Tensor& x, const Tensor& g, double norm_coefficient) {
  return x.mul(Scalar(norm_coefficient)).add(g);
}

Outs adagrad(Ctx& ctx) {
  const Operands ops(ctx, 3, 2);
  const double decay = ctx.attr_f("decay_factor", 0.0f), epsilon = ctx.attr_f("epsilon", 1e-6f);
  const double norm = ctx.attr_f("norm_coefficient", 0.0f);
  const double rate = ops.rate / (1 + static_cast<double>(ops.step) * decay);
  Outs xs, hs;
  for (size_t i = 0; i < ops.n; ++i) {
    const Tensor x = ops.operand(ctx, 0, i);
    const Tensor g = regularized(x, ops.operand(ctx, 1, i), norm);
    Tensor h = ops.operand(ctx, 2, i).add(g.mul(g));
    xs.push_back(on_device(x.sub(g.mul(Scalar(rate)).div(h.sqrt().add(Scalar(epsilon))))));
    hs.push_back(on_device(std::move(h)));
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

Outs adam(Ctx& ctx) {
  const Operands ops(ctx, 4, 3);
  const double alpha = ctx.attr_f("alpha", 0.9f), beta = ctx.attr_f("beta", 0.999f);
  const double epsilon = ctx.attr_f("epsilon", 1e-6f), norm = ctx.attr_f("norm_coefficient", 0.0f);
  const double norm_post = ctx.attr_f("norm_coefficient_post", 0.0f);
  // Bias correction of both moments, from the second step on.
  const auto t = static_cast<double>(ops.step);
  const double rate = ops.step > 0 ? ops.rate * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : ops.rate;
  Outs xs, vs, hs;
  for (size_t i = 0; i < ops.n; ++i) {
    const Tensor x = ops.operand(ctx, 0, i);
    const Tensor g = regularized(x, ops.operand(ctx, 1, i), norm);
    Tensor v = ops.operand(ctx, 2, i).mul(Scalar(alpha)).add(g.mul(Scalar(1 - alpha)));
    Tensor h = ops.operand(ctx, 3, i).mul(Scalar(beta)).add(g.mul(g).mul(Scalar(1 - beta)));
    const Tensor step = v.div(h.sqrt().add(Scalar(epsilon))).mul(Scalar(rate));
    xs.push_back(on_device(x.sub(step).mul(Scalar(1 - norm_post))));
    vs.push_back(on_device(std::move(v)));
    hs.push_back(on_device(std::move(h)));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

Outs momentum(Ctx& ctx) {
  const Operands ops(ctx, 3, 2);
  const double alpha = ctx.attr_f("alpha", 0), beta = ctx.attr_f("beta", 0);
  const double norm = ctx.attr_f("norm_coefficient", 0);
  const bool nesterov = ctx.attr_s("mode", "") == "nesterov";
  // The gradient's coefficient is 1 on the first step.
  const double gradient_weight = ops.step > 0 ? beta : 1.0;
  Outs xs, vs;
  for (size_t i = 0; i < ops.n; ++i) {
    const Tensor x = ops.operand(ctx, 0, i);
    const Tensor g = regularized(x, ops.operand(ctx, 1, i), norm);
    Tensor v = ops.operand(ctx, 2, i).mul(Scalar(alpha)).add(g.mul(Scalar(gradient_weight)));
    const Tensor direction = nesterov ? g.add(v.mul(Scalar(alpha))) : v;
    xs.push_back(on_device(x.sub(direction.mul(Scalar(ops.rate)))));
    vs.push_back(on_device(std::move(v)));
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

std::string momentum_check(const ::onnx::NodeProto& node, int64_t) {
  std::string mode;
  bool has_alpha = false, has_beta = false, has_norm = false;
  for (const auto& a : node.attribute()) {
    if (a.name() == "mode") mode = a.s();
    has_alpha |= a.name() == "alpha";
    has_beta |= a.name() == "beta";
    has_norm |= a.name() == "norm_coefficient";
  }
  if (!has_alpha || !has_beta || !has_norm || mode.empty())
    return "Momentum needs the attributes alpha, beta, mode and norm_coefficient";
  if (mode != "standard" && mode != "nesterov") return "Momentum mode '" + mode + "' (standard or nesterov)";
  return "";
}

}  // namespace

const std::map<std::string, OpSpec, std::less<>>& training_op_table() {
  static const std::map<std::string, OpSpec, std::less<>> table = {
      {"Adagrad", {{"decay_factor", "epsilon", "norm_coefficient"}, nullptr, adagrad}},
      {"Adam", {{"alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"}, nullptr, adam}},
      {"Momentum", {{"alpha", "beta", "mode", "norm_coefficient"}, momentum_check, momentum}},
  };
  return table;
}

}  // namespace switchyard::onnx::detail
