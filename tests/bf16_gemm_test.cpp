// SPDX-License-Identifier: Apache-2.0
// The cpu backend's native bf16 GEMM (backends/cpu/bf16_gemm.cpp, issue 17)
// against the reference backend (double precision) and against the cpu's
// own widen + sgemm path on the same inputs, through Backend::execute so
// that every MatmulOp form (both transposes, broadcast batches, bias) is
// reachable, including transpose_lhs, which only the wire protocol sets.

#include "backends/cpu/bf16_gemm.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/common/host_buffer.hpp"
#include "support/native_gemm.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace sy = switchyard;
using sy::DType;
using sy::Shape;

namespace {

namespace cpu = sy::backends::cpu;

uint16_t bits_of(float f) { return sy::BFloat16(f).bits; }
double value_of(uint16_t b) { return static_cast<float>(sy::BFloat16::from_bits(b)); }

using sy::testing::Draw;

/// How operand values are drawn.
enum class Values {
  small_integers,  // in [-8, 8]: every f32 partial sum is exact, so all paths agree bit for bit
  real,            // uniform in [-1, 1) times 2^e, e in [-10, 10], rounded to bf16
};

std::vector<uint16_t> draw(Draw& r, int64_t n, Values v) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (auto& x : out) {
    if (v == Values::small_integers)
      x = bits_of(static_cast<float>(r.integer(-8, 8)));
    else
      x = bits_of(static_cast<float>(std::ldexp(2 * r.uniform() - 1, static_cast<int>(r.integer(-10, 10)))));
  }
  return out;
}

/// One MatmulOp case: operand shapes as stored (transposed ones as their
/// transpose), values, optional bias.
struct Case {
  Shape a, b, bias;
  bool ta = false, tb = false;
  std::vector<uint16_t> av, bv, biasv;
  bool has_bias = false;

  [[nodiscard]] std::string describe() const {
    std::ostringstream os;
    os << a.to_string() << (ta ? "^T" : "") << " @ " << b.to_string() << (tb ? "^T" : "");
    if (has_bias) os << " + " << bias.to_string();
    return os.str();
  }
};

Case make_case(Draw& r, Shape a, Shape b, bool ta, bool tb, Values v, std::optional<Shape> bias = std::nullopt) {
  Case c;
  c.a = std::move(a);
  c.b = std::move(b);
  c.ta = ta;
  c.tb = tb;
  c.av = draw(r, c.a.numel(), v);
  c.bv = draw(r, c.b.numel(), v);
  if (bias) {
    c.has_bias = true;
    c.bias = *bias;
    c.biasv = draw(r, c.bias.numel(), v);
  }
  return c;
}

/// The case's MatmulOp (result shape from the shared op rules).
sy::MatmulOp op_of(const Case& c) {
  auto spec = sy::matmul_result(c.a, DType::bf16, c.b, DType::bf16, c.ta, c.tb);
  REQUIRE(spec);
  sy::MatmulOp op;
  op.lhs = sy::TensorIr{sy::TensorId{1}, c.a, DType::bf16, sy::TensorStatus::read_only};
  op.rhs = sy::TensorIr{sy::TensorId{2}, c.b, DType::bf16, sy::TensorStatus::read_only};
  if (c.has_bias) op.bias = sy::TensorIr{sy::TensorId{3}, c.bias, DType::bf16, sy::TensorStatus::read_only};
  op.out = sy::TensorIr{sy::TensorId{4}, spec->shape, DType::bf16, sy::TensorStatus::not_init};
  op.transpose_lhs = c.ta;
  op.transpose_rhs = c.tb;
  return op;
}

sy::backends::BufferPtr buffer(const std::vector<uint16_t>& v) {
  return std::make_shared<sy::backends::HostBuffer>(sy::Bytes::copy_of(v.data(), v.size() * 2));
}

/// The result's bits from `backend`.
std::vector<uint16_t> run(sy::backends::Backend& backend, const Case& c) {
  sy::OperationIr ir{op_of(c)};
  std::vector<sy::backends::BufferPtr> in = {buffer(c.av), buffer(c.bv)};
  if (c.has_bias) in.push_back(buffer(c.biasv));
  std::vector<sy::backends::BufferPtr> out(1);
  const auto err = backend.execute(ir, in, out);
  INFO(err.message());
  REQUIRE(!err);
  const sy::Bytes* bytes = out[0]->host();
  REQUIRE(bytes != nullptr);
  std::vector<uint16_t> bits(bytes->size() / 2);
  if (!bits.empty()) std::memcpy(bits.data(), bytes->as<const uint8_t>(), bits.size() * 2);
  return bits;
}

