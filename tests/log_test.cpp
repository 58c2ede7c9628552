// SPDX-License-Identifier: Apache-2.0
// The library's log (RuntimeOptions::log_sink / log_level): what reaches a
// sink at each level, that a runtime without one writes nothing at all, and
// that a sink which throws changes nothing.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fcntl.h>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include <switchyard/switchyard.hpp>

using namespace switchyard;

namespace {

// Collects what the runtime logs; called from runtime threads, hence the lock.
class Collected {
 public:
  LogSink sink() {
    return [this](LogLevel level, std::string_view message) {
      std::lock_guard lock(mutex_);
      lines_.push_back({level, std::string(message)});
    };
  }
  struct Line {
    LogLevel level;
    std::string message;
  };
  std::vector<Line> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  // The level of the first message containing `part`, if any.
  std::optional<LogLevel> level_of(const std::string& part) const {
    for (const auto& l : lines())
      if (l.message.find(part) != std::string::npos) return l.level;
    return std::nullopt;
  }
  std::string dump() const {
    std::string out;
    for (const auto& l : lines()) out += std::string(name_of(l.level)) + ": " + l.message + "\n";
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Line> lines_;
};

Errc error_code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return Errc{};
}

// One of each event the runtime logs without a network: a device started, a
// requested kind with no devices, an op failing on its device (index out of
// range, seen only by the kernel), an op inheriting that failure, a bridge
// of the failed tensor, a connect that fails. Checks what the caller sees
// (the same whatever the sink does).
void run_events(RuntimeOptions options) {
  options.devices = {"cpu:0", "cpu:1", "nosuchkind:*"};
  {
    Runtime rt(std::move(options));
    auto cpu0 = rt.device("cpu:0");
    auto a = cpu0.tensor<float>({1, 2, 3}, {3});
    auto idx = cpu0.tensor<int64_t>({0, 7}, {2});
    auto bad = a.index_select(0, idx);
    auto worse = bad * 2;
    CHECK(error_code_of([&] { (void)bad.read().get(); }) == Errc::index_out_of_range);
    CHECK(error_code_of([&] { (void)worse.read().get(); }) == Errc::index_out_of_range);
    CHECK(error_code_of([&] { (void)bad.to(rt.device("cpu:1")).read().get(); }) == Errc::index_out_of_range);
    // Port 1 on loopback: nothing listens there, the connect fails at once.
    CHECK(error_code_of([&] { (void)rt.connect("127.0.0.1", 1); }) == Errc::worker_unreachable);
    CHECK((a + a).to_vector<float>() == std::vector<float>{2, 4, 6});
    CHECK(rt.unavailable().size() == 1);
  }
}

// What the process writes to its stdout and stderr while `f` runs.
std::string output_of(const std::function<void()>& f) {
  std::fflush(stdout);
  std::fflush(stderr);
  char path[] = "/tmp/switchyard-log-test-XXXXXX";
  int file = mkstemp(path);
  REQUIRE(file >= 0);
  unlink(path);
  int saved_out = dup(1), saved_err = dup(2);
  dup2(file, 1);
  dup2(file, 2);
  f();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = pread(file, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0;)
    text.append(buf, static_cast<size_t>(n));
  close(file);
  return text;
}

}  // namespace

TEST_CASE("name_of spells every log level", "[log]") {
  CHECK(name_of(LogLevel::trace) == "trace");
  CHECK(name_of(LogLevel::debug) == "debug");
  CHECK(name_of(LogLevel::info) == "info");
  CHECK(name_of(LogLevel::warn) == "warn");
  CHECK(name_of(LogLevel::error) == "error");
  CHECK(name_of(LogLevel::off) == "off");
}

TEST_CASE("a log sink at the default level gets devices started and unavailable and nothing below info", "[log]") {
  Collected got;
  RuntimeOptions options;
  options.log_sink = got.sink();
  CHECK(options.log_level == LogLevel::info);
  run_events(options);
  INFO(got.dump());
  CHECK(got.level_of("device cpu:0 started") == LogLevel::info);
  CHECK(got.level_of("device cpu:1 started") == LogLevel::info);
  CHECK(got.level_of("unavailable: nosuchkind: not compiled into this build") == LogLevel::info);
  for (const auto& l : got.lines()) CHECK(l.level >= LogLevel::info);
  CHECK_FALSE(got.level_of("index_select"));
  CHECK_FALSE(got.level_of("cannot connect"));
}

