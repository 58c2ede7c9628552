// SPDX-License-Identifier: Apache-2.0
// The habits a libtorch user brings (issue 15): each case compiles one of
// them and checks what it does, on every device of the op tests' runtime.

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <type_traits>

#include "ops/ops_common.hpp"

using namespace sytest;
using sy::DType;
using sy::Shape;
using sy::Tensor;

namespace {

template <class T>
std::vector<T> values(const Tensor& t) {
  return t.to_vector<T>();
}

}  // namespace

TEST_CASE("comparison operators are tensor-valued, with tensors and scalars", "[api]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<float>({0.25f, 0.5f, 0.75f}, {3});
    auto y = d.tensor<float>({0.25f, 1.0f, 0.75f}, {3});
    Tensor gt = x > 0.5;
    CHECK(gt.dtype() == DType::boolean);
    CHECK(values<bool>(gt) == std::vector<bool>{false, false, true});
    CHECK(values<bool>(0.5 < x) == std::vector<bool>{false, false, true});
    CHECK(values<bool>(x == y) == std::vector<bool>{true, false, true});
    CHECK(values<bool>(x != y) == std::vector<bool>{false, true, false});
    CHECK(values<bool>(x <= 0.5) == std::vector<bool>{true, true, false});
    CHECK(values<bool>(x >= y) == std::vector<bool>{true, false, true});
    CHECK(values<bool>(x == 0.25) == std::vector<bool>{true, false, false});
    CHECK(values<bool>(2 != x) == std::vector<bool>{true, true, true});
  }
}

TEST_CASE("compound assignments rebind the handle and keep shape and dtype", "[api]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<int32_t>({1, 2, 3}, {3});
    Tensor before = x;  // another handle to the old tensor
    x += 10;
    x *= d.tensor<int32_t>({2, 2, 2}, {3});
    x -= 1;
    CHECK(values<int32_t>(x) == std::vector<int32_t>{21, 23, 25});
    CHECK(values<int32_t>(before) == std::vector<int32_t>{1, 2, 3});  // not aliased
    CHECK(x.dtype() == DType::i32);
    // As libtorch's in-place ops: a float result does not fit an i32 target,
    // and a broadcast to a larger shape does not fit either.
    CHECK_THROWS_MATCHES(x /= 2, sy::Error, Catch::Matchers::Predicate<sy::Error>([](const sy::Error& e) {
                           return e.code() == sy::Errc::dtype_mismatch;
                         }));
    CHECK_THROWS_MATCHES(
        x += d.zeros({2, 3}, DType::i32), sy::Error,
        Catch::Matchers::Predicate<sy::Error>([](const sy::Error& e) { return e.code() == sy::Errc::shape_mismatch; }));
    CHECK(values<int32_t>(x) == std::vector<int32_t>{21, 23, 25});  // a failed assignment leaves x alone
    auto f = d.tensor<float>({1, 2}, {2});
    f /= d.tensor<double>({4, 4}, {2});  // f64 result cast back to f32
    CHECK(f.dtype() == DType::f32);
    CHECK(values<float>(f) == std::vector<float>{0.25f, 0.5f});
  }
}

TEST_CASE("reductions take a single axis without braces", "[api]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(x.sum(1).shape() == Shape{2});
    CHECK(values<float>(x.sum(1)) == std::vector<float>{6, 15});
    CHECK(x.max(-1, true).shape() == Shape{2, 1});
    CHECK(values<float>(x.mean(0)) == std::vector<float>{2.5f, 3.5f, 4.5f});
    // Braces still mean a list of axes; {} means every axis.
    CHECK(x.sum({}).shape() == Shape{});
    CHECK(x.sum({0, 1}).item<float>() == 21);
    CHECK(x.sum({1}).shape() == Shape{2});
  }
}

TEST_CASE("binary ops take a scalar by name", "[api]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<int64_t>({-3, 4, 7}, {3});
    CHECK(values<int64_t>(x.remainder(2)) == std::vector<int64_t>{1, 0, 1});
    CHECK(values<int64_t>(x.add(1)) == std::vector<int64_t>{-2, 5, 8});
    CHECK(values<int64_t>(x.maximum(0)) == std::vector<int64_t>{0, 4, 7});
    CHECK(values<int64_t>(x.bitwise_and(6)) == std::vector<int64_t>{4, 4, 6});
    CHECK(x.div(2).dtype() == DType::f32);
    CHECK(values<bool>(x.lt(0)) == std::vector<bool>{true, false, false});
    CHECK(x.pow(2).dtype() == DType::i64);
  }
}

