// SPDX-License-Identifier: Apache-2.0
// Normalisation, attention, cumsum/cumprod, sort/topk and scatter (issue
// 18, part B) on every device: hand values, the other devices against the
// reference on random shapes and arguments, and errors at the call.

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

#include <switchyard/nn.hpp>

#include "ops_common.hpp"

using namespace sytest;
using sy::Device;
using sy::DType;
using sy::Tensor;
namespace nn = switchyard::nn;

namespace {
const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<double> random_values(uint64_t seed, int64_t n, double lo = -2, double hi = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::round(u(rng) * 100) / 100;
  return v;
}

Tensor rnd(const Device& d, DType t, sy::Shape s, uint64_t seed, double lo = -2, double hi = 2) {
  auto n = s.numel();
  return make(d, t, std::move(s), random_values(seed, n, lo, hi));
}
}  // namespace

// --- normalisation ---------------------------------------------------------------

TEST_CASE("layer_norm normalises the trailing axes", "[ops][norm]") {
  const double a = 1.224744871391589;  // 1 / sqrt(2/3)
  auto x = [](const Device& d) { return make(d, DType::f64, {2, 3}, {1, 2, 3, 4, 6, 8}); };
  expect_all([&](const Device& d) { return nn::layer_norm(x(d), {3}, {}, {}, 0); }, DType::f64, {2, 3},
             {-a, 0, a, -a, 0, a});
  expect_all(
      [&](const Device& d) {
        return nn::layer_norm(x(d), {3}, make(d, DType::f64, {3}, {1, 2, 3}), make(d, DType::f64, {3}, {0, 1, 0}), 0);
      },
      DType::f64, {2, 3}, {-a, 1, 3 * a, -a, 1, 3 * a});
  // Over both axes: mean 4, variance 34/6.
  const double s = 1 / std::sqrt(34.0 / 6);
  expect_all(
      [&](const Device& d) {
        return nn::layer_norm(x(d), {2, 3}, {}, {}, 0);
      },
      DType::f64, {2, 3}, {-3 * s, -2 * s, -s, 0, 2 * s, 4 * s});
  // A large offset does not cancel the variance (two-pass statistics).
  expect_all(
      [](const Device& d) {
        return nn::layer_norm(make(d, DType::f32, {1, 2}, {1e4 + 1, 1e4 + 3}), {2}, {}, {}, 0);
      },
      DType::f32, {1, 2}, {-1, 1});
}

TEST_CASE("rms_norm, group_norm and batch_norm", "[ops][norm]") {
  const double r = 1 / std::sqrt(12.5);
  expect_all(
      [](const Device& d) {
        return nn::rms_norm(make(d, DType::f64, {2}, {3, 4}), {2}, {}, 0.0);
      },
      DType::f64, {2}, {3 * r, 4 * r});
  expect_all(
      [](const Device& d) {
        return nn::rms_norm(make(d, DType::f64, {2}, {3, 4}), {2}, make(d, DType::f64, {2}, {2, -1}), 0.0);
      },
      DType::f64, {2}, {6 * r, -4 * r});
  // Groups {1,2} and {3,5}: each becomes (-1, 1).
  expect_all(
      [](const Device& d) {
        return nn::group_norm(make(d, DType::f64, {1, 4, 1}, {1, 2, 3, 5}), 2, {}, {}, 0);
      },
      DType::f64, {1, 4, 1}, {-1, 1, -1, 1});
  expect_all(
      [](const Device& d) {
        return nn::group_norm(make(d, DType::f64, {1, 4, 1}, {1, 2, 3, 5}), 2, make(d, DType::f64, {4}, {1, 2, 3, 4}),
                              make(d, DType::f64, {4}, {0, 0, 1, 1}), 0);
      },
      DType::f64, {1, 4, 1}, {-1, 2, -2, 5});
  auto bn = [](const Device& d, bool affine) {
    return nn::batch_norm(make(d, DType::f32, {2, 2}, {1, 2, 3, 4}), make(d, DType::f32, {2}, {1, 2}),
                          make(d, DType::f32, {2}, {4, 1}), affine ? make(d, DType::f32, {2}, {2, 1}) : Tensor{},
                          affine ? make(d, DType::f32, {2}, {0, 1}) : Tensor{}, false, 0.1, 0);
  };
  expect_all([&](const Device& d) { return bn(d, false); }, DType::f32, {2, 2}, {0, 0, 1, 2});
  expect_all([&](const Device& d) { return bn(d, true); }, DType::f32, {2, 2}, {0, 1, 2, 3});
}

