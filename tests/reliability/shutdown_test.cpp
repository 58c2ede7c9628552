// SPDX-License-Identifier: Apache-2.0
// Shutdown: destroying a Runtime with work in flight completes or fails
// every outstanding future; nothing hangs or crashes, and tensors that
// outlive the Runtime are inert.

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "support/faulty_backend.hpp"
#include "switchyard/switchyard.hpp"

using namespace switchyard;
using namespace std::chrono_literals;

namespace {

// Bounded wait: a future that does not resolve within this is a hang.
constexpr auto resolve_bound = 60s;

// Outcome of a future that must resolve: true on a value, false on a
// shutdown-type error; any other error fails the test.
template <class T>
bool value_or_closed(Future<T> f) {
  REQUIRE(f.wait_for(resolve_bound));
  try {
    (void)f.get();
    return true;
  } catch (const Error& e) {
    INFO(e.what());
    CHECK((e.code() == Errc::runtime_closed || e.code() == Errc::device_lost));
    return false;
  }
}

RuntimeOptions two_cpus() {
  RuntimeOptions o;
  o.devices = {"cpu:0", "cpu:1"};
  o.cpu_threads = 1;
  return o;
}

}  // namespace

TEST_CASE("destroying a runtime completes reads issued just before", "[reliability][shutdown]") {
  std::vector<Future<TensorData>> reads;
  std::vector<float> expected;
  {
    Runtime rt(two_cpus());
    auto a = rt.device("cpu:0");
    auto b = rt.device("cpu:1");
    auto x = a.full({64, 64}, 1.0);
    for (int i = 0; i < 20; ++i) {
      x = x.matmul(a.eye(64)) + 1.0f;  // a chain the runner works through
      reads.push_back(x.read());
      reads.push_back(x.to(b).sum().read());
    }
  }  // ~Runtime with most of the chain queued
  size_t values = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    INFO("read " << i);
    if (value_or_closed(reads[i])) ++values;
  }
  // The runtime lets queued work finish (bounded) before stopping, so these
  // small chains complete rather than fail.
  CHECK(values == reads.size());
}

namespace {

// Runs `destroy` on its own thread and fails the process, instead of hanging
// the suite, if it does not return within the bound.
void destroy_within_bound(const std::function<void()>& destroy) {
  std::promise<void> returned;
  auto done = returned.get_future();
  std::thread destroyer([&] {
    destroy();
    returned.set_value();
  });
  if (done.wait_for(resolve_bound) != std::future_status::ready) {
    std::fprintf(stderr, "~Runtime did not return within %lld s\n", static_cast<long long>(resolve_bound.count()));
    std::_Exit(1);
  }
  destroyer.join();
}

}  // namespace

// Found hanging: CAF 0.17 leaves each thread that spawned an actor holding
// the system's logger, and ~actor_system waits for the logger; the thread
// that made the reads here is blocked joining the destroyer.
TEST_CASE("reads waiting in other threads resolve while the runtime is destroyed", "[reliability][shutdown]") {
  auto rt = std::make_unique<Runtime>(two_cpus());
  auto a = rt->device("cpu:0");
  auto b = rt->device("cpu:1");
  std::vector<Future<TensorData>> reads;
  {
    auto x = a.uniform({128, 128});
    for (int i = 0; i < 8; ++i) {
      x = x.matmul(x).tanh();
      reads.push_back(x.to(b).mean().read());
    }
  }
  std::atomic<size_t> resolved{0};
  std::vector<std::thread> waiters;
  for (auto& f : reads)
    waiters.emplace_back([&resolved, f] {
      if (f.wait_for(resolve_bound)) resolved.fetch_add(1);
    });
  destroy_within_bound([&] { rt.reset(); });
  for (auto& t : waiters) t.join();
  CHECK(resolved == reads.size());
  for (auto& f : reads) (void)value_or_closed(f);
}

TEST_CASE("a runtime is destroyed while client threads that used it live on", "[reliability][shutdown]") {
  auto rt = std::make_unique<Runtime>(two_cpus());
  std::mutex m;
  std::condition_variable cv;
  bool used = false;
  bool release = false;
  // A pool thread that read, synced and chained a continuation, and stays
  // alive past the runtime, as a service's worker threads do.
  std::thread client([&] {
    auto dev = rt->device("cpu:1");
    auto t = dev.full({64}, 3.0).sum();
    CHECK(t.to_vector<float>() == std::vector<float>{192.0f});
    dev.sync().get();
    t.read().then([](TensorData) {}).get();
    std::unique_lock lock(m);
    used = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return used; });
  }
  destroy_within_bound([&] { rt.reset(); });
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  client.join();
}

