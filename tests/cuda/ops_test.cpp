// SPDX-License-Identifier: Apache-2.0
// Every op family on every CUDA device against cpu:0: the same inputs (as
// TensorData) go to both devices, the same op runs on both, and the reads
// must agree (exactly for integers, bools and the random draws; within a
// relative tolerance for float math, whose library functions differ in the
// last bits between CUDA and glibc).

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "switchyard/nn.hpp"
#include "switchyard/switchyard.hpp"
#include "tests/cuda/rig.hpp"
#include "tests/cuda/wait.hpp"

namespace sy = switchyard;
using sy::DType;
using sy::Shape;
using sy::Tensor;
using sy::TensorData;
using sytest_cuda::got;
using sytest_cuda::read;
using sytest_cuda::Rig;

namespace {

using Build = std::function<Tensor(const std::vector<Tensor>&)>;

/// Deterministic test data: floats in [lo, hi), integers in [lo, hi], bools alternating.
TensorData data(Shape s, DType t, uint32_t seed, double lo = -3, double hi = 3) {
  std::mt19937 gen(seed);
  const auto n = static_cast<size_t>(s.numel());
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (sy::is_floating(t))
      v[i] = std::uniform_real_distribution<double>(lo, hi)(gen);
    else if (t == DType::boolean)
      v[i] = static_cast<double>((i * 7 + seed) % 3 == 0);
    else if (t == DType::u8)
      v[i] = static_cast<double>(std::uniform_int_distribution<int>(0, 9)(gen));
    else
      v[i] = static_cast<double>(std::uniform_int_distribution<int>(static_cast<int>(lo), static_cast<int>(hi))(gen));
  }
  return sy::visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> typed(v.begin(), v.end());
    return TensorData::from(typed, s);
  });
}

void expect_same(const TensorData& cpu, const TensorData& gpu, double rtol) {
  REQUIRE(cpu.shape == gpu.shape);
  REQUIRE(cpu.dtype == gpu.dtype);
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double a = cpu.at(i), b = gpu.at(i);
    if (std::isnan(a) || std::isnan(b)) {
      INFO("element " << i << ": cpu " << a << ", gpu " << b);
      CHECK((std::isnan(a) && std::isnan(b)));
    } else if (!sy::is_floating(cpu.dtype) || std::isinf(a)) {
      INFO("element " << i);
      CHECK(a == b);
    } else {
      INFO("element " << i);
      CHECK(std::abs(a - b) <= rtol * (1 + std::abs(a)));
    }
  }
}

/// Runs `f` on the same inputs on cpu:0 and on `gpu` and compares. Ops the
/// rules reject for these inputs (the call throws) are skipped; returns
/// whether the op ran.
bool same(const sy::Device& cpu, const sy::Device& gpu, const std::vector<TensorData>& inputs, const Build& f,
          const std::string& what, double rtol = 2e-5) {
  return sytest_cuda::run_on_both(cpu, gpu, inputs, f, what,
                                  [rtol](const TensorData& cd, const TensorData& gd) { expect_same(cd, gd, rtol); });
}

constexpr DType every_dtype[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::boolean};

}  // namespace

TEST_CASE("cuda: fill, arange and eye match the CPU for every dtype", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype) {
      INFO(sy::name_of(t));
      auto c = read(rig.cpu.full({3, 5}, 2.5, t));
      auto g = read(gpu.full({3, 5}, 2.5, t));
      expect_same(c, g, 0);
      if (t != DType::boolean) expect_same(read(rig.cpu.arange(0, 40, 1.5, t)), read(gpu.arange(0, 40, 1.5, t)), 0);
      expect_same(read(rig.cpu.eye(4, 6, t)), read(gpu.eye(4, 6, t)), 0);
      expect_same(read(rig.cpu.zeros({0, 3}, t)), read(gpu.zeros({0, 3}, t)), 0);
    }
}

TEST_CASE("cuda: random draws give the CPU's values after the same seed", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    rig.cpu.seed(1234);
    gpu.seed(1234);
    for (DType t : {DType::f32, DType::f64}) {
      INFO(sy::name_of(t));
      // uniform and bernoulli are exact (no fused multiply-add in the kernel).
      expect_same(read(rig.cpu.uniform({1000}, -2, 5, t)), read(gpu.uniform({1000}, -2, 5, t)), 0);
      expect_same(read(rig.cpu.bernoulli({1000}, 0.3, t)), read(gpu.bernoulli({1000}, 0.3, t)), 0);
      // normal uses log/cos/sqrt, whose CUDA versions may differ by an ulp.
      expect_same(read(rig.cpu.normal({1000}, 1, 2, t)), read(gpu.normal({1000}, 1, 2, t)), 1e-6);
    }
  }
}