TEST_CASE("a large mean keeps every norm's normalised values", "[ops][norm]") {
  // Exact in f32; the mean, 10000000.67, is not. Normalised in double:
  // the mean rounded to f32 first, or x * scale + shift folded into f32
  // constants, loses up to a third of each value.
  const std::vector<double> xs = {10000001, 10000003, 9999998};
  const double mean = (xs[0] + xs[1] + xs[2]) / 3;
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean) / 3;
  std::vector<double> z;
  for (double x : xs) z.push_back((x - mean) / std::sqrt(var));
  expect_all(
      [&](const Device& d) {
        return nn::layer_norm(make(d, DType::f32, {1, 3}, xs), {3}, {}, {}, 0);
      },
      DType::f32, {1, 3}, z);
  // group_norm with a weight and bias per channel (three channels, one group).
  expect_all(
      [&](const Device& d) {
        return nn::group_norm(make(d, DType::f32, {1, 3, 1}, xs), 1, make(d, DType::f32, {3}, {2, 1, -1}),
                              make(d, DType::f32, {3}, {1, 0, 0.5}), 0);
      },
      DType::f32, {1, 3, 1}, {2 * z[0] + 1, z[1], -z[2] + 0.5});
  // batch_norm whose running mean is large: three channels of one value.
  expect_all(
      [&](const Device& d) {
        return nn::batch_norm(make(d, DType::f32, {1, 3}, xs), make(d, DType::f32, {3}, {mean, mean, mean}),
                              make(d, DType::f32, {3}, {var, var, var}), {}, {}, false, 0.1, 0);
      },
      DType::f32, {1, 3},
      {(xs[0] - static_cast<float>(mean)) / std::sqrt(static_cast<float>(var)),
       (xs[1] - static_cast<float>(mean)) / std::sqrt(static_cast<float>(var)),
       (xs[2] - static_cast<float>(mean)) / std::sqrt(static_cast<float>(var))});
}

TEST_CASE("normalisation errors name the op, shapes and argument", "[ops][norm][errors]") {
  Device d = reference();
  auto x = d.zeros({2, 6, 3});
  CHECK_THROWS_WITH(nn::layer_norm(x, {2}),
                    Catch::Contains("layer_norm") && Catch::Contains("[2]") && Catch::Contains("[2, 6, 3]"));
  CHECK_THROWS_WITH(nn::group_norm(x, 4),
                    Catch::Contains("group_norm") && Catch::Contains("num_groups=4") && Catch::Contains("[2, 6, 3]"));
  CHECK_THROWS_WITH(nn::layer_norm(x, {3}, d.ones({4})), Catch::Contains("weight") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(nn::layer_norm(x, {3}, d.ones({3}, DType::f64)), Catch::Contains("f64"));
  CHECK_THROWS_WITH(nn::batch_norm(x, d.zeros({6}), d.ones({6}), {}, {}, true), Catch::Contains("training"));
  CHECK_THROWS_WITH(nn::batch_norm(x, d.zeros({5}), d.ones({5})), Catch::Contains("running_mean"));
  CHECK_THROWS_WITH(nn::layer_norm(d.zeros({2, 3}, DType::i64), {3}), Catch::Contains("floating"));
  CHECK_THROWS_AS(nn::group_norm(x, 0), sy::Error);
  CHECK_THROWS_WITH(nn::layer_norm(x, {}), Catch::Contains("at least one axis"));
  CHECK_THROWS_WITH(nn::rms_norm(x, {}), Catch::Contains("at least one axis"));
}

TEST_CASE("norms agree with the reference on random shapes", "[ops][norm][random]") {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3), c = 2 * (1 + static_cast<int64_t>(rng() % 4));
    const int64_t hw = static_cast<int64_t>(rng() % 40);  // 0: an empty spatial axis
    const DType t = trial % 2 ? DType::f64 : DType::f32;
    const uint64_t seed = rng();
    INFO("trial " << trial << " [" << n << ", " << c << ", " << hw << "]");
    agree([&](const Device& d) {
      return nn::layer_norm(rnd(d, t, {n, c, hw}, seed, 5, 9), {hw}, rnd(d, t, {hw}, seed + 1),
                            rnd(d, t, {hw}, seed + 2));
    });
    agree([&](const Device& d) {
      return nn::rms_norm(rnd(d, t, {n, c, hw}, seed), {c, hw}, rnd(d, t, {c, hw}, seed));
    });
    agree([&](const Device& d) {
      return nn::group_norm(rnd(d, t, {n, c, hw}, seed), c / 2, rnd(d, t, {c}, seed + 3), rnd(d, t, {c}, seed + 4));
    });
    agree([&](const Device& d) {
      return nn::batch_norm(rnd(d, t, {n, c, hw}, seed), rnd(d, t, {c}, seed + 5), rnd(d, t, {c}, seed + 6, 0.5, 3),
                            rnd(d, t, {c}, seed + 7), rnd(d, t, {c}, seed + 8), false, 0.1, 1e-3);
    });
  }
}

