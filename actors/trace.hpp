// SPDX-License-Identifier: Apache-2.0
#pragma once

// Chrome/Perfetto trace of the runners (Trace Event Format, JSON Array
// Format): the process named, one track per runner named by its device, one
// slice per op, bridges as flow arrows from the exporting to the importing
// runner. Open the file in ui.perfetto.dev or chrome://tracing. Off unless a
// path is given (SWITCHYARD_TRACE or RuntimeOptions::trace_path): runners
// then hold a null tracer and pay one branch per op.
//
// Events go to the file as the runtime runs: a runner formats its event and
// appends it to a buffer under a mutex (no disk I/O on the runner's thread);
// a writer thread moves the buffer to the file every flush interval, or
// sooner once it holds flush_bytes, and closes the array (`]`) when the
// tracer is destroyed. The format allows the closing `]` to be missing, so a
// process that dies leaves a readable trace of all but its last interval.
// Memory stays bounded however long the trace: an event that would take the
// buffer past max_held_bytes (the disk cannot keep up) is dropped and
// counted, and the count is written into the trace at the end.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "switchyard/messages/logger.hpp"

namespace switchyard::actors {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    /// The longest an event waits in memory before it reaches the file.
    std::chrono::milliseconds flush_interval{100};
    /// The writer wakes early once this many bytes wait.
    size_t flush_bytes = size_t{1} << 20;
    /// Events beyond this many waiting bytes are dropped (and counted).
    size_t max_held_bytes = size_t{64} << 20;
  };

  /// Creates (truncates) `path`, writes the opening `[` and the process's
  /// name, and starts the writer. Throws std::runtime_error naming the path
  /// and the reason when the file cannot be created.
  /// Dropped events and write failures are reported through `log` (warn).
  Tracer(std::string path, Limits limits, Logger log = {});
  explicit Tracer(std::string path) : Tracer(std::move(path), Limits{}, Logger{}) {}
  /// Writes what is left, the dropped-event count if any, and the closing
  /// `]` (the runtime drops its tracer after every runner has stopped, so
  /// this is the end of the trace).
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  /// Names track `track` (one per runner) and orders it by `track`.
  void name_track(uint32_t track, std::string_view name);
  /// A complete slice [begin, end) on `track`; `args` is a JSON object body
  /// (`"k": v, ...`), already escaped.
  void slice(uint32_t track, std::string_view name, Clock::time_point begin, Clock::time_point end,
             std::string_view args);
  /// Flow arrow `id`: starts on one track, ends on another (binds to the
  /// slice enclosing `at` on each track). The id is written as a hex string:
  /// JSON readers that hold numbers as doubles (JavaScript, jq) would merge
  /// 64-bit ids that differ only in their low bits.
  void flow_begin(uint32_t track, uint64_t id, Clock::time_point at);
  void flow_end(uint32_t track, uint64_t id, Clock::time_point at);

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Bytes of events waiting for the writer (at most Limits::max_held_bytes).
  [[nodiscard]] size_t held_bytes() const;
  /// Events dropped because the writer fell max_held_bytes behind.
  [[nodiscard]] uint64_t dropped_events() const;

 private:
  [[nodiscard]] double micros(Clock::time_point t) const;
  /// Appends one event (a JSON object) to the buffer, or counts it dropped.
  void append(std::string_view event);
  void write_loop();
  /// Writes all of `bytes` to the file; on failure reports once and stops writing.
  void write_out(std::string_view bytes);

  std::string path_;
  Limits limits_;
  Logger log_;
  int pid_;
  int fd_ = -1;
  bool write_failed_ = false;  // writer thread only
  Clock::time_point start_ = Clock::now();
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::string held_;  // events not yet written, each preceded by ",\n"
  uint64_t dropped_ = 0;
  bool stopping_ = false;
  std::thread writer_;
};

/// `s` as the inside of a JSON string literal.
[[nodiscard]] std::string json_escape(std::string_view s);

}  // namespace switchyard::actors
