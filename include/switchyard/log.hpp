// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// The library's log: a level and a callback in RuntimeOptions. Silent by
/// default: without a sink (or at LogLevel::off) nothing is written anywhere
/// and no message is even formatted.

#include <cstdint>
#include <string_view>

#include "switchyard/detail/std_light.hpp"

namespace switchyard {

/// Severity of a log message, least severe first. As a threshold, a level
/// lets through its own messages and those of the levels after it; `off`
/// lets through none.
enum class LogLevel : uint8_t { trace, debug, info, warn, error, off };

/// Receives the library's log messages, one call per message. `message` is
/// one line without a trailing newline, valid only during the call.
///
/// Threads: the sink runs on the thread where the event happens: the thread
/// constructing the Runtime or calling Runtime::connect (devices started or
/// unavailable, workers connected), a device's own runner thread (failed
/// ops, failed bridges out of a local device) or one of the runtime's
/// scheduler threads (devices lost, bridges out of remote devices). Calls may
/// come from several threads at once, so the sink must be thread safe. It
/// must return quickly and must not block or call into the Runtime: those
/// threads run ops and complete futures. An exception it throws is caught
/// and dropped.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;

/// "trace", "debug", "info", "warn", "error" or "off".
[[nodiscard]] std::string_view name_of(LogLevel level) noexcept;

}  // namespace switchyard
