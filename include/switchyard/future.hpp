// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::Future and Promise: results that arrive later, with `then`,
/// `when_all` and `when_any`.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "switchyard/detail/std_light.hpp"
#include "switchyard/error.hpp"
#include "switchyard/messages/std_memory.hpp"

namespace switchyard {

template <class T>
class Future;
template <class T>
class Promise;

namespace detail {

struct Unit {};
template <class T>
using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;

/// Result type of a continuation f for a Future<T>: f() for void, f(T) otherwise.
template <class T, class F>
struct ThenResult {
  using type = std::invoke_result_t<F, T>;
};
template <class F>
struct ThenResult<void, F> {
  using type = std::invoke_result_t<F>;
};

/// Whether the calling thread is running a reply handler of a Runtime (and
/// so the continuations it completes) or any continuation. Such a thread is one of the few that
/// move every request forward: blocking it on another result can wait for
/// itself. Defined in the library.
[[nodiscard]] bool on_runtime_thread() noexcept;

/// Marks the calling thread as running a continuation while it lives. A
/// continuation attached to a complete future runs at once on the thread
/// that attached it; the rules for continuations (no blocking get or wait)
/// then hold there too, so a continuation behaves the same wherever it
/// runs. Defined in the library.
class ContinuationScope {
 public:
  ContinuationScope() noexcept;
  ~ContinuationScope();
  ContinuationScope(const ContinuationScope&) = delete;
  ContinuationScope& operator=(const ContinuationScope&) = delete;
};

/// A move-only `void()` callable: continuations may own move-only state
/// (a promise, a unique_ptr), which std::function cannot hold.
class Task {
 public:
  Task() = default;
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, Task>) explicit Task(F f)
      : impl_(std::make_unique<Impl<F>>(std::move(f))) {}
  void operator()() { impl_->run(); }
  explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct Impl final : Base {
    explicit Impl(F f) : fn(std::move(f)) {}
    void run() override { fn(); }
    F fn;
  };
  std::unique_ptr<Base> impl_;
};

/// Counts arrivals down from n, from any threads; `arrive()` is true for the
/// one that reaches zero. Its atomic decrement is built in the library
/// (src/future.cpp), so this header needs no <atomic>.
class Countdown {
 public:
  explicit Countdown(size_t n) noexcept : remaining_(n) {}
  [[nodiscard]] bool arrive() noexcept;

 private:
  size_t remaining_;
};

/// The part of a future's state that does not depend on T: whether it is
/// complete, who waits and what runs then. Its lock and condition variable
/// are built in the library (src/future.cpp), so this header needs neither
/// <mutex> nor <condition_variable>: every consumer's translation unit is
/// spared them.
class CompletionCore {
 public:
  CompletionCore();
  ~CompletionCore();
  CompletionCore(const CompletionCore&) = delete;
  CompletionCore& operator=(const CompletionCore&) = delete;

  [[nodiscard]] bool ready() const;
  /// Blocks until complete; throws at once (invalid_argument) on a runtime
  /// thread when not complete, since the wait could need that thread.
  void wait() const;
  /// Waits at most `timeout` (negative: not at all); true when complete.
  [[nodiscard]] bool wait_for(std::chrono::nanoseconds timeout) const;
  /// Runs `f` once complete: now (on this thread) when already complete,
  /// else on the thread that completes it.
  void on_complete(Task f);

 protected:
  /// Unless already complete (the first completion wins): runs
  /// `assign(context)` under the lock, marks complete, wakes the waiters and
  /// runs the continuations outside the lock.
  void complete(void (*assign)(void* context), void* context);
  /// Runs `fn(context)` under the lock.
  void locked(void (*fn)(void* context), void* context) const;
  template <class F>
  void complete_with(F&& assign) {
    complete([](void* f) { (*static_cast<std::remove_reference_t<F>*>(f))(); }, &assign);
  }
  template <class F>
  void locked_with(F&& fn) const {
    locked([](void* f) { (*static_cast<std::remove_reference_t<F>*>(f))(); }, &fn);
  }

