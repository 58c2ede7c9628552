// SPDX-License-Identifier: Apache-2.0
// The workloads of bench/compare through Switchyard. Every benchmark sets
// the counter `per_iter` (ops, bytes or flops per iteration); bench/compare
// divides it by the real time per iteration.
#include <algorithm>
#include <benchmark/benchmark.h>
#include <chrono>
#include <thread>
#include <vector>

#include <switchyard/switchyard.hpp>

#include "common.hpp"
#include "direct.hpp"

namespace sy = switchyard;

namespace {

sy::RuntimeOptions one_cpu() { return sy::RuntimeOptions{.devices = {"cpu:0"}}; }

// 1. Per-op overhead: dependent tiny ops from one thread, then one read.
// `client_ns`: the submitting thread's share (the runner works in parallel).
// With fusion on (the default) the dependent adds run as fused chains of up
// to 64 ops; `fuse` off gives the request path's cost per op alone.
void tiny_op_chain(benchmark::State& state, bool reuse, bool fuse) {
  auto options = one_cpu();
  options.reuse_last_use = reuse;
  options.fuse_elementwise = fuse;
  sy::Runtime rt(options);
  auto dev = rt.device("cpu:0");
  auto y = dev.full({4}, 1.0);
  double client = 0;
  for (auto _ : state) {
    auto x = dev.full({4}, 0.0);
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < bench::tiny_chain_ops; ++i) x = x + y;
    client += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    auto v = x.to_vector<float>();
    if (v[0] != static_cast<float>(bench::tiny_chain_ops)) state.SkipWithError("wrong result");
  }
  state.counters["per_iter"] = static_cast<double>(bench::tiny_chain_ops);
  state.counters["client_ns"] = client / static_cast<double>(state.iterations() * bench::tiny_chain_ops);
}

// 2. Throughput: 8 client threads submitting independent tiny ops.
void tiny_op_threads(benchmark::State& state) {
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int t = 0; t < bench::client_threads; ++t)
      threads.emplace_back([&dev, t] {
        auto a = dev.full({4}, t);
        auto b = dev.full({4}, 1.0);
        for (int64_t i = 0; i < bench::ops_per_client; ++i) benchmark::DoNotOptimize(a + b);
      });
    for (auto& th : threads) th.join();
    dev.sync().get();
  }
  state.counters["per_iter"] = static_cast<double>(bench::client_threads * bench::ops_per_client);
}

// 3. Element-wise on 16M f32: one add, and the chain relu(x*2+1). Bytes are
// what the workload must move at least (inputs read + output written).
void add_large(benchmark::State& state) {
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  auto a = dev.uniform({bench::large_elems});
  auto b = dev.uniform({bench::large_elems});
  // Warm-up: the first output faults its pages in (very slow on this VM);
  // afterwards the pool hands the same block back, as in a steady loop.
  {
    auto c = a + b;
    dev.sync().get();
  }
  for (auto _ : state) {
    auto c = a + b;
    dev.sync().get();
  }
  state.counters["per_iter"] = 3.0 * bench::large_elems * sizeof(float);
}

// Element-wise chains on 16M f32 (issue 20 item 3): relu(x*2+1), and GELU
// written by hand. With fusion each runs as one pass; `fuse` off runs them
// op by op (reuse off implies no fusion: nothing is a last use then).
template <class Chain>
void element_chain(benchmark::State& state, bool reuse, bool fuse, Chain chain) {
  auto options = one_cpu();
  options.reuse_last_use = reuse;
  options.fuse_elementwise = fuse;
  sy::Runtime rt(options);
  auto dev = rt.device("cpu:0");
  // The values direct_bench's loops read: tanh's cost depends on them.
  const bench::Buffer values(bench::large_elems);
  auto x = dev.tensor(std::vector<float>(values.p, values.p + values.n), {bench::large_elems});
  {
    auto r = chain(x);
    dev.sync().get();
  }  // warm-up, as above
  const auto fused_before = dev.stats().get().ops_fused;
  for (auto _ : state) {
    auto r = chain(x);
    dev.sync().get();
  }
  state.counters["per_iter"] = 2.0 * bench::large_elems * sizeof(float);
  // Shows that the "fused" rows did fuse (ops per iteration run in chains).
  state.counters["fused_ops"] =
      static_cast<double>(dev.stats().get().ops_fused - fused_before) / static_cast<double>(state.iterations());
}

sy::Tensor relu_chain(const sy::Tensor& x) { return (x * 2.0 + 1.0).relu(); }
sy::Tensor gelu_chain(const sy::Tensor& x) {
  return 0.5f * x * (1.0f + (0.79788456f * (x + 0.044715f * x * x * x)).tanh());
}

void chain_large(benchmark::State& state, bool reuse, bool fuse) { element_chain(state, reuse, fuse, relu_chain); }
void gelu_large(benchmark::State& state, bool fuse) { element_chain(state, true, fuse, gelu_chain); }

