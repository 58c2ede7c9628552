// SPDX-License-Identifier: Apache-2.0
// Remote devices are named as the client knows them ("127.0.0.1:PORT/cpu:0")
// in every error and stat, never by the worker's own name for them ("cpu:0").

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "switchyard/switchyard.hpp"
#include "worker_process.hpp"

namespace sy = switchyard;
using sy::testing::WorkerProcess;
using namespace std::chrono_literals;

namespace {

std::string failure_of(sy::Future<sy::TensorData> f) {
  if (!f.wait_for(60s)) return "(no reply within 60 s)";
  try {
    (void)f.get();
  } catch (const sy::Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// Whether every thread of `pid` is in the stopped state within `limit`.
bool stopped_within(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true, any = false;
    for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
      std::ifstream in(task.path() / "stat");
      std::string all_text((std::istreambuf_iterator<char>(in)), {});
      auto close = all_text.rfind(')');
      if (close == std::string::npos || close + 2 >= all_text.size()) continue;
      any = true;
      const char state = all_text[close + 2];
      all = all && (state == 'T' || state == 't');
    }
    if (any && all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace

TEST_CASE("a remote kernel failure names the device as the client knows it", "[remote][naming]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt({.devices = {"cpu:0"}, .cpu_threads = 1});
  rt.connect(w.host(), w.port());
  const auto name = w.address() + "/cpu:0";
  auto remote = rt.device(name);
  auto bad = remote.tensor<int32_t>({1, 2}, {2}).remainder(remote.tensor<int32_t>({0, 1}, {2}));
  auto message = failure_of(bad.read());
  INFO(message);
  CHECK(message.starts_with(name + ": "));
  CHECK(message.find("division by zero") != std::string::npos);
  // Poison that crosses a bridge keeps the source's name.
  auto local = bad.to(rt.device("cpu:0"));
  message = failure_of(local.read());
  INFO(message);
  CHECK(message.find(name + ": ") != std::string::npos);
  // A tensor that was never there.
  CHECK(remote.stats().get().device == name);
}

TEST_CASE("a remote device that stops answering times out with its name", "[remote][naming]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt({.devices = {"cpu:0"}, .cpu_threads = 1, .remote_timeout = 1500ms});
  rt.connect(w.host(), w.port());
  const auto name = w.address() + "/cpu:0";
  auto remote = rt.device(name);
  auto x = remote.ones({4});
  REQUIRE(remote.sync().wait_for(30s));
  ::kill(w.pid(), SIGSTOP);
  // kill() only queues the stop: wait until every thread of the worker has
  // stopped, or a read sent at once may still be answered.
  REQUIRE(stopped_within(w.pid(), 5s));
  auto message = failure_of(x.read());
  ::kill(w.pid(), SIGCONT);
  INFO(message);
  CHECK(message.find(name) != std::string::npos);
  CHECK(message.find("1500 ms") != std::string::npos);
}
