// SPDX-License-Identifier: Apache-2.0
// Convolution and pooling on every device: hand-computed values, the fast
// CPU paths (1x1 GEMM, im2col tiles, depthwise, transposed col2im) against
// the reference backend on random shapes and arguments, and errors at the
// call that name the op, the shapes and the argument.

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "../support/watchdog.hpp"
#include "ops_common.hpp"
#include "switchyard/nn.hpp"

using namespace sytest;
using sy::Device;
using sy::DType;
using sy::Tensor;
namespace nn = sy::nn;
using Catch::Matchers::Contains;

namespace {

std::vector<double> iota(int64_t n, double start = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = start++;
  return v;
}

}  // namespace

TEST_CASE("conv1d/2d/3d give hand-computed values", "[ops][conv]") {
  // 3x3 image 1..9, 2x2 kernel of ones: sums of each 2x2 block, plus bias.
  expect_all(
      [](const Device& d) {
        return nn::conv2d(make(d, DType::f32, {1, 1, 3, 3}, iota(9)), make(d, DType::f32, {1, 1, 2, 2}, {1, 1, 1, 1}),
                          make(d, DType::f32, {1}, {0.5}));
      },
      DType::f32, {1, 1, 2, 2}, {12.5, 16.5, 24.5, 28.5});
  // Stride 2, padding 1, kernel [1, 0, -1]: x[2o-1] - x[2o+1] over [0,1,2,3,4,5,0].
  expect_all(
      [](const Device& d) {
        return nn::conv1d(make(d, DType::f64, {1, 1, 5}, iota(5)), make(d, DType::f64, {1, 1, 3}, {1, 0, -1}), {}, 2,
                          1);
      },
      DType::f64, {1, 1, 3}, {-2, -2, 4});
  // Unbatched input, two groups of one channel each (the depthwise path).
  expect_all(
      [](const Device& d) {
        return nn::conv2d(make(d, DType::f32, {2, 2, 2}, iota(8)), make(d, DType::f32, {2, 1, 1, 1}, {2, 3}), {}, 1, 0,
                          1, 2);
      },
      DType::f32, {2, 2, 2}, {2, 4, 6, 8, 15, 18, 21, 24});
  // Two groups of two channels, 1x1 kernel (the GEMM path per group).
  expect_all(
      [](const Device& d) {
        return nn::conv2d(make(d, DType::f32, {1, 4, 1, 1}, {1, 2, 3, 4}),
                          make(d, DType::f32, {2, 2, 1, 1}, {1, 10, 100, 1000}), {}, 1, 0, 1, 2);
      },
      DType::f32, {1, 2, 1, 1}, {21, 4300});
  expect_all(
      [](const Device& d) {
        return nn::conv3d(d.full({1, 1, 2, 2, 2}, 1.0), d.full({1, 1, 2, 2, 2}, 1.0));
      },
      DType::f32, {1, 1, 1, 1, 1}, {8});
  // padding="same" with an even kernel: the extra zero goes after.
  expect_all(
      [](const Device& d) {
        return nn::conv1d(make(d, DType::f32, {1, 1, 4}, iota(4)), make(d, DType::f32, {1, 1, 2}, {1, 1}), {}, 1,
                          "same");
      },
      DType::f32, {1, 1, 4}, {3, 5, 7, 4});
  // Explicit asymmetric pads (one before, none after) through the general entry.
  expect_all(
      [](const Device& d) {
        nn::ConvOptions o;
        o.pad_begin = {1};
        o.pad_end = {0};
        return nn::conv(make(d, DType::f32, {1, 1, 4}, iota(4)), make(d, DType::f32, {1, 1, 2}, {1, 1}), {}, o);
      },
      DType::f32, {1, 1, 4}, {1, 3, 5, 7});
}