TEST_CASE("at debug a sink also gets the failed op once where it failed and the failed connect", "[log]") {
  Collected got;
  run_events(RuntimeOptions{.log_sink = got.sink(), .log_level = LogLevel::debug});
  INFO(got.dump());
  CHECK(got.level_of("cpu:0: op index_select") == LogLevel::debug);
  CHECK(got.level_of("index 7") == LogLevel::debug);
  CHECK(got.level_of("cannot connect to worker 127.0.0.1:1") == LogLevel::debug);
  // The ops the failure spread to are trace: one failure, one debug line.
  size_t failed_lines = 0;
  for (const auto& l : got.lines()) {
    CHECK(l.level >= LogLevel::debug);
    if (l.message.find("index 7") != std::string::npos) ++failed_lines;
  }
  CHECK(failed_lines == 1);
}

TEST_CASE("at trace a sink also gets each op and bridge a failure spread to", "[log]") {
  Collected got;
  run_events(RuntimeOptions{.log_sink = got.sink(), .log_level = LogLevel::trace});
  INFO(got.dump());
  CHECK(got.level_of("failed with its input") == LogLevel::trace);
  CHECK(got.level_of("cpu:0: bridge of tensor") == LogLevel::trace);
}

TEST_CASE("a sink at level off or warn hears none of these events", "[log]") {
  for (auto level : {LogLevel::off, LogLevel::warn}) {
    Collected got;
    run_events(RuntimeOptions{.log_sink = got.sink(), .log_level = level});
    INFO(name_of(level) << "\n" << got.dump());
    CHECK(got.lines().empty());
  }
}

TEST_CASE("a runtime without a sink writes nothing to stdout or stderr", "[log]") {
  // The same events that give a sink messages above (checked there).
  auto text = output_of([] { run_events(RuntimeOptions{}); });
  CHECK(text.empty());
  // The capture itself works: a write in the window is seen.
  CHECK(output_of([] { std::fputs("seen\n", stderr); }) == "seen\n");
}

TEST_CASE("a sink that throws does not disturb the runtime", "[log]") {
  std::atomic<int> calls{0};
  RuntimeOptions options;
  options.log_level = LogLevel::trace;
  options.log_sink = [&calls](LogLevel, std::string_view) {
    ++calls;
    throw std::runtime_error("sink failure");
  };
  run_events(options);  // every result checked as with a quiet sink
  CHECK(calls.load() >= 5);
}

TEST_CASE("a trace path that cannot be created is a warning to the sink and silent without one", "[log]") {
  auto run = [](RuntimeOptions options) {
    options.devices = {"cpu:0"};
    options.trace_path = "/nonexistent-switchyard-dir/trace.json";
    Runtime rt(std::move(options));
    CHECK((rt.device("cpu:0").ones({2}) * 3).to_vector<float>() == std::vector<float>{3, 3});
  };
  Collected got;
  run(RuntimeOptions{.log_sink = got.sink(), .log_level = LogLevel::warn});
  INFO(got.dump());
  CHECK(got.level_of("tracing is off") == LogLevel::warn);
  CHECK(got.level_of("/nonexistent-switchyard-dir/trace.json").has_value());
  CHECK(output_of([&] { run(RuntimeOptions{}); }).empty());
}

TEST_CASE("two runtimes given one trace path: the second warns and runs untraced and the first trace stays whole",
          "[log]") {
  const std::string path = "/tmp/switchyard_log_test_shared_trace_" + std::to_string(::getpid()) + ".json";
  Collected got;
  {
    Runtime first(RuntimeOptions{.devices = {"cpu:0"}, .trace_path = path});
    CHECK((first.device("cpu:0").ones({2}) * 3).to_vector<float>() == std::vector<float>{3, 3});
    Runtime second(
        RuntimeOptions{.devices = {"cpu:0"}, .trace_path = path, .log_sink = got.sink(), .log_level = LogLevel::warn});
    CHECK(second.device("cpu:0").ones({2}).neg().to_vector<float>() == std::vector<float>{-1, -1});
    CHECK(first.device("cpu:0").ones({2}).sqrt().to_vector<float>() == std::vector<float>{1, 1});
  }
  INFO(got.dump());
  CHECK(got.level_of("tracing is off") == LogLevel::warn);
  CHECK(got.level_of("another Runtime").has_value());
  std::FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  std::remove(path.c_str());
  // The first runtime's ops are all there, the second's neg is not, and the array is closed.
  CHECK(text.find("\"mul_scalar\"") != std::string::npos);
  CHECK(text.find("\"sqrt\"") != std::string::npos);
  CHECK(text.find("\"neg\"") == std::string::npos);
  REQUIRE(text.size() > 2);
  CHECK(text[text.find_last_not_of("\n ")] == ']');
}
