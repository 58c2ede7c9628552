// SPDX-License-Identifier: Apache-2.0
// f16, bf16, i8 and i16: conversions, promotion, one rounding per op and
// wrapping, with the values PyTorch 1.13 gives (printed by torch on this
// machine; the generated cases in pytorch_test.cpp cover every op family).

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "ops_common.hpp"

using namespace sytest;
using sy::Device;
using sy::DType;
using sy::Tensor;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

bool is_nan_f16(uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }
bool is_nan_bf16(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

}  // namespace

TEST_CASE("Half and BFloat16 round like c10: every bit pattern, ties, overflow, subnormals", "[dtype][half]") {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float h = sy::Half::from_bits(bits);
    const float f = sy::BFloat16::from_bits(bits);
    if (is_nan_f16(bits))
      CHECK(std::isnan(h));
    else if (sy::Half(h).bits != bits)
      FAIL("f16 " << std::hex << b << " does not round-trip through float");
    if (is_nan_bf16(bits))
      CHECK(std::isnan(f));
    else if (sy::BFloat16(f).bits != bits)
      FAIL("bf16 " << std::hex << b << " does not round-trip through float");
  }
  // torch.tensor(v, dtype=torch.float32).half().view(torch.int16)
  const std::vector<std::pair<float, uint16_t>> f16 = {{1.0f + 0x1p-11f, 0x3c00},
                                                       {1.0f + 3 * 0x1p-11f, 0x3c02},
                                                       {65504.0f, 0x7bff},
                                                       {65519.99f, 0x7bff},
                                                       {65520.0f, 0x7c00},
                                                       {70000.0f, 0x7c00},
                                                       {0x1p-24f, 0x0001},
                                                       {0x1p-25f, 0x0000},
                                                       {3 * 0x1p-25f, 0x0002},
                                                       {1e-8f, 0x0000},
                                                       {-0.0f, 0x8000},
                                                       {kInf, 0x7c00},
                                                       {0.1f, 0x2e66},
                                                       {-65520.0f, 0xfc00},
                                                       {6e-8f, 0x0001}};
  for (auto [v, bits] : f16) {
    INFO(v);
    CHECK(sy::Half(v).bits == bits);
  }
  CHECK(sy::Half(std::numeric_limits<float>::quiet_NaN()).bits == 0x7e00);
  const std::vector<std::pair<float, uint16_t>> bf16 = {{1.0f + 0x1p-8f, 0x3f80}, {1.0f + 3 * 0x1p-8f, 0x3f82},
                                                        {3.4e38f, 0x7f80},        {3.3895313892515355e38f, 0x7f7f},
                                                        {3.39e38f, 0x7f7f},       {1e-40f, 0x0001},
                                                        {-kInf, 0xff80},          {0.1f, 0x3dcd}};
  for (auto [v, bits] : bf16) {
    INFO(v);
    CHECK(sy::BFloat16(v).bits == bits);
  }
  // A double goes through float first, as in c10 (rounded twice).
  CHECK(static_cast<float>(sy::Half(1.0 + 0x1p-11 + 0x1p-40)) == 1.0f);
  CHECK(static_cast<float>(sy::BFloat16(1.0 + 0x1p-8 + 0x1p-40)) == 1.0f);
}

