// SPDX-License-Identifier: Apache-2.0
// f16, bf16, i8 and i16 on every CUDA device against cpu:0 (which the op
// tests hold to PyTorch 1.13). The GPU stores the 16-bit floats as __half
// and __nv_bfloat16, computes in f32 and rounds once per op, as the CPU
// does, so results are compared bit for bit wherever the CPU's f32 result
// is itself exact or correctly rounded (casts, + - * /, sqrt, comparisons,
// max/min, sums of exactly summable data, matmul of exactly summable data);
// the library functions (exp, sin, pow, ...) and the ops whose f32 sums
// depend on order are compared within two units in the last place of the
// 16-bit type. Skips (exit 77, see main.cpp) without a GPU.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>

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

using Build = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr DType narrow_dtypes[] = {DType::f16, DType::bf16, DType::i8, DType::i16};

/// Values as dtype t (each converted with the runtime's cast rule).
TensorData typed(Shape s, DType t, const std::vector<double>& v) {
  return sy::visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> out;
    out.reserve(v.size());
    for (double x : v) {
      if constexpr (std::is_same_v<T, bool>)
        out.push_back(x != 0);
      else if constexpr (sy::is_float_like_v<T>)
        out.push_back(static_cast<T>(x));
      else
        out.push_back(static_cast<T>(static_cast<int64_t>(x)));
    }
    return TensorData::from(out, std::move(s));
  });
}

/// Exactly summable data: floats are multiples of 1/8 in [lo, hi] (exact in
/// f16 and bf16, and every sum of them is exact in f32 and double), integers
/// in [lo, hi], bools alternating.
TensorData exact_data(Shape s, DType t, uint32_t seed, int lo = -4, int hi = 4) {
  std::mt19937 gen(seed);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (sy::is_floating(t))
      v[i] = std::uniform_int_distribution<int>(lo * 8, hi * 8)(gen) / 8.0;
    else if (t == DType::boolean)
      v[i] = static_cast<double>((i * 7 + seed) % 3 == 0);
    else
      v[i] = std::uniform_int_distribution<int>(lo, hi)(gen);
  }
  return typed(std::move(s), t, v);
}

/// Full-precision random data in [lo, hi) (rounded to t).
TensorData uniform_data(Shape s, DType t, uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 gen(seed);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = std::uniform_real_distribution<double>(lo, hi)(gen);
  return typed(std::move(s), t, v);
}

uint64_t bits_at(const TensorData& d, int64_t i) {
  uint64_t b = 0;
  const size_t w = sy::size_of(d.dtype);
  std::memcpy(&b, d.bytes.data() + static_cast<size_t>(i) * w, w);
  return b;
}

/// Bit for bit, NaNs aside (a NaN must meet a NaN; payloads may differ
/// only where the GPU's f16 -> f32 conversion writes its own).
void expect_bits(const TensorData& cpu, const TensorData& gpu) {
  REQUIRE(cpu.shape == gpu.shape);
  REQUIRE(cpu.dtype == gpu.dtype);
  int shown = 0;
  for (int64_t i = 0; i < cpu.numel() && shown < 5; ++i) {
    const bool nan = sy::is_floating(cpu.dtype) && std::isnan(cpu.at(i));
    const bool ok = nan ? std::isnan(gpu.at(i)) : bits_at(cpu, i) == bits_at(gpu, i);
    if (!ok) {
      ++shown;
      INFO("element " << i << ": cpu " << cpu.at(i) << " (bits " << bits_at(cpu, i) << "), gpu " << gpu.at(i)
                      << " (bits " << bits_at(gpu, i) << ")");
      CHECK(ok);
    }
  }
}

/// Two units in the last place of the result's dtype (relative, with the
/// same bound as an absolute floor near zero); integers and bools exactly.
double two_ulps(DType t) {
  switch (t) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    case DType::f32:
      return 1e-5;
    default:
      return 0;
  }
}