TEST_CASE("integer scalars stay exact beyond 2^53", "[api]") {
  const int64_t big = (int64_t{1} << 62) + 1;
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<int64_t>({0, 1}, {2});
    CHECK(values<int64_t>(x + big) == std::vector<int64_t>{big, big + 1});
    CHECK(values<bool>(x.eq(big - big)) == std::vector<bool>{true, false});
    CHECK(values<int64_t>(x.masked_fill(d.tensor<bool>({true, false}, {2}), big)) == std::vector<int64_t>{big, 1});
    // Past int64 PyTorch refuses it ("Overflow when unpacking long"); so does an integer op here.
    const uint64_t huge = (uint64_t{1} << 63) + 5;
    CHECK_THROWS_AS(x + huge, sy::Error);
  }
}

TEST_CASE("item, clone and printing", "[api]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<float>({1.5f, 2.5f}, {2});
    CHECK(x.sum().item<float>() == 4.0f);
    CHECK(x.sum().item<int>() == 4);
    CHECK(x.slice(0, {1, 2}).item<double>() == 2.5);  // any shape of one element
    CHECK_THROWS_AS(x.item<float>(), sy::Error);
    Tensor c = x.clone();
    CHECK(c.id() != x.id());
    CHECK(values<float>(c) == values<float>(x));

    std::ostringstream s;
    s << d.tensor<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(s.str() == "Tensor(shape=[2, 3], dtype=i32, device=" + d.name() + ")\n[[1, 2, 3], [4, 5, 6]]");
    std::ostringstream big;
    big << d.arange(0, 2000, 1, DType::i64);
    CHECK(big.str() == "Tensor(shape=[2000], dtype=i64, device=" + d.name() + ")\n[0, 1, 2, ..., 1997, 1998, 1999]");
    std::ostringstream flags;
    flags << d.tensor<bool>({true, false}, {2});
    CHECK(flags.str().find("[true, false]") != std::string::npos);
    std::ostringstream none;
    none << Tensor();
    CHECK(none.str() == "Tensor(undefined)");
  }
}

TEST_CASE("conveniences compose existing ops", "[api]") {
  for (const auto& d : devices()) {
    INFO(d.name());
    auto a = d.ones({2, 2}), b = d.ones({2, 3}), bias = d.ones({3});
    CHECK(values<float>(sy::addmm(bias, a, b, 2, 3)) == std::vector<float>(6, 8.0f));  // 2 * 1 + 3 * 2
    CHECK(values<float>(bias.addmm(a, b)) == std::vector<float>(6, 3.0f));
    auto x = d.tensor<float>({-2, 0.5f, 3}, {3});
    CHECK(values<float>(x.clamp_min(0)) == std::vector<float>{0, 0.5f, 3});
    CHECK(values<float>(x.clamp_max(1)) == std::vector<float>{-2, 0.5f, 1});
    CHECK(values<float>(x.square()) == std::vector<float>{4, 0.25f, 9});
    CHECK(d.tensor<bool>({true, false}, {2}).square().dtype() == DType::i64);
    auto i = d.tensor<int32_t>({1, 2, 4}, {3});
    CHECK(i.mean(DType::f64).dtype() == DType::f64);
    CHECK(i.mean(DType::f64).item<double>() == Approx(7.0 / 3));
    CHECK(i.mean({0}, true, DType::f32).shape() == Shape{1});
    CHECK_THROWS_AS(i.mean(), sy::Error);  // without a dtype an integer mean is refused, as PyTorch
  }
}

TEST_CASE("devices without strings, and a Runtime that moves", "[api]") {
  static_assert(std::is_nothrow_move_constructible_v<sy::Runtime>);
  static_assert(std::is_move_assignable_v<sy::Runtime>);
  sy::Runtime a({.devices = {"cpu:0", "reference:0"}});
  CHECK(a.cpu(0).name() == "cpu:0");
  CHECK(a.cpu() == a.device("cpu:0"));
  CHECK(a.reference(0).name() == "reference:0");
  CHECK_THROWS_AS(a.cuda(7), sy::Error);
  auto x = a.cpu().tensor<float>({1, 2}, {2});
  sy::Runtime b = std::move(a);  // the devices and tensors keep working
  CHECK(values<float>(x * 2) == std::vector<float>{2, 4});
  CHECK(b.cpu().name() == "cpu:0");
  CHECK_THROWS_AS(a.cpu(), sy::Error);  // NOLINT(bugprone-use-after-move): checked on purpose
  sy::Runtime c({.devices = {"cpu:0"}});
  c = std::move(b);  // c's own runtime shuts down first
  CHECK(values<float>(x + 1) == std::vector<float>{2, 3});
}

