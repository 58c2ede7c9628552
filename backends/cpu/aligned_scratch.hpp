// SPDX-License-Identifier: Apache-2.0
#pragma once

// Per-thread packing space of the native kernels (f32_gemm.cpp,
// direct_conv_f32.cpp): 64-byte aligned for their aligned vector loads,
// kept as a thread_local between calls so a kernel's steady state
// allocates nothing, grown when a call needs more.

#include <cstddef>
#include <memory>
#include <new>

namespace switchyard::backends::cpu {

struct AlignedScratch {
  struct Free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<float[], Free> data;
  size_t size = 0;
  /// At least n floats (the earlier contents are not kept when it grows).
  float* get(size_t n) {
    if (n > size) {
      data.reset(static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t{64})));
      size = n;
    }
    return data.get();
  }
};

}  // namespace switchyard::backends::cpu