void expect_close(const TensorData& cpu, const TensorData& gpu) {
  if (!sy::is_floating(cpu.dtype)) return expect_bits(cpu, gpu);
  REQUIRE(cpu.shape == gpu.shape);
  REQUIRE(cpu.dtype == gpu.dtype);
  const double tol = two_ulps(cpu.dtype);
  int shown = 0;
  for (int64_t i = 0; i < cpu.numel() && shown < 5; ++i) {
    const double a = cpu.at(i), b = gpu.at(i);
    const bool ok = std::isnan(a) ? std::isnan(b) : std::isinf(a) ? a == b : std::abs(a - b) <= tol * (1 + std::abs(a));
    if (!ok) {
      ++shown;
      INFO("element " << i << ": cpu " << a << ", gpu " << b);
      CHECK(ok);
    }
  }
}

enum class Match { bits, close };

/// Runs `f` on the same inputs on cpu:0 and `gpu` and compares; ops the
/// rules reject for these inputs (the call throws on the CPU) are skipped.
/// Returns whether the op ran.
bool same(const Rig& rig, const sy::Device& gpu, const std::vector<TensorData>& inputs, const Build& f,
          const std::string& what, Match match) {
  return sytest_cuda::run_on_both(rig.cpu, gpu, inputs, f, what, [match](const TensorData& cd, const TensorData& gd) {
    if (match == Match::bits)
      expect_bits(cd, gd);
    else
      expect_close(cd, gd);
  });
}

/// Ops computed by a math library function, whose CUDA and glibc versions
/// may differ in the last f32 bit (and so, rarely, in the 16-bit result).
bool library_function(std::string_view name) {
  static const std::set<std::string_view> names = {"exp",     "log",  "log1p", "expm1", "sin", "cos",  "tanh",
                                                   "sigmoid", "gelu", "silu",  "erf",   "pow", "atan2"};
  return names.count(name) > 0;
}

std::string name(DType t) { return std::string(sy::name_of(t)); }

}  // namespace

TEST_CASE("cuda narrow: casts between every pair of dtypes give the CPU's bits, special values included",
          "[cuda][gpu][narrow]") {
  const double inf = std::numeric_limits<double>::infinity();
  // Rounding ties and overflow edges of f16 (65504, 65520), bf16 and f32,
  // subnormals of f16 and f32, the int8/int16/int32 wrap edges, and a value
  // a direct double -> f16 rounding would round up but float first rounds
  // to a tie (to even: down): 1 + 2^-11 + 2^-30.
  const std::vector<double> specials = {0.0,
                                        -0.0,
                                        1.0,
                                        -1.0,
                                        0.1,
                                        1.0 / 3,
                                        2.5,
                                        -2.5,
                                        65504.0,
                                        65519.99,
                                        65520.0,
                                        -1e5,
                                        6e-8,
                                        2.98e-8,
                                        1e-40,
                                        3.4e38,
                                        1e39,
                                        -1e39,
                                        std::numeric_limits<double>::quiet_NaN(),
                                        -std::numeric_limits<double>::quiet_NaN(),
                                        inf,
                                        -inf,
                                        127.5,
                                        128.0,
                                        -129.0,
                                        255.5,
                                        256.0,
                                        32767.5,
                                        32768.0,
                                        -32769.0,
                                        1e10,
                                        -1e10,
                                        2147483648.0,
                                        1.0 + 0x1p-11 + 0x1p-30,
                                        1.0 + 0x1p-8 + 0x1p-30,
                                        0x1p-24 * 1.5};
  const auto n = static_cast<int64_t>(specials.size());
  Rig rig;
  auto f64 = rig.cpu.tensor(specials, {n});
  for (auto& gpu : rig.gpus)
    for (DType from : sy::all_dtypes) {
      // The source in `from` as the CPU makes it (its cast rule, once).
      const auto source = read(f64.cast(from));
      for (DType to : sy::all_dtypes) {
        INFO(name(from) << " -> " << name(to));
        CHECK(same(
            rig, gpu, {source}, [&](const std::vector<Tensor>& x) { return x[0].cast(to); },
            name(from) + "->" + name(to), Match::bits));
      }
    }
}