sy::testing::Backends& backends() { return sy::testing::shared_backends(); }

/// Runs the cpu with the native kernel on or off (restored on scope exit).
struct NativeGemm : sy::testing::KernelSwitch {
  explicit NativeGemm(bool on) : KernelSwitch(&cpu::set_native_bf16_gemm, on) {}
};

/// The cpu's result with the native kernel, checking that it did run it
/// (or, when `expect_native` is false, that it declined).
std::vector<uint16_t> run_native(const Case& c, bool expect_native = true) {
  NativeGemm on(true);
  const auto before = cpu::native_bf16_gemm_runs();
  auto bits = run(*backends().cpu, c);
  CHECK(cpu::native_bf16_gemm_runs() - before == (expect_native ? 1u : 0u));
  return bits;
}
std::vector<uint16_t> run_fallback(const Case& c) {
  NativeGemm off(false);
  const auto before = cpu::native_bf16_gemm_runs();
  auto bits = run(*backends().cpu, c);
  CHECK(cpu::native_bf16_gemm_runs() == before);
  return bits;
}

bool skip_without_bf16_dot() {
  if (cpu::cpu_has_bf16_dot()) return false;
  WARN("skipped: this CPU (or compiler) has no AVX512-BF16, so bf16 matmul only runs the widen + sgemm path");
  return true;
}

/// The exact product (double) and sum |a||b| per result element, from the
/// case's own data: the yardstick of the tolerance.
struct Exact {
  std::vector<double> value, magnitude;
};
Exact exact(const Case& c) {
  const auto op = op_of(c);
  const auto& od = op.out.shape.dims;
  const size_t r = od.size();
  const int64_t m = od[r - 2], n = od[r - 1];
  const int64_t k = c.ta ? c.a.dims[c.a.rank() - 2] : c.a.dims[c.a.rank() - 1];
  const Shape batch{std::vector<int64_t>(od.begin(), od.end() - 2)};
  const auto sa = sy::broadcast_strides(Shape{std::vector<int64_t>(c.a.dims.begin(), c.a.dims.end() - 2)}, batch);
  const auto sb = sy::broadcast_strides(Shape{std::vector<int64_t>(c.b.dims.begin(), c.b.dims.end() - 2)}, batch);
  const auto sbias = c.has_bias ? sy::broadcast_strides(c.bias, op.out.shape) : std::vector<int64_t>(r, 0);
  Exact e;
  e.value.resize(static_cast<size_t>(op.out.numel()));
  e.magnitude.resize(e.value.size());
  for (int64_t bt = 0; bt < batch.numel(); ++bt) {
    int64_t rem = bt, ao = 0, bo = 0, biaso = 0;
    for (size_t i = batch.rank(); i-- > 0;) {
      const int64_t idx = rem % batch.dims[i];
      rem /= batch.dims[i];
      ao += idx * sa[i];
      bo += idx * sb[i];
      biaso += idx * sbias[i];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = value_of(c.av[static_cast<size_t>(ao * m * k + (c.ta ? p * m + i : i * k + p))]);
          const double y = value_of(c.bv[static_cast<size_t>(bo * k * n + (c.tb ? j * k + p : p * n + j))]);
          s += x * y;
          mag += std::fabs(x * y);
        }
        if (c.has_bias) {
          const double z = value_of(c.biasv[static_cast<size_t>(biaso + i * sbias[r - 2] + j * sbias[r - 1])]);
          s += z;
          mag += std::fabs(z);
        }
        e.value[static_cast<size_t>((bt * m + i) * n + j)] = s;
        e.magnitude[static_cast<size_t>((bt * m + i) * n + j)] = mag;
      }
  }
  return e;
}