TEST_CASE("casts into and out of f16, bf16, i8 and i16 give PyTorch's values", "[ops][cast][dtype]") {
  auto cast = [](DType from, std::vector<double> v, DType to) {
    return [=](const Device& d) { return make(d, from, {static_cast<int64_t>(v.size())}, v).cast(to); };
  };
  const Tol exact{0, 0};
  expect_all(cast(DType::f64, {70000, 65519.99, 1e-8, 0.1, -0.0, kNan}, DType::f16),
             data(DType::f16, {6}, {kInf, 65504, 0, 0.0999755859375, -0.0, kNan}), exact);
  expect_all(cast(DType::i64, {2049, 4097, 65535, 100000, -70000}, DType::f16),
             data(DType::f16, {5}, {2048, 4096, kInf, kInf, -kInf}), exact);
  expect_all(cast(DType::i64, {2049, 4097, 65535, 100000, -70000}, DType::bf16),
             data(DType::bf16, {5}, {2048, 4096, 65536, 99840, -70144}), exact);
  expect_all(cast(DType::i64, {300, -129, 40000, 128}, DType::i8), data(DType::i8, {4}, {44, 127, 64, -128}), exact);
  expect_all(cast(DType::i64, {40000, -40000, 70000}, DType::i16), data(DType::i16, {3}, {-25536, 25536, 4464}), exact);
  // Floats to i8 and i16 go through int32 (PyTorch: 1e10 -> 0, not 1e10's
  // low bits).
  expect_all(cast(DType::f32, {300.7, -129.5, 1e10, kNan, kInf}, DType::i8), data(DType::i8, {5}, {44, 127, 0, 0, 0}),
             exact);
  expect_all(cast(DType::f32, {70000, 1e10, -40000.5, 5e9}, DType::i16), data(DType::i16, {4}, {4464, 0, 25536, 0}),
             exact);
  expect_all(cast(DType::f16, {65504, -65504, 60000}, DType::i16), data(DType::i16, {3}, {-32, 32, -5536}), exact);
  // Into i32 the runtime's own rule holds for every float type: beyond
  // int64, INT64_MIN wrapped (0; x86 would give INT32_MIN, README "Casts").
  expect_all(cast(DType::bf16, {1.5, -2.75, 3e38}, DType::i32), data(DType::i32, {3}, {1, -2, 0}), exact);
  // f16 <-> bf16 goes through f32: exact one way round, rounded the other.
  expect_all(cast(DType::f16, {0.1, 65504, 6e-8}, DType::bf16),
             data(DType::bf16, {3}, {0.10009765625, 65536, 5.960464477539063e-08}), exact);
  expect_all(cast(DType::bf16, {1e10, 0.1}, DType::f16), data(DType::f16, {2}, {kInf, 0.10009765625}), exact);
}

TEST_CASE("16-bit float ops compute in f32 and round once, as PyTorch's CPU", "[ops][dtype][half]") {
  const Tol exact{0, 0};
  // An operand promoted to f16 is rounded to it first: 2049 -> 2048.
  expect_all([](const Device& d) { return make(d, DType::f16, {1}, {0.5}) + make(d, DType::i64, {1}, {2049}); },
             data(DType::f16, {1}, {2048}), exact);
  // The scalar too: f16 x 0.1 multiplies by 0.0999755859375.
  expect_all([](const Device& d) { return make(d, DType::f16, {1}, {0.5}) * 0.1; },
             data(DType::f16, {1}, {0.04998779296875}), exact);
  expect_all(
      [](const Device& d) {
        return make(d, DType::f16, {2}, {60000, -60000}) * 2;
      },
      data(DType::f16, {2}, {kInf, -kInf}), exact);
  expect_all([](const Device& d) { return make(d, DType::bf16, {1}, {1}) + 0x1p-8; }, data(DType::bf16, {1}, {1}),
             exact);
  // f16 with bf16 is f32, exactly.
  expect_all([](const Device& d) { return make(d, DType::f16, {1}, {0.1}) + make(d, DType::bf16, {1}, {0.1}); },
             data(DType::f32, {1}, {0.0999755859375 + 0.10009765625}), exact);
  // Sums accumulate in f32: 3000 ones are 3000 (an f16 accumulator stops at 2048).
  expect_all([](const Device& d) { return d.ones({3000}, DType::f16).sum(); }, data(DType::f16, {}, {3000}), exact);
  expect_all([](const Device& d) { return d.ones({3000}, DType::bf16).mean(); }, data(DType::bf16, {}, {1}), exact);
  expect_all(
      [](const Device& d) {
        return d.ones({2, 3000}, DType::f16).matmul(d.ones({3000, 3}, DType::f16));
      },
      data(DType::f16, {2, 3}, {3000, 3000, 3000, 3000, 3000, 3000}), exact);
  expect_all(
      [](const Device& d) {
        return d.ones({4, 3000}, DType::bf16).cumsum(1).max();
      },
      data(DType::bf16, {}, {3008}), exact);  // 3000 in bf16
  // Transcendentals of 16-bit inputs stay 16-bit.
  expect_all(
      [](const Device& d) {
        return make(d, DType::f16, {3}, {0, 1, -1}).exp();
      },
      DType::f16, {3}, {1, 2.71875, 0.367919921875});
  expect_all(
      [](const Device& d) {
        return make(d, DType::bf16, {2, 2}, {1, 2, 3, 4}).softmax(1);
      },
      DType::bf16, {2, 2}, {0.26953125, 0.73046875, 0.26953125, 0.73046875});
  // Comparisons in the promoted type, results bool.
  expect_all(
      [](const Device& d) {
        return make(d, DType::f16, {2}, {2048, 1}) == make(d, DType::i64, {2}, {2049, 1});
      },
      data(DType::boolean, {2}, {1, 1}), exact);
}