// --- attention -------------------------------------------------------------------

TEST_CASE("scaled_dot_product_attention by hand", "[ops][attention]") {
  auto q = [](const Device& d) { return make(d, DType::f64, {1, 1, 2}, {1, 0}); };
  auto k = [](const Device& d) { return make(d, DType::f64, {1, 2, 2}, {1, 0, 0, 1}); };
  auto v = [](const Device& d) { return make(d, DType::f64, {1, 2, 1}, {10, 20}); };
  const double p = std::exp(1.0) / (std::exp(1.0) + 1);
  expect_all([&](const Device& d) { return nn::scaled_dot_product_attention(q(d), k(d), v(d), {}, 0, false, 1.0); },
             DType::f64, {1, 1, 1}, {10 * p + 20 * (1 - p)});
  // Default scale 1/sqrt(2).
  const double p2 = std::exp(1 / std::sqrt(2.0)) / (std::exp(1 / std::sqrt(2.0)) + 1);
  expect_all([&](const Device& d) { return nn::scaled_dot_product_attention(q(d), k(d), v(d)); }, DType::f64, {1, 1, 1},
             {10 * p2 + 20 * (1 - p2)});
  expect_all(
      [&](const Device& d) {
        return nn::scaled_dot_product_attention(q(d), k(d), v(d), make(d, DType::boolean, {2}, {0, 1}));
      },
      DType::f64, {1, 1, 1}, {20});
  // A float mask is added: -inf on key 1 leaves key 0.
  expect_all(
      [&](const Device& d) {
        return nn::scaled_dot_product_attention(q(d), k(d), v(d), make(d, DType::f64, {1, 1, 2}, {0, -kInf}));
      },
      DType::f64, {1, 1, 1}, {10});
  // Causal, one query: only key 0.
  expect_all([&](const Device& d) { return nn::scaled_dot_product_attention(q(d), k(d), v(d), {}, 0, true); },
             DType::f64, {1, 1, 1}, {10});
  // Every key masked: NaN, as the softmax of only -inf.
  expect_all(
      [&](const Device& d) {
        return nn::scaled_dot_product_attention(q(d), k(d), v(d), make(d, DType::boolean, {2}, {0, 0}));
      },
      DType::f64, {1, 1, 1}, {kNan});
}