TEST_CASE("cuda: unary ops match the CPU for every dtype the rules accept", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype)
      for (int k = 0; k <= static_cast<int>(sy::UnaryKind::isinf); ++k) {
        auto kind = static_cast<sy::UnaryKind>(k);
        auto build = [&](const std::vector<Tensor>& in) {
          return kind == sy::UnaryKind::clamp ? in[0].clamp(-1, 2) : in[0].unary(kind);
        };
        same(rig.cpu, gpu, {data({4, 33}, t, 7 + k)}, build,
             std::string(sy::to_string(kind)) + " " + std::string(sy::name_of(t)));
      }
}

TEST_CASE("cuda: binary ops with broadcasting match the CPU", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType ta : every_dtype)
      for (DType tb : {DType::f32, DType::i64, DType::boolean, ta})
        for (int k = 0; k <= static_cast<int>(sy::BinaryKind::bitwise_xor); ++k) {
          auto kind = static_cast<sy::BinaryKind>(k);
          // Integer divisors stay non-zero (a zero is its own test below).
          auto lhs = data({2, 3, 17}, ta, 11 + k);
          auto rhs = data({3, 1}, tb, 29 + k, 1, 4);
          same(
              rig.cpu, gpu, {lhs, rhs}, [&](const std::vector<Tensor>& in) { return in[0].binary(kind, in[1]); },
              std::string(sy::to_string(kind)) + " " + std::string(sy::name_of(ta)) + "," +
                  std::string(sy::name_of(tb)));
          same(
              rig.cpu, gpu, {rhs, lhs}, [&](const std::vector<Tensor>& in) { return in[0].binary(kind, in[1]); },
              std::string(sy::to_string(kind)) + " reversed");
        }
}

TEST_CASE("cuda: scalar ops match the CPU for bool, integer and float scalars", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype)
      for (int k = 0; k <= static_cast<int>(sy::BinaryKind::bitwise_xor); ++k) {
        auto kind = static_cast<sy::BinaryKind>(k);
        auto in = data({5, 7}, t, 3 + k, 1, 5);
        for (bool first : {false, true}) {
          std::string what =
              std::string(sy::to_string(kind)) + " " + std::string(sy::name_of(t)) + (first ? " first" : "");
          same(
              rig.cpu, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, 3, first); },
              what + " int");
          same(
              rig.cpu, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, 1.5, first); },
              what + " float");
          same(
              rig.cpu, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, true, first); },
              what + " bool");
        }
      }
}

TEST_CASE("cuda: casts between every pair of dtypes match the CPU", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType from : every_dtype)
      for (DType to : every_dtype)
        CHECK(same(
            rig.cpu, gpu, {data({64}, from, 5, -300, 300)}, [&](const std::vector<Tensor>& x) { return x[0].cast(to); },
            std::string(sy::name_of(from)) + "->" + std::string(sy::name_of(to))));
}

TEST_CASE("cuda: where broadcasts condition and branches like the CPU", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    CHECK(same(
        rig.cpu, gpu, {data({4, 1, 6}, DType::boolean, 1), data({5, 1}, DType::f32, 2), data({6}, DType::i64, 3)},
        [](const std::vector<Tensor>& x) { return sy::where(x[0], x[1], x[2]); }, "where"));
}