TEST_CASE("cuda narrow: unary ops give the CPU's bits (library functions within two ulps)", "[cuda][gpu][narrow]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : narrow_dtypes) {
      // Exact eighths plus signed zeros, infinities and NaN for the floats.
      auto v = exact_data({4, 40}, t, 3).to_vector<double>();
      if (sy::is_floating(t)) {
        v[0] = std::numeric_limits<double>::quiet_NaN();
        v[1] = std::numeric_limits<double>::infinity();
        v[2] = -std::numeric_limits<double>::infinity();
        v[3] = -0.0;
        v[4] = 0.0;
        v[5] = 1e-6;  // an f16 subnormal
      }
      const auto in = typed({4, 40}, t, v);
      for (int k = 0; k <= static_cast<int>(sy::UnaryKind::isinf); ++k) {
        const auto kind = static_cast<sy::UnaryKind>(k);
        const std::string op = sy::to_string(kind);
        same(
            rig, gpu, {in},
            [&](const std::vector<Tensor>& x) {
              return kind == sy::UnaryKind::clamp ? x[0].clamp(-1.3, 2.1) : x[0].unary(kind);
            },
            op + " " + name(t), library_function(op) ? Match::close : Match::bits);
      }
    }
}

TEST_CASE("cuda narrow: binary and scalar ops, mixed dtypes included, give the CPU's bits", "[cuda][gpu][narrow]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType ta : narrow_dtypes)
      // The same dtype, each other narrow one (f16 + bf16 -> f32, i8 + u8 ->
      // i16, f16 + i8 -> f16 ...), and the wide ones.
      for (DType tb :
           {DType::f16, DType::bf16, DType::i8, DType::i16, DType::u8, DType::i64, DType::f32, DType::boolean}) {
        for (int k = 0; k <= static_cast<int>(sy::BinaryKind::bitwise_xor); ++k) {
          const auto kind = static_cast<sy::BinaryKind>(k);
          const std::string op = sy::to_string(kind);
          const Match match = library_function(op) ? Match::close : Match::bits;
          // Divisors stay non-zero; the broadcast shape takes the strided kernel,
          // the flat one (odd length) the vector kernel and its tail.
          const auto lhs = exact_data({2, 3, 17}, ta, 11 + k);
          const auto rhs = exact_data({3, 1}, tb, 29 + k, 1, 4);
          const std::string what = op + " " + name(ta) + "," + name(tb);
          same(
              rig, gpu, {lhs, rhs}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, x[1]); }, what, match);
          same(
              rig, gpu, {rhs, lhs}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, x[1]); },
              what + " reversed", match);
          const auto flat_a = exact_data({1001}, ta, 5 + k), flat_b = exact_data({1001}, tb, 7 + k, 1, 4);
          same(
              rig, gpu, {flat_a, flat_b}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, x[1]); },
              what + " flat", match);
        }
      }
  // Scalars: rounded to the 16-bit type first (f16 * 0.1 multiplies by
  // 0.0999755859375), an integer one too (f16 + 2049 adds 2048).
  for (auto& gpu : rig.gpus)
    for (DType t : narrow_dtypes)
      for (int k = 0; k <= static_cast<int>(sy::BinaryKind::bitwise_xor); ++k) {
        const auto kind = static_cast<sy::BinaryKind>(k);
        const std::string op = sy::to_string(kind);
        const Match match = library_function(op) ? Match::close : Match::bits;
        const auto in = exact_data({5, 7}, t, 3 + k, 1, 5);
        for (bool first : {false, true})
          for (sy::Scalar s : {sy::Scalar(3), sy::Scalar(0.1), sy::Scalar(true), sy::Scalar(2049), sy::Scalar(-1.7)})
            same(
                rig, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].binary(kind, s, first); },
                op + " " + name(t) + " scalar " + s.to_string() + (first ? " first" : ""), match);
      }
}

