// SPDX-License-Identifier: Apache-2.0
// Fused element-wise chains (issue 20 item 3) against the same chains run op
// by op and against loops fused by hand, on 16M f32:
//
//   relu(x * 2 + 1)                                   3 ops
//   0.5 * x * (1 + tanh(0.79788456 * (x + 0.044715 * x * x * x)))   9 ops
//
// One process, two runtimes (fuse_elementwise on and off) and the loops of
// direct.hpp on the same data; every round runs each variant once, in an
// order that rotates from round to round, so a change in the load of this
// shared machine hits all variants alike. Prints medians and the ratio of
// each median to the hand-fused loop's.
//
//   build/bench/fusion_bench [rounds]      (default 15)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <switchyard/switchyard.hpp>

#include "common.hpp"
#include "direct.hpp"

namespace sy = switchyard;

namespace {

sy::Tensor relu_chain(const sy::Tensor& x) { return (x * 2.0f + 1.0f).relu(); }
sy::Tensor gelu_chain(const sy::Tensor& x) {
  return 0.5f * x * (1.0f + (0.79788456f * (x + 0.044715f * x * x * x)).tanh());
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

struct Variant {
  std::string name;
  std::function<void()> run;
  std::vector<double> ms;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[(v.size() - 1) / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  const int64_t n = bench::large_elems;
  const auto started = std::time(nullptr);
  const std::string load_at_start = load_average();

  bench::Buffer x(static_cast<size_t>(n)), r(static_cast<size_t>(n));
  auto options = [](bool fuse) {
    sy::RuntimeOptions o;
    o.devices = {"cpu:0"};
    o.fuse_elementwise = fuse;
    return o;
  };
  sy::Runtime fused_rt(options(true)), unfused_rt(options(false));
  auto fused = fused_rt.device("cpu:0"), unfused = unfused_rt.device("cpu:0");
  // The same values as the hand-fused loops read (tanh's cost depends on them).
  const std::vector<float> values(x.p, x.p + n);
  auto xf = fused.tensor(values, sy::Shape{n});
  auto xu = unfused.tensor(values, sy::Shape{n});

  auto on_device = [](const sy::Device& d, const sy::Tensor& in, sy::Tensor (*chain)(const sy::Tensor&)) {
    return [device = &d, input = &in, chain] {
      auto out = chain(*input);
      device->sync().get();
    };
  };
  std::vector<Variant> variants = {
      {"relu(x*2+1), fused by hand",
       [&] { bench::parallel(n, [&](int64_t s, int64_t e) { bench::relu_chain_by_hand(x.p, r.p, s, e); }); },
       {}},
      {"relu(x*2+1), fusion on", on_device(fused, xf, relu_chain), {}},
      {"relu(x*2+1), fusion off", on_device(unfused, xu, relu_chain), {}},
      {"GELU by hand, fused by hand",
       [&] { bench::parallel(n, [&](int64_t s, int64_t e) { bench::gelu_chain_by_hand(x.p, r.p, s, e); }); },
       {}},
      {"GELU by hand, fusion on", on_device(fused, xf, gelu_chain), {}},
      {"GELU by hand, fusion off", on_device(unfused, xu, gelu_chain), {}},
  };
  // The fixed cost of one chain through the runtime (submit, run, sync)
  // with no data to speak of: what separates a fused chain from the loop.
  auto tiny = fused.tensor(std::vector<float>(4, 1.0f), sy::Shape{4});
  variants.push_back({"relu(x*2+1) on 4 elements, fusion on", on_device(fused, tiny, relu_chain), {}});
  for (auto& v : variants) v.run();  // warm-up: page faults, pools filled
  const auto fused_before = fused.stats().get().ops_fused;
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      auto& v = variants[(k + static_cast<size_t>(round)) % variants.size()];
      const auto t0 = std::chrono::steady_clock::now();
      v.run();
      v.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  const auto fused_ops = fused.stats().get().ops_fused - fused_before;

  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::gmtime(&started));
  std::printf("fusion_bench %d rounds, %s UTC, %u cores, load average %s at start, %s at the end\n", rounds, date,
              bench::cores(), load_at_start.c_str(), load_average().c_str());
  std::printf("fused ops per round on the fusion-on runtime: %.1f (3 + 9 + 3 expected)\n\n",
              static_cast<double>(fused_ops) / rounds);
  std::printf(
      "| chain, 16M f32 | median ms | min ms | GB/s (2x64 MiB) | of fused by hand |\n|---|---:|---:|---:|---:|\n");
  for (size_t k = 0; k < 6; ++k) {
    const auto& v = variants[k];
    const double hand = median(variants[k - k % 3].ms);
    const double med = median(v.ms);
    std::printf("| %s | %.2f | %.2f | %.1f | %.0f%% |\n", v.name.c_str(), med,
                *std::min_element(v.ms.begin(), v.ms.end()),
                2.0 * static_cast<double>(n) * sizeof(float) / (med * 1e-3) / 1e9, 100 * hand / med);
  }
  std::printf("\n%s: median %.3f ms (the runtime's fixed cost per chain, included above)\n",
              variants.back().name.c_str(), median(variants.back().ms));
  return 0;
}
