// SPDX-License-Identifier: Apache-2.0
#pragma once

// Internal to the ONNX loader: protobuf types, the op table, host values.

#include <atomic>
#include <boost/container/small_vector.hpp>
#include <functional>
#include <memory>
#include <onnx/onnx_pb.h>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "switchyard/onnx.hpp"

namespace switchyard::onnx::detail {

/// A value of the graph during a run: a device tensor, a host constant
/// (known without the device: initializers, folded shape arithmetic), or
/// both (a host constant already uploaded); or an ONNX sequence of such
/// tensor values, or an empty ONNX optional (`none`). An optional holding
/// a value is that value itself.
struct Value {
  Tensor dev;
  std::optional<TensorData> host;
  /// A device value's contents read back (or a graph input's host data),
  /// for ops that need a device value as a shape; not a constant.
  mutable std::optional<TensorData> readback;
  /// Set on a graph input's value (shared by copies, e.g. through
  /// Identity) when an op read it on the host: the plan then depends on the
  /// input's contents. Graph inputs are never folded on the host.
  std::shared_ptr<std::atomic<bool>> input_read;
  /// (Kind: a tensor, a sequence, or an empty optional.)
  enum class Kind : uint8_t { tensor, sequence, none };
  Kind kind = Kind::tensor;
  /// A sequence's elements (tensor values), in order.
  std::vector<Value> items;
  /// A sequence's element type where known (SequenceEmpty's dtype, the
  /// declared type, its first element's): inserting another type fails.
  std::optional<DType> elem_dtype;
  [[nodiscard]] bool present() const { return kind != Kind::tensor || dev.defined() || host.has_value(); }
  [[nodiscard]] bool is_tensor() const { return kind == Kind::tensor; }
  /// "a tensor", "a sequence", "an empty optional" (for errors).
  [[nodiscard]] const char* kind_name() const {
    return kind == Kind::tensor ? "a tensor" : kind == Kind::sequence ? "a sequence" : "an empty optional";
  }
  [[nodiscard]] static Value sequence(std::vector<Value> items, std::optional<DType> elem) {
    Value v;
    v.kind = Kind::sequence;
    v.items = std::move(items);
    v.elem_dtype = elem;
    return v;
  }
  [[nodiscard]] static Value none() {
    Value v;
    v.kind = Kind::none;
    return v;
  }
  [[nodiscard]] const Shape& shape() const { return host ? host->shape : dev.shape(); }
  [[nodiscard]] DType dtype() const { return host ? host->dtype : dev.dtype(); }
};

/// The ONNX element type `t` as a Switchyard dtype, or nullopt.
[[nodiscard]] std::optional<DType> to_dtype(int32_t onnx_type);
/// The ONNX name of element type `t` ("FLOAT16").
[[nodiscard]] std::string onnx_type_name(int32_t onnx_type);
/// onnx.TensorProto -> host data; external data is read relative to base_dir.
[[nodiscard]] TensorData to_data(const ::onnx::TensorProto& t, const std::string& base_dir);

/// Runs one of the node's subgraphs (an If branch, a Loop or Scan body,
/// named by its attribute) with its formal inputs bound to `inputs`;
/// returns its outputs. The subgraph sees the outer graph's values.
using SubgraphRunner = std::function<std::vector<Value>(std::string_view attribute, std::vector<Value> inputs)>;

/// What one node's implementation sees: its attributes, its inputs (absent
/// optional inputs are nullptr) and helpers that upload host values.
class Ctx {
 public:
  /// `computed_read` (optional) is set when an op reads a computed device
  /// value on the host: a plan cannot cache what follows from it.
  /// `index`, the node's position in its graph, names an unnamed node in
  /// errors as the loader does ('#index').
  /// `device` and `inputs` are the caller's, and outlive the Ctx.
  Ctx(const ::onnx::NodeProto& node, int64_t opset, const Device& device, std::span<Value* const> inputs,
      bool* computed_read = nullptr, const SubgraphRunner* subgraphs = nullptr, int64_t index = -1)
      : node_(node),
        opset_(opset),
        device_(device),
        inputs_(inputs),
        computed_read_(computed_read),
        subgraphs_(subgraphs),
        index_(index) {}

