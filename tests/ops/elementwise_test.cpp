// SPDX-License-Identifier: Apache-2.0
// Element-wise ops on every device: hand-computed values per family,
// broadcasting, dtype promotion, scalars, casts, NaN/Inf and integer edge
// cases.

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "ops_common.hpp"

using namespace sytest;
using sy::Device;
using sy::DType;
using sy::Tensor;

namespace {
const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("unary float ops give hand-computed values", "[ops][unary]") {
  const std::vector<double> x = {-2, -0.5, 0, 1};
  auto in = [&](const Device& d) { return make(d, DType::f64, {4}, x); };
  auto check = [&](std::function<Tensor(Tensor)> f, std::vector<double> want) {
    expect_all([&](const Device& d) { return f(in(d)); }, DType::f64, {4}, want);
  };
  check([](Tensor t) { return t.neg(); }, {2, 0.5, -0.0, -1});
  check([](Tensor t) { return t.abs(); }, {2, 0.5, 0, 1});
  check([](Tensor t) { return t.sign(); }, {-1, -1, 0, 1});
  check([](Tensor t) { return t.exp(); }, {std::exp(-2.0), std::exp(-0.5), 1, std::exp(1.0)});
  check([](Tensor t) { return t.abs().log(); }, {std::log(2.0), std::log(0.5), -kInf, 0});
  check([](Tensor t) { return t.abs().log1p(); }, {std::log(3.0), std::log(1.5), 0, std::log(2.0)});
  check([](Tensor t) { return t.expm1(); }, {std::exp(-2.0) - 1, std::exp(-0.5) - 1, 0, std::exp(1.0) - 1});
  check([](Tensor t) { return t.abs().sqrt(); }, {std::sqrt(2.0), std::sqrt(0.5), 0, 1});
  check([](Tensor t) { return t.abs().rsqrt(); }, {1 / std::sqrt(2.0), 1 / std::sqrt(0.5), kInf, 1});
  check([](Tensor t) { return t.sin(); }, {std::sin(-2.0), std::sin(-0.5), 0, std::sin(1.0)});
  check([](Tensor t) { return t.cos(); }, {std::cos(-2.0), std::cos(-0.5), 1, std::cos(1.0)});
  check([](Tensor t) { return t.tanh(); }, {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(1.0)});
  check([](Tensor t) { return t.sigmoid(); },
        {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(0.5)), 0.5, 1 / (1 + std::exp(-1.0))});
  check([](Tensor t) { return t.relu(); }, {0, 0, 0, 1});
  check([](Tensor t) { return t.gelu(); },
        {-2 * 0.5 * (1 + std::erf(-2 / std::sqrt(2.0))), -0.5 * 0.5 * (1 + std::erf(-0.5 / std::sqrt(2.0))), 0,
         0.5 * (1 + std::erf(1 / std::sqrt(2.0)))});
  check([](Tensor t) { return t.silu(); },
        {-2 / (1 + std::exp(2.0)), -0.5 / (1 + std::exp(0.5)), 0, 1 / (1 + std::exp(-1.0))});
  check([](Tensor t) { return t.erf(); }, {std::erf(-2.0), std::erf(-0.5), 0, std::erf(1.0)});
  check([](Tensor t) { return t.floor(); }, {-2, -1, 0, 1});
  check([](Tensor t) { return t.ceil(); }, {-2, -0.0, 0, 1});
  check([](Tensor t) { return t.reciprocal(); }, {-0.5, -2, kInf, 1});
  check([](Tensor t) { return t.clamp(-1, 0.5); }, {-1, -0.5, 0, 0.5});
  check([](Tensor t) { return t.clamp(kNan, -1); }, {-2, -1, -1, -1});
}

TEST_CASE("round rounds half to even", "[ops][unary]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {6}, {0.5, 1.5, 2.5, -0.5, -1.5, 2.4}).round();
      },
      DType::f32, {6}, {0, 2, 2, -0.0, -2, 2});
}

