// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/operation_ir.hpp"

namespace switchyard {

const char* to_string(ReduceKind k) noexcept {
  static constexpr const char* names[] = {"sum",    "mean", "prod", "max", "min", "argmax",
                                          "argmin", "var",  "std",  "any", "all"};
  auto i = static_cast<size_t>(k);
  return i < std::size(names) ? names[i] : "reduce?";
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
  std::string operator()(const IndexOp& x) const {
    static constexpr const char* n[] = {"gather", "scatter_add", "index_select"};
    return n[static_cast<int>(x.kind) % 3];
  }
  std::string operator()(const WhereOp&) const { return "where"; }
  std::string operator()(const DropOp&) const { return "drop"; }
  std::string operator()(const SeedOp&) const { return "seed"; }
};
}  // namespace

std::string OperationIr::name() const { return std::visit(Namer{}, op); }

}  // namespace switchyard
