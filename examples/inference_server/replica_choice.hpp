// SPDX-License-Identifier: Apache-2.0
#pragma once

// Which replica takes the next batch, for both batchers (MLP and ONNX).

#include <cstdint>
#include <exception>
#include <vector>

#include <switchyard/switchyard.hpp>

namespace serve {

/// Whether `e` is a device's loss (its worker gone): such a device never
/// comes back (a reconnect gives new devices), so its replica takes no more.
inline bool device_lost(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const switchyard::Error& err) {
    return err.code() == switchyard::Errc::device_lost;
  } catch (...) {
    return false;
  }
}

/// The least loaded replica, from `next` round-robin among equals, leaving
/// out lost ones while any other is left. A lost replica fails its batches
/// at once, so it always looked least loaded and took every other batch.
inline size_t least_loaded(const std::vector<int64_t>& in_flight, const std::vector<char>& lost, size_t next) {
  const size_t n = in_flight.size();
  size_t best = n;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next + k) % n;
    if (lost[i]) continue;
    if (best == n || in_flight[i] < in_flight[best]) best = i;
  }
  return best == n ? next % n : best;
}

}  // namespace serve