/// Where two bf16 results of the same product may differ: each is an f32
/// sum of the exact terms (error at most k * 2^-24 * sum |a||b| in any
/// order, plus one more rounding for the bias) rounded once to bf16
/// (relative error at most 2^-8 each). So |x - y| <= 2^-7 * |exact| (two
/// roundings, with slack for the sum's own error) + 2 (k + 1) 2^-24 sum |a||b|.
/// A wrong index, a lost k pair or a missed bias is far outside that.
std::string differences(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, const Exact& e, int64_t k,
                        const char* what) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ";
  std::ostringstream os;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = value_of(got[i]), y = value_of(want[i]);
    bool ok = false;
    if (std::isnan(x) || std::isnan(y))
      ok = std::isnan(x) && std::isnan(y);
    else if (std::isinf(x) || std::isinf(y))
      ok = x == y;
    else
      ok = std::fabs(x - y) <=
           0x1p-7 * (1 + 0x1p-6) * std::fabs(e.value[i]) + 2.0 * static_cast<double>(k + 1) * 0x1p-24 * e.magnitude[i];
    if (!ok && shown++ < 5)
      os << what << ": element " << i << " is " << x << ", want " << y << " (exact " << e.value[i] << ")\n";
  }
  return os.str();
}

int64_t k_of(const Case& c) { return c.ta ? c.a.dims[c.a.rank() - 2] : c.a.dims[c.a.rank() - 1]; }

Shape lhs_shape(int64_t m, int64_t k, bool ta) { return ta ? Shape{k, m} : Shape{m, k}; }
Shape rhs_shape(int64_t k, int64_t n, bool tb) { return tb ? Shape{n, k} : Shape{k, n}; }

const std::vector<int64_t> kSizes = {1, 2, 3, 15, 16, 17, 31, 33, 64, 100, 257};

}  // namespace

TEST_CASE("native bf16 GEMM equals widen plus sgemm and the reference bit for bit on exact sums",
          "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  // Integers in [-8, 8]: every partial sum is an integer below 2^24, exact
  // in f32 in any order, so all three paths round the same value once.
  Draw r{1};
  int cases = 0;
  for (int64_t m : kSizes)
    for (int64_t n : kSizes)
      for (int64_t k : kSizes) {
        // Every shape untransposed; the transposes on every other shape.
        const int variants = (m + n + k) % 2 == 0 ? 4 : 1;
        for (int t = 0; t < variants; ++t) {
          const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
          const Case c = make_case(r, lhs_shape(m, k, ta), rhs_shape(k, n, tb), ta, tb, Values::small_integers);
          INFO(c.describe());
          const auto native = run_native(c);
          REQUIRE(native == run_fallback(c));
          REQUIRE(native == run(*backends().reference, c));
          ++cases;
        }
      }
  CHECK(cases > 1331);
}

TEST_CASE("native bf16 GEMM blocks K and tiles M and N across threads", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  // Past one K block (1024) and three (K = 2049), several M tiles (192)
  // and N tiles (up to 512 wide), odd K in the last block, both
  // transposes; big enough to go parallel.
  Draw r{2};
  for (auto [m, n, k] : {std::array<int64_t, 3>{300, 500, 1100}, {193, 385, 1025}, {64, 1300, 513}, {1, 1000, 2049}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      const Case c = make_case(r, lhs_shape(m, k, ta), rhs_shape(k, n, tb), ta, tb, Values::small_integers);
      INFO(c.describe());
      const auto native = run_native(c);
      REQUIRE(native == run_fallback(c));
      REQUIRE(native == run(*backends().reference, c));
    }
  }
}

TEST_CASE("native bf16 GEMM stays within one bf16 rounding of the reference on real values",
          "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  Draw r{3};
  const std::vector<int64_t> sizes = {1, 3, 16, 17, 33, 100, 257};
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{15}, int64_t{64}, int64_t{257}, int64_t{1031}}) {
        const bool ta = (m + k) % 3 == 0, tb = (n + k) % 2 == 0;
        const Case c = make_case(r, lhs_shape(m, k, ta), rhs_shape(k, n, tb), ta, tb, Values::real);
        INFO(c.describe());
        const auto native = run_native(c);
        const auto e = exact(c);
        const auto vs_ref = differences(native, run(*backends().reference, c), e, k, "native vs reference");
        CHECK(vs_ref.empty());
        INFO(vs_ref);
        const auto vs_fallback = differences(native, run_fallback(c), e, k, "native vs widen + sgemm");
        CHECK(vs_fallback.empty());
        INFO(vs_fallback);
      }
}