TEST_CASE("conv_transpose scatters each input over its kernel", "[ops][conv]") {
  // [1, 2] with kernel [1, 1, 1], stride 2: [1, 1, 1+2, 2, 2].
  expect_all(
      [](const Device& d) {
        return nn::conv_transpose1d(make(d, DType::f32, {1, 1, 2}, {1, 2}), make(d, DType::f32, {1, 1, 3}, {1, 1, 1}),
                                    {}, 2);
      },
      DType::f32, {1, 1, 5}, {1, 1, 3, 2, 2});
  // output_padding adds one position at the end; bias everywhere.
  expect_all(
      [](const Device& d) {
        return nn::conv_transpose1d(make(d, DType::f64, {1, 2}, {1, 2}), make(d, DType::f64, {1, 1, 3}, {1, 1, 1}),
                                    make(d, DType::f64, {1}, {10}), 2, 0, 1);
      },
      DType::f64, {1, 6}, {11, 11, 13, 12, 12, 10});
  // Padding crops: padding 1 removes one position at each end.
  expect_all(
      [](const Device& d) {
        return nn::conv_transpose2d(d.full({1, 1, 2, 2}, 1.0), d.full({1, 1, 2, 2}, 1.0), {}, 1, 1);
      },
      DType::f32, {1, 1, 1, 1}, {4});
}

TEST_CASE("max_pool, avg_pool and adaptive pools give hand-computed values", "[ops][pool]") {
  auto grid = [](const Device& d) { return make(d, DType::f32, {1, 1, 4, 4}, iota(16, 0)); };
  expect_all([&](const Device& d) { return nn::max_pool2d(grid(d), 2); }, DType::f32, {1, 1, 2, 2}, {5, 7, 13, 15});
  expect_all([&](const Device& d) { return nn::max_pool2d_with_indices(grid(d), 2).second; }, DType::i64, {1, 1, 2, 2},
             {5, 7, 13, 15});
  // ceil_mode keeps a last, partial window that starts inside the input.
  auto row = [](const Device& d) { return make(d, DType::f32, {1, 5}, {1, 3, 2, 5, 4}); };
  expect_all([&](const Device& d) { return nn::max_pool1d(row(d), 2, 2, 0, 1, true); }, DType::f32, {1, 3}, {3, 5, 4});
  expect_all([&](const Device& d) { return nn::max_pool1d_with_indices(row(d), 2, 2, 0, 1, true).second; }, DType::i64,
             {1, 3}, {1, 3, 4});
  expect_all([&](const Device& d) { return nn::max_pool1d(row(d), 2, 2); }, DType::f32, {1, 2}, {3, 5});
  // Dilation 2: windows {0, 2}, {1, 3} and {2, 4}.
  expect_all([&](const Device& d) { return nn::max_pool1d(row(d), 2, 1, 0, 2); }, DType::f32, {1, 3}, {2, 5, 4});
  // Padding counts as -inf for max, as 0 for avg (and in the divisor when
  // count_include_pad).
  auto four = [](const Device& d) { return make(d, DType::f32, {1, 4}, {1, 2, 3, 4}); };
  expect_all([&](const Device& d) { return nn::avg_pool1d(four(d), 2, 2, 1); }, DType::f32, {1, 3}, {0.5, 2.5, 2});
  expect_all([&](const Device& d) { return nn::avg_pool1d(four(d), 2, 2, 1, false, false); }, DType::f32, {1, 3},
             {1, 2.5, 4});
  expect_all([&](const Device& d) { return nn::max_pool1d(four(d), 3, 2, 1); }, DType::f32, {1, 2}, {2, 4});
  expect_all(
      [&](const Device& d) {
        return nn::avg_pool2d(d.full({1, 2, 2}, 1.0), 2, {}, 0, false, true, 3);
      },
      DType::f32, {1, 1, 1}, {4.0 / 3});
  // i64 averages truncate toward zero, as PyTorch.
  expect_all(
      [](const Device& d) {
        return nn::avg_pool1d(make(d, DType::i64, {1, 4}, {-7, -1, 5, 2}), 3, 3, 1);
      },
      DType::i64, {1, 2}, {-2, 2});
  // Adaptive windows [floor(i*5/2), ceil((i+1)*5/2)): [0, 3) and [2, 5).
  expect_all(
      [](const Device& d) {
        return nn::adaptive_avg_pool1d(make(d, DType::f64, {1, 5}, iota(5)), 2);
      },
      DType::f64, {1, 2}, {2, 4});
  auto peaks = [](const Device& d) { return make(d, DType::f32, {1, 1, 5}, {1, 5, 3, 4, 2}); };
  expect_all([&](const Device& d) { return nn::adaptive_max_pool1d(peaks(d), 2); }, DType::f32, {1, 1, 2}, {5, 4});
  expect_all([&](const Device& d) { return nn::adaptive_max_pool1d_with_indices(peaks(d), 2).second; }, DType::i64,
             {1, 1, 2}, {1, 3});
  expect_all([&](const Device& d) { return nn::adaptive_avg_pool2d(grid(d), 1); }, DType::f32, {1, 1, 1, 1}, {7.5});
  // ONNX-style asymmetric pads through the general entry: one after only.
  expect_all(
      [](const Device& d) {
        nn::PoolOptions o;
        o.kernel_size = {2};
        o.pad_end = {1};
        return nn::max_pool(make(d, DType::f32, {1, 3}, {-1, -2, -3}), o);
      },
      DType::f32, {1, 2}, {-1, -3});
}

