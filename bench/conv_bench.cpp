// SPDX-License-Identifier: Apache-2.0
// Convolution workloads through Switchyard's cpu device, for bench/conv_compare
// (which interleaves rounds of this binary with PyTorch and takes medians).
//
//     conv_bench ITERS [NAME]   -> one JSON line: {"name": [seconds per call, ...], ...}
//
// NAME runs only the workloads whose name contains it (for profiling one).
//
// Each call is conv + read (the read waits for the result; on the cpu device
// it shares the bytes, no copy).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <switchyard/nn.hpp>
#include <switchyard/switchyard.hpp>

namespace sy = switchyard;

namespace {

struct Workload {
  const char* name;
  sy::Shape input, weight;
  int64_t padding;
  int64_t groups;
  int64_t stride = 1;
  /// relu(conv(x) + x) as a ResNet basic block ends (the input as the
  /// residual, so input and output shapes agree); else the conv alone.
  bool residual_relu = false;
  /// A max pool of the weight's last two extents (no weight) instead.
  bool max_pool = false;
};

// Mirrored in bench/conv_compare.
const Workload workloads[] = {
    {"conv3x3_64ch_56_b1", {1, 64, 56, 56}, {64, 64, 3, 3}, 1, 1},
    {"conv3x3_64ch_56_b8", {8, 64, 56, 56}, {64, 64, 3, 3}, 1, 1},
    {"conv1x1_256to64_56_b1", {1, 256, 56, 56}, {64, 256, 1, 1}, 0, 1},
    {"depthwise3x3_128ch_56_b1", {1, 128, 56, 56}, {128, 1, 3, 3}, 1, 128},
    {"conv3x3_256ch_14_b1", {1, 256, 14, 14}, {256, 256, 3, 3}, 1, 1},
    {"conv3x3_128ch_28_b1", {1, 128, 28, 28}, {128, 128, 3, 3}, 1, 1},
    {"conv3x3_512ch_7_b1", {1, 512, 7, 7}, {512, 512, 3, 3}, 1, 1},
    // ResNet-18's downsampling: a stride-2 3x3 and the 1x1 shortcut
    {"conv3x3_s2_64to128_56_b1", {1, 64, 56, 56}, {128, 64, 3, 3}, 1, 1, 2},
    {"conv1x1_s2_256to512_14_b1", {1, 256, 14, 14}, {512, 256, 1, 1}, 0, 1, 2},
    // MobileNetV2's stride-2 depthwise layer of its 56x56 stage
    {"depthwise3x3_s2_144ch_56_b1", {1, 144, 56, 56}, {144, 1, 3, 3}, 1, 144, 2},
    // ResNet's stem: 7x7 stride 2 over the RGB image
    {"conv7x7_s2_3to64_224_b1", {1, 3, 224, 224}, {64, 3, 7, 7}, 3, 1, 2},
    // the end of ResNet-18's first basic block: relu(conv(x) + x)
    {"conv3x3_add_relu_64ch_56_b1", {1, 64, 56, 56}, {64, 64, 3, 3}, 1, 1, 1, true},
    // ResNet's max pool after the stem: 3x3 stride 2 over 64 planes of 112x112
    {"maxpool3x3_s2_64ch_112_b1", {1, 64, 112, 112}, {1, 1, 3, 3}, 1, 1, 2, false, true},
};

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5;
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}});
  auto dev = rt.device("cpu:0");
  std::string json = "{";
  const std::string only = argc > 2 ? argv[2] : "";
  for (const auto& w : workloads) {
    if (std::string(w.name).find(only) == std::string::npos) continue;
    auto x = dev.uniform(w.input, -1, 1);
    auto k = dev.uniform(w.weight, -1, 1);
    auto b = dev.uniform({w.weight.dims[0]}, -1, 1);
    const auto call = [&] {
      if (w.max_pool) return sy::nn::max_pool2d(x, {w.weight.dims[2], w.weight.dims[3]}, {w.stride}, {w.padding});
      if (w.residual_relu) return (sy::nn::conv2d(x, k, b, w.stride, w.padding, 1, w.groups) + x).relu();
      return sy::nn::conv2d(x, k, b, w.stride, w.padding, 1, w.groups);
    };
    // Warm-up: buffers, BLAS threads, and the machine: on the 2-core VM a
    // process's first second of two-thread calls ran 1.5x slower than the
    // rest (whatever the call count), which the first workload alone showed.
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
    for (int i = 0; i < 3 || std::chrono::steady_clock::now() < warm_until; ++i) (void)call().read().get();
    std::vector<double> times;
    for (int i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto y = call();
      (void)y.read().get();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (json.size() > 1) json += ", ";
    json += "\"" + std::string(w.name) + "\": [";
    for (size_t i = 0; i < times.size(); ++i) json += (i ? ", " : "") + std::to_string(times[i]);
    json += "]";
  }
  json += "}";
  std::printf("%s\n", json.c_str());
  return 0;
}
