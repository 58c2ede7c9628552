// SPDX-License-Identifier: Apache-2.0
// Loading (parse, opset, op/attribute/dtype checks, initializer upload) and
// running (per-signature plans that keep host-folded shape arithmetic).

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <set>
#include <sstream>
#include <unordered_map>

#include "fusion.hpp"
#include "onnx_internal.hpp"
#include "switchyard/recording.hpp"

namespace switchyard::onnx {

using detail::Value;

namespace {

std::string node_label(const ::onnx::NodeProto& node, size_t index) {
  std::string name = node.name().empty() ? "#" + std::to_string(index) : node.name();
  return "node '" + name + "' (" + node.op_type() + ")";
}

// ONNX's own shape inference divides by these attributes (convPoolShape-
// Inference by strides, DepthToSpace and SpaceToDepth by blocksize): a 0
// there killed the process with SIGFPE inside libonnx. Checked first, in
// every graph and subgraph, with the node named.
void check_positive_attributes(const ::onnx::GraphProto& graph) {
  for (int n = 0; n < graph.node_size(); ++n) {
    const auto& node = graph.node(n);
    for (const auto& a : node.attribute()) {
      for (const auto& g : a.graphs()) check_positive_attributes(g);
      if (a.has_g()) check_positive_attributes(a.g());
      if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
      const std::string& name = a.name();
      if (name != "strides" && name != "dilations" && name != "kernel_shape" && name != "blocksize") continue;
      std::vector<int64_t> values(a.ints().begin(), a.ints().end());
      if (name == "blocksize") values = {a.i()};
      if (std::all_of(values.begin(), values.end(), [](int64_t v) { return v >= 1; })) continue;
      std::string list;
      for (auto v : values) list += (list.empty() ? "" : ", ") + std::to_string(v);
      throw Error(Errc::invalid_argument, "onnx: " + node_label(node, static_cast<size_t>(n)) + ": attribute '" + name +
                                              "' must be positive, got " +
                                              (name == "blocksize" ? list : "[" + list + "]"));
    }
  }
}

// A tensor attribute (Constant's value, ConstantOfShape's) may keep its
// bytes in an external file too. Read here, against the model's folder and
// with the initializers' checks, and held inline from then on: read when a
// node first ran, it was looked up in the process's working directory.
void inline_external_attributes(::onnx::GraphProto& graph, const std::string& base_dir) {
  auto inline_tensor = [&](::onnx::TensorProto& t) {
    if (t.data_location() != ::onnx::TensorProto::EXTERNAL) return;
    const TensorData d = detail::to_data(t, base_dir);
    t.clear_external_data();
    t.set_data_location(::onnx::TensorProto::DEFAULT);
    t.set_raw_data(d.bytes.data(), d.bytes.size());
  };
  for (int n = 0; n < graph.node_size(); ++n) {
    auto& node = *graph.mutable_node(n);
    for (auto& a : *node.mutable_attribute()) {
      for (auto& g : *a.mutable_graphs()) inline_external_attributes(g, base_dir);
      if (a.has_g()) inline_external_attributes(*a.mutable_g(), base_dir);
      try {
        if (a.has_t()) inline_tensor(*a.mutable_t());
        for (auto& t : *a.mutable_tensors()) inline_tensor(t);
      } catch (const Error& e) {
        std::string why = e.what();
        if (why.rfind("onnx: ", 0) == 0) why.erase(0, 6);
        throw Error(e.code(),
                    "onnx: " + node_label(node, static_cast<size_t>(n)) + ": attribute '" + a.name() + "': " + why);
      }
    }
  }
}

ValueInfo value_info(const ::onnx::ValueInfoProto& v, const std::string& where) {
  ValueInfo info;
  info.name = v.name();
  // optional(T), sequence(tensor) or optional(sequence(tensor)); the
  // tensor's type is what dtype and dims describe.
  const ::onnx::TypeProto* type = &v.type();
  const bool optional = type->has_optional_type();
  if (optional) type = &type->optional_type().elem_type();
  const bool sequence = type->has_sequence_type();
  if (sequence) type = &type->sequence_type().elem_type();
  if (!type->has_tensor_type())
    throw Error(Errc::unsupported, where + " '" + v.name() +
                                       "' is not a tensor, a sequence of tensors or an optional of either (maps, "
                                       "sparse tensors and nested sequences are not supported)");
  info.kind = sequence ? (optional ? ValueKind::optional_sequence : ValueKind::sequence)
                       : (optional ? ValueKind::optional_tensor : ValueKind::tensor);
  const auto& tt = type->tensor_type();
  auto dt = detail::to_dtype(tt.elem_type());
  if (!dt)
    throw Error(Errc::unsupported, where + " '" + v.name() + "' has dtype " + detail::onnx_type_name(tt.elem_type()) +
                                       ", which Switchyard lacks");
  info.dtype = *dt;
  info.has_shape = tt.has_shape();
  for (const auto& d : tt.shape().dim()) {
    info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    info.dim_names.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return info;
}

// An integer input that a Gather reads as indices into an initializer (an
// embedding lookup) gets that axis's extent: a token id out of range is then
// the caller's error at the call, naming the input, rather than a device
// failure of the whole run (or of a server's whole batch).
void mark_index_inputs(const ::onnx::GraphProto& graph, std::vector<ValueInfo>& inputs,
                       std::vector<std::string>& index_node) {
  std::unordered_map<std::string, const ::onnx::TensorProto*> weights;
  for (const auto& t : graph.initializer()) weights.emplace(t.name(), &t);
  // A weight that is also a graph input may come with another extent in a
  // run: its stored extent bounds nothing (the Gather checks at run time).
  for (const auto& v : graph.input()) weights.erase(v.name());
  index_node.assign(inputs.size(), "");
  for (size_t i = 0; i < inputs.size(); ++i) {
    ValueInfo& info = inputs[i];
    if (is_floating(info.dtype) || is_bool(info.dtype)) continue;
    for (int n = 0; n < graph.node_size(); ++n) {
      const auto& node = graph.node(n);
      if (node.op_type() != "Gather" || !node.domain().empty() || node.input_size() < 2 || node.input(1) != info.name)
        continue;
      auto w = weights.find(node.input(0));
      if (w == weights.end()) continue;
      const auto rank = static_cast<int64_t>(w->second->dims_size());
      int64_t axis = 0;
      for (const auto& a : node.attribute())
        if (a.name() == "axis") axis = a.i();
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) continue;  // the op's own check names it at run time
      const int64_t extent = w->second->dims(static_cast<int>(axis));
      if (info.index_extent >= 0 && info.index_extent <= extent) continue;
      info.index_extent = extent;
      index_node[i] =
          node_label(node, static_cast<size_t>(n)) + " (axis " + std::to_string(axis) + " of '" + node.input(0) + "')";
    }
  }
}

// Opsets 1-5: an op is taken when the version of its definition that the
// model's opset selects is the one opset 6 selects (the op did not change in
// between), so it means what the op table implements. ONNX's own schema
// registry holds the versions; no list of ours to keep in step.
std::string older_opset_check(const ::onnx::NodeProto& node, int64_t opset) {
  if (opset >= 6) return "";
  const auto* at = ::onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset));
  const auto* at6 = ::onnx::OpSchemaRegistry::Schema(node.op_type(), 6);
  if (at != nullptr && at6 != nullptr && at->since_version() == at6->since_version()) return "";
  std::string why = at6 == nullptr  ? node.op_type() + " is newer than opset 6"
                    : at == nullptr ? node.op_type() + " is newer than opset " + std::to_string(opset)
                                    : node.op_type() + " changed in opset " + std::to_string(at6->since_version());
  return "opset " + std::to_string(opset) +
         " of the default domain; supported: 7-17 (and 6, and 1-5 for ops unchanged since; " + why + ")";
}

}  // namespace

