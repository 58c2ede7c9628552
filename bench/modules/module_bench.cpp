// SPDX-License-Identifier: Apache-2.0
// One workload of bench/modules/run on Switchyard's cpu:0, in its own
// process so that its peak RSS is its own:
//
//   module_bench <attention|sort|topk|cumsum> <reps>
//
// Prints one JSON line: the wall time of each rep (ms, inputs ready, result
// read back) and the peak RSS the workload added over the process after its
// inputs were made (the kernel's peak counter is reset there through
// /proc/self/clear_refs).

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <switchyard/nn.hpp>
#include <switchyard/switchyard.hpp>

namespace sy = switchyard;

namespace {

int64_t status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size()));
  return -1;
}

void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: module_bench <attention|sort|topk|cumsum> <reps>\n";
    return 2;
  }
  const std::string work = argv[1];
  const int reps = std::stoi(argv[2]);
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}});
  auto dev = rt.device("cpu:0");
  dev.seed(1);
  std::function<sy::Tensor()> run;
  std::vector<sy::Tensor> inputs;
  if (work == "attention") {  // batch 4, 8 heads, 512 x 512, head 64
    for (int i = 0; i < 3; ++i) inputs.push_back(dev.uniform({4, 8, 512, 64}, -1, 1));
    run = [&] { return sy::nn::scaled_dot_product_attention(inputs[0], inputs[1], inputs[2]); };
  } else if (work == "sort") {
    inputs.push_back(dev.uniform({1 << 20}, -1, 1));
    run = [&] { return inputs[0].sort().values; };
  } else if (work == "topk") {
    inputs.push_back(dev.uniform({1 << 20}, -1, 1));
    run = [&] { return inputs[0].topk(100).values; };
  } else if (work == "cumsum") {
    inputs.push_back(dev.uniform({1 << 24}, -1, 1));
    run = [&] { return inputs[0].cumsum(0); };
  } else {
    std::cerr << "unknown workload " << work << "\n";
    return 2;
  }
  for (auto& t : inputs) (void)t.read().get();
  const int64_t base = status_kib("VmRSS:");
  reset_peak();
  std::string times;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    (void)run().read().get();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    times += (r ? "," : "") + std::to_string(ms);
  }
  std::printf("{\"impl\":\"switchyard\",\"work\":\"%s\",\"ms\":[%s],\"peak_extra_kib\":%lld}\n", work.c_str(),
              times.c_str(), static_cast<long long>(status_kib("VmHWM:") - base));
  return 0;
}