TEST_CASE("attention agrees with the reference across key blocks", "[ops][attention][random]") {
  struct Case {
    std::vector<int64_t> batch;
    int64_t L, S, E, Ev;
    int mask;  // 0 none, 1 bool, 2 float, 3 causal
  };
  // Lengths beyond the cpu's 64-query blocks and its key blocks, odd sizes,
  // masks broadcast from fewer axes.
  const std::vector<Case> cases = {{{2, 3}, 5, 7, 4, 3, 0},   {{1}, 130, 300, 16, 8, 0}, {{2}, 70, 70, 64, 64, 3},
                                   {{3}, 100, 1100, 8, 5, 1}, {{2, 2}, 9, 33, 6, 6, 2},  {{1}, 200, 90, 32, 32, 3},
                                   {{}, 3, 4, 2, 2, 1},       {{1}, 65, 520, 3, 2, 2}};
  uint64_t seed = 100;
  for (const auto& c : cases) {
    for (DType t : {DType::f32, DType::f64}) {
      ++seed;
      INFO("L " << c.L << " S " << c.S << " E " << c.E << " Ev " << c.Ev << " mask " << c.mask << " "
                << sy::name_of(t));
      auto shape = [&](int64_t a, int64_t b) {
        auto dims = c.batch;
        dims.push_back(a);
        dims.push_back(b);
        return sy::Shape(dims);
      };
      agree(
          [&](const Device& d) {
            Tensor mask;
            if (c.mask == 1) {
              auto v = random_values(seed + 3, c.L * c.S, 0, 1);
              for (auto& x : v) x = x < 0.7 ? 1 : 0;
              mask = make(d, DType::boolean, {c.L, c.S}, v);
            } else if (c.mask == 2) {
              mask = rnd(d, t, {c.S}, seed + 4, -3, 1);
            }
            return nn::scaled_dot_product_attention(rnd(d, t, shape(c.L, c.E), seed),
                                                    rnd(d, t, shape(c.S, c.E), seed + 1),
                                                    rnd(d, t, shape(c.S, c.Ev), seed + 2), mask, 0, c.mask == 3);
          },
          t == DType::f32 ? Tol{1e-4, 1e-5} : tol_for(t));
    }
  }
}

TEST_CASE("attention errors at the call", "[ops][attention][errors]") {
  Device d = reference();
  auto q = d.zeros({2, 4, 8}), k = d.zeros({2, 5, 8}), v = d.zeros({2, 5, 3});
  CHECK_THROWS_WITH(nn::scaled_dot_product_attention(q, k, v, d.zeros({3, 5}, DType::boolean)),
                    Catch::Contains("attn_mask [3, 5]") && Catch::Contains("[2, 4, 5]"));
  CHECK_THROWS_WITH(nn::scaled_dot_product_attention(q, d.zeros({2, 5, 7}), v), Catch::Contains("embedding"));
  CHECK_THROWS_WITH(nn::scaled_dot_product_attention(q, k, d.zeros({2, 6, 3})), Catch::Contains("keys"));
  CHECK_THROWS_WITH(nn::scaled_dot_product_attention(q, k, v, {}, 0.1), Catch::Contains("dropout_p"));
  CHECK_THROWS_WITH(nn::scaled_dot_product_attention(q, k, v, d.zeros({4, 5}, DType::i32)), Catch::Contains("i32"));
  CHECK_THROWS_WITH(nn::scaled_dot_product_attention(q, k, v, d.ones({4, 5}, DType::boolean), 0, true),
                    Catch::Contains("is_causal"));
}

// --- scans -------------------------------------------------------------------------

