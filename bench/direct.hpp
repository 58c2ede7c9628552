// SPDX-License-Identifier: Apache-2.0
#pragma once

// The runtime-free side of the comparisons, shared by direct_bench and
// fusion_bench: aligned buffers, a plain parallel loop over every core, and
// the element-wise chains fused by hand.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace bench {

inline unsigned cores() { return std::max(1u, std::thread::hardware_concurrency()); }

/// Aligned, touched (page-faulted) memory, as the runtime's pool provides.
struct Buffer {
  explicit Buffer(size_t n)
      : storage(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)))), p(storage.get()), n(n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1000) * 0.001f - 0.5f;
  }
  struct Free {
    void operator()(float* q) const noexcept { std::free(q); }
  };
  std::unique_ptr<float, Free> storage;
  float* p;
  size_t n;
};

/// f(begin, end) over [0, n) on every core.
template <class F>
void parallel(int64_t n, F f) {
  std::vector<std::thread> ts;
  const unsigned parts = cores();
  const int64_t step = (n + parts - 1) / parts;
  for (unsigned t = 1; t < parts; ++t)
    ts.emplace_back([&, t] { f(std::min<int64_t>(n, t * step), std::min<int64_t>(n, (t + 1) * step)); });
  f(0, std::min(n, step));
  for (auto& t : ts) t.join();
}

/// relu(x * 2 + 1) over [s, e), fused by hand: one pass, what any runtime
/// could at best do.
inline void relu_chain_by_hand(const float* x, float* r, int64_t s, int64_t e) {
  for (int64_t i = s; i < e; ++i) r[i] = std::max(x[i] * 2.0f + 1.0f, 0.0f);
}

/// GELU written by hand, 0.5x(1 + tanh(0.79788456(x + 0.044715x^3))), over
/// [s, e), fused by hand: the same float operations in one pass.
inline void gelu_chain_by_hand(const float* x, float* r, int64_t s, int64_t e) {
  for (int64_t i = s; i < e; ++i) {
    const float v = x[i];
    r[i] = 0.5f * v * (1.0f + std::tanh(0.79788456f * (v + 0.044715f * v * v * v)));
  }
}

}  // namespace bench
