// SPDX-License-Identifier: Apache-2.0
// Patterns that exporters write out node by node, as one node each, as ONNX
// Runtime's LayerNormFusion and attention fusions do:
// - layer norms: PyTorch 1.13 exports nn.LayerNorm below opset 17 as nine
//   nodes; run one by one they were 45 of the transformer encoder's 93
//   device ops per call;
// - attention, MatMul -> Softmax -> MatMul: run as scaled_dot_product_attention,
//   which never holds the score matrix (the encoder's softmax alone read and
//   wrote it in 60 us a layer).

#include "fusion.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "onnx_internal.hpp"

namespace switchyard::onnx::detail {
namespace {

using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

const AttributeProto* find_attr(const NodeProto& n, std::string_view name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

/// Every read of a value: node inputs here and in every subgraph (which may
/// read outer values), and the graph's outputs.
void count_reads(const GraphProto& g, std::unordered_map<std::string, int>& reads) {
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) ++reads[i];
    for (const auto& a : n.attribute()) {
      if (a.has_g()) count_reads(a.g(), reads);
      for (const auto& sub : a.graphs()) count_reads(sub, reads);
    }
  }
  for (const auto& o : g.output()) ++reads[o.name()];
}

/// ONNX's own ops (a node of another domain is never one of a pattern).
bool default_domain(const NodeProto& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

class Matcher {
 public:
  Matcher(const GraphProto& g, const std::vector<size_t>& stage_of) : g_(g), stage_of_(stage_of) {
    count_reads(g, reads_);
    for (const auto& t : g.initializer()) constants_[t.name()] = &t;
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      for (const auto& in : n.input()) readers_[in].push_back(i);
      for (const auto& out : n.output()) producer_[out] = i;
      // Exporters alias shared weights through Identity (PyTorch: equal
      // layer norm weights become one initializer and Identity nodes).
      if (n.op_type() == "Identity" && n.input_size() == 1 && n.output_size() == 1) {
        if (auto c = constants_.find(n.input(0)); c != constants_.end()) constants_[n.output(0)] = c->second;
        if (auto f = scalar_floats_.find(n.input(0)); f != scalar_floats_.end())
          scalar_floats_[n.output(0)] = f->second;
      }
      if (n.op_type() == "Constant" && n.output_size() == 1) {
        if (const auto* v = find_attr(n, "value"); v != nullptr && v->has_t()) constants_[n.output(0)] = &v->t();
        if (const auto* f = find_attr(n, "value_float"); f != nullptr) scalar_floats_[n.output(0)] = f->f();
      }
    }
  }

  /// The nodes of a layer norm whose first ReduceMean is node `first`, last
  /// node (the bias Add) last; nothing if it is not one.
  struct Match {
    std::vector<int> nodes;
    std::string x, scale, bias, y;
    float epsilon = 0;
  };
  std::optional<Match> match(int first) const {
    const NodeProto& mean = g_.node(first);
    if (!is_last_axis_mean(mean) || !default_domain(mean) || mean.input_size() != 1) return std::nullopt;
    Match m;
    m.x = mean.input(0);
    const int sub = only_reader(mean.output(0), "Sub");
    if (sub < 0 || g_.node(sub).input(0) != m.x || g_.node(sub).input(1) != mean.output(0)) return std::nullopt;
    const std::string& centred = g_.node(sub).output(0);
    // The centred values feed the square and the division, nothing else.
    const auto& readers = readers_of(centred);
    if (reads(centred) != 2 || readers.size() != 2) return std::nullopt;
    int pow = -1, div = -1;
    for (int r : readers) {
      const NodeProto& n = g_.node(r);
      if (n.op_type() == "Pow" && n.input_size() == 2 && n.input(0) == centred && scalar(n.input(1)) == 2.0)
        pow = r;
      else if (n.op_type() == "Div" && n.input_size() == 2 && n.input(0) == centred)
        div = r;
    }
    if (pow < 0 || div < 0) return std::nullopt;
    const int var = only_reader(g_.node(pow).output(0), "ReduceMean", 1);
    if (var < 0 || !is_last_axis_mean(g_.node(var))) return std::nullopt;
    const int add_eps = only_reader(g_.node(var).output(0), "Add");
    if (add_eps < 0) return std::nullopt;
    const auto eps = scalar(other_input(g_.node(add_eps), g_.node(var).output(0)));
    if (!eps) return std::nullopt;
    m.epsilon = static_cast<float>(*eps);
    const int sqrt = only_reader(g_.node(add_eps).output(0), "Sqrt", 1);
    if (sqrt < 0 || only_reader(g_.node(sqrt).output(0), "Div") != div ||
        g_.node(div).input(1) != g_.node(sqrt).output(0))
      return std::nullopt;
    const int mul = only_reader(g_.node(div).output(0), "Mul");
    if (mul < 0) return std::nullopt;
    m.scale = other_input(g_.node(mul), g_.node(div).output(0));
    const int add_bias = only_reader(g_.node(mul).output(0), "Add");
    if (add_bias < 0) return std::nullopt;
    m.bias = other_input(g_.node(add_bias), g_.node(mul).output(0));
    if (!is_vector_constant(m.scale) || !is_vector_constant(m.bias)) return std::nullopt;
    m.y = g_.node(add_bias).output(0);
    m.nodes = {first, sub, pow, var, add_eps, sqrt, div, mul, add_bias};
    for (int n : m.nodes)
      if (g_.node(n).output_size() != 1 || stage_of_[static_cast<size_t>(n)] != stage_of_[static_cast<size_t>(first)])
        return std::nullopt;
    // The bias Add comes last in a sorted graph, so every input of the
    // fused node exists where it stands.
    if (*std::max_element(m.nodes.begin(), m.nodes.end()) != add_bias) return std::nullopt;
    return m;
  }

  /// An attention whose Softmax is node `softmax`: MatMul(a, b) -> Softmax
  /// over the last axis -> MatMul(., v), with b = Transpose(k) folded in
  /// when nothing else reads b; nothing if it is not one.
  struct AttentionMatch {
    std::vector<int> nodes;  // in graph order; the second MatMul last
    std::string a, b, v, y;
    std::vector<int64_t> key_perm;  // the folded Transpose's perm (b is then k)
  };
  std::optional<AttentionMatch> match_attention(int softmax, int64_t opset) const {
    const NodeProto& sm = g_.node(softmax);
    if (sm.op_type() != "Softmax" || sm.input_size() != 1 || sm.output_size() != 1) return std::nullopt;
    // The last axis: said outright, or opset 13's default (before 13 the
    // default is axis 1 of a flattened input).
    const auto* axis = find_attr(sm, "axis");
    if (axis != nullptr ? axis->i() != -1 : opset < 13) return std::nullopt;
    const int mm1 = producer(sm.input(0), "MatMul");
    if (mm1 < 0 || only_reader(sm.input(0), "Softmax", 1) != softmax) return std::nullopt;
    const int mm2 = only_reader(sm.output(0), "MatMul");
    if (mm2 < 0 || g_.node(mm2).input(0) != sm.output(0) || g_.node(mm2).input(1) == sm.output(0)) return std::nullopt;
    AttentionMatch m;
    m.a = g_.node(mm1).input(0);
    m.b = g_.node(mm1).input(1);
    m.v = g_.node(mm2).input(1);
    m.y = g_.node(mm2).output(0);
    m.nodes = {mm1, softmax, mm2};
    if (const int t = producer(m.b, "Transpose", 1); t >= 0 && m.a != m.b && only_reader(m.b, "MatMul") == mm1) {
      const auto* perm = find_attr(g_.node(t), "perm");
      if (perm != nullptr && perm->ints_size() >= 2) {
        m.key_perm.assign(perm->ints().begin(), perm->ints().end());
        m.b = g_.node(t).input(0);
        m.nodes.insert(m.nodes.begin(), t);
      }
    }
    for (int n : m.nodes)
      if (g_.node(n).output_size() != 1 || stage_of_[static_cast<size_t>(n)] != stage_of_[static_cast<size_t>(mm2)])
        return std::nullopt;
    return m;
  }

 private:
  /// The node that makes `name`, if it is an `op` node of `arity` inputs; else -1.
  [[nodiscard]] int producer(const std::string& name, std::string_view op, int arity = 2) const {
    auto it = producer_.find(name);
    if (it == producer_.end()) return -1;
    const NodeProto& n = g_.node(it->second);
    return n.op_type() == op && default_domain(n) && n.input_size() == arity ? it->second : -1;
  }
  [[nodiscard]] int reads(const std::string& name) const {
    auto it = reads_.find(name);
    return it == reads_.end() ? 0 : it->second;
  }
  [[nodiscard]] const std::vector<int>& readers_of(const std::string& name) const {
    static const std::vector<int> none;
    auto it = readers_.find(name);
    return it == readers_.end() ? none : it->second;
  }
  /// The node that alone reads `name` (anywhere: nodes, subgraphs, graph
  /// outputs), if it is an `op` node of `arity` inputs; else -1.
  [[nodiscard]] int only_reader(const std::string& name, std::string_view op, int arity = 2) const {
    const auto& r = readers_of(name);
    if (reads(name) != 1 || r.size() != 1) return -1;
    const NodeProto& n = g_.node(r[0]);
    return n.op_type() == op && default_domain(n) && n.input_size() == arity ? r[0] : -1;
  }
  /// The input of a two-input node that is not `name`; "" if both are.
  [[nodiscard]] static std::string other_input(const NodeProto& n, const std::string& name) {
    if (n.input_size() != 2) return "";
    if (n.input(0) == name && n.input(1) != name) return n.input(1);
    if (n.input(1) == name && n.input(0) != name) return n.input(0);
    return "";
  }
  /// ReduceMean over the last axis only, keeping it.
  [[nodiscard]] static bool is_last_axis_mean(const NodeProto& n) {
    if (n.op_type() != "ReduceMean") return false;
    const auto* keep = find_attr(n, "keepdims");
    if (keep != nullptr && keep->i() != 1) return false;
    const auto* axes = find_attr(n, "axes");
    return axes != nullptr && axes->ints_size() == 1 && axes->ints(0) == -1;
  }
  /// A one-element floating constant's value.
  [[nodiscard]] std::optional<double> scalar(const std::string& name) const {
    if (auto f = scalar_floats_.find(name); f != scalar_floats_.end()) return f->second;
    auto it = constants_.find(name);
    if (it == constants_.end()) return std::nullopt;
    const TensorProto& t = *it->second;
    int64_t numel = 1;
    for (auto d : t.dims()) numel *= d;
    if (numel != 1 || t.data_location() == TensorProto::EXTERNAL) return std::nullopt;
    const auto type = t.data_type();
    if (type != TensorProto::FLOAT && type != TensorProto::DOUBLE && type != TensorProto::FLOAT16) return std::nullopt;
    return to_data(t, ".").at(0);
  }
  /// A constant of one axis (a layer norm's scale or bias over the last).
  [[nodiscard]] bool is_vector_constant(const std::string& name) const {
    auto it = constants_.find(name);
    return it != constants_.end() && it->second->dims_size() == 1;
  }

  const GraphProto& g_;
  const std::vector<size_t>& stage_of_;
  std::unordered_map<std::string, int> reads_;
  std::unordered_map<std::string, std::vector<int>> readers_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, const TensorProto*> constants_;
  std::unordered_map<std::string, float> scalar_floats_;
};

std::string node_name(const NodeProto& n, int index) {
  return n.name().empty() ? "#" + std::to_string(index) : n.name();
}

}  // namespace