// 16-bit floats: 16M-element adds (2-byte storage, f32 arithmetic) and a
// bf16 matmul (AVX512-BF16 dot products where the CPU has them, else
// widened to f32 for sgemm; SWITCHYARD_CPU_BF16_GEMM=0 forces the latter),
// rounded once.
void half_add(benchmark::State& state, sy::DType t) {
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  auto a = dev.uniform({bench::large_elems}).cast(t);
  auto b = dev.uniform({bench::large_elems}).cast(t);
  {
    auto c = a + b;
    dev.sync().get();
  }  // warm-up, as above
  for (auto _ : state) {
    auto c = a + b;
    dev.sync().get();
  }
  state.counters["per_iter"] = 3.0 * bench::large_elems * 2;
}

void half_matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  auto a = dev.uniform({n, n}).cast(sy::DType::bf16);
  auto b = dev.uniform({n, n}).cast(sy::DType::bf16);
  {
    auto c = a.matmul(b);
    dev.sync().get();
  }  // warm-up, as above
  for (auto _ : state) {
    auto c = a.matmul(b);
    dev.sync().get();
  }
  state.counters["per_iter"] = 2.0 * static_cast<double>(n * n * n);
}

// 4. Matmul n x n f32.
void matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  auto a = dev.uniform({n, n});
  auto b = dev.uniform({n, n});
  {
    auto c = a.matmul(b);
    dev.sync().get();
  }  // warm-up, as above
  for (auto _ : state) {
    auto c = a.matmul(b);
    dev.sync().get();
  }
  state.counters["per_iter"] = 2.0 * n * n * n;
}

// 5. MLP forward, batch 64, 784-512-512-10, relu; latency to the result.
void mlp(benchmark::State& state) {
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  auto x = dev.uniform({64, 784});
  auto w1 = dev.uniform({512, 784}, -0.05, 0.05), b1 = dev.uniform({512}, -0.05, 0.05);
  auto w2 = dev.uniform({512, 512}, -0.05, 0.05), b2 = dev.uniform({512}, -0.05, 0.05);
  auto w3 = dev.uniform({10, 512}, -0.05, 0.05), b3 = dev.uniform({10}, -0.05, 0.05);
  for (int i = 0; i < 3; ++i)
    benchmark::DoNotOptimize(x.linear(w1, b1).relu().linear(w2, b2).relu().linear(w3, b3).read().get());
  for (auto _ : state) {
    auto y = x.linear(w1, b1).relu().linear(w2, b2).relu().linear(w3, b3);
    benchmark::DoNotOptimize(y.read().get());
  }
  state.counters["per_iter"] = 1;
}

// 6. Bridge cpu:0 -> cpu:1 of 64 MiB, until the data is readable on cpu:1.
void bridge(benchmark::State& state) {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cpu:1"}});
  auto src = rt.device("cpu:0");
  auto dst = rt.device("cpu:1");
  auto x = src.uniform({bench::large_elems});
  src.sync().get();
  for (auto _ : state) {
    auto y = x.to(dst);
    benchmark::DoNotOptimize(y.read().get());
  }
  state.counters["per_iter"] = static_cast<double>(bench::large_elems * sizeof(float));
}

// 7. Churn: 1M short-lived tensors; resident set growth after a warm-up.
void churn(benchmark::State& state) {
  sy::Runtime rt(one_cpu());
  auto dev = rt.device("cpu:0");
  auto y = dev.full({4}, 1.0);
  uint64_t growth = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < bench::churn_warmup; ++i) benchmark::DoNotOptimize(y + 1.0);
    dev.sync().get();
    const uint64_t base = bench::rss_bytes();
    uint64_t peak = base;
    for (int64_t i = 0; i < bench::churn_tensors; ++i) {
      benchmark::DoNotOptimize(y + 1.0);
      if (i % 10000 == 0) peak = std::max(peak, bench::rss_bytes());
    }
    dev.sync().get();
    peak = std::max(peak, bench::rss_bytes());
    growth = std::max(growth, peak - base);
  }
  state.counters["per_iter"] = static_cast<double>(bench::churn_tensors + bench::churn_warmup);
  state.counters["rss_growth_mib"] = static_cast<double>(growth) / (1 << 20);
}

}  // namespace

BENCHMARK_CAPTURE(tiny_op_chain, , true, true)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK_CAPTURE(tiny_op_chain, no_fusion, true, false)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK_CAPTURE(tiny_op_chain, no_reuse, false, false)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(tiny_op_threads)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
BENCHMARK(add_large)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK_CAPTURE(chain_large, , true, true)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(7);
BENCHMARK_CAPTURE(chain_large, no_fusion, true, false)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(7);
BENCHMARK_CAPTURE(chain_large, no_reuse, false, false)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(7);
BENCHMARK_CAPTURE(gelu_large, , true)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK_CAPTURE(gelu_large, no_fusion, false)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK(matmul)->Unit(benchmark::kMillisecond)->UseRealTime()->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->MinTime(0.2);
BENCHMARK_CAPTURE(half_add, f16, sy::DType::f16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK_CAPTURE(half_add, bf16, sy::DType::bf16)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(half_matmul)->Unit(benchmark::kMillisecond)->UseRealTime()->Arg(1024)->Arg(2048)->MinTime(0.2);
BENCHMARK(mlp)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);
BENCHMARK(bridge)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.1);
BENCHMARK(churn)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

BENCHMARK_MAIN();