TEST_CASE("every failure of the public API is an sy::Error naming the op", "[api]") {
  auto d = devices().front();
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const sy::Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(sy::Errc{}, std::string("no error"));
  };
  auto [c1, m1] = code_of([&] { (void)d.tensor<float>({1, 2, 3}, {2, 2}); });
  CHECK(c1 == sy::Errc::shape_mismatch);
  CHECK_THAT(m1, Catch::Contains("3 values"));
  auto [c2, m2] = code_of([&] { (void)d.zeros({int64_t{1} << 40, int64_t{1} << 40}); });
  CHECK(c2 == sy::Errc::shape_mismatch);
  auto [c3, m3] = code_of([&] { (void)d.uniform({2}, 1, 0); });
  CHECK(c3 == sy::Errc::invalid_argument);
  auto [c4, m4] = code_of([&] { (void)d.normal({2}, 0, -1); });
  CHECK(c4 == sy::Errc::invalid_argument);
  auto [c5, m5] = code_of([&] { (void)d.ones({2, 4}).linear(d.ones({4, 5})); });
  CHECK(c5 == sy::Errc::shape_mismatch);
  CHECK_THAT(m5, Catch::StartsWith("linear:"));
  auto [c10, m10] = code_of([&] { (void)sy::addmm(d.ones({2}), d.ones({2, 3}), d.ones({2, 3})); });
  CHECK(c10 == sy::Errc::shape_mismatch);
  CHECK_THAT(m10, Catch::StartsWith("addmm:"));
  auto [c6, m6] = code_of([&] { (void)d.ones({3}).masked_fill(d.ones({3}), 1); });
  CHECK(c6 == sy::Errc::dtype_mismatch);
  CHECK_THAT(m6, Catch::StartsWith("masked_fill:"));
  auto [c7, m7] = code_of([&] { (void)d.zeros({3}, DType::i32).masked_fill(d.ones({3}, DType::boolean), 4294967299); });
  CHECK(c7 == sy::Errc::invalid_argument);
  CHECK_THAT(m7, Catch::Contains("4294967299"));
  auto [c8, m8] = code_of([&] { (void)d.ones({2, 3}).sum({-1, 1}); });
  CHECK(c8 == sy::Errc::invalid_argument);
  auto [c9, m9] = code_of([&] {
    (void)d.ones({2}).clamp(std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN());
  });
  CHECK(c9 == sy::Errc::invalid_argument);
}

TEST_CASE("connect to a port nobody listens on reports worker_unreachable", "[api]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  try {
    (void)rt.connect("127.0.0.1", 1);  // port 1: refused at once
    FAIL("connect succeeded");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::worker_unreachable);
  }
}

TEST_CASE("item and to_vector convert as a cast to the type's dtype would", "[api]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> xs = {nan, inf, -inf, 1e10, -1e10, 3e9, -2.7, 300.5, 70000.0, 1e19, -1e19};
  for (const auto& d : devices()) {
    INFO(d.name());
    auto x = d.tensor<double>(xs, {static_cast<int64_t>(xs.size())});
    CHECK(values<int32_t>(x) == values<int32_t>(x.cast(DType::i32)));
    CHECK(values<int64_t>(x) == values<int64_t>(x.cast(DType::i64)));
    CHECK(values<uint8_t>(x) == values<uint8_t>(x.cast(DType::u8)));
    CHECK(values<int16_t>(x) == values<int16_t>(x.cast(DType::i16)));
    CHECK(values<int8_t>(x) == values<int8_t>(x.cast(DType::i8)));
    CHECK(values<bool>(x) == values<bool>(x.cast(DType::boolean)));
    for (size_t i = 0; i < xs.size(); ++i) {
      auto one = x.slice(0, {static_cast<int64_t>(i), static_cast<int64_t>(i + 1)}).reshape({});
      CHECK(one.item<int32_t>() == one.cast(DType::i32).item<int32_t>());
    }
    // From f32 and f16 as well.
    auto f = x.cast(DType::f32);
    CHECK(values<int32_t>(f) == values<int32_t>(f.cast(DType::i32)));
    auto h = d.tensor<double>({nan, 65504.0, -3.5}, {3}).cast(DType::f16);
    CHECK(values<int32_t>(h) == values<int32_t>(h.cast(DType::i32)));
  }
}