/// Names to slots of the run's value vector. A subgraph's scope sees its
/// outer scopes' names (If branches, Loop and Scan bodies read outer
/// values) and gives its own names fresh slots, so running it never
/// overwrites an outer value.
class Scope {
 public:
  explicit Scope(int* next, const Scope* outer = nullptr) : next_(next), outer_(outer) {}
  /// The slot of `name` in this scope (a new one the first time).
  int define(const std::string& name) {
    auto [it, fresh] = names_.emplace(name, 0);
    if (fresh) it->second = (*next_)++;
    return it->second;
  }
  /// Whether `name` has a slot in this scope itself.
  [[nodiscard]] bool defined_here(const std::string& name) const { return names_.count(name) != 0; }
  /// The slot `name` refers to here or in an outer scope; -1 if none.
  [[nodiscard]] int find(const std::string& name) const {
    if (auto it = names_.find(name); it != names_.end()) return it->second;
    return outer_ != nullptr ? outer_->find(name) : -1;
  }

 private:
  std::unordered_map<std::string, int> names_;
  int* next_;
  const Scope* outer_;
};

/// A graph's nodes, checked and resolved to slots: the model's graph or a
/// subgraph (whose formal inputs, outputs and initializers have slots too).
struct Graph {
  std::vector<::onnx::NodeProto> nodes;
  std::vector<const detail::OpSpec*> specs;
  std::vector<std::vector<int>> node_in, node_out;
  /// Per node, its subgraphs by attribute name.
  std::vector<std::map<std::string, std::shared_ptr<const Graph>, std::less<>>> bodies;
  std::vector<int> input_slots, output_slots;
  std::vector<std::pair<int, TensorData>> constants;  // a subgraph's initializers
};

// An initializer's host data; a dtype Switchyard lacks fails naming it.
TensorData initializer(const ::onnx::TensorProto& t, const std::string& base_dir) {
  if (!detail::to_dtype(t.data_type()))
    throw Error(Errc::unsupported, "onnx: initializer '" + t.name() + "' has dtype " +
                                       detail::onnx_type_name(t.data_type()) + ", which Switchyard lacks");
  return detail::to_data(t, base_dir);
}

// Checks a graph's nodes against the op table and resolves their names to
// slots, subgraphs (node attributes of type GRAPH) included, recursively.
/// Refuses a model's own node of the domain only the loader's fusion
/// writes (it would run as Switchyard's fused op, unchecked), in any subgraph.
void refuse_fused_domain(const ::onnx::GraphProto& graph) {
  for (int n = 0; n < graph.node_size(); ++n) {
    const auto& node = graph.node(n);
    if (node.domain() == detail::fused_domain)
      throw Error(Errc::unsupported, "onnx: " + node_label(node, static_cast<size_t>(n)) + ": domain '" +
                                         node.domain() + "' is not supported");
    for (const auto& a : node.attribute()) {
      if (a.has_g()) refuse_fused_domain(a.g());
      for (const auto& g : a.graphs()) refuse_fused_domain(g);
    }
  }
}

struct Compiler {
  int64_t opset;           // of the default domain; 0: not imported
  int64_t training_opset;  // of ai.onnx.preview.training; 0: not imported
  const std::string& base_dir;
  const std::unordered_map<std::string, int32_t>& elem_type;
  int& num_slots;
  std::vector<int>& inner_slots;