TEST_CASE("cuda narrow: reductions, scans and sorting give the CPU's bits on exactly summable data",
          "[cuda][gpu][narrow]") {
  Rig rig;
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    const char* what;
  };
  // The warp- and block-per-output kernels, the split kernel (a long row, the
  // whole tensor) and the column kernel.
  const std::vector<Case> cases = {{{3, 700, 5}, {1}, "middle axis"},   {{3, 700, 5}, {0, 2}, "outer axes"},
                                   {{3, 200000}, {1}, "long rows"},     {{3, 200000}, {}, "everything"},
                                   {{4096, 300}, {0}, "split columns"}, {{5, 1000}, {0}, "short columns"}};
  for (auto& gpu : rig.gpus)
    for (DType t : narrow_dtypes)
      for (const auto& c : cases) {
        const auto in = exact_data(c.shape, t, 17);
        const auto& axes = c.axes;
        const std::string what = name(t) + " " + c.what;
        auto bits = [&](const Build& f, const char* op) { same(rig, gpu, {in}, f, what + " " + op, Match::bits); };
        bits([&](const std::vector<Tensor>& x) { return x[0].sum(axes); }, "sum");
        bits([&](const std::vector<Tensor>& x) { return x[0].mean(axes); }, "mean");
        bits([&](const std::vector<Tensor>& x) { return x[0].max(axes); }, "max");
        bits([&](const std::vector<Tensor>& x) { return x[0].min(axes); }, "min");
        bits([&](const std::vector<Tensor>& x) { return x[0].any(axes); }, "any");
        bits([&](const std::vector<Tensor>& x) { return x[0].all(axes); }, "all");
        if (axes.size() == 1) {
          bits([&](const std::vector<Tensor>& x) { return x[0].argmax(axes[0]); }, "argmax");
          bits([&](const std::vector<Tensor>& x) { return x[0].argmin(axes[0]); }, "argmin");
        }
        // Two-pass statistics in double: the GPU's fused multiply-adds may
        // move the last double bit, which the rounding to 16 bits nearly
        // always hides.
        same(
            rig, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].var(axes); }, what + " var", Match::close);
        same(
            rig, gpu, {in}, [&](const std::vector<Tensor>& x) { return x[0].std(axes, 0); }, what + " std",
            Match::close);
      }
  for (auto& gpu : rig.gpus)
    for (DType t : narrow_dtypes) {
      const auto small = exact_data({4, 6}, t, 9, -2, 2);  // products stay exact
      same(
          rig, gpu, {small}, [](const std::vector<Tensor>& x) { return x[0].prod({1}); }, name(t) + " prod",
          Match::bits);
      const auto lines = exact_data({4, 300, 3}, t, 20);
      for (int64_t axis : {0, 1, 2}) {
        const std::string what = name(t) + " axis " + std::to_string(axis);
        same(
            rig, gpu, {lines}, [axis](auto& x) { return x[0].cumsum(axis); }, what + " cumsum", Match::bits);
        same(
            rig, gpu, {lines}, [axis](auto& x) { return x[0].argsort(axis, true); }, what + " argsort", Match::bits);
        same(
            rig, gpu, {lines}, [axis](auto& x) { return x[0].topk(2, axis).values; }, what + " topk", Match::bits);
      }
      same(
          rig, gpu, {exact_data({4, 5}, t, 21, -2, 2)}, [](auto& x) { return x[0].cumprod(1); }, name(t) + " cumprod",
          Match::bits);
    }
}