TEST_CASE("arange refuses counts a tensor cannot hold and infinite bounds, naming itself", "[api]") {
  auto d = devices().front();
  for (double end : {1e300, 1e19}) {
    try {
      (void)d.arange(0, end, 1);
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::shape_mismatch);
      CHECK(std::string(e.what()).find("arange") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(d.arange(0, 1, 1e-300), sy::Error);
  for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    try {
      (void)d.arange(0, bad, 1);
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
    }
  }
  CHECK(values<float>(d.arange(0, 3, 1)) == std::vector<float>{0, 1, 2});
}

TEST_CASE("an op whose output the host cannot hold fails with out_of_memory naming the bytes", "[api]") {
  // Only where the kernel refuses what it cannot back (heuristic or strict
  // overcommit): with overcommit_memory=1 the map would succeed and the fill
  // would meet the OOM killer instead.
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  overcommit >> mode;
  if (mode != 0 && mode != 2) {
    WARN("skipped: vm.overcommit_memory is " << mode << ", so an 8 TiB map would not fail");
    return;
  }
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}});
  auto d = rt.device("cpu:0");
  const int64_t n = int64_t{1} << 40;  // the largest element count a shape may have: 8 TiB of f64
  auto huge = d.zeros({n}, DType::f64);
  try {
    (void)huge.sum().item<double>();
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::out_of_memory);
    CHECK_THAT(e.what(),
               Catch::Contains("8796093022208 bytes") && Catch::Contains("8.0 TiB") && Catch::Contains("cpu:0"));
  }
  // The device goes on.
  CHECK(values<double>(d.zeros({3}, DType::f64) + 1.0) == std::vector<double>{1, 1, 1});
}

TEST_CASE("RuntimeOptions::cpu_memory_limit fails an op past it with out_of_memory and the device goes on", "[api]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}, .cpu_memory_limit = uint64_t{64} << 20});
  auto d = rt.device("cpu:0");
  auto held = d.full({int64_t{8} << 20}, 1.0);  // 32 MiB
  CHECK(held.sum().item<float>() == 8.0f * 1024 * 1024);
  auto over = d.full({int64_t{12} << 20}, 2.0);  // 48 MiB more: past 64
  try {
    (void)over.sum().item<float>();
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::out_of_memory);
    CHECK_THAT(e.what(), Catch::Contains("memory limit of 64.0 MiB") && Catch::Contains("cpu:0") &&
                             Catch::Contains("32.0 MiB in use"));
  }
  // Freed memory is room again, and the device goes on.
  held = sy::Tensor();
  over = sy::Tensor();
  // (Its 64 MiB pooled block fills the limit: a sum's 4-byte output, counted
  // too, would not fit beside it, so the tensor itself is read.)
  auto fits = values<float>(d.full({int64_t{12} << 20}, 2.0));
  CHECK(fits.size() == size_t{12} << 20);
  CHECK(fits.back() == 2.0f);
  CHECK_THROWS_MATCHES(d.full({int64_t{12} << 20}, 2.0).sum().item<float>(), sy::Error,
                       Catch::Matchers::Predicate<sy::Error>(
                           [](const sy::Error& e) { return e.code() == sy::Errc::out_of_memory; }, "out_of_memory"));
}

