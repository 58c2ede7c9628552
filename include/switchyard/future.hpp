#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "switchyard/error.hpp"

namespace switchyard {

template <class T>
class Future;

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

template <class T>
class SharedState {
 public:
  void set_value(Stored<T> v) {
    complete([&] { value_.emplace(std::move(v)); });
  }
  void set_error(std::exception_ptr e) {
    complete([&] { error_ = std::move(e); });
  }
  [[nodiscard]] bool ready() const {
    std::lock_guard lock(mutex_);
    return done_;
  }
  void wait() const {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
  }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, d, [&] { return done_; });
  }
  /// Value or rethrow; valid once ready.
  Stored<T> take() {
    wait();
    if (error_) std::rethrow_exception(error_);
    if (!value_) throw Error(Errc::invalid_argument, "Future::get called twice");
    Stored<T> v = std::move(*value_);
    value_.reset();
    return v;
  }
  /// Runs f(state) once complete: now (on this thread) if already done, else
  /// on the thread that completes it.
  void on_complete(std::function<void()> f) {
    {
      std::lock_guard lock(mutex_);
      if (!done_) {
        continuations_.push_back(std::move(f));
        return;
      }
    }
    f();
  }
  [[nodiscard]] std::exception_ptr error() const { return error_; }

 private:
  template <class F>
  void complete(F&& assign) {
    std::vector<std::function<void()>> conts;
    {
      std::lock_guard lock(mutex_);
      if (done_) return;  // first completion wins
      assign();
      done_ = true;
      conts.swap(continuations_);
    }
    cv_.notify_all();
    for (auto& c : conts) c();
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::optional<Stored<T>> value_;
  std::exception_ptr error_;
  std::vector<std::function<void()>> continuations_;
};

}  // namespace detail

/// Write side of a Future.
template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<detail::SharedState<T>>()) {}
  [[nodiscard]] Future<T> future() const { return Future<T>(state_); }
  void set_value(detail::Stored<T> v) const { state_->set_value(std::move(v)); }
  void set_value() const requires std::is_void_v<T> { state_->set_value(detail::Unit{}); }
  void set_error(std::exception_ptr e) const { state_->set_error(std::move(e)); }

 private:
  std::shared_ptr<detail::SharedState<T>> state_;
};

/// The eventual result of an asynchronous request (a read, a sync).
/// Failures surface as switchyard::Error from get(). Copies share the state.
template <class T>
class Future {
 public:
  Future() = default;
  explicit Future(std::shared_ptr<detail::SharedState<T>> s) : state_(std::move(s)) {}

  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  [[nodiscard]] bool ready() const { return check().ready(); }

  /// Blocks until the result is there; throws the failure as Error.
  T get() {
    if constexpr (std::is_void_v<T>)
      check().take();
    else
      return check().take();
  }

  /// Waits at most `d`; true when the result is ready.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return check().wait_for(d);
  }
  void wait() const { check().wait(); }

  /// Chains `f` without blocking a thread: f(T) (or f() for void) runs on
  /// the thread that completes this future, or at once if it is complete.
  /// Failures skip `f` and propagate; an exception thrown by `f` fails the
  /// returned future. `f` must not block: it may run on an actor thread.
  template <class F>
  auto then(F f) -> Future<typename detail::ThenResult<T, F>::type> {
    using U = typename detail::ThenResult<T, F>::type;
    Promise<U> next;
    auto src = state_;
    check().on_complete([src, next, f = std::move(f)]() mutable {
      try {
        if constexpr (std::is_void_v<T>) {
          src->take();
          if constexpr (std::is_void_v<U>) {
            f();
            next.set_value();
          } else {
            next.set_value(f());
          }
        } else {
          if constexpr (std::is_void_v<U>) {
            f(src->take());
            next.set_value();
          } else {
            next.set_value(f(src->take()));
          }
        }
      } catch (...) {
        next.set_error(std::current_exception());
      }
    });
    return next.future();
  }

  /// Runs `f(std::exception_ptr)` on failure (nullptr on success) without
  /// consuming the value; for callbacks that need to see both outcomes.
  template <class F>
  void on_complete(F f) const {
    auto src = state_;
    check().on_complete([src, f = std::move(f)]() mutable { f(src->error()); });
  }

 private:
  detail::SharedState<T>& check() const {
    if (!state_) throw Error(Errc::invalid_argument, "use of an empty Future");
    return *state_;
  }
  std::shared_ptr<detail::SharedState<T>> state_;
};

}  // namespace switchyard