  void nodes(const ::onnx::GraphProto& graph, Graph& g, Scope& scope) {
    for (int n = 0; n < graph.node_size(); ++n) {
      const auto& node = graph.node(n);
      std::string label = "onnx: " + node_label(node, n);
      const bool training = node.domain() == detail::training_domain;
      // (A model's own nodes of the fused domain are refused at load.)
      const bool fused = node.domain() == detail::fused_domain;
      if (!node.domain().empty() && node.domain() != "ai.onnx" && !training && !fused)
        throw Error(Errc::unsupported, label + ": domain '" + node.domain() + "' is not supported");
      const int64_t node_opset = training ? training_opset : opset;
      if (node_opset == 0)
        throw Error(Errc::invalid_argument,
                    label + ": its domain '" + node.domain() + "' is not imported by the model");
      if (training && node_opset != 1)
        throw Error(Errc::unsupported, label + ": domain '" + node.domain() + "' at version " +
                                           std::to_string(node_opset) + " (supported: 1)");
      const auto& table = training ? detail::training_op_table()
                          : fused  ? detail::fused_op_table()
                                   : detail::op_table();
      auto it = table.find(node.op_type());
      if (it == table.end())
        throw Error(Errc::unsupported, label + ": op " + node.op_type() + " is not in Switchyard's op set");
      const auto& spec = it->second;
      if (std::string why = training || fused ? "" : older_opset_check(node, opset); !why.empty())
        // NOLINTNEXTLINE(performance-inefficient-string-concatenation): error path, the model does not load
        throw Error(Errc::unsupported, label + ": " + why);
      for (const auto& a : node.attribute())
        if (std::find(spec.attributes.begin(), spec.attributes.end(), a.name()) == spec.attributes.end())
          throw Error(Errc::unsupported, label + ": attribute '" + a.name() + "' is not supported");
      if (spec.check) {
        std::string missing = spec.check(node, opset);
        // NOLINTNEXTLINE(performance-inefficient-string-concatenation): error path, the model does not load
        if (!missing.empty()) throw Error(Errc::unsupported, label + ": " + missing);
      }
      // ONNX's own arity (Add with a third input ran and ignored it).
      if (const auto* schema = fused ? nullptr
                                     : ::onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(node_opset),
                                                                        training ? detail::training_domain : "")) {
        auto refuse_count = [&](const char* what, int given, int least, int most) {
          if (given >= least && given <= most) return;
          throw Error(Errc::invalid_argument,
                      label + ": " + std::to_string(given) + " " + what + ", the op takes " + std::to_string(least) +
                          (most == least                             ? ""
                           : most == std::numeric_limits<int>::max() ? " or more"
                                                                     : " to " + std::to_string(most)));
        };
        refuse_count("inputs", node.input_size(), schema->min_input(), schema->max_input());
        refuse_count("outputs", node.output_size(), schema->min_output(), schema->max_output());
        // An empty name skips an optional input only (ONNX's checker and
        // ONNX Runtime refuse the model otherwise; PyTorch 1.13 exports
        // LayerNorm without affine so).
        const auto& formal = schema->inputs();
        for (int i = 0; i < node.input_size() && i < static_cast<int>(formal.size()); ++i)
          if (node.input(i).empty() && formal[static_cast<size_t>(i)].GetOption() == ::onnx::OpSchema::Single)
            throw Error(Errc::invalid_argument, label + ": input " + std::to_string(i) + " ('" +
                                                    formal[static_cast<size_t>(i)].GetName() +
                                                    "') is required but given as empty");
        // A Constant's type is its value's: opsets before 9 listed floats
        // only, and PyTorch's exports of then held int64 shapes in them.
        if (node.op_type() != "Constant") check_types(*schema, node, label);
      }
      for (const auto& o : node.output()) {
        auto et = elem_type.find(o);
        if (et != elem_type.end() && et->second != 0 && !detail::to_dtype(et->second))
          // NOLINTNEXTLINE(performance-inefficient-string-concatenation): error path, the model does not load
          throw Error(Errc::unsupported, label + ": output '" + o + "' has dtype " +
                                             detail::onnx_type_name(et->second) + ", which Switchyard lacks");
      }
      std::vector<int> ins, outs;
      for (const auto& i : node.input()) {
        const int s = i.empty() ? -1 : scope.find(i);
        if (!i.empty() && s < 0)
          // NOLINTNEXTLINE(performance-inefficient-string-concatenation): error path, the model does not load
          throw Error(Errc::invalid_argument, label + ": input '" + i + "' is never produced (graph not sorted?)");
        ins.push_back(s);
      }
      std::map<std::string, std::shared_ptr<const Graph>, std::less<>> bodies;
      for (const auto& a : node.attribute())
        if (a.type() == ::onnx::AttributeProto::GRAPH) bodies[a.name()] = subgraph(a.g(), scope, label);
      for (const auto& o : node.output()) {
        // Each value is assigned once (ONNX graphs are in SSA form): a
        // second writer silently replaced the first.
        if (!o.empty() && scope.defined_here(o))
          // NOLINTNEXTLINE(performance-inefficient-string-concatenation): error path, the model does not load
          throw Error(Errc::invalid_argument, label + ": output '" + o + "' is already defined in this graph");
        outs.push_back(o.empty() ? -1 : scope.define(o));
      }
      g.nodes.push_back(node);
      g.specs.push_back(&spec);
      g.node_in.push_back(std::move(ins));
      g.node_out.push_back(std::move(outs));
      g.bodies.push_back(std::move(bodies));
    }
  }

  // ONNX's type constraints, on the values whose types the model declares
  // or inference found: each input and output of a type ONNX allows there,
  // and all bound to one type parameter of the same type. Without this an
  // Add of i64 and f32 ran (promoting as Switchyard's ops do) and returned
  // f32 where outputs() said i64.
  static bool is_parameter(const std::vector<::onnx::OpSchema::TypeConstraintParam>& params,
                           const ::onnx::OpSchema::FormalParameter& formal) {
    return std::any_of(params.begin(), params.end(),
                       [&](const auto& p) { return p.type_param_str == formal.GetTypeStr(); });
  }

  /// ONNX's type constraints of a node the fusion replaced (its fused node
  /// has no schema): a model that breaks them is refused as unfused.
  void check_replaced(const ::onnx::NodeProto& node, size_t index) const {
    if (const auto* schema = ::onnx::OpSchemaRegistry::Schema(node.op_type(), static_cast<int>(opset), ""))
      check_types(*schema, node, "onnx: " + node_label(node, index));
  }

  void check_types(const ::onnx::OpSchema& schema, const ::onnx::NodeProto& node, const std::string& label) const {
    std::map<std::string, std::pair<int32_t, std::string>, std::less<>> bound;  // parameter -> type, by whom
    auto check = [&](const std::string& value, const std::vector<::onnx::OpSchema::FormalParameter>& formals,
                     size_t index, const char* role) {
      if (value.empty() || formals.empty()) return;
      const auto& params = schema.typeConstraintParams();
      const bool variadic = formals.back().GetOption() == ::onnx::OpSchema::Variadic;
      if (index >= formals.size() && !variadic) return;
      const auto& formal = formals[std::min(index, formals.size() - 1)];
      if (index >= formals.size() - 1 && variadic && !formal.GetIsHomogeneous()) return;
      const auto et = elem_type.find(value);
      if (et == elem_type.end() || et->second == 0) return;
      std::string type;
      try {
        type = "tensor(" + ::onnx::Utils::DataTypeUtils::ToDataTypeString(et->second) + ")";
      } catch (const std::exception&) {
        return;  // a type number ONNX does not know: the dtype checks name it
      }
      const auto& allowed = formal.GetTypes();
      const bool takes_tensors =
          std::any_of(allowed.begin(), allowed.end(), [](const auto* t) { return t->rfind("tensor(", 0) == 0; });
      const std::string name = detail::onnx_type_name(et->second);
      if (takes_tensors && allowed.count(::onnx::Utils::DataTypeUtils::ToType(type)) == 0) {
        std::vector<std::string> names;  // sorted: the set's order is a hash's
        for (const auto* t : allowed)
          if (t->rfind("tensor(", 0) == 0) names.push_back(t->substr(7, t->size() - 8));
        std::sort(names.begin(), names.end());
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        throw Error(Errc::dtype_mismatch,
                    label + ": " + role + " '" + value + "' is " + name + ", which " +
                        (is_parameter(params, formal) ? "type " + formal.GetTypeStr() + " of " : "") + node.op_type() +
                        " does not take (it takes " + list + ")");
      }
      if (!is_parameter(params, formal)) return;
      auto [it, fresh] = bound.try_emplace(formal.GetTypeStr(), et->second, value);
      if (!fresh && it->second.first != et->second)
        throw Error(Errc::dtype_mismatch, label + ": " + role + " '" + value + "' is " + name + " where '" +
                                              it->second.second + "' made type " + formal.GetTypeStr() + " " +
                                              detail::onnx_type_name(it->second.first) + " (ONNX binds them to one)");
    };
    for (int i = 0; i < node.input_size(); ++i) check(node.input(i), schema.inputs(), static_cast<size_t>(i), "input");
    for (int i = 0; i < node.output_size(); ++i)
      check(node.output(i), schema.outputs(), static_cast<size_t>(i), "output");
  }

  std::shared_ptr<const Graph> subgraph(const ::onnx::GraphProto& graph, const Scope& outer, const std::string& label) {
    auto g = std::make_shared<Graph>();
    Scope scope(&num_slots, &outer);
    const int first = num_slots;
    for (const auto& t : graph.initializer())
      g->constants.emplace_back(scope.define(t.name()), initializer(t, base_dir));
    // Sequences and optionals pass through subgraphs (If branches, loop-
    // carried values); maps and sparse tensors have no counterpart.
    auto refuse_other = [&](const ::onnx::ValueInfoProto& v, const char* what) {
      const auto* t = &v.type();
      if (t->has_optional_type()) t = &t->optional_type().elem_type();
      if (t->has_sequence_type()) t = &t->sequence_type().elem_type();
      if (t->has_map_type() || t->has_sparse_tensor_type() || t->has_sequence_type() || t->has_optional_type())
        throw Error(Errc::unsupported, label + ": subgraph '" + graph.name() + "' " + what + " '" + v.name() +
                                           "' is a map, a sparse tensor or a nested sequence (not supported)");
    };
    for (const auto& v : graph.input()) {
      refuse_other(v, "input");
      g->input_slots.push_back(scope.define(v.name()));
    }
    for (const auto& v : graph.output()) refuse_other(v, "output");
    nodes(graph, *g, scope);
    for (const auto& v : graph.output()) {
      const int s = scope.find(v.name());
      if (s < 0)
        throw Error(Errc::invalid_argument,
                    label + ": subgraph '" + graph.name() + "' output '" + v.name() + "' is never produced");
      g->output_slots.push_back(s);
    }
    for (int s = first; s < num_slots; ++s) inner_slots.push_back(s);
    return g;
  }
};

/// Which node of a run submitted a device op, for naming the node in a
/// device failure (Error::tensor() is the failed op's output). Tensor ids
/// grow as a run submits, one node after another, so each node that made
/// device tensors records the largest id among its outputs; an op's output
/// belongs to the first node whose largest id is at least its own. The
/// first entry (node -1) marks what existed before the run's first node.
struct NodeTrail {
  std::vector<std::pair<uint64_t, int64_t>> ends;  // (largest output id, node), ids increasing

  void record(uint64_t id, int64_t node) {
    if (ends.empty() || id > ends.back().first) ends.emplace_back(id, node);
  }
  /// The node whose ops made `id`; -1 if none of this run's.
  [[nodiscard]] int64_t node_of(TensorId id) const {
    if (!id) return -1;
    auto it =
        std::lower_bound(ends.begin(), ends.end(), id.value, [](const auto& e, uint64_t v) { return e.first < v; });
    return it == ends.end() ? -1 : it->second;
  }
};

// The largest device tensor id in `v` (a sequence's items too); 0 if none.
uint64_t largest_id(const Value& v) {
  uint64_t top = v.dev.defined() ? v.dev.id().value : 0;
  for (const auto& e : v.items) top = std::max(top, largest_id(e));
  return top;
}

/// Signatures whose plans a model keeps (Model::cached_plans).
constexpr size_t kMaxPlans = 256;

/// A plan's run recorded (switchyard::Recording): later runs of the plan
/// submit its ops again on their inputs, without the nodes' client-side
/// work (dispatch, attribute reads, shape rules, handles), which was ~2 us
/// per node against a device that waited for it.
struct PlanReplay {
  Recording recording;
  /// The entries of a run's given values that are the recording's inputs.
  std::vector<size_t> given;
  /// The recording run's trail (ids as recorded), for naming the node of a
  /// replayed op's failure.
  std::vector<std::pair<uint64_t, int64_t>> ends;
};