 private:
  struct Sync;
  Sync& sync() const;
  bool done_now() const;
  // A mutex and a condition variable live here, constructed by the library
  // (whose static_assert checks that they fit): no allocation per future.
  static constexpr std::size_t sync_size = 96;
  alignas(std::max_align_t) unsigned char sync_[sync_size];
  bool done_ = false;
  std::vector<Task> continuations_;
};

template <class T>
class SharedState : public CompletionCore {
 public:
  void set_value(Stored<T> v) {
    complete_with([&] { value_.emplace(std::move(v)); });
  }
  void set_error(std::exception_ptr e) {
    complete_with([&] { error_ = std::move(e); });
  }
  /// A copy of the value (rethrows the failure); valid any number of times.
  Stored<T> copy() const requires std::is_copy_constructible_v<Stored<T>> {
    wait();
    std::optional<Stored<T>> out;
    std::exception_ptr failure;
    locked_with([&] {
      if (error_)
        failure = error_;
      else if (value_)
        out.emplace(*value_);
    });
    return deliver(std::move(out), failure);
  }
  /// Moves the value out (rethrows the failure); later consumers fail.
  Stored<T> take() {
    wait();
    std::optional<Stored<T>> out;
    std::exception_ptr failure;
    locked_with([&] {
      if (error_) {
        failure = error_;
      } else if (value_) {
        out.emplace(std::move(*value_));
        value_.reset();
      }
    });
    return deliver(std::move(out), failure);
  }
  /// Copies when T can be copied (so every consumer sees the value), else
  /// moves it to this one consumer.
  Stored<T> consume() {
    if constexpr (std::is_copy_constructible_v<Stored<T>>)
      return copy();
    else
      return take();
  }
  [[nodiscard]] std::exception_ptr error() const {
    std::exception_ptr failure;
    locked_with([&] { failure = error_; });
    return failure;
  }

 private:
  static Stored<T> deliver(std::optional<Stored<T>> out, const std::exception_ptr& failure) {
    if (failure) std::rethrow_exception(failure);
    if (!out)
      throw Error(Errc::invalid_argument,
                  "Future: the value was already moved out (by get() on the only reference, or by the consumer "
                  "of a move-only value)");
    return std::move(*out);
  }

  std::optional<Stored<T>> value_;
  std::exception_ptr error_;
};

/// Fails the state when the last Promise goes without a result, so a lost
/// reply shows up as an error instead of a future that never completes.
template <class T>
struct BrokenPromiseGuard {
  std::shared_ptr<SharedState<T>> state;
  explicit BrokenPromiseGuard(std::shared_ptr<SharedState<T>> s) : state(std::move(s)) {}
  BrokenPromiseGuard(const BrokenPromiseGuard&) = delete;
  BrokenPromiseGuard& operator=(const BrokenPromiseGuard&) = delete;
  ~BrokenPromiseGuard() {
    // Kept promises (nearly all) build no error: an Error and its
    // exception_ptr were 2,600 instructions and three allocations a promise.
    if (state->ready()) return;
    // A destructor must not throw: without memory for the message, the
    // future fails with the bad_alloc instead.
    try {
      state->set_error(std::make_exception_ptr(
          Error(Errc::runtime_closed, "the request was abandoned without a result (broken promise)")));
    } catch (...) {
      state->set_error(std::current_exception());
    }
  }
};

}  // namespace detail

/// Write side of a Future. Copies share the result; the first value or
/// error wins; when the last copy goes without either, the future fails.
template <class T>
class Promise {
 public:
  /// A promise with a fresh, incomplete future.
  Promise()
      : state_(std::make_shared<detail::SharedState<T>>()),
        guard_(std::make_shared<detail::BrokenPromiseGuard<T>>(state_)) {}
  /// The future this promise completes (any number of times; all share).
  [[nodiscard]] Future<T> future() const { return Future<T>(state_); }
  /// Completes the future with `v` (ignored when already complete).
  void set_value(detail::Stored<T> v) const { state_->set_value(std::move(v)); }
  /// Completes a Future<void>.
  void set_value() const requires std::is_void_v<T> { state_->set_value(detail::Unit{}); }
  /// Fails the future with `e` (ignored when already complete).
  void set_error(std::exception_ptr e) const { state_->set_error(std::move(e)); }

