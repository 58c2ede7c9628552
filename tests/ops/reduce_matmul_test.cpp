// SPDX-License-Identifier: Apache-2.0
// Reductions over axis sets, softmax stability, matmul and linear on every
// device.

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
Tensor x23(const Device& d, DType t = DType::f32) { return make(d, t, {2, 3}, {1, 2, 3, 4, 5, 6}); }
}  // namespace

TEST_CASE("sum, mean and prod over axis sets with keepdim", "[ops][reduce]") {
  expect_all([](const Device& d) { return x23(d).sum(); }, DType::f32, {}, {21});
  expect_all([](const Device& d) { return x23(d).sum({0}); }, DType::f32, {3}, {5, 7, 9});
  expect_all([](const Device& d) { return x23(d).sum({-1}); }, DType::f32, {2}, {6, 15});
  expect_all([](const Device& d) { return x23(d).sum({1}, true); }, DType::f32, {2, 1}, {6, 15});
  expect_all([](const Device& d) { return x23(d).sum({0, 1}, true); }, DType::f32, {1, 1}, {21});
  // An axis named twice is refused, as PyTorch ("dim 1 appears multiple times").
  expect_error([](const Device& d) { return x23(d).sum({1, 1, -1}); }, sy::Errc::invalid_argument);
  expect_error([](const Device& d) { return x23(d).max({-1, 0, -1}); }, sy::Errc::invalid_argument);
  expect_all([](const Device& d) { return x23(d).mean({1}); }, DType::f32, {2}, {2, 5});
  expect_all([](const Device& d) { return x23(d).prod({0}); }, DType::f32, {3}, {4, 10, 18});
  // [2,3,4] arange, reduced over axes {0, 2}: 60 + 32 j.
  expect_all(
      [](const Device& d) {
        return d.arange(0, 24).reshape({2, 3, 4}).sum({2, 0}, true);
      },
      DType::i64, {1, 3, 1}, {60, 92, 124});
  expect_all(
      [](const Device& d) {
        return d.arange(0, 24, 1, DType::f64).reshape({2, 3, 4}).mean({0, 2});
      },
      DType::f64, {3}, {7.5, 11.5, 15.5});
}

TEST_CASE("integer and bool sums accumulate in i64", "[ops][reduce][int]") {
  expect_all([](const Device& d) { return make(d, DType::u8, {3}, {200, 200, 200}).sum(); }, DType::i64, {}, {600});
  expect_all([](const Device& d) { return make(d, DType::boolean, {4}, {1, 0, 1, 1}).sum(); }, DType::i64, {}, {3});
  expect_all([](const Device& d) { return x23(d, DType::i32).prod({1}); }, DType::i64, {2}, {6, 120});
  CHECK_THROWS_AS(x23(reference(), DType::i32).mean(), sy::Error);
}

TEST_CASE("max, min, argmax and argmin take the first extreme", "[ops][reduce]") {
  auto t = [](const Device& d) { return make(d, DType::i32, {2, 3}, {1, 3, 3, 2, 2, 1}); };
  expect_all([&](const Device& d) { return t(d).max({1}); }, DType::i32, {2}, {3, 2});
  expect_all([&](const Device& d) { return t(d).min({0}, true); }, DType::i32, {1, 3}, {1, 2, 1});
  expect_all([&](const Device& d) { return t(d).argmax(1); }, DType::i64, {2}, {1, 0});
  expect_all([&](const Device& d) { return t(d).argmin(0, true); }, DType::i64, {1, 3}, {0, 1, 1});
  expect_all([&](const Device& d) { return t(d).argmax(); }, DType::i64, {}, {1});
  expect_all([&](const Device& d) { return t(d).argmin(); }, DType::i64, {}, {0});
}