TEST_CASE("predicates return bool for every dtype", "[ops][unary]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {4}, {kNan, kInf, -kInf, 0}).isnan();
      },
      DType::boolean, {4}, {1, 0, 0, 0});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {4}, {kNan, kInf, -kInf, 0}).isinf();
      },
      DType::boolean, {4}, {0, 1, 1, 0});
  for (auto t : {DType::i32, DType::i64, DType::u8, DType::boolean}) {
    INFO(sy::name_of(t));
    expect_all([&](const Device& d) { return make(d, t, {3}, {0, 1, 1}).isnan(); }, DType::boolean, {3}, {0, 0, 0});
    expect_all(
        [&](const Device& d) {
          return make(d, t, {3}, {0, 1, 1}).logical_not();
        },
        DType::boolean, {3}, {1, 0, 0});
  }
}

TEST_CASE("integer unary ops stay integral and wrap", "[ops][unary][int]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {4}, {-3, 0, 5, -2147483648.0}).neg();
      },
      DType::i32, {4}, {3, 0, -5, -2147483648.0});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {4}, {-3, 0, 5, -2147483648.0}).abs();
      },
      DType::i32, {4}, {3, 0, 5, -2147483648.0});
  expect_all([](const Device& d) { return make(d, DType::u8, {3}, {0, 1, 200}).neg(); }, DType::u8, {3}, {0, 255, 56});
  expect_all([](const Device& d) { return make(d, DType::i64, {3}, {-3, 0, 5}).sign(); }, DType::i64, {3}, {-1, 0, 1});
  expect_all([](const Device& d) { return make(d, DType::boolean, {2}, {0, 1}).sign(); }, DType::boolean, {2}, {0, 1});
  expect_all([](const Device& d) { return make(d, DType::i64, {3}, {-3, 0, 5}).relu(); }, DType::i64, {3}, {0, 0, 5});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {3}, {-3, 0, 5}).bitwise_not();
      },
      DType::i32, {3}, {2, -1, -6});
  expect_all([](const Device& d) { return make(d, DType::u8, {2}, {0, 5}).bitwise_not(); }, DType::u8, {2}, {255, 250});
  expect_all(
      [](const Device& d) {
        return make(d, DType::boolean, {2}, {0, 1}).bitwise_not();
      },
      DType::boolean, {2}, {1, 0});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {4}, {-3, 0, 5, 9}).clamp(-1, 6);
      },
      DType::i32, {4}, {-1, 0, 5, 6});
  // Bounds beyond the dtype's range do nothing (compared as numbers).
  expect_all(
      [](const Device& d) {
        return make(d, DType::u8, {3}, {0, 7, 255}).clamp(-5, 300);
      },
      DType::u8, {3}, {0, 7, 255});
}

TEST_CASE("float unary ops on integer tensors compute in f32", "[ops][unary][promotion]") {
  expect_all([](const Device& d) { return make(d, DType::i64, {3}, {0, 1, 4}).sqrt(); }, DType::f32, {3}, {0, 1, 2});
  expect_all(
      [](const Device& d) {
        return make(d, DType::u8, {2}, {0, 1}).exp();
      },
      DType::f32, {2}, {1, std::exp(1.0)});
  expect_all(
      [](const Device& d) {
        return make(d, DType::boolean, {2}, {0, 1}).sigmoid();
      },
      DType::f32, {2}, {0.5, 1 / (1 + std::exp(-1.0))});
}

TEST_CASE("unary ops reject undefined dtypes at the call", "[ops][unary][errors]") {
  auto d = reference();
  auto b = make(d, DType::boolean, {2}, {0, 1});
  CHECK_THROWS_AS(b.neg(), sy::Error);
  CHECK_THROWS_AS(make(d, DType::f32, {1}, {1}).bitwise_not(), sy::Error);
}