namespace {

NodeProto layer_norm_node(const GraphProto& graph, const Matcher::Match& m) {
  NodeProto ln;
  ln.set_op_type("LayerNormalization");
  // Errors name the exported nodes it stands for.
  ln.set_name(node_name(graph.node(m.nodes.front()), m.nodes.front()) + " .. " +
              node_name(graph.node(m.nodes.back()), m.nodes.back()) + " (a layer norm fused from 9 nodes)");
  ln.add_input(m.x);
  ln.add_input(m.scale);
  ln.add_input(m.bias);
  ln.add_output(m.y);
  auto* axis = ln.add_attribute();
  axis->set_name("axis");
  axis->set_type(AttributeProto::INT);
  axis->set_i(-1);
  auto* eps = ln.add_attribute();
  eps->set_name("epsilon");
  eps->set_type(AttributeProto::FLOAT);
  eps->set_f(m.epsilon);
  return ln;
}

NodeProto attention_node(const GraphProto& graph, const Matcher::AttentionMatch& m) {
  NodeProto at;
  at.set_domain(fused_domain);
  at.set_op_type("Attention");
  at.set_name(node_name(graph.node(m.nodes.front()), m.nodes.front()) + " .. " +
              node_name(graph.node(m.nodes.back()), m.nodes.back()) + " (attention fused from " +
              std::to_string(m.nodes.size()) + " nodes)");
  at.add_input(m.a);
  at.add_input(m.b);
  at.add_input(m.v);
  at.add_output(m.y);
  if (!m.key_perm.empty()) {
    auto* perm = at.add_attribute();
    perm->set_name("key_perm");
    perm->set_type(AttributeProto::INTS);
    for (int64_t p : m.key_perm) perm->add_ints(p);
  }
  return at;
}

}  // namespace

