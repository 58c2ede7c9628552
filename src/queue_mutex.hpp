// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>

namespace switchyard::detail {

/// The lock of a device's op queue: a submitting thread takes it twice per
/// op (the op, then the drop of the tensor it replaced), for a few dozen
/// instructions each time, and contention is rare (the flusher's tick,
/// other client threads of the same device). `std::mutex` costs ~55
/// instructions per lock and unlock there, in calls into libpthread
/// (callgrind, docs/PERFORMANCE.md); this one is one atomic operation each
/// way when nobody waits. A waiter sleeps in the kernel (C++20 atomic wait,
/// a futex on Linux), so a holder that is preempted, or blocked in a send,
/// costs the waiters no CPU.
///
/// The three-state mutex of Drepper's "Futexes Are Tricky": 0 free,
/// 1 locked, 2 locked and maybe waited for. Meets Lockable, for
/// `std::lock_guard` and `std::scoped_lock`.
class QueueMutex {
 public:
  QueueMutex() = default;
  QueueMutex(const QueueMutex&) = delete;
  QueueMutex& operator=(const QueueMutex&) = delete;

  void lock() noexcept {
    int expected = 0;
    if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed))
      lock_contended(expected);
  }
  [[nodiscard]] bool try_lock() noexcept {
    int expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.fetch_sub(1, std::memory_order_release) != 1) {
      state_.store(0, std::memory_order_release);
      state_.notify_one();
    }
  }

 private:
  void lock_contended(int seen) noexcept {
    // A holder usually leaves within a few dozen instructions: look again
    // a few times before sleeping.
    for (int i = 0; i < 64 && seen == 1; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      seen = 0;
      if (state_.compare_exchange_weak(seen, 1, std::memory_order_acquire, std::memory_order_relaxed)) return;
    }
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
      state_.wait(2, std::memory_order_relaxed);
      seen = state_.exchange(2, std::memory_order_acquire);
    }
  }

  std::atomic<int> state_{0};
};

}  // namespace switchyard::detail
