// SPDX-License-Identifier: Apache-2.0
#pragma once

// The element-wise op table. Each row defines one op once: its name and
// its dtype rule. The enum, the names, the dtype rules (op_rules.cpp), the
// Tensor methods (tensor.cpp) and the CUDA kernels' kind list derive from
// these rows, so a new element-wise op is a row here, its public method in
// tensor.hpp, one kernel case per backend and its tests. CAF-free: a public
// header uses it.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace switchyard {

/// How a unary op's result dtype follows from its input's.
enum class UnaryRule : uint8_t {
  keep,          ///< the input's dtype, bool included
  keep_no_bool,  ///< the input's dtype; bool inputs are refused
  to_float,      ///< floating: integer and bool inputs compute in f32 (PyTorch's int-to-float ufuncs)
  float_only,    ///< floating inputs only (PyTorch has no integer kernel)
  integral,      ///< integer or bool inputs, the input's dtype
  to_bool,       ///< bool, for any input
};

/// How a binary op's result dtype follows from its operands' promoted type.
enum class BinaryRule : uint8_t {
  arith,            ///< the promoted dtype (bool: add is or, mul is and)
  arith_no_bool,    ///< the promoted dtype; a bool promoted type is refused
  divides,          ///< as arith_no_bool, and an integer division by zero fails the op
  no_bool_operand,  ///< the promoted dtype; any bool operand is refused (sub)
  to_float,         ///< floating: integer operands compute in f32
  compare,          ///< bool, compared in the operands' result type
  logical,          ///< bool, on the operands' truth values
  bitwise,          ///< integer or bool operands only
};

// X(name, rule, entry): one row per op, in wire order (append only: the
// index is the op's tag on the wire). entry `method`: Tensor has a method of
// the op's name taking no arguments (unary) or one operand (binary), defined
// from this row; `custom`: its entry takes arguments and is written by hand.
#define SWITCHYARD_UNARY_OPS(X)    \
  X(neg, keep_no_bool, method)     \
  X(abs, keep, method)             \
  X(sign, keep, method)            \
  X(exp, to_float, method)         \
  X(log, to_float, method)         \
  X(log1p, to_float, method)       \
  X(expm1, to_float, method)       \
  X(sqrt, to_float, method)        \
  X(rsqrt, to_float, method)       \
  X(sin, to_float, method)         \
  X(cos, to_float, method)         \
  X(tanh, to_float, method)        \
  X(sigmoid, to_float, method)     \
  X(relu, keep_no_bool, method)    \
  X(gelu, float_only, method)      \
  X(silu, float_only, method)      \
  X(erf, to_float, method)         \
  X(floor, keep_no_bool, method)   \
  X(ceil, keep_no_bool, method)    \
  X(round, keep_no_bool, method)   \
  X(reciprocal, to_float, method)  \
  X(clamp, keep_no_bool, custom)   \
  X(logical_not, to_bool, method)  \
  X(bitwise_not, integral, method) \
  X(isnan, to_bool, method)        \
  X(isinf, to_bool, method)

#define SWITCHYARD_BINARY_OPS(X)  \
  X(add, arith, method)           \
  X(sub, no_bool_operand, method) \
  X(mul, arith, method)           \
  X(div, to_float, method)        \
  X(pow, arith_no_bool, method)   \
  X(remainder, divides, method)   \
  X(maximum, arith, method)       \
  X(minimum, arith, method)       \
  X(atan2, to_float, method)      \
  X(eq, compare, method)          \
  X(ne, compare, method)          \
  X(lt, compare, method)          \
  X(le, compare, method)          \
  X(gt, compare, method)          \
  X(ge, compare, method)          \
  X(logical_and, logical, method) \
  X(logical_or, logical, method)  \
  X(logical_xor, logical, method) \
  X(bitwise_and, bitwise, method) \
  X(bitwise_or, bitwise, method)  \
  X(bitwise_xor, bitwise, method) \
  X(floor_divide, divides, method)

#define SWITCHYARD_OP_ENUMERATOR(name, rule, entry) name,
enum class UnaryKind : uint8_t { SWITCHYARD_UNARY_OPS(SWITCHYARD_OP_ENUMERATOR) };
enum class BinaryKind : uint8_t { SWITCHYARD_BINARY_OPS(SWITCHYARD_OP_ENUMERATOR) };
#undef SWITCHYARD_OP_ENUMERATOR

namespace detail {
template <class Rule>
struct OpRow {
  const char* name;
  Rule rule;
};
#define SWITCHYARD_UNARY_ROW(name, rule, entry) {#name, UnaryRule::rule},
#define SWITCHYARD_BINARY_ROW(name, rule, entry) {#name, BinaryRule::rule},
inline constexpr OpRow<UnaryRule> unary_rows[] = {SWITCHYARD_UNARY_OPS(SWITCHYARD_UNARY_ROW)};
inline constexpr OpRow<BinaryRule> binary_rows[] = {SWITCHYARD_BINARY_OPS(SWITCHYARD_BINARY_ROW)};
#undef SWITCHYARD_BINARY_ROW
#undef SWITCHYARD_UNARY_ROW
}  // namespace detail

/// Number of unary / binary kinds (valid kinds are below these).
inline constexpr size_t unary_kind_count = std::extent_v<decltype(detail::unary_rows)>;
inline constexpr size_t binary_kind_count = std::extent_v<decltype(detail::binary_rows)>;

/// The op's name ("neg", "add"), as in error messages.
[[nodiscard]] constexpr const char* to_string(UnaryKind k) noexcept {
  auto i = static_cast<size_t>(k);
  return i < unary_kind_count ? detail::unary_rows[i].name : "unary?";
}
[[nodiscard]] constexpr const char* to_string(BinaryKind k) noexcept {
  auto i = static_cast<size_t>(k);
  return i < binary_kind_count ? detail::binary_rows[i].name : "binary?";
}
/// The op's dtype rule (an invalid kind reads as keep / arith; the
/// runner's validation refuses invalid kinds before any rule is asked).
[[nodiscard]] constexpr UnaryRule rule_of(UnaryKind k) noexcept {
  auto i = static_cast<size_t>(k);
  return i < unary_kind_count ? detail::unary_rows[i].rule : UnaryRule::keep;
}
[[nodiscard]] constexpr BinaryRule rule_of(BinaryKind k) noexcept {
  auto i = static_cast<size_t>(k);
  return i < binary_kind_count ? detail::binary_rows[i].rule : BinaryRule::arith;
}

[[nodiscard]] constexpr bool is_comparison(BinaryKind k) noexcept { return rule_of(k) == BinaryRule::compare; }
[[nodiscard]] constexpr bool is_logical(BinaryKind k) noexcept { return rule_of(k) == BinaryRule::logical; }
[[nodiscard]] constexpr bool is_bitwise(BinaryKind k) noexcept { return rule_of(k) == BinaryRule::bitwise; }
/// Whether an integer division by zero fails this op (remainder, floor_divide).
[[nodiscard]] constexpr bool divides(BinaryKind k) noexcept { return rule_of(k) == BinaryRule::divides; }

}  // namespace switchyard