TEST_CASE("a runtime refuses options it cannot honour at construction and names the field", "[api]") {
  using namespace std::chrono_literals;
  auto base = [] { return sy::RuntimeOptions{.devices = {"cpu:0"}}; };
  std::vector<std::pair<std::string, sy::RuntimeOptions>> bad;
  bad.emplace_back("max_batch", base());
  bad.back().second.max_batch = 0;
  for (auto us : {0us, -5us}) {
    bad.emplace_back("flush_interval", base());
    bad.back().second.flush_interval = us;
  }
  bad.emplace_back("idle_trim_after", base());
  bad.back().second.idle_trim_after = -1ms;
  for (auto ms : {0ms, -1ms}) {
    bad.emplace_back("remote_timeout", base());
    bad.back().second.remote_timeout = ms;
    bad.emplace_back("connect_timeout", base());
    bad.back().second.connect_timeout = ms;
  }
  bad.emplace_back("shutdown_timeout", base());
  bad.back().second.shutdown_timeout = -1ms;
  bad.emplace_back("log_level", base());
  bad.back().second.log_level = static_cast<sy::LogLevel>(42);
  for (auto& [field, options] : bad) {
    INFO(field);
    try {
      sy::Runtime rt(std::move(options));
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK(std::string(e.what()).find("RuntimeOptions::" + field) != std::string::npos);
    }
  }
  // The documented zeros stay allowed: no idle trim, no shutdown grace.
  auto edge = base();
  edge.idle_trim_after = 0ms;
  edge.shutdown_timeout = 0ms;
  edge.max_batch = 1;
  edge.flush_interval = 1us;
  sy::Runtime rt(std::move(edge));
  auto d = rt.device("cpu:0");
  CHECK(values<float>(d.arange(0, 3, 1) + 1.0) == std::vector<float>{1, 2, 3});
}

TEST_CASE("a runtime refuses more kernel threads or devices than a process can hold, naming the option", "[api]") {
  try {
    sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}, .cpu_threads = 100000});
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::invalid_argument);
    CHECK(std::string(e.what()).find("cpu_threads") != std::string::npos);
  }
  for (const char* star : {"cpu:*", "reference:*"}) {
    try {
      sy::Runtime rt(sy::RuntimeOptions{.devices = {star}});
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK(std::string(e.what()).find(star) != std::string::npos);
    }
  }
}

TEST_CASE("host data with a negative or overflowing shape and 0-d axis errors say what is wrong", "[api]") {
  try {
    (void)sy::TensorData(Shape{-2, 2}, DType::f32, sy::Bytes::allocate(16));
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(e.what(), Catch::Contains("[-2, 2] has a negative extent"));
  }
  try {
    (void)sy::TensorData(Shape{int64_t{1} << 40, int64_t{1} << 40}, DType::f32, sy::Bytes::allocate(16));
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::shape_mismatch);
    CHECK_THAT(e.what(), Catch::Contains("holds more bytes than memory can"));
  }
  // An empty extent beside an overflowing product holds 0 bytes.
  CHECK(sy::TensorData(Shape{0, int64_t{1} << 62, 64}, DType::f32, sy::Bytes{}).numel() == 0);
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}});
  auto z = rt.device("cpu:0").full({}, 3.0);
  for (auto call : {+[](const Tensor& t) { return t.flip({1}); }, +[](const Tensor& t) { return t.transpose(0, 1); },
                    +[](const Tensor& t) { return t.squeeze(2); }}) {
    try {
      (void)call(z);
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::shape_mismatch);
      CHECK_THAT(e.what(), Catch::Contains("out of range for a 0-d tensor (0 or -1)"));
    }
  }
  CHECK(values<float>(z.flip({-1}).transpose(0, -1).squeeze(0)) == std::vector<float>{3});
}

TEST_CASE("calls built on another op's rule name the op called in their errors", "[api]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "reference:0"}});
  auto d = rt.device("cpu:0");
  auto x = d.tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto expect_error = [](auto&& call, const std::string& starts) {
    try {
      (void)call();
      FAIL("no error");
    } catch (const sy::Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).rfind(starts, 0) == 0);
    }
  };
  expect_error([&] { return x.sort(2).values; }, "sort: axis 2");
  expect_error([&] { return x.argsort(2); }, "argsort: axis 2");
  auto bad_index = d.tensor<float>({0, 1, 0}, {1, 3});
  expect_error([&] { return x.scatter_reduce(0, bad_index, x, "sum"); }, "scatter_reduce: ");
  expect_error([&] { return x.scatter(0, bad_index, x); }, "scatter: ");
  auto img = d.zeros({1, 1, 4, 4});
  auto w = rt.device("reference:0").zeros({1, 1, 3, 3});
  expect_error([&] { return sy::nn::conv2d(img, w); }, "conv2d: operands live on cpu:0 and reference:0");
  expect_error([&] { return sy::nn::conv2d(img, Tensor{}); }, "conv2d: ");
  expect_error([&] { return sy::nn::conv_transpose1d(d.zeros({1, 1, 4}), Tensor{}); }, "conv_transpose1d: ");
}