TEST_CASE("cuda: reductions over axis sets match the CPU", "[cuda][gpu]") {
  Rig rig;
  const std::vector<std::vector<int64_t>> axis_sets = {{}, {0}, {1}, {2}, {0, 2}, {1, 2}};
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype)
      for (const auto& axes : axis_sets)
        for (bool keep : {false, true}) {
          // 3 x 700 x 5 exercises both the warp-per-output and block-per-output paths.
          auto in = data({3, 700, 5}, t, 17);
          std::string what =
              std::string(sy::name_of(t)) + " axes " + std::to_string(axes.size()) + (keep ? " keep" : "");
          auto run = [&](auto op, const char* name) { same(rig.cpu, gpu, {in}, op, what + " " + name, 1e-5); };
          run([&](const std::vector<Tensor>& x) { return x[0].sum(axes, keep); }, "sum");
          run([&](const std::vector<Tensor>& x) { return x[0].mean(axes, keep); }, "mean");
          run([&](const std::vector<Tensor>& x) { return x[0].max(axes, keep); }, "max");
          run([&](const std::vector<Tensor>& x) { return x[0].min(axes, keep); }, "min");
          run([&](const std::vector<Tensor>& x) { return x[0].any(axes, keep); }, "any");
          run([&](const std::vector<Tensor>& x) { return x[0].all(axes, keep); }, "all");
          run([&](const std::vector<Tensor>& x) { return x[0].var(axes, 1, keep); }, "var");
          run([&](const std::vector<Tensor>& x) { return x[0].std(axes, 0, keep); }, "std");
        }
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype) {
      auto small = data({4, 6}, t, 9, -2, 2);  // prod stays in range
      same(
          rig.cpu, gpu, {small}, [](const std::vector<Tensor>& x) { return x[0].prod({1}); }, "prod");
      same(
          rig.cpu, gpu, {small}, [](const std::vector<Tensor>& x) { return x[0].argmax(1); }, "argmax");
      same(
          rig.cpu, gpu, {small}, [](const std::vector<Tensor>& x) { return x[0].argmin(0, true); }, "argmin");
      same(
          rig.cpu, gpu, {small}, [](const std::vector<Tensor>& x) { return x[0].argmax(); }, "argmax flat");
    }
}

TEST_CASE("cuda: softmax and log_softmax match the CPU on every axis", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f32, DType::f64})
      for (int64_t axis : {0, 1, -1}) {
        auto in = data({6, 600, 3}, t, 4, -10, 10);
        same(
            rig.cpu, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].softmax(axis); }, "softmax", 1e-5);
        same(
            rig.cpu, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].log_softmax(axis); }, "log_softmax",
            1e-5);
      }
}

TEST_CASE("cuda: matmul matches the CPU with transposes, batch broadcasting, bias and integers", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
      std::string n(sy::name_of(t));
      same(
          rig.cpu, gpu, {data({7, 5}, t, 1), data({5, 9}, t, 2)},
          [](const std::vector<Tensor>& x) { return x[0].matmul(x[1]); }, "2-D " + n, 1e-5);
      same(
          rig.cpu, gpu, {data({3, 7, 5}, t, 3), data({5, 4}, t, 4)},
          [](const std::vector<Tensor>& x) { return x[0].matmul(x[1]); }, "batch x matrix " + n, 1e-5);
      same(
          rig.cpu, gpu, {data({2, 1, 4, 5}, t, 5), data({1, 3, 5, 6}, t, 6)},
          [](const std::vector<Tensor>& x) { return x[0].matmul(x[1]); }, "irregular broadcast " + n, 1e-5);
      same(
          rig.cpu, gpu, {data({5, 7}, t, 7), data({4, 5}, t, 8)},
          [](const std::vector<Tensor>& x) { return x[0].mT().matmul(x[1].mT()); }, "transposes " + n, 1e-5);
      same(
          rig.cpu, gpu, {data({6, 5}, t, 9), data({3, 5}, t, 10), data({3}, t, 11)},
          [](const std::vector<Tensor>& x) { return x[0].linear(x[1], x[2]); }, "linear " + n, 1e-5);
      same(
          rig.cpu, gpu, {data({4, 0}, t, 12), data({0, 3}, t, 13)},
          [](const std::vector<Tensor>& x) { return x[0].matmul(x[1]); }, "k = 0 " + n);
    }
  }
}

TEST_CASE("cuda: layout ops match the CPU", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f32, DType::i64, DType::u8, DType::boolean}) {
      auto in = data({4, 5, 6}, t, 21);
      auto v = [&](const Build& f, const char* what) { CHECK(same(rig.cpu, gpu, {in}, f, what)); };
      v([](const std::vector<Tensor>& x) { return x[0].reshape({20, 6}); }, "reshape");
      v([](const std::vector<Tensor>& x) { return x[0].permute({2, 0, 1}); }, "permute");
      v([](const std::vector<Tensor>& x) { return x[0].unsqueeze(1).expand({4, 3, 5, 6}); }, "expand");
      v([](const std::vector<Tensor>& x) { return x[0].flip({0, 2}); }, "flip");
      v([](const std::vector<Tensor>& x) { return x[0].slice(1, sy::Slice{1, 5, 2}); }, "slice");
      v([](const std::vector<Tensor>& x) { return x[0].pad({1, 0, 2}, {0, 3, 1}, 1); }, "pad");
      v([](const std::vector<Tensor>& x) { return sy::cat({x[0], x[0].slice(1, sy::Slice{0, 2})}, 1); }, "cat");
      CHECK(same(
          rig.cpu, gpu, {in, data({4, 2, 6}, t, 22)},
          [](const std::vector<Tensor>& x) {
            return x[0].slice_assign({sy::Slice{}, sy::Slice{1, 5, 2}}, x[1]);
          },
          "slice_assign"));
    }
}

