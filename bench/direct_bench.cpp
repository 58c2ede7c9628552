// SPDX-License-Identifier: Apache-2.0
// The workloads of bench/compare with no runtime: plain loops on this
// thread (or std::threads where the workload is parallel) and direct
// cblas_sgemm calls. This is the "as fast as the machine allows" baseline.
#include <algorithm>
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common.hpp"
#include "direct.hpp"

namespace {

using bench::Buffer;
using bench::parallel;

void tiny_op_chain(benchmark::State& state) {
  float x[4] = {0, 0, 0, 0}, y[4] = {1, 1, 1, 1};
  for (auto _ : state) {
    for (int64_t i = 0; i < bench::tiny_chain_ops; ++i) {
      for (int j = 0; j < 4; ++j) x[j] += y[j];
      benchmark::ClobberMemory();
    }
  }
  benchmark::DoNotOptimize(x);
  state.counters["per_iter"] = static_cast<double>(bench::tiny_chain_ops);
}

void tiny_op_threads(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int t = 0; t < bench::client_threads; ++t)
      threads.emplace_back([t] {
        float a[4] = {float(t), 0, 0, 0}, b[4] = {1, 1, 1, 1}, c[4];
        for (int64_t i = 0; i < bench::ops_per_client; ++i) {
          for (int j = 0; j < 4; ++j) c[j] = a[j] + b[j];
          benchmark::DoNotOptimize(c);
        }
      });
    for (auto& th : threads) th.join();
  }
  state.counters["per_iter"] = static_cast<double>(bench::client_threads * bench::ops_per_client);
}

// A plain copy loop (kept a loop: GCC would otherwise call memcpy, whose
// large-size path uses non-temporal stores and measured slower here).
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void copy_loop(const float* __restrict a,
                                                                             float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i];
}

// The machine's copy bandwidth on every core, bytes read + written: memcpy
// and a copy loop; bench/compare takes the better of the two.
void copy_bandwidth(benchmark::State& state, bool use_memcpy) {
  Buffer a(bench::large_elems), b(bench::large_elems);
  for (auto _ : state) {
    parallel(bench::large_elems, [&](int64_t s, int64_t e) {
      if (use_memcpy)
        std::memcpy(b.p + s, a.p + s, (e - s) * sizeof(float));
      else
        copy_loop(a.p + s, b.p + s, e - s);
    });
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = 2.0 * bench::large_elems * sizeof(float);
}

void add_large(benchmark::State& state) {
  Buffer a(bench::large_elems), b(bench::large_elems), c(bench::large_elems);
  for (auto _ : state) {
    parallel(bench::large_elems, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) c.p[i] = a.p[i] + b.p[i];
    });
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = 3.0 * bench::large_elems * sizeof(float);
}

// Element-wise chains fused by hand (direct.hpp).
void chain_large(benchmark::State& state) {
  Buffer x(bench::large_elems), r(bench::large_elems);
  for (auto _ : state) {
    parallel(bench::large_elems, [&](int64_t s, int64_t e) { bench::relu_chain_by_hand(x.p, r.p, s, e); });
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = 2.0 * bench::large_elems * sizeof(float);
}

void gelu_large(benchmark::State& state) {
  Buffer x(bench::large_elems), r(bench::large_elems);
  for (auto _ : state) {
    parallel(bench::large_elems, [&](int64_t s, int64_t e) { bench::gelu_chain_by_hand(x.p, r.p, s, e); });
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = 2.0 * bench::large_elems * sizeof(float);
}

void matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  Buffer a(n * n), b(n * n), c(n * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.p, n, b.p, n, 0.0f, c.p, n);
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = 2.0 * n * n * n;
}

// y = relu(x W^T + b) per layer, bias preloaded into C (beta = 1).
void mlp(benchmark::State& state) {
  const int64_t batch = 64, dims[] = {784, 512, 512, 10};
  Buffer x(batch * 784);
  std::vector<std::unique_ptr<Buffer>> w, bias, out;
  for (int l = 0; l < 3; ++l) {
    w.push_back(std::make_unique<Buffer>(dims[l + 1] * dims[l]));
    bias.push_back(std::make_unique<Buffer>(dims[l + 1]));
    out.push_back(std::make_unique<Buffer>(batch * dims[l + 1]));
  }
  for (auto _ : state) {
    const float* in = x.p;
    for (int l = 0; l < 3; ++l) {
      const int64_t k = dims[l], n = dims[l + 1];
      float* o = out[l]->p;
      for (int64_t i = 0; i < batch; ++i) std::memcpy(o + i * n, bias[l]->p, n * sizeof(float));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, n, k, 1.0f, in, k, w[l]->p, k, 1.0f, o, n);
      if (l < 2)
        for (int64_t i = 0; i < batch * n; ++i) o[i] = std::max(o[i], 0.0f);
      in = o;
    }
    benchmark::DoNotOptimize(out[2]->p[0]);
  }
  state.counters["per_iter"] = 1;
}

// What a copying bridge would cost: one memcpy of 64 MiB.
void bridge(benchmark::State& state) {
  Buffer a(bench::large_elems), b(bench::large_elems);
  for (auto _ : state) {
    std::memcpy(b.p, a.p, bench::large_elems * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.counters["per_iter"] = static_cast<double>(bench::large_elems * sizeof(float));
}

void churn(benchmark::State& state) {
  uint64_t growth = 0;
  for (auto _ : state) {
    for (int64_t i = 0; i < bench::churn_warmup; ++i) benchmark::DoNotOptimize(std::make_unique<float[]>(4));
    const uint64_t base = bench::rss_bytes();
    uint64_t peak = base;
    for (int64_t i = 0; i < bench::churn_tensors; ++i) {
      benchmark::DoNotOptimize(std::make_unique<float[]>(4));
      if (i % 10000 == 0) peak = std::max(peak, bench::rss_bytes());
    }
    growth = std::max(growth, peak - base);
  }
  state.counters["per_iter"] = static_cast<double>(bench::churn_tensors + bench::churn_warmup);
  state.counters["rss_growth_mib"] = static_cast<double>(growth) / (1 << 20);
}

}  // namespace

BENCHMARK(tiny_op_chain)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(7);
BENCHMARK(tiny_op_threads)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(7);
BENCHMARK_CAPTURE(copy_bandwidth, memcpy, true)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK_CAPTURE(copy_bandwidth, loop, false)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(add_large)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(chain_large)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);
BENCHMARK(gelu_large)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);
BENCHMARK(matmul)->Unit(benchmark::kMillisecond)->UseRealTime()->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->MinTime(0.2);
BENCHMARK(mlp)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);
BENCHMARK(bridge)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.1);
BENCHMARK(churn)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

BENCHMARK_MAIN();
