// SPDX-License-Identifier: Apache-2.0
// Convolution and pooling on every CUDA device against cpu:0 (which the op
// tests hold to the reference backend): the direct kernels on the shapes
// and arguments that exercise each CPU path (GEMM 1x1, im2col, depthwise,
// transposed) and every pool kind. Skips (exit 77, see main.cpp) without a GPU.

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "switchyard/nn.hpp"
#include "switchyard/switchyard.hpp"
#include "tests/cuda/rig.hpp"
#include "tests/cuda/wait.hpp"

namespace sy = switchyard;
namespace nn = sy::nn;
using sy::DType;
using sy::Shape;
using sy::Tensor;
using sy::TensorData;
using sytest_cuda::read;
using sytest_cuda::Rig;

namespace {

TensorData conv_test_data(Shape s, DType t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = std::uniform_real_distribution<double>(-2, 2)(gen);
  if (t == DType::f64) return TensorData::from(v, s);
  if (t == DType::i64) {
    std::vector<int64_t> i(v.begin(), v.end());
    return TensorData::from(i, s);
  }
  std::vector<float> f(v.begin(), v.end());
  return TensorData::from(f, s);
}

void expect_close(const TensorData& cpu, const TensorData& gpu, double tol) {
  REQUIRE(cpu.shape == gpu.shape);
  REQUIRE(cpu.dtype == gpu.dtype);
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(cpu.at(i) - gpu.at(i)) <= tol * (1 + std::abs(cpu.at(i))));
  }
}

}  // namespace

TEST_CASE("cuda: conv and conv_transpose match the CPU", "[cuda][gpu][conv]") {
  Rig rig;
  struct Case {
    Shape x, w;
    nn::ConvOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 16, 12, 12}, {8, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, {}, {}, 1, false}},
      {{2, 16, 9, 9}, {12, 16, 1, 1}, {}},
      {{1, 8, 11, 11}, {8, 1, 3, 3}, {{2, 2}, {1, 0}, {0, 1}, {2, 1}, {}, 8, false}},
      {{1, 6, 13}, {4, 3, 3}, {{2}, {2}, {1}, {2}, {}, 2, false}},
      {{1, 4, 5, 5, 5}, {6, 4, 2, 2, 2}, {{1, 2, 1}, {1, 0, 1}, {0, 1, 1}, {}, {}, 1, false}},
      {{2, 8, 6, 6}, {8, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, {}, {1, 1}, 2, true}},
      {{1, 4, 7}, {4, 2, 3}, {{3}, {0}, {0}, {2}, {2}, 1, true}},
  };
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f32, DType::f64})
      for (const auto& c : cases) {
        INFO("input " << c.x.to_string() << ", weight " << c.w.to_string() << " on " << gpu.name());
        auto x = conv_test_data(c.x, t, 1), w = conv_test_data(c.w, t, 2);
        auto b = conv_test_data({c.o.transposed ? c.w.dims[1] * c.o.groups : c.w.dims[0]}, t, 3);
        auto want = read(nn::conv(rig.cpu.from_data(x), rig.cpu.from_data(w), rig.cpu.from_data(b), c.o));
        auto got = read(nn::conv(gpu.from_data(x), gpu.from_data(w), gpu.from_data(b), c.o));
        expect_close(want, got, t == DType::f32 ? 1e-4 : 1e-10);
      }
}

TEST_CASE("cuda: every pool kind matches the CPU", "[cuda][gpu][pool]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f32, DType::f64, DType::i64}) {
      auto x = conv_test_data({2, 3, 9, 8}, t, 4);
      auto cx = rig.cpu.from_data(x), gx = gpu.from_data(x);
      nn::PoolOptions o;
      o.kernel_size = {3, 2};
      o.stride = {2, 1};
      o.pad_begin = {1, 0};
      o.pad_end = {0, 1};
      o.ceil_mode = true;
      o.count_include_pad = false;
      INFO(sy::name_of(t) << " on " << gpu.name());
      expect_close(read(nn::avg_pool(cx, o)), read(nn::avg_pool(gx, o)), 1e-6);
      o.divisor_override = 5;
      expect_close(read(nn::avg_pool(cx, o)), read(nn::avg_pool(gx, o)), 1e-6);
      if (t == DType::i64) continue;  // PyTorch 1.13 averages i64, nothing else
      o.divisor_override.reset();
      o.dilation = {2, 1};
      expect_close(read(nn::max_pool(cx, o)), read(nn::max_pool(gx, o)), 0);
      expect_close(read(nn::max_pool_with_indices(cx, o).second), read(nn::max_pool_with_indices(gx, o).second), 0);
      expect_close(read(nn::adaptive_avg_pool2d(cx, {4, 3})), read(nn::adaptive_avg_pool2d(gx, {4, 3})), 1e-6);
      expect_close(read(nn::adaptive_max_pool2d_with_indices(cx, {2, 5}).second),
                   read(nn::adaptive_max_pool2d_with_indices(gx, {2, 5}).second), 0);
      expect_close(read(nn::max_pool3d(cx, 2)), read(nn::max_pool3d(gx, 2)), 0);
    }
}
