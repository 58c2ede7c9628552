// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/operation_ir.hpp"

namespace switchyard {

const char* to_string(ReduceKind k) noexcept {
  static constexpr const char* names[] = {"sum",    "mean", "prod", "max", "min", "argmax",
                                          "argmin", "var",  "std",  "any", "all"};
  auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "reduce?";
}

const char* to_string(PoolKind k) noexcept {
  static constexpr const char* names[] = {"max_pool",          "max_pool_indices",  "avg_pool",
                                          "adaptive_avg_pool", "adaptive_max_pool", "adaptive_max_pool_indices"};
  auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "pool?";
}

const char* to_string(IndexKind k) noexcept {
  static constexpr const char* names[] = {"gather",       "scatter_add",  "index_select", "scatter",
                                          "scatter_prod", "scatter_amax", "scatter_amin"};
  auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "index?";
}

const char* to_string(NormKind k) noexcept {
  static constexpr const char* names[] = {"batch_norm", "layer_norm", "group_norm", "rms_norm"};
  auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "norm?";
}

namespace {
struct Namer {
  std::string operator()(const FromDataOp&) const { return "from_data"; }
  std::string operator()(const FillOp& x) const {
    static constexpr const char* n[] = {"full", "arange", "eye"};
    return n[static_cast<int>(x.kind) % 3];
  }
  std::string operator()(const RandomOp& x) const {
    static constexpr const char* n[] = {"uniform", "normal", "bernoulli"};
    return n[static_cast<int>(x.kind) % 3];
  }
  std::string operator()(const UnaryOp& x) const { return to_string(x.kind); }
  std::string operator()(const BinaryOp& x) const { return to_string(x.kind); }
  std::string operator()(const ScalarOp& x) const { return std::string(to_string(x.kind)) + "_scalar"; }
  std::string operator()(const ReduceOp& x) const { return to_string(x.kind); }
  std::string operator()(const SoftmaxOp& x) const { return x.log ? "log_softmax" : "softmax"; }
  std::string operator()(const MatmulOp& x) const { return x.has_bias() ? "linear" : "matmul"; }
  std::string operator()(const CastOp&) const { return "cast"; }
  std::string operator()(const ViewOp&) const { return "view"; }
  std::string operator()(const SliceAssignOp&) const { return "slice_assign"; }
  std::string operator()(const CatOp&) const { return "cat"; }
  std::string operator()(const PadOp&) const { return "pad"; }
  std::string operator()(const IndexOp& x) const { return to_string(x.kind); }
  std::string operator()(const WhereOp&) const { return "where"; }
  std::string operator()(const DropOp&) const { return "drop"; }
  std::string operator()(const SeedOp&) const { return "seed"; }
  std::string operator()(const ConvOp& x) const {
    auto n = x.spatial();
    return std::string(x.transposed ? "conv_transpose" : "conv") + (n >= 1 && n <= 3 ? std::to_string(n) + "d" : "");
  }
  std::string operator()(const PoolOp& x) const {
    auto n = x.spatial();
    // "max_pool2d", "max_pool2d_indices": PyTorch's names with the axes.
    std::string name = to_string(x.kind);
    const bool indices = name.ends_with("_indices");
    if (indices) name.resize(name.size() - 8);
    if (n >= 1 && n <= 3) name += std::to_string(n) + "d";
    return indices ? name + "_indices" : name;
  }
  std::string operator()(const NormOp& x) const { return to_string(x.kind); }
  std::string operator()(const AttentionOp&) const { return "scaled_dot_product_attention"; }
  std::string operator()(const ScanOp& x) const { return x.kind == ScanKind::cumprod ? "cumprod" : "cumsum"; }
  std::string operator()(const SortOp& x) const { return x.kind == SortKind::topk ? "topk" : "argsort"; }
};
}  // namespace

std::string OperationIr::name() const { return std::visit(Namer{}, op); }

}  // namespace switchyard