/// A cached plan for one input signature: the values known on the host
/// (and their uploads), and which nodes they make unnecessary.
struct Plan {
  std::vector<Value> env;
  std::vector<char> skip;
  /// The slots of env a run reads (the nodes that run read them, or they
  /// are outputs): a run copies only these, not the values only skipped
  /// nodes read; every present slot for a graph with subgraphs (whose
  /// bodies read outer values unseen by node_in).
  std::vector<int> live;
  /// The largest device tensor id among env's values: made before any run
  /// of the plan (a run's trail starts above it and its inputs' uploads).
  uint64_t largest_id = 0;
  /// The plan's second run is recorded (its first built the plan, folding
  /// and uploading what later runs find in env); under Model::Impl::mu.
  mutable std::shared_ptr<const PlanReplay> replay;
  mutable bool replay_tried = false;
};

struct Model::Impl {
  Device device;                    // the first stage's
  std::vector<Device> node_device;  // per node (a pipeline places ranges)
  int64_t opset = 0;
  Graph graph;                   // after fusion (fusion.hpp)
  size_t onnx_nodes = 0;         // the model's own node count
  std::vector<int> inner_slots;  // the subgraphs' values: not kept by a plan
  std::vector<ValueInfo> inputs, outputs;
  std::vector<int> input_slots, output_slots;
  std::vector<char> input_has_default;
  std::vector<Value> base;              // initializers, by slot
  std::vector<std::string> index_node;  // per input: the Gather behind its index_extent
  /// Per node of the graph, the slots it reads last that hold values of
  /// the run (not initializers, not graph outputs): a device value there
  /// is let go once it has run, so its drop follows its last use in the
  /// same batch and the device may fuse and reuse in place around it, as
  /// at the end of a run; empty for a graph with subgraphs (which read
  /// outer values unseen by node_in).
  std::vector<std::vector<int>> release_after;
  /// Whether a node has a subgraph (If, Loop, Scan, ...): its bodies read
  /// outer values that node_in does not show.
  bool has_subgraphs = false;
  /// Whether a plan's runs may be recorded and replayed: one device, no
  /// subgraphs (whose control flow a recording would freeze), tensor
  /// outputs only.
  bool replays_plans = false;

  mutable std::mutex mu;
  mutable std::map<std::string, std::shared_ptr<const Plan>> plans;
  mutable std::deque<std::string> plan_order;  // plans' keys, oldest first
  mutable std::set<size_t> value_inputs;       // inputs whose contents the plan depends on

  /// Runs g's nodes on env; `on` is the device of a subgraph's nodes (its
  /// owner's), nullptr for the model's graph (placed per node).
  void execute(const Graph& g, std::vector<Value>& env, const std::vector<char>* skip, const Device* on,
               bool* computed_read, NodeTrail* trail = nullptr) const;
  /// Runs the graph on the given inputs; returns the outputs in order
  /// (an output the graph left without a value is not present()).
  /// `trail`, when given, records which node made which device tensors.
  std::vector<Value> run_values(std::vector<Value> given, NodeTrail* trail = nullptr) const;
  /// The run's outputs from `env` (a host-only output uploaded).
  std::vector<Value> output_values(std::vector<Value>& env) const;
  /// A cached plan's run: `env` from the plan, the nodes it does not skip,
  /// the outputs.
  std::vector<Value> run_plan(const Plan& plan, const std::vector<Value>& given, NodeTrail* trail) const;
  /// run_plan, recorded for replays (stored in the plan when it can be).
  std::vector<Value> record_plan(const Plan& plan, const std::vector<Value>& given, NodeTrail* trail) const;
  /// The plan's recorded run, on new inputs.
  std::vector<Value> replay_plan(const PlanReplay& replay, const std::vector<Value>& given, NodeTrail* trail) const;
  /// "onnx: node 'x' (Op): " for a failure of an op `trail`'s run
  /// submitted; "" when the failure is none of its nodes'.
  [[nodiscard]] std::string failure_prefix(const NodeTrail& trail, TensorId failed) const;
  /// Refuses a tensor-only run (run(), infer()) of a model with an output
  /// no TensorMap can hold.
  void check_tensor_outputs() const;
  std::string signature(const std::vector<Value>& given, const std::set<size_t>& vi) const;
};

void Model::Impl::execute(const Graph& g, std::vector<Value>& env, const std::vector<char>* skip, const Device* on,
                          bool* computed_read, NodeTrail* trail) const {
  // Device values of the model's graph let go after their last reader
  // (see release_after).
  const bool releasing = &g == &graph && !release_after.empty();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (releasing && n > 0)
      for (int s : release_after[n - 1])
        if (env[s].dev.defined() && !env[s].host) env[s] = Value{};
    if (skip != nullptr && (*skip)[n]) continue;
    boost::container::small_vector<Value*, 8> ins;
    for (int s : g.node_in[n]) {
      if (s >= 0 && !env[s].present())
        throw Error(Errc::invalid_argument, "onnx: " + node_label(g.nodes[n], n) + ": input has no value");
      ins.push_back(s < 0 ? nullptr : &env[s]);
    }
    const Device& device = on != nullptr ? *on : node_device[n];
    // A subgraph runs on this run's values: its formal inputs bound, its
    // outputs returned (outer values stay visible through the slots).
    // (A std::function of six references, allocated: only for the nodes
    // that have subgraphs.)
    std::optional<detail::SubgraphRunner> body;
    if (!g.bodies[n].empty())
      body.emplace([&, n](std::string_view attribute, std::vector<Value> given) {
        auto it = g.bodies[n].find(attribute);
        if (it == g.bodies[n].end())
          throw Error(Errc::invalid_argument,
                      "onnx: " + node_label(g.nodes[n], n) + ": no subgraph '" + std::string(attribute) + "'");
        const Graph& sub = *it->second;
        if (given.size() != sub.input_slots.size())
          throw Error(Errc::invalid_argument,
                      "onnx: " + node_label(g.nodes[n], n) + ": subgraph '" + std::string(attribute) + "' takes " +
                          std::to_string(sub.input_slots.size()) + " inputs, given " + std::to_string(given.size()));
        for (const auto& [slot, data] : sub.constants) env[slot] = Value{Tensor(), data};
        for (size_t i = 0; i < given.size(); ++i) env[sub.input_slots[i]] = std::move(given[i]);
        execute(sub, env, nullptr, &device, computed_read);
        std::vector<Value> outs;
        for (int s : sub.output_slots) outs.push_back(env[s]);
        return outs;
      });
    detail::Ctx ctx(g.nodes[n], opset, device, std::span<Value* const>(ins.data(), ins.size()), computed_read,
                    body ? &*body : nullptr, static_cast<int64_t>(n));
    detail::Outs outs;
    try {
      outs = g.specs[n]->run(ctx);
    } catch (const Error& e) {
      std::string what = e.what();
      if (what.rfind("onnx: ", 0) == 0) throw;
      throw Error(e.code(), "onnx: " + node_label(g.nodes[n], n) + ": " + what);
    } catch (const std::bad_alloc&) {
      // A host-side step (index tables, folded values) sized by the data.
      throw Error(Errc::out_of_memory, "onnx: " + node_label(g.nodes[n], n) + ": out of host memory");
    } catch (const std::length_error& e) {
      throw Error(Errc::out_of_memory, "onnx: " + node_label(g.nodes[n], n) + ": too large (" + e.what() + ")");
    }
    for (size_t k = 0; k < g.node_out[n].size() && k < outs.size(); ++k) {
      if (trail != nullptr) trail->record(largest_id(outs[k]), static_cast<int64_t>(n));
      if (g.node_out[n][k] >= 0) env[g.node_out[n][k]] = std::move(outs[k]);
    }
  }
}

std::string Model::Impl::failure_prefix(const NodeTrail& trail, TensorId failed) const {
  const int64_t n = trail.node_of(failed);
  if (n < 0) return "";
  return "onnx: " + node_label(graph.nodes[static_cast<size_t>(n)], static_cast<size_t>(n)) + ": ";
}