 private:
  std::shared_ptr<detail::SharedState<T>> state_;
  std::shared_ptr<detail::BrokenPromiseGuard<T>> guard_;
};

/// The eventual result of an asynchronous request (a read, a sync).
///
/// Shared: copies refer to the same result, `get()` may be called any number
/// of times and after `then()`, and any number of continuations may be
/// chained, each receiving its own copy of the value (for a move-only T the
/// first consumer takes it and later ones fail). Failures surface as
/// switchyard::Error from get().
template <class T>
class Future {
 public:
  /// An empty future (valid() is false).
  Future() = default;
  /// The future of a shared state (Promise::future() makes these).
  explicit Future(std::shared_ptr<detail::SharedState<T>> s) : state_(std::move(s)) {}

  /// A future that is already complete with `v`.
  [[nodiscard]] static Future ready_value(detail::Stored<T> v = {}) {
    Promise<T> p;
    p.set_value(std::move(v));
    return p.future();
  }
  /// A future that is already failed with `e`.
  [[nodiscard]] static Future ready_error(std::exception_ptr e) {
    Promise<T> p;
    p.set_error(std::move(e));
    return p.future();
  }

  /// Whether this future refers to a result (not default-constructed).
  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  /// Whether the result (value or error) is there; never blocks.
  [[nodiscard]] bool ready() const { return check().ready(); }

  /// Blocks until the result is there and returns a copy of it; throws the
  /// failure as Error. Throws at once (invalid_argument) when called, on a
  /// result not yet there, from a continuation running on a runtime thread:
  /// that wait could need the blocked thread itself.
  T get() const& {
    if constexpr (std::is_void_v<T>)
      check().consume();
    else
      return check().consume();
  }
  /// As above; on the only reference to the result (`t.read().get()`) the
  /// value moves out instead of being copied. The future is empty afterwards.
  T get() && {
    auto state = std::move(state_);
    if (!state) throw Error(Errc::invalid_argument, "use of an empty Future");
    if constexpr (std::is_void_v<T>) {
      state->consume();
    } else {
      if (state.use_count() == 1) return state->take();
      return state->consume();
    }
  }

