// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the tests of the cpu backend's native GEMMs (bf16_gemm_test.cpp,
// f32_gemm_test.cpp) share: deterministic draws, one cpu and one reference
// backend for the whole run, and a scope that switches a kernel on or off.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/reference/reference_backend.hpp"

namespace switchyard::testing {

/// Deterministic values: LCG draws.
struct Draw {
  uint64_t state;
  double uniform() {  // [0, 1)
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1p-53;
  }
  int64_t integer(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(uniform() * static_cast<double>(hi - lo + 1));
  }
};

/// The cpu backend and the reference backend (the oracle), made once.
struct Backends {
  std::unique_ptr<backends::Backend> cpu = backends::cpu::backend_kind().create(0, {});
  std::unique_ptr<backends::Backend> reference = backends::reference::backend_kind().create(0, {});
};
inline Backends& shared_backends() {
  static Backends b;
  return b;
}

/// Runs with a native kernel on or off, through its process switch
/// (set_native_*_gemm, which returns the previous setting); restored on
/// scope exit.
class KernelSwitch {
 public:
  using Set = bool (*)(bool) noexcept;
  KernelSwitch(Set set, bool on) : set_(set), before_(set(on)) {}
  ~KernelSwitch() { set_(before_); }
  KernelSwitch(const KernelSwitch&) = delete;
  KernelSwitch& operator=(const KernelSwitch&) = delete;

 private:
  Set set_;
  bool before_;
};

/// A matmul's operand shapes as stored (a transposed one as its transpose)
/// and an optional bias.
struct MatmulShapes {
  Shape a, b;
  bool ta, tb;
  std::optional<Shape> bias;
};

/// Batch broadcasts, transposes and bias shapes that every matmul kernel
/// must get right.
inline std::vector<MatmulShapes> broadcast_matmul_shapes() {
  return {
      {{2, 3, 17, 33}, {33, 31}, false, false, std::nullopt},      // lhs batches, one rhs
      {{17, 33}, {4, 33, 31}, false, false, std::nullopt},         // one lhs, rhs batches
      {{2, 1, 15, 3}, {1, 3, 3, 16}, false, false, std::nullopt},  // both broadcast
      {{2, 3, 33, 17}, {3, 64, 33}, true, true, std::nullopt},     // transposed, batch broadcast
      {{5, 7, 100}, {48, 100}, false, true, Shape{48}},            // linear: x @ w^T + b
      {{5, 7, 101}, {50, 101}, false, true, Shape{7, 1}},          // bias per row
      {{3, 7, 33}, {33, 20}, false, false, Shape{3, 1, 20}},       // bias per batch and column
      {{2, 9, 31}, {2, 31, 19}, false, false, Shape{2, 9, 19}},    // full bias
      {{1, 257}, {300, 257}, false, true, Shape{300}},             // one row
      {{4, 2, 2}, {2, 2}, false, false, Shape{1}},                 // tiny, scalar-like bias
      {{6, 1, 1}, {1, 5}, false, false, std::nullopt},             // K = 1
      {{2, 700, 64}, {2, 700, 400}, true, false, Shape{400}},      // parallel, K blocked
  };
}

}  // namespace switchyard::testing