TEST_CASE("bad convolution and pooling arguments fail at the call, naming op, shapes and argument",
          "[ops][conv][pool][errors]") {
  const auto d = reference();
  const auto x = d.full({1, 4, 5, 5}, 1.0);
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 2, 3, 3}, 1.0), {}, 1, 0, 1, 3),
                    Contains("conv2d") && Contains("groups=3") && Contains("[6, 2, 3, 3]"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 3, 3, 3}, 1.0)),
                    Contains("conv2d") && Contains("[1, 4, 5, 5]") && Contains("channels"));
  CHECK_THROWS_WITH(nn::conv2d(d.full({1, 4, 2, 2}, 1.0), d.full({6, 4, 3, 3}, 1.0)),
                    Contains("conv2d") && Contains("smaller than the dilated kernel"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 4, 3, 3}, 1.0), {}, 0), Contains("conv2d: stride"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 4, 3, 3}, 1.0), {}, 1, 0, {1, 0}), Contains("conv2d: dilation"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 4, 3}, 1.0)), Contains("conv2d: weight must have 4 axes"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 4, 3, 3}, 1.0), d.full({5}, 1.0)),
                    Contains("conv2d") && Contains("bias") && Contains("6 elements"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 4, 3, 3}, 1.0), {}, 2, "same"), Contains("not supported for strided"));
  CHECK_THROWS_WITH(nn::conv2d(x, d.full({6, 4, 3, 3}, 1.0), {}, {1, 2, 3}), Contains("stride needs 1 or 2 values"));
  CHECK_THROWS_AS(nn::conv2d(x.cast(DType::i32), d.full({6, 4, 3, 3}, 1, DType::i32)), sy::Error);
  CHECK_THROWS_WITH(nn::conv_transpose2d(x, d.full({4, 2, 3, 3}, 1.0), {}, 1, 0, 1),
                    Contains("conv_transpose2d: output_padding"));
  CHECK_THROWS_WITH(nn::max_pool2d(x, 3, {}, 2), Contains("max_pool2d") && Contains("at most half of kernel_size"));
  CHECK_THROWS_WITH(nn::avg_pool2d(d.full({1, 1, 2, 2}, 1.0), 3),
                    Contains("avg_pool2d") && Contains("output size is too small"));
  CHECK_THROWS_WITH(nn::max_pool2d(x, 2, 0), Contains("max_pool2d: stride"));
  CHECK_THROWS_WITH(nn::max_pool2d(d.full({5}, 1.0), 2), Contains("max_pool2d: expected a 3-D"));
  CHECK_THROWS_WITH(nn::max_pool2d(x.cast(DType::i64), 2), Contains("max_pool2d: not defined for i64"));
  CHECK_THROWS_WITH(nn::avg_pool2d(x, 2, {}, 0, false, true, 0), Contains("divisor_override must not be zero"));
  // Errors are Errc codes: shape problems, bad arguments, bad dtypes.
  expect_error(
      [](const Device& dev) {
        return nn::conv2d(dev.full({1, 4, 5, 5}, 1.0), dev.full({6, 3, 3, 3}, 1.0));
      },
      sy::Errc::shape_mismatch);
  expect_error(
      [](const Device& dev) {
        return nn::max_pool1d(dev.full({1, 5}, 1.0), 2, 0);
      },
      sy::Errc::invalid_argument);
  expect_error(
      [](const Device& dev) {
        return nn::conv1d(dev.full({1, 5}, 1.0), dev.full({1, 1, 2}, 1.0, DType::f64));
      },
      sy::Errc::dtype_mismatch);
}

