// SPDX-License-Identifier: Apache-2.0
// The fixed cost of the request path, for bench/instructions (callgrind) and
// bench/roundtrip (wall clock):
//   op_cost chain N      N dependent tiny ops (x = x + 1 on f32[1]), one read
//   op_cost roundtrip N  N blocking round trips (x + 1).read().get() on f32[4],
//                        printing p50/p99 in microseconds
//   op_cost threads N T  the same from T client threads at once (default 8),
//                        printing round trips per second, p50 and p99
// Both start a runtime with one cpu device and warm it up first, so the
// difference between two runs of different N is the per-op cost alone.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "switchyard/switchyard.hpp"

namespace sy = switchyard;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: op_cost chain|roundtrip N\n");
    return 2;
  }
  const std::string mode = argv[1];
  const long n = std::strtol(argv[2], nullptr, 10);
  // chain: batches fill to max_batch before they leave, as they do for a
  // client submitting at full speed (under callgrind, 50x slower, the 200 us
  // flush interval would otherwise send every op alone and count the batch
  // overhead per op).
  sy::RuntimeOptions options{.devices = {"cpu:0"}};
  if (mode == "chain") options.flush_interval = std::chrono::seconds(1);
  // The request path's cost per op, not the fused chain's: a chain of
  // dependent adds would otherwise run as fused groups of 64.
  options.fuse_elementwise = false;
  sy::Runtime rt(options);
  auto cpu = rt.device("cpu:0");
  // Warm-up: the runner, the buffer pool and the code paths.
  auto x = cpu.ones({1});
  for (int i = 0; i < 200; ++i) x = x + 1;
  (void)x.read().get();
  if (mode == "chain") {
    for (long i = 0; i < n; ++i) x = x + 1;
    auto v = x.read().get();
    std::printf("%g\n", v.as<float>()[0]);
    return 0;
  }
  if (mode == "roundtrip") {
    auto y = cpu.ones({4});
    std::vector<double> us;
    us.reserve(static_cast<size_t>(n));
    for (long i = 0; i < n; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto v = (y + 1).read().get();
      auto t1 = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("p50 %.1f us  p99 %.1f us  (%ld round trips)\n", us[us.size() / 2], us[us.size() * 99 / 100], n);
    return 0;
  }
  if (mode == "threads") {
    // `threads` client threads on the one runtime, each doing n round trips
    // on its own tensor: aggregate round trips per second and the p99.
    const long threads = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 8;
    std::vector<std::vector<double>> per_thread(static_cast<size_t>(threads));
    std::vector<std::thread> clients;
    const auto begin = std::chrono::steady_clock::now();
    for (long t = 0; t < threads; ++t)
      clients.emplace_back([&, t] {
        auto y = cpu.ones({4});
        auto& us = per_thread[static_cast<size_t>(t)];
        us.reserve(static_cast<size_t>(n));
        for (long i = 0; i < n; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          auto v = (y + 1).read().get();
          us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
      });
    for (auto& c : clients) c.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    std::vector<double> us;
    for (auto& v : per_thread) us.insert(us.end(), v.begin(), v.end());
    std::sort(us.begin(), us.end());
    std::printf("rate %.0f /s  p50 %.1f us  p99 %.1f us  (%ld threads x %ld round trips)\n",
                static_cast<double>(us.size()) / seconds, us[us.size() / 2], us[us.size() * 99 / 100], threads, n);
    return 0;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
