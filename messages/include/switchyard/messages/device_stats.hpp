// SPDX-License-Identifier: Apache-2.0
#pragma once

// CAF-free (Device::stats returns it); its inspect overload is in protocol.hpp.

#include <cstdint>
#include <string>

namespace switchyard {

/// Counters one runner reports.
struct DeviceStats {
  std::string device;
  uint64_t ops_executed = 0;
  uint64_t ops_failed = 0;
  /// Ops waiting on a pending (in-flight) input.
  uint64_t queue_depth = 0;
  uint64_t live_handles = 0;
  uint64_t live_bytes = 0;
  /// Bytes the backend keeps cached for reuse (pools, and on cpu devices
  /// weights kept packed between calls).
  uint64_t cached_bytes = 0;
  uint64_t bytes_bridged_in = 0;
  uint64_t bytes_bridged_out = 0;
  /// Bytes of imports not yet joined into the device: parts of tensors
  /// whose last part has not come yet, and tensors whose data came before
  /// their announcement.
  uint64_t bytes_staged = 0;
  /// Of ops_executed, those run inside fused element-wise chains (last, so
  /// positional initialisers of the fields above keep their meaning).
  uint64_t ops_fused = 0;
};

}  // namespace switchyard