  /// Waits at most `d`; true when the result is ready.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    // Saturates instead of overflowing, both ways: wait_for(hours::max())
    // waits for ever, wait_for(hours::min()) not at all.
    const double ns = std::chrono::duration<double, std::nano>(d).count();
    if (!(ns > 0)) return check().wait_for(std::chrono::nanoseconds(0));
    const bool beyond = ns >= static_cast<double>(std::chrono::nanoseconds::max().count());
    return check().wait_for(beyond ? std::chrono::nanoseconds::max() : std::chrono::ceil<std::chrono::nanoseconds>(d));
  }
  /// Waits until the result is ready (same rule as get() on runtime threads).
  void wait() const { check().wait(); }

  /// Chains `f` without blocking a thread: f(T) (or f() for void) runs on
  /// the thread that completes this future, or at once if it is complete
  /// (inside another continuation: right after that one returns, so a
  /// chain of any length completes without growing the stack).
  /// Failures skip `f` and propagate; an exception thrown by `f` fails the
  /// returned future. `f` may be move-only. It must not block: it may run on
  /// a runtime thread. A continuation returning a `Future<U>` gives `Future<U>`.
  template <class F>
  auto then(F f) const {
    using U = typename detail::ThenResult<T, F>::type;
    if constexpr (is_future<U>::value) {
      using V = typename is_future<U>::value_type;
      Promise<V> next;
      auto src = state_;
      check().on_complete(detail::Task([src, next, f = std::move(f)]() mutable {
        try {
          U inner = invoke_with_value(f, *src);
          if (!inner.state_) throw Error(Errc::invalid_argument, "then: the continuation returned an empty Future");
          inner.on_complete_impl([inner_state = inner.state_, next](std::exception_ptr e) {
            if (e) {
              next.set_error(e);
              return;
            }
            if constexpr (std::is_void_v<V>)
              next.set_value();
            else
              next.set_value(inner_state->consume());
          });
        } catch (...) {
          next.set_error(std::current_exception());
        }
      }));
      return next.future();
    } else {
      Promise<U> next;
      auto src = state_;
      check().on_complete(detail::Task([src, next, f = std::move(f)]() mutable {
        try {
          if constexpr (std::is_void_v<U>) {
            invoke_with_value(f, *src);
            next.set_value();
          } else {
            next.set_value(invoke_with_value(f, *src));
          }
        } catch (...) {
          next.set_error(std::current_exception());
        }
      }));
      return next.future();
    }
  }

  /// Runs `f(std::exception_ptr)` on failure (nullptr on success) without
  /// consuming the value; for callbacks that need to see both outcomes.
  /// An exception thrown by `f` is dropped.
  template <class F>
  void on_complete(F f) const {
    check();
    on_complete_impl(std::move(f));
  }

 private:
  template <class>
  friend class Future;
  template <class U>
  struct is_future : std::false_type {
    using value_type = void;
  };
  template <class U>
  struct is_future<Future<U>> : std::true_type {
    using value_type = U;
  };

  template <class F>
  static decltype(auto) invoke_with_value(F& f, detail::SharedState<T>& src) {
    detail::ContinuationScope scope;
    if constexpr (std::is_void_v<T>) {
      src.consume();
      return f();
    } else {
      return f(src.consume());
    }
  }
  template <class F>
  void on_complete_impl(F f) const {
    auto src = state_;
    src->on_complete(detail::Task([src, f = std::move(f)]() mutable {
      // A callback is a continuation wherever it runs (see invoke_with_value).
      detail::ContinuationScope scope;
      try {
        f(src->error());
      } catch (...) {
      }
    }));
  }

  detail::SharedState<T>& check() const {
    if (!state_) throw Error(Errc::invalid_argument, "use of an empty Future");
    return *state_;
  }
  std::shared_ptr<detail::SharedState<T>> state_;
};

/// What `when_any` over futures of T gives: which future completed first
/// (its index in the input) and its value.
template <class T>
struct WhenAnyResult {
  size_t index = 0;
  T value;
};

/// Completes with every value, in input order, once all futures have
/// succeeded; fails as soon as any fails (with that failure). Empty input:
/// complete at once.
template <class T>
[[nodiscard]] auto when_all(const std::vector<Future<T>>& futures)
    -> Future<std::conditional_t<std::is_void_v<T>, void, std::vector<T>>> {
  using R = std::conditional_t<std::is_void_v<T>, void, std::vector<T>>;
  struct Gather {
    explicit Gather(size_t n) : remaining(n) {
      if constexpr (!std::is_void_v<T>) values.resize(n);
    }
    Promise<R> promise;
    detail::Countdown remaining;
    std::vector<std::optional<detail::Stored<T>>> values;
  };
  auto gather = std::make_shared<Gather>(futures.size());
  auto finish = [](Gather& g) {
    if constexpr (std::is_void_v<T>) {
      g.promise.set_value();
    } else {
      std::vector<T> out;
      out.reserve(g.values.size());
      for (auto& v : g.values) out.push_back(std::move(*v));
      g.promise.set_value(std::move(out));
    }
  };
  if (futures.empty()) {
    finish(*gather);
    return gather->promise.future();
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    if (!futures[i].valid()) throw Error(Errc::invalid_argument, "when_all: future " + std::to_string(i) + " is empty");
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    if constexpr (std::is_void_v<T>) {
      futures[i]
          .then([gather, finish] {
            if (gather->remaining.arrive()) finish(*gather);
          })
          .on_complete([gather](std::exception_ptr e) {
            if (e) gather->promise.set_error(e);
          });
    } else {
      futures[i]
          .then([gather, finish, i](T v) {
            gather->values[i].emplace(std::move(v));
            if (gather->remaining.arrive()) finish(*gather);
          })
          .on_complete([gather](std::exception_ptr e) {
            if (e) gather->promise.set_error(e);
          });
    }
  }
  return gather->promise.future();
}