TEST_CASE("cumsum and cumprod with PyTorch's dtype rule", "[ops][scan]") {
  auto x = [](const Device& d, DType t) { return make(d, t, {2, 2}, {1, 2, 3, 4}); };
  expect_all([&](const Device& d) { return x(d, DType::f32).cumsum(0); }, DType::f32, {2, 2}, {1, 2, 4, 6});
  expect_all([&](const Device& d) { return x(d, DType::f32).cumsum(-1); }, DType::f32, {2, 2}, {1, 3, 3, 7});
  expect_all([&](const Device& d) { return x(d, DType::i32).cumsum(1); }, DType::i64, {2, 2}, {1, 3, 3, 7});
  expect_all([&](const Device& d) { return x(d, DType::u8).cumprod(0); }, DType::i64, {2, 2}, {1, 2, 3, 8});
  expect_all(
      [&](const Device& d) {
        return make(d, DType::boolean, {3}, {1, 0, 1}).cumsum(0);
      },
      DType::i64, {3}, {1, 1, 2});
  expect_all(
      [&](const Device& d) {
        return make(d, DType::f64, {2}, {1.5, 2.5}).cumsum(0, DType::i32);
      },
      DType::i32, {2}, {1, 3});
  expect_all([&](const Device& d) { return make(d, DType::f32, {}, {3}).cumsum(-1); }, DType::f32, {}, {3});
  expect_all([&](const Device& d) { return x(d, DType::i64).cumprod(1, DType::f64); }, DType::f64, {2, 2},
             {1, 2, 3, 12});
  CHECK_THROWS_WITH(reference().zeros({2}).cumsum(1), Catch::Contains("cumsum") && Catch::Contains("axis 1"));
  CHECK_THROWS_WITH(reference().zeros({2}).cumsum(0, DType::boolean), Catch::Contains("bool"));
}

TEST_CASE("scans agree with the reference on random shapes", "[ops][scan][random]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    sy::Shape s(
        {1 + static_cast<int64_t>(rng() % 5), static_cast<int64_t>(rng() % 7), 1 + static_cast<int64_t>(rng() % 1500)});
    const int64_t axis = static_cast<int64_t>(rng() % 3);
    const uint64_t seed = rng();
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::u8}) {
      INFO(s.to_string() << " axis " << axis << " " << sy::name_of(t));
      agree([&](const Device& d) { return rnd(d, t, s, seed, 0, 3).cumsum(axis); }, Tol{1e-5, 1e-5});
      agree([&](const Device& d) { return rnd(d, t, s, seed, 0.9, 1.1).cumprod(axis); }, Tol{1e-4, 1e-6});
    }
  }
}

// --- sort, argsort, topk ---------------------------------------------------------

