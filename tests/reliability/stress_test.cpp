// SPDX-License-Identifier: Apache-2.0
// Concurrency stress (issue #13): 8 client threads run dependent chains with
// bridges between devices, read through then-continuations that drop
// tensors, fire reads they never wait for, while Runtimes are created and
// destroyed from inside continuations. It records the longest single call
// of the API that returns at once (ops, bridges, read(), then(), drops), a
// liveness bound far above their normal cost of microseconds: a call that
// waits for another thread's progress while holding what that thread needs
// shows up here as a stall of a second or more.

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <switchyard/switchyard.hpp>

#include "support/watchdog.hpp"

using namespace switchyard;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

class LongestCall {
 public:
  template <class F>
  decltype(auto) time(F&& f) {
    auto t0 = Clock::now();
    struct Record {
      LongestCall& self;
      Clock::time_point t0;
      ~Record() { self.note(Clock::now() - t0); }
    } record{*this, t0};
    return f();
  }
  void note(Clock::duration d) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    auto seen = worst_ns_.load(std::memory_order_relaxed);
    while (ns > seen && !worst_ns_.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
    }
    calls_.fetch_add(1, std::memory_order_relaxed);
  }
  [[nodiscard]] double worst_ms() const { return static_cast<double>(worst_ns_.load()) / 1e6; }
  [[nodiscard]] uint64_t calls() const { return calls_.load(); }

 private:
  std::atomic<int64_t> worst_ns_{0};
  std::atomic<uint64_t> calls_{0};
};

// The stalls this test exists to catch last a whole second (the old
// backpressure's give-up); 900 ms stays below them.
constexpr double stall_bound_ms = 900;
#ifdef SWITCHYARD_SANITIZED
// Sanitizers slow every call several times over.
constexpr double normal_bound_ms = stall_bound_ms;
#else
// A third of the stalls it catches: the whole suite on two cores beside
// another tenant (load 3.4) once kept a call off the CPU for 103 ms.
constexpr double normal_bound_ms = 300;
#endif

// The 300 ms bound is for a machine that is not oversubscribed: at a load of
// 12 on 2 cores (other builds beside the suite) the kernel itself left a
// call off the CPU for 184 ms. Such a run keeps the stall bound and says so.
double longest_call_bound_ms(double load) {
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  if (load <= 3 * cores) return normal_bound_ms;
  std::printf("stress: load average %.1f on %.0f cores: oversubscribed, so the bound is %.0f ms instead of %.0f\n",
              load, cores, stall_bound_ms, normal_bound_ms);
  return stall_bound_ms;
}

double load_average() {
  double load[1] = {0};
  return ::getloadavg(load, 1) == 1 ? load[0] : 0;
}

}  // namespace

TEST_CASE("8 threads of chains, bridges, continuations and dying runtimes never stall a call", "[stress][liveness]") {
  switchyard::testing::Watchdog watchdog(240s, "the concurrency stress test");
  const double load_at_start = load_average();
  constexpr int threads = 8;
  const auto duration = 8s;
  LongestCall longest;
  Runtime rt({.devices = {"cpu:0", "cpu:1", "reference:0"}, .cpu_threads = 1});
  const std::vector<Device> devices = rt.devices();
  std::atomic<int> continuations_run{0};
  std::atomic<int> chains_checked{0};
  std::atomic<int> failures{0};
  // Catch2 v2's assertions are not thread-safe: the client threads count
  // what they would have asserted, and the main thread checks the counts.
  std::atomic<int> stalled_continuations{0};
  const auto stop_at = Clock::now() + duration;

  std::vector<std::thread> clients;
  for (int k = 0; k < threads; ++k) {
    clients.emplace_back([&, k] {
      std::vector<Future<void>> pending;
      int step = 0;
      while (Clock::now() < stop_at) {
        // A dependent chain hopping between devices; the same steps in
        // float on the host give the exact expected values.
        float expect = static_cast<float>(k + step);
        Tensor x = longest.time([&] { return devices[(k + step) % 3].full({16}, expect); });
        for (int hop = 0; hop < 6; ++hop) {
          const auto& target = devices[(k + step + hop + 1) % 3];
          x = longest.time([&] { return ((x + 1.0F) * 0.5F).to(target); });
          expect = (expect + 1.0F) * 0.5F;
        }
        if (step % 3 == 0) {
          // Read through a continuation that drops the last handle of a
          // tensor on the completing thread and submits more work from there.
          auto keep = longest.time([&] { return x * 2.0F; });
          auto read = longest.time([&] { return x.read(); });
          pending.push_back(longest.time([&] {
            return read.then([&, expect, keep](TensorData d) mutable {
              auto values = d.to_vector<float>();
              if (!std::all_of(values.begin(), values.end(), [&](float v) { return v == expect; }))
                failures.fetch_add(1);
              (void)longest.time([&] { return keep + 1.0F; });  // work submitted from a continuation
              longest.time([&] { keep = Tensor(); });           // the last handle dropped here
              continuations_run.fetch_add(1);
            });
          }));
        } else if (step % 3 == 1) {
          (void)longest.time([&] { return x.read(); });  // fire and forget
        } else {
          auto v = x.to_vector<float>();  // blocking reads mixed in
          if (std::all_of(v.begin(), v.end(), [&](float e) { return e == expect; }))
            chains_checked.fetch_add(1);
          else
            failures.fetch_add(1);
        }
        longest.time([&] { x = Tensor(); });
        ++step;
        if (pending.size() > 64) {
          for (auto& f : pending)
            if (!f.wait_for(60s)) stalled_continuations.fetch_add(1);
          pending.clear();
        }
      }
      for (auto& f : pending)
        if (!f.wait_for(60s)) stalled_continuations.fetch_add(1);
    });
  }

  // Meanwhile: runtimes created here and destroyed inside their own
  // continuations, while the clients keep the machine busy.
  int runtimes_closed_in_continuation = 0;
  while (Clock::now() < stop_at) {
    auto holder = std::make_shared<std::unique_ptr<Runtime>>(
        std::make_unique<Runtime>(RuntimeOptions{.devices = {"cpu:0"}, .cpu_threads = 1}));
    auto a = (*holder)->device("cpu:0").uniform({24, 24});
    auto done = longest.time([&] { return a.matmul(a).read().then([holder](TensorData) { holder->reset(); }); });
    a = Tensor();
    REQUIRE(done.wait_for(60s));
    done.get();
    ++runtimes_closed_in_continuation;
  }
  for (auto& t : clients) t.join();

  const double bound_ms = longest_call_bound_ms(std::max(load_at_start, load_average()));
  std::printf(
      "stress: %llu non-blocking calls, longest %.3f ms (bound %.0f ms); %d continuations, %d chains "
      "checked by blocking reads, %d runtimes destroyed inside a continuation\n",
      static_cast<unsigned long long>(longest.calls()), longest.worst_ms(), bound_ms, continuations_run.load(),
      chains_checked.load(), runtimes_closed_in_continuation);
  CHECK(failures == 0);
  CHECK(stalled_continuations == 0);
  CHECK(continuations_run > 0);
  CHECK(chains_checked > 0);
  CHECK(runtimes_closed_in_continuation > 0);
  INFO("longest single non-blocking API call: " << longest.worst_ms() << " ms");
  CHECK(longest.worst_ms() < bound_ms);
}
