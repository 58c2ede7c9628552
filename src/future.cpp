// SPDX-License-Identifier: Apache-2.0
// The T-independent half of a future's state: its lock, condition variable
// and continuations, kept out of the public header.

#include "switchyard/future.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <utility>

#include "switchyard/error.hpp"
#include "switchyard/messages/spin_wait.hpp"

namespace switchyard::detail {

bool Countdown::arrive() noexcept {
  static_assert(std::atomic_ref<size_t>::required_alignment <= alignof(size_t));
  return std::atomic_ref<size_t>(remaining_).fetch_sub(1, std::memory_order_acq_rel) == 1;
}

struct CompletionCore::Sync {
  std::mutex mutex;
  std::condition_variable completed;
};

CompletionCore::CompletionCore() {
  // The header reserves the bytes without knowing the standard library's
  // sizes; every library build checks that they fit.
  static_assert(sizeof(Sync) <= sizeof(sync_), "CompletionCore::sync_ is too small");
  static_assert(alignof(Sync) <= alignof(std::max_align_t));
  ::new (static_cast<void*>(sync_)) Sync();
}

CompletionCore::~CompletionCore() { sync().~Sync(); }

CompletionCore::Sync& CompletionCore::sync() const {
  return *std::launder(reinterpret_cast<Sync*>(const_cast<unsigned char*>(sync_)));
}

// Written under the lock by complete(), but read without it while polling.
bool CompletionCore::done_now() const {
  return std::atomic_ref<bool>(const_cast<bool&>(done_)).load(std::memory_order_acquire);
}

bool CompletionCore::ready() const { return done_now(); }

namespace {
// Per client thread: how its recent waits went decides whether it polls.
thread_local SpinWait client_spin;
}  // namespace

void CompletionCore::wait() const {
  if (done_now()) return;
  if (on_runtime_thread())
    throw Error(Errc::invalid_argument,
                "Future: blocking wait inside a continuation or reply handler would stall the runtime's own "
                "threads (use then(), or wait_for with a bound)");
  if (client_spin([this] { return done_now(); })) return;
  std::unique_lock lock(sync().mutex);
  sync().completed.wait(lock, [&] { return done_; });
}

bool CompletionCore::wait_for(std::chrono::nanoseconds timeout) const {
  if (done_now()) return true;
  if (timeout > std::chrono::nanoseconds::zero() && !on_runtime_thread()) {
    const auto start = std::chrono::steady_clock::now();
    if (client_spin([this] { return done_now(); }, std::min<std::chrono::nanoseconds>(timeout, SpinWait::kBudget)))
      return true;
    timeout -= std::min(timeout,
                        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start));
  }
  std::unique_lock lock(sync().mutex);
  // condition_variable::wait_for adds the timeout to now(), which overflows
  // for nanoseconds::max(): beyond a century the wait is simply unbounded.
  if (timeout >= std::chrono::hours(24 * 365 * 100)) {
    sync().completed.wait(lock, [&] { return done_; });
    return true;
  }
  return sync().completed.wait_for(lock, timeout, [&] { return done_; });
}

namespace {
// Continuations run one after another, not one inside another: completing
// a future inside a continuation queues what it starts on this thread, and
// the outermost run takes the queue until it is empty. A chain of 100,000
// `then`s completed recursively overflowed the stack of whichever thread
// completed its head (a runner's included).
struct Trampoline {
  bool running = false;
  std::deque<Task> queued;
};
thread_local Trampoline trampoline;

void run_continuation(Task f) {
  auto& t = trampoline;
  if (t.running) {
    t.queued.push_back(std::move(f));
    return;
  }
  t.running = true;
  struct Done {
    Trampoline& t;
    ~Done() { t.running = false; }
  } done{t};
  f();
  while (!t.queued.empty()) {
    Task next = std::move(t.queued.front());
    t.queued.pop_front();
    next();
  }
}
}  // namespace

void CompletionCore::on_complete(Task f) {
  {
    std::lock_guard lock(sync().mutex);
    if (!done_) {
      continuations_.push_back(std::move(f));
      return;
    }
  }
  run_continuation(std::move(f));
}

void CompletionCore::complete(void (*assign)(void*), void* context) {
  std::vector<Task> continuations;
  {
    std::lock_guard lock(sync().mutex);
    if (done_) return;  // the first completion wins
    assign(context);
    std::atomic_ref<bool>(done_).store(true, std::memory_order_release);
    continuations.swap(continuations_);
  }
  sync().completed.notify_all();
  for (auto& c : continuations) run_continuation(std::move(c));
}

void CompletionCore::locked(void (*fn)(void*), void* context) const {
  std::lock_guard lock(sync().mutex);
  fn(context);
}

}  // namespace switchyard::detail