namespace {

using Rng = std::mt19937_64;

// A convolution's input and weight shapes and its options.
struct ConvCase {
  sy::Shape x, w;
  nn::ConvOptions o;
};
int64_t pick(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

Tensor random_tensor(const Device& d, Rng& rng, DType t, sy::Shape s) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = static_cast<double>(pick(rng, -300, 300)) / 100;
  return make(d, t, std::move(s), v);
}

}  // namespace

TEST_CASE("conv and conv_transpose agree with the reference on random shapes and arguments", "[ops][conv][random]") {
  Rng rng(20261203);
  int ran = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = pick(rng, 1, 3);
    const bool transposed = pick(rng, 0, 3) == 0;
    const int64_t groups = pick(rng, 0, 2) == 0 ? pick(rng, 2, 3) : 1;
    const bool depthwise = !transposed && groups > 1 && pick(rng, 0, 1) == 0;
    const int64_t cin = depthwise ? groups : groups * pick(rng, 1, 3);
    const int64_t cout = groups * pick(rng, 1, 3);
    const int64_t batch = pick(rng, 0, 3) == 0 ? 0 : pick(rng, 1, 2);  // 0: unbatched
    const int64_t extent = n == 3 ? pick(rng, 2, 5) : n == 2 ? pick(rng, 3, 9) : pick(rng, 3, 20);
    nn::ConvOptions o;
    o.transposed = transposed;
    o.groups = groups;
    sy::Shape xs, ws;
    if (batch) xs.dims.push_back(batch);
    xs.dims.push_back(cin);
    ws.dims = transposed ? std::vector<int64_t>{cin, cout / groups} : std::vector<int64_t>{cout, cin / groups};
    for (int64_t a = 0; a < n; ++a) {
      const int64_t k = pick(rng, 1, 3);
      xs.dims.push_back(extent);
      ws.dims.push_back(k);
      o.stride.push_back(pick(rng, 1, 3));
      o.dilation.push_back(pick(rng, 1, 2));
      o.pad_begin.push_back(pick(rng, 0, 2));
      o.pad_end.push_back(pick(rng, 0, 2));
      o.output_padding.push_back(transposed ? pick(rng, 0, std::max(o.stride.back(), o.dilation.back()) - 1) : 0);
    }
    const bool with_bias = pick(rng, 0, 1) == 1;
    const DType t = pick(rng, 0, 3) == 0 ? DType::f64 : DType::f32;
    const uint64_t seed = rng();
    auto build = [&](const Device& d) {
      Rng data(seed);
      auto x = random_tensor(d, data, t, xs);
      auto w = random_tensor(d, data, t, ws);
      Tensor b = with_bias ? random_tensor(d, data, t, {cout}) : Tensor{};
      return nn::conv(x, w, b, o);
    };
    INFO("trial " << trial << ": input " << xs.to_string() << ", weight " << ws.to_string() << ", groups " << groups
                  << (transposed ? ", transposed" : ""));
    try {
      (void)build(reference());
    } catch (const sy::Error&) {
      continue;  // e.g. a kernel larger than the padded input: refused at the call
    }
    ++ran;
    agree(build, Tol{1e-4, 1e-4});
  }
  CHECK(ran > 30);
}

TEST_CASE("the fast conv paths agree with the reference on larger shapes", "[ops][conv][random]") {
  // 3x3 over 32 channels and a 20x20 image: several im2col tiles; the 1x1
  // GEMM path; depthwise 3x3 with stride 2; a strided transposed conv.
  std::vector<ConvCase> cases;
  cases.push_back({{2, 32, 20, 20}, {16, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {}, {}, 1, false}});
  cases.push_back({{1, 64, 30, 30}, {64, 64, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {}, {}, 1, false}});
  cases.push_back({{2, 32, 9, 9}, {24, 32, 1, 1}, {}});
  cases.push_back({{2, 16, 11, 11}, {16, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, {}, {}, 16, false}});
  cases.push_back({{1, 8, 7, 7}, {8, 6, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, {}, {1, 1}, 2, true}});
  Rng rng(7);
  for (const auto& c : cases) {
    const uint64_t seed = rng();
    INFO("input " << c.x.to_string() << ", weight " << c.w.to_string());
    agree(
        [&](const Device& d) {
          Rng data(seed);
          auto x = random_tensor(d, data, DType::f32, c.x);
          auto w = random_tensor(d, data, DType::f32, c.w);
          return nn::conv(x, w, {}, c.o);
        },
        Tol{1e-4, 1e-3});
  }
}

