// SPDX-License-Identifier: Apache-2.0
#pragma once

// The ONNX loader: a client of the public API (Runtime, Device, Tensor,
// Future), nothing below it. Protobuf and ONNX types stay in the .cpp files.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "switchyard/device.hpp"
#include "switchyard/future.hpp"
#include "switchyard/messages/std_memory.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::onnx {

/// What kind of value a graph input or output is: a tensor, an ONNX
/// sequence of tensors, or an ONNX optional of either.
enum class ValueKind { tensor, sequence, optional_tensor, optional_sequence };

/// A graph input or output as the model declares it.
struct ValueInfo {
  std::string name;
  /// Element type (the model's type mapped to Switchyard's); for a sequence
  /// or an optional, that of the tensors it holds.
  DType dtype = DType::f32;
  /// Extents, outermost first; -1 for a dynamic axis (batch, sequence).
  /// For a sequence, each element's (often unknown: empty).
  std::vector<int64_t> dims;
  /// Whether the model declares the shape: then dims.size() is the rank
  /// (0 for a scalar) and a run checks it; otherwise dims is empty and any
  /// rank is taken.
  bool has_shape = false;
  /// Names of the dynamic axes, where the model gives them ("" otherwise).
  std::vector<std::string> dim_names;
  /// A tensor unless the model declares a sequence or an optional.
  ValueKind kind = ValueKind::tensor;
  /// For an integer input that a Gather reads as indices into a weight (an
  /// embedding lookup: the data is an initializer), the extent of the axis
  /// it indexes: valid values lie in [-index_extent, index_extent), and a
  /// run on host data checks them at the call (the smallest such extent
  /// where several Gathers read the input). -1 otherwise.
  int64_t index_extent = -1;
  /// An initializer that is also a graph input (older exporters' and
  /// keep_initializers_as_inputs' way): a run may leave it out, and its
  /// stored value is used, or give its own value of any extent.
  bool has_default = false;
};

/// Named tensors, the inputs or outputs of one run.
using TensorMap = std::map<std::string, Tensor>;
/// Named host data, the inputs or outputs of one run.
using DataMap = std::map<std::string, TensorData>;

/// Host data of any kind of graph input or output: a tensor, a sequence of
/// tensors (ONNX sequence, possibly empty) or an empty optional. An optional
/// that holds a value is given (and returned) as that tensor or sequence.
class HostValue {
 public:
  /// An empty optional (as none()).
  HostValue() = default;
  /// A tensor (implicit, so a TensorData stands wherever a HostValue does).
  HostValue(TensorData tensor);  // NOLINT(google-explicit-constructor)
  /// An ONNX sequence of `items`, in order.
  [[nodiscard]] static HostValue sequence(std::vector<TensorData> items);
  /// An empty ONNX optional.
  [[nodiscard]] static HostValue none();

  [[nodiscard]] bool is_tensor() const { return kind_ == Kind::tensor; }
  [[nodiscard]] bool is_sequence() const { return kind_ == Kind::sequence; }
  [[nodiscard]] bool is_none() const { return kind_ == Kind::none; }
  /// The tensor; throws Error(invalid_argument) for a sequence or none.
  [[nodiscard]] const TensorData& tensor() const;
  /// The sequence's tensors; throws Error(invalid_argument) otherwise.
  [[nodiscard]] const std::vector<TensorData>& items() const;

 private:
  enum class Kind { tensor, sequence, none };
  Kind kind_ = Kind::none;
  std::vector<TensorData> items_;  // one for a tensor
};

/// Named host values of any kind, the inputs or outputs of one run.
using HostValueMap = std::map<std::string, HostValue>;

/// A loaded ONNX model, bound to one device: its initializers live there and
/// its ops run there. Cheap to copy (copies share the model); every member is
/// safe to call from any number of threads at once.
///
/// Loading checks everything it can: the opset (7-17 of the default domain),
/// every node's op, attributes and the dtypes of every value ONNX's shape
/// inference types; a model the op set cannot run fails at load with
/// Error(unsupported) naming the node, its op and what is missing.
///
/// Shape arithmetic (Shape, Gather, Concat, Unsqueeze, ... on shapes and
/// constants) is evaluated on the host once per input signature (shapes and
/// dtypes, plus the contents of any input the model reads as a shape) and the
/// result cached, so later runs of that signature submit only tensor work.
class Model {
 public:
  /// Loads `path` (external data files are read relative to its folder) and
  /// uploads the initializers to `device`. Throws Error: io/parse problems
  /// (invalid_argument), anything the op set cannot run (unsupported).
  [[nodiscard]] static Model load(const std::string& path, const Device& device);
  /// As load(), from the bytes of a .onnx file; external data is read
  /// relative to `base_dir`.
  [[nodiscard]] static Model load_bytes(const std::string& bytes, const Device& device,
                                        const std::string& base_dir = ".");