TEST_CASE("cuda: gather, scatter_add and index_select match the CPU", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8, DType::boolean})
      for (DType ti : {DType::i64, DType::i32}) {
        auto in = data({5, 6}, t, 31);
        auto index = data({5, 4}, ti, 32, -6, 5);
        auto rows = data({7}, ti, 33, -5, 4);
        std::string what = std::string(sy::name_of(t)) + "/" + std::string(sy::name_of(ti));
        CHECK(same(
            rig.cpu, gpu, {in, index}, [](const std::vector<Tensor>& x) { return x[0].gather(1, x[1]); },
            "gather " + what));
        CHECK(same(
            rig.cpu, gpu, {in, rows}, [](const std::vector<Tensor>& x) { return x[0].index_select(0, x[1]); },
            "index_select " + what));
        CHECK(same(
            rig.cpu, gpu, {in, index, data({5, 4}, t, 34, 0, 3)},
            [](const std::vector<Tensor>& x) { return x[0].scatter_add(1, x[1], x[2]); }, "scatter_add " + what, 1e-5));
      }
}

TEST_CASE("cuda: an index out of range fails the read with index_out_of_range", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto x = gpu.tensor<float>({1, 2, 3}, {3});
    auto bad = gpu.tensor<int64_t>({0, 3}, {2});
    auto y = x.index_select(0, bad) + 1.0;  // downstream ops inherit the check
    try {
      (void)read(y);
      FAIL("the read succeeded");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::index_out_of_range);
      CHECK(std::string(e.what()).find("index 3") != std::string::npos);
    }
    // The device keeps working.
    CHECK(read(x.sum()).to_vector<float>() == std::vector<float>{6});
  }
}

TEST_CASE("cuda: integer remainder by zero fails the read like the CPU", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto a = gpu.tensor<int32_t>({5, 6}, {2});
    auto b = gpu.tensor<int32_t>({2, 0}, {2});
    CHECK_THROWS_AS(read(a.remainder(b)), sy::Error);
    CHECK(read(a.remainder(gpu.tensor<int32_t>({2, 4}, {2}))).to_vector<int32_t>() == std::vector<int32_t>{1, 2});
  }
}

TEST_CASE("cuda: tensors travel cpu -> cuda -> cpu and between GPUs unchanged", "[cuda][gpu]") {
  Rig rig;
  for (size_t i = 0; i < rig.gpus.size(); ++i) {
    auto d = data({1000, 3}, DType::f64, 41);
    auto x = rig.cpu.from_data(d);
    auto back = x.to(rig.gpus[i]).mul(x.to(rig.gpus[i])).to(rig.cpu);
    expect_same(read(x.mul(x)), read(back), 0);
    auto next = rig.gpus[(i + 1) % rig.gpus.size()];
    expect_same(d, read(x.to(rig.gpus[i]).to(next)), 0);
  }
}

TEST_CASE("cuda: a read completes without an explicit sync", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto f = gpu.arange(0, 100000, 1, DType::f32).sum().read();
    REQUIRE(f.wait_for(std::chrono::seconds(30)));
    CHECK(f.get().at(0) == Approx(4999950000.0).epsilon(1e-6));
  }
}

TEST_CASE("cuda: stats show the bytes a device holds", "[cuda][gpu]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto x = gpu.zeros({1024, 1024});
    got(gpu.sync());
    auto s = got(gpu.stats());
    CHECK(s.live_bytes >= 4u * 1024 * 1024);
  }
}