TEST_CASE("sort, argsort and topk", "[ops][sort]") {
  auto x = [](const Device& d) { return make(d, DType::f32, {4}, {3, 1, 2, 1}); };
  expect_all([&](const Device& d) { return x(d).argsort(); }, DType::i64, {4}, {1, 3, 2, 0});
  expect_all([&](const Device& d) { return x(d).argsort(0, true); }, DType::i64, {4}, {0, 2, 1, 3});
  expect_all([&](const Device& d) { return x(d).sort().values; }, DType::f32, {4}, {1, 1, 2, 3});
  expect_all([&](const Device& d) { return x(d).sort(-1, true, true).indices; }, DType::i64, {4}, {0, 2, 1, 3});
  // NaN above every number.
  auto n = [](const Device& d) { return make(d, DType::f64, {4}, {1, kNan, 3, -1}); };
  expect_all([&](const Device& d) { return n(d).argsort(); }, DType::i64, {4}, {3, 0, 2, 1});
  expect_all([&](const Device& d) { return n(d).argsort(0, true); }, DType::i64, {4}, {1, 2, 0, 3});
  expect_all([&](const Device& d) { return n(d).topk(2).indices; }, DType::i64, {2}, {1, 2});
  expect_all([&](const Device& d) { return n(d).topk(2, 0, false).values; }, DType::f64, {2}, {-1, 1});
  auto y = [](const Device& d) { return make(d, DType::i32, {2, 3}, {5, 9, 1, 4, 0, 7}); };
  expect_all([&](const Device& d) { return y(d).topk(2).values; }, DType::i32, {2, 2}, {9, 5, 7, 4});
  expect_all([&](const Device& d) { return y(d).topk(1, 0).indices; }, DType::i64, {1, 3}, {0, 0, 1});
  expect_all([&](const Device& d) { return y(d).topk(2, 1, false).indices; }, DType::i64, {2, 2}, {2, 0, 1, 0});
  expect_all([&](const Device& d) { return y(d).topk(0).values; }, DType::i32, {2, 0}, {});
  expect_all(
      [&](const Device& d) {
        return make(d, DType::boolean, {3}, {1, 0, 1}).argsort();
      },
      DType::i64, {3}, {1, 0, 2});
  CHECK_THROWS_WITH(reference().zeros({2, 3}).topk(4),
                    Catch::Contains("topk") && Catch::Contains("k=4") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(reference().zeros({2}, DType::boolean).topk(1), Catch::Contains("bool"));
}

TEST_CASE("one long line sorts in runs and merges; topk keeps a heap", "[ops][sort][random]") {
  // The cpu splits one long line over its threads and keeps a heap for a
  // small k: both must give the reference's order, ties by index.
  for (DType t : {DType::f32, DType::i32}) {
    INFO(sy::name_of(t));
    agree([&](const Device& d) { return rnd(d, t, {100000}, 5, 0, 50).argsort(); });
    agree([&](const Device& d) { return rnd(d, t, {100000}, 6, 0, 50).argsort(0, true); });
    agree([&](const Device& d) { return rnd(d, t, {100000}, 7, 0, 50).topk(37).indices; });
    agree([&](const Device& d) { return rnd(d, t, {3, 20000}, 8, 0, 50).topk(5, 1, false).indices; });
  }
  // NaN above every number, also on the heap's shortcut: every 97th is NaN.
  auto v = random_values(9, 100000, 0, 50);
  for (size_t i = 0; i < v.size(); i += 97) v[i] = kNan;
  for (bool largest : {true, false}) {
    INFO("largest " << largest);
    agree([&](const Device& d) { return make(d, DType::f32, {100000}, v).topk(40, 0, largest).indices; });
    agree([&](const Device& d) { return make(d, DType::f64, {4, 25000}, v).topk(3, 1, largest).indices; });
    agree([&](const Device& d) { return make(d, DType::f32, {100000}, v).topk(2000, 0, largest).indices; });
  }
}

TEST_CASE("sorting agrees with the reference, ties in index order", "[ops][sort][random]") {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 8; ++trial) {
    sy::Shape s({1 + static_cast<int64_t>(rng() % 4), 1 + static_cast<int64_t>(rng() % 300)});
    const int64_t axis = static_cast<int64_t>(rng() % 2);
    const int64_t extent = s.dims[axis];
    const int64_t k = static_cast<int64_t>(rng() % static_cast<uint64_t>(extent + 1));
    const uint64_t seed = rng();
    for (DType t : {DType::f32, DType::i64, DType::u8}) {
      INFO(s.to_string() << " axis " << axis << " k " << k << " " << sy::name_of(t));
      // Integers from a small range: many ties.
      agree([&](const Device& d) { return rnd(d, t, s, seed, 0, 20).argsort(axis, trial % 2 == 0); });
      agree([&](const Device& d) { return rnd(d, t, s, seed, 0, 20).topk(k, axis, trial % 2 == 1).indices; });
    }
  }
}

// --- scatter ---------------------------------------------------------------------------