namespace {

// A value's dtype and shape (a sequence's, element by element), and its
// contents where the plan depends on them.
void append_signature(std::string& key, const Value& v, bool contents) {
  if (v.kind == Value::Kind::none) {
    key += "none;";
    return;
  }
  if (v.kind == Value::Kind::sequence) {
    key += "seq" + std::to_string(v.items.size()) + "[";
    for (const auto& e : v.items) append_signature(key, e, false);
    key += "];";
    return;
  }
  key += std::to_string(static_cast<int>(v.dtype())) + ":" + v.shape().to_string() + ";";
  if (contents) {
    if (!v.readback) v.readback = v.dev.read().get();
    const auto& b = v.readback->bytes;
    key.append(reinterpret_cast<const char*>(b.data()), b.size());
    key += ";";
  }
}

}  // namespace

std::string Model::Impl::signature(const std::vector<Value>& given, const std::set<size_t>& vi) const {
  std::string key;
  for (size_t i = 0; i < given.size(); ++i) append_signature(key, given[i], vi.count(i) > 0);
  return key;
}

void Model::Impl::check_tensor_outputs() const {
  for (const auto& o : outputs)
    if (o.kind == ValueKind::sequence || o.kind == ValueKind::optional_sequence)
      throw Error(Errc::invalid_argument,
                  "onnx run: output '" + o.name + "' is a sequence, which a TensorMap cannot hold: use infer_values()");
}

std::vector<Value> Model::Impl::output_values(std::vector<Value>& env) const {
  std::vector<Value> out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value& v = env[output_slots[i]];
    if (!v.present()) continue;
    if (v.is_tensor() && !v.dev.defined()) v.dev = device.from_data(*v.host);
    out[i] = v;
  }
  return out;
}

std::vector<Value> Model::Impl::run_plan(const Plan& plan, const std::vector<Value>& given, NodeTrail* trail) const {
  // A cached plan's values, only those this run reads: copying and
  // destroying every slot (a model's folded shape arithmetic, the weights
  // of skipped nodes) was a fifth of the client's work per call.
  std::vector<Value> env(plan.env.size());
  for (int s : plan.live) env[s] = plan.env[s];
  for (size_t i = 0; i < given.size(); ++i)
    if (given[i].present()) env[input_slots[i]] = given[i];
  if (trail != nullptr) {
    trail->ends.reserve(graph.nodes.size() + 1);  // one block, not one per doubling
    // Everything made before the run (weights, the inputs' uploads) is no node's.
    uint64_t before = plan.largest_id;
    for (const auto& v : given) before = std::max(before, largest_id(v));
    trail->record(before, -1);
  }
  bool computed_read = false;
  execute(graph, env, &plan.skip, nullptr, &computed_read, trail);
  return output_values(env);
}

std::vector<Value> Model::Impl::record_plan(const Plan& plan, const std::vector<Value>& given, NodeTrail* trail) const {
  auto replay = std::make_shared<PlanReplay>();
  std::vector<Tensor> inputs;
  bool tensors_only = true;
  for (size_t i = 0; i < given.size(); ++i) {
    if (!given[i].present()) continue;
    if (!given[i].is_tensor() || !given[i].dev.defined() || given[i].host) tensors_only = false;
    replay->given.push_back(i);
    inputs.push_back(given[i].dev);
  }
  if (!tensors_only || inputs.empty()) return run_plan(plan, given, trail);
  NodeTrail recorded;
  std::vector<Value> out;
  bool host_outputs = false;
  std::vector<Tensor> results;
  replay->recording = Recording::record(
      inputs,
      [&](std::span<const Tensor>) {
        out = run_plan(plan, given, &recorded);
        std::vector<Tensor> devs;
        for (const auto& v : out) {
          if (v.present() && (!v.is_tensor() || v.host)) host_outputs = true;
          devs.push_back(v.dev);
        }
        return devs;
      },
      results);
  if (trail != nullptr) *trail = recorded;
  if (replay->recording.replayable() && !host_outputs) {
    replay->ends = std::move(recorded.ends);
    std::lock_guard lock(mu);
    plan.replay = std::move(replay);
  }
  return out;
}

std::vector<Value> Model::Impl::replay_plan(const PlanReplay& replay, const std::vector<Value>& given,
                                            NodeTrail* trail) const {
  boost::container::small_vector<Tensor, 4> inputs;
  for (size_t i : replay.given) inputs.push_back(given[i].dev);
  TensorId first;
  std::vector<Tensor> results = replay.recording.replay(std::span<const Tensor>(inputs.data(), inputs.size()), &first);
  if (trail != nullptr) {
    // The replay's tensors have consecutive ids in the recorded order, so
    // the recorded trail holds with each id moved to its counterpart.
    const auto made = replay.recording.made();
    for (const auto& [id, node] : replay.ends) {
      const auto upto = static_cast<uint64_t>(
          std::upper_bound(made.begin(), made.end(), id, [](uint64_t v, TensorId m) { return v < m.value; }) -
          made.begin());
      if (node < 0)
        trail->record(first.value - 1 + upto, node);
      else if (upto > 0)
        trail->record(first.value + upto - 1, node);
    }
  }
  std::vector<Value> out(results.size());
  for (size_t i = 0; i < results.size(); ++i) out[i].dev = std::move(results[i]);
  return out;
}

std::vector<Value> Model::Impl::run_values(std::vector<Value> given, NodeTrail* trail) const {
  std::set<size_t> vi;
  {
    std::lock_guard lock(mu);
    vi = value_inputs;
  }
  std::string key = signature(given, vi);
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<const PlanReplay> replay;
  bool record = false;
  {
    std::lock_guard lock(mu);
    if (auto it = plans.find(key); it != plans.end()) {
      plan = it->second;
      replay = plan->replay;
      record = replays_plans && !replay && !plan->replay_tried;
      if (record) plan->replay_tried = true;
    }
  }
  if (replay) return replay_plan(*replay, given, trail);
  if (record) {
    try {
      return record_plan(*plan, given, trail);
    } catch (...) {
      // A run refused at a call records nothing: the next run may.
      std::lock_guard lock(mu);
      plan->replay_tried = false;
      throw;
    }
  }
  if (plan) return run_plan(*plan, given, trail);

  std::vector<Value> env = base;
  for (size_t i = 0; i < given.size(); ++i)
    if (given[i].present()) env[input_slots[i]] = given[i];
  bool computed_read = false;
  if (trail != nullptr) {
    trail->ends.reserve(graph.nodes.size() + 1);
    uint64_t before = 0;
    for (const auto& v : env) before = std::max(before, largest_id(v));
    trail->record(before, -1);
  }
  execute(graph, env, nullptr, nullptr, &computed_read, trail);

  std::vector<Value> out = output_values(env);
  // A computed device value read on the host (a shape that depends on
  // data) may feed folded nodes: such a model is replanned on every run.
  if (computed_read) return out;

  // First run of this signature: keep what the host computed, drop the rest.
  auto built = std::make_shared<Plan>();
  const auto& nodes = graph.nodes;
  built->skip.assign(nodes.size(), 0);
  std::set<size_t> read_inputs;
  for (size_t i = 0; i < given.size(); ++i)
    if (given[i].input_read && *given[i].input_read) read_inputs.insert(i);
  for (size_t n = 0; n < nodes.size(); ++n) {
    bool all_host = true;
    for (int s : graph.node_out[n])
      if (s >= 0 && !env[s].host) all_host = false;
    built->skip[n] = all_host ? 1 : 0;
  }
  for (size_t n = 0; n < nodes.size(); ++n)
    if (!built->skip[n])
      for (int s : graph.node_out[n])
        if (s >= 0) env[s] = Value{};
  for (int s : inner_slots) env[s] = Value{};
  for (size_t i = 0; i < given.size(); ++i) env[input_slots[i]] = base[input_slots[i]];
  std::vector<char> reads(env.size(), has_subgraphs ? 1 : 0);
  for (size_t n = 0; n < nodes.size(); ++n)
    if (!built->skip[n])
      for (int s : graph.node_in[n])
        if (s >= 0) reads[static_cast<size_t>(s)] = 1;
  for (int s : output_slots) reads[static_cast<size_t>(s)] = 1;
  for (size_t s = 0; s < env.size(); ++s)
    if (reads[s] && env[s].present()) built->live.push_back(static_cast<int>(s));
  for (const auto& v : env) built->largest_id = std::max(built->largest_id, largest_id(v));
  built->env = std::move(env);
  std::lock_guard lock(mu);
  value_inputs.insert(read_inputs.begin(), read_inputs.end());
  // Bounded (value-dependent inputs can vary freely): the oldest plan goes,
  // so a workload of more signatures than that replans only what it must.
  auto [at, fresh] = plans.insert_or_assign(signature(given, value_inputs), std::move(built));
  if (fresh) plan_order.push_back(at->first);
  while (plans.size() > kMaxPlans) {
    plans.erase(plan_order.front());
    plan_order.pop_front();
  }
  return out;
}