TEST_CASE("binary ops give hand-computed values", "[ops][binary]") {
  auto a = [](const Device& d) { return make(d, DType::f64, {4}, {-3, 2, 0.5, 7}); };
  auto b = [](const Device& d) { return make(d, DType::f64, {4}, {2, -4, 0.25, 7}); };
  auto check = [&](sy::BinaryKind k, DType t, std::vector<double> want) {
    INFO(sy::to_string(k));
    expect_all([&](const Device& d) { return a(d).binary(k, b(d)); }, t, {4}, want);
  };
  using K = sy::BinaryKind;
  check(K::add, DType::f64, {-1, -2, 0.75, 14});
  check(K::sub, DType::f64, {-5, 6, 0.25, 0});
  check(K::mul, DType::f64, {-6, -8, 0.125, 49});
  check(K::div, DType::f64, {-1.5, -0.5, 2, 1});
  check(K::pow, DType::f64, {9, 0.0625, std::pow(0.5, 0.25), 823543});
  check(K::remainder, DType::f64, {1, -2, 0, 0});
  check(K::floor_divide, DType::f64, {-2, -1, 2, 1});
  check(K::maximum, DType::f64, {2, 2, 0.5, 7});
  check(K::minimum, DType::f64, {-3, -4, 0.25, 7});
  check(K::atan2, DType::f64,
        {std::atan2(-3.0, 2.0), std::atan2(2.0, -4.0), std::atan2(0.5, 0.25), std::atan2(7.0, 7.0)});
  check(K::eq, DType::boolean, {0, 0, 0, 1});
  check(K::ne, DType::boolean, {1, 1, 1, 0});
  check(K::lt, DType::boolean, {1, 0, 0, 0});
  check(K::le, DType::boolean, {1, 0, 0, 1});
  check(K::gt, DType::boolean, {0, 1, 1, 0});
  check(K::ge, DType::boolean, {0, 1, 1, 1});
}

TEST_CASE("logical and bitwise ops", "[ops][binary][int]") {
  using K = sy::BinaryKind;
  auto a = [](const Device& d) { return make(d, DType::i32, {4}, {0, 0, 6, -1}); };
  auto b = [](const Device& d) { return make(d, DType::i32, {4}, {0, 3, 0, 5}); };
  auto check = [&](K k, DType t, std::vector<double> want) {
    INFO(sy::to_string(k));
    expect_all([&](const Device& d) { return a(d).binary(k, b(d)); }, t, {4}, want);
  };
  check(K::logical_and, DType::boolean, {0, 0, 0, 1});
  check(K::logical_or, DType::boolean, {0, 1, 1, 1});
  check(K::logical_xor, DType::boolean, {0, 1, 1, 0});
  check(K::bitwise_and, DType::i32, {0, 0, 0, 5});
  check(K::bitwise_or, DType::i32, {0, 3, 6, -1});
  check(K::bitwise_xor, DType::i32, {0, 3, 6, -6});
  auto p = [](const Device& d) { return make(d, DType::boolean, {4}, {0, 0, 1, 1}); };
  auto q = [](const Device& d) { return make(d, DType::boolean, {4}, {0, 1, 0, 1}); };
  expect_all([&](const Device& d) { return p(d).bitwise_xor(q(d)); }, DType::boolean, {4}, {0, 1, 1, 0});
  expect_all([&](const Device& d) { return p(d).add(q(d)); }, DType::boolean, {4}, {0, 1, 1, 1});
  expect_all([&](const Device& d) { return p(d).mul(q(d)); }, DType::boolean, {4}, {0, 0, 0, 1});
  CHECK_THROWS_AS(p(reference()).sub(q(reference())), sy::Error);
  CHECK_THROWS_AS(make(reference(), DType::f32, {1}, {1}).bitwise_and(make(reference(), DType::f32, {1}, {1})),
                  sy::Error);
}

TEST_CASE("integer arithmetic wraps and uses Python remainder", "[ops][binary][int]") {
  auto a = [](const Device& d) { return make(d, DType::i32, {4}, {7, -7, 7, -7}); };
  auto b = [](const Device& d) { return make(d, DType::i32, {4}, {3, 3, -3, -3}); };
  expect_all([&](const Device& d) { return a(d).remainder(b(d)); }, DType::i32, {4}, {1, 2, -2, -1});
  expect_all(
      [&](const Device& d) {
        return a(d).pow(make(d, DType::i32, {4}, {2, 3, 0, 1}));
      },
      DType::i32, {4}, {49, -343, 1, -7});
  // Negative integer exponents: 1/base truncated.
  expect_all(
      [&](const Device& d) {
        return make(d, DType::i64, {3}, {1, -1, 2}).pow(make(d, DType::i64, {3}, {-3, -3, -1}));
      },
      DType::i64, {3}, {1, -1, 0});
  expect_all([](const Device& d) { return make(d, DType::i32, {1}, {2147483647}) + make(d, DType::i32, {1}, {1}); },
             DType::i32, {1}, {-2147483648.0});
  expect_all(
      [](const Device& d) {
        return make(d, DType::u8, {2}, {250, 3}) + make(d, DType::u8, {2}, {10, 5});
      },
      DType::u8, {2}, {4, 8});
  expect_all([](const Device& d) { return make(d, DType::u8, {1}, {3}) - make(d, DType::u8, {1}, {5}); }, DType::u8,
             {1}, {254});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i64, {1}, {-9223372036854775807.0 - 1}).remainder(make(d, DType::i64, {1}, {-1}));
      },
      DType::i64, {1}, {0});
}

