// SPDX-License-Identifier: Apache-2.0
// f16 and bf16 on the CPU: storage in 2 bytes, arithmetic in f32 with one
// rounding per op, as PyTorch's CPU kernels do (their "opmath" type). Every
// computing kernel thus exists once, for f32, and a 16-bit op costs two
// conversion passes on top of it.

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <variant>

#include "backends/cpu/kernels.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::backends::cpu {

void half_reached_kernel(DType t) {
  std::fprintf(stderr, "switchyard cpu backend: a %s operand reached a kernel unwidened\n",
               std::string(name_of(t)).c_str());
  std::abort();
}

namespace {

// Ops that only move or select elements (computes_v false) run natively on
// 16-bit storage.

// The dtype the op's operands are promoted to before it computes, where
// that is a 16-bit float: an operand of another dtype is rounded to it first
// (f16 + i64 2049 sees 2048, as in PyTorch).
template <class Op>
DType promoted_compute(const Op& op) {
  if constexpr (std::is_same_v<Op, BinaryOp>)
    return binary_compute_dtype(op);
  else if constexpr (std::is_same_v<Op, ScalarOp>)
    return scalar_compute_dtype(op);
  else if constexpr (std::is_same_v<Op, UnaryOp>)
    return op.in.dtype;
  else if constexpr (std::is_same_v<Op, ScanOp>)
    return op.out.dtype;  // a scan's dtype converts the input first (f32 70000 as f16 is inf)
  else
    return DType::f32;  // the others take operands of their own dtype
}

template <class Op>
std::optional<DType> plan(Op& op, std::span<InputWidening> inputs) {
  bool any = false;
  op.each_input([&](const TensorIr& t) { any = any || is_half(t.dtype); });
  op.each_output([&](const TensorIr& t) { any = any || is_half(t.dtype); });
  if (!any) return std::nullopt;
  const DType compute = promoted_compute(op);
  size_t i = 0;
  op.each_input([&](TensorIr& t) {
    auto& w = inputs[i++];
    const bool promoted_to_half = is_half(compute) && t.dtype != compute;
    if (!is_half(t.dtype) && !promoted_to_half) return;
    w.from = t.dtype;
    if (promoted_to_half) w.through = compute;
    w.widened = true;
    t.dtype = DType::f32;
  });
  if constexpr (std::is_same_v<Op, ScalarOp>) {
    // PyTorch casts the scalar to the common dtype too (f16 x 0.1 multiplies
    // by 0.0999755859375).
    if (compute == DType::f16) op.scalar = Scalar(static_cast<double>(static_cast<float>(Half(op.scalar.to_double()))));
    if (compute == DType::bf16)
      op.scalar = Scalar(static_cast<double>(static_cast<float>(BFloat16(op.scalar.to_double()))));
  }
  std::optional<DType> narrow;
  op.each_output([&](TensorIr& t) {
    if (!is_half(t.dtype)) return;
    narrow = t.dtype;
    t.dtype = DType::f32;
  });
  return narrow;
}

}  // namespace

std::optional<DType> plan_widening(OperationIr& op, std::span<InputWidening> inputs) {
  return std::visit(
      [&](auto& o) -> std::optional<DType> {
        using Op = std::decay_t<decltype(o)>;
        if constexpr (computes_v<Op>)
          return plan(o, inputs);
        else
          return std::nullopt;
      },
      op.op);
}

std::optional<DType> widen_halves(Context& ctx, OperationIr& op, std::span<const Bytes*> bytes,
                                  std::span<bool> consumable, std::vector<Bytes>& widened) {
  std::array<InputWidening, 8> small;
  std::vector<InputWidening> many;
  std::span<InputWidening> inputs(small.data(), bytes.size());
  if (bytes.size() > small.size())
    inputs = std::span<InputWidening>((many.resize(bytes.size()), many.data()), many.size());
  const auto narrow = plan_widening(op, inputs);
  if (std::none_of(inputs.begin(), inputs.end(), [](const InputWidening& w) { return w.widened; })) return narrow;
  widened.reserve(2 * bytes.size());  // pointers into it must stay valid
  size_t i = 0;
  op.each_input([&](const TensorIr& t) {
    const size_t k = i++;
    const auto& w = inputs[k];
    if (!w.widened) return;
    const Bytes* src = bytes[k];
    DType from = w.from;
    if (w.through) {
      widened.push_back(as_dtype(ctx, *src, from, *w.through, t.numel()));
      src = &widened.back();
      from = *w.through;
    }
    widened.push_back(as_dtype(ctx, *src, from, DType::f32, t.numel()));
    bytes[k] = &widened.back();
    consumable[k] = true;  // ours alone
  });
  return narrow;
}

}  // namespace switchyard::backends::cpu
