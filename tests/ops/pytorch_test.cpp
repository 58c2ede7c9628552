// SPDX-License-Identifier: Apache-2.0
// Replays tests/data/pytorch_cases.json (written by tests/pytorch/gen_cases.py
// from PyTorch 1.13) on every device: every op, every dtype, PyTorch's
// outputs and PyTorch's errors. Needs no Python at test time.
//
// f16/bf16 cases marked "emulated" are ops PyTorch 1.13's CPU has no Half
// (or BFloat16) kernel for, or whose kernel rounds along the way: their
// expected output is PyTorch's f32 result rounded once, which is what
// Switchyard computes; they are compared the same way as the others.

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include <switchyard/nn.hpp>

#include "ops_common.hpp"
#include "switchyard/nn.hpp"
// ReduceKind: the op IR, no longer reached through the public headers.
#include "switchyard/messages/operation_ir.hpp"

using namespace sytest;
using nlohmann::json;
using sy::Device;
using sy::DType;
using sy::Tensor;

namespace {

DType dtype_of(const json& j) {
  auto t = sy::parse_dtype(j.get<std::string>());
  if (!t) throw std::runtime_error("unknown dtype " + j.dump());
  return *t;
}

sy::Shape shape_of(const json& j) { return sy::Shape(j.get<std::vector<int64_t>>()); }

double number(const json& v) {
  if (v.is_string()) {
    auto s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  return v.get<double>();
}

bool is_narrow(DType t) { return t == DType::f16 || t == DType::bf16 || t == DType::i8 || t == DType::i16; }

// Values of every dtype but i64 are exact as doubles (f16 and bf16 ones
// included: the generator writes the floats they are), so data() builds
// them as they were in PyTorch.
sy::TensorData tensor_of(const json& j) {
  DType t = dtype_of(j["dtype"]);
  auto s = shape_of(j["shape"]);
  const auto& values = j["data"];
  if (t == DType::i64) {  // exact, beyond 2^53
    std::vector<int64_t> v;
    for (const auto& x : values) v.push_back(x.get<int64_t>());
    return sy::TensorData::from(v, s);
  }
  std::vector<double> v;
  for (const auto& x : values) v.push_back(number(x));
  return data(t, s, v);
}

/// Whether a case has an f16, bf16, i8 or i16 tensor among its inputs or
/// output, or asks for one of those dtypes.
bool uses_narrow(const json& c) {
  for (const auto& t : c["inputs"])
    if (is_narrow(dtype_of(t["dtype"]))) return true;
  if (c.contains("out") && is_narrow(dtype_of(c["out"]["dtype"]))) return true;
  const json& a = c["args"];
  return a.contains("dtype") && a["dtype"].is_string() && is_narrow(dtype_of(a["dtype"]));
}

/// The tolerance for a result of dtype `t`: rounding level (about two units
/// in the last place for f16 and bf16, whose values PyTorch and we both
/// round once from f32), widened by the case's own "tol".
Tol tolerance(const json& c, DType t) {
  Tol tol = tol_for(t);
  if (t == DType::f16) tol = {std::max(tol.rtol, 2e-3), std::max(tol.atol, 1e-3)};
  if (t == DType::bf16) tol = {std::max(tol.rtol, 1.6e-2), std::max(tol.atol, 1e-2)};
  if (c.contains("tol"))
    tol = {std::max(tol.rtol, c["tol"][0].get<double>()), std::max(tol.atol, c["tol"][1].get<double>())};
  return tol;
}

/// A device that does not take a dtype says so: Errc::unsupported, "... is
/// not supported on this device". cpu and reference take every dtype, so
/// there such a refusal is a failure like any other.
bool refuses_dtype(const Device& d, const sy::Error& e) {
  return e.code() == sy::Errc::unsupported &&
         std::string(e.what()).find("not supported on this device") != std::string::npos && d.kind() != "cpu" &&
         d.kind() != "reference";
}

template <class Enum>
Enum kind_named(const std::string& name, const char* (*to_string)(Enum) noexcept, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if (name == to_string(static_cast<Enum>(i))) return static_cast<Enum>(i);
  throw std::runtime_error("unknown kind " + name);
}

sy::Scalar scalar_of(const json& value, const std::string& kind) {
  if (kind == "bool") return sy::Scalar(value.get<bool>());
  if (kind == "int") {  // exact: JSON integers beyond 2^53 stay integers
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX})
      return sy::Scalar(value.get<uint64_t>());
    return sy::Scalar(value.get<int64_t>());
  }
  return sy::Scalar(number(value));
}

