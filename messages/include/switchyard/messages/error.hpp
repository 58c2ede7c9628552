// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>

namespace switchyard {

/// Every failure Switchyard reports. Carried across actors as `caf::error`
/// in the "switchyard" category, turned into `switchyard::Error` only at the
/// client (Future::get or a rejected call).
enum class Errc : uint8_t {
  shape_mismatch = 1,
  dtype_mismatch,
  invalid_argument,
  unknown_device,
  device_mismatch,
  invalid_tensor,
  unknown_tensor,
  kernel_failure,
  out_of_memory,
  index_out_of_range,
  device_lost,
  runtime_closed,
  protocol_error,
  unsupported,
  worker_unreachable,  ///< connect(): no worker answered at that address
};

inline constexpr caf::atom_value error_category = caf::atom("switchyard");

[[nodiscard]] const char* to_string(Errc code) noexcept;

[[nodiscard]] inline caf::error make_error(Errc code, std::string what) {
  return caf::error{static_cast<uint8_t>(code), error_category, caf::make_message(std::move(what))};
}

/// What the client API throws: at the call for bad input (shapes, dtypes,
/// devices), and from Future::get() for failures on a device. Defined here,
/// below the client, so that host-side helpers of the message types
/// (TensorData) throw it too: every failure a caller sees is an Error.
class Error : public std::runtime_error {
 public:
  /// An error of kind `code`; `what` names the op and what was wrong.
  Error(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  /// The kind of failure.
  [[nodiscard]] Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

/// Extracts (code, message) from a caf::error of any category; errors of
/// other categories (CAF's own) map to protocol_error or device_lost.
struct ErrorInfo {
  Errc code = Errc::protocol_error;
  std::string message;
};
[[nodiscard]] ErrorInfo describe(const caf::error& err);

}  // namespace switchyard
