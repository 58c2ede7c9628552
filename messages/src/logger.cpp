// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/logger.hpp"

namespace switchyard {

std::string_view name_of(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::trace:
      return "trace";
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
    case LogLevel::off:
      return "off";
  }
  return "unknown";
}

Logger::Logger(LogLevel threshold, LogSink sink) {
  if (sink && threshold < LogLevel::off) state_ = std::make_shared<const State>(State{threshold, std::move(sink)});
}

void Logger::write(LogLevel level, std::string_view message) const noexcept {
  if (!enabled(level)) return;
  try {
    state_->sink(level, message);
  } catch (...) {
    // The sink's own failure: the runtime carries on without this message.
  }
}

}  // namespace switchyard