TEST_CASE("var and std apply the correction", "[ops][reduce]") {
  expect_all([](const Device& d) { return x23(d).var({1}); }, DType::f32, {2}, {1, 1});
  expect_all([](const Device& d) { return x23(d).std({1}); }, DType::f32, {2}, {1, 1});
  expect_all([](const Device& d) { return x23(d, DType::f64).var({1}, 0); }, DType::f64, {2}, {2.0 / 3, 2.0 / 3});
  expect_all([](const Device& d) { return x23(d, DType::f64).var({0}, 1, true); }, DType::f64, {1, 3}, {4.5, 4.5, 4.5});
  // One element with correction 1: no degrees of freedom left.
  expect_all([](const Device& d) { return make(d, DType::f32, {1}, {3}).var(); }, DType::f32, {}, {kNan});
  // correction >= n: PyTorch divides by max(0, n - correction), so a spread
  // gives inf and no spread 0 / 0 = NaN.
  expect_all([](const Device& d) { return make(d, DType::f64, {2}, {1, 3}).var({}, 2); }, DType::f64, {}, {kInf});
  expect_all([](const Device& d) { return make(d, DType::f32, {2}, {1, 3}).std({0}, 5); }, DType::f32, {}, {kInf});
  expect_all([](const Device& d) { return make(d, DType::f32, {2}, {4, 4}).var({}, 3); }, DType::f32, {}, {kNan});
}

TEST_CASE("any and all", "[ops][reduce]") {
  auto b = [](const Device& d) { return make(d, DType::boolean, {2, 2}, {0, 1, 0, 0}); };
  expect_all([&](const Device& d) { return b(d).any({1}); }, DType::boolean, {2}, {1, 0});
  expect_all([&](const Device& d) { return b(d).all({0}); }, DType::boolean, {2}, {0, 0});
  expect_all([](const Device& d) { return make(d, DType::f32, {3}, {kNan, 1, -2}).all(); }, DType::boolean, {}, {1});
  expect_all([](const Device& d) { return make(d, DType::i32, {0}, {}).all(); }, DType::boolean, {}, {1});
  expect_all([](const Device& d) { return make(d, DType::i32, {0}, {}).any(); }, DType::boolean, {}, {0});
}

TEST_CASE("reductions propagate NaN", "[ops][reduce][kNan]") {
  auto t = [](const Device& d) { return make(d, DType::f32, {2, 3}, {1, kNan, 3, -kInf, 0, kInf}); };
  expect_all([&](const Device& d) { return t(d).max({1}); }, DType::f32, {2}, {kNan, kInf});
  expect_all([&](const Device& d) { return t(d).min({1}); }, DType::f32, {2}, {kNan, -kInf});
  expect_all([&](const Device& d) { return t(d).argmax(1); }, DType::i64, {2}, {1, 2});
  expect_all([&](const Device& d) { return t(d).argmin(1); }, DType::i64, {2}, {1, 0});
  expect_all([&](const Device& d) { return t(d).sum({1}); }, DType::f32, {2}, {kNan, kNan});
}

