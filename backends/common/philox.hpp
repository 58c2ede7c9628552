// SPDX-License-Identifier: Apache-2.0
#pragma once

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11): a counter-based generator. Element i of the n-th random op
// after seed s is a pure function of (s, n, i), so every backend (and every
// thread or launch shape) produces the same stream.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SY_HOST_DEVICE __host__ __device__
#else
#define SY_HOST_DEVICE
#endif

namespace switchyard::backends {

struct Philox4 {
  uint32_t v[4];
};

SY_HOST_DEVICE inline Philox4 philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

/// Uniform double in [0, 1) from two 32-bit words (53 random bits).
SY_HOST_DEVICE inline double unit_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (uint64_t{hi} << 32 | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

enum class RandomDraw : uint8_t { uniform, normal, bernoulli };

/// Value of element `i` of random op number `op_index` after `seed`.
/// uniform in [a, b), normal(mean a, std b) by Box-Muller, bernoulli(p a).
SY_HOST_DEVICE inline double random_value(RandomDraw kind, uint64_t seed, uint64_t op_index, uint64_t i, double a,
                                          double b) {
  Philox4 r = philox4x32(i, op_index, seed);
  double u1 = unit_double(r.v[0], r.v[1]);
  switch (kind) {
    // Explicit fma: whether a compiler contracts a + b * c into one
    // instruction depends on flags (-march=native does here), and the
    // streams must be bit-identical across backends.
    case RandomDraw::uniform:
      return std::fma(b - a, u1, a);
    case RandomDraw::bernoulli:
      return u1 < a ? 1.0 : 0.0;
    case RandomDraw::normal:
    default: {
      double u2 = unit_double(r.v[2], r.v[3]);
      // 1 - u1 lies in (0, 1], so the log is finite.
      double radius = std::sqrt(-2.0 * std::log(1.0 - u1));
      return std::fma(b * radius, std::cos(6.283185307179586 * u2), a);
    }
  }
}

}  // namespace switchyard::backends
