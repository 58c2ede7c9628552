// SPDX-License-Identifier: Apache-2.0
#pragma once

// What both batchers (MLP and ONNX) decide alike: which replica takes the
// next batch, and which queued requests are no longer worth running.

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <stdexcept>
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

/// Marks the replicas whose device the runtime already knows is lost: a
/// request arriving after the loss then goes to another replica, where a
/// replica was retired only when one of its own batches failed.
template <class DeviceOf>
void mark_lost(std::vector<char>& lost, DeviceOf device_of) {
  for (size_t i = 0; i < lost.size(); ++i)
    if (lost[i] == 0 && device_of(i).lost()) lost[i] = 1;
}

/// Whether a replica other than `except` and the lost ones is left.
inline bool any_left(const std::vector<char>& lost, size_t except) {
  for (size_t i = 0; i < lost.size(); ++i)
    if (i != except && lost[i] == 0) return true;
  return false;
}

/// The least loaded replica, from `next` round-robin among equals, leaving
/// out lost ones while any other is left. A lost replica fails its batches
/// at once, so it always looked least loaded and took every other batch.
inline size_t least_loaded(const std::vector<int64_t>& in_flight, const std::vector<char>& lost, size_t next) {
  const size_t n = in_flight.size();
  if (n == 0) return 0;  // no replica: the batchers never ask then
  size_t best = n;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next + k) % n;
    if (lost[i]) continue;
    if (best == n || in_flight[i] < in_flight[best]) best = i;
  }
  return best == n ? next % n : best;
}

/// A request dropped from the queue at its deadline (answered 504, as the
/// server's own timer does, whichever comes first).
struct QueueTimeout : std::runtime_error {
  QueueTimeout() : std::runtime_error("timed out waiting for the model") {}
};

/// Takes out of `queue` every request queued for `after` or longer (0:
/// none), failing its promise: its client got its 504 at that moment, and
/// running it would only keep the device from the requests still waiting
/// (under overload the queue grew with work nobody would read). Returns the
/// rows taken out.
template <class Job, class RowsOf>
int64_t drop_expired(std::deque<std::shared_ptr<Job>>& queue, std::chrono::milliseconds after, RowsOf rows_of) {
  if (after.count() <= 0) return 0;
  const auto now = std::chrono::steady_clock::now();
  int64_t rows = 0;
  for (auto it = queue.begin(); it != queue.end();) {
    if (now - (*it)->arrived < after) {
      ++it;
      continue;
    }
    rows += rows_of(**it);
    (*it)->done.set_error(std::make_exception_ptr(QueueTimeout()));
    it = queue.erase(it);
  }
  return rows;
}

}  // namespace serve
