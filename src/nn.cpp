// SPDX-License-Identifier: Apache-2.0
// The functional NN ops: argument checks at the call, then one op each.

#include "switchyard/nn.hpp"

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
                op + ": " + arg + " needs 1 or " + std::to_string(n) + " values, got " + std::to_string(v.size()));
  return v;
}

Tensor emit_conv(const Tensor& input, const Tensor& weight, const Tensor& bias, ConvOp op) {
  const char* what = op.transposed ? "conv_transpose" : "conv";
  const auto& x = TensorAccess::handle(input, what);
  const auto& w = TensorAccess::handle(weight, what);
  same_device(what, x, w);
  op.input = as_input(x);
  op.weight = as_input(w);
  if (const auto* b = TensorAccess::handle_or_null(bias)) {
    same_device(what, x, *b);
    op.bias = as_input(*b);
  }
  auto out = new_output(x, unwrap(conv_result(op)));
  op.out = out;
  return emit(x, out, std::move(op));
}

Tensor emit_pool(const Tensor& input, PoolOp op) {
  const auto& x = TensorAccess::handle(input, to_string(op.kind));
  op.in = as_input(x);
  auto out = new_output(x, unwrap(pool_result(op)));
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
  return emit_conv(input, weight, bias, std::move(op));
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
  return emit_conv(input, weight, bias, std::move(op));
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

std::pair<Tensor, Tensor> with_indices(const Tensor& input, PoolOp op, PoolKind indices_kind) {
  PoolOp indices = op;
  indices.kind = indices_kind;
  auto values = emit_pool(input, std::move(op));
  return {std::move(values), emit_pool(input, std::move(indices))};
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

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, Ints stride, ConvPadding padding,
              Ints dilation, int64_t groups) {
  return conv_nd(1, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Ints stride, ConvPadding padding,
              Ints dilation, int64_t groups) {
  return conv_nd(2, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias, Ints stride, ConvPadding padding,
              Ints dilation, int64_t groups) {
  return conv_nd(3, input, weight, bias, stride, padding, dilation, groups);
}
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias, Ints stride, Ints padding,
                        Ints output_padding, int64_t groups, Ints dilation) {
  return conv_transpose_nd(1, input, weight, bias, stride, padding, output_padding, groups, dilation);
}
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Ints stride, Ints padding,
                        Ints output_padding, int64_t groups, Ints dilation) {
  return conv_transpose_nd(2, input, weight, bias, stride, padding, output_padding, groups, dilation);
}
Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias, Ints stride, Ints padding,
                        Ints output_padding, int64_t groups, Ints dilation) {
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
  return emit_conv(input, weight, bias, std::move(op));
}

Tensor max_pool1d(const Tensor& input, Ints k, Ints s, Ints p, Ints d, bool ceil_mode) {
  return max_pool_nd(1, input, k, s, p, d, ceil_mode);
}
Tensor max_pool2d(const Tensor& input, Ints k, Ints s, Ints p, Ints d, bool ceil_mode) {
  return max_pool_nd(2, input, k, s, p, d, ceil_mode);
}
Tensor max_pool3d(const Tensor& input, Ints k, Ints s, Ints p, Ints d, bool ceil_mode) {
  return max_pool_nd(3, input, k, s, p, d, ceil_mode);
}
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, Ints k, Ints s, Ints p, Ints d, bool ceil_mode) {
  return with_indices(input, windowed(PoolKind::max, 1, k, s, p, d, ceil_mode), PoolKind::max_indices);
}
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, Ints k, Ints s, Ints p, Ints d, bool ceil_mode) {
  return with_indices(input, windowed(PoolKind::max, 2, k, s, p, d, ceil_mode), PoolKind::max_indices);
}
std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& input, Ints k, Ints s, Ints p, Ints d, bool ceil_mode) {
  return with_indices(input, windowed(PoolKind::max, 3, k, s, p, d, ceil_mode), PoolKind::max_indices);
}
Tensor avg_pool1d(const Tensor& input, Ints k, Ints s, Ints p, bool ceil_mode, bool count_include_pad) {
  return avg_pool_nd(1, input, k, s, p, ceil_mode, count_include_pad, std::nullopt);
}
Tensor avg_pool2d(const Tensor& input, Ints k, Ints s, Ints p, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  return avg_pool_nd(2, input, k, s, p, ceil_mode, count_include_pad, divisor_override);
}
Tensor avg_pool3d(const Tensor& input, Ints k, Ints s, Ints p, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  return avg_pool_nd(3, input, k, s, p, ceil_mode, count_include_pad, divisor_override);
}
Tensor adaptive_avg_pool1d(const Tensor& input, Ints output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_avg, 1, output_size));
}
Tensor adaptive_avg_pool2d(const Tensor& input, Ints output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_avg, 2, output_size));
}
Tensor adaptive_avg_pool3d(const Tensor& input, Ints output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_avg, 3, output_size));
}
Tensor adaptive_max_pool1d(const Tensor& input, Ints output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_max, 1, output_size));
}
Tensor adaptive_max_pool2d(const Tensor& input, Ints output_size) {
  return emit_pool(input, adaptive(PoolKind::adaptive_max, 2, output_size));
}
std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input, Ints output_size) {
  return with_indices(input, adaptive(PoolKind::adaptive_max, 1, output_size), PoolKind::adaptive_max_indices);
}
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, Ints output_size) {
  return with_indices(input, adaptive(PoolKind::adaptive_max, 2, output_size), PoolKind::adaptive_max_indices);
}

Tensor max_pool(const Tensor& input, const PoolOptions& options) {
  return emit_pool(input, general_pool(PoolKind::max, options));
}
std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& input, const PoolOptions& options) {
  return with_indices(input, general_pool(PoolKind::max, options), PoolKind::max_indices);
}
Tensor avg_pool(const Tensor& input, const PoolOptions& options) {
  return emit_pool(input, general_pool(PoolKind::avg, options));
}

// --- normalisation and attention ----------------------------------------------

}  // namespace switchyard::nn
