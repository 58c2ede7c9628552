// SPDX-License-Identifier: Apache-2.0
#pragma once

// Graph rewrites the loader applies before compiling a graph: patterns that
// exporters spell out node by node and that Switchyard runs as one op.

#include <cstddef>
#include <onnx/onnx_pb.h>
#include <vector>

namespace switchyard::onnx::detail {

/// A graph's nodes after fusion, in order, and for each one the index in the
/// original graph of the node whose position it takes (its last node).
/// Without a fusion, `nodes` is empty (the graph stands as it is) and
/// `origin` counts 0, 1, 2, ...
struct FusedNodes {
  std::vector<::onnx::NodeProto> nodes;
  std::vector<size_t> origin;
  size_t fused = 0;              // how many patterns were replaced
  std::vector<size_t> replaced;  // the original nodes they replaced (for the type checks their schemas make)
};

/// Replaces each layer norm written out as ReduceMean, Sub, Pow 2,
/// ReduceMean, Add eps, Sqrt, Div, Mul by a 1-D scale, Add a 1-D bias (how
/// PyTorch exports nn.LayerNorm below opset 17) over the last axis with one
/// LayerNormalization node; and each MatMul(a, b) -> Softmax over the last
/// axis -> MatMul(., v) with one fused_domain Attention node (a, b, v;
/// b = Transpose(k, perm) folded in as k and attribute key_perm), which
/// runs scaled_dot_product_attention where its shapes and dtype allow and
/// the three ops otherwise. A pattern is fused only when nothing else reads
/// its intermediate values (other nodes, subgraphs, graph outputs), its
/// nodes are ONNX's own, a layer norm's epsilon, exponent, scale and bias
/// are constants (initializers or Constant nodes), and all of it runs in
/// one stage (`stage_of[i]`: the stage of original node i). `opset`: the
/// model's, for Softmax's default axis.
FusedNodes fuse_patterns(const ::onnx::GraphProto& graph, const std::vector<size_t>& stage_of, int64_t opset);

}  // namespace switchyard::onnx::detail