TEST_CASE("floor_divide rounds toward minus infinity as Python's //", "[ops][binary][int]") {
  auto a = [](const Device& d, DType t) { return make(d, t, {4}, {7, -7, 7, -7}); };
  auto b = [](const Device& d, DType t) { return make(d, t, {4}, {2, 2, -2, -2}); };
  for (auto t : {DType::i32, DType::i64, DType::f32, DType::f64}) {
    INFO(sy::name_of(t));
    expect_all([&](const Device& d) { return a(d, t).floor_divide(b(d, t)); }, t, {4}, {3, -4, -4, 3});
  }
  expect_all(
      [](const Device& d) {
        return make(d, DType::u8, {2}, {200, 7}).floor_divide(3);
      },
      DType::u8, {2}, {66, 2});
  // Python's float rule: 1.0 // 0.1 is 9 (the quotient is 9.999...), -0.0 // 3 is -0.0, a zero divisor
  // gives IEEE's x / 0, and an infinite divisor floors toward -1 for negative dividends.
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {6}, {1.0, 5, -5, 7.5, -7.5, 0})
            .floor_divide(make(d, DType::f64, {6}, {0.1, kInf, kInf, 0, 0, 0}));
      },
      DType::f64, {6}, {9, 0, -1, kInf, -kInf, kNan});
  // INT64_MIN // -1 wraps (PyTorch's CPU traps).
  expect_all(
      [](const Device& d) {
        return make(d, DType::i64, {1}, {-9223372036854775807.0 - 1}).floor_divide(make(d, DType::i64, {1}, {-1}));
      },
      DType::i64, {1}, {-9223372036854775807.0 - 1});
  // Integer division by zero fails the op, naming it; bool has no floor_divide.
  expect_error(
      [](const Device& d) {
        return make(d, DType::i32, {2}, {1, 2}).floor_divide(make(d, DType::i32, {2}, {1, 0}));
      },
      sy::Errc::kernel_failure);
  for (const auto& d : sytest::devices()) {
    try {
      (void)make(d, DType::i32, {1}, {1}).floor_divide(make(d, DType::i32, {1}, {0})).read().get();
      FAIL("no error on " << d.name());
    } catch (const sy::Error& e) {
      CHECK_THAT(e.what(), Catch::Matchers::Contains("floor_divide: integer division by zero"));
    }
  }
  expect_error(
      [](const Device& d) {
        return make(d, DType::i64, {2}, {1, 2}).floor_divide(0);
      },
      sy::Errc::kernel_failure);
  CHECK_THROWS_AS(make(reference(), DType::boolean, {1}, {1}).floor_divide(make(reference(), DType::boolean, {1}, {1})),
                  sy::Error);
}

TEST_CASE("true division of integers gives f32", "[ops][binary][promotion]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {3}, {7, -7, 1}) / make(d, DType::i32, {3}, {2, 2, 0});
      },
      DType::f32, {3}, {3.5, -3.5, kInf});
  expect_all([](const Device& d) { return make(d, DType::i64, {2}, {0, 3}) / 0; }, DType::f32, {2}, {kNan, kInf});
}

TEST_CASE("integer remainder by zero fails the op with kernel_failure", "[ops][binary][errors]") {
  expect_error(
      [](const Device& d) {
        return make(d, DType::i32, {2}, {1, 2}).remainder(make(d, DType::i32, {2}, {1, 0}));
      },
      sy::Errc::kernel_failure);
  expect_error(
      [](const Device& d) {
        return make(d, DType::u8, {2}, {1, 2}).binary(sy::BinaryKind::remainder, 0);
      },
      sy::Errc::kernel_failure);
  expect_error(
      [](const Device& d) {
        return make(d, DType::i64, {2}, {0, 2}).binary(sy::BinaryKind::remainder, 5, true);
      },
      sy::Errc::kernel_failure);
  // The runtime keeps serving the device afterwards.
  expect_all([](const Device& d) { return make(d, DType::i32, {1}, {5}).remainder(make(d, DType::i32, {1}, {3})); },
             DType::i32, {1}, {2});
  // Float remainder by zero is NaN, not an error.
  expect_all([](const Device& d) { return make(d, DType::f32, {1}, {5}).remainder(make(d, DType::f32, {1}, {0})); },
             DType::f32, {1}, {kNan});
}

