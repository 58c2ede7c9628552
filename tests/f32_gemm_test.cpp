// SPDX-License-Identifier: Apache-2.0
// The cpu backend's native f32 GEMM (backends/cpu/f32_gemm.cpp) through
// Backend::execute: convolutions (implicit im2col, pointwise, transposed)
// and matmuls (transposes, broadcast batches, bias) against the same
// backend with the kernel switched off (OpenBLAS) and against the reference
// backend, which computes in double. Each case checks, by the kernel's run
// counter, that the path it means to test ran.

#include "backends/cpu/f32_gemm.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/common/host_buffer.hpp"
#include "backends/cpu/depthwise_f32.hpp"
#include "backends/cpu/direct_conv_f32.hpp"
#include "support/native_gemm.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace sy = switchyard;
using sy::DType;
using sy::Shape;

namespace {

namespace cpu = sy::backends::cpu;

using sy::testing::Draw;
/// n values uniform in [-1, 1).
std::vector<float> values(sy::testing::Draw& r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(2 * r.uniform() - 1);
  return v;
}

/// An op and its inputs' values.
struct Case {
  sy::OperationIr ir;
  std::vector<std::vector<float>> inputs;
  std::string what;
};

sy::TensorIr tensor(uint64_t id, Shape s, sy::TensorStatus status = sy::TensorStatus::read_only) {
  return sy::TensorIr{sy::TensorId{id}, std::move(s), DType::f32, status};
}

Case matmul_case(Draw& r, Shape a, Shape b, bool ta, bool tb, std::optional<Shape> bias = std::nullopt) {
  auto spec = sy::matmul_result(a, DType::f32, b, DType::f32, ta, tb);
  REQUIRE(spec);
  sy::MatmulOp op;
  op.lhs = tensor(1, a);
  op.rhs = tensor(2, b);
  op.transpose_lhs = ta;
  op.transpose_rhs = tb;
  std::ostringstream os;
  os << "matmul " << a.to_string() << (ta ? "^T" : "") << " @ " << b.to_string() << (tb ? "^T" : "");
  Case c{sy::OperationIr{}, {values(r, a.numel()), values(r, b.numel())}, ""};
  if (bias) {
    op.bias = tensor(3, *bias);
    c.inputs.push_back(values(r, bias->numel()));
    os << " + " << bias->to_string();
  }
  op.out = tensor(4, spec->shape, sy::TensorStatus::not_init);
  c.ir = sy::OperationIr{op};
  c.what = os.str();
  return c;
}

/// Convolution geometry of one case (one entry per spatial axis).
struct ConvArgs {
  Shape input, weight;
  std::vector<int64_t> stride, pad, dilation;
  int64_t groups = 1;
  bool bias = true;
  bool transposed = false;
  std::vector<int64_t> pad_after = {};  // empty: as pad
};

Case conv_case(Draw& r, const ConvArgs& a) {
  sy::ConvOp op;
  op.input = tensor(1, a.input);
  op.weight = tensor(2, a.weight);
  op.stride = a.stride;
  op.pad_before = a.pad;
  op.pad_after = a.pad_after.empty() ? a.pad : a.pad_after;
  op.dilation = a.dilation;
  op.output_padding.assign(a.stride.size(), 0);
  op.groups = a.groups;
  op.transposed = a.transposed;
  const int64_t c_out = a.transposed ? a.weight.dims[1] * a.groups : a.weight.dims[0];
  Case c{sy::OperationIr{}, {values(r, a.input.numel()), values(r, a.weight.numel())}, ""};
  if (a.bias) {
    op.bias = tensor(3, Shape{c_out});
    c.inputs.push_back(values(r, c_out));
  }
  auto spec = sy::conv_result(op);
  INFO(a.input.to_string() << " * " << a.weight.to_string());
  REQUIRE(spec);
  op.out = tensor(4, spec->shape, sy::TensorStatus::not_init);
  std::ostringstream os;
  os << (a.transposed ? "conv_transpose " : "conv ") << a.input.to_string() << " * " << a.weight.to_string()
     << " stride " << a.stride[0] << " pad " << a.pad[0] << " dilation " << a.dilation[0] << " groups " << a.groups
     << (a.bias ? " + bias" : "");
  c.ir = sy::OperationIr{op};
  c.what = os.str();
  return c;
}

sy::backends::BufferPtr buffer(const std::vector<float>& v) {
  return std::make_shared<sy::backends::HostBuffer>(sy::Bytes::copy_of(v.data(), v.size() * sizeof(float)));
}

/// The result of c with these input buffers (held by the caller, as a
/// device holds a model's weights between calls).
std::vector<float> execute(sy::backends::Backend& backend, const Case& c, std::vector<sy::backends::BufferPtr> in) {
  std::vector<sy::backends::BufferPtr> out(1);
  sy::OperationIr ir = c.ir;  // execute may annotate it
  const auto err = backend.execute(ir, in, out);
  INFO(err.message());
  REQUIRE(!err);
  const sy::Bytes* bytes = out[0]->host();
  REQUIRE(bytes != nullptr);
  std::vector<float> values(bytes->size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes->as<const uint8_t>(), bytes->size());
  return values;
}

/// The result of `c` on `backend`, with every input value passed through f.
template <class F>
std::vector<float> run(sy::backends::Backend& backend, const Case& c, F f) {
  std::vector<sy::backends::BufferPtr> in;
  for (const auto& v : c.inputs) {
    std::vector<float> mapped(v.size());
    for (size_t i = 0; i < v.size(); ++i) mapped[i] = f(v[i]);
    in.push_back(buffer(mapped));
  }
  return execute(backend, c, std::move(in));
}
std::vector<float> run(sy::backends::Backend& backend, const Case& c) {
  return run(backend, c, [](float x) { return x; });
}

sy::testing::Backends& backends() { return sy::testing::shared_backends(); }

/// Runs the cpu with the native kernel on or off (restored on scope exit).
struct NativeGemm : sy::testing::KernelSwitch {
  explicit NativeGemm(bool on) : KernelSwitch(&cpu::set_native_f32_gemm, on) {}
};
/// Runs the cpu's dense convolutions on the direct kernel or on the GEMM.
struct DirectConv : sy::testing::KernelSwitch {
  explicit DirectConv(bool on) : KernelSwitch(&cpu::set_direct_conv_f32, on) {}
};
/// Runs of the native kernels: the GEMM, or the direct convolution, which
/// takes the GEMM's dense convolutions while it is on.
uint64_t native_runs() { return cpu::native_f32_gemm_runs() + cpu::direct_conv_f32_runs(); }

/// The cpu's result with the native kernel, checking that it ran it (or,
/// when `expect_native` is false, that it did not).
std::vector<float> run_native(const Case& c, bool expect_native = true) {
  NativeGemm on(true);
  const auto before = native_runs();
  auto out = run(*backends().cpu, c);
  CHECK(native_runs() - before >= (expect_native ? 1u : 0u));
  if (!expect_native) CHECK(native_runs() == before);
  return out;
}
std::vector<float> run_openblas(const Case& c) {
  NativeGemm off(false);
  const auto before = native_runs();
  auto out = run(*backends().cpu, c);
  CHECK(native_runs() == before);
  return out;
}

bool skip_without_avx512f() {
  if (cpu::cpu_has_avx512f()) return false;
  WARN("skipped: this CPU (or build) has no AVX-512F, so f32 GEMMs only run on OpenBLAS");
  return true;
}

/// Matmuls take the native kernel only while OpenBLAS runs AVX2 kernels.
bool skip_native_matmul() {
  if (skip_without_avx512f()) return true;
  if (!cpu::openblas_runs_avx512()) return false;
  WARN("skipped: OpenBLAS runs AVX-512 kernels here (OPENBLAS_CORETYPE), so f32 matmul stays on it");
  return true;
}

/// Elements where got and want differ by more than f32 sums in any order
/// may: each is a sum of `terms` products (plus the bias), so it is off the
/// exact value by at most about terms * 2^-24 * sum |products|, which the
/// reference gives as the same op on the inputs' magnitudes. A wrong index
/// or a lost term is far outside that.
std::string differences(const std::vector<float>& got, const std::vector<float>& want,
                        const std::vector<float>& magnitude, int64_t terms, const char* what) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ";
  std::ostringstream os;
  int shown = 0;
  const double tol = 2.0 * static_cast<double>(terms + 2) * 0x1p-24;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = got[i], y = want[i];
    bool ok = false;
    if (std::isnan(x) || std::isnan(y))
      ok = std::isnan(x) && std::isnan(y);
    else if (std::isinf(x) || std::isinf(y))
      ok = x == y;
    else
      ok = std::fabs(x - y) <= tol * magnitude[i] + 1e-30;
    if (!ok && shown++ < 5) os << what << ": element " << i << " is " << x << ", want " << y << "\n";
  }
  return os.str();
}