TEST_CASE("cuda narrow: f16 and bf16 matmul match the CPU (tensor cores, f32 accumulation)", "[cuda][gpu][narrow]") {
  Rig rig;
  struct Case {
    Shape a, b;
    Build f;
    const char* what;
  };
  const Build mm = [](const std::vector<Tensor>& x) { return x[0].matmul(x[1]); };
  const std::vector<Case> cases = {
      {{33, 70}, {70, 45}, mm, "2-D"},
      {{3, 17, 70}, {70, 9}, mm, "batch x matrix (strided batches)"},
      {{2, 1, 8, 70}, {1, 3, 70, 6}, mm, "irregular broadcast (pointer arrays)"},
      {{70, 12}, {20, 70}, [](const std::vector<Tensor>& x) { return x[0].mT().matmul(x[1].mT()); }, "transposes"},
      {{256, 512}, {512, 128}, mm, "256 x 512 x 128"},
  };
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f16, DType::bf16}) {
      for (const auto& c : cases) {
        // Exactly summable data: every f32 partial sum is exact, so the
        // GPU's order and the CPU's give the same f32 sum, rounded once.
        same(rig, gpu, {exact_data(c.a, t, 1, -2, 2), exact_data(c.b, t, 2, -2, 2)}, c.f, name(t) + " exact " + c.what,
             Match::bits);
        same(rig, gpu, {uniform_data(c.a, t, 3, -1, 1), uniform_data(c.b, t, 4, -1, 1)}, c.f,
             name(t) + " random " + c.what, Match::close);
      }
      // linear: the bias is added before the one rounding (cuBLAS beta = 1).
      const Build linear = [](const std::vector<Tensor>& x) { return x[0].linear(x[1], x[2]); };
      same(rig, gpu, {exact_data({6, 50}, t, 5, -2, 2), exact_data({7, 50}, t, 6, -2, 2), exact_data({7}, t, 7)},
           linear, name(t) + " exact linear", Match::bits);
      same(rig, gpu,
           {uniform_data({6, 50}, t, 5, -1, 1), uniform_data({7, 50}, t, 6, -1, 1), uniform_data({7}, t, 7, -1, 1)},
           linear, name(t) + " random linear", Match::close);
      same(rig, gpu, {exact_data({4, 0}, t, 8), exact_data({0, 3}, t, 9)}, mm, name(t) + " k = 0", Match::bits);
      same(rig, gpu, {exact_data({4, 0}, t, 8), exact_data({3, 0}, t, 9), exact_data({3}, t, 10)}, linear,
           name(t) + " k = 0 linear", Match::bits);
    }
  // Integer matmul wraps at the type's width, as PyTorch's does.
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::i8, DType::i16}) {
      const auto a = exact_data({9, 40}, t, 11, -100, 100), b = exact_data({2, 40, 5}, t, 12, -100, 100);
      same(rig, gpu, {a, b}, mm, name(t) + " batched, wrapping", Match::bits);
      same(
          rig, gpu, {exact_data({6, 30}, t, 13, -50, 50), exact_data({4, 30}, t, 14, -50, 50), exact_data({4}, t, 15)},
          [](const std::vector<Tensor>& x) { return x[0].linear(x[1], x[2]); }, name(t) + " linear", Match::bits);
    }
}