TEST_CASE("NaN and Inf propagate through arithmetic, maximum and minimum", "[ops][binary][kNan]") {
  auto a = [](const Device& d) { return make(d, DType::f32, {4}, {kNan, kInf, -kInf, 1}); };
  auto b = [](const Device& d) { return make(d, DType::f32, {4}, {1, -kInf, -kInf, kNan}); };
  expect_all([&](const Device& d) { return a(d) + b(d); }, DType::f32, {4}, {kNan, kNan, -kInf, kNan});
  expect_all([&](const Device& d) { return a(d) * b(d); }, DType::f32, {4}, {kNan, -kInf, kInf, kNan});
  expect_all([&](const Device& d) { return a(d).maximum(b(d)); }, DType::f32, {4}, {kNan, kInf, -kInf, kNan});
  expect_all([&](const Device& d) { return a(d).minimum(b(d)); }, DType::f32, {4}, {kNan, -kInf, -kInf, kNan});
  expect_all([&](const Device& d) { return a(d).eq(a(d)); }, DType::boolean, {4}, {0, 1, 1, 1});
  expect_all([&](const Device& d) { return a(d).ne(b(d)); }, DType::boolean, {4}, {1, 1, 0, 1});
  expect_all([&](const Device& d) { return a(d).clamp(0, 2); }, DType::f32, {4}, {kNan, 2, 0, 1});
  expect_all([&](const Device& d) { return a(d).sign(); }, DType::f32, {4}, {0, 1, -1, 1});
  expect_all([&](const Device& d) { return a(d).relu(); }, DType::f32, {4}, {kNan, kInf, 0, 1});
}

TEST_CASE("broadcasting follows NumPy rules", "[ops][binary][broadcast]") {
  // [2,1,3] + [4,1] -> [2,4,3]
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) want.push_back((i * 3 + k) * 10 + j);
  expect_all(
      [](const Device& d) {
        return make(d, DType::i64, {2, 1, 3}, {0, 10, 20, 30, 40, 50}) + make(d, DType::i64, {4, 1}, {0, 1, 2, 3});
      },
      DType::i64, {2, 4, 3}, want);
  // A 0-d tensor broadcasts to anything; size-0 axes stay empty.
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {}, {2}) * make(d, DType::f32, {2}, {3, 4});
      },
      DType::f32, {2}, {6, 8});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {0, 1}, {}) + make(d, DType::f32, {3}, {1, 2, 3});
      },
      DType::f32, {0, 3}, {});
  CHECK_THROWS_AS(
      make(reference(), DType::f32, {2, 3}, {0, 0, 0, 0, 0, 0}) + make(reference(), DType::f32, {2}, {0, 0}),
      sy::Error);
  try {
    (void)(make(reference(), DType::f32, {2, 3}, {0, 0, 0, 0, 0, 0}) + make(reference(), DType::f32, {2}, {0, 0}));
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK(std::string(e.what()).find("[2, 3]") != std::string::npos);
  }
}