std::vector<sy::Slice> slices_of(const json& j) {
  std::vector<sy::Slice> out;
  for (const auto& s : j) {
    sy::Slice sl;
    if (!s[0].is_null()) sl.start = s[0].get<int64_t>();
    if (!s[1].is_null()) sl.end = s[1].get<int64_t>();
    if (!s[2].is_null()) sl.step = s[2].get<int64_t>();
    out.push_back(sl);
  }
  return out;
}

std::vector<int64_t> ints(const json& j) { return j.get<std::vector<int64_t>>(); }

// PyTorch's int-or-tuple argument `key` of a case, or `fallback` when absent.
sy::nn::Ints ints_or(const json& a, const char* key, sy::nn::Ints fallback) {
  if (!a.contains(key) || a[key].is_null()) return fallback;
  if (a[key].is_array()) return sy::nn::Ints(a[key].get<std::vector<int64_t>>());
  return sy::nn::Ints(a[key].get<int64_t>());
}

template <class T>
T value_or(const json& a, const char* key, T fallback) {
  return a.contains(key) && !a[key].is_null() ? a[key].get<T>() : fallback;
}

/// The convolution and pooling calls (tests/pytorch/gen_cases.py, section
/// "convolution and pooling"); an empty tensor when `op` is none of them.
Tensor build_nn(const std::string& op, const json& a, const std::vector<Tensor>& in) {
  namespace nn = sy::nn;
  if (op != "conv" && op != "conv_transpose" && op.find("pool") == std::string::npos) return {};
  const int n = a["n"];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor{};
  if (op == "conv") {
    nn::ConvPadding padding = a.contains("padding") && a["padding"].is_string()
                                  ? nn::ConvPadding(a["padding"].get<std::string>())
                                  : nn::ConvPadding(ints_or(a, "padding", 0).values);
    auto stride = ints_or(a, "stride", 1), dilation = ints_or(a, "dilation", 1);
    int64_t groups = value_or<int64_t>(a, "groups", 1);
    if (n == 1) return nn::conv1d(in[0], in[1], bias, stride, padding, dilation, groups);
    if (n == 2) return nn::conv2d(in[0], in[1], bias, stride, padding, dilation, groups);
    return nn::conv3d(in[0], in[1], bias, stride, padding, dilation, groups);
  }
  if (op == "conv_transpose") {
    auto stride = ints_or(a, "stride", 1), padding = ints_or(a, "padding", 0);
    auto output_padding = ints_or(a, "output_padding", 0), dilation = ints_or(a, "dilation", 1);
    int64_t groups = value_or<int64_t>(a, "groups", 1);
    if (n == 1) return nn::conv_transpose1d(in[0], in[1], bias, stride, padding, output_padding, groups, dilation);
    if (n == 2) return nn::conv_transpose2d(in[0], in[1], bias, stride, padding, output_padding, groups, dilation);
    return nn::conv_transpose3d(in[0], in[1], bias, stride, padding, output_padding, groups, dilation);
  }
  const auto kernel = ints_or(a, "kernel_size", {}), stride = ints_or(a, "stride", {});
  const auto padding = ints_or(a, "padding", 0), dilation = ints_or(a, "dilation", 1);
  const bool ceil_mode = value_or(a, "ceil_mode", false);
  if (op == "max_pool" || op == "max_pool_indices") {
    if (op == "max_pool") {
      if (n == 1) return nn::max_pool1d(in[0], kernel, stride, padding, dilation, ceil_mode);
      if (n == 2) return nn::max_pool2d(in[0], kernel, stride, padding, dilation, ceil_mode);
      return nn::max_pool3d(in[0], kernel, stride, padding, dilation, ceil_mode);
    }
    if (n == 1) return nn::max_pool1d_with_indices(in[0], kernel, stride, padding, dilation, ceil_mode).second;
    if (n == 2) return nn::max_pool2d_with_indices(in[0], kernel, stride, padding, dilation, ceil_mode).second;
    return nn::max_pool3d_with_indices(in[0], kernel, stride, padding, dilation, ceil_mode).second;
  }
  if (op == "avg_pool") {
    const bool include = value_or(a, "count_include_pad", true);
    std::optional<int64_t> divisor;
    if (a.contains("divisor_override")) divisor = a["divisor_override"].get<int64_t>();
    if (n == 1) return nn::avg_pool1d(in[0], kernel, stride, padding, ceil_mode, include);
    if (n == 2) return nn::avg_pool2d(in[0], kernel, stride, padding, ceil_mode, include, divisor);
    return nn::avg_pool3d(in[0], kernel, stride, padding, ceil_mode, include, divisor);
  }
  const auto size = ints_or(a, "output_size", {});
  if (op == "adaptive_avg_pool") {
    if (n == 1) return nn::adaptive_avg_pool1d(in[0], size);
    if (n == 2) return nn::adaptive_avg_pool2d(in[0], size);
    return nn::adaptive_avg_pool3d(in[0], size);
  }
  if (op == "adaptive_max_pool")
    return n == 1 ? nn::adaptive_max_pool1d(in[0], size) : nn::adaptive_max_pool2d(in[0], size);
  if (op == "adaptive_max_pool_indices")
    return n == 1 ? nn::adaptive_max_pool1d_with_indices(in[0], size).second
                  : nn::adaptive_max_pool2d_with_indices(in[0], size).second;
  return {};
}

