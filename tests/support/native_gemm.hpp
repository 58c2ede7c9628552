// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the tests of the cpu backend's native GEMMs (bf16_gemm_test.cpp,
// f32_gemm_test.cpp) share: deterministic draws, one cpu and one reference
// backend for the whole run, and a scope that switches a kernel on or off.

#include <cstdint>
#include <memory>

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

}  // namespace switchyard::testing