TEST_CASE("cuda: RuntimeOptions::cuda_memory_limit fails an oversized op with out_of_memory", "[cuda][gpu]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}, .cuda_memory_limit = 8u << 20});
  for (auto& gpu : rt.devices()) {
    if (gpu.kind() != "cuda") continue;
    auto big = gpu.zeros({4 << 20});  // 16 MiB of f32
    try {
      (void)read(big);
      FAIL("a 16 MiB tensor fit under an 8 MiB limit");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::out_of_memory);
    }
    CHECK(read(gpu.ones({16}).sum()).to_vector<float>() == std::vector<float>{16});
  }
}

// --- the review's findings (issue 21), each against the CPU ----------------

TEST_CASE("cuda: sign of bool is the identity, as on the CPU", "[cuda][gpu][review]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto in = data({17}, DType::boolean, 3);
    CHECK(same(
        rig.cpu, gpu, {in}, [](const std::vector<Tensor>& x) { return x[0].unary(sy::UnaryKind::sign); }, "sign bool"));
    auto got_bool = read(gpu.from_data(in).unary(sy::UnaryKind::sign));
    for (int64_t i = 0; i < in.numel(); ++i) CHECK(got_bool.at(i) == in.at(i));
  }
}

TEST_CASE("cuda: relu keeps NaN and infinities like the CPU and PyTorch", "[cuda][gpu][review]") {
  Rig rig;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f32, DType::f64}) {
      auto in = sy::visit_dtype(t, [&](auto tag) -> TensorData {
        using T = decltype(tag);
        if constexpr (std::is_floating_point_v<T>)
          return TensorData::from(std::vector<T>{T(nan), T(-1), T(0), T(2), T(inf), T(-inf)}, Shape{{6}});
        else
          return {};
      });
      auto r = read(gpu.from_data(in).unary(sy::UnaryKind::relu));
      CHECK(std::isnan(r.at(0)));
      CHECK(r.at(1) == 0);
      CHECK(r.at(3) == 2);
      CHECK(r.at(4) == inf);
      CHECK(r.at(5) == 0);
      CHECK(same(
          rig.cpu, gpu, {in}, [](const std::vector<Tensor>& x) { return x[0].unary(sy::UnaryKind::relu); },
          "relu " + std::string(sy::name_of(t))));
    }
}

TEST_CASE("cuda: integer clamp bounds are limited to the dtype's range first", "[cuda][gpu][review]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    // u8 clamp(-1, 2): [0, 2], not [255, 2] (which gave 2 everywhere).
    auto u8 = TensorData::from(std::vector<uint8_t>{0, 1, 2, 3, 200}, Shape{{5}});
    CHECK(read(gpu.from_data(u8).clamp(-1, 2)).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 2, 2, 2});
    for (DType t : every_dtype)
      for (auto [lo, hi] : {std::pair{-1.0, 2.0}, std::pair{-1e10, 1e10}, std::pair{-300.0, 300.0},
                            std::pair{2.5, 1e30}, std::pair{-1e30, -2.5}})
        same(
            rig.cpu, gpu, {data({40}, t, 9, -5, 5)}, [=](const std::vector<Tensor>& x) { return x[0].clamp(lo, hi); },
            "clamp(" + std::to_string(lo) + ", " + std::to_string(hi) + ") " + std::string(sy::name_of(t)));
  }
}

TEST_CASE("cuda: fill, arange, pad, eye and scalar operands convert numbers like the CPU", "[cuda][gpu][review]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    // arange(-3, 3, 1, u8) wraps: 253, 254, 255, 0, 1, 2 (the device used to saturate to zeros).
    CHECK(read(gpu.arange(-3, 3, 1, DType::u8)).to_vector<uint8_t>() == std::vector<uint8_t>{253, 254, 255, 0, 1, 2});
    for (DType t : every_dtype) {
      INFO(sy::name_of(t));
      for (double v : {-1.0, -3.7, 255.9, 256.0, 300.0, -300.0, 1e19, -1e19, 3e9, -3e9, 0.5,
                       std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
        INFO("value " << v);
        expect_same(read(rig.cpu.full({3}, v, t)), read(gpu.full({3}, v, t)), 0);
        same(
            rig.cpu, gpu, {data({2, 3}, t, 5, 1, 4)},
            [=](const std::vector<Tensor>& x) {
              return x[0].pad({1, 0}, {0, 2}, v);
            },
            "pad");
        for (bool first : {false, true})
          same(
              rig.cpu, gpu, {data({7}, t, 5, 1, 4)},
              [=](const std::vector<Tensor>& x) { return x[0].binary(sy::BinaryKind::add, v, first); }, "add scalar");
      }
      // Integer scalars computed in an integer dtype wrap (u8 + -1 is u8 - 1).
      for (int64_t v : {int64_t{-1}, int64_t{-300}, int64_t{300}, int64_t{256}, int64_t{1} << 40})
        for (auto kind : {sy::BinaryKind::add, sy::BinaryKind::mul, sy::BinaryKind::maximum, sy::BinaryKind::lt})
          same(
              rig.cpu, gpu, {data({7}, t, 6, 1, 4)}, [=](const std::vector<Tensor>& x) { return x[0].binary(kind, v); },
              "int scalar " + std::to_string(v) + " " + std::string(sy::to_string(kind)));
      if (t != DType::boolean) expect_same(read(rig.cpu.arange(-5, 5, 0.7, t)), read(gpu.arange(-5, 5, 0.7, t)), 0);
      expect_same(read(rig.cpu.eye(3, 5, t)), read(gpu.eye(3, 5, t)), 0);
    }
  }
}

