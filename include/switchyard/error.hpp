// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::Error, what the client API throws, and its codes (Errc).

#include <cstdint>
#include <stdexcept>
#include <string>

#include "switchyard/messages/tensor_id.hpp"

namespace switchyard {

/// Every failure Switchyard reports. Devices report them as values; they become
/// a thrown `switchyard::Error` only at the client (Future::get or a
/// rejected call).
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

/// The code's name ("shape_mismatch").
[[nodiscard]] const char* to_string(Errc code) noexcept;

/// What the client API throws: at the call for bad input (shapes, dtypes,
/// devices), and from Future::get() for failures on a device. Defined here,
/// below the client, so that host-side helpers of the message types
/// (TensorData) throw it too: every failure a caller sees is an Error.
class Error : public std::runtime_error {
 public:
  /// An error of kind `code`; `what` names the op and what was wrong;
  /// `tensor`, where the failure is an op's, the op's (first) output.
  Error(Errc code, const std::string& what, TensorId tensor = {})
      : std::runtime_error(what), code_(code), tensor_(tensor) {}
  /// The kind of failure.
  [[nodiscard]] Errc code() const noexcept { return code_; }
  /// For a failure of an op on a device, the id (Tensor::id()) of the first
  /// output of the op that failed. A failure spreads unchanged to every op
  /// that depends on it, so reading any of their results names the op where
  /// it began. Empty (false) for failures that are no op's: a rejected call,
  /// a lost device, a closed runtime's refusal.
  [[nodiscard]] TensorId tensor() const noexcept { return tensor_; }

 private:
  Errc code_;
  TensorId tensor_;
};

}  // namespace switchyard
