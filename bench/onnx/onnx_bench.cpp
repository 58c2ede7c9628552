// SPDX-License-Identifier: Apache-2.0
// Switchyard's ONNX loader on one model: latency of Model::infer with host
// inputs -> host outputs (as ONNX Runtime's session.run), per batch size.
//   build/bench/onnx/onnx_bench MODEL.onnx ITERS DEVICE SHAPE...   (SHAPE: 1x64, 1x128x32, ...)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

namespace sy = switchyard;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: onnx_bench MODEL.onnx ITERS DEVICE SHAPE... (SHAPE like 1x64)\n");
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
    std::vector<double> lat;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) {
      const auto s = Clock::now();
      (void)model.infer(feeds).get();
      lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
    }
    const double total = std::chrono::duration<double>(Clock::now() - t0).count();
    std::sort(lat.begin(), lat.end());
    std::printf(
        "{\"runtime\": \"switchyard %s\", \"shape\": \"%s\", \"median_us\": %.1f, \"p99_us\": %.1f, "
        "\"rows_per_s\": %.0f, \"device_ops_per_call\": %llu, \"fused_ops_per_call\": %llu}\n",
        device.c_str(), argv[a], lat[lat.size() / 2], lat[lat.size() * 99 / 100],
        static_cast<double>(b * iters) / total, static_cast<unsigned long long>(ops_per_call),
        static_cast<unsigned long long>(fused_per_call));
  }
}