TEST_CASE("pools agree with the reference on random shapes and arguments", "[ops][pool][random]") {
  Rng rng(1203);
  int ran = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const int64_t n = pick(rng, 1, 3);
    sy::Shape xs{pick(rng, 1, 2), pick(rng, 1, 3)};
    if (pick(rng, 0, 2) == 0) xs.dims.erase(xs.dims.begin());
    nn::PoolOptions o;
    for (int64_t a = 0; a < n; ++a) {
      const int64_t k = pick(rng, 1, 3);
      xs.dims.push_back(pick(rng, 1, n == 1 ? 12 : 6));
      o.kernel_size.push_back(k);
      o.stride.push_back(pick(rng, 1, 3));
      o.dilation.push_back(pick(rng, 1, 2));
      o.pad_begin.push_back(pick(rng, 0, k / 2));
      o.pad_end.push_back(pick(rng, 0, k / 2));
    }
    o.ceil_mode = pick(rng, 0, 1) == 1;
    o.count_include_pad = pick(rng, 0, 1) == 1;
    if (pick(rng, 0, 4) == 0) o.divisor_override = pick(rng, 1, 5);
    const int which = static_cast<int>(pick(rng, 0, 3));
    const DType t = which == 3 ? DType::i64 : pick(rng, 0, 2) == 0 ? DType::f64 : DType::f32;
    const uint64_t seed = rng();
    auto build = [&](const Device& d) {
      Rng data(seed);
      auto x = random_tensor(d, data, t, xs);
      if (t == DType::i64 || which == 2) {
        auto avg = o;
        avg.dilation.clear();
        return nn::avg_pool(x, avg);
      }
      auto mo = o;
      mo.divisor_override.reset();
      return which == 0 ? nn::max_pool(x, mo) : nn::max_pool_with_indices(x, mo).second;
    };
    INFO("trial " << trial << ": input " << xs.to_string() << ", kind " << which);
    try {
      (void)build(reference());
    } catch (const sy::Error&) {
      continue;  // output too small: refused at the call
    }
    ++ran;
    agree(build, Tol{1e-5, 1e-5});
    if (n < 3) {
      std::vector<int64_t> size;
      for (int64_t a = 0; a < n; ++a) size.push_back(pick(rng, 1, 4));
      agree([&](const Device& d) {
        Rng data(seed);
        auto x = random_tensor(d, data, t == DType::i64 ? DType::f32 : t, xs);
        return n == 1 ? nn::adaptive_max_pool1d_with_indices(x, size).second : nn::adaptive_avg_pool2d(x, size);
      });
    }
  }
  CHECK(ran > 40);
}