TEST_CASE("native bf16 GEMM broadcasts batches and adds linear's bias before its one rounding",
          "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  Draw r{4};
  const auto shapes = sy::testing::broadcast_matmul_shapes();
  for (const auto& s : shapes)
    for (Values v : {Values::small_integers, Values::real}) {
      const Case c = make_case(r, s.a, s.b, s.ta, s.tb, v, s.bias);
      INFO(c.describe() << (v == Values::real ? " (real values)" : " (integers)"));
      const auto native = run_native(c);
      const auto fallback = run_fallback(c);
      const auto reference = run(*backends().reference, c);
      if (v == Values::small_integers) {
        CHECK(native == fallback);
        CHECK(native == reference);
      } else {
        const auto e = exact(c);
        const auto k = k_of(c);
        const auto d1 = differences(native, reference, e, k, "native vs reference");
        const auto d2 = differences(native, fallback, e, k, "native vs widen + sgemm");
        CHECK(d1.empty());
        CHECK(d2.empty());
        INFO(d1 << d2);
      }
    }
}

TEST_CASE("native bf16 GEMM rounds to nearest even like the f32 path", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (even: 1); 1 + 3 * 2^-8 is
  // halfway between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6).
  Case c;
  c.a = {2, 2};
  c.b = {2, 1};
  c.av = {bits_of(1), bits_of(0x1p-8), bits_of(1), bits_of(3 * 0x1p-8)};
  c.bv = {bits_of(1), bits_of(1)};
  const auto native = run_native(c);
  CHECK(native == std::vector<uint16_t>{bits_of(1), bits_of(1 + 0x1p-6)});
  CHECK(native == run_fallback(c));
  CHECK(native == run(*backends().reference, c));
}

TEST_CASE("native bf16 GEMM adds each pair's odd product first and rounds every addition", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  // README: the sum runs in k order 1, 0, 3, 2, ... with each addition
  // rounded (VDPBF16PS as the Intel SDM specifies it). After the first
  // pair the sum is 1; then 1 + 2^-24 rounds back to 1 before -1 cancels
  // it (0), but -1 first leaves 2^-24. Exact: 2^-24 both times.
  const float e = 0x1p-24f;
  Case c;
  c.a = {2, 4};
  c.b = {4, 1};
  c.av = {bits_of(1), bits_of(0), bits_of(-1), bits_of(e),    // second pair: odd e, even -1
          bits_of(1), bits_of(0), bits_of(e),  bits_of(-1)};  // second pair: odd -1, even e
  c.bv.assign(4, bits_of(1));
  CHECK(run_native(c) == std::vector<uint16_t>{bits_of(0), bits_of(e)});
  CHECK(run(*backends().reference, c) == std::vector<uint16_t>{bits_of(e), bits_of(e)});
}

TEST_CASE("native bf16 GEMM propagates NaN and infinities as the f32 path", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Draw r{5};
  for (int64_t k : {1, 2, 3, 40}) {
    Case c = make_case(r, {5, k}, {k, 33}, false, false, Values::real);
    c.av[0] = bits_of(nan);                       // row 0: NaN
    c.av[static_cast<size_t>(k)] = bits_of(inf);  // row 1: inf (and inf * 0 = NaN in column 0)
    c.bv[0] = bits_of(0);
    c.av[static_cast<size_t>(2 * k)] = bits_of(3e38f);  // row 2: overflows to inf or cancels to NaN
    c.bv[1] = bits_of(2);
    c.bv[2] = bits_of(-2);
    c.av[static_cast<size_t>(3 * k)] = bits_of(inf);  // row 3: inf - inf = NaN where another row adds -inf
    if (k > 1) c.av[static_cast<size_t>(3 * k + 1)] = bits_of(-inf);
    INFO(c.describe());
    const auto native = run_native(c);
    const auto fallback = run_fallback(c);
    const auto reference = run(*backends().reference, c);
    const auto e = exact(c);
    CHECK(differences(native, fallback, e, k, "native vs widen + sgemm").empty());
    CHECK(differences(native, reference, e, k, "native vs reference").empty());
    for (int64_t j = 0; j < 33; ++j) CHECK(std::isnan(value_of(native[static_cast<size_t>(j)])));  // NaN row
    CHECK(std::isnan(value_of(native[33])));                                                       // inf * 0
    CHECK(std::isinf(value_of(native[33 + 1])));
    CHECK(value_of(native[2 * 33 + 1]) == inf);  // 3e38 * 2 overflows f32
    CHECK(value_of(native[2 * 33 + 2]) == -inf);
  }
}