TEST_CASE("cuda: index_select reports the first bad index, handles 0-d inputs and empty indices",
          "[cuda][gpu][review]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto x = gpu.tensor<float>({1, 2, 3, 4}, {4});
    // Several bad indices: the first in index order is reported, every time.
    std::vector<int64_t> many(4096, 0);
    for (size_t i = 1000; i < many.size(); i += 7) many[i] = 100 + static_cast<int64_t>(i);
    for (int round = 0; round < 5; ++round) {
      try {
        (void)read(x.index_select(0, gpu.tensor<int64_t>(many, {static_cast<int64_t>(many.size())})));
        FAIL("bad indices passed");
      } catch (const sy::Error& e) {
        CHECK(e.code() == sy::Errc::index_out_of_range);
        CHECK(std::string(e.what()).find("index 1100 ") != std::string::npos);
      }
    }
    // 0-d input: one element whatever the index holds, every index checked.
    auto scalar = TensorData::from(std::vector<float>{7.5f}, Shape{});
    for (const std::vector<int64_t>& idx : {std::vector<int64_t>{0}, std::vector<int64_t>{0, -1, 0},
                                            std::vector<int64_t>{}, std::vector<int64_t>{0, 1}}) {
      auto index = TensorData::from(idx, Shape{{static_cast<int64_t>(idx.size())}});
      CHECK(same(
          rig.cpu, gpu, {scalar, index}, [](const std::vector<Tensor>& t) { return t[0].index_select(0, t[1]); },
          "index_select 0-d with " + std::to_string(idx.size()) + " indices"));
    }
    // An empty index on a 1-d input gives an empty result.
    auto empty = read(x.index_select(0, gpu.tensor<int64_t>({}, {0})));
    CHECK(empty.numel() == 0);
  }
}

TEST_CASE("cuda: data checks stay bounded through long chains of index ops", "[cuda][gpu][review]") {
  Rig rig;
  for (auto& gpu : rig.gpus) {
    auto idx = gpu.tensor<int64_t>({1, 0, 2}, {3});
    auto x = gpu.tensor<float>({1, 2, 3}, {3});
    // 2000 index ops, each also mixing in a second checked tensor: every op
    // folds several pending checks; a read copies one record, not 2000.
    auto side = x.index_select(0, idx);
    for (int i = 0; i < 2000; ++i) x = x.index_select(0, idx) + side * 0.0;
    auto v = read(x, std::chrono::seconds(60)).to_vector<float>();
    CHECK(v == std::vector<float>{1, 2, 3});  // the permutation has order 2
    // A bad index anywhere in the history still fails the read, and names itself.
    auto bad = x.index_select(0, gpu.tensor<int64_t>({0, 5}, {2}));
    auto y = bad;
    for (int i = 0; i < 50; ++i) y = y.index_select(0, gpu.tensor<int64_t>({1, 0}, {2})) + side.sum();
    try {
      (void)read(y);
      FAIL("the bad index was lost on the way");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::index_out_of_range);
      CHECK(std::string(e.what()).find("index 5 ") != std::string::npos);
    }
    // A remainder by zero folded with an index check still fails the read.
    auto zero = gpu.tensor<int32_t>({0, 1}, {2});
    auto r = gpu.tensor<int32_t>({3, 4}, {2}).remainder(zero).cast(DType::f32) + bad.sum();
    CHECK_THROWS_AS(read(r), sy::Error);
  }
}

