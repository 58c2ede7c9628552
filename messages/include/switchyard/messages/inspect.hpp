// SPDX-License-Identifier: Apache-2.0
#pragma once

// CAF inspect overloads of the value types that the public headers use
// (Bytes, TensorData). They live here, not next to the types, so that those
// headers stay free of CAF; every header that sends them (operation_ir.hpp,
// protocol.hpp) includes this one.

#include <string>
#include <type_traits>

#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>

#include "switchyard/messages/error.hpp"
#include "switchyard/messages/tensor_data.hpp"

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