// The cpu backend takes 1-D and 2-D float max pools without dilation
// separably (down the rows, then across): every stride, pad and ceil_mode
// of kernels up to 4 (stride 2's third column and beyond take other
// paths), with NaN and -inf in the data, against the reference.
// Rows of 61 and 75 take f32's AVX-512 passes (16 outputs at a time where
// the windows lie inside the row) on a CPU that has it.
TEST_CASE("separable max pools agree with the reference around NaN and -inf", "[ops][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::f32, DType::f64})
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t stride = 1; stride <= 3; ++stride)
        for (int64_t pad = 0; pad <= k / 2; ++pad)
          for (bool ceil : {false, true})
            for (int shape = 0; shape < 4; ++shape) {
              const bool two_d = shape % 2 == 1;
              const bool wide = shape >= 2;
              const sy::Shape xs = two_d ? (wide ? sy::Shape{1, 2, 5, 75} : sy::Shape{2, 3, 7, 9})
                                         : (wide ? sy::Shape{2, 3, 61} : sy::Shape{2, 3, 11});
              std::vector<double> v(static_cast<size_t>(xs.numel()));
              for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 0.9) * 10;
              v[5] = nan;
              v[17] = -inf;
              v[v.size() - 1] = nan;                                         // the last column of the last row
              for (size_t i = 40; i < 52 && i < v.size(); ++i) v[i] = -inf;  // a run of -inf
              if (wide) {
                v[90] = nan;  // inside a vector of outputs
                for (size_t i = 100; i < 140; ++i) v[i] = -inf;
                v[125] = -0.0;
                v[two_d ? 220 : 240] = nan;  // near a row's end: the last, masked vector of outputs
              }
              nn::PoolOptions o;
              const size_t axes = two_d ? 2 : 1;
              o.kernel_size.assign(axes, k);
              o.stride.assign(axes, stride);
              o.pad_begin.assign(axes, pad);
              o.pad_end.assign(axes, pad);
              o.dilation.assign(axes, 1);
              o.ceil_mode = ceil;
              INFO(sy::name_of(t) << " k " << k << " stride " << stride << " pad " << pad << " ceil " << ceil
                                  << " shape " << xs.to_string());
              agree([&](const Device& d) { return nn::max_pool(make(d, t, xs, v), o); });
            }
  // Windows of more than 16 rows (the vector pass takes at most 16).
  const sy::Shape tall{1, 2, 40, 37};
  std::vector<double> v(static_cast<size_t>(tall.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(static_cast<double>(i) * 0.7) * 5;
  v[300] = std::numeric_limits<double>::quiet_NaN();
  nn::PoolOptions o;
  o.kernel_size = {17, 3};
  o.stride = {3, 2};
  o.pad_begin = o.pad_end = {8, 1};
  o.dilation = {1, 1};
  agree([&](const Device& d) { return nn::max_pool(make(d, DType::f32, tall, v), o); });
}

// PyTorch 1.13's CPU convolutions differ here, and so does Switchyard (the
// README says which does what): an Inf weight on a tap over zero padding is
// multiplied by the padding's zero (NaN) in a GEMM convolution and left out
// in a depthwise one. Finite weights give the same values either way.
TEST_CASE("an Inf weight over zero padding gives PyTorch's border values", "[ops][conv]") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> w(3 * 2 * 9, 0.5);
  w[0] = inf;  // output channel 0, tap (0, 0): reads the padding for row 0 and column 0
  std::vector<double> dw(4 * 9, 1.0);
  for (size_t c = 0; c < 4; ++c) dw[c * 9] = inf;
  for (const Device& d : devices()) {
    INFO(label(d));
    auto y = run_on(
        [&](const Device& dev) {
          return nn::conv2d(make(dev, DType::f32, {1, 2, 5, 5}, std::vector<double>(50, 1.0)),
                            make(dev, DType::f32, {3, 2, 3, 3}, w), {}, 1, 1);
        },
        d);
    auto z = run_on(
        [&](const Device& dev) {
          return nn::conv2d(make(dev, DType::f32, {1, 4, 5, 5}, std::vector<double>(100, 1.0)),
                            make(dev, DType::f32, {4, 1, 3, 3}, dw), {}, 1, 1, 1, 4);
        },
        d);
    REQUIRE(y);
    REQUIRE(z);
    const auto yv = y->to_vector<double>(), zv = z->to_vector<double>();
    REQUIRE(yv.size() == 75);
    REQUIRE(zv.size() == 100);
    CHECK(yv[6] == inf);   // channel 0 at (1, 1): every tap inside the image
    CHECK(yv[25] == 4.0);  // channel 1 at (0, 0): 4 in-image taps of 0.5, times 2 channels
    CHECK(zv[0] == 4.0);   // depthwise (0, 0): the Inf tap is padding, left out
    CHECK(zv[1] == 6.0);   // (0, 1) likewise
    CHECK(zv[6] == inf);   // (1, 1)
    if (d.kind() == "reference")
      CHECK(yv[0] == 4.0);  // the reference leaves padded taps out everywhere (as channel 1)
    else if (d.kind() == "cpu")
      CHECK(std::isnan(yv[0]));  // 0 x Inf, as PyTorch's CPU conv2d
  }
}

