// SPDX-License-Identifier: Apache-2.0
#pragma once

// The library's logger: what a Runtime makes of RuntimeOptions::log_level
// and log_sink, handed by value to the router, the runners and whatever else
// reports events. There is no global logger: code that logs is given one.

#include <memory>
#include <string>
#include <utility>

#include "switchyard/log.hpp"

namespace switchyard {

/// Cheap to copy (one shared pointer): every copy calls the same sink, so a
/// stateful sink is never duplicated. Immutable once made, hence safe to use
/// from any thread. A default-constructed Logger is silent.
class Logger {
 public:
  /// Silent.
  Logger() = default;
  /// Silent when `sink` is empty or `threshold` is LogLevel::off.
  Logger(LogLevel threshold, LogSink sink);

  /// Whether a message of `level` reaches the sink.
  [[nodiscard]] bool enabled(LogLevel level) const noexcept {
    return state_ != nullptr && level >= state_->threshold && level != LogLevel::off;
  }
  /// Hands `message` to the sink when `level` is enabled. Never throws: an
  /// exception from the sink is dropped.
  void write(LogLevel level, std::string_view message) const noexcept;
  /// Calls `make()` (returning the message) only when `level` is enabled,
  /// so a disabled message costs one comparison and formats nothing.
  template <class Make>
  void log(LogLevel level, Make&& make) const noexcept {
    if (!enabled(level)) return;
    try {
      write(level, std::forward<Make>(make)());
    } catch (...) {  // building the message failed (bad_alloc): drop it
    }
  }

 private:
  struct State {
    LogLevel threshold;
    LogSink sink;
  };
  std::shared_ptr<const State> state_;
};

}  // namespace switchyard