Model Model::load(const std::string& path, const Device& device) { return load(path, std::vector<Stage>{{device, 0}}); }

Model Model::load_bytes(const std::string& bytes, const Device& device, const std::string& base_dir) {
  return load_bytes(bytes, std::vector<Stage>{{device, 0}}, base_dir);
}

Model Model::load(const std::string& path, const std::vector<Stage>& stages) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(Errc::invalid_argument, "onnx: " + path + " is a directory, not an ONNX model file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::invalid_argument, "onnx: cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  try {
    return load_bytes(ss.str(), stages, dir);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) + " [" + path + "]");
  }
}

Model Model::load_bytes(const std::string& bytes, const std::vector<Stage>& stages, const std::string& base_dir) {
  if (stages.empty() || stages.front().first_node != 0)
    throw Error(Errc::invalid_argument, "onnx: the first stage must start at node 0");
  for (size_t k = 0; k < stages.size(); ++k) {
    if (!stages[k].device.valid())
      throw Error(Errc::invalid_argument, "onnx: stage " + std::to_string(k) + " has no device");
    if (k > 0 && stages[k].first_node <= stages[k - 1].first_node)
      throw Error(Errc::invalid_argument, "onnx: stages must start at increasing nodes");
  }
  const Device& device = stages.front().device;
  ::onnx::ModelProto model;
  // An empty message parses (every protobuf field is optional): say so
  // rather than that it imports no opset.
  if (bytes.empty()) throw Error(Errc::invalid_argument, "onnx: not a valid ONNX model (0 bytes)");
  if (!model.ParseFromString(bytes))
    throw Error(Errc::invalid_argument, "onnx: not a valid ONNX model (protobuf parse failed)");
  auto impl = std::make_shared<Impl>();
  impl->device = device;
  int64_t training_opset = 0;
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") impl->opset = op.version();
    if (op.domain() == detail::training_domain) training_opset = op.version();
  }
  // Opset 6 differs from 7 by attributes: broadcast/axis on binary ops (the
  // op table honours them below opset 7), is_test and consumed_inputs (the
  // attribute check below refuses them), so opset 6 models load too; opsets
  // 1-5 load when each node's op is defined there as in opset 6.
  // A model of optimizer steps alone (ONNX's own tests of them) may import
  // only the training domain; its nodes then may not use the default one.
  if (impl->opset == 0 && training_opset == 0) {
    std::string domains;
    for (const auto& op : model.opset_import())
      domains += (domains.empty() ? "" : ", ") +
                 (op.domain().empty() ? "the default domain at version " + std::to_string(op.version()) : op.domain());
    throw Error(Errc::unsupported,
                "onnx: the model imports no opset of the default domain" +
                    (domains.empty() ? std::string(" (it imports none at all)") : " (only " + domains + ")"));
  }
  if ((impl->opset != 0 || training_opset == 0) && (impl->opset < 1 || impl->opset > 17))
    throw Error(Errc::unsupported,
                "onnx: opset " + std::to_string(impl->opset) +
                    " of the default domain; supported: 7-17 (and 6, and 1-5 for ops unchanged since)");

  // Types of intermediate values, so a dtype Switchyard lacks fails at load.
  check_positive_attributes(model.graph());
  inline_external_attributes(*model.mutable_graph(), base_dir);
  ::onnx::ModelProto typed = model;
  try {
    ::onnx::shape_inference::InferShapes(typed);
  } catch (const std::exception&) {
    // Inference is a check only; a model it cannot follow still loads.
  }
  const auto& graph = model.graph();
  int num_slots = 0;
  Scope scope(&num_slots);
  std::vector<std::pair<int, TensorData>> inits;
  std::set<std::string> init_names;
  for (const auto& t : graph.initializer()) {
    inits.emplace_back(scope.define(t.name()), initializer(t, base_dir));
    init_names.insert(t.name());
  }
  {
    std::set<std::string> seen;
    for (const auto& v : graph.input())
      if (!seen.insert(v.name()).second)
        throw Error(Errc::invalid_argument, "onnx: the graph lists input '" + v.name() + "' twice");
    seen.clear();
    for (const auto& v : graph.output())
      if (!seen.insert(v.name()).second)
        throw Error(Errc::invalid_argument, "onnx: the graph lists output '" + v.name() + "' twice");
    seen.clear();
    for (const auto& t : graph.initializer())
      if (!seen.insert(t.name()).second)
        throw Error(Errc::invalid_argument, "onnx: the graph has two initializers named '" + t.name() + "'");
  }
  for (const auto& v : graph.input()) {
    auto info = value_info(v, "onnx: input");
    impl->input_slots.push_back(scope.define(v.name()));
    impl->input_has_default.push_back(init_names.count(v.name()) ? 1 : 0);
    if (!init_names.count(v.name())) impl->inputs.push_back(info);
  }
  // Only the inputs without defaults are listed; keep the defaulted ones
  // reachable too (a run may override them), listed after.
  {
    std::vector<ValueInfo> all;
    std::vector<int> slots;
    std::vector<char> def;
    for (int pass = 0; pass < 2; ++pass)
      for (int i = 0; i < graph.input_size(); ++i)
        if (impl->input_has_default[i] == pass) {
          all.push_back(value_info(graph.input(i), "onnx: input"));
          slots.push_back(impl->input_slots[i]);
          def.push_back(static_cast<char>(pass));
        }
    impl->input_slots = slots;
    impl->input_has_default = def;
    impl->inputs.clear();
    for (size_t i = 0; i < all.size(); ++i)
      if (!def[i]) impl->inputs.push_back(all[i]);
    for (size_t i = 0; i < all.size(); ++i)
      if (def[i]) {
        impl->inputs.push_back(all[i]);
        impl->inputs.back().has_default = true;
      }
  }

  mark_index_inputs(graph, impl->inputs, impl->index_node);

  // Dtypes of every typed value: a missing one fails here, naming the node
  // that produces it.
  std::unordered_map<std::string, int32_t> elem_type;
  for (const auto& v : typed.graph().value_info())
    if (v.type().has_tensor_type()) elem_type[v.name()] = v.type().tensor_type().elem_type();
  for (const auto& v : typed.graph().output())
    if (v.type().has_tensor_type()) elem_type[v.name()] = v.type().tensor_type().elem_type();
  // What the model declares outright wins over what inference derived.
  for (const auto& v : graph.input())
    if (v.type().has_tensor_type()) elem_type[v.name()] = v.type().tensor_type().elem_type();
  for (const auto& t : graph.initializer()) elem_type[t.name()] = t.data_type();

  // A sequence or optional output is the clearest reason, before the nodes
  // that build it.
  for (const auto& v : graph.output())
    if (!v.type().has_tensor_type()) (void)value_info(v, "onnx: output");
  // Stage of each of the model's nodes; fusion keeps patterns within one.
  const auto onnx_nodes = static_cast<size_t>(graph.node_size());
  if (stages.back().first_node >= onnx_nodes && stages.size() > 1)
    throw Error(Errc::invalid_argument, "onnx: a stage starts at node " + std::to_string(stages.back().first_node) +
                                            " of a graph of " + std::to_string(onnx_nodes) + " nodes");
  std::vector<size_t> stage_of(onnx_nodes, 0);
  for (size_t n = 0, k = 0; n < onnx_nodes; ++n) {
    while (k + 1 < stages.size() && stages[k + 1].first_node <= n) ++k;
    stage_of[n] = k;
  }
  impl->onnx_nodes = onnx_nodes;
  refuse_fused_domain(graph);
  detail::FusedNodes fused = detail::fuse_patterns(graph, stage_of, impl->opset);
  ::onnx::GraphProto rewritten;  // the nodes only: all the compiler reads
  if (fused.fused > 0)
    for (auto& n : fused.nodes) *rewritten.add_node() = std::move(n);
  Compiler compiler{impl->opset, training_opset, base_dir, elem_type, num_slots, impl->inner_slots};
  for (size_t i : fused.replaced) compiler.check_replaced(graph.node(static_cast<int>(i)), i);
  compiler.nodes(fused.fused > 0 ? rewritten : graph, impl->graph, scope);
  for (const auto& v : graph.output()) {
    impl->outputs.push_back(value_info(v, "onnx: output"));
    const int s = scope.find(v.name());
    if (s < 0) throw Error(Errc::invalid_argument, "onnx: output '" + v.name() + "' is never produced");
    impl->output_slots.push_back(s);
  }
  const auto& nodes = impl->graph.nodes;
  for (size_t n = 0; n < nodes.size(); ++n) impl->node_device.push_back(stages[stage_of[fused.origin[n]]].device);
  // Each initializer goes to the device of its first consumer.
  std::vector<Device> home(static_cast<size_t>(num_slots), device);
  std::vector<char> placed(static_cast<size_t>(num_slots), 0);
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int s : impl->graph.node_in[n])
      if (s >= 0 && !placed[s]) {
        home[s] = impl->node_device[n];
        placed[s] = 1;
      }
  impl->base.resize(static_cast<size_t>(num_slots));
  for (auto& [s, data] : inits) {
    Value v;
    // Weights go to the device now; small integer tensors (shapes, axes)
    // stay on the host until an op needs them there.
    if (is_floating(data.dtype) || data.numel() > 64) v.dev = home[s].from_data(data);
    v.host = std::move(data);
    impl->base[s] = std::move(v);
  }
  impl->has_subgraphs =
      std::any_of(impl->graph.bodies.begin(), impl->graph.bodies.end(), [](const auto& b) { return !b.empty(); });
  impl->replays_plans =
      !impl->has_subgraphs &&
      std::all_of(impl->node_device.begin(), impl->node_device.end(), [&](const Device& d) { return d == device; }) &&
      std::all_of(impl->outputs.begin(), impl->outputs.end(),
                  [](const ValueInfo& o) { return o.kind == ValueKind::tensor; });
  if (!impl->has_subgraphs) {
    std::vector<int> last(static_cast<size_t>(num_slots), -1);
    for (size_t n = 0; n < nodes.size(); ++n)
      for (int s : impl->graph.node_in[n])
        if (s >= 0) last[static_cast<size_t>(s)] = static_cast<int>(n);
    for (int s : impl->output_slots) last[static_cast<size_t>(s)] = -1;
    impl->release_after.assign(nodes.size(), {});
    for (size_t s = 0; s < last.size(); ++s)
      if (last[s] >= 0 && !impl->base[s].present())
        impl->release_after[static_cast<size_t>(last[s])].push_back(static_cast<int>(s));
  }
  return Model(std::move(impl));
}

