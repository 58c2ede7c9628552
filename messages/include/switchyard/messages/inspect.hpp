// SPDX-License-Identifier: Apache-2.0
#pragma once

// CAF inspect overloads of the value types that the public headers use
// (Bytes, TensorData, TensorIr). They live here, not next to the types, so that those
// headers stay free of CAF; every header that sends them (operation_ir.hpp,
// protocol.hpp) includes this one.

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>

#include "switchyard/messages/error.hpp"
#include "switchyard/messages/tensor_data.hpp"
#include "switchyard/messages/tensor_ir.hpp"

namespace switchyard {

/// Largest payload a peer may declare: the deserializer refuses more than
/// the message actually carries, so a hostile size never gets allocated.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Bytes& x) {
  if constexpr (std::is_same_v<Inspector, caf::serializer>) {
    size_t n = x.size();
    if (auto err = f.begin_sequence(n)) return err;
    if (n > 0) {
      if (auto err = f.apply_raw(n, const_cast<std::byte*>(x.data()))) return err;
    }
    return f.end_sequence();
  } else if constexpr (std::is_same_v<Inspector, caf::deserializer>) {
    size_t n = 0;
    if (auto err = f.begin_sequence(n)) return err;
    if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f); bin && n > bin->remaining())
      return make_error(Errc::protocol_error, "declared payload of " + std::to_string(n) + " bytes exceeds the " +
                                                  std::to_string(bin->remaining()) + " bytes received");
    x = Bytes::allocate(n);
    if (n > 0) {
      if (auto err = f.apply_raw(n, x.mutable_data())) return err;
    }
    return f.end_sequence();
  } else {
    // Printing inspectors (logs, to_string) show the size only.
    size_t n = x.size();
    return f(caf::meta::type_name("bytes"), n);
  }
}

namespace detail {
// TensorIr on the wire: id (8 bytes), dtype (1), status (1), rank (4), then
// the dims (8 each), little-endian. Every op names two or three tensors, and
// field by field through CAF's processors (an error object per field, a
// sequence per shape) they were half of what decoding a batch cost.
inline constexpr size_t tensor_ir_head = 14;
// No op accepts more than 16 axes (op_rules). Up to that, dims cost at most
// 128 bytes and a short message just fails to decode; past it, the rank is
// checked against what came (the dynamic_cast stays off the common path)
// and bounded for a decoder that cannot see the message's size.
inline constexpr uint32_t tensor_ir_cheap_rank = 16;
inline constexpr uint32_t tensor_ir_max_rank = 1024;

// Tensor bytes cross as they are in memory too: peers share a byte order.
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

/// A TensorIr's head as it crosses (the op batch codec writes the same).
inline std::array<char, tensor_ir_head> pack_tensor_ir_head(const TensorIr& x) {
  std::array<char, tensor_ir_head> head{};
  const uint64_t id = x.id.value;
  const auto rank = static_cast<uint32_t>(x.shape.rank());
  std::memcpy(head.data(), &id, 8);
  head[8] = static_cast<char>(x.dtype);
  head[9] = static_cast<char>(x.status);
  std::memcpy(head.data() + 10, &rank, 4);
  return head;
}

/// Fills `x`'s id, dtype and status from a head and returns its rank (the
/// dims, which follow, are the caller's to check and read). Any byte is
/// taken: the op rules refuse a dtype or status that is not one.
inline uint32_t unpack_tensor_ir_head(const std::array<char, tensor_ir_head>& head, TensorIr& x) {
  uint32_t rank = 0;
  std::memcpy(&x.id.value, head.data(), 8);
  std::memcpy(&rank, head.data() + 10, 4);
  x.dtype = static_cast<DType>(static_cast<uint8_t>(head[8]));
  x.status = static_cast<TensorStatus>(static_cast<uint8_t>(head[9]));
  return rank;
}
}  // namespace detail

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorIr& x) {
  if constexpr (std::is_same_v<Inspector, caf::serializer>) {
    auto head = detail::pack_tensor_ir_head(x);
    if (auto err = f.apply_raw(head.size(), head.data())) return err;
    const size_t rank = x.shape.rank();
    if (rank == 0) return {};
    return f.apply_raw(rank * sizeof(int64_t), x.shape.dims.data());
  } else if constexpr (std::is_same_v<Inspector, caf::deserializer>) {
    std::array<char, detail::tensor_ir_head> head{};
    if (auto err = f.apply_raw(head.size(), head.data())) return err;
    const uint32_t rank = detail::unpack_tensor_ir_head(head, x);
    if (rank > detail::tensor_ir_cheap_rank) {
      const auto* bin = dynamic_cast<caf::binary_deserializer*>(&f);
      if (rank > detail::tensor_ir_max_rank || (bin != nullptr && uint64_t{rank} * 8 > bin->remaining()))
        return make_error(Errc::protocol_error,
                          "a tensor of " + std::to_string(rank) + " axes exceeds the bytes received or any rank");
    }
    x.shape.dims.resize(rank);
    if (rank == 0) return {};
    return f.apply_raw(size_t{rank} * sizeof(int64_t), x.shape.dims.data());
  } else {
    return f(x.id, x.shape, x.dtype, x.status);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorData& x) {
  if constexpr (std::is_same_v<Inspector, caf::deserializer>) {
    // Decoding is where a peer's bytes enter the process: uploads, bridge
    // imports and read replies all pass through here.
    if (auto err = f(caf::meta::type_name("tensor_data"), x.shape, x.dtype, x.bytes)) return err;
    canonicalize_bools(x);
    return {};
  } else {
    return f(caf::meta::type_name("tensor_data"), x.shape, x.dtype, x.bytes);
  }
}

}  // namespace switchyard
