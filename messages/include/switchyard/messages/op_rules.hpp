// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>

#include <caf/expected.hpp>

#include "switchyard/messages/operation_ir.hpp"

namespace switchyard {

/// Shape and dtype of an op's result.
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
};

// The shape and dtype rules of every op, in one place. The client calls them
// before submitting (so bad input fails at the call) and every runner calls
// `validate` on what it receives (a remote peer may lie). Errors name the op,
// the offending shapes or dtypes, and what was expected.

[[nodiscard]] caf::expected<TensorSpec> unary_result(UnaryKind k, const Shape& s, DType t);
[[nodiscard]] caf::expected<TensorSpec> binary_result(BinaryKind k, const Shape& a, DType ta, const Shape& b, DType tb);
/// The dtype a binary op computes in: comparisons and logical ops compare
/// in the operands' result_type (0-d operands count less, see result_type),
/// every other kind in its output dtype. Every backend uses these two.
[[nodiscard]] DType binary_compute_dtype(const BinaryOp& op) noexcept;
[[nodiscard]] DType scalar_compute_dtype(const ScalarOp& op) noexcept;
[[nodiscard]] caf::expected<TensorSpec> scalar_result(BinaryKind k, const Shape& a, DType ta, ScalarKind sk);
/// scalar_result's dtype alone, or nothing where scalar_result fails (it
/// says why): the client's check of every scalar op, without a
/// caf::expected or a copy of the shape.
[[nodiscard]] std::optional<DType> scalar_result_dtype(BinaryKind k, DType ta, ScalarKind sk) noexcept;
/// Normalises `axes` in place (negative axes resolved, sorted, unique;
/// empty means every axis).
[[nodiscard]] caf::expected<TensorSpec> reduce_result(ReduceKind k, const Shape& s, DType t, std::vector<int64_t>& axes,
                                                      bool keepdim);
[[nodiscard]] caf::expected<TensorSpec> softmax_result(const Shape& s, DType t, int64_t& axis);
[[nodiscard]] caf::expected<TensorSpec> matmul_result(const Shape& a, DType ta, const Shape& b, DType tb,
                                                      bool transpose_a, bool transpose_b);
/// Checks that a strided view over a tensor of `in_numel` elements stays
/// inside it.
[[nodiscard]] caf::error check_view(int64_t in_numel, const Shape& out, int64_t offset,
                                    const std::vector<int64_t>& strides);
/// A view as the offset and strides of its elements over its input's
/// (ViewOp's).
struct ViewMap {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};
/// `second` (a view of shape `out` over the result of `first`, which has
/// shape `mid`) as one view of `first`'s input, where that is a strided view:
/// when no index of `second` carries across an axis of `mid` (a reshape of a
/// slice, a transpose of a reshape). nullopt otherwise, for negative strides
/// and for empty views. Both views must have passed check_view.
[[nodiscard]] std::optional<ViewMap> compose_views(const ViewMap& first, const Shape& mid, const ViewMap& second,
                                                   const Shape& out);
[[nodiscard]] caf::expected<TensorSpec> cat_result(const std::vector<TensorIr>& inputs, int64_t& axis);
[[nodiscard]] caf::expected<TensorSpec> pad_result(const Shape& s, DType t, const std::vector<int64_t>& before,
                                                   const std::vector<int64_t>& after);
[[nodiscard]] caf::expected<TensorSpec> index_result(IndexKind k, const TensorIr& in, const TensorIr& index,
                                                     const TensorIr* src, int64_t& axis);
/// Normalisation (NormOp): optional operands are nullptr or id 0 when absent.
[[nodiscard]] caf::expected<TensorSpec> norm_result(NormKind k, const TensorIr& in, const TensorIr* mean,
                                                    const TensorIr* var, const TensorIr* weight, const TensorIr* bias,
                                                    int64_t count, double eps);
[[nodiscard]] caf::expected<TensorSpec> attention_result(const TensorIr& q, const TensorIr& k, const TensorIr& v,
                                                         const TensorIr* mask, bool causal);
/// cumsum/cumprod: `dtype` as PyTorch's argument (absent: integer and bool
/// inputs give i64). Normalises `axis`.
[[nodiscard]] caf::expected<TensorSpec> scan_result(ScanKind k, const Shape& s, DType t, int64_t& axis,
                                                    std::optional<DType> dtype);
/// argsort / topk indices (i64). Normalises `axis`.
[[nodiscard]] caf::expected<TensorSpec> sort_result(SortKind k, const Shape& s, DType t, int64_t& axis, int64_t top_k);
[[nodiscard]] caf::expected<TensorSpec> where_result(const TensorIr& cond, const TensorIr& a, const TensorIr& b);
/// Convolution and its transpose, from the op's input, weight, bias and
/// arguments (its `out` is not read). Shapes as PyTorch 1.13 computes them;
/// f32 and f64 only.
[[nodiscard]] caf::expected<TensorSpec> conv_result(const ConvOp& op);
/// Pooling from the op's input and arguments (its `out` is not read), with
/// PyTorch 1.13's output sizes (ceil_mode: the last window must start inside
/// the input or the left padding) and dtypes (max: floating; avg: floating
/// and i64; indices: i64).
[[nodiscard]] caf::expected<TensorSpec> pool_result(const PoolOp& op);
/// Extent of one pooled axis (no checks: pool_result has made them).
[[nodiscard]] int64_t pool_output_extent(int64_t in, int64_t kernel, int64_t stride, int64_t pad_before,
                                         int64_t pad_after, int64_t dilation, bool ceil_mode);

/// Checks a shape that a tensor will have: no negative extent, at most 16
/// axes, at most 2^40 elements (so element and byte counts cannot overflow).
/// `what` names it in the error ("tensor", "input", ...).
[[nodiscard]] caf::error check_shape(const Shape& s, const char* what);

/// Checks a whole op as a runner receives it: ids present, outputs of the
/// shape and dtype the rules give, sizes within bounds.
[[nodiscard]] caf::error validate(OperationIr& op);
/// What a runner checks of an op from a client in its own process (which
/// cannot lie about what it checked): element-wise ops, whose output the
/// client took from the same rule functions at the call (src/tensor.cpp),
/// only for known kinds; matmuls (matmul_result and the bias rules at the
/// call) not at all; every other op in full, as validate.
[[nodiscard]] caf::error validate_local(OperationIr& op);

/// Checks host data as it arrives from a peer (read replies, imports): a
/// valid dtype, a shape within bounds and exactly numel * size_of(dtype)
/// bytes, so element access cannot leave the buffer.
[[nodiscard]] caf::error validate_data(const TensorData& data);
/// validate_data, and the data is of `shape` and `dtype`: what a read reply
/// or a bridge import must carry for the tensor it is meant for.
[[nodiscard]] caf::error validate_data(const TensorData& data, const Shape& shape, DType dtype);

/// Row-major strides of a shape (elements).
[[nodiscard]] std::vector<int64_t> contiguous_strides(const Shape& s);

}  // namespace switchyard