const std::vector<ValueInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<ValueInfo>& Model::outputs() const { return impl_->outputs; }
int64_t Model::opset() const { return impl_->opset; }
Device Model::device() const { return impl_->device; }
size_t Model::num_nodes() const { return impl_->onnx_nodes; }
size_t Model::cached_plans() const {
  std::lock_guard lock(impl_->mu);
  return impl_->plans.size();
}

namespace {

// The first value of an index input outside [-extent, extent), named with
// its position, as the Gather would refuse it on the device.
void check_indices(const ValueInfo& info, const std::string& node, const TensorData& d) {
  if (info.index_extent < 0) return;
  const std::vector<int64_t> values = d.to_vector<int64_t>();
  for (size_t k = 0; k < values.size(); ++k) {
    if (values[k] >= -info.index_extent && values[k] < info.index_extent) continue;
    std::vector<size_t> at(d.shape.rank());
    size_t rest = k;
    for (size_t a = at.size(); a-- > 0;) {
      const auto extent = static_cast<size_t>(d.shape[a]);
      at[a] = rest % extent;
      rest /= extent;
    }
    std::string what = "onnx run: input '" + info.name + "' holds " + std::to_string(values[k]) + " at [";
    for (size_t a = 0; a < at.size(); ++a) {
      if (a > 0) what += ", ";
      what += std::to_string(at[a]);
    }
    what += "], out of range for ";
    what += node;
    what += ": indices must lie in [" + std::to_string(-info.index_extent) + ", ";
    what += std::to_string(info.index_extent) + ")";
    throw Error(Errc::index_out_of_range, what);
  }
}

// The device's copy of an input's host data; the device's refusal (too
// large, bytes that do not fill the shape) names the input.
Tensor upload_input(const Device& device, const ValueInfo& info, const TensorData& d) {
  try {
    return device.from_data(d);
  } catch (const Error& e) {
    throw Error(e.code(), "onnx run: input '" + info.name + "': " + e.what());
  }
}

void check_input(const ValueInfo& info, DType dtype, const Shape& shape) {
  if (dtype != info.dtype)
    throw Error(Errc::dtype_mismatch, "onnx run: input '" + info.name + "' must be " +
                                          std::string(name_of(info.dtype)) + ", got " + std::string(name_of(dtype)));
  for (auto d : shape.dims)
    if (d < 0)
      throw Error(Errc::shape_mismatch,
                  "onnx run: input '" + info.name + "' has a negative extent in shape " + shape.to_string());
  if (info.has_shape) {
    if (shape.rank() != info.dims.size())
      throw Error(Errc::shape_mismatch, "onnx run: input '" + info.name + "' must have " +
                                            std::to_string(info.dims.size()) + " axes, got shape " + shape.to_string());
    // A default (an initializer that is also a graph input) may be given
    // with other extents: the declared ones describe the stored value.
    for (size_t a = 0; a < info.dims.size() && !info.has_default; ++a)
      if (info.dims[a] >= 0 && info.dims[a] != shape[a])
        throw Error(Errc::shape_mismatch, "onnx run: input '" + info.name + "' axis " + std::to_string(a) +
                                              " must be " + std::to_string(info.dims[a]) + ", got shape " +
                                              shape.to_string());
  }
}

}  // namespace

namespace {

// Matches named run inputs to the model's inputs: an unknown name or a
// missing input without a default fails; `bind(i, given)` fills slot i from
// the caller's value, and a slot left empty takes the model's default.
template <class ModelImpl, class Map, class Bind>
std::vector<Value> match_inputs(const ModelImpl& im, const Map& inputs, Bind bind) {
  for (const auto& entry : inputs) {
    const std::string& name = entry.first;  // not a structured binding: clang before 16 cannot capture one
    if (std::none_of(im.inputs.begin(), im.inputs.end(), [&](const ValueInfo& v) { return v.name == name; }))
      throw Error(Errc::invalid_argument, "onnx run: the model has no input '" + name + "'");
  }
  std::vector<Value> given(im.inputs.size());
  for (size_t i = 0; i < im.inputs.size(); ++i) {
    auto it = inputs.find(im.inputs[i].name);
    if (it == inputs.end()) {
      if (!im.input_has_default[i])
        throw Error(Errc::invalid_argument, "onnx run: input '" + im.inputs[i].name + "' is missing");
      given[i] = im.base[im.input_slots[i]];
      continue;
    }
    bind(im.inputs[i], it->second, given[i]);
    given[i].input_read = std::make_shared<std::atomic<bool>>(false);
  }
  return given;
}

}  // namespace