  [[nodiscard]] const ::onnx::NodeProto& node() const { return node_; }
  [[nodiscard]] int64_t opset() const { return opset_; }
  [[nodiscard]] const Device& device() const { return device_; }
  [[nodiscard]] size_t num_inputs() const { return inputs_.size(); }
  [[nodiscard]] bool has(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  /// Input i, which must be a tensor (a sequence or an empty optional
  /// fails naming the node and the input).
  [[nodiscard]] Value& in(size_t i) const;
  /// Input i of any kind (sequence and optional ops, Identity, control flow).
  [[nodiscard]] Value& value(size_t i) const;
  /// Input i on the device (a host constant is uploaded once and kept).
  [[nodiscard]] Tensor dev(size_t i) const;
  /// Whether input i is known on the host.
  [[nodiscard]] bool is_host(size_t i) const { return has(i) && inputs_[i]->host.has_value(); }
  /// Input i's host value; the op needs it there (a shape, axes, pads): a
  /// value only the device holds is read back (blocking).
  [[nodiscard]] const TensorData& host(size_t i) const;
  /// Any value's contents on the host, read back as host(i) does (e.g. a
  /// subgraph's output: a Loop's condition).
  [[nodiscard]] const TensorData& read(const Value& v) const;
  /// Input i's host value as integers (axes, shapes, pads).
  [[nodiscard]] std::vector<int64_t> ints(size_t i) const;
  /// Whether every present input is a host constant.
  [[nodiscard]] bool all_host() const;

  [[nodiscard]] const ::onnx::AttributeProto* attr(std::string_view name) const;
  [[nodiscard]] int64_t attr_i(std::string_view name, int64_t fallback) const;
  [[nodiscard]] float attr_f(std::string_view name, float fallback) const;
  [[nodiscard]] std::string attr_s(std::string_view name, const std::string& fallback) const;
  [[nodiscard]] std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;

  /// Runs the subgraph in `attribute` (see SubgraphRunner).
  [[nodiscard]] std::vector<Value> run_subgraph(std::string_view attribute, std::vector<Value> inputs) const;

  /// Throws Error naming this node.
  [[noreturn]] void fail(Errc code, const std::string& what) const;

 private:
  const ::onnx::NodeProto& node_;
  int64_t opset_;
  const Device& device_;
  std::span<Value* const> inputs_;
  bool* computed_read_;
  const SubgraphRunner* subgraphs_;
  int64_t index_;
};

/// A node's outputs: in place for the usual one or two (a vector's block
/// per node was an allocation per op of every run).
using Outs = boost::container::small_vector<Value, 2>;

/// One ONNX op: the attributes it understands, a load-time check (returns
/// what is missing, or "" when the node is runnable), and the
/// implementation, which returns the node's outputs.
struct OpSpec {
  std::vector<std::string> attributes;
  /// (optional) "" when supported; otherwise what is missing.
  std::function<std::string(const ::onnx::NodeProto&, int64_t opset)> check;
  std::function<Outs(Ctx&)> run;
};

/// The op table, by ONNX op type (default domain).
[[nodiscard]] const std::map<std::string, OpSpec, std::less<>>& op_table();

/// The domain of ONNX's optimizer ops, and its ops (Adagrad, Adam,
/// Momentum; training_ops.cpp) by op type.
inline constexpr const char* training_domain = "ai.onnx.preview.training";
[[nodiscard]] const std::map<std::string, OpSpec, std::less<>>& training_op_table();

/// The domain of the nodes the loader's fusion writes (fusion.hpp; a
/// model's own nodes of it are refused), and its ops by op type.
inline constexpr const char* fused_domain = "ai.switchyard.fused";
[[nodiscard]] const std::map<std::string, OpSpec, std::less<>>& fused_op_table();

}  // namespace switchyard::onnx::detail
