// SPDX-License-Identifier: Apache-2.0
// Data-parallel MLP forward over every GPU: one shard of the batch per
// device, the results gathered back on cpu:0.
//
//            +--> shard 0 --> cuda:0: relu(x W1^T + b1) W2^T + b2 --+
//   cpu:0 x -+--> shard 1 --> cuda:1: ...                           +--> cpu:0: cat -> y
//            +--> ...                                               +
//
// The weights are copied to each GPU once; every step returns at once and
// the runtime orders the transfers. With no GPU the shards run on cpu:0
// and the program says why.

#include <cstdio>
#include <string>

#include "switchyard/switchyard.hpp"

namespace sy = switchyard;

int main() {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}});
  sy::Device cpu = rt.device("cpu:0");
  std::vector<sy::Device> workers;
  for (auto& d : rt.devices())
    if (d.kind() == "cuda") workers.push_back(d);
  if (workers.empty()) {
    for (const auto& why : rt.unavailable())
      std::printf("no GPU used (%s): running the shards on cpu:0\n", why.c_str());
    workers.push_back(cpu);
  }

  constexpr int64_t batch = 4096, in = 256, hidden = 1024, out = 16;
  cpu.seed(7);
  auto x = cpu.normal({batch, in});
  auto w1 = cpu.normal({hidden, in}, 0, 0.05);
  auto b1 = cpu.normal({hidden}, 0, 0.05);
  auto w2 = cpu.normal({out, hidden}, 0, 0.05);
  auto b2 = cpu.normal({out}, 0, 0.05);

  const auto shards = static_cast<int64_t>(workers.size());
  std::vector<sy::Tensor> parts;
  for (int64_t i = 0; i < shards; ++i) {
    const auto& dev = workers[static_cast<size_t>(i)];
    const int64_t begin = batch * i / shards, end = batch * (i + 1) / shards;
    auto shard = x.slice(0, sy::Slice{begin, end}).to(dev);
    auto h = shard.linear(w1.to(dev), b1.to(dev)).relu();
    parts.push_back(h.linear(w2.to(dev), b2.to(dev)).to(cpu));
  }
  auto y = sy::cat(parts, 0);

  // The same forward pass on cpu:0 alone, as a check.
  auto reference = x.linear(w1, b1).relu().linear(w2, b2);
  const float max_diff = (y - reference).abs().max().to_vector<float>()[0];

  std::string names;
  for (const auto& d : workers) names += (names.empty() ? "" : ", ") + d.name();
  std::printf("y: [%lld, %lld] from %lld shard(s) on %s; max |y - cpu reference| = %.3g\n",
              static_cast<long long>(y.shape()[0]), static_cast<long long>(y.shape()[1]),
              static_cast<long long>(shards), names.c_str(), static_cast<double>(max_diff));
  for (const auto& s : rt.stats())
    std::printf("  %-8s ops %llu, live %llu bytes, cached %llu bytes, bridged in %llu bytes\n", s.device.c_str(),
                static_cast<unsigned long long>(s.ops_executed), static_cast<unsigned long long>(s.live_bytes),
                static_cast<unsigned long long>(s.cached_bytes), static_cast<unsigned long long>(s.bytes_bridged_in));
  return max_diff < 1e-3f ? 0 : 1;
}