TEST_CASE("a result whose element count overflows fails at the call naming the op", "[api]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "reference:0"}});
  for (const auto& d : rt.devices()) {
    INFO(d.name());
    // 2^41 elements, over the 2^40 a tensor may hold.
    auto one = d.zeros({1, 1}, DType::u8);
    auto column = one.expand({int64_t{1} << 20, 1});
    auto row = one.expand({1, int64_t{1} << 21});
    auto refused = [](auto&& call, const std::string& op) {
      try {
        (void)call();
        FAIL("no error");
      } catch (const sy::Error& e) {
        CHECK(e.code() == sy::Errc::shape_mismatch);
        CHECK_THAT(e.what(), Catch::StartsWith(op + ":") && Catch::Contains("too large"));
      }
    };
    // Before, only the device refused such a result; one of [2^32, 2^32]
    // wrapped to 0 elements and the kernel wrote past its 0-byte result.
    refused([&] { return column + row; }, "add");
    refused([&] { return column.maximum(row); }, "maximum");
    refused([&] { return column.lt(row); }, "lt");
    refused([&] { return one.expand({int64_t{1} << 62, 16}); }, "expand");
    refused([&] { return d.ones({4, 4}).repeat({int64_t{1} << 62, 1}); }, "repeat");
    refused([&] { return d.ones({4, 4}).tile({int64_t{1} << 61, 1}); }, "repeat");
    // Wherever a 0 extent sits ([2^62, 0] was refused, [0, 2^62] taken).
    CHECK_THROWS_WITH(d.zeros({int64_t{1} << 62, 0}), Catch::Contains("[4611686018427387904, 0] is too large"));
    CHECK_THROWS_WITH(d.zeros({0, int64_t{1} << 62}), Catch::Contains("[0, 4611686018427387904] is too large"));
    refused([&] { return d.zeros({1, 0}).expand({int64_t{1} << 62, 0}); }, "expand");
    CHECK(d.zeros({0, int64_t{1} << 20, 8}).sum().item<float>() == 0.0f);
    // The device goes on, and a broadcast that fits runs.
    auto sum = d.ones({3, 1}) + d.ones({1, 2});
    CHECK(values<float>(sum) == std::vector<float>(6, 2.0f));
  }
}

TEST_CASE("a uint64 scalar past INT64_MAX is refused by integer and bool ops and taken by floating ones", "[api]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "reference:0"}});
  const uint64_t past = (uint64_t{1} << 63) + 5;
  for (const auto& d : rt.devices()) {
    INFO(d.name());
    auto x = d.tensor<int64_t>({0, -1}, {2});
    // These wrapped: 0 < 2^63 was false and -1 == 2^64 - 1 true.
    for (auto call : std::vector<std::function<Tensor()>>{
             [&] { return x.lt(uint64_t{1} << 63); }, [&] { return x.eq(~uint64_t{0}); }, [&] { return x.add(past); },
             [&] { return d.ones({2}, DType::boolean).mul(past); }, [&] { return d.ones({2}, DType::u8).sub(past); }}) {
      try {
        (void)call();
        FAIL("no error");
      } catch (const sy::Error& e) {
        CHECK(e.code() == sy::Errc::invalid_argument);
        CHECK_THAT(e.what(), Catch::Contains("does not fit int64"));
      }
    }
    // Values that fit are exact, and a floating tensor takes any.
    CHECK(values<int64_t>(x.add(uint64_t{5})) == std::vector<int64_t>{5, 4});
    CHECK(values<double>(d.zeros({1}, DType::f64).add(past)) == std::vector<double>{9223372036854775813.0});
  }
}

TEST_CASE("cat of only 1-D empty tensors gives one along any axis as PyTorch", "[api]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "reference:0"}});
  for (const auto& d : rt.devices()) {
    INFO(d.name());
    auto e = sy::cat({d.zeros({0}), d.zeros({0}, DType::i64)}, 1);
    CHECK(e.shape() == Shape{0});
    CHECK(e.dtype() == DType::f32);
    CHECK(sy::cat({d.zeros({0})}, -3).shape() == Shape{0});
    // Beside a tensor with axes the empty one is left out and the axis checked.
    CHECK(sy::cat({d.zeros({0}), d.ones({2, 3})}, 1).shape() == Shape{2, 3});
    CHECK_THROWS_AS(sy::cat({d.zeros({0}), d.ones({2, 3})}, 2), sy::Error);
  }
}