TEST_CASE("cuda narrow: softmax, norms, attention, conv and pooling stay within two ulps of the CPU",
          "[cuda][gpu][narrow]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : {DType::f16, DType::bf16}) {
      const std::string n = name(t);
      const auto x = uniform_data({3, 6, 5, 7}, t, 1);
      auto close = [&](const std::vector<TensorData>& in, const Build& f, const std::string& what) {
        CHECK(same(rig, gpu, in, f, n + " " + what, Match::close));
      };
      for (int64_t axis : {0, 1, 3}) {
        close(
            {x}, [axis](auto& in) { return in[0].softmax(axis); }, "softmax");
        close(
            {x}, [axis](auto& in) { return in[0].log_softmax(axis); }, "log_softmax");
      }
      close(
          {x, uniform_data({5, 7}, t, 2), uniform_data({5, 7}, t, 3)},
          [](auto& in) {
            return nn::layer_norm(in[0], {5, 7}, in[1], in[2]);
          },
          "layer_norm");
      close(
          {x, uniform_data({7}, t, 4)}, [](auto& in) { return nn::rms_norm(in[0], {7}, in[1]); }, "rms_norm");
      close(
          {x, uniform_data({6}, t, 5), uniform_data({6}, t, 6)},
          [](auto& in) { return nn::group_norm(in[0], 3, in[1], in[2]); }, "group_norm");
      close(
          {x, uniform_data({6}, t, 7), uniform_data({6}, t, 8, 0.5, 2), uniform_data({6}, t, 9),
           uniform_data({6}, t, 10)},
          [](auto& in) { return nn::batch_norm(in[0], in[1], in[2], in[3], in[4]); }, "batch_norm");
      const auto q = uniform_data({2, 3, 37, 16}, t, 11), k = uniform_data({2, 3, 150, 16}, t, 12),
                 v = uniform_data({2, 3, 150, 9}, t, 13);
      close(
          {q, k, v}, [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2]); }, "attention");
      close(
          {q, k, v}, [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0, true); },
          "causal attention");
      close(
          {q, k, v, uniform_data({3, 1, 150}, t, 15)},
          [](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], in[3]); },
          "float-masked attention");
      // Exactly summable convolution inputs: the f32 sums are exact both ways.
      nn::ConvOptions o;
      o.stride = {2, 1};
      o.pad_begin = {1, 1};
      o.pad_end = {1, 0};
      same(
          rig, gpu,
          {exact_data({2, 4, 9, 8}, t, 16, -2, 2), exact_data({6, 4, 3, 3}, t, 17, -2, 2), exact_data({6}, t, 18)},
          [&](auto& in) { return nn::conv(in[0], in[1], in[2], o); }, n + " conv", Match::bits);
      const auto img = uniform_data({2, 3, 9, 8}, t, 18);
      nn::PoolOptions p;
      p.kernel_size = {3, 2};
      p.stride = {2, 1};
      p.pad_begin = {1, 0};
      p.pad_end = {0, 1};
      close(
          {img}, [&](auto& in) { return nn::avg_pool(in[0], p); }, "avg_pool");
      same(
          rig, gpu, {img}, [&](auto& in) { return nn::max_pool(in[0], p); }, n + " max_pool", Match::bits);
      same(
          rig, gpu, {img}, [&](auto& in) { return nn::max_pool_with_indices(in[0], p).second; },
          n + " max_pool indices", Match::bits);
      close(
          {img},
          [](auto& in) {
            return nn::adaptive_avg_pool2d(in[0], {4, 3});
          },
          "adaptive_avg_pool2d");
    }
}

