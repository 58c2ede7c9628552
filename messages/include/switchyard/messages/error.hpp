// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>

#include "switchyard/error.hpp"
#include "switchyard/messages/tensor_id.hpp"

namespace switchyard {

// Errc and Error are public (switchyard/error.hpp); this is how they travel
// between actors: as a caf::error in the "switchyard" category.
inline constexpr caf::atom_value error_category = caf::atom("switchyard");

[[nodiscard]] inline caf::error make_error(Errc code, std::string what) {
  return caf::error{static_cast<uint8_t>(code), error_category, caf::make_message(std::move(what))};
}
/// An op's failure: the message and the id of the op's first output (Error::tensor()).
[[nodiscard]] inline caf::error make_error(Errc code, std::string what, TensorId tensor) {
  if (!tensor) return make_error(code, std::move(what));
  return caf::error{static_cast<uint8_t>(code), error_category, caf::make_message(std::move(what), tensor.value)};
}

/// Extracts (code, message) from a caf::error of any category; errors of
/// other categories (CAF's own) map to protocol_error or device_lost.
struct ErrorInfo {
  Errc code = Errc::protocol_error;
  std::string message;
  TensorId tensor;  // the failed op's output, where the error says
};
[[nodiscard]] ErrorInfo describe(const caf::error& err);

}  // namespace switchyard