/// Native against OpenBLAS and the reference, within f32 summation error.
void check_case(const Case& c, int64_t terms) {
  INFO(c.what);
  const auto native = run_native(c);
  const auto magnitude = run(*backends().reference, c, [](float x) { return std::fabs(x); });
  const auto vs_ref = differences(native, run(*backends().reference, c), magnitude, terms, "native vs reference");
  const auto vs_blas = differences(native, run_openblas(c), magnitude, terms, "native vs OpenBLAS");
  INFO(vs_ref << vs_blas);
  CHECK(vs_ref.empty());
  CHECK(vs_blas.empty());
}

Shape lhs_shape(int64_t m, int64_t k, bool ta) { return ta ? Shape{k, m} : Shape{m, k}; }
Shape rhs_shape(int64_t k, int64_t n, bool tb) { return tb ? Shape{n, k} : Shape{k, n}; }

}  // namespace

TEST_CASE("native f32 GEMM matmul matches OpenBLAS and the reference on odd sizes and transposes", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  Draw r{1};
  const std::vector<int64_t> sizes = {1, 7, 16, 17, 33, 257};
  for (int64_t m : sizes)
    for (int64_t n : {int64_t{8}, int64_t{16}, int64_t{17}, int64_t{33}, int64_t{100}, int64_t{257}})
      for (int64_t k : sizes) {
        const bool ta = (m + k) % 3 == 0, tb = (n + k) % 2 == 0;
        check_case(matmul_case(r, lhs_shape(m, k, ta), rhs_shape(k, n, tb), ta, tb), k);
      }
}

TEST_CASE("native f32 GEMM tiles M N and K across threads", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  // Several K blocks (256), M tiles (224) and N tiles, with edges.
  Draw r{2};
  // One transpose combination per shape (the reference's double loops are
  // slow at these sizes).
  int t = 0;
  for (auto [m, n, k] : {std::array<int64_t, 3>{300, 500, 700}, {229, 1100, 513}, {64, 3136, 257}, {513, 49, 1300}}) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    check_case(matmul_case(r, lhs_shape(m, k, ta), rhs_shape(k, n, tb), ta, tb), k);
    ++t;
  }
}

TEST_CASE("native f32 GEMM broadcasts batches and adds linear's bias", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  Draw r{3};
  for (const auto& s : sy::testing::broadcast_matmul_shapes()) {
    if (s.b.dims[s.b.rank() - (s.tb ? 2 : 1)] < 8) continue;  // narrower rows stay on OpenBLAS (a case below)
    const Case c = matmul_case(r, s.a, s.b, s.ta, s.tb, s.bias);
    check_case(c, s.ta ? s.a.dims[s.a.rank() - 2] : s.a.dims[s.a.rank() - 1]);
  }
}