namespace {

// A tensor where the model declares a sequence: the tensor-only overloads
// cannot give one.
void check_tensor_kind(const ValueInfo& info) {
  if (info.kind == ValueKind::sequence || info.kind == ValueKind::optional_sequence)
    throw Error(Errc::invalid_argument,
                "onnx run: input '" + info.name + "' is a sequence: give it through infer_values()");
}

TensorMap to_tensor_map(const std::vector<ValueInfo>& outputs, const std::vector<Value>& values) {
  TensorMap out;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (values[i].is_tensor() && values[i].present()) out.emplace(outputs[i].name, values[i].dev);
  return out;
}

}  // namespace

TensorMap Model::run(const TensorMap& inputs) const {
  const auto& im = *impl_;
  im.check_tensor_outputs();
  return to_tensor_map(
      im.outputs, im.run_values(match_inputs(im, inputs, [&](const ValueInfo& info, const Tensor& t, Value& v) {
        check_tensor_kind(info);
        if (!t.defined())
          throw Error(Errc::invalid_tensor, "onnx run: input '" + info.name + "' is an undefined tensor");
        check_input(info, t.dtype(), t.shape());
        v.dev = t.device() == im.device ? t : t.to(im.device);
      })));
}

namespace {

// run(DataMap)'s work; ModelImpl is Model::Impl (private, so not named here).
template <class ModelImpl>
TensorMap run_on_host_data(const ModelImpl& im, const DataMap& inputs, NodeTrail* trail) {
  im.check_tensor_outputs();
  return to_tensor_map(
      im.outputs,
      im.run_values(match_inputs(im, inputs,
                                 [&](const ValueInfo& info, const TensorData& d, Value& v) {
                                   check_tensor_kind(info);
                                   check_input(info, d.dtype, d.shape);
                                   check_indices(info, im.index_node[static_cast<size_t>(&info - im.inputs.data())], d);
                                   v.dev = upload_input(im.device, info, d);
                                   v.readback = d;
                                 }),
                    trail));
}

// A device failure of one of the run's ops, prefixed by the node that
// submitted it (the device's message names only the device and the op).
// `prefix(id)` gives that node's prefix, "" for none.
template <class Prefix>
std::exception_ptr named_failure(const std::exception_ptr& e, const Prefix& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    const std::string head = prefix(err.tensor());
    return head.empty() ? e : std::make_exception_ptr(Error(err.code(), head + err.what(), err.tensor()));
  } catch (...) {
    return e;
  }
}

// `result`, with a failure named as named_failure does.
template <class T, class Prefix>
Future<T> naming_the_node(const Future<T>& result, Prefix prefix) {
  Promise<T> named;
  result.on_complete([result, named, prefix = std::move(prefix)](const std::exception_ptr& e) {
    if (!e) {
      named.set_value(result.get());
      return;
    }
    named.set_error(named_failure(e, prefix));
  });
  return named.future();
}

}  // namespace

TensorMap Model::run(const DataMap& inputs) const { return run_on_host_data(*impl_, inputs, nullptr); }

Future<DataMap> Model::infer(const DataMap& inputs) const {
  auto trail = std::make_shared<NodeTrail>();
  TensorMap outs = run_on_host_data(*impl_, inputs, trail.get());
  // The reads gathered by hand, not through when_all, then() and
  // naming_the_node: each of those a state, a promise and a copy of the
  // map, on the runner's thread, on the path of every call.
  struct Gather {
    explicit Gather(size_t n) : left(n), datas(n) {}
    Promise<DataMap> done;
    switchyard::detail::Countdown left;
    std::vector<std::string> names;
    std::vector<TensorData> datas;
  };
  auto g = std::make_shared<Gather>(outs.size());
  if (outs.empty()) {
    g->done.set_value(DataMap{});
    return g->done.future();
  }
  auto prefix = [impl = impl_, trail](TensorId id) { return impl->failure_prefix(*trail, id); };
  size_t i = 0;
  for (const auto& [name, t] : outs) g->names.push_back(name);
  for (const auto& [name, t] : outs) {
    Future<TensorData> read = t.read();
    read.on_complete([g, read, i, prefix](const std::exception_ptr& e) {
      if (e) {
        g->done.set_error(named_failure(e, prefix));
        return;
      }
      g->datas[i] = read.get();
      if (!g->left.arrive()) return;
      DataMap out;
      for (size_t k = 0; k < g->names.size(); ++k) out.emplace(std::move(g->names[k]), std::move(g->datas[k]));
      g->done.set_value(std::move(out));
    });
    ++i;
  }
  return g->done.future();
}

Future<HostValueMap> Model::infer_values(const HostValueMap& inputs) const {
  const auto& im = *impl_;
  auto trail = std::make_shared<NodeTrail>();
  auto upload = [&](const ValueInfo& info, const TensorData& d) {
    Value e;
    e.dev = upload_input(im.device, info, d);
    e.readback = d;
    return e;
  };
  std::vector<Value> outs = im.run_values(
      match_inputs(
          im, inputs,
          [&](const ValueInfo& info, const HostValue& h, Value& v) {
            const bool optional = info.kind == ValueKind::optional_tensor || info.kind == ValueKind::optional_sequence;
            const bool sequence = info.kind == ValueKind::sequence || info.kind == ValueKind::optional_sequence;
            if (h.is_none()) {
              if (!optional)
                throw Error(Errc::invalid_argument, "onnx run: input '" + info.name + "' is not optional, given none");
              v = Value::none();
              return;
            }
            if (h.is_tensor()) {
              if (sequence)
                throw Error(Errc::invalid_argument,
                            "onnx run: input '" + info.name + "' is a sequence, given a tensor");
              check_input(info, h.tensor().dtype, h.tensor().shape);
              check_indices(info, im.index_node[static_cast<size_t>(&info - im.inputs.data())], h.tensor());
              v = upload(info, h.tensor());
              return;
            }
            if (!sequence)
              throw Error(Errc::invalid_argument, "onnx run: input '" + info.name + "' is a tensor, given a sequence");
            std::vector<Value> items;
            for (size_t k = 0; k < h.items().size(); ++k) {
              const TensorData& d = h.items()[k];
              if (d.dtype != info.dtype)
                throw Error(Errc::dtype_mismatch, "onnx run: input '" + info.name + "' element " + std::to_string(k) +
                                                      " must be " + std::string(name_of(info.dtype)) + ", got " +
                                                      std::string(name_of(d.dtype)));
              items.push_back(upload(info, d));
            }
            v = Value::sequence(std::move(items), info.dtype);
          }),
      trail.get());
  // Every tensor read at once; then put back together by output.
  struct Slot {
    std::string name;
    Value::Kind kind;
    size_t first, count;
  };
  std::vector<Slot> slots;
  std::vector<Future<TensorData>> reads;
  auto read = [&](const Value& v) { reads.push_back((v.dev.defined() ? v.dev : im.device.from_data(*v.host)).read()); };
  for (size_t i = 0; i < outs.size(); ++i) {
    const Value& v = outs[i];
    if (!v.present()) continue;
    slots.push_back({im.outputs[i].name, v.kind, reads.size(), v.kind == Value::Kind::sequence ? v.items.size() : 1});
    if (v.kind == Value::Kind::tensor) read(v);
    if (v.kind == Value::Kind::sequence)
      for (const auto& e : v.items) read(e);
    if (v.kind == Value::Kind::none) slots.back().count = 0;
  }
  auto values = when_all(reads).then([slots](std::vector<TensorData> datas) {
    HostValueMap out;
    for (const auto& s : slots) {
      if (s.kind == Value::Kind::none) {
        out.emplace(s.name, HostValue::none());
      } else if (s.kind == Value::Kind::tensor) {
        out.emplace(s.name, std::move(datas[s.first]));
      } else {
        std::vector<TensorData> items(
            std::make_move_iterator(datas.begin() + static_cast<ptrdiff_t>(s.first)),
            std::make_move_iterator(datas.begin() + static_cast<ptrdiff_t>(s.first + s.count)));
        out.emplace(s.name, HostValue::sequence(std::move(items)));
      }
    }
    return out;
  });
  return naming_the_node(values, [impl = impl_, trail](TensorId id) { return impl->failure_prefix(*trail, id); });
}

}  // namespace switchyard::onnx