TEST_CASE("i8 and i16 wrap and promote as PyTorch", "[ops][dtype]") {
  const Tol exact{0, 0};
  expect_all([](const Device& d) { return make(d, DType::i8, {1}, {100}) + 100; }, data(DType::i8, {1}, {-56}), exact);
  expect_all([](const Device& d) { return make(d, DType::i8, {1}, {1}) + make(d, DType::u8, {1}, {200}); },
             data(DType::i16, {1}, {201}), exact);
  expect_all([](const Device& d) { return make(d, DType::i8, {1}, {3}) * 2.5; }, data(DType::f32, {1}, {7.5}), exact);
  expect_all(
      [](const Device& d) {
        return make(d, DType::i8, {3}, {100, 100, 100}).sum();
      },
      data(DType::i64, {}, {300}), exact);
  expect_all([](const Device& d) { return make(d, DType::i16, {1}, {32767}) + 1; }, data(DType::i16, {1}, {-32768}),
             exact);
  expect_all(
      [](const Device& d) {
        return make(d, DType::i8, {2}, {-128, 7}).floor_divide(make(d, DType::i8, {2}, {-1, -2}));
      },
      data(DType::i8, {2}, {-128, -4}), exact);
  expect_all(
      [](const Device& d) {
        return make(d, DType::i16, {2}, {7, -7}) / make(d, DType::i8, {2}, {2, 2});
      },
      data(DType::f32, {2}, {3.5, -3.5}), exact);
  expect_all(
      [](const Device& d) {
        return make(d, DType::i8, {2, 2}, {100, 2, 3, 4}).matmul(d.ones({2, 2}, DType::i8));
      },
      data(DType::i8, {2, 2}, {102, 102, 7, 7}), exact);
  expect_all(
      [](const Device& d) {
        return make(d, DType::i16, {4}, {3, -1, 2, 0}).argsort();
      },
      data(DType::i64, {4}, {1, 3, 2, 0}), exact);
}

TEST_CASE("scatter_reduce amax/amin propagate a 16-bit NaN, as PyTorch", "[ops][dtype][half]") {
  // torch.tensor([1., 2, 3], dtype=torch.half).scatter_reduce(0, torch.tensor([0, 0, 2]),
  //     torch.tensor([nan, 5, 1], dtype=torch.half), "amax") -> [nan, 2, 3] (amin: [nan, 2, 1])
  for (DType t : {DType::f16, DType::bf16}) {
    INFO(sy::name_of(t));
    auto build = [t](const char* reduce) {
      return [t, reduce](const Device& d) {
        return make(d, t, {3}, {1, 2, 3})
            .scatter_reduce(0, make(d, DType::i64, {3}, {0, 0, 2}), make(d, t, {3}, {kNan, 5, 1}), reduce);
      };
    };
    expect_all(build("amax"), t, {3}, {kNan, 2, 3});
    expect_all(build("amin"), t, {3}, {kNan, 2, 1});
  }
}