  /// One stage of a pipeline: the nodes from `first_node` (in the model's
  /// order) up to the next stage's first node run on `device`.
  struct Stage {
    Device device;
    size_t first_node = 0;
  };
  /// Loads a model split by node range over devices (the first stage must
  /// start at node 0; stages in increasing order). A value crossing a stage
  /// boundary is bridged with Tensor::to(); each initializer is uploaded to
  /// the device of the first node that uses it.
  [[nodiscard]] static Model load(const std::string& path, const std::vector<Stage>& stages);
  /// As load(path, stages), from bytes.
  [[nodiscard]] static Model load_bytes(const std::string& bytes, const std::vector<Stage>& stages,
                                        const std::string& base_dir = ".");
  /// How many nodes the graph has (for choosing stage boundaries).
  [[nodiscard]] size_t num_nodes() const;

  /// The inputs a run takes: first those it must give, then initializers
  /// that are also graph inputs (has_default: a run may override them).
  [[nodiscard]] const std::vector<ValueInfo>& inputs() const;
  /// The outputs a run returns.
  [[nodiscard]] const std::vector<ValueInfo>& outputs() const;
  /// The opset of the default domain the model was exported with.
  [[nodiscard]] int64_t opset() const;
  /// The device the model runs on (a pipeline's first stage: where run()
  /// puts its inputs).
  [[nodiscard]] Device device() const;
  /// How many input signatures have a cached plan (for tests and stats).
  [[nodiscard]] size_t cached_plans() const;

  /// Runs the model on tensors (on any device; others are moved with to()).
  /// Returns at once with the output tensors (their read() is the future);
  /// a missing, unknown, wrongly typed or wrongly shaped input throws Error
  /// naming the input. An input the model reads as a shape is read back
  /// (this call then blocks for it).
  [[nodiscard]] TensorMap run(const TensorMap& inputs) const;
  /// Runs the model on host data (uploaded to the model's device). Besides
  /// dtype and shape, an input with an index_extent is checked value by
  /// value: one out of range throws Error(index_out_of_range) naming the
  /// input, the value, where it is and the Gather node.
  [[nodiscard]] TensorMap run(const DataMap& inputs) const;
  /// run(), then the contents of every output: a future of the named data
  /// (a failing op fails it).
  [[nodiscard]] Future<DataMap> infer(const DataMap& inputs) const;
  /// As infer(), for models whose inputs or outputs are sequences or
  /// optionals (any model, in fact): each input a tensor, a sequence or
  /// HostValue::none() as the model declares it, checked by name; each
  /// output likewise (an empty optional output comes back as none()). The
  /// tensor-only overloads above refuse a model with a sequence output
  /// (Error(invalid_argument) naming it).
  [[nodiscard]] Future<HostValueMap> infer_values(const HostValueMap& inputs) const;

 private:
  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// The ONNX op types the loader maps: the default domain's, sorted, then
/// the optimizer ops as "ai.onnx.preview.training.Adagrad" and so on.
[[nodiscard]] std::vector<std::string> supported_ops();

/// Reads a serialized onnx.TensorProto (as the backend tests' input_N.pb)
/// into host data; throws Error(unsupported) for dtypes Switchyard lacks.
[[nodiscard]] TensorData read_tensor_proto(const std::string& path);
/// The same, for a value the model declares as dtype `as`. A file holding
/// UINT16 read as bf16 or f16 gives the 16-bit patterns as that type: the
/// backend tests store bfloat16 data that way (NumPy has no bfloat16).
/// Any other dtype than `as` in the file throws Error(invalid_argument)
/// naming both.
[[nodiscard]] TensorData read_tensor_proto(const std::string& path, DType as);
/// Reads a serialized onnx.TensorProto, SequenceProto or OptionalProto (as
/// `kind` says: the backend tests' input_N.pb of a sequence or optional)
/// into a host value.
[[nodiscard]] HostValue read_value_proto(const std::string& path, ValueKind kind);

}  // namespace switchyard::onnx