// A single row (a batch-1 linear) streams B instead of packing it; each
// element must still be summed as the tiled kernel sums it, so a request
// gets the same bits alone as inside a dynamic batch.
TEST_CASE("native f32 GEMM gives one row alone the bits it gets in a batch", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  Draw r{7};
  // n and k with edges of 16 and of the row kernel's 32 / 64 columns; the
  // last shapes are large enough to run on both threads.
  for (auto [n, k] : {std::array<int64_t, 2>{8, 1}, {17, 15}, {33, 16}, {100, 17}, {65, 257}, {1000, 512}, {513, 700}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = 5;
        Case batch = matmul_case(r, lhs_shape(m, k, ta), rhs_shape(k, n, tb), ta, tb, Shape{n});
        // A few non-finite values: a row's NaN and Inf land where they would in the batch.
        batch.inputs[1][3] = std::numeric_limits<float>::infinity();
        batch.inputs[0][static_cast<size_t>(k > 2 ? 2 : 0)] = std::numeric_limits<float>::quiet_NaN();
        INFO(batch.what);
        const auto all = run_native(batch);
        for (int64_t i = 0; i < m; ++i) {
          std::vector<float> row(static_cast<size_t>(k));
          for (int64_t p = 0; p < k; ++p)
            row[static_cast<size_t>(p)] = batch.inputs[0][static_cast<size_t>(ta ? p * m + i : i * k + p)];
          Case one = matmul_case(r, lhs_shape(1, k, ta), rhs_shape(k, n, tb), ta, tb, Shape{n});
          one.inputs[0] = row;
          one.inputs[1] = batch.inputs[1];
          one.inputs[2] = batch.inputs[2];
          const auto alone = run_native(one);
          INFO("row " << i);
          REQUIRE(alone.size() == static_cast<size_t>(n));
          CHECK(std::memcmp(alone.data(), all.data() + i * n, alone.size() * sizeof(float)) == 0);
        }
        // And the row against the reference (within summation error).
        Case first = matmul_case(r, lhs_shape(1, k, ta), rhs_shape(k, n, tb), ta, tb, Shape{n});
        check_case(first, k);
      }
}

// Tiles of few rows read a row-major B where it lies; taller tiles pack it
// first. Rows must get the same bits either way, so a request's rows come out
// the same alone as inside a dynamic batch.
TEST_CASE("native f32 GEMM gives a few rows the bits they get in a tall product", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  Draw r{8};
  // 230 rows: tiles of more than four 14-row panels (B packed) on one thread
  // and on two; 20 rows: one tile of two panels (B read in place). k = 300
  // spans two K blocks; n has edges of 16 and of a 32-column panel.
  const int64_t tall = 230, few = 20;
  for (auto [n, k] : {std::array<int64_t, 2>{17, 15}, {33, 300}, {257, 300}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Case batch = matmul_case(r, lhs_shape(tall, k, ta), rhs_shape(k, n, tb), ta, tb, Shape{n});
        INFO(batch.what);
        const auto all = run_native(batch);
        Case part = matmul_case(r, lhs_shape(few, k, ta), rhs_shape(k, n, tb), ta, tb, Shape{n});
        std::vector<float> rows(static_cast<size_t>(few * k));
        for (int64_t i = 0; i < few; ++i)
          for (int64_t p = 0; p < k; ++p)
            rows[static_cast<size_t>(ta ? p * few + i : i * k + p)] =
                batch.inputs[0][static_cast<size_t>(ta ? p * tall + i : i * k + p)];
        part.inputs[0] = rows;
        part.inputs[1] = batch.inputs[1];
        part.inputs[2] = batch.inputs[2];
        const auto alone = run_native(part);
        REQUIRE(alone.size() == static_cast<size_t>(few * n));
        CHECK(std::memcmp(alone.data(), all.data(), alone.size() * sizeof(float)) == 0);
        check_case(part, k);
      }
}

// The one-row path with everything a caller may ask of the tiled kernel:
// C's own values (accumulate), a row bias, a column bias, a residual added
// before or after the sums, relu; each row of a 3-row product run alone
// must get the same bits, on one thread and on two.
TEST_CASE("native f32 GEMM one-row path keeps the tiled kernel's start and epilogue", "[cpu][f32_gemm]") {
  if (skip_without_avx512f()) return;
  NativeGemm on(true);
  Draw r{11};
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t threads : {size_t{1}, size_t{2}})
    for (auto [n, k] : {std::array<int64_t, 2>{40, 33}, {300, 1100}})
      for (bool tb : {false, true})
        for (bool add_first : {false, true}) {
          INFO("threads " << threads << " n " << n << " k " << k << " tb " << tb << " add_first " << add_first);
          cpu::ThreadPool pool(threads);
          const int64_t m = 3;
          auto a = values(r, m * k), b = values(r, k * n), row_bias = values(r, m), col_bias = values(r, n);
          auto add = values(r, m * n), start = values(r, m * n);
          a[5] = inf;  // row 0 (+-inf, or 0 after relu); a NaN in row 2
          a[static_cast<size_t>(2 * k + 2)] = std::numeric_limits<float>::quiet_NaN();
          auto run = [&](int64_t rows, int64_t first, std::vector<float> c) {
            cpu::F32Gemm g;
            g.m = rows;
            g.n = n;
            g.k = k;
            g.lda = k;
            g.ldb = tb ? k : n;
            g.b_transposed = tb;
            g.ldc = n;
            g.accumulate = true;
            g.epilogue = {add_first, true};
            g.locate = [&, first](int64_t) {
              cpu::F32GemmOperands ops{a.data() + first * k, b.data(), c.data(), row_bias.data() + first};
              ops.add = add.data() + first * n;
              ops.col_bias = col_bias.data();
              return ops;
            };
            REQUIRE(cpu::gemm_f32(pool, g));
            return c;
          };
          const auto all = run(m, 0, start);
          for (int64_t i = 0; i < m; ++i) {
            const auto alone = run(1, i, std::vector<float>(start.begin() + i * n, start.begin() + (i + 1) * n));
            INFO("row " << i);
            CHECK(std::memcmp(alone.data(), all.data() + i * n, static_cast<size_t>(n) * sizeof(float)) == 0);
          }
        }
}

TEST_CASE("f32 matmul keeps rows narrower than 8 on OpenBLAS", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  Draw r{4};
  const Case narrow = matmul_case(r, {64, 512}, {4, 512}, false, true, Shape{4});
  INFO(narrow.what);
  const auto out = run_native(narrow, false);
  const auto magnitude = run(*backends().reference, narrow, [](float x) { return std::fabs(x); });
  CHECK(differences(out, run(*backends().reference, narrow), magnitude, 512, "vs reference").empty());
  // The MLP's last layer (10 wide) is native.
  check_case(matmul_case(r, {64, 512}, {10, 512}, false, true, Shape{10}), 512);
  check_case(matmul_case(r, {9, 70}, {70, 8}, false, false), 70);
}

TEST_CASE("native f32 GEMM convolutions match OpenBLAS and the reference", "[cpu][f32_gemm]") {
  if (skip_without_avx512f()) return;
  Draw r{5};
  const std::vector<ConvArgs> convs = {
      // 2d: padding, stride, dilation, groups, odd sizes, with and without bias
      {{1, 3, 7, 7}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {{2, 17, 33, 17}, {33, 17, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {{1, 16, 20, 20}, {32, 16, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false},
      {{1, 8, 15, 15}, {16, 8, 3, 3}, {1, 1}, {2, 2}, {2, 2}},
      {{2, 12, 11, 13}, {18, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},
      {{1, 3, 33, 33}, {7, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}},
      {{1, 64, 56, 56}, {64, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {{1, 33, 9, 9}, {17, 33, 5, 5}, {3, 3}, {0, 0}, {1, 1}},
      // stride 2 (column rows gathered 16 at a time): output rows of 36,
      // 16, 1 and 19 positions, padding on either side, dilation 2
      {{1, 2, 5, 71}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}},
      {{2, 3, 6, 32}, {4, 3, 2, 2}, {2, 2}, {0, 0}, {1, 1}},
      {{1, 2, 9, 2}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false},
      {{1, 4, 13, 37}, {5, 4, 3, 3}, {2, 2}, {2, 2}, {2, 2}},
      // 1x1: pointwise (plain GEMM on the input), strided, grouped
      {{2, 256, 14, 14}, {64, 256, 1, 1}, {1, 1}, {0, 0}, {1, 1}},
      {{1, 64, 15, 15}, {128, 64, 1, 1}, {2, 2}, {0, 0}, {1, 1}},
      {{1, 32, 7, 9}, {16, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 4, false},
      // late-layer shapes: few positions, long K
      {{1, 256, 7, 7}, {257, 256, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      // 1d and 3d
      {{2, 7, 257}, {17, 7, 5}, {2}, {2}, {1}},
      {{1, 5, 6, 7, 8}, {9, 5, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
      // transposed: one GEMM (W^T X) per image and group, then col2im
      {{1, 16, 9, 9}, {16, 8, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true, true},
      {{2, 12, 5, 7}, {12, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 2, true, true},
  };
  for (bool direct : {true, false}) {
    DirectConv path(direct);
    INFO((direct ? "direct kernel where it applies" : "GEMM only"));
    for (const auto& a : convs) {
      const Case c = conv_case(r, a);
      int64_t terms = a.transposed ? a.input.dims[1] / a.groups : a.weight.dims[1];
      for (size_t i = 2; i < a.weight.rank(); ++i) terms *= a.weight.dims[i];
      check_case(c, terms);
    }
  }
}

TEST_CASE("native f32 GEMM keeps depthwise convolutions on their direct kernel", "[cpu][f32_gemm]") {
  if (skip_without_avx512f()) return;
  Draw r{6};
  const Case c = conv_case(r, {{1, 8, 10, 10}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8});
  INFO(c.what);
  const auto native = run_native(c, false);
  const auto magnitude = run(*backends().reference, c, [](float x) { return std::fabs(x); });
  CHECK(differences(native, run(*backends().reference, c), magnitude, 9, "vs reference").empty());
}

TEST_CASE("AVX-512 depthwise kernel matches the scalar direct kernel and the reference", "[cpu][f32_gemm][depthwise]") {
  if (skip_without_avx512f()) return;
  Draw r{11};
  struct DepthwiseCase {
    ConvArgs args;
    bool avx512;  // whether depthwise_f32 takes it (else the scalar kernel)
  };
  const std::vector<DepthwiseCase> cases = {
      // 3x3, stride 1 and 2, padding 1: MobileNet's layers, widths that are
      // and are not multiples of 16, one to four vectors per row segment
      {{{1, 8, 10, 10}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 8}, true},
      {{{1, 16, 56, 56}, {16, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 16}, true},
      {{{2, 5, 17, 33}, {5, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 5}, true},
      {{{1, 3, 7, 64}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3, false}, true},
      {{{1, 3, 5, 130}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3}, true},
      {{{1, 6, 57, 56}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 6}, true},
      {{{1, 6, 56, 57}, {6, 1, 3, 3}, {2, 2}, {0, 0}, {1, 1}, 6}, true},
      {{{1, 4, 9, 100}, {4, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 4}, true},
      // one-pixel and tiny images: every tap but the centre in the padding
      {{{1, 3, 1, 1}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3}, true},
      {{{1, 4, 1, 1}, {4, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 4}, true},
      {{{1, 2, 2, 2}, {2, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2}, true},
      {{{1, 2, 1, 3}, {2, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2}, true},
      // padding past the kernel's reach: whole rows and vectors of padding
      {{{1, 4, 9, 70}, {4, 1, 3, 3}, {1, 1}, {2, 2}, {1, 1}, 4}, true},
      {{{1, 2, 3, 20}, {2, 1, 3, 3}, {2, 2}, {4, 4}, {1, 1}, 2}, true},
      // channel multiplier 2, dilation, other kernel sizes, row stride 3
      {{{1, 4, 9, 9}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 4}, true},
      {{{1, 4, 20, 37}, {4, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 4}, true},
      {{{1, 3, 12, 40}, {3, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 3}, true},
      {{{1, 3, 12, 40}, {3, 1, 1, 7}, {1, 1}, {0, 3}, {1, 1}, 3, false}, true},
      {{{1, 3, 20, 40}, {3, 1, 3, 3}, {3, 1}, {1, 1}, {1, 1}, 3}, true},
      // 1d
      {{{2, 4, 100}, {4, 1, 3}, {1}, {1}, {1}, 4}, true},
      {{{2, 4, 101}, {4, 1, 3}, {2}, {1}, {1}, 4}, true},
      // the scalar kernel's: column stride 3, and 3d
      {{{1, 4, 20, 20}, {4, 1, 3, 3}, {3, 3}, {1, 1}, {1, 1}, 4}, false},
      {{{1, 2, 4, 5, 6}, {2, 1, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 2}, false},
  };
  for (const auto& dc : cases) {
    const Case c = conv_case(r, dc.args);
    INFO(c.what << (dc.avx512 ? " (AVX-512)" : " (scalar)"));
    const auto before = cpu::native_depthwise_f32_runs();
    const auto native = run_native(c, false);
    CHECK(cpu::native_depthwise_f32_runs() - before == (dc.avx512 ? 1u : 0u));
    int64_t terms = 1;
    for (size_t i = 2; i < dc.args.weight.rank(); ++i) terms *= dc.args.weight.dims[i];
    const auto magnitude = run(*backends().reference, c, [](float x) { return std::fabs(x); });
    const auto vs_ref = differences(native, run(*backends().reference, c), magnitude, terms, "native vs reference");
    const auto vs_scalar = differences(native, run_openblas(c), magnitude, terms, "native vs scalar");
    INFO(vs_ref << vs_scalar);
    CHECK(vs_ref.empty());
    CHECK(vs_scalar.empty());
  }
}

TEST_CASE("AVX-512 depthwise kernel propagates NaN and Inf and leaves the padding out", "[cpu][f32_gemm][depthwise]") {
  if (skip_without_avx512f()) return;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Draw r{12};
  for (const int64_t stride : {1, 2}) {
    // 2 channels of 5 x 19 (two vectors per row, the second partial).
    Case c = conv_case(r, {{1, 2, 5, 19}, {2, 1, 3, 3}, {stride, stride}, {1, 1}, {1, 1}, 2});
    std::fill(c.inputs[0].begin(), c.inputs[0].end(), 1.0f);
    std::fill(c.inputs[1].begin(), c.inputs[1].end(), 0.5f);
    c.inputs[0][2 * 19 + 2] = inf;        // channel 0, pixel (2, 2)
    c.inputs[0][95 + 3 * 19 + 17] = nan;  // channel 1, pixel (3, 17)
    c.inputs[1][0] = inf;                 // channel 0's tap (0, 0): the padding for row 0 and column 0
    c.inputs[1][9 + 4] = 0.0f;            // channel 1's centre tap: 0 * NaN
    INFO("stride " << stride);
    const auto before = cpu::native_depthwise_f32_runs();
    const auto native = run_native(c, false);
    CHECK(cpu::native_depthwise_f32_runs() - before == 1u);
    const auto reference = run(*backends().reference, c);
    const auto scalar = run_openblas(c);
    REQUIRE(native.size() == reference.size());
    int nans = 0, infs = 0;
    for (size_t i = 0; i < native.size(); ++i) {
      INFO("element " << i << ": native " << native[i] << ", reference " << reference[i] << ", scalar " << scalar[i]);
      CHECK(std::isnan(native[i]) == std::isnan(reference[i]));
      CHECK(std::isnan(native[i]) == std::isnan(scalar[i]));
      if (!std::isnan(reference[i])) CHECK(native[i] == reference[i]);
      nans += std::isnan(native[i]) ? 1 : 0;
      infs += std::isinf(native[i]) ? 1 : 0;
    }
    CHECK(nans > 0);
    CHECK(infs > 0);
  }
}

TEST_CASE("native f32 GEMM propagates NaN and Inf as IEEE says, 0 times Inf included", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Draw r{7};
  // Zeros everywhere but a few specials: a zero operand must still be
  // multiplied (0 * Inf = NaN), Inf + -Inf = NaN, Inf * finite = Inf.
  for (auto [m, n, k] : {std::array<int64_t, 3>{5, 17, 9}, {40, 300, 600}}) {
    Case c = matmul_case(r, {m, k}, {k, n}, false, false);
    auto& a = c.inputs[0];
    auto& b = c.inputs[1];
    std::fill(a.begin(), a.end(), 0.0f);
    std::fill(b.begin(), b.end(), 1.0f);
    a[0] = inf;                                         // row 0: Inf times B's row 0
    b[static_cast<size_t>(0 * n + 3)] = 0.0f;           // ... 0 in column 3: NaN there
    a[static_cast<size_t>(1 * k + 1)] = inf;            // row 1: Inf in k 1 and -Inf in k 2
    a[static_cast<size_t>(1 * k + 2)] = -inf;           // Inf - Inf: NaN in the whole row
    a[static_cast<size_t>(2 * k + k - 1)] = nan;        // row 2: NaN in the last k
    b[static_cast<size_t>((k - 1) * n + n - 1)] = inf;  // column n - 1: Inf from row k - 1
    INFO(c.what);
    const auto native = run_native(c);
    const auto reference = run(*backends().reference, c);
    const auto blas = run_openblas(c);
    REQUIRE(native.size() == reference.size());
    for (size_t i = 0; i < native.size(); ++i) {
      INFO("element " << i << ": native " << native[i] << ", reference " << reference[i] << ", OpenBLAS " << blas[i]);
      CHECK(std::isnan(native[i]) == std::isnan(reference[i]));
      if (!std::isnan(reference[i])) CHECK(native[i] == reference[i]);
    }
    CHECK(std::isnan(native[3]));                       // 0 * Inf
    CHECK(std::isinf(native[0]));                       // Inf * 1 + 0 * 1 ...
    CHECK(std::isnan(native[static_cast<size_t>(n)]));  // Inf - Inf
  }
  // The same through a convolution: an Inf input pixel meets a zero weight
  // tap (NaN), and finite weights elsewhere (Inf).
  Case c = conv_case(r, {{1, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false});
  std::fill(c.inputs[0].begin(), c.inputs[0].end(), 1.0f);
  std::fill(c.inputs[1].begin(), c.inputs[1].end(), 0.5f);  // exact sums: every path gives the same values
  c.inputs[0][12] = inf;                                    // channel 0, pixel (2, 2)
  c.inputs[1][9 * 2 * 1 + 4] = 0.0f;                        // output channel 1, input channel 0, centre tap
  const auto native = run_native(c);
  const auto reference = run(*backends().reference, c);
  for (size_t i = 0; i < native.size(); ++i) {
    INFO("element " << i << ": native " << native[i] << ", reference " << reference[i]);
    CHECK(std::isnan(native[i]) == std::isnan(reference[i]));
    if (!std::isnan(reference[i])) CHECK(native[i] == reference[i]);
  }
  CHECK(std::isinf(native[12]));       // channel 0 at (2, 2)
  CHECK(std::isnan(native[25 + 12]));  // channel 1 at (2, 2): 0 * Inf
  CHECK(std::isinf(native[25 + 6]));   // channel 1 at (1, 1): Inf times tap (2, 2), which is not zero
}

TEST_CASE("one-row products on OpenBLAS (its gemv) match the reference, NaN and Inf included", "[cpu][f32_gemm]") {
  // A batch-1 linear or matmul goes to OpenBLAS's gemv off the native
  // kernel (other CPUs, SWITCHYARD_CPU_F32_GEMM=0): every transpose, with a
  // bias, at sizes around gemv's blocking, and a zero operand still
  // multiplied (0 * Inf = NaN).
  Draw r{11};
  const float inf = std::numeric_limits<float>::infinity();
  for (auto [n, k] : {std::array<int64_t, 2>{1, 1}, {3, 5}, {17, 33}, {128, 64}, {1000, 512}, {257, 1031}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool bias : {false, true}) {
          Case c = matmul_case(r, ta ? Shape{k, 1} : Shape{1, k}, tb ? Shape{n, k} : Shape{k, n}, ta, tb,
                               bias ? std::optional<Shape>(Shape{n}) : std::nullopt);
          INFO(c.what);
          const auto blas = run_openblas(c);
          const auto magnitude = run(*backends().reference, c, [](float x) { return std::fabs(x); });
          const auto diff = differences(blas, run(*backends().reference, c), magnitude, k, "OpenBLAS vs reference");
          CHECK(diff.empty());
        }
      }
    }
  }
  for (bool tb : {false, true}) {
    const int64_t n = 9, k = 7;
    Case c = matmul_case(r, Shape{1, k}, tb ? Shape{n, k} : Shape{k, n}, false, tb);
    auto& a = c.inputs[0];
    auto& b = c.inputs[1];
    std::fill(a.begin(), a.end(), 0.0f);
    std::fill(b.begin(), b.end(), 1.0f);
    a[2] = inf;                                                 // Inf times B's row 2 ...
    b[static_cast<size_t>(tb ? 4 * k + 2 : 2 * n + 4)] = 0.0f;  // ... 0 in column 4: NaN there
    b[static_cast<size_t>(tb ? 6 * k + 5 : 5 * n + 6)] = inf;   // a zero times Inf in column 6: NaN
    INFO(c.what);
    const auto blas = run_openblas(c);
    const auto reference = run(*backends().reference, c);
    for (size_t i = 0; i < blas.size(); ++i) {
      INFO("element " << i << ": OpenBLAS " << blas[i] << ", reference " << reference[i]);
      CHECK(std::isnan(blas[i]) == std::isnan(reference[i]));
      if (!std::isnan(reference[i])) CHECK(blas[i] == reference[i]);
    }
    CHECK(std::isnan(blas[4]));
    CHECK(std::isnan(blas[6]));
    CHECK(std::isinf(blas[0]));
  }
}

TEST_CASE("native f32 GEMM conv multiplies zero padding like the OpenBLAS path", "[cpu][f32_gemm]") {
  if (skip_without_avx512f()) return;
  // An Inf weight over the zero padding: both cpu paths multiply the
  // padding's zeros (im2col writes them), so 0 * Inf = NaN at the border;
  // the reference backend leaves padded taps out of the sum. The native
  // path keeps the cpu's behaviour; it does not settle which is right.
  const float inf = std::numeric_limits<float>::infinity();
  Draw r{10};
  Case c = conv_case(r, {{1, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false});
  std::fill(c.inputs[0].begin(), c.inputs[0].end(), 1.0f);
  std::fill(c.inputs[1].begin(), c.inputs[1].end(), 0.5f);
  c.inputs[1][0] = inf;  // tap (0, 0) of output channel 0 reads the padding in row 0 and column 0
  const auto native = run_native(c);
  const auto blas = run_openblas(c);
  REQUIRE(native.size() == blas.size());
  for (size_t i = 0; i < native.size(); ++i) {
    INFO("element " << i << ": native " << native[i] << ", OpenBLAS " << blas[i]);
    CHECK(std::isnan(native[i]) == std::isnan(blas[i]));
    if (!std::isnan(blas[i])) CHECK(native[i] == blas[i]);
  }
  CHECK(std::isnan(native[0]));
}

TEST_CASE("native f32 GEMM handles zero-size dimensions", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  Draw r{8};
  // K = 0: the result is zero, or the bias.
  for (const Case& c :
       {matmul_case(r, {5, 0}, {0, 20}, false, false), matmul_case(r, {5, 0}, {20, 0}, false, true, Shape{20}),
        matmul_case(r, {0, 7}, {7, 20}, false, false), matmul_case(r, {5, 7}, {7, 0}, false, false),
        matmul_case(r, {0, 5, 7}, {7, 20}, false, false)}) {
    INFO(c.what);
    const auto native = run(*backends().cpu, c);
    CHECK(native == run(*backends().reference, c));
    CHECK(native == run_openblas(c));
  }
  for (const ConvArgs& a : {ConvArgs{{0, 3, 7, 7}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
                            ConvArgs{{2, 3, 7, 7}, {0, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false}}) {
    const Case c = conv_case(r, a);
    INFO(c.what);
    const auto native = run(*backends().cpu, c);
    CHECK(native == run(*backends().reference, c));
    CHECK(native == run_openblas(c));
  }
}

TEST_CASE("SWITCHYARD_CPU_F32_GEMM=0 in the environment leaves f32 GEMMs on OpenBLAS", "[cpu][env]") {
  // ctest runs this case once more with the variable set (f32_gemm.env_off).
  // (and with "False": every spelling the README lists turns it off).
  const char* env = std::getenv("SWITCHYARD_CPU_F32_GEMM");
  const bool off = env != nullptr && (std::string(env) == "0" || std::string(env) == "False");
  CHECK(cpu::native_f32_gemm_enabled() == (cpu::cpu_has_avx512f() && !off));
  Draw r{9};
  const Case c = conv_case(r, {{1, 8, 12, 12}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}});
  const auto before = native_runs();
  const auto out = run(*backends().cpu, c);
  CHECK(native_runs() - before == (cpu::native_f32_gemm_enabled() ? 1u : 0u));
  if (!cpu::native_f32_gemm_enabled()) CHECK_FALSE(cpu::direct_conv_f32_enabled());
  const auto magnitude = run(*backends().reference, c, [](float x) { return std::fabs(x); });
  CHECK(differences(out, run(*backends().reference, c), magnitude, 72, "vs reference").empty());
}

namespace {

/// A chain headed by a convolution as the runner hands it to execute_fused:
/// the conv (x = 1, w = 2, bias = 3, out = 4), then element-wise ops on its
/// result; `tensors` the chain's external inputs in order of first mention.
struct ConvChain {
  std::vector<sy::OperationIr> ops;
  std::vector<sy::TensorIr> tensors;
  std::vector<std::vector<float>> values;  // of `tensors`
  std::string what;
};

enum class Tail { relu, add_relu, add_first_relu, add, relu_scale, sigmoid };

ConvChain conv_chain(Draw& r, const ConvArgs& a, Tail tail) {
  const Case c = conv_case(r, a);
  ConvChain ch;
  auto conv = std::get<sy::ConvOp>(c.ir.op);
  const Shape shape = conv.out.shape;
  ch.ops.push_back(sy::OperationIr{conv});
  conv.each_input([&](const sy::TensorIr& t) { ch.tensors.push_back(t); });
  ch.values = c.inputs;
  const auto last = [&](uint64_t id) { return tensor(id, shape, sy::TensorStatus::read_write); };
  const auto fresh = [&](uint64_t id) { return tensor(id, shape, sy::TensorStatus::not_init); };
  const auto relu = [&](uint64_t in, uint64_t out) {
    return sy::OperationIr{sy::UnaryOp{sy::UnaryKind::relu, last(in), fresh(out), 0, 0}};
  };
  if (tail == Tail::add_relu || tail == Tail::add_first_relu || tail == Tail::add) {
    ch.tensors.push_back(tensor(6, shape));
    ch.values.push_back(values(r, shape.numel()));
    sy::BinaryOp add{sy::BinaryKind::add, last(4), tensor(6, shape), fresh(5)};
    if (tail == Tail::add_first_relu) std::swap(add.lhs, add.rhs);
    ch.ops.push_back(sy::OperationIr{add});
    if (tail != Tail::add) ch.ops.push_back(relu(5, 7));
  } else if (tail == Tail::relu || tail == Tail::relu_scale) {
    ch.ops.push_back(relu(4, 5));
    if (tail == Tail::relu_scale)
      ch.ops.push_back(sy::OperationIr{sy::ScalarOp{sy::BinaryKind::mul, last(5), sy::Scalar(1.5), false, fresh(7)}});
  } else {
    ch.ops.push_back(sy::OperationIr{sy::UnaryOp{sy::UnaryKind::sigmoid, last(4), fresh(5), 0, 0}});
  }
  static constexpr const char* names[] = {"relu", "add relu", "add (first) relu", "add", "relu scale", "sigmoid"};
  ch.what = c.what + ", then " + names[static_cast<int>(tail)];
  return ch;
}

std::vector<float> floats_of(const sy::backends::BufferPtr& b) {
  const sy::Bytes* bytes = b->host();
  REQUIRE(bytes != nullptr);
  std::vector<float> v(bytes->size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), bytes->as<const uint8_t>(), bytes->size());
  return v;
}

/// The chain through execute_fused.
std::vector<float> run_fused(sy::backends::Backend& backend, const ConvChain& ch) {
  std::vector<sy::backends::BufferPtr> in;
  for (const auto& v : ch.values) in.push_back(buffer(v));
  std::vector<sy::OperationIr> ops = ch.ops;
  sy::backends::BufferPtr out;
  const auto err = backend.execute_fused(ops, ch.tensors, in, out);
  INFO(err.message());
  REQUIRE(!err);
  REQUIRE(out);
  return floats_of(out);
}

/// The chain op by op through execute, as the runner runs it unfused.
std::vector<float> run_unfused(sy::backends::Backend& backend, const ConvChain& ch) {
  std::map<uint64_t, sy::backends::BufferPtr> held;
  for (size_t k = 0; k < ch.tensors.size(); ++k) held[ch.tensors[k].id.value] = buffer(ch.values[k]);
  sy::backends::BufferPtr last;
  for (const auto& op : ch.ops) {
    sy::OperationIr ir = op;
    std::vector<sy::backends::BufferPtr> in;
    ir.each_input([&](const sy::TensorIr& t) { in.push_back(held.at(t.id.value)); });
    std::vector<sy::backends::BufferPtr> out(1);
    const auto err = backend.execute(ir, in, out);
    INFO(err.message());
    REQUIRE(!err);
    ir.each_output([&](const sy::TensorIr& t) { held[t.id.value] = out[0]; });
    last = out[0];
  }
  return floats_of(last);
}

/// Same bits, any NaN matching any NaN (IEEE leaves open which operand's
/// payload an add of two NaNs returns).
std::string bit_differences(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return "sizes differ";
  std::ostringstream os;
  int shown = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t x = 0, y = 0;
    std::memcpy(&x, &got[i], 4);
    std::memcpy(&y, &want[i], 4);
    if (x == y || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    if (shown++ < 5)
      os << "element " << i << " is " << got[i] << " (0x" << std::hex << x << "), want " << want[i] << " (0x" << y
         << std::dec << ")\n";
  }
  return os.str();
}

}  // namespace

TEST_CASE("convolution chains fused into the GEMM's store give the unfused bits", "[cpu][f32_gemm][conv_chain]") {
  if (skip_without_avx512f()) return;
  NativeGemm on(true);  // whatever SWITCHYARD_CPU_F32_GEMM says
  auto& cpu_backend = *backends().cpu;
  Draw r{10};
  const std::vector<ConvArgs> convs = {
      // shifted rows (3x3 stride 1 pad 1), batch > 1, odd sizes, no bias
      {{2, 17, 13, 11}, {33, 17, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {{1, 8, 9, 9}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false},
      // im2col rows: a ResNet stem (7x7 stride 2 pad 3), dilation, groups
      {{2, 3, 33, 31}, {16, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}},
      {{1, 8, 15, 15}, {16, 8, 3, 3}, {1, 1}, {2, 2}, {2, 2}},
      {{2, 12, 11, 13}, {18, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3},
      // pointwise, a strided 1x1 (a ResNet downsample), many K blocks
      {{2, 64, 14, 14}, {32, 64, 1, 1}, {1, 1}, {0, 0}, {1, 1}},
      {{1, 64, 15, 15}, {128, 64, 1, 1}, {2, 2}, {0, 0}, {1, 1}},
      {{1, 96, 7, 7}, {70, 96, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      // 1d
      {{2, 7, 257}, {17, 7, 5}, {2}, {2}, {1}},
  };
  for (bool direct : {true, false})
    for (const auto& a : convs)
      for (Tail tail : {Tail::relu, Tail::add_relu, Tail::add_first_relu, Tail::add, Tail::relu_scale, Tail::sigmoid}) {
        DirectConv path(direct);
        ConvChain ch = conv_chain(r, a, tail);
        INFO(ch.what << (direct ? " (direct kernel where it applies)" : " (GEMM only)"));
        REQUIRE(cpu_backend.fusible_head(ch.ops[0]));
        CHECK_FALSE(cpu_backend.fusible(ch.ops[0]));
        const auto before = native_runs();
        const auto fused = run_fused(cpu_backend, ch);
        CHECK(native_runs() - before == 1u);
        const auto unfused = run_unfused(cpu_backend, ch);
        const auto diff = bit_differences(fused, unfused);
        INFO(diff);
        CHECK(diff.empty());
        // The kernel switched off after the chain was planned: the epilogue
        // as a pass of its own, the same bits as the OpenBLAS path unfused.
        NativeGemm off(false);
        CHECK_FALSE(cpu_backend.fusible_head(ch.ops[0]));
        const auto fallback = bit_differences(run_fused(cpu_backend, ch), run_unfused(cpu_backend, ch));
        INFO(fallback);
        CHECK(fallback.empty());
      }
}

TEST_CASE("convolution chains keep NaN and Inf through the fused add and relu", "[cpu][f32_gemm][conv_chain]") {
  if (skip_without_avx512f()) return;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  NativeGemm on(true);
  Draw r{11};
  for (Tail tail : {Tail::relu, Tail::add_relu, Tail::add_first_relu}) {
    ConvChain ch = conv_chain(r, {{1, 2, 6, 6}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, tail);
    auto& x = ch.values[0];
    x[21] = nan;        // channel 0, (3, 3): NaN in every output that reads it
    x[36 + 28] = inf;   // channel 1, (4, 4): +-Inf by the weight's sign
    x[36 + 30] = -inf;  // channel 1, (5, 0)
    if (ch.values.size() > 3) {
      auto& addend = ch.values[3];
      addend[0] = -inf;  // channel 0, (0, 0): relu gives 0
      addend[5] = nan;   // channel 0, (0, 5): NaN stays NaN through relu
      addend[36] = -0.0f;
    }
    INFO(ch.what);
    const auto fused = run_fused(*backends().cpu, ch);
    const auto unfused = run_unfused(*backends().cpu, ch);
    const auto diff = bit_differences(fused, unfused);
    INFO(diff);
    CHECK(diff.empty());
    CHECK(std::isnan(fused[21]));  // relu(NaN) is NaN, as PyTorch's
    size_t nans = 0, zeros = 0, infs = 0;
    for (float v : fused) {
      nans += std::isnan(v) ? 1 : 0;
      zeros += v == 0.0f && !std::signbit(v) ? 1 : 0;
      infs += std::isinf(v) ? 1 : 0;
      CHECK_FALSE(v < 0.0f);
      CHECK_FALSE((v == 0.0f && std::signbit(v)));  // relu(-0) is +0
    }
    CHECK(nans >= 9);
    CHECK(infs > 0);
    CHECK(zeros > 0);
    if (ch.values.size() > 3) {
      CHECK(fused[0] == 0.0f);
      CHECK(std::isnan(fused[5]));
    }
  }
}

TEST_CASE("direct f32 convolution gives the native GEMM path's bits", "[cpu][f32_gemm][direct_conv]") {
  if (skip_without_avx512f()) return;
  NativeGemm on(true);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Draw r{12};
  struct DirectCase {
    ConvArgs args;
    bool direct;  // whether the direct kernel takes it (else the GEMM)
  };
  const std::vector<DirectCase> cases = {
      // ResNet's 3x3 layers with fewer channels: one-row tiles of 14, two
      // rows of 7, an odd height leaving a 7-wide row alone, channels not
      // a multiple of 32
      {{{1, 16, 28, 28}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, true},
      {{{2, 24, 7, 7}, {48, 24, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, true},
      {{{1, 8, 9, 7}, {17, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false}, true},
      // stride 2: a stem, a downsampling 3x3 with a 7x7 output, a 1x1
      // downsample read in place
      {{{1, 3, 31, 29}, {20, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}}, true},
      {{{1, 16, 14, 14}, {33, 16, 3, 3}, {2, 2}, {1, 1}, {1, 1}}, true},
      {{{2, 32, 15, 15}, {64, 32, 1, 1}, {2, 2}, {0, 0}, {1, 1}}, true},
      // widths cut into uneven tiles (15: 8 + 7; 29: 10 + 10 + 9), 1 and 3
      {{{1, 5, 4, 15}, {17, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, true},
      {{{1, 5, 3, 29}, {70, 5, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, true},
      {{{1, 4, 6, 1}, {16, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, true},
      {{{1, 4, 2, 3}, {16, 4, 3, 1}, {1, 1}, {1, 0}, {1, 1}}, true},
      // ONNX's asymmetric pads; no padding with input rows no tap reaches
      {{{1, 6, 10, 11}, {16, 6, 3, 3}, {2, 2}, {0, 0}, {1, 1}, 1, true, false, {1, 2}}, true},
      {{{1, 6, 11, 11}, {16, 6, 2, 2}, {2, 2}, {0, 0}, {1, 1}}, true},
      {{{2, 7, 57}, {17, 7, 5}, {2}, {2}, {1}}, true},
      // the GEMM's: pointwise, fewer than 16 channels, groups, dilation,
      // stride 3, 3d
      {{{1, 16, 9, 9}, {32, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}}, false},
      {{{1, 8, 9, 9}, {15, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}}, false},
      {{{1, 8, 9, 9}, {16, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2}, false},
      {{{1, 8, 9, 9}, {16, 8, 3, 3}, {1, 1}, {2, 2}, {2, 2}}, false},
      {{{1, 8, 9, 9}, {16, 8, 3, 3}, {3, 3}, {1, 1}, {1, 1}}, false},
      {{{1, 4, 4, 5, 6}, {16, 4, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, false},
  };
  for (const auto& dc : cases) {
    Case c = conv_case(r, dc.args);
    // A NaN and an Inf in the image, a -Inf weight (which meets the
    // padding's zeros: NaN on both paths), a -0 bias.
    c.inputs[0][3] = nan;
    c.inputs[0][c.inputs[0].size() / 2] = inf;
    c.inputs[1][5] = -inf;
    if (c.inputs.size() > 2) c.inputs[2][1] = -0.0f;
    INFO(c.what);
    std::vector<float> direct, gemm;
    {
      DirectConv path(true);
      const auto runs = cpu::direct_conv_f32_runs(), gemm_runs = cpu::native_f32_gemm_runs();
      direct = run(*backends().cpu, c);
      CHECK(cpu::direct_conv_f32_runs() - runs == (dc.direct ? 1u : 0u));
      CHECK(cpu::native_f32_gemm_runs() - gemm_runs == (dc.direct ? 0u : 1u));
    }
    {
      DirectConv path(false);
      const auto runs = cpu::direct_conv_f32_runs();
      gemm = run(*backends().cpu, c);
      CHECK(cpu::direct_conv_f32_runs() == runs);
    }
    const auto diff = bit_differences(direct, gemm);
    INFO(diff);
    CHECK(diff.empty());
  }
}

TEST_CASE("direct f32 convolution in row bands gives the native GEMM path's bits", "[cpu][f32_gemm][direct_conv]") {
  // Layers whose padded image outweighs their weights run as bands of
  // output rows, each padded by the thread that runs it, when at least a
  // million multiply-adds go to two threads or more: the shapes above are
  // too small for that. Each case is checked to take the direct kernel.
  if (skip_without_avx512f()) return;
  NativeGemm on(true);
  Draw r{14};
  const std::vector<ConvArgs> cases = {
      // a stem: 7x7 stride 2 over 3 channels
      {{1, 3, 64, 64}, {32, 3, 7, 7}, {2, 2}, {3, 3}, {1, 1}},
      // 3x3 with channels past a block of 32, height not a multiple of the bands
      {{1, 16, 41, 40}, {48, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      // a batch of 7-wide planes (two-row tiles, an odd height leaving a row alone)
      {{4, 32, 29, 7}, {16, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}},
      // stride 2 with ONNX's asymmetric pads
      {{1, 16, 45, 47}, {24, 16, 3, 3}, {2, 2}, {0, 1}, {1, 1}, 1, true, false, {1, 0}},
  };
  for (const unsigned threads : {2u, 3u}) {
    sy::backends::DeviceOptions options;
    options.threads = threads;
    auto cpu_backend = cpu::backend_kind().create(0, options);
    for (const auto& args : cases) {
      Case c = conv_case(r, args);
      c.inputs[0][7] = std::numeric_limits<float>::quiet_NaN();
      INFO(c.what << " on " << threads << " threads");
      std::vector<float> direct, gemm;
      {
        DirectConv path(true);
        const auto runs = cpu::direct_conv_f32_runs();
        direct = run(*cpu_backend, c);
        CHECK(cpu::direct_conv_f32_runs() - runs == 1u);
      }
      {
        DirectConv path(false);
        gemm = run(*cpu_backend, c);
      }
      const auto diff = bit_differences(direct, gemm);
      INFO(diff);
      CHECK(diff.empty());
    }
  }
}

/// Runs c (whose input 1 is a weight) as a model does, call after call with
/// the same weight buffer, and checks every call's bits against `want`
/// (the result when nothing is kept); then a new weight, likely at the old
/// one's address once that is freed, against `want_next`; then the weight
/// as its last use (which a kernel may overwrite, so nothing is kept).
/// `kept` is the packings kept on the backend after the calls (from what
/// the caller can observe of them); returns to 0 after a trim.
void check_kept_packing(sy::backends::Backend& backend, const Case& c, const std::vector<float>& want, const Case& next,
                        const std::vector<float>& want_next, const std::function<uint64_t()>& kept,
                        uint64_t kept_after_two_calls) {
  std::vector<sy::backends::BufferPtr> in;
  for (const auto& v : c.inputs) in.push_back(buffer(v));
  const uint64_t kept_before = kept();
  for (int call = 0; call < 4; ++call) {
    INFO("call " << call);
    const auto diff = bit_differences(execute(backend, c, in), want);
    INFO(diff);
    CHECK(diff.empty());
  }
  CHECK(kept() - kept_before == kept_after_two_calls);

  const std::byte* old_weight = in[1]->host()->data();
  in[1].reset();
  (void)backend.memory();  // drops the packing of a weight nobody holds
  in[1] = buffer(next.inputs[1]);
  INFO("the new weight " << (in[1]->host()->data() == old_weight ? "reuses" : "does not reuse")
                         << " the old one's memory");
  for (int call = 0; call < 3; ++call) {
    INFO("new weight, call " << call);
    CHECK(bit_differences(execute(backend, next, in), want_next).empty());
  }
  in.clear();
  (void)backend.memory();

  Case last = next;
  std::visit(
      [](auto& op) {
        if constexpr (std::is_same_v<std::decay_t<decltype(op)>, sy::ConvOp>)
          op.weight.status = sy::TensorStatus::read_write;
        if constexpr (std::is_same_v<std::decay_t<decltype(op)>, sy::MatmulOp>)
          op.rhs.status = sy::TensorStatus::read_write;
      },
      last.ir.op);
  const uint64_t kept_last = kept();
  for (int call = 0; call < 2; ++call) {
    std::vector<sy::backends::BufferPtr> once;
    for (const auto& v : last.inputs) once.push_back(buffer(v));
    CHECK(bit_differences(execute(backend, last, std::move(once)), want_next).empty());
  }
  (void)backend.memory();
  CHECK(kept() <= kept_last);

  backend.trim();
  CHECK(backend.memory().bytes_cached == 0);
}

TEST_CASE("direct f32 convolution keeps a weight's packing from its second call with the same bits",
          "[cpu][f32_gemm][direct_conv]") {
  if (skip_without_avx512f()) return;
  NativeGemm on(true);
  Draw r{15};
  const std::vector<ConvArgs> cases = {
      {{1, 64, 7, 7}, {40, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1}},    // split by channel blocks
      {{1, 16, 41, 40}, {48, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}},  // in row bands on two threads
  };
  for (const unsigned threads : {1u, 2u}) {
    sy::backends::DeviceOptions options;
    options.threads = threads;
    auto cpu_backend = cpu::backend_kind().create(0, options);
    for (const auto& args : cases) {
      const Case c = conv_case(r, args);
      Case next = c;
      next.inputs[1] = values(r, static_cast<int64_t>(c.inputs[1].size()));
      INFO(c.what << " on " << threads << " threads");
      std::vector<float> want, want_next;
      {
        DirectConv gemm(false);
        want = run(*cpu_backend, c);
        want_next = run(*cpu_backend, next);
      }
      DirectConv path(true);
      // Counted per run: the first call packs for itself, the rest read the
      // packing the second made.
      check_kept_packing(
          *cpu_backend, c, want, next, want_next, [] { return cpu::direct_conv_f32_kept_runs(); }, 3);
    }
  }
}

TEST_CASE("native f32 GEMM keeps a weight's packing from its second call with the same bits", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  NativeGemm on(true);
  Draw r{16};
  for (const bool transposed : {true, false}) {  // a linear's [n, k] weight, a matmul's [k, n]
    // Few rows (B read in place when row-major and not kept) and many.
    for (const int64_t m : {int64_t{2}, int64_t{70}}) {
      const int64_t k = 300, n = 40;  // two K blocks, a partial panel
      const Case c = matmul_case(r, Shape{m, k}, transposed ? Shape{n, k} : Shape{k, n}, false, transposed, Shape{n});
      Case next = c;
      next.inputs[1] = values(r, k * n);
      INFO(c.what);
      sy::backends::DeviceOptions options;
      options.threads = 2;
      auto cpu_backend = cpu::backend_kind().create(0, options);
      // What the backend caches beside the packings is its pool's freed
      // blocks: here one result's block, freed and taken again each call
      // (the inputs are not the pool's), so the difference is the packing.
      const std::vector<float> want = run(*cpu_backend, c), want_next = run(*cpu_backend, next);
      const uint64_t packed_bytes = static_cast<uint64_t>(k) * 64 * sizeof(float);  // n padded to 64
      check_kept_packing(
          *cpu_backend, c, want, next, want_next, [&] { return cpu_backend->memory().bytes_cached; }, packed_bytes);
    }
  }
}

TEST_CASE("kept packings stop at the cache limit and the weights past it are packed per call", "[cpu][f32_gemm]") {
  if (skip_native_matmul()) return;
  NativeGemm on(true);
  Draw r{17};
  const int64_t m = 70, k = 300, n = 40;
  const uint64_t packing = static_cast<uint64_t>(k) * 64 * sizeof(float);  // n padded to 64
  sy::backends::DeviceOptions options;
  options.threads = 2;
  options.cache_limit = packing + packing / 2;  // room for one
  auto cpu_backend = cpu::backend_kind().create(0, options);
  const Case a = matmul_case(r, Shape{m, k}, Shape{n, k}, false, true);
  Case b = a;
  b.inputs[1] = values(r, k * n);
  const std::vector<float> want_a = run(*cpu_backend, a), want_b = run(*cpu_backend, b);
  std::vector<sy::backends::BufferPtr> in_a, in_b;
  for (const auto& v : a.inputs) in_a.push_back(buffer(v));
  for (const auto& v : b.inputs) in_b.push_back(buffer(v));
  // (What the pool caches beside: one result's block, the same each call.)
  const uint64_t base = cpu_backend->memory().bytes_cached;
  for (int call = 0; call < 3; ++call) CHECK(bit_differences(execute(*cpu_backend, a, in_a), want_a).empty());
  CHECK(cpu_backend->memory().bytes_cached == base + packing);
  for (int call = 0; call < 3; ++call) CHECK(bit_differences(execute(*cpu_backend, b, in_b), want_b).empty());
  CHECK(cpu_backend->memory().bytes_cached == base + packing);  // b's did not fit
  in_a.clear();
  CHECK(cpu_backend->memory().bytes_cached == base);  // a's went with its weight
  for (int call = 0; call < 2; ++call) CHECK(bit_differences(execute(*cpu_backend, b, in_b), want_b).empty());
  CHECK(cpu_backend->memory().bytes_cached == base + packing);  // b seen before: kept now
}

TEST_CASE("SWITCHYARD_CPU_DIRECT_CONV=0 in the environment leaves dense convolutions on the GEMM",
          "[cpu][direct_env]") {
  // ctest runs this case once more with the variable set (f32_gemm.direct_env_off).
  const char* env = std::getenv("SWITCHYARD_CPU_DIRECT_CONV");
  const bool off = env != nullptr && std::string(env) == "0";
  CHECK(cpu::direct_conv_f32_enabled() == (cpu::native_f32_gemm_enabled() && !off));
  if (skip_without_avx512f()) return;
  NativeGemm on(true);
  Draw r{13};
  const Case c = conv_case(r, {{1, 8, 12, 12}, {16, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}});
  const auto runs = cpu::direct_conv_f32_runs(), gemm_runs = cpu::native_f32_gemm_runs();
  const auto out = run(*backends().cpu, c);
  CHECK(cpu::direct_conv_f32_runs() - runs == (off ? 0u : 1u));
  CHECK(cpu::native_f32_gemm_runs() - gemm_runs == (off ? 1u : 0u));
  const auto magnitude = run(*backends().reference, c, [](float x) { return std::fabs(x); });
  CHECK(differences(out, run(*backends().reference, c), magnitude, 72, "vs reference").empty());
}