TEST_CASE("a scalar that overflows a narrow dtype fails at the call, as in PyTorch", "[ops][dtype]") {
  auto cpu = runtime().device("cpu:0");
  auto i8 = make(cpu, DType::i8, {1}, {1});
  CHECK_THROWS_AS(i8.masked_fill(cpu.ones({1}, DType::boolean), 200), sy::Error);
  auto f16 = make(cpu, DType::f16, {1}, {1});
  CHECK_THROWS_AS(f16.masked_fill(cpu.ones({1}, DType::boolean), 1e5), sy::Error);
  CHECK(f16.masked_fill(cpu.ones({1}, DType::boolean), 65504.0).item<float>() == 65504.0f);
}

TEST_CASE("TensorData, item and printing hold the narrow dtypes", "[dtype]") {
  auto td = sy::TensorData::from(std::vector<sy::Half>{1.5f, -2.0f, 0.1f}, {3});
  CHECK(td.dtype == DType::f16);
  CHECK(td.bytes.size() == 6);
  CHECK(td.at(2) == 0.0999755859375);
  CHECK(td.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 0.0999755859375f});
  for (const auto& d : devices()) {
    if (!d.dtype_support(DType::f16).storage) continue;
    INFO(d.name());
    auto t = d.from_data(td);
    auto back = t.read().get();
    REQUIRE(back.dtype == DType::f16);
    CHECK(back.as<sy::Half>()[0].bits == sy::Half(1.5f).bits);
    CHECK(t.sum().item<double>() == -0.39990234375);  // -0.4000244140625 in f32, rounded once (a tie, to even)
    auto b = d.from_data(sy::TensorData::from(std::vector<int8_t>{-128, 127}, {2}));
    CHECK(b.dtype() == DType::i8);
    CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{-128, 127});
    std::ostringstream os;
    os << t.cast(DType::bf16);
    CHECK(os.str().find("dtype=bf16") != std::string::npos);
    CHECK(os.str().find("1.5") != std::string::npos);
  }
  CHECK_THROWS_AS(td.as<float>(), sy::Error);
}

TEST_CASE("dtype_support says what each backend does with each dtype", "[dtype]") {
  for (auto t : sy::all_dtypes) {
    INFO(sy::name_of(t));
    for (const char* kind : {"cpu", "reference", "cuda"}) {
      auto s = sy::dtype_support(kind, t);
      CHECK(s.storage);
      CHECK(s.arithmetic);
      CHECK(s.matmul == !sy::is_bool(t));  // matmul's rule refuses bool
      CHECK(!s.how.empty());
    }
  }
  // What a device says of matmul is what its matmul does.
  for (const auto& d : devices()) {
    for (auto t : sy::all_dtypes) {
      INFO(label(d) << " " << sy::name_of(t));
      auto product = [&] { return d.ones({2, 2}, t).matmul(d.ones({2, 2}, t)).to_vector<double>(); };
      if (d.dtype_support(t).matmul)
        CHECK(product() == std::vector<double>(4, 2.0));
      else
        CHECK_THROWS_AS(product(), sy::Error);
    }
  }
  CHECK(sy::dtype_support("cpu", DType::f16).how.find("f32") != std::string::npos);
  // cuda: native 16-bit storage, f32 arithmetic with one rounding, cuBLAS on tensor cores.
  CHECK(sy::dtype_support("cuda", DType::bf16).how.find("__nv_bfloat16") != std::string::npos);
  CHECK(sy::dtype_support("cuda", DType::f16).how.find("f32") != std::string::npos);
  CHECK(sy::dtype_support("cuda", DType::i8).how == "native");
  CHECK(sy::dtype_support("cuda", DType::f32).matmul);
  CHECK(!sy::dtype_support("tpu", DType::f32).storage);
  auto cpu = runtime().device("cpu:0");
  CHECK(cpu.dtype_support(DType::i16).arithmetic);
  // Where a device lacks a dtype, ops on it fail at the call naming device,
  // op and dtype.
  for (const auto& d : devices()) {
    if (d.dtype_support(DType::f16).storage) continue;
    try {
      (void)d.zeros({2}, DType::f16);
      FAIL("no error for f16 on " << d.name());
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::unsupported);
      CHECK(std::string(e.what()).find(d.name()) != std::string::npos);
      CHECK(std::string(e.what()).find("f16") != std::string::npos);
      CHECK(std::string(e.what()).find("full") != std::string::npos);
    }
    CHECK_THROWS_AS(cpu.ones({2}, DType::bf16).to(d), sy::Error);
  }
  if (lacks_narrow_dtypes(cpu)) FAIL("cpu must support every dtype");
}