TEST_CASE("tensors outliving their runtime are inert and fail clearly", "[reliability][shutdown]") {
  Tensor survivor;
  Device dev;
  {
    Runtime rt(RuntimeOptions{{"cpu:0"}, 1});
    dev = rt.device("cpu:0");
    survivor = dev.full({4}, 2.0);
    CHECK(survivor.to_vector<float>() == std::vector<float>(4, 2.0f));
  }
  // Reads fail through the future, with runtime_closed.
  auto f = survivor.read();
  REQUIRE(f.wait_for(resolve_bound));
  try {
    (void)f.get();
    FAIL("read after shutdown succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::runtime_closed);
  }
  // New work throws at the call, and so does the device.
  CHECK_THROWS_AS(survivor + 1.0f, Error);
  CHECK_THROWS_AS(dev.full({2}, 1.0), Error);
  CHECK_THROWS_AS(dev.sync(), Error);
  // Metadata stays available; dropping the last copy is harmless.
  CHECK(survivor.shape() == Shape{4});
  survivor = Tensor();
}

TEST_CASE("continuations attached before shutdown run exactly once", "[reliability][shutdown]") {
  std::atomic<int> ran{0};
  std::vector<Future<void>> chained;
  {
    Runtime rt(two_cpus());
    auto a = rt.device("cpu:0");
    for (int i = 0; i < 16; ++i) {
      auto t = a.full({256}, static_cast<double>(i)).exp().sum();
      chained.push_back(t.read().then([&ran](TensorData) { ran.fetch_add(1); }));
    }
  }
  for (auto& c : chained) {
    REQUIRE(c.wait_for(resolve_bound));
    try {
      c.get();
    } catch (const Error& e) {
      CHECK((e.code() == Errc::runtime_closed || e.code() == Errc::device_lost));
    }
  }
  CHECK(ran <= 16);
  CHECK(ran == 16);  // small work queued before ~Runtime completes
}

TEST_CASE("destroying a runtime while client threads keep submitting neither hangs nor crashes",
          "[reliability][shutdown]") {
  auto rt = std::make_unique<Runtime>(two_cpus());
  auto a = rt->device("cpu:0");
  auto b = rt->device("cpu:1");
  std::atomic<bool> stop{false};
  std::atomic<size_t> rejected{0};
  std::atomic<size_t> wrong_code{0};  // Catch assertions are not thread safe: count here
  std::vector<std::thread> clients;
  std::mutex mutex;
  std::vector<Future<TensorData>> reads;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 100000 && !stop; ++i) {
        try {
          auto x = (c % 2 ? a : b).full({32}, static_cast<double>(i));
          auto y = (x + 1.0f).to(c % 2 ? b : a);
          auto r = y.sum().read();
          std::lock_guard lock(mutex);
          reads.push_back(std::move(r));
        } catch (const Error& e) {
          // Calls after shutdown throw runtime_closed at the call.
          if (e.code() != Errc::runtime_closed) wrong_code.fetch_add(1);
          rejected.fetch_add(1);
          return;
        }
      }
    });
  std::this_thread::sleep_for(50ms);
  // Devices (and tensors) copied by the clients keep the core alive; the
  // Runtime's destructor must still stop it.
  rt.reset();
  stop = true;
  for (auto& t : clients) t.join();
  CHECK(wrong_code == 0);
  for (auto& r : reads) (void)value_or_closed(r);
  SUCCEED(reads.size() << " reads resolved, " << rejected.load() << " clients rejected");
}

TEST_CASE("a slow kernel in flight at shutdown completes or fails its futures", "[reliability][shutdown]") {
  auto plan = std::make_shared<testing::FaultPlan>();
  RuntimeOptions o;
  o.devices = {"faulty:0", "cpu:0"};
  o.cpu_threads = 1;
  testing::add_faulty_backend(o, plan);
  plan->fail_execute_at = 5;  // one failure mid-chain, too
  std::vector<Future<TensorData>> reads;
  {
    Runtime rt(std::move(o));
    auto d = rt.device("faulty:0");
    auto x = d.full({512, 512}, 0.001);
    for (int i = 0; i < 6; ++i) {
      x = x.matmul(x);
      reads.push_back(x.sum().read());
      reads.push_back(x.to(rt.device("cpu:0")).max().read());
    }
  }
  for (auto& r : reads) {
    REQUIRE(r.wait_for(resolve_bound));
    try {
      (void)r.get();
    } catch (const Error& e) {
      CHECK((e.code() == Errc::kernel_failure || e.code() == Errc::runtime_closed || e.code() == Errc::device_lost));
    }
  }
}

namespace {

// A backlog of dependent products far longer than the shutdown timeout:
// about 400 x 2 GFLOP on one kernel thread.
Future<TensorData> deep_backlog(const Device& d) {
  auto a = d.uniform({1024, 1024}, -1, 1);
  Tensor b = a;
  for (int i = 0; i < 400; ++i) b = b.matmul(a).tanh();
  return b.read();
}

// The backlog's last read failed with runtime_closed (it cannot have run).
void expect_closed(Future<TensorData>& last) {
  try {
    (void)last.get();
    FAIL("the last read of a backlog of tens of seconds completed");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == Errc::runtime_closed);
    CHECK(std::string(e.what()).find("shut down") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("destroying a runtime with a deep backlog fails what is left after the shutdown timeout",
          "[reliability][shutdown]") {
  RuntimeOptions o;
  o.devices = {"cpu:0"};
  o.cpu_threads = 1;
  o.shutdown_timeout = 200ms;
  std::optional<Runtime> rt(std::move(o));
  auto early = rt->cpu().ones({4}).read();
  auto last = deep_backlog(rt->cpu());
  const auto t0 = std::chrono::steady_clock::now();
  rt.reset();
  const auto took = std::chrono::steady_clock::now() - t0;
  // The timeout, one product still running and the teardown: far below the
  // backlog's own time (tens of seconds).
  CHECK(took < 8s);
  REQUIRE(last.wait_for(resolve_bound));
  expect_closed(last);
  CHECK(value_or_closed(early));
}

TEST_CASE("a runtime destroyed inside a continuation fails a deep backlog on another device within the timeout",
          "[reliability][shutdown]") {
  RuntimeOptions o = two_cpus();
  o.shutdown_timeout = 200ms;
  auto holder = std::make_shared<std::optional<Runtime>>(std::move(o));
  auto last = deep_backlog((*holder)->cpu(0));
  (*holder)->cpu(1).ones({1}).read().then([holder](TensorData) { holder->reset(); }).wait_for(resolve_bound);
  // The destructor returned at once; the teardown's own thread fails the
  // backlog once the timeout has passed.
  REQUIRE(last.wait_for(8s));
  expect_closed(last);
}