TEST_CASE("scatter and scatter_reduce", "[ops][scatter]") {
  auto idx = [](const Device& d) { return make(d, DType::i64, {4}, {2, 0, 2, 1}); };
  auto src = [](const Device& d) { return make(d, DType::f32, {4}, {5, 6, 7, -1}); };
  auto base = [](const Device& d) { return make(d, DType::f32, {3}, {1, 2, 3}); };
  expect_all(
      [&](const Device& d) {
        return base(d).scatter(0, make(d, DType::i64, {2}, {2, 0}), src(d));
      },
      DType::f32, {3}, {6, 2, 5});
  expect_all([&](const Device& d) { return base(d).scatter_reduce(0, idx(d), src(d), "sum"); }, DType::f32, {3},
             {7, 1, 15});
  expect_all([&](const Device& d) { return base(d).scatter_reduce(0, idx(d), src(d), "prod"); }, DType::f32, {3},
             {6, -2, 105});
  expect_all([&](const Device& d) { return base(d).scatter_reduce(0, idx(d), src(d), "amax"); }, DType::f32, {3},
             {6, 2, 7});
  expect_all([&](const Device& d) { return base(d).scatter_reduce(0, idx(d), src(d), "amin"); }, DType::f32, {3},
             {1, -1, 3});
  // 2-D along axis 1, i32 values.
  expect_all(
      [](const Device& d) {
        return make(d, DType::i32, {2, 3}, {0, 0, 0, 0, 0, 0})
            .scatter(1, make(d, DType::i64, {2, 2}, {2, 0, 1, 2}), make(d, DType::i32, {2, 2}, {7, 8, 9, 10}));
      },
      DType::i32, {2, 3}, {8, 0, 7, 0, 9, 10});
  // An index out of range fails when the op runs, naming the value.
  expect_error([&](const Device& d) { return base(d).scatter(0, make(d, DType::i64, {1}, {3}), src(d)); },
               sy::Errc::index_out_of_range);
  expect_error(
      [&](const Device& d) { return base(d).scatter_reduce(0, make(d, DType::i64, {1}, {-4}), src(d), "amax"); },
      sy::Errc::index_out_of_range);
  CHECK_THROWS_WITH(base(reference()).scatter_reduce(0, idx(reference()), src(reference()), "mean"),
                    Catch::Contains("mean"));
  CHECK_THROWS_WITH(base(reference()).scatter_reduce(0, idx(reference()), src(reference()), "sum", false),
                    Catch::Contains("include_self"));
}

TEST_CASE("one_hot and embedding", "[ops][nn]") {
  expect_all(
      [](const Device& d) {
        return nn::one_hot(make(d, DType::i64, {2}, {0, 2}));
      },
      DType::i64, {2, 3}, {1, 0, 0, 0, 0, 1});
  expect_all(
      [](const Device& d) {
        return nn::one_hot(make(d, DType::i64, {2}, {1, 1}), 4);
      },
      DType::i64, {2, 4}, {0, 1, 0, 0, 0, 1, 0, 0});
  expect_error([](const Device& d) { return nn::one_hot(make(d, DType::i64, {1}, {3}), 3); },
               sy::Errc::index_out_of_range);
  // With a class count, a negative class fails on the device (the call
  // reads nothing), moved out of the scatter's range (-1 - 3 = -4), not
  // counted from the end into class 2.
  expect_error(
      [](const Device& d) {
        return nn::one_hot(make(d, DType::i64, {2}, {0, -1}), 3);
      },
      sy::Errc::index_out_of_range);
  {
    auto bad = nn::one_hot(make(reference(), DType::i64, {2}, {0, -1}), 3);
    CHECK_THROWS_WITH(bad.read().get(), Catch::Contains("index -4 is out of range for extent 3"));
  }
  // Inferred, the class count is read on the host, and a negative class fails at the call.
  CHECK_THROWS_WITH(nn::one_hot(make(reference(), DType::i64, {1}, {-1})), Catch::Contains("non-negative"));
  {
    // Nothing read on the host: a recording of it replays.
    auto x = make(reference(), DType::i64, {3}, {0, 2, 1});
    std::vector<Tensor> out;
    auto given = sy::Recording::record(
        std::span<const Tensor>(&x, 1),
        [](std::span<const Tensor> in) { return std::vector<Tensor>{nn::one_hot(in[0], 3)}; }, out);
    CHECK(given.replayable());
    auto inferred = sy::Recording::record(
        std::span<const Tensor>(&x, 1),
        [](std::span<const Tensor> in) { return std::vector<Tensor>{nn::one_hot(in[0])}; }, out);
    CHECK_FALSE(inferred.replayable());
  }
  CHECK_THROWS_WITH(nn::one_hot(make(reference(), DType::i32, {1}, {1}), 3), Catch::Contains("i64"));
  expect_all(
      [](const Device& d) {
        return nn::embedding(make(d, DType::i64, {2, 2}, {2, 0, 0, 1}), make(d, DType::f32, {3, 2}, {0, 1, 2, 3, 4, 5}),
                             0);
      },
      DType::f32, {2, 2, 2}, {4, 5, 0, 1, 0, 1, 2, 3});
}
