// SPDX-License-Identifier: Apache-2.0
// The core op set on cpu:0 against hand-computed values.
#include <catch2/catch.hpp>
#include <cmath>

#include <switchyard/switchyard.hpp>

using namespace switchyard;

namespace {
// A runtime per test case: a Runtime must not outlive main (CAF's own
// statics are gone by then).
struct CpuFixture {
  Runtime rt{RuntimeOptions{.devices = {"cpu:0"}}};
  [[nodiscard]] Device cpu() const { return rt.device("cpu:0"); }
};
std::vector<float> f32(const Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST_CASE_METHOD(CpuFixture, "from_data then read returns the same values and shape", "[ops]") {
  auto t = cpu().tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto d = t.read().get();
  CHECK(d.shape == Shape{2, 3});
  CHECK(d.dtype == DType::f32);
  CHECK(f32(t) == std::vector<float>{1, 2, 3, 4, 5, 6});
}

TEST_CASE_METHOD(CpuFixture, "zeros, ones and full fill every element", "[ops]") {
  CHECK(cpu().zeros({2, 2}).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
  CHECK(cpu().ones({3}, DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, 1, 1});
  CHECK(cpu().full({2}, 2.5, DType::f64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(cpu().zeros({0, 3}).numel() == 0);
  CHECK(cpu().zeros({0, 3}).to_vector<float>().empty());
}

TEST_CASE_METHOD(CpuFixture, "add, sub, mul and div of two tensors", "[ops]") {
  auto a = cpu().tensor<float>({1, 2, 3, 4}, {2, 2});
  auto b = cpu().tensor<float>({10, 20, 30, 40}, {2, 2});
  CHECK(f32(a + b) == std::vector<float>{11, 22, 33, 44});
  CHECK(f32(b - a) == std::vector<float>{9, 18, 27, 36});
  CHECK(f32(a * b) == std::vector<float>{10, 40, 90, 160});
  CHECK(f32(b / a) == std::vector<float>{10, 10, 10, 10});
}

TEST_CASE_METHOD(CpuFixture, "binary ops broadcast like NumPy", "[ops][broadcast]") {
  auto col = cpu().tensor<float>({1, 2, 3}, {3, 1});
  auto row = cpu().tensor<float>({10, 20}, {2});
  auto s = col + row;
  CHECK(s.shape() == Shape{3, 2});
  CHECK(f32(s) == std::vector<float>{11, 21, 12, 22, 13, 23});
  auto scalar = cpu().tensor<float>({100}, {});
  CHECK(f32(row * scalar) == std::vector<float>{1000, 2000});
  auto batch = cpu().tensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 1, 4});
  auto m = batch - cpu().tensor<float>({1, 1, 1, 1, 0, 0, 0, 0}, {2, 4});
  CHECK(m.shape() == Shape{2, 2, 4});
  CHECK(f32(m) == std::vector<float>{0, 1, 2, 3, 1, 2, 3, 4, 4, 5, 6, 7, 5, 6, 7, 8});
}

TEST_CASE_METHOD(CpuFixture, "tensor-scalar ops, on either side", "[ops]") {
  auto a = cpu().tensor<float>({1, 2, 4}, {3});
  CHECK(f32(a + 1.0) == std::vector<float>{2, 3, 5});
  CHECK(f32(10.0 - a) == std::vector<float>{9, 8, 6});
  CHECK(f32(a * 0.5) == std::vector<float>{0.5, 1, 2});
  CHECK(f32(8.0 / a) == std::vector<float>{8, 4, 2});
  auto i = cpu().tensor<int32_t>({1, 2, 3}, {3});
  auto half = i * 0.5;  // a float scalar promotes an integer tensor to f32
  CHECK(half.dtype() == DType::f32);
  CHECK(f32(half) == std::vector<float>{0.5, 1, 1.5});
  auto twice = i * 2;
  CHECK(twice.dtype() == DType::i32);
  CHECK(twice.to_vector<int32_t>() == std::vector<int32_t>{2, 4, 6});
}

TEST_CASE_METHOD(CpuFixture, "mixed dtypes are promoted before the op", "[ops]") {
  auto i = cpu().tensor<int32_t>({1, 2}, {2});
  auto f = cpu().tensor<double>({0.5, 0.25}, {2});
  auto s = i + f;
  CHECK(s.dtype() == DType::f64);
  CHECK(s.to_vector<double>() == std::vector<double>{1.5, 2.25});
  auto q = i / cpu().tensor<int32_t>({2, 4}, {2});
  CHECK(q.dtype() == DType::f32);
  CHECK(f32(q) == std::vector<float>{0.5, 0.5});
}

TEST_CASE_METHOD(CpuFixture, "neg, exp, log and relu", "[ops]") {
  auto a = cpu().tensor<float>({-1, 0, 2}, {3});
  CHECK(f32(-a) == std::vector<float>{1, 0, -2});
  CHECK_THAT(f32(a.exp()),
             Catch::Matchers::Approx(std::vector<float>{std::exp(-1.f), 1.f, std::exp(2.f)}).epsilon(1e-6));
  CHECK_THAT(f32(cpu().tensor<float>({1, 4}, {2}).log()),
             Catch::Matchers::Approx(std::vector<float>{0, std::log(4.f)}).epsilon(1e-6));
  CHECK(f32(a.relu()) == std::vector<float>{0, 0, 2});
  auto ints = cpu().tensor<int64_t>({0, 1}, {2}).exp();  // integer input, float result
  CHECK(ints.dtype() == DType::f32);
}

TEST_CASE_METHOD(CpuFixture, "sum and mean over one axis, several axes, or all", "[ops][reduce]") {
  auto a = cpu().tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(f32(a.sum()) == std::vector<float>{21});
  CHECK(a.sum().shape() == Shape{});
  CHECK(f32(a.sum({0})) == std::vector<float>{5, 7, 9});
  CHECK(f32(a.sum({1})) == std::vector<float>{6, 15});
  CHECK(f32(a.sum({-1}, true)) == std::vector<float>{6, 15});
  CHECK(a.sum({-1}, true).shape() == Shape{2, 1});
  CHECK(f32(a.mean({0})) == std::vector<float>{2.5, 3.5, 4.5});
  CHECK(f32(a.mean()) == std::vector<float>{3.5});
  auto i = cpu().tensor<int32_t>({1, 2, 3}, {3}).sum();
  CHECK(i.dtype() == DType::i64);  // as in PyTorch
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{6});
}

TEST_CASE_METHOD(CpuFixture, "matmul: plain, batched with broadcasting, and 1-D operands", "[ops][matmul]") {
  auto a = cpu().tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = cpu().tensor<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(f32(a.matmul(b)) == std::vector<float>{4, 5, 10, 11});
  auto batch = cpu().tensor<float>({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2});
  auto m = cpu().tensor<float>({1, 2, 3, 4}, {2, 2});
  auto r = batch.matmul(m);
  CHECK(r.shape() == Shape{2, 2, 2});
  CHECK(f32(r) == std::vector<float>{1, 2, 3, 4, 2, 4, 6, 8});
  auto v = cpu().tensor<float>({1, 1, 1}, {3});
  CHECK(f32(a.matmul(v)) == std::vector<float>{6, 15});
  CHECK(a.matmul(v).shape() == Shape{2});
  auto d = cpu().tensor<double>({1, 2, 3, 4}, {2, 2});
  CHECK(d.matmul(d).to_vector<double>() == std::vector<double>{7, 10, 15, 22});
  auto ints = cpu().tensor<int64_t>({1, 2, 3, 4}, {2, 2});
  CHECK(ints.matmul(ints).to_vector<int64_t>() == std::vector<int64_t>{7, 10, 15, 22});
}

TEST_CASE_METHOD(CpuFixture, "linear computes x W^T + b", "[ops][matmul]") {
  auto x = cpu().tensor<float>({1, 2, 3, 4}, {2, 2});
  auto w = cpu().tensor<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  auto b = cpu().tensor<float>({0.5, 0, -1}, {3});
  CHECK(f32(x.linear(w, b)) == std::vector<float>{1.5, 2, 2, 3.5, 4, 6});
  CHECK(f32(x.linear(w)) == std::vector<float>{1, 2, 3, 3, 4, 7});
}

TEST_CASE_METHOD(CpuFixture, "reshape and transpose", "[ops][layout]") {
  auto a = cpu().tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto r = a.reshape({3, -1});
  CHECK(r.shape() == Shape{3, 2});
  CHECK(f32(r) == std::vector<float>{1, 2, 3, 4, 5, 6});
  auto t = a.transpose(0, 1);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(f32(t) == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(f32(t.transpose(0, 1)) == f32(a));
  CHECK(f32(a.mT().matmul(a)) == std::vector<float>{17, 22, 27, 22, 29, 36, 27, 36, 45});
}

TEST_CASE_METHOD(CpuFixture, "cast converts between dtypes", "[ops]") {
  auto a = cpu().tensor<float>({1.7f, -2.2f, 0.f}, {3});
  CHECK(a.cast(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{1, -2, 0});
  CHECK(a.cast(DType::boolean).to_vector<int>() == std::vector<int>{1, 1, 0});
  CHECK(a.cast(DType::f64).dtype() == DType::f64);
  auto u = cpu().tensor<int32_t>({300, -1}, {2}).cast(DType::u8);
  CHECK(u.to_vector<int>() == std::vector<int>{44, 255});  // wraps modulo 256, as PyTorch does
}

TEST_CASE_METHOD(CpuFixture, "uniform random numbers are in range and reproducible per seed", "[ops][random]") {
  auto dev = cpu();
  dev.seed(7);
  auto a = dev.uniform({1000}, -2, 3).to_vector<float>();
  dev.seed(7);
  auto b = dev.uniform({1000}, -2, 3).to_vector<float>();
  CHECK(a == b);
  auto c = dev.uniform({1000}, -2, 3).to_vector<float>();
  CHECK(a != c);  // the stream moves on after each op
  double mean = 0;
  for (float v : a) {
    REQUIRE(v >= -2.f);
    REQUIRE(v < 3.f);
    mean += v / 1000.0;
  }
  CHECK(mean == Approx(0.5).margin(0.25));
}