TEST_CASE("reductions of empty tensors", "[ops][reduce][empty]") {
  auto e = [](const Device& d) { return make(d, DType::f32, {0, 3}, {}); };
  expect_all([&](const Device& d) { return e(d).sum({0}); }, DType::f32, {3}, {0, 0, 0});
  expect_all([&](const Device& d) { return e(d).prod({0}); }, DType::f32, {3}, {1, 1, 1});
  expect_all([&](const Device& d) { return e(d).mean({0}); }, DType::f32, {3}, {kNan, kNan, kNan});
  expect_all([&](const Device& d) { return e(d).max({1}); }, DType::f32, {0}, {});
  expect_all([&](const Device& d) { return e(d).sum(); }, DType::f32, {}, {0});
  // No identity element: max/min/argmax/argmin of an empty extent fail at the call.
  auto r = reference();
  for (auto f : {+[](Tensor t) { return t.max({0}); }, +[](Tensor t) { return t.min(); },
                 +[](Tensor t) { return t.argmax(0); }, +[](Tensor t) { return t.argmin(); }}) {
    try {
      (void)f(e(r));
      FAIL("no error");
    } catch (const sy::Error& err) {
      CHECK(err.code() == sy::Errc::shape_mismatch);
      CHECK(std::string(err.what()).find("empty") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(x23(r).sum({2}), sy::Error);
}

TEST_CASE("softmax and log_softmax are stable", "[ops][softmax]") {
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0);
  const std::vector<double> p = {1 / z, std::exp(1.0) / z, std::exp(2.0) / z};
  expect_all([](const Device& d) { return make(d, DType::f32, {3}, {1, 2, 3}).softmax(0); }, DType::f32, {3}, p);
  // Large inputs would overflow exp without the max subtraction.
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {3}, {1000, 1001, 1002}).softmax(-1);
      },
      DType::f32, {3}, p);
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {3}, {-1000, -999, -998}).log_softmax(0);
      },
      DType::f64, {3}, {-std::log(z), 1 - std::log(z), 2 - std::log(z)});
  expect_all([](const Device& d) { return make(d, DType::f32, {2}, {-kInf, 0}).softmax(0); }, DType::f32, {2}, {0, 1});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {2}, {-kInf, 0}).log_softmax(0);
      },
      DType::f32, {2}, {-kInf, 0});
  // Rows of only -kInf, or with NaN or +kInf, have no defined distribution: NaN (as PyTorch).
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {2, 2}, {-kInf, -kInf, kNan, 1}).softmax(1);
      },
      DType::f32, {2, 2}, {kNan, kNan, kNan, kNan});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {2}, {kInf, 1}).softmax(0);
      },
      DType::f32, {2}, {kNan, kNan});
  // Along axis 0 of a 2-D tensor: columns sum to one.
  expect_all(
      [](const Device& d) {
        return make(d, DType::f64, {2, 2}, {0, 5, 0, 5}).softmax(0);
      },
      DType::f64, {2, 2}, {0.5, 0.5, 0.5, 0.5});
  CHECK_THROWS_AS(make(reference(), DType::i32, {2}, {1, 2}).softmax(0), sy::Error);
}

// The cpu backend runs contiguous rows in vectors of 4 to 16 lanes with a
// padded tail: every row length up to three vectors, special values in the
// tail as well as the body, both dtypes and both functions.
TEST_CASE("softmax rows of every length agree with the reference", "[ops][softmax]") {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t n = 1; n <= 50; ++n) {
      std::vector<double> v(static_cast<size_t>(4 * n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 1.7) * 30.0;
      // row 3: near a large maximum, where x - (max + lse) would lose digits
      for (size_t i = static_cast<size_t>(3 * n); i < v.size(); ++i) v[i] = 1000.0 + std::sin(static_cast<double>(i));
      v[static_cast<size_t>(n - 1)] = -kInf;             // row 0: -inf last
      v[static_cast<size_t>(2 * n - 1)] = kNan;          // row 1: NaN last, so all NaN
      if (n > 1) v[static_cast<size_t>(2 * n)] = -90.0;  // row 2: a far tail of exp (below f32's normal range)
      INFO("dtype " << sy::name_of(t) << ", row length " << n);
      agree([&](const Device& d) { return make(d, t, {4, n}, v).softmax(1); });
      agree([&](const Device& d) { return make(d, t, {4, n}, v).log_softmax(-1); });
    }
}