TEST_CASE("a conv weight used again gives the same bits and a new weight its own result", "[ops][conv]") {
  // Every call must give the first call's bits, and a weight computed from
  // the old one (written into its memory at its last use) or made later its
  // own result: what a backend that keeps a prepared copy of a weight
  // between calls (as ONNX Runtime pre-packs) must still honour.
  std::vector<ConvCase> cases;
  // 20 output channels (a partial 14-row panel), 576 = 64 * 9 rows (three K blocks).
  cases.push_back({{2, 64, 12, 12}, {20, 64, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {}, {}, 1, false}});
  cases.push_back({{1, 32, 9, 9}, {30, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {}, {}, 2, false}});    // 2 groups
  cases.push_back({{1, 16, 15, 15}, {18, 16, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, {}, {}, 1, false}});  // strided
  cases.push_back({{1, 40, 7, 7}, {33, 40, 1, 1}, {}});                                            // pointwise
  sy::testing::Watchdog watchdog(std::chrono::seconds(300), "conv weights used again");
  Rng rng(11);
  for (const auto& c : cases) {
    for (const auto& d : devices()) {
      INFO(label(d) << ": input " << c.x.to_string() << ", weight " << c.w.to_string());
      const uint64_t seed = rng();
      Rng data(seed);
      auto x = random_tensor(d, data, DType::f32, c.x);
      Rng weight_data = data;
      auto w = random_tensor(d, data, DType::f32, c.w);
      const auto first = nn::conv(x, w, {}, c.o).to_vector<float>();
      for (int again = 0; again < 3; ++again) CHECK(nn::conv(x, w, {}, c.o).to_vector<float>() == first);
      // Headed by the conv, fused with its relu on cpu.
      auto relu_first = first;
      for (auto& v : relu_first) v = v > 0 ? v : 0;
      CHECK(nn::conv(x, w, {}, c.o).relu().to_vector<float>() == relu_first);
      // Twice the weight: every product and sum exactly twice.
      auto twice = first;
      for (auto& v : twice) v *= 2;
      const Tensor w2 = w * 2.0;
      CHECK(nn::conv(x, w2, {}, c.o).to_vector<float>() == twice);
      CHECK(nn::conv(x, w2, {}, c.o).to_vector<float>() == twice);
      // The weight's last use computes a new one, which the device may write
      // into the old one's memory where nothing else holds it (so the
      // reference's copy is made anew: a bridge would share the memory).
      const Tensor w_ref = random_tensor(reference(), weight_data, DType::f32, c.w);
      w = w + 1.0;  // rebound: the old handle's drop follows its last use
      {
        auto want = nn::conv(x.to(reference()), w_ref + 1.0, {}, c.o).read().get();
        for (int again = 0; again < 2; ++again)
          CHECK(compare(nn::conv(x, w, {}, c.o).read().get(), want, Tol{1e-4, 1e-3}).empty());
      }
      w = Tensor();
      // A new weight of its size.
      for (int round = 0; round < 2; ++round) {
        auto w3 = random_tensor(d, data, DType::f32, c.w);
        auto want = nn::conv(x.to(reference()), w3.to(reference()), {}, c.o).read().get();
        for (int again = 0; again < 2; ++again) {
          auto got = nn::conv(x, w3, {}, c.o).read().get();
          CHECK(compare(got, want, Tol{1e-4, 1e-3}).empty());
        }
      }
    }
  }
}

