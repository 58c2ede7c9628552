// SPDX-License-Identifier: Apache-2.0
// Switchyard's ONNX loader on one model: latency of Model::infer with host
// inputs -> host outputs (as ONNX Runtime's session.run), per batch size,
// and the process's CPU time per call (all threads: client, runner, kernels).
//   build/bench/onnx/onnx_bench [--clients N] MODEL.onnx ITERS DEVICE SHAPE...   (SHAPE: 1x64, 1x128x32, ...)
// --clients N: N threads call infer() at once, ITERS calls in all (a service's
// concurrent requests); rows_per_s is then their throughput together.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

namespace sy = switchyard;
using Clock = std::chrono::steady_clock;

namespace {
// User + system CPU seconds of the whole process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}
}  // namespace

int main(int argc, char** argv) {
  int clients = 1;
  if (argc > 2 && std::string(argv[1]) == "--clients") {
    clients = std::max(1, std::stoi(argv[2]));
    argv += 2;
    argc -= 2;
  }
  if (argc < 5) {
    std::fprintf(stderr, "usage: onnx_bench [--clients N] MODEL.onnx ITERS DEVICE SHAPE... (SHAPE like 1x64)\n");
    return 2;
  }
  const std::string path = argv[1], device = argv[3];
  const int64_t iters = std::stoll(argv[2]);
  sy::Runtime rt({.devices = {device}});
  auto model = sy::onnx::Model::load(path, rt.device(device));
  const std::string input = model.inputs().at(0).name;
  for (int a = 4; a < argc; ++a) {
    std::vector<int64_t> dims;
    for (std::string rest = argv[a]; !rest.empty();) {
      auto x = rest.find('x');
      dims.push_back(std::stoll(rest.substr(0, x)));
      rest = x == std::string::npos ? "" : rest.substr(x + 1);
    }
    const sy::Shape shape(dims);
    const int64_t b = dims.at(0);
    std::vector<float> x(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
    sy::onnx::DataMap feeds{{input, sy::TensorData::from(x, shape)}};
    // Warm-up (builds the plan): 50 calls and at least a second, as
    // ort_bench.js and torch_bench.py do: on the 2-core VM a process's first
    // second of two-thread work runs up to 1.5x slower than the rest.
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (int i = 0; i < 50 || std::chrono::steady_clock::now() < warm_until; ++i) (void)model.infer(feeds).get();
    // Device ops one cached call submits (the upload and the reads included).
    // Of those, how many ran inside fused chains (a relu in a GEMM's store).
    auto ops_now = [&] { return rt.device(device).stats().get().ops_executed; };
    auto fused_now = [&] { return rt.device(device).stats().get().ops_fused; };
    (void)rt.device(device).sync().get();
    const uint64_t ops_before = ops_now(), fused_before = fused_now();
    (void)model.infer(feeds).get();
    (void)rt.device(device).sync().get();
    const uint64_t ops_per_call = ops_now() - ops_before, fused_per_call = fused_now() - fused_before;
    std::vector<std::vector<double>> lats(static_cast<size_t>(clients));
    auto call_loop = [&](size_t c, int64_t calls) {
      for (int64_t i = 0; i < calls; ++i) {
        const auto s = Clock::now();
        (void)model.infer(feeds).get();
        lats[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
      }
    };
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    if (clients == 1) {
      call_loop(0, iters);
    } else {
      std::vector<std::thread> threads;
      for (int c = 0; c < clients; ++c)
        threads.emplace_back(call_loop, static_cast<size_t>(c), iters / clients + (c < iters % clients ? 1 : 0));
      for (auto& t : threads) t.join();
    }
    const double total = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = cpu_seconds() - cpu0;
    std::vector<double> lat;
    for (const auto& l : lats) lat.insert(lat.end(), l.begin(), l.end());
    std::sort(lat.begin(), lat.end());
    std::printf(
        "{\"runtime\": \"switchyard %s\", \"shape\": \"%s\", \"clients\": %d, \"median_us\": %.1f, "
        "\"p99_us\": %.1f, \"rows_per_s\": %.0f, \"cpu_us_per_call\": %.1f, \"device_ops_per_call\": %llu, "
        "\"fused_ops_per_call\": %llu}\n",
        device.c_str(), argv[a], clients, lat[lat.size() / 2], lat[lat.size() * 99 / 100],
        static_cast<double>(b * iters) / total, cpu * 1e6 / static_cast<double>(iters),
        static_cast<unsigned long long>(ops_per_call), static_cast<unsigned long long>(fused_per_call));
  }
}