TEST_CASE("tensor-tensor promotion matches PyTorch's table", "[ops][promotion]") {
  using enum sy::DType;
  // Rows and columns in all_dtypes order (f32, f64, i32, i64, u8, bool, f16,
  // bf16, i8, i16), printed by torch.promote_types in PyTorch 1.13.
  const DType table[10][10] = {
      {f32, f64, f32, f32, f32, f32, f32, f32, f32, f32},  {f64, f64, f64, f64, f64, f64, f64, f64, f64, f64},
      {f32, f64, i32, i64, i32, i32, f16, bf16, i32, i32}, {f32, f64, i64, i64, i64, i64, f16, bf16, i64, i64},
      {f32, f64, i32, i64, u8, u8, f16, bf16, i16, i16},   {f32, f64, i32, i64, u8, boolean, f16, bf16, i8, i16},
      {f32, f64, f16, f16, f16, f16, f16, f32, f16, f16},  {f32, f64, bf16, bf16, bf16, bf16, f32, bf16, bf16, bf16},
      {f32, f64, i32, i64, i16, i8, f16, bf16, i8, i16},   {f32, f64, i32, i64, i16, i16, f16, bf16, i16, i16}};
  static_assert(std::size(sy::all_dtypes) == 10);
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 10; ++j) {
      INFO(sy::name_of(sy::all_dtypes[i]) << " + " << sy::name_of(sy::all_dtypes[j]));
      CHECK(sy::promote(sy::all_dtypes[i], sy::all_dtypes[j]) == table[i][j]);
      auto a = make(reference(), sy::all_dtypes[i], {1}, {1});
      auto b = make(reference(), sy::all_dtypes[j], {1}, {1});
      CHECK(a.maximum(b).dtype() == table[i][j]);
    }
  // Mixed operands are converted before the op: u8 255 + i32 1 = 256 in i32.
  expect_all([](const Device& d) { return make(d, DType::u8, {1}, {255}) + make(d, DType::i32, {1}, {1}); }, DType::i32,
             {1}, {256});
  expect_all(
      [](const Device& d) {
        return make(d, DType::boolean, {2}, {1, 0}) + make(d, DType::f64, {2}, {0.5, 0.5});
      },
      DType::f64, {2}, {1.5, 0.5});
}

TEST_CASE("scalar promotion depends on the scalar's C++ category", "[ops][scalar][promotion]") {
  auto i = [](const Device& d) { return make(d, DType::i32, {2}, {1, 2}); };
  auto b = [](const Device& d) { return make(d, DType::boolean, {2}, {0, 1}); };
  expect_all([&](const Device& d) { return i(d) + 1; }, DType::i32, {2}, {2, 3});
  expect_all([&](const Device& d) { return i(d) + 0.5; }, DType::f32, {2}, {1.5, 2.5});
  expect_all([&](const Device& d) { return i(d) * true; }, DType::i32, {2}, {1, 2});
  expect_all([&](const Device& d) { return b(d) + 2; }, DType::i64, {2}, {2, 3});
  expect_all([&](const Device& d) { return b(d) + 2.5; }, DType::f32, {2}, {2.5, 3.5});
  expect_all([&](const Device& d) { return make(d, DType::u8, {1}, {250}) + 10; }, DType::u8, {1}, {4});
  expect_all([&](const Device& d) { return make(d, DType::f64, {1}, {1}) + 1; }, DType::f64, {1}, {2});
  expect_all([&](const Device& d) { return 10 - i(d); }, DType::i32, {2}, {9, 8});
  expect_all([&](const Device& d) { return 1.0 / i(d); }, DType::f32, {2}, {1, 0.5});
  expect_all([&](const Device& d) { return i(d).binary(sy::BinaryKind::pow, 2, true); }, DType::i32, {2}, {2, 4});
  expect_all([&](const Device& d) { return i(d).binary(sy::BinaryKind::lt, 1.5); }, DType::boolean, {2}, {1, 0});
  expect_all([&](const Device& d) { return i(d).binary(sy::BinaryKind::remainder, -3); }, DType::i32, {2}, {-2, -1});
}

TEST_CASE("casts between every dtype pair", "[ops][cast]") {
  // Values every dtype holds exactly.
  const std::vector<double> v = {0, 1, 2, 0, 1, 3};
  for (auto from : sy::all_dtypes)
    for (auto to : sy::all_dtypes) {
      INFO(sy::name_of(from) << " -> " << sy::name_of(to));
      std::vector<double> want = v;
      if (from == DType::boolean || to == DType::boolean)
        for (auto& x : want) x = x != 0;
      expect_all([&](const Device& d) { return make(d, from, {2, 3}, v).cast(to); }, to, {2, 3}, want);
    }
}

TEST_CASE("casts truncate toward zero and wrap out-of-range values", "[ops][cast]") {
  auto f = [](const Device& d) { return make(d, DType::f64, {7}, {2.9, -2.9, 300, -1, 0.5, kNan, kInf}); };
  expect_all([&](const Device& d) { return f(d).cast(DType::i32); }, DType::i32, {7}, {2, -2, 300, -1, 0, 0, 0});
  expect_all([&](const Device& d) { return f(d).cast(DType::u8); }, DType::u8, {7}, {2, 254, 44, 255, 0, 0, 0});
  expect_all([&](const Device& d) { return f(d).cast(DType::i64); }, DType::i64, {7},
             {2, -2, 300, -1, 0, -9223372036854775808.0, -9223372036854775808.0});
  expect_all([&](const Device& d) { return f(d).cast(DType::boolean); }, DType::boolean, {7}, {1, 1, 1, 1, 1, 1, 1});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i64, {3}, {4294967297.0, -1, 256}).cast(DType::i32);
      },
      DType::i32, {3}, {1, -1, 256});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {3}, {-1, 256, 513}).cast(DType::u8);
      },
      DType::u8, {3}, {255, 0, 1});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {2}, {1e300, -1e-300}).cast(DType::f32);
      },
      DType::f32, {2}, {kInf, -0.0});
}