TEST_CASE("cuda narrow: creation, layout and index ops move the four dtypes bit for bit", "[cuda][gpu][narrow]") {
  Rig rig;
  for (auto& gpu : rig.gpus)
    for (DType t : narrow_dtypes) {
      const std::string n = name(t);
      INFO(n);
      // Creation: the shared number rule (0.1 and 70000 round in f16). A
      // value the dtype cannot hold (300 in i8) fails at the call on both.
      for (double value : {0.1, 70000.0, 300.0, -2.5}) {
        INFO("full " << value);
        Tensor c;
        try {
          c = rig.cpu.full({3, 5}, value, t);
        } catch (const sy::Error&) {
          CHECK_THROWS_AS(gpu.full({3, 5}, value, t), sy::Error);
          continue;
        }
        expect_bits(read(c), read(gpu.full({3, 5}, value, t)));
      }
      expect_bits(read(rig.cpu.arange(-3, 40, 1.5, t)), read(gpu.arange(-3, 40, 1.5, t)));
      expect_bits(read(rig.cpu.eye(4, 6, t)), read(gpu.eye(4, 6, t)));
      if (sy::is_floating(t)) {
        rig.cpu.seed(99);
        gpu.seed(99);
        expect_bits(read(rig.cpu.uniform({1000}, -2, 5, t)), read(gpu.uniform({1000}, -2, 5, t)));
        expect_bits(read(rig.cpu.bernoulli({1000}, 0.3, t)), read(gpu.bernoulli({1000}, 0.3, t)));
      }
      // A bridge there and back keeps every bit (all 65536 patterns for the 16-bit types).
      if (sy::size_of(t) == 2) {
        std::vector<uint16_t> patterns(65536);
        for (uint32_t b = 0; b < 65536; ++b) patterns[b] = static_cast<uint16_t>(b);
        const TensorData all({65536}, t, sy::Bytes::copy_of(patterns.data(), patterns.size() * 2));
        const auto back = read(rig.cpu.from_data(all).to(gpu).to(rig.cpu));
        CHECK(std::memcmp(back.bytes.data(), all.bytes.data(), all.bytes.size()) == 0);
      }
      const auto in = exact_data({4, 5, 6}, t, 21);
      const double pad_value = sy::is_floating(t) ? 0.3 : 2;  // 0.3 rounds in f16/bf16
      auto bits = [&](const std::vector<TensorData>& inputs, const Build& f, const char* what) {
        CHECK(same(rig, gpu, inputs, f, n + " " + what, Match::bits));
      };
      bits(
          {in},
          [](auto& x) {
            return x[0].permute({2, 0, 1});
          },
          "permute");
      bits(
          {in},
          [](auto& x) {
            return x[0].flip({0, 2});
          },
          "flip");
      bits(
          {in},
          [](auto& x) {
            return x[0].slice(1, sy::Slice{1, 5, 2});
          },
          "slice");
      bits(
          {in},
          [pad_value](auto& x) {
            return x[0].pad({1, 0, 2}, {0, 3, 1}, pad_value);
          },
          "pad");
      bits(
          {in},
          [](auto& x) {
            return sy::cat({x[0], x[0].slice(1, sy::Slice{0, 2})}, 1);
          },
          "cat");
      bits(
          {in, exact_data({4, 2, 6}, t, 22)},
          [](auto& x) {
            return x[0].slice_assign({sy::Slice{}, sy::Slice{1, 5, 2}}, x[1]);
          },
          "slice_assign");
      bits(
          {exact_data({4, 1, 6}, DType::boolean, 1), exact_data({5, 1}, t, 2), exact_data({6}, t, 3)},
          [](auto& x) { return sy::where(x[0], x[1], x[2]); }, "where");
      const auto base = exact_data({5, 6}, t, 31);
      const auto index = exact_data({5, 4}, DType::i64, 32, -6, 5);
      bits(
          {base, index}, [](auto& x) { return x[0].gather(1, x[1]); }, "gather");
      bits(
          {base, exact_data({7}, DType::i32, 33, -5, 4)}, [](auto& x) { return x[0].index_select(0, x[1]); },
          "index_select");
      // Small exact sums: the atomic order cannot show.
      bits(
          {base, index, exact_data({5, 4}, t, 34, 0, 3)}, [](auto& x) { return x[0].scatter_add(1, x[1], x[2]); },
          "scatter_add");
      const auto src = exact_data({5, 6}, t, 35, -2, 2), idx = exact_data({5, 6}, DType::i64, 36, 0, 4);
      bits(
          {base, idx, src}, [](auto& x) { return x[0].scatter(0, x[1], x[2]); }, "scatter");
      for (const char* r : {"sum", "prod", "amax", "amin"})
        bits(
            {base, idx, src}, [r](auto& x) { return x[0].scatter_reduce(0, x[1], x[2], r); }, r);
    }
}