FusedNodes fuse_patterns(const GraphProto& graph, const std::vector<size_t>& stage_of, int64_t opset) {
  FusedNodes out;
  const Matcher matcher(graph, stage_of);
  const auto count = static_cast<size_t>(graph.node_size());
  std::vector<char> removed(count, 0);
  std::unordered_map<int, NodeProto> at_last;  // the fused node, by the index of the pattern's last node
  auto take = [&](const std::vector<int>& nodes, NodeProto fused) {
    if (std::any_of(nodes.begin(), nodes.end(), [&](int n) { return removed[static_cast<size_t>(n)] != 0; })) return;
    for (int n : nodes) {
      removed[static_cast<size_t>(n)] = 1;
      out.replaced.push_back(static_cast<size_t>(n));
    }
    at_last.emplace(*std::max_element(nodes.begin(), nodes.end()), std::move(fused));
  };
  for (int i = 0; i < graph.node_size(); ++i) {
    if (removed[static_cast<size_t>(i)] != 0) continue;
    if (auto m = matcher.match(i)) take(m->nodes, layer_norm_node(graph, *m));
    if (auto m = matcher.match_attention(i, opset)) take(m->nodes, attention_node(graph, *m));
  }
  if (at_last.empty()) {  // nothing to rewrite: the caller compiles the graph as it is
    for (size_t i = 0; i < count; ++i) out.origin.push_back(i);
    return out;
  }
  for (int i = 0; i < graph.node_size(); ++i) {
    if (auto it = at_last.find(i); it != at_last.end()) {
      out.nodes.push_back(std::move(it->second));
      out.origin.push_back(static_cast<size_t>(i));
      ++out.fused;
      continue;
    }
    if (removed[static_cast<size_t>(i)] != 0) continue;
    NodeProto n = graph.node(i);
    // Unnamed nodes keep the label of their original position.
    if (n.name().empty()) n.set_name("#" + std::to_string(i));
    out.nodes.push_back(std::move(n));
    out.origin.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace switchyard::onnx::detail