/// The client call a case names.
Tensor build(const Device& d, const json& c) {
  const std::string op = c["op"];
  const json& a = c["args"];
  std::vector<Tensor> in;
  for (const auto& t : c["inputs"]) in.push_back(d.from_data(tensor_of(t)));
  if (op == "unary") return in[0].unary(kind_named<sy::UnaryKind>(a["kind"], sy::to_string, sy::unary_kind_count));
  if (op == "clamp") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return in[0].clamp(a["lo"].is_null() ? nan : a["lo"].get<double>(),
                       a["hi"].is_null() ? nan : a["hi"].get<double>());
  }
  if (op == "binary")
    return in[0].binary(kind_named<sy::BinaryKind>(a["kind"], sy::to_string, sy::binary_kind_count), in[1]);
  if (op == "scalar")
    return in[0].binary(kind_named<sy::BinaryKind>(a["kind"], sy::to_string, sy::binary_kind_count),
                        scalar_of(a["value"], a["scalar"]), a["first"].get<bool>());
  if (op == "reduce") {
    auto k = kind_named<sy::ReduceKind>(a["kind"], sy::to_string, 11);
    auto axes = ints(a["axes"]);
    bool keep = a["keepdim"];
    int64_t corr = a["correction"];
    switch (k) {
      case sy::ReduceKind::sum:
        return in[0].sum(axes, keep);
      case sy::ReduceKind::mean:
        return in[0].mean(axes, keep);
      case sy::ReduceKind::prod:
        return in[0].prod(axes, keep);
      case sy::ReduceKind::max:
        return in[0].max(axes, keep);
      case sy::ReduceKind::min:
        return in[0].min(axes, keep);
      case sy::ReduceKind::var:
        return in[0].var(axes, corr, keep);
      case sy::ReduceKind::std:
        return in[0].std(axes, corr, keep);
      case sy::ReduceKind::any:
        return in[0].any(axes, keep);
      case sy::ReduceKind::all:
        return in[0].all(axes, keep);
      default:
        break;
    }
  }
  if (op == "argmax" || op == "argmin") {
    std::optional<int64_t> axis;
    if (!a["axis"].is_null()) axis = a["axis"].get<int64_t>();
    return op == "argmax" ? in[0].argmax(axis, a["keepdim"]) : in[0].argmin(axis, a["keepdim"]);
  }
  if (op == "softmax") return in[0].softmax(a["axis"]);
  if (op == "log_softmax") return in[0].log_softmax(a["axis"]);
  if (op == "matmul") return in[0].matmul(in[1]);
  if (op == "linear") return in.size() == 3 ? in[0].linear(in[1], in[2]) : in[0].linear(in[1]);
  if (op == "addmm")
    return in[0].addmm(in[1], in[2], scalar_of(a["beta"], a["beta_kind"]), scalar_of(a["alpha"], a["alpha_kind"]));
  if (op == "cast") return in[0].cast(dtype_of(a["dtype"]));
  if (op == "reshape") return in[0].reshape(sy::Shape(ints(a["shape"])));
  if (op == "permute") return in[0].permute(ints(a["axes"]));
  if (op == "transpose") return in[0].transpose(a["a"], a["b"]);
  if (op == "flip") return in[0].flip(ints(a["axes"]));
  if (op == "expand") return in[0].expand(sy::Shape(ints(a["shape"])));
  if (op == "squeeze") {
    if (a["axis"].is_null()) return in[0].squeeze();
    return in[0].squeeze(a["axis"].get<int64_t>());
  }
  if (op == "unsqueeze") return in[0].unsqueeze(a["axis"]);
  if (op == "slice") return in[0].slice(slices_of(a["slices"]));
  if (op == "slice_assign") return in[0].slice_assign(slices_of(a["slices"]), in[1]);
  if (op == "cat") return sy::cat(in, a["axis"]);
  if (op == "stack") return sy::stack(in, a["axis"]);
  if (op == "pad") return in[0].pad(ints(a["before"]), ints(a["after"]), a["value"]);
  if (op == "gather") return in[0].gather(a["axis"], in[1]);
  if (op == "index_select") return in[0].index_select(a["axis"], in[1]);
  if (op == "scatter_add") return in[0].scatter_add(a["axis"], in[1], in[2]);
  if (op == "where") return sy::where(in[0], in[1], in[2]);
  if (op == "masked_fill") return in[0].masked_fill(in[1], scalar_of(a["value"], a["scalar"]));
  if (op == "tril") return in[0].tril(a["diagonal"]);
  if (op == "triu") return in[0].triu(a["diagonal"]);
  if (op == "repeat") return in[0].repeat(ints(a["repeats"]));
  if (op == "tile") return in[0].tile(ints(a["reps"]));
  if (op == "roll") return in[0].roll(ints(a["shifts"]), ints(a["dims"]));
  if (op == "pad_mode") return sy::nn::pad(in[0], ints(a["pad"]), a["mode"].get<std::string>());
  if (op == "interpolate") {
    std::optional<bool> corners;
    if (!a["align_corners"].is_null()) corners = a["align_corners"].get<bool>();
    return sy::nn::interpolate(in[0], ints(a["size"]), a["scale_factor"].get<std::vector<double>>(),
                               a["mode"].get<std::string>(), corners);
  }
  // Issue 18, part B: optional operands follow the required ones in order.
  auto at = [&](size_t i) { return i < in.size() ? in[i] : Tensor{}; };
  if (op == "layer_norm") return sy::nn::layer_norm(in[0], ints(a["shape"]), at(1), at(2), a["eps"]);
  if (op == "group_norm") return sy::nn::group_norm(in[0], a["groups"], at(1), at(2), a["eps"]);
  if (op == "batch_norm") return sy::nn::batch_norm(in[0], in[1], in[2], at(3), at(4), false, 0.1, a["eps"]);
  if (op == "rms_norm") {
    std::optional<double> eps;
    if (!a["eps"].is_null()) eps = a["eps"].get<double>();
    return sy::nn::rms_norm(in[0], ints(a["shape"]), at(1), eps);
  }
  if (op == "sdpa") {
    std::optional<double> scale;
    if (!a["scale"].is_null()) scale = a["scale"].get<double>();
    return sy::nn::scaled_dot_product_attention(in[0], in[1], in[2], at(3), 0, a["causal"], scale);
  }
  if (op == "cumsum" || op == "cumprod") {
    std::optional<DType> t;
    if (!a["dtype"].is_null()) t = dtype_of(a["dtype"]);
    return op == "cumsum" ? in[0].cumsum(a["axis"], t) : in[0].cumprod(a["axis"], t);
  }
  if (op == "sort") {
    auto r = in[0].sort(a["axis"], a["descending"], true);
    return a["part"] == "values" ? r.values : r.indices;
  }
  if (op == "argsort") return in[0].argsort(a["axis"], a["descending"], true);
  if (op == "topk") {
    auto r = in[0].topk(a["k"], a["axis"], a["largest"]);
    return a["part"] == "values" ? r.values : r.indices;
  }
  if (op == "scatter") return in[0].scatter(a["axis"], in[1], in[2]);
  if (op == "scatter_reduce") return in[0].scatter_reduce(a["axis"], in[1], in[2], a["reduce"].get<std::string>());
  if (op == "one_hot") return sy::nn::one_hot(in[0], a["num_classes"]);
  if (op == "embedding") {
    std::optional<int64_t> pad;
    if (!a["padding_idx"].is_null()) pad = a["padding_idx"].get<int64_t>();
    return sy::nn::embedding(in[0], in[1], pad);
  }
  if (op == "full") return d.full(shape_of(a["shape"]), a["value"], dtype_of(a["dtype"]));
  if (op == "eye") return d.eye(a["n"], a["m"], dtype_of(a["dtype"]));
  if (op == "arange") return d.arange(a["start"], a["end"], a["step"], dtype_of(a["dtype"]));
  if (auto t = build_nn(op, a, in); t.defined()) return t;
  throw std::runtime_error("unknown op " + op);
}

