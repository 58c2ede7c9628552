// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace switchyard::detail {

/// The lock of a device's op queue: a submitting thread takes it twice per
/// op (the op, then the drop of the tensor it replaced), for a few dozen
/// instructions each time, and contention is rare (the flusher's tick,
/// other client threads of the same device). `std::mutex` costs ~55
/// instructions per lock and unlock there, in calls into libpthread
/// (callgrind, docs/PERFORMANCE.md); this one is one atomic operation each
/// way when nobody waits. A waiter sleeps in the kernel (a futex on Linux,
/// C++20 atomic wait elsewhere), so a holder that is preempted, or blocked in a send,
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
    if (state_.exchange(0, std::memory_order_release) == 2) wake_one();
  }

 private:
  void lock_contended(int seen) noexcept {
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
      wait_while_2();
      seen = state_.exchange(2, std::memory_order_acquire);
    }
  }

  // The futex calls themselves on Linux, as glibc's mutex makes them:
  // libstdc++ 12's atomic wait spins and yields first, and its notify goes
  // through a shared waiter table, which tripled the p99 of 8 threads doing
  // round trips on one device (bench/op_cost threads).
#if defined(__linux__)
  void wait_while_2() noexcept {
    syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
  }
  void wake_one() noexcept {
    syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
#else
  void wait_while_2() noexcept { state_.wait(2, std::memory_order_relaxed); }
  void wake_one() noexcept { state_.notify_one(); }
#endif

  std::atomic<int> state_{0};
  static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free,
                "the futex word is the atomic's int");
};

}  // namespace switchyard::detail