TEST_CASE("cuda: long and column reductions (split over blocks) match the CPU", "[cuda][gpu][perf]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype) {
      // Few outputs with long reductions take the split path: contiguous
      // (axis 1 of 3 x 200000, the whole tensor) and strided (axis 0 of 200000 x 3).
      auto wide = data({3, 200000}, t, 21);
      auto tall = data({200000, 3}, t, 22);
      const std::string name(sy::name_of(t));
      struct Case {
        TensorData in;
        std::vector<int64_t> axes;
        const char* what;
      };
      // Column reductions (outputs contiguous in the input): split over
      // blockIdx.y (4096 x 300) and one pass per output thread (5 x 1000).
      auto cols = data({4096, 300}, t, 23);
      auto short_cols = data({5, 1000}, t, 24);
      for (const Case& c : {Case{wide, {1}, "rows"}, Case{wide, {}, "all"}, Case{tall, {0}, "columns"},
                            Case{cols, {0}, "split columns"}, Case{short_cols, {0}, "short columns"}}) {
        const auto& axes = c.axes;
        auto run = [&](auto op, const char* op_name) {
          same(rig.cpu, gpu, {c.in}, op, name + " " + c.what + " " + op_name, 1e-6);
        };
        run([&](const std::vector<Tensor>& x) { return x[0].sum(axes); }, "sum");
        run([&](const std::vector<Tensor>& x) { return x[0].max(axes); }, "max");
        run([&](const std::vector<Tensor>& x) { return x[0].min(axes); }, "min");
        run([&](const std::vector<Tensor>& x) { return x[0].mean(axes); }, "mean");
        run([&](const std::vector<Tensor>& x) { return x[0].any(axes); }, "any");
        run([&](const std::vector<Tensor>& x) { return x[0].all(axes); }, "all");
        if (axes.size() == 1) {
          run([&](const std::vector<Tensor>& x) { return x[0].argmax(axes[0]); }, "argmax");
          run([&](const std::vector<Tensor>& x) { return x[0].argmin(axes[0]); }, "argmin");
        }
      }
    }
}

TEST_CASE("cuda: contiguous elementwise fast paths match the CPU, tails included", "[cuda][gpu][perf]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : every_dtype)
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
        auto lhs = data({n}, t, 61, 1, 5);
        auto rhs = data({n}, t, 62, 1, 5);
        for (auto kind : {sy::BinaryKind::add, sy::BinaryKind::mul, sy::BinaryKind::remainder, sy::BinaryKind::maximum,
                          sy::BinaryKind::lt, sy::BinaryKind::bitwise_xor}) {
          const std::string what =
              std::string(sy::to_string(kind)) + " " + std::string(sy::name_of(t)) + " n=" + std::to_string(n);
          same(
              rig.cpu, gpu, {lhs, rhs}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, x[1]); }, what);
          same(
              rig.cpu, gpu, {lhs}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, 3, true); },
              what + " scalar first");
        }
      }
}

// --- issue 18, part B: norms, attention, scans, sorting, scatter kinds -----------

