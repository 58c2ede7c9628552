// SPDX-License-Identifier: Apache-2.0
// The shared number conversion (backends/common/number_conversion.hpp) on
// the host, against what the CPU backend computes: the CUDA kernels call the
// same functions (fill, pad, eye, arange, scalar operands, clamp bounds,
// casts), so these pin the GPU's conversions without a GPU.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/common/number_conversion.hpp"
#include "switchyard/switchyard.hpp"

namespace sy = switchyard;
namespace sb = switchyard::backends;
using sy::DType;

namespace {

constexpr DType every_dtype[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::boolean};

const std::vector<double> awkward = {0.0,
                                     -0.0,
                                     0.5,
                                     -0.5,
                                     -1.0,
                                     -3.7,
                                     255.9,
                                     256.0,
                                     300.0,
                                     -300.0,
                                     2147483648.0,
                                     -2147483649.0,
                                     3e9,
                                     1e19,
                                     -1e19,
                                     9.1e18,
                                     std::numeric_limits<double>::quiet_NaN(),
                                     std::numeric_limits<double>::infinity(),
                                     -std::numeric_limits<double>::infinity()};

/// Element i of a CPU result, as the raw bits of its dtype.
uint64_t bits_at(const sy::TensorData& d, int64_t i) {
  uint64_t bits = 0;
  const size_t w = sy::size_of(d.dtype);
  std::memcpy(&bits, d.bytes.data() + static_cast<size_t>(i) * w, w);
  return bits;
}

uint64_t shared_bits(DType t, double v) {
  return sy::visit_dtype(t, [&](auto tag) { return sb::bits_of<decltype(tag)>(v); });
}

sy::RuntimeOptions cpu_only() { return sy::RuntimeOptions{.devices = {"cpu:0"}}; }

}  // namespace

TEST_CASE("shared conversion: fill values give the CPU backend's bits for every dtype", "[conversion]") {
  sy::Runtime rt(cpu_only());
  auto cpu = rt.device("cpu:0");
  for (DType t : every_dtype)
    for (double v : awkward) {
      INFO(sy::name_of(t) << " value " << v);
      auto d = cpu.full({2}, v, t).read().get();
      // NaN payloads aside, floats compare by bits too (the same conversion).
      CHECK(bits_at(d, 0) == shared_bits(t, v));
    }
}

TEST_CASE("shared conversion: arange wraps like the CPU (u8 from -3)", "[conversion]") {
  sy::Runtime rt(cpu_only());
  auto cpu = rt.device("cpu:0");
  auto d = cpu.arange(-3, 3, 1, DType::u8).read().get();
  CHECK(d.to_vector<uint8_t>() == std::vector<uint8_t>{253, 254, 255, 0, 1, 2});
  for (int64_t i = 0; i < 6; ++i)
    CHECK(sb::from_double<uint8_t>(-3.0 + static_cast<double>(i)) == d.to_vector<uint8_t>()[i]);
  auto f = cpu.arange(-7, 5, 0.75, DType::f32).read().get();
  REQUIRE(f.numel() == 16);
  for (int64_t i = 0; i < f.numel(); ++i)
    CHECK(bits_at(f, i) == shared_bits(DType::f32, -7 + 0.75 * static_cast<double>(i)));
  // Integer dtypes truncate start and step first (PyTorch's rule); the count
  // comes from the truncated bounds for i64 only.
  for (DType t : {DType::i32, DType::i64, DType::u8}) {
    auto a = cpu.arange(-7.5, 5, 1.5, t).read().get();
    CHECK(a.numel() == (t == DType::i64 ? 12 : 9));
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(bits_at(a, i) == shared_bits(t, -7 + static_cast<double>(i)));
  }
}

TEST_CASE("shared conversion: casts from floats follow the int64 rule", "[conversion]") {
  CHECK(sb::convert_element<double, uint8_t>(-1.0) == 255);
  CHECK(sb::convert_element<double, int32_t>(3e9) == static_cast<int32_t>(static_cast<int64_t>(3e9)));
  CHECK(sb::convert_element<double, int64_t>(std::numeric_limits<double>::quiet_NaN()) ==
        std::numeric_limits<int64_t>::min());
  CHECK(sb::convert_element<float, int64_t>(std::numeric_limits<float>::infinity()) ==
        std::numeric_limits<int64_t>::min());
  CHECK(sb::convert_element<double, int64_t>(-2.9) == -2);
  CHECK(sb::convert_element<double, bool>(0.1) == true);
  CHECK(sb::convert_element<int64_t, uint8_t>(-1) == 255);
  // And the CPU backend's cast agrees for every pair.
  sy::Runtime rt(cpu_only());
  auto cpu = rt.device("cpu:0");
  std::vector<double> finite;
  for (double v : awkward) finite.push_back(v);
  auto src = cpu.tensor<double>(finite, {static_cast<int64_t>(finite.size())});
  for (DType t : every_dtype) {
    auto d = src.cast(t).read().get();
    for (size_t i = 0; i < finite.size(); ++i) {
      INFO(sy::name_of(t) << " from " << finite[i]);
      CHECK(bits_at(d, static_cast<int64_t>(i)) == shared_bits(t, finite[i]));
    }
  }
}

TEST_CASE("shared conversion: integer clamp bounds are limited to the dtype's range", "[conversion]") {
  CHECK(sb::clamp_bound<uint8_t>(-1) == 0);
  CHECK(sb::clamp_bound<uint8_t>(300) == 255);
  CHECK(sb::clamp_bound<uint8_t>(2.7) == 2);
  CHECK(sb::clamp_bound<int32_t>(1e12) == std::numeric_limits<int32_t>::max());
  CHECK(sb::clamp_bound<int32_t>(-1e12) == std::numeric_limits<int32_t>::min());
  // i64 bounds saturate too (2^63 and beyond is INT64_MAX), and every double
  // in range converts exactly (the cutoff is 2^63, not 9.2e18).
  CHECK(sb::clamp_bound<int64_t>(1e30) == std::numeric_limits<int64_t>::max());
  CHECK(sb::clamp_bound<int64_t>(-1e30) == std::numeric_limits<int64_t>::min());
  CHECK(sb::clamp_bound<int64_t>(9.3e18) == static_cast<int64_t>(9.3e18));
  CHECK(sb::clamp_bound<int64_t>(-5e18) == static_cast<int64_t>(-5e18));
  CHECK(sb::from_double<int64_t>(9.2e18) == static_cast<int64_t>(9.2e18));
  CHECK(sb::clamp_bound<float>(1e30) == static_cast<float>(1e30));
  // The CPU backend's clamp with those bounds.
  sy::Runtime rt(cpu_only());
  auto cpu = rt.device("cpu:0");
  auto x = cpu.tensor<uint8_t>({0, 1, 2, 3, 200}, {5});
  CHECK(x.clamp(-1, 2).read().get().to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 2, 2, 2});
  auto y = cpu.tensor<int32_t>({-5, 0, 5}, {3});
  CHECK(y.clamp(-1e12, 1e12).read().get().to_vector<int32_t>() == std::vector<int32_t>{-5, 0, 5});
}
