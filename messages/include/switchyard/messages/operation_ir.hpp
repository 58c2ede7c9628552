// SPDX-License-Identifier: Apache-2.0
#pragma once

// The op set's wire format: CAF inspect overloads of the op types in ops.hpp.

#include <bit>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "switchyard/messages/error.hpp"
#include "switchyard/messages/inspect.hpp"
#include "switchyard/messages/ops.hpp"

namespace switchyard {

// --- inspection ---------------------------------------------------------

/// CAF 0.17 encodes a double with pack754, whose normalising loop never ends
/// for +-inf (a fill with inf hung the sender) and which garbles NaN (clamp's
/// "no bound" marker). Doubles in ops therefore cross the wire as their
/// IEEE-754 bit pattern, which is exact for every value.
struct F64Bits {
  double& value;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, F64Bits x) {
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    return f(x.value);  // to_string: print the number
  } else {
    auto bits = std::bit_cast<uint64_t>(x.value);
    auto result = f(bits);
    if constexpr (Inspector::writes_state) x.value = std::bit_cast<double>(bits);
    return result;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Scalar& x) {
  return f(caf::meta::type_name("scalar_value"), x.kind, x.is_unsigned, x.i, F64Bits{x.f});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FromDataOp& x) {
  return f(caf::meta::type_name("from_data"), x.out, x.data);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, FillOp& x) {
  return f(caf::meta::type_name("fill"), x.kind, x.out, F64Bits{x.value}, F64Bits{x.step});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RandomOp& x) {
  return f(caf::meta::type_name("random"), x.kind, x.out, F64Bits{x.a}, F64Bits{x.b});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UnaryOp& x) {
  return f(caf::meta::type_name("unary"), x.kind, x.in, x.out, F64Bits{x.a}, F64Bits{x.b});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BinaryOp& x) {
  return f(caf::meta::type_name("binary"), x.kind, x.lhs, x.rhs, x.out);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScalarOp& x) {
  return f(caf::meta::type_name("scalar"), x.kind, x.lhs, x.scalar, x.scalar_first, x.out);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReduceOp& x) {
  return f(caf::meta::type_name("reduce"), x.kind, x.in, x.out, x.axes, x.keepdim, x.correction);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SoftmaxOp& x) {
  return f(caf::meta::type_name("softmax"), x.in, x.out, x.axis, x.log);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MatmulOp& x) {
  return f(caf::meta::type_name("matmul"), x.lhs, x.rhs, x.bias, x.out, x.transpose_lhs, x.transpose_rhs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CastOp& x) {
  return f(caf::meta::type_name("cast"), x.in, x.out);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ViewOp& x) {
  return f(caf::meta::type_name("view"), x.in, x.out, x.offset, x.strides);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SliceAssignOp& x) {
  return f(caf::meta::type_name("slice_assign"), x.base, x.value, x.out, x.offset, x.strides);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CatOp& x) {
  return f(caf::meta::type_name("cat"), x.inputs, x.out, x.axis);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PadOp& x) {
  return f(caf::meta::type_name("pad"), x.in, x.out, x.before, x.after, F64Bits{x.value});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, IndexOp& x) {
  return f(caf::meta::type_name("index"), x.kind, x.in, x.index, x.src, x.out, x.axis);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WhereOp& x) {
  return f(caf::meta::type_name("where"), x.cond, x.lhs, x.rhs, x.out);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DropOp& x) {
  return f(caf::meta::type_name("drop"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SeedOp& x) {
  return f(caf::meta::type_name("seed"), x.seed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ConvOp& x) {
  return f(caf::meta::type_name("conv"), x.input, x.weight, x.bias, x.out, x.stride, x.pad_before, x.pad_after,
           x.dilation, x.output_padding, x.groups, x.transposed);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PoolOp& x) {
  return f(caf::meta::type_name("pool"), x.kind, x.in, x.out, x.kernel, x.stride, x.pad_before, x.pad_after, x.dilation,
           x.output_size, x.ceil_mode, x.count_include_pad, x.divisor_override);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, NormOp& x) {
  return f(caf::meta::type_name("norm"), x.kind, x.in, x.mean, x.var, x.weight, x.bias, x.out, x.count, F64Bits{x.eps});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AttentionOp& x) {
  return f(caf::meta::type_name("attention"), x.q, x.k, x.v, x.mask, x.out, x.causal, F64Bits{x.scale});
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScanOp& x) {
  return f(caf::meta::type_name("scan"), x.kind, x.in, x.out, x.axis);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SortOp& x) {
  return f(caf::meta::type_name("sort"), x.kind, x.in, x.out, x.axis, x.k, x.descending, x.sorted);
}

namespace detail {
template <size_t I = 0>
bool emplace_alternative(OperationIr::Variant& v, size_t index) {
  if constexpr (I < std::variant_size_v<OperationIr::Variant>) {
    if (index == I) {
      v.emplace<I>();
      return true;
    }
    return emplace_alternative<I + 1>(v, index);
  } else {
    return false;
  }
}
}  // namespace detail

/// One tag byte, then the alternative. An unknown tag is a protocol error
/// (CAF's own variant inspector throws there; a hostile peer must not be
/// able to make a runner throw).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, OperationIr& x) {
  if constexpr (Inspector::reads_state) {
    auto tag = static_cast<uint8_t>(x.op.index());
    return std::visit([&](auto& alt) { return f(caf::meta::type_name("op"), tag, alt); }, x.op);
  } else {
    uint8_t tag = 0;
    if (auto err = f(tag)) return err;
    if (!detail::emplace_alternative(x.op, tag))
      return make_error(Errc::protocol_error, "unknown operation tag " + std::to_string(tag));
    return std::visit([&](auto& alt) { return f(alt); }, x.op);
  }
}

namespace detail {
/// Most ops one batch message may carry: a client splits longer batches
/// for a remote device, and a decoder refuses more (see decode_ops).
inline constexpr size_t max_wire_ops = 65536;

/// A batch on the wire (src/op_codec.cpp describes the layout): `block`
/// holds the ops, `data` the uploads' bytes in order (sent as they are,
/// without a copy into the block).
struct EncodedOps {
  std::vector<char> block;
  std::vector<std::span<const std::byte>> data;
  [[nodiscard]] size_t wire_size() const;
};
[[nodiscard]] EncodedOps encode_ops(const std::vector<OperationIr>& ops);
/// Fills `ops` from a batch's bytes as they crossed the wire (the block's
/// length, the block, the data); empty on success, else what is wrong.
[[nodiscard]] std::string decode_ops(std::span<const std::byte> bytes, std::vector<OperationIr>& ops);

caf::error save_ops(caf::serializer& f, const std::vector<OperationIr>& ops);
caf::error load_ops(caf::deserializer& f, std::vector<OperationIr>& ops);
[[nodiscard]] std::vector<std::string> op_names(const std::vector<OperationIr>& ops);
}  // namespace detail

/// A batch crosses the wire as one block that op_codec.cpp writes and
/// reads with the op structs' inspect functions above: through CAF's
/// processors, field by field, decoding was most of what a remote tiny op
/// cost a worker. Every size is checked against the bytes received before
/// anything is allocated for it.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, std::vector<OperationIr>& ops) {
  if constexpr (std::is_same_v<Inspector, caf::serializer>) {
    return detail::save_ops(f, ops);
  } else if constexpr (std::is_same_v<Inspector, caf::deserializer>) {
    return detail::load_ops(f, ops);
  } else {
    // Printing inspectors (logs, to_string): the ops' names.
    auto names = detail::op_names(ops);
    return f(caf::meta::type_name("ops"), names);
  }
}

}  // namespace switchyard
