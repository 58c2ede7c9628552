// SPDX-License-Identifier: Apache-2.0
// Eight client threads share one Runtime, each submitting its own chain of
// ops and checking its own result.
//
//   thread t: a = full(t) -> (a * 3 + t).sum() -> read ... x 50 rounds
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include <switchyard/switchyard.hpp>

namespace sy = switchyard;

int main() {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cpu:1"}});
  std::atomic<int> failures{0};
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto dev = rt.device(t % 2 == 0 ? "cpu:0" : "cpu:1");
      for (int round = 0; round < 50; ++round) {
        auto a = dev.full({64, 64}, t + round, sy::DType::f64);
        auto s = (a * 3.0 + static_cast<double>(t)).sum();
        double got = s.to_vector<double>()[0];
        double want = 64.0 * 64.0 * (3.0 * (t + round) + t);
        if (got != want) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& s : rt.stats())
    std::printf("%s: %llu ops executed, %llu live handles\n", s.device.c_str(),
                static_cast<unsigned long long>(s.ops_executed), static_cast<unsigned long long>(s.live_handles));
  std::printf("%s: %d mismatching results out of 400\n", failures == 0 ? "OK" : "FAILED", failures.load());
  return failures == 0 ? 0 : 1;
}
