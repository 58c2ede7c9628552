// SPDX-License-Identifier: Apache-2.0
#pragma once

// The element-wise op kinds Tensor::unary / Tensor::binary name. CAF-free
// (a public header uses it); the rest of the op IR is in operation_ir.hpp.

#include <cstdint>

namespace switchyard {

enum class UnaryKind : uint8_t {
  neg,
  abs,
  sign,
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  rsqrt,
  sin,
  cos,
  tanh,
  sigmoid,
  relu,
  gelu,
  silu,
  erf,
  floor,
  ceil,
  round,
  reciprocal,
  clamp,
  logical_not,
  bitwise_not,
  isnan,
  isinf,
};

enum class BinaryKind : uint8_t {
  add,
  sub,
  mul,
  div,
  pow,
  remainder,
  maximum,
  minimum,
  atan2,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,
  logical_xor,
  bitwise_and,
  bitwise_or,
  bitwise_xor,
};

/// The op's name ("neg", "add"), as in error messages.
[[nodiscard]] const char* to_string(UnaryKind k) noexcept;
[[nodiscard]] const char* to_string(BinaryKind k) noexcept;

[[nodiscard]] constexpr bool is_comparison(BinaryKind k) noexcept { return k >= BinaryKind::eq && k <= BinaryKind::ge; }
[[nodiscard]] constexpr bool is_logical(BinaryKind k) noexcept {
  return k >= BinaryKind::logical_and && k <= BinaryKind::logical_xor;
}
[[nodiscard]] constexpr bool is_bitwise(BinaryKind k) noexcept {
  return k >= BinaryKind::bitwise_and && k <= BinaryKind::bitwise_xor;
}

}  // namespace switchyard
