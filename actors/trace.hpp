// SPDX-License-Identifier: Apache-2.0
#pragma once

// Chrome/Perfetto trace of the runners (JSON trace event format): one track
// per runner, one slice per op, bridges as flow arrows from the exporting
// to the importing runner. Open the file in ui.perfetto.dev or
// chrome://tracing. Off unless a path is given (SWITCHYARD_TRACE or
// RuntimeOptions::trace_path): runners then hold a null tracer and pay one
// branch per op.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::actors {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Tracer(std::string path);
  /// Writes the file (the runtime drops its tracer after every runner has
  /// stopped, so this is the end of the trace).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  /// Names track `track` (one per runner).
  void name_track(uint32_t track, std::string_view name);
  /// A complete slice [begin, end) on `track`; `args` is a JSON object body
  /// (`"k": v, ...`), already escaped.
  void slice(uint32_t track, std::string_view name, Clock::time_point begin, Clock::time_point end,
             std::string_view args);
  /// Flow arrow `id`: starts on one track, ends on another (binds to the
  /// slice enclosing `at` on each track).
  void flow_begin(uint32_t track, uint64_t id, Clock::time_point at);
  void flow_end(uint32_t track, uint64_t id, Clock::time_point at);

  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  [[nodiscard]] double micros(Clock::time_point t) const;

  std::string path_;
  Clock::time_point start_ = Clock::now();
  std::mutex mutex_;
  std::string events_;  // comma-separated JSON objects
};

/// `s` as the inside of a JSON string literal.
[[nodiscard]] std::string json_escape(std::string_view s);

}  // namespace switchyard::actors