TEST_CASE("eight threads sharing a model's weights get each call's bits", "[ops][conv]") {
  // The cpu device keeps a weight's packed panels from its second use (a
  // convolution's, a product's right operand): calls from many threads at
  // once, each with its own input, must give what their first call gave,
  // and the first calls what the reference gives.
  sy::testing::Watchdog watchdog(std::chrono::seconds(300), "eight threads sharing weights");
  const Device cpu = devices().front();
  Rng rng(12);
  const Tensor w = random_tensor(cpu, rng, DType::f32, {48, 16, 3, 3});  // 2 blocks of 32 channels, one partial
  const Tensor lw = random_tensor(cpu, rng, DType::f32, {40, 48});       // a linear's [out, in] weight
  const Tensor mw = random_tensor(cpu, rng, DType::f32, {40, 24});       // a matmul's [k, n] rhs
  const Tensor w_ref = w.to(reference()), lw_ref = lw.to(reference()), mw_ref = mw.to(reference());
  const nn::ConvOptions o{{1, 1}, {1, 1}, {1, 1}, {}, {}, 1, false};
  std::atomic<int> mismatched{0}, off_reference{0}, finished{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      Rng data(100 + static_cast<uint64_t>(t));
      const Tensor x = random_tensor(cpu, data, DType::f32, {1, 16, 20, 20});
      const Tensor a = random_tensor(cpu, data, DType::f32, {30, 48});
      const auto call = [&](const Tensor& x_in, const Tensor& a_in, const Tensor& cw, const Tensor& l,
                            const Tensor& m) {
        const Tensor y = nn::conv(x_in, cw, {}, o).relu();
        return std::pair{y.read().get(), a_in.linear(l).matmul(m).read().get()};
      };
      const auto first = call(x, a, w, lw, mw);
      const auto want = call(x.to(reference()), a.to(reference()), w_ref, lw_ref, mw_ref);
      if (!compare(first.first, want.first, Tol{1e-4, 1e-3}).empty() ||
          !compare(first.second, want.second, Tol{1e-4, 1e-3}).empty())
        ++off_reference;
      for (int i = 0; i < 15; ++i) {
        const auto again = call(x, a, w, lw, mw);
        if (again.first.to_vector<float>() != first.first.to_vector<float>() ||
            again.second.to_vector<float>() != first.second.to_vector<float>())
          ++mismatched;
      }
      ++finished;
    });
  for (auto& th : threads) th.join();
  CHECK(finished == 8);
  CHECK(off_reference == 0);
  CHECK(mismatched == 0);
}

TEST_CASE("pooling convolution and one_hot refuse and accept edge shapes as PyTorch 1.13", "[ops][conv]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto fails = [](auto&& call, const std::string& part) {
      try {
        (void)call();
        FAIL("no error");
      } catch (const sy::Error& e) {
        CHECK_THAT(e.what(), Contains(part));
      }
    };
    // avg_pool3d wants the unpadded input at least the kernel (its 2-D and the max pools do not).
    fails(
        [&] {
          return nn::avg_pool3d(d.ones({1, 1, 1, 2, 5}), {2, 3, 1}, 1, {1, 1, 0});
        },
        "avg_pool3d: input [1, 1, 1, 2, 5] is smaller than kernel_size (2, 3, 1)");
    CHECK(nn::avg_pool2d(d.ones({1, 1, 2, 5}), {3, 1}, 1, {1, 0}).shape() == sy::Shape{1, 1, 2, 5});
    // max_pool1d without indices: an empty result where the window does not fit.
    auto empty = nn::max_pool1d(d.ones({1, 1, 4}), 5);
    CHECK(empty.shape() == sy::Shape{1, 1, 0});
    CHECK(empty.to_vector<float>().empty());
    CHECK(nn::max_pool1d(d.ones({1, 4}), 2, {}, 0, 4).shape() == sy::Shape{1, 0});
    fails([&] { return nn::max_pool2d(d.ones({1, 1, 4, 4}), 5); }, "output size is too small");
    fails([&] { return nn::max_pool1d(d.ones({1, 1, 4}), 2, {1, 1}); }, "stride needs 1 value, got 2");
    // An empty spatial axis with a batch and channels: PyTorch refuses it
    // (padding made it a result of the bias alone).
    fails(
        [&] {
          return nn::conv2d(d.ones({1, 3, 0, 5}), d.ones({2, 3, 1, 1}), d.ones({2}), 1, 1);
        },
        "conv2d: input [1, 3, 0, 5] is empty on a spatial axis");
    CHECK(nn::conv2d(d.ones({0, 3, 4, 5}), d.ones({2, 3, 1, 1})).shape() == sy::Shape{0, 2, 4, 5});
    // The general pool names itself, not the rule's max_pool2d.
    fails(
        [&] {
          return nn::max_pool(d.ones({1, 1, 5, 6}), nn::PoolOptions{.kernel_size = {2, 2}, .pad_begin = {2, 0}});
        },
        "max_pool: padding");
    // one_hot of an empty tensor needs a positive class count.
    fails([&] { return nn::one_hot(d.tensor(std::vector<int64_t>{}, {0}), 0); }, "cannot infer num_classes");
    CHECK(nn::one_hot(d.tensor(std::vector<int64_t>{}, {0}), 3).shape() == sy::Shape{0, 3});
  }
}
