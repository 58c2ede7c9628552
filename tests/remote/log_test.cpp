// SPDX-License-Identifier: Apache-2.0
// The library's log with workers: a client's sink hears connects, lost
// workers and reconnects; switchyard-worker forwards the library's messages
// (its runners') into its own log at their level.

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>

#include "switchyard/switchyard.hpp"
#include "worker_process.hpp"

namespace sy = switchyard;
using sy::testing::ChildProcess;
using sy::testing::WorkerProcess;
using namespace std::chrono_literals;

namespace {

class Collected {
 public:
  sy::LogSink sink() {
    return [this](sy::LogLevel level, std::string_view message) {
      std::lock_guard lock(mutex_);
      text_ += std::string(sy::name_of(level)) + ": " + std::string(message) + "\n";
    };
  }
  std::string text() const {
    std::lock_guard lock(mutex_);
    return text_;
  }
  // Waits (at most `limit`) for a line "<level>: ...<part>...".
  bool wait_for(sy::LogLevel level, const std::string& part, std::chrono::milliseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const std::string prefix = std::string(sy::name_of(level)) + ": ";
    do {
      auto all = text();
      for (size_t pos = 0; pos < all.size();) {
        auto end = all.find('\n', pos);
        auto line = all.substr(pos, end - pos);
        if (line.starts_with(prefix) && line.find(part) != std::string::npos) return true;
        pos = end + 1;
      }
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < deadline);
    return false;
  }

 private:
  mutable std::mutex mutex_;
  std::string text_;
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace

TEST_CASE("a client's log sink hears a worker connected lost and reconnected", "[remote][log]") {
  Collected got;
  sy::Runtime rt({.devices = {"cpu:0"}, .cpu_threads = 1, .log_sink = got.sink()});
  auto w = std::make_unique<WorkerProcess>(std::vector<std::string>{"--devices=cpu:0", "--threads=1"});
  const auto address = w->address();
  const auto port = w->port();
  rt.connect(w->host(), port);
  INFO(got.text());
  CHECK(got.wait_for(sy::LogLevel::info, "connected to worker " + address, 1s));
  CHECK(got.wait_for(sy::LogLevel::info, "devices cpu:0", 1s));
  w->stop(SIGKILL);
  CHECK(got.wait_for(sy::LogLevel::warn, "device " + address + "/cpu:0 lost", 20s));
  // A new worker on the same port: the same address again.
  WorkerProcess again({"--devices=cpu:0", "--threads=1", "--port=" + std::to_string(port)});
  REQUIRE(again.port() == port);
  rt.connect(again.host(), port);
  CHECK(got.wait_for(sy::LogLevel::info, "reconnected to worker " + address, 1s));
}

TEST_CASE("switchyard-worker logs the library's messages at their level", "[remote][log]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("sy-worker-log-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const std::string level : {"debug", "info"}) {
    const auto log = dir / (level + ".log");
    ChildProcess worker({"/bin/sh", "-c",
                         std::string("exec '") + SWITCHYARD_WORKER_PATH +
                             "' --devices=cpu:0 --threads=1 --port=0 --log-level " + level + " 2>'" + log.string() +
                             "'"});
    const auto line = worker.read_line(20s);
    const auto colon = line.rfind(':');
    REQUIRE(line.starts_with("listening on "));
    const auto port = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
    sy::Runtime rt({.devices = {"cpu:0"}, .cpu_threads = 1});
    auto remote = rt.connect("127.0.0.1", port).at(0);
    auto a = remote.tensor<float>({1, 2, 3}, {3});
    auto bad = a.index_select(0, remote.tensor<int64_t>({0, 7}, {2}));
    // The runner logs a failure before it answers for the failed tensor.
    CHECK_THROWS_AS(bad.read().get(), sy::Error);
    const auto text = read_file(log);
    INFO(level << " log:\n" << text);
    const bool has_op_line = text.find("debug switchyard-worker: cpu:0: op index_select") != std::string::npos;
    CHECK(has_op_line == (level == "debug"));
    CHECK(text.find("info switchyard-worker: client") != std::string::npos);
  }
  fs::remove_all(dir);
}