TEST_CASE("bf16 matmul with a subnormal operand runs the f32 path, which keeps it", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  // VDPBF16PS reads a subnormal as zero; the kernel declines such inputs.
  const float tiny = 0x1p-130f;  // a bf16 subnormal
  for (bool in_lhs : {true, false})
    for (bool transposed : {false, true}) {
      Case c;
      c.a = transposed ? Shape{3, 2} : Shape{2, 3};
      c.ta = transposed;
      c.b = transposed ? Shape{40, 3} : Shape{3, 40};
      c.tb = transposed;
      c.av.assign(6, bits_of(0));
      c.bv.assign(120, bits_of(0));
      (in_lhs ? c.av : c.bv)[in_lhs ? 5 : 119] = bits_of(tiny);
      (in_lhs ? c.bv : c.av)[in_lhs ? 119 : 5] = bits_of(1);
      INFO(c.describe());
      const auto native = run_native(c, /*expect_native=*/false);
      CHECK(native == run_fallback(c));
      CHECK(native == run(*backends().reference, c));
      CHECK(value_of(native[79]) == static_cast<double>(tiny));  // C[1][39] = tiny * 1
    }
}

TEST_CASE("native bf16 GEMM flushes products and sums below 2^-126 to zero, as documented", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  // 2^-64 * 2^-64 = 2^-128: normal operands, a subnormal product. The f32
  // path keeps it (a bf16 subnormal); VDPBF16PS flushes it to zero. README
  // ("bf16 matmul on cpu") states this difference; this pins it.
  Case c;
  c.a = {1, 1};
  c.b = {1, 1};
  c.av = {bits_of(0x1p-64f)};
  c.bv = {bits_of(0x1p-64f)};
  CHECK(run_native(c) == std::vector<uint16_t>{bits_of(0)});
  CHECK(run_fallback(c) == std::vector<uint16_t>{bits_of(0x1p-128f)});
  // Above 2^-126 the result is exact again.
  c.bv = {bits_of(0x1p-62f)};
  CHECK(run_native(c) == std::vector<uint16_t>{bits_of(0x1p-126f)});
}

TEST_CASE("bf16 matmul with a zero extent leaves the native kernel out", "[cpu][dtype][bf16_gemm]") {
  if (skip_without_bf16_dot()) return;
  Draw r{6};
  for (auto [a, b] :
       {std::pair<Shape, Shape>{{0, 5}, {5, 3}}, {{4, 0}, {0, 3}}, {{4, 5}, {5, 0}}, {{0, 4, 5}, {5, 3}}}) {
    const Case c = make_case(r, a, b, false, false, Values::real, Shape{1});
    INFO(c.describe());
    const auto native = run_native(c, /*expect_native=*/false);
    CHECK(native == run_fallback(c));
    CHECK(native == run(*backends().reference, c));  // K = 0: the bias alone
  }
}

TEST_CASE("set_native_bf16_gemm switches the native kernel", "[cpu][dtype][bf16_gemm]") {
  if (!cpu::cpu_has_bf16_dot()) {
    CHECK(!cpu::set_native_bf16_gemm(true));
    CHECK(!cpu::native_bf16_gemm_enabled());  // stays off without the instructions
    WARN("skipped the rest: no AVX512-BF16 here");
    return;
  }
  const bool before = cpu::set_native_bf16_gemm(false);
  CHECK(!cpu::native_bf16_gemm_enabled());
  CHECK(!cpu::set_native_bf16_gemm(true));
  CHECK(cpu::native_bf16_gemm_enabled());
  cpu::set_native_bf16_gemm(before);
}

TEST_CASE("SWITCHYARD_CPU_BF16_GEMM=0 in the environment leaves bf16 matmul on the f32 path", "[cpu][dtype][env]") {
  // ctest runs this case once more with the variable set (bf16_gemm.env_off).
  const char* env = std::getenv("SWITCHYARD_CPU_BF16_GEMM");
  const bool off = env != nullptr && std::string(env) == "0";
  CHECK(cpu::native_bf16_gemm_enabled() == (cpu::cpu_has_bf16_dot() && !off));
  Draw r{7};
  const Case c = make_case(r, {40, 70}, {70, 50}, false, false, Values::small_integers);
  const auto before = cpu::native_bf16_gemm_runs();
  const auto bits = run(*backends().cpu, c);
  CHECK(cpu::native_bf16_gemm_runs() - before == (cpu::native_bf16_gemm_enabled() ? 1u : 0u));
  CHECK(bits == run(*backends().reference, c));
}