/// when_all over futures of different types: a tuple of their values
/// (detail::Unit for a Future<void>).
template <class... Ts>
[[nodiscard]] Future<std::tuple<detail::Stored<Ts>...>> when_all(const Future<Ts>&... futures) {
  using Tuple = std::tuple<detail::Stored<Ts>...>;
  struct Gather {
    Promise<Tuple> promise;
    detail::Countdown remaining{sizeof...(Ts)};
    std::tuple<std::optional<detail::Stored<Ts>>...> values;
  };
  auto gather = std::make_shared<Gather>();
  if constexpr (sizeof...(Ts) == 0) {
    gather->promise.set_value(Tuple{});
  } else {
    auto finish = [](Gather& g) {
      g.promise.set_value(std::apply([](auto&... v) { return Tuple{std::move(*v)...}; }, g.values));
    };
    auto attach = [&]<size_t I>(std::integral_constant<size_t, I>, const auto& fut) {
      if (!fut.valid()) throw Error(Errc::invalid_argument, "when_all: future " + std::to_string(I) + " is empty");
      using F = std::decay_t<decltype(fut)>;
      if constexpr (std::is_same_v<F, Future<void>>) {
        fut.then([gather, finish] {
             std::get<I>(gather->values).emplace();
             if (gather->remaining.arrive()) finish(*gather);
           })
            .on_complete([gather](std::exception_ptr e) {
              if (e) gather->promise.set_error(e);
            });
      } else {
        fut.then([gather, finish](auto v) {
             std::get<I>(gather->values).emplace(std::move(v));
             if (gather->remaining.arrive()) finish(*gather);
           })
            .on_complete([gather](std::exception_ptr e) {
              if (e) gather->promise.set_error(e);
            });
      }
    };
    [&]<size_t... I>(std::index_sequence<I...>) { (attach(std::integral_constant<size_t, I>{}, futures), ...); }
    (std::index_sequence_for<Ts...>{});
  }
  return gather->promise.future();
}

/// Completes with the first of `futures` to complete: its index and value,
/// or its failure. Empty input fails with invalid_argument.
template <class T>
[[nodiscard]] auto when_any(const std::vector<Future<T>>& futures)
    -> Future<std::conditional_t<std::is_void_v<T>, size_t, WhenAnyResult<T>>> {
  using R = std::conditional_t<std::is_void_v<T>, size_t, WhenAnyResult<T>>;
  Promise<R> promise;
  if (futures.empty()) {
    promise.set_error(std::make_exception_ptr(Error(Errc::invalid_argument, "when_any: no futures given")));
    return promise.future();
  }
  for (size_t i = 0; i < futures.size(); ++i)
    if (!futures[i].valid()) throw Error(Errc::invalid_argument, "when_any: future " + std::to_string(i) + " is empty");
  for (size_t i = 0; i < futures.size(); ++i) {
    // The promise keeps the first completion; later ones are ignored.
    if constexpr (std::is_void_v<T>)
      futures[i].then([promise, i] { promise.set_value(i); }).on_complete([promise](std::exception_ptr e) {
        if (e) promise.set_error(e);
      });
    else
      futures[i]
          .then([promise, i](T v) {
            promise.set_value(R{i, std::move(v)});
          })
          .on_complete([promise](std::exception_ptr e) {
            if (e) promise.set_error(e);
          });
  }
  return promise.future();
}

}  // namespace switchyard