TEST_CASE("large int64 values stay exact", "[ops][int]") {
  // 2^53 + 1 is not a double: integer arithmetic must not go through double.
  auto d0 = reference();
  auto big = sy::TensorData::from<int64_t>(std::vector<int64_t>{9007199254740993, -9007199254740993}, sy::Shape{2});
  for (const auto& d : devices()) {
    INFO(d.name());
    auto t = d.from_data(big);
    auto r = (t + 2).to_vector<int64_t>();
    CHECK(r == std::vector<int64_t>{9007199254740995, -9007199254740991});
    auto s = t.sum().to_vector<int64_t>();
    CHECK(s == std::vector<int64_t>{0});
    auto m = t.max().to_vector<int64_t>();
    CHECK(m == std::vector<int64_t>{9007199254740993});
  }
  (void)d0;
}

TEST_CASE("where and masked_fill select with broadcasting and promotion", "[ops][where]") {
  expect_all(
      [](const Device& d) {
        return sy::where(make(d, DType::boolean, {2, 1}, {1, 0}), make(d, DType::i32, {3}, {1, 2, 3}),
                         make(d, DType::f32, {}, {-1}));
      },
      DType::f32, {2, 3}, {1, 2, 3, -1, -1, -1});
  expect_all(
      [](const Device& d) {
        return make(d, DType::i64, {2, 2}, {1, 2, 3, 4}).masked_fill(make(d, DType::boolean, {2}, {0, 1}), 9);
      },
      DType::i64, {2, 2}, {1, 9, 3, 9});
  CHECK_THROWS_AS(sy::where(make(reference(), DType::i32, {1}, {1}), make(reference(), DType::i32, {1}, {1}),
                            make(reference(), DType::i32, {1}, {1})),
                  sy::Error);
}

TEST_CASE("signed zeros: neg flips, abs clears, maximum and minimum keep the first of a tie", "[ops][unary]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& d : devices_fused_and_unfused()) {
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      INFO(label(d) << " " << sy::name_of(t));
      auto x = make(d, t, {4}, {0.0, -0.0, 1.5, -inf});
      auto sign_bits = [](const Tensor& y) {
        std::vector<int> s;
        for (double v : y.to_vector<double>()) s.push_back(std::signbit(v) ? 1 : 0);
        return s;
      };
      CHECK(sign_bits(x.neg()) == std::vector<int>{1, 0, 1, 0});
      CHECK(sign_bits(x.abs()) == std::vector<int>{0, 0, 0, 0});
      // Fused with the op before it on cpu, computed alike.
      CHECK(sign_bits((x * 1.0).neg()) == std::vector<int>{1, 0, 1, 0});
      CHECK(sign_bits((x * 1.0).abs()) == std::vector<int>{0, 0, 0, 0});
      auto a = make(d, t, {2}, {-0.0, 0.0}), b = make(d, t, {2}, {0.0, -0.0});
      CHECK(sign_bits(a.maximum(b)) == std::vector<int>{1, 0});
      CHECK(sign_bits(a.minimum(b)) == std::vector<int>{1, 0});
      CHECK(sign_bits(b.maximum(a)) == std::vector<int>{0, 1});
      CHECK(sign_bits((a * 1.0).maximum(b)) == std::vector<int>{1, 0});
      // relu is PyTorch's clamp_min(x, 0): -0 stays -0 and NaN stays NaN,
      // alone and in a fused chain.
      auto z = make(d, t, {4}, {-0.0, 0.0, -1.0, std::nan("")});
      CHECK(sign_bits(z.relu()) == std::vector<int>{1, 0, 0, 0});
      CHECK(sign_bits((z * 1.0).relu()) == std::vector<int>{1, 0, 0, 0});
      CHECK(std::isnan(z.relu().to_vector<double>()[3]));
      CHECK(std::isnan((z * 1.0).relu().to_vector<double>()[3]));
      // Long enough for the vector loops, not only their tails.
      std::vector<double> many;
      for (int i = 0; i < 16; ++i) many.insert(many.end(), {-0.0, 0.0, -1.0, 2.0});
      auto w = make(d, t, {64}, many);
      for (const auto& y : {w.relu(), (w * 1.0).relu()}) {
        auto bits = sign_bits(y);
        for (size_t i = 0; i < bits.size(); ++i) CHECK(bits[i] == (i % 4 == 0 ? 1 : 0));
      }
    }
  }
}

