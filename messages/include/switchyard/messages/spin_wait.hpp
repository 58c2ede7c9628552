// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace switchyard {

/// Polls a condition for a few microseconds before its caller parks on a
/// condition variable (a client waiting for a reply, a device's kernel
/// thread between parallel ops, a caller waiting for the last of them) or
/// its mailbox (a runner whose next message is usually on its way).
///
/// Why: on the VMs this runs on, waking a parked thread on another core
/// costs ~13 us (a condition variable ping-pong between two threads takes
/// 26 us there, a polled one 0.5 us), so a round trip of two wake-ups was
/// bimodal, 8-10 us when both threads shared a core and ~29 us when not.
/// Between polls the thread yields its core: a thread that is runnable on
/// the same core (the very thread that will answer, on one core, or the
/// runner among 8 polling clients) gets it at once, where a pause loop held
/// the core until its budget ran out (tried earlier: it halved 8-thread
/// throughput; docs/PERFORMANCE.md, "Polling before parking").
///
/// Adaptive: after `kMissesToBackOff` waits in a row that ran out of budget,
/// only every `kProbeEvery`-th wait polls, so a thread whose waits are long
/// (a slow op, a sparse service) stops spending CPU on them; one wait
/// answered within the budget restores polling.
class SpinWait {
 public:
  static constexpr std::chrono::microseconds kBudget{30};

  /// True when `ready()` became true within `limit`; `ready` is also asked
  /// once when polling is backed off.
  template <class Ready>
  bool operator()(Ready&& ready, std::chrono::nanoseconds limit = kBudget) {
    if (misses_ >= kMissesToBackOff && ++skipped_ % kProbeEvery != 0) return ready();
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      if (ready()) {
        misses_ = 0;
        return true;
      }
      if (std::chrono::steady_clock::now() - start >= limit) break;
      std::this_thread::yield();
    }
    if (misses_ < kMissesToBackOff) ++misses_;
    return false;
  }

 private:
  static constexpr uint32_t kMissesToBackOff = 4;
  static constexpr uint32_t kProbeEvery = 16;
  uint32_t misses_ = 0;
  uint32_t skipped_ = 0;
};

}  // namespace switchyard