json load_cases() {
  // SWITCHYARD_PYTORCH_CASES in the environment wins over the build tree's
  // path: the GPU check runs this binary from a bundle on another machine.
  const char* env = std::getenv("SWITCHYARD_PYTORCH_CASES");
  const std::string path = env && *env ? env : SWITCHYARD_PYTORCH_CASES;
  std::ifstream f(path);
  INFO("PyTorch cases file: " << path);
  REQUIRE(f.good());
  return json::parse(f);
}

}  // namespace

TEST_CASE("every op matches PyTorch 1.13 on every device with fusion on and off", "[ops][pytorch]") {
  const json all = load_cases();
  const auto& cases = all["cases"];
  REQUIRE(cases.size() > 1000);
  size_t failed = 0;
  for (const auto& d : devices_fused_and_unfused()) {
    size_t skipped = 0;
    std::map<std::string, size_t> skipped_ops;  // op -> cases, for the summary line
    std::string reason;                         // the first refusal, as the device worded it
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      std::string label = sytest::label(d) + " case " + std::to_string(i) + ": " + c["op"].get<std::string>() + " " +
                          c["args"].dump() + " on";
      for (const auto& t : c["inputs"]) label += " " + t["dtype"].get<std::string>() + t["shape"].dump();
      if (c.value("emulated", false)) label += " (emulated: PyTorch's f32 result rounded once)";
      std::string problem;
      try {
        auto got = build(d, c).read().get();
        if (c.contains("error")) {
          problem = "PyTorch fails (" + c["error"].get<std::string>() + ") but we gave " + got.shape.to_string() + " " +
                    std::string(sy::name_of(got.dtype));
        } else {
          auto want = tensor_of(c["out"]);
          // "exact": the host backends give PyTorch's own values (its
          // rounding order reproduced); a GPU's kernels may fuse otherwise.
          const bool exact = c.value("exact", false) && (d.kind() == "cpu" || d.kind() == "reference");
          problem = compare(got, want, exact ? Tol{} : tolerance(c, want.dtype));
        }
      } catch (const sy::Error& e) {
        if (!c.contains("error")) {
          // A device without f16/bf16/i8/i16 (none built in today) skips the cases
          // that use them; a refusal of any other case is a failure.
          if (refuses_dtype(d, e) && uses_narrow(c)) {
            ++skipped;
            ++skipped_ops[c["op"].get<std::string>()];
            if (reason.empty()) reason = e.what();
            continue;
          }
          problem = std::string("we fail where PyTorch succeeds: ") + e.what();
        }
      }
      if (!problem.empty()) {
        ++failed;
        UNSCOPED_INFO(label << ": " << problem);
      }
    }
    if (skipped > 0) {
      std::string ops;
      for (const auto& [op, n] : skipped_ops) ops += (ops.empty() ? "" : ", ") + op + " " + std::to_string(n);
      WARN(sytest::label(d) << ": skipped " << skipped << " of " << cases.size()
                            << " PyTorch cases that use f16/bf16/i8/i16, which it does not support (" << ops
                            << "); first refusal: " << reason);
    }
  }
  CHECK(failed == 0);
}