TEST_CASE("masked_fill broadcasts the input to the mask's shape as PyTorch does", "[ops][where]") {
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {3}, {1, 2, 3}).masked_fill(make(d, DType::boolean, {2, 1}, {1, 0}), 0);
      },
      DType::f32, {2, 3}, {0, 0, 0, 1, 2, 3});
  CHECK_THROWS_AS(
      make(reference(), DType::f32, {3}, {1, 2, 3}).masked_fill(make(reference(), DType::boolean, {2}, {1, 0}), 0),
      sy::Error);
}

TEST_CASE("u8 to a negative integer power is 1 where the base is 1, else 0", "[ops][int]") {
  for (const auto& d : devices()) {
    INFO(label(d));
    auto x = d.tensor<uint8_t>({0, 1, 2, 3, 255}, {5});
    CHECK(x.pow(-1).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0, 0, 0});
    CHECK(x.pow(-2).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0, 0, 0});
    CHECK(x.pow(-1).dtype() == DType::u8);
    // The signed dtypes follow the same rule in the kernels.
    CHECK(d.tensor<int8_t>({-1, 1, 2, -3}, {4}).pow(-1).to_vector<int8_t>() == std::vector<int8_t>{-1, 1, 0, 0});
  }
}

TEST_CASE("addmm with beta 0 ignores the input, NaN and infinities included", "[ops][matmul]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& d : devices()) {
    INFO(label(d));
    auto input = d.tensor<float>({nan, inf}, {2});
    auto y = input.addmm(d.ones({1, 2}), d.ones({2, 2}), 0, 1);
    CHECK(y.shape() == sy::Shape{1, 2});
    CHECK(y.to_vector<float>() == std::vector<float>{2, 2});
    CHECK(input.addmm(d.ones({1, 2}), d.ones({2, 2}), 0.0, 3).to_vector<float>() == std::vector<float>{6, 6});
    // Any other beta scales it in.
    auto z = input.addmm(d.ones({1, 2}), d.ones({2, 2}), 1, 1).to_vector<float>();
    CHECK(std::isnan(z[0]));
    CHECK(z[1] == inf);
    // The shape is still checked.
    CHECK_THROWS_AS(d.ones({3}).addmm(d.ones({1, 2}), d.ones({2, 2}), 0, 1), sy::Error);
  }
}

TEST_CASE("a scan's 16-bit dtype converts the input first", "[ops][scan]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& d : devices()) {
    if (lacks_narrow_dtypes(d)) continue;
    for (DType t : {DType::f16, DType::bf16}) {
      INFO(label(d) << " " << sy::name_of(t));
      // 70000 is beyond f16 (inf), and inf - inf is NaN: summed in f32 first it would be 0.
      auto s = d.tensor<float>({70000.f, -70000.f, 1.f}, {3}).cumsum(0, t).to_vector<double>();
      auto si = d.tensor<int32_t>({70000, -70000, 1}, {3}).cumsum(0, t).to_vector<double>();
      if (t == DType::f16) {
        CHECK(s[0] == inf);
        CHECK(std::isnan(s[1]));
        CHECK(std::isnan(si[1]));
      } else {  // bf16 holds 70000 as 70144
        CHECK(s == std::vector<double>{70144, 0, 1});
        CHECK(si == std::vector<double>{70144, 0, 1});
      }
      // 1.005 rounds to 1.0078125 in bf16 and to 1.0048828125 in f16 before the product.
      auto p = d.tensor<float>({1.005f, 2.f}, {2}).cumprod(0, t).to_vector<double>();
      const double r = t == DType::f16 ? 1.0048828125 : 1.0078125;
      CHECK(p == std::vector<double>{r, 2 * r});
    }
  }
}