TEST_CASE("matmul of matrices, vectors and broadcast batches", "[ops][matmul]") {
  auto a = [](const Device& d) { return make(d, DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6}); };
  auto b = [](const Device& d) { return make(d, DType::f32, {3, 2}, {7, 8, 9, 10, 11, 12}); };
  expect_all([&](const Device& d) { return a(d).matmul(b(d)); }, DType::f32, {2, 2}, {58, 64, 139, 154});
  auto v = [](const Device& d) { return make(d, DType::f32, {3}, {1, 0, -1}); };
  expect_all([&](const Device& d) { return v(d).matmul(b(d)); }, DType::f32, {2}, {-4, -4});
  expect_all([&](const Device& d) { return a(d).matmul(v(d)); }, DType::f32, {2}, {-2, -2});
  expect_all([&](const Device& d) { return v(d).matmul(v(d)); }, DType::f32, {}, {2});
  // Batch [2,1] against [4]: the result is [2,4,2,2], every batch the same product of its slices.
  auto r = agree([](const Device& d) {
    auto x = d.arange(0, 2 * 2 * 3, 1, DType::f64).reshape({2, 1, 2, 3});
    auto y = d.arange(0, 4 * 3 * 2, 1, DType::f64).reshape({4, 3, 2});
    return x.matmul(y);
  });
  REQUIRE(r.shape == sy::Shape{2, 4, 2, 2});
  // Batch (1, 3): x[1][0] = [[6,7,8],[9,10,11]], y[3] = [[18,19],[20,21],[22,23]].
  const int64_t base = (1 * 4 + 3) * 4;
  CHECK(r.at(base + 0) == 6 * 18 + 7 * 20 + 8 * 22);
  CHECK(r.at(base + 3) == 9 * 19 + 10 * 21 + 11 * 23);
  CHECK_THROWS_AS(a(reference()).matmul(a(reference())), sy::Error);
  CHECK_THROWS_AS(a(reference()).matmul(make(reference(), DType::f64, {3, 2}, {0, 0, 0, 0, 0, 0})), sy::Error);
}

TEST_CASE("integer matmul wraps and empty inner extents give zeros", "[ops][matmul][int]") {
  expect_all([](const Device& d) { return x23(d, DType::i64).matmul(x23(d, DType::i64).mT()); }, DType::i64, {2, 2},
             {14, 32, 32, 77});
  expect_all(
      [](const Device& d) {
        return make(d, DType::u8, {1, 2}, {16, 16}).matmul(make(d, DType::u8, {2, 1}, {16, 1}));
      },
      DType::u8, {1, 1}, {16});  // 256 + 16 mod 256
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {2, 0}, {}).matmul(make(d, DType::f32, {0, 3}, {}));
      },
      DType::f32, {2, 3}, {0, 0, 0, 0, 0, 0});
  expect_all(
      [](const Device& d) {
        return make(d, DType::f32, {0, 2}, {}).matmul(make(d, DType::f32, {2, 3}, {0, 0, 0, 0, 0, 0}));
      },
      DType::f32, {0, 3}, {});
}

TEST_CASE("linear computes x W^T + b", "[ops][matmul][linear]") {
  auto w = [](const Device& d) { return make(d, DType::f32, {2, 3}, {1, 0, -1, 2, 2, 2}); };
  auto bias = [](const Device& d) { return make(d, DType::f32, {2}, {0.5, -1}); };
  expect_all([&](const Device& d) { return x23(d).linear(w(d), bias(d)); }, DType::f32, {2, 2},
             {-2 + 0.5, 12 - 1, -2 + 0.5, 30 - 1});
  expect_all([&](const Device& d) { return x23(d).linear(w(d)); }, DType::f32, {2, 2}, {-2, 12, -2, 30});
  expect_all(
      [&](const Device& d) {
        return make(d, DType::f32, {3}, {1, 1, 1}).linear(w(d), bias(d));
      },
      DType::f32, {2}, {0.5, 5});
  // Batched input [2,1,3] against one weight.
  expect_all(
      [&](const Device& d) {
        return x23(d).reshape({2, 1, 3}).linear(w(d), bias(d));
      },
      DType::f32, {2, 1, 2}, {-1.5, 11, -1.5, 29});
  CHECK_THROWS_AS(x23(reference()).linear(w(reference()), make(reference(), DType::f32, {3}, {0, 0, 0})), sy::Error);
}
