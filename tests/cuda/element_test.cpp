// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels' element conversions (backends/cuda/element.hpp) on the
// host, against the CPU backend: widen, round_to and convert are the very
// functions the kernels call on __half and __nv_bfloat16 (on the device
// through the conversion instructions, which round the same way), so these
// pin the GPU's casts, scalar operands and 16-bit stores without a GPU.

#include "backends/cuda/element.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "switchyard/switchyard.hpp"

namespace sy = switchyard;
namespace kern = switchyard::backends::cuda::kern;
using sy::DType;

namespace {

/// `f(T{})` with the kernels' storage type of `t` (by_dtype's mapping).
template <class F>
auto by_storage(DType t, F&& f) {
  if (t == DType::f16) return f(__half{});
  if (t == DType::bf16) return f(__nv_bfloat16{});
  return sy::visit_arithmetic_dtype(t, f, [&](DType) { return f(bool{}); });
}

float float_of(uint32_t bits) {
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

/// Floats that probe every rounding path into 16 bits: pseudo-random bit
/// patterns, and around each exponent the ties, just-below and just-above
/// values of both formats, with both signs.
std::vector<float> probe_floats() {
  std::vector<float> out;
  uint64_t state = 0x2545F4914F6CDD1DULL;
  for (int i = 0; i < (1 << 16); ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out.push_back(float_of(static_cast<uint32_t>(state >> 32)));
  }
  for (uint32_t e = 90; e < 150; ++e)
    for (uint32_t low : {0x0u, 0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x8000u, 0x7fffu, 0x18000u, 0x7fffffu})
      for (uint32_t sign : {0u, 0x80000000u}) out.push_back(float_of(sign | (e << 23) | low));
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xffffffffu,
                           0x477ff000u, 0x477fefffu, 0x7f7fffffu, 0x00000001u, 0x80000000u})
    out.push_back(float_of(special));
  return out;
}

}  // namespace

TEST_CASE("cuda elements: every 16-bit pattern widens to the CPU's float", "[cuda][element]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    __half_raw hr;
    hr.x = bits;
    __nv_bfloat16_raw br;
    br.x = bits;
    const float h = kern::widen(__half(hr)), want_h = sy::Half::from_bits(bits);
    const float f = kern::widen(__nv_bfloat16(br)), want_f = sy::BFloat16::from_bits(bits);
    INFO("pattern " << b);
    CHECK((std::isnan(want_h) ? std::isnan(h) : bits_of(h) == bits_of(want_h)));
    CHECK((std::isnan(want_f) ? std::isnan(f) : bits_of(f) == bits_of(want_f)));
  }
}

TEST_CASE("cuda elements: floats round into f16 and bf16 as sy::Half and sy::BFloat16, NaN included",
          "[cuda][element]") {
  size_t bad_h = 0, bad_b = 0;
  for (float f : probe_floats()) {
    // Bit for bit, NaNs too: CUDA's own conversion writes 0x7fff for every
    // NaN; the kernels write the CPU's quiet NaN instead.
    if (kern::bits_of_half(kern::round_to<__half>(f)) != sy::Half(f).bits) {
      if (++bad_h <= 5) FAIL_CHECK("f16 of float bits " << bits_of(f));
    }
    if (kern::bits_of_half(kern::round_to<__nv_bfloat16>(f)) != sy::BFloat16(f).bits) {
      if (++bad_b <= 5) FAIL_CHECK("bf16 of float bits " << bits_of(f));
    }
  }
  CHECK(bad_h == 0);
  CHECK(bad_b == 0);
}

TEST_CASE("cuda elements: casts between every pair of dtypes give the CPU backend's bits", "[cuda][element]") {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> specials = {0.0,
                                        -0.0,
                                        1.0,
                                        -1.0,
                                        0.1,
                                        65504.0,
                                        65519.99,
                                        65520.0,
                                        -1e5,
                                        6e-8,
                                        2.98e-8,
                                        1e-40,
                                        3.4e38,
                                        1e39,
                                        inf,
                                        -inf,
                                        127.5,
                                        -129.0,
                                        255.5,
                                        32768.0,
                                        -32769.0,
                                        1e10,
                                        -1e10,
                                        2.5,
                                        2147483648.0,
                                        -3.7,
                                        300.0,
                                        1e19,
                                        1.0 + 0x1p-11 + 0x1p-30,
                                        0x1p-24 * 1.5,
                                        std::numeric_limits<double>::quiet_NaN()};
  const auto n = static_cast<int64_t>(specials.size());
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}});
  auto cpu = rt.device("cpu:0");
  auto f64 = cpu.tensor(specials, {n});
  for (DType from : sy::all_dtypes) {
    const auto source = f64.cast(from).read().get();
    for (DType to : sy::all_dtypes) {
      INFO(sy::name_of(from) << " -> " << sy::name_of(to));
      const auto want = f64.cast(from).cast(to).read().get();
      by_storage(from, [&](auto s_tag) {
        using S = decltype(s_tag);
        by_storage(to, [&](auto d_tag) {
          using D = decltype(d_tag);
          for (int64_t i = 0; i < n; ++i) {
            S s;
            std::memcpy(&s, source.bytes.data() + i * static_cast<int64_t>(sizeof(S)), sizeof(S));
            const D d = kern::convert<S, D>(s);
            uint64_t got = 0, expected = 0;
            std::memcpy(&got, &d, sizeof(D));
            std::memcpy(&expected, want.bytes.data() + i * static_cast<int64_t>(sizeof(D)), sizeof(D));
            INFO("element " << i << " (" << specials[static_cast<size_t>(i)] << ")");
            const bool nan = sy::is_floating(to) && std::isnan(want.at(i));
            if (nan)
              CHECK(std::isnan(static_cast<double>(kern::widen(d))));
            else
              CHECK(got == expected);
          }
          return 0;
        });
        return 0;
      });
    }
  }
}

TEST_CASE("cuda elements: a double reaches f16 through float, as on the CPU (no direct rounding)", "[cuda][element]") {
  // 1 + 2^-11 + 2^-30: directly it rounds up to 1 + 2^-10; through float it
  // is the tie 1 + 2^-11 first, which rounds to even: 1.
  const double v = 1.0 + 0x1p-11 + 0x1p-30;
  CHECK(kern::bits_of_half(kern::from_double<__half>(v)) == sy::Half(v).bits);
  CHECK(static_cast<float>(kern::widen(kern::from_double<__half>(v))) == 1.0f);
  const double w = 1.0 + 0x1p-8 + 0x1p-30;
  CHECK(kern::bits_of_half(kern::from_double<__nv_bfloat16>(w)) == sy::BFloat16(w).bits);
  CHECK(static_cast<float>(kern::widen(kern::from_double<__nv_bfloat16>(w))) == 1.0f);
  // Integers: a float bound first, then the 16-bit rounding (2049 -> 2048).
  CHECK(kern::widen(kern::convert<int64_t, __half>(2049)) == 2048.0f);
  // 16-bit floats to integers go through float's rule: i8 through int32.
  CHECK(kern::convert<__half, int8_t>(kern::from_double<__half>(300.0)) == static_cast<int8_t>(44));
  CHECK(kern::convert<__nv_bfloat16, int16_t>(kern::from_double<__nv_bfloat16>(1e10)) == 0);
}
