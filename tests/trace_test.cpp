// SPDX-License-Identifier: Apache-2.0
// The tracer on its own (actors/trace.hpp): several writers, a buffer that
// stays bounded however long the trace, drops counted in the file, and a file
// that is a JSON array once the tracer is gone.
#include "actors/trace.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "support/watchdog.hpp"

using switchyard::Logger;
using switchyard::LogLevel;
using switchyard::actors::Tracer;
using namespace std::chrono_literals;

namespace {

struct TraceFile {
  explicit TraceFile(const std::string& what)
      : path(std::filesystem::temp_directory_path() /
             ("switchyard_tracer_" + what + "_" + std::to_string(::getpid()) + ".json")) {}
  ~TraceFile() { std::filesystem::remove(path); }
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;
  std::filesystem::path path;
};

nlohmann::json parse_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);  // throws (fails the test) on invalid JSON
}

// Slices named "op" and the count in the "trace events dropped" note (0 without one).
std::pair<uint64_t, uint64_t> slices_and_dropped(const nlohmann::json& events) {
  uint64_t slices = 0, dropped = 0;
  for (const auto& e : events) {
    if (e.at("ph") == "X" && e.at("name") == "op") ++slices;
    if (e.at("ph") == "i" && e.at("name") == "trace events dropped") dropped = e.at("args").at("count").get<uint64_t>();
  }
  return {slices, dropped};
}

}  // namespace

TEST_CASE("a tracer holds at most its buffer bound while writers outpace it", "[trace]") {
  TraceFile file("bounded");
  constexpr size_t bound = 64 * 1024;
  constexpr int writers = 2, per_writer = 20000;  // ~4 MB of events, 60x the bound
  std::atomic<size_t> most_held{0};
  uint64_t dropped = 0;
  {
    Tracer tracer(file.path.string(), {.flush_interval = 5ms, .flush_bytes = 4096, .max_held_bytes = bound});
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w) {
      threads.emplace_back([&, w] {
        for (int i = 0; i < per_writer; ++i) {
          const auto now = Tracer::Clock::now();
          tracer.slice(static_cast<uint32_t>(w), "op", now, now, "\"i\":" + std::to_string(i));
          const size_t held = tracer.held_bytes();
          size_t seen = most_held.load();
          while (held > seen && !most_held.compare_exchange_weak(seen, held)) {
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    dropped = tracer.dropped_events();
  }
  CHECK(most_held.load() <= bound);
  const auto [slices, noted] = slices_and_dropped(parse_file(file.path));
  CHECK(noted == dropped);
  CHECK(slices + dropped == uint64_t{writers} * per_writer);
  CHECK(slices > 0);
}

TEST_CASE("events past the buffer bound are dropped and counted in the file", "[trace]") {
  TraceFile file("dropped");
  constexpr int events = 100;
  uint64_t dropped = 0;
  std::vector<std::string> warnings;  // the writer thread has stopped when the tracer is gone
  {
    // The writer wakes only when the tracer goes: everything waits in the
    // buffer, which holds a few events.
    Tracer tracer(file.path.string(), {.flush_interval = 1h, .flush_bytes = size_t{1} << 30, .max_held_bytes = 512},
                  Logger(LogLevel::warn, [&warnings](LogLevel, std::string_view m) { warnings.emplace_back(m); }));
    for (int i = 0; i < events; ++i) {
      const auto now = Tracer::Clock::now();
      tracer.slice(0, "op", now, now, "\"i\":" + std::to_string(i));
    }
    CHECK(tracer.held_bytes() <= 512);
    dropped = tracer.dropped_events();
  }
  const auto [slices, noted] = slices_and_dropped(parse_file(file.path));
  CHECK(dropped >= events - 5);
  CHECK(noted == dropped);
  CHECK(slices + dropped == events);
  REQUIRE(warnings.size() == 1);  // the drops, reported once, through the log
  CHECK(warnings[0].find(std::to_string(dropped) + " events dropped") != std::string::npos);
}

TEST_CASE("names and arguments with any bytes leave the trace valid JSON", "[trace]") {
  TraceFile file("bytes");
  const std::string nasty = "q\"b\\n\nt\tc\x01 bad \xff\xfe end \xc3\xa9";
  {
    Tracer tracer(file.path.string());
    const auto now = Tracer::Clock::now();
    tracer.slice(0, nasty, now, now, "\"error\":\"" + switchyard::actors::json_escape(nasty) + "\"");
  }
  const auto events = parse_file(file.path);
  bool found = false;
  for (const auto& e : events) {
    if (e.at("ph") != "X") continue;
    found = true;
    // The invalid bytes became U+FFFD; everything else came back as it was.
    const std::string expected = "q\"b\\n\nt\tc\x01 bad \xef\xbf\xbd\xef\xbf\xbd end \xc3\xa9";
    CHECK(e.at("name").get<std::string>() == expected);
    CHECK(e.at("args").at("error").get<std::string>() == expected);
  }
  CHECK(found);
}

TEST_CASE("a tracer that cannot create its file says which and why", "[trace]") {
  CHECK_THROWS_WITH(Tracer("/nonexistent-dir/trace.json"),
                    Catch::Contains("/nonexistent-dir/trace.json") && Catch::Contains("No such file"));
}

TEST_CASE("a FIFO with no reader as the trace path is refused at once, not waited on", "[trace]") {
  const auto dir = std::filesystem::temp_directory_path() / ("sy-trace-fifo-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto fifo = (dir / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // A blocking open would wait here for a reader that never comes.
  switchyard::testing::Watchdog watchdog(std::chrono::seconds(30), "a tracer opening a FIFO without a reader");
  CHECK_THROWS_WITH(Tracer(fifo), Catch::Contains(fifo) && Catch::Contains("No such device or address"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a second tracer of the same file is refused and the first one's trace stays whole", "[trace]") {
  TraceFile file("shared");
  {
    Tracer first(file.path.string());
    const auto now = Tracer::Clock::now();
    first.slice(0, "op", now, now, "");
    CHECK_THROWS_WITH(Tracer(file.path.string()),
                      Catch::Contains(file.path.string()) && Catch::Contains("another Runtime"));
    first.slice(0, "op", now, now, "");
  }
  CHECK(slices_and_dropped(parse_file(file.path)).first == 2);
  {
    // Once the first is gone the file is free again, and a new trace starts empty.
    Tracer again(file.path.string());
    const auto now = Tracer::Clock::now();
    again.slice(0, "op", now, now, "");
  }
  CHECK(slices_and_dropped(parse_file(file.path)).first == 1);
}