TEST_CASE("cuda: norms, attention, scans, sorting and scatter kinds match the CPU", "[cuda][gpu][modules]") {
  namespace nn = sy::nn;
  Rig rig;
  for (auto& gpu : rig.gpus) {
    for (DType t : {DType::f32, DType::f64}) {
      const auto x = data({3, 6, 5, 7}, t, 1);
      same(
          rig.cpu, gpu, {x, data({5, 7}, t, 2), data({5, 7}, t, 3)},
          [](auto& in) {
            return nn::layer_norm(in[0], {5, 7}, in[1], in[2]);
          },
          "layer_norm");
      same(
          rig.cpu, gpu, {x, data({7}, t, 4)}, [](auto& in) { return nn::rms_norm(in[0], {7}, in[1]); }, "rms_norm");
      same(
          rig.cpu, gpu, {x, data({6}, t, 5), data({6}, t, 6)},
          [](auto& in) { return nn::group_norm(in[0], 3, in[1], in[2]); }, "group_norm");
      same(
          rig.cpu, gpu, {x, data({6}, t, 7), data({6}, t, 8, 0.5, 2), data({6}, t, 9), data({6}, t, 10)},
          [](auto& in) { return nn::batch_norm(in[0], in[1], in[2], in[3], in[4]); }, "batch_norm");
      // Attention: several key tiles, a query tail, masks of both kinds, causal.
      const auto q = data({2, 3, 37, 16}, t, 11), k = data({2, 3, 150, 16}, t, 12), v = data({2, 3, 150, 9}, t, 13);
      same(
          rig.cpu, gpu, {q, k, v}, [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2]); },
          "attention", 1e-4);
      same(
          rig.cpu, gpu, {q, k, v},
          [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0, true); },
          "causal attention", 1e-4);
      same(
          rig.cpu, gpu, {q, k, v, data({37, 150}, DType::boolean, 14)},
          [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], in[3]); },
          "bool-masked attention", 1e-4);
      same(
          rig.cpu, gpu, {q, k, v, data({3, 1, 150}, t, 15)},
          [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], in[3]); },
          "float-masked attention", 1e-4);
    }
    for (DType t : every_dtype) {
      INFO(sy::name_of(t));
      const auto x = data({4, 300, 3}, t, 20, 0, 5);
      for (int64_t axis : {0, 1, 2}) {
        same(
            rig.cpu, gpu, {x}, [axis](auto& in) { return in[0].cumsum(axis); }, "cumsum", 1e-6);
        same(
            rig.cpu, gpu, {x}, [axis](auto& in) { return in[0].argsort(axis); }, "argsort", 0);
        same(
            rig.cpu, gpu, {x}, [axis](auto& in) { return in[0].argsort(axis, true); }, "argsort descending", 0);
        same(
            rig.cpu, gpu, {x}, [axis](auto& in) { return in[0].topk(2, axis).indices; }, "topk", 0);
      }
      same(
          rig.cpu, gpu, {data({4, 5}, t, 21, 0, 2)}, [](auto& in) { return in[0].cumprod(1); }, "cumprod", 1e-6);
      const auto base = data({3, 4}, t, 22), src = data({5, 4}, t, 23);
      const auto idx = data({5, 4}, DType::i64, 24, 0, 2);
      for (const char* r : {"sum", "prod", "amax", "amin"})
        same(
            rig.cpu, gpu, {base, idx, src}, [r](auto& in) { return in[0].scatter_reduce(0, in[1], in[2], r); }, r,
            1e-6);
      same(
          rig.cpu, gpu, {base, idx, src}, [](auto& in) { return in[0].scatter(0, in[1], in[2]); }, "scatter", 0);
    }
    // One long line (1M): the merge sort and the block scan's carried prefix.
    const auto big = data({1 << 20}, DType::f32, 30);
    same(
        rig.cpu, gpu, {big}, [](auto& in) { return in[0].argsort(); }, "argsort 1M", 0);
    same(
        rig.cpu, gpu, {big}, [](auto& in) { return in[0].topk(100).indices; }, "topk 1M", 0);
    same(
        rig.cpu, gpu, {big}, [](auto& in) { return in[0].cumsum(0); }, "cumsum 1M", 1e-5);
  }
}

TEST_CASE("cuda: f32 matmul is f32-exact by default and uses TF32 only when asked", "[cuda][gpu]") {
  // Off (the default) a 256-long dot product of values with full 24-bit
  // mantissas matches the CPU to f32 rounding; with cuda_allow_tf32 the
  // products keep 10 mantissa bits (on GPUs with TF32 tensor cores the
  // error is then far above f32's, below TF32's bound).
  for (bool tf32 : {false, true}) {
    sy::Runtime rt{sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}, .cuda_allow_tf32 = tf32}};
    for (auto& gpu : rt.devices()) {
      if (gpu.kind() != "cuda") continue;
      INFO(gpu.name() << (tf32 ? " with TF32" : " without TF32"));
      auto a = rt.device("cpu:0").uniform({64, 256}, -1, 1, DType::f32);
      auto b = rt.device("cpu:0").uniform({256, 64}, -1, 1, DType::f32);
      auto want = a.matmul(b).to_vector<double>();
      auto got = a.to(gpu).matmul(b.to(gpu)).to_vector<double>();
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(want[i] - got[i]));
      if (!tf32) CHECK(worst < 1e-4);
      if (tf32) CHECK(worst < 5e-2);  // 256 products, each within 2^-11 relative
      WARN(gpu.name() << (tf32 ? " TF32" : " f32") << ": largest difference from the CPU " << worst);
    }
  }
}