TEST_CASE("bulk 16-bit conversions on every device agree with Half and BFloat16 bit for bit", "[dtype][half]") {
  // All 65536 patterns up, and 2^18 pseudo-random float bit patterns (plus
  // every f32 exponent's tie and overflow edge) down: the cpu's vectorised
  // paths (F16C, where present) must give the scalar types' exact bits.
  std::vector<uint16_t> patterns(65536);
  for (uint32_t b = 0; b < 65536; ++b) patterns[b] = static_cast<uint16_t>(b);
  std::vector<float> floats;
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < (1 << 18); ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto bits = static_cast<uint32_t>(state >> 32);
    float f = 0;
    std::memcpy(&f, &bits, sizeof f);
    floats.push_back(f);
  }
  for (int e = 100; e < 145; ++e)
    for (uint32_t low : {0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x8000u, 0x7fffu, 0x18000u})
      for (uint32_t sign : {0u, 0x80000000u}) {
        const uint32_t bits = sign | (static_cast<uint32_t>(e) << 23) | low;
        float f = 0;
        std::memcpy(&f, &bits, sizeof f);
        floats.push_back(f);
      }
  const auto n = static_cast<int64_t>(floats.size());
  for (const auto& d : devices()) {
    if (!d.dtype_support(DType::f16).storage) continue;
    INFO(d.name());
    for (DType t : {DType::f16, DType::bf16}) {
      INFO(sy::name_of(t));
      auto up = d.from_data(sy::TensorData({65536}, t, sy::Bytes::copy_of(patterns.data(), 65536 * 2)))
                    .cast(DType::f32)
                    .read()
                    .get();
      auto down = d.tensor(floats, {n}).cast(t).read().get();
      size_t bad = 0;
      for (uint32_t b = 0; b < 65536; ++b) {
        const float want = t == DType::f16 ? static_cast<float>(sy::Half::from_bits(static_cast<uint16_t>(b)))
                                           : static_cast<float>(sy::BFloat16::from_bits(static_cast<uint16_t>(b)));
        const float got = up.as<float>()[b];
        if (!(std::isnan(want) ? std::isnan(got) : std::memcmp(&want, &got, sizeof got) == 0)) ++bad;
      }
      for (int64_t i = 0; i < n; ++i) {
        const float f = floats[static_cast<size_t>(i)];
        const uint16_t want = t == DType::f16 ? sy::Half(f).bits : sy::BFloat16(f).bits;
        uint16_t got = 0;
        std::memcpy(&got, down.bytes.as<const uint8_t>() + 2 * i, 2);
        // NaN payloads may differ between the paths; NaN-ness may not.
        const bool nan = t == DType::f16 ? is_nan_f16(want) : is_nan_bf16(want);
        if (nan ? !(t == DType::f16 ? is_nan_f16(got) : is_nan_bf16(got)) : got != want) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}
