// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "switchyard/messages/std_memory.hpp"  // std::hash, without <functional> (which pulls <unordered_map>)

namespace switchyard {

/// Names a tensor on one device. Allocated by the client (so submitting an
/// op needs no round trip); 0 is never a valid id.
struct TensorId {
  uint64_t value = 0;

  [[nodiscard]] explicit operator bool() const noexcept { return value != 0; }
  friend auto operator<=>(const TensorId&, const TensorId&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorId& x) {
  return f(x.value);
}

/// Index of a device in the runtime's registry.
using DeviceId = uint32_t;

}  // namespace switchyard

/// \cond
// Hidden from the API reference: Doxygen 1.9 cannot place a specialization
// of std::hash declared with its qualified name ("scope not found").
template <>
struct std::hash<switchyard::TensorId> {
  size_t operator()(switchyard::TensorId id) const noexcept {
    // ids are sequential per client: a multiplicative mix spreads them.
    return static_cast<size_t>(id.value * 0x9E3779B97F4A7C15ULL);
  }
};
/// \endcond
