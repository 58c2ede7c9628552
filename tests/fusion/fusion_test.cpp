// SPDX-License-Identifier: Apache-2.0
// Fusion of element-wise chains (issue 20 item 3): the planner's decisions
// on hand-built batches, and fused execution against op-by-op execution,
// bit for bit, through the client API (two runtimes, fusion on and off).

#include "actors/fusion.hpp"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <switchyard/switchyard.hpp>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/f32_gemm.hpp"
#include "support/watchdog.hpp"

namespace sy = switchyard;
using namespace std::chrono_literals;
using sy::DType;
using sy::Shape;
using sy::Tensor;

namespace {

// --- the planner on hand-built batches ----------------------------------------

sy::TensorIr ir(uint64_t id, Shape s = {4, 8}, DType t = DType::f32,
                sy::TensorStatus status = sy::TensorStatus::read_only) {
  return sy::TensorIr{sy::TensorId{id}, std::move(s), t, status};
}
sy::TensorIr last_use(uint64_t id, Shape s = {4, 8}, DType t = DType::f32) {
  return ir(id, std::move(s), t, sy::TensorStatus::read_write);
}
sy::TensorIr out(uint64_t id, Shape s = {4, 8}, DType t = DType::f32) {
  return ir(id, std::move(s), t, sy::TensorStatus::not_init);
}
sy::OperationIr scalar(sy::BinaryKind k, sy::TensorIr in, double v, sy::TensorIr o) {
  return sy::ScalarOp{k, std::move(in), sy::Scalar(v), false, std::move(o)};
}
sy::OperationIr unary(sy::UnaryKind k, sy::TensorIr in, sy::TensorIr o) {
  return sy::UnaryOp{k, std::move(in), std::move(o), 0, 0};
}
sy::OperationIr binary(sy::BinaryKind k, sy::TensorIr a, sy::TensorIr b, sy::TensorIr o) {
  return sy::BinaryOp{k, std::move(a), std::move(b), std::move(o)};
}

/// A tensor the device holds, as the planner's context reports it.
struct Held {
  Shape shape;
  DType dtype = DType::f32;
};

/// The planner against a real cpu backend and a device holding the ready
/// tensors `existing` (1..3: [4, 8] f32, 20: [8] f32); `pending` ids are in
/// flight.
struct Planner {
  std::unique_ptr<sy::backends::Backend> cpu = sy::backends::cpu::backend_kind().create(0, {});
  std::vector<uint64_t> pending;
  std::map<uint64_t, Held> existing = {{1, {{4, 8}}}, {2, {{4, 8}}}, {3, {{4, 8}}}, {20, {{8}}}};

  std::optional<sy::actors::FusedChain> find(std::vector<sy::OperationIr>& ops, size_t first = 0) {
    sy::actors::ChainContext ctx{*cpu,
                                 [&](const sy::TensorIr& t) {
                                   if (std::find(pending.begin(), pending.end(), t.id.value) != pending.end())
                                     return false;
                                   auto it = existing.find(t.id.value);
                                   return it != existing.end() && t.dtype == it->second.dtype &&
                                          t.shape == it->second.shape;
                                 },
                                 [&](sy::TensorId id) { return !existing.contains(id.value); }};
    return sy::actors::find_chain(ops, first, ctx);
  }
};

size_t chain_size(const std::optional<sy::actors::FusedChain>& c) { return c ? c->size : 0; }

using sy::BinaryKind;
using sy::UnaryKind;

TEST_CASE("planner fuses relu of x times 2 plus 1 into one chain", "[fusion][planner]") {
  Planner p;
  std::vector<sy::OperationIr> ops = {scalar(BinaryKind::mul, ir(1), 2, out(100)),
                                      scalar(BinaryKind::add, last_use(100), 1, out(101)),
                                      unary(UnaryKind::relu, last_use(101), out(102))};
  auto chain = p.find(ops);
  REQUIRE(chain_size(chain) == 3);
  REQUIRE(chain->inputs.size() == 1);
  CHECK(chain->inputs[0].id.value == 1);
  CHECK(chain->inputs[0].status == sy::TensorStatus::read_only);
}

TEST_CASE("planner fuses a GELU written by hand with an intermediate used at the end", "[fusion][planner]") {
  // 0.5*x*(1+tanh(0.79788456*(x+0.044715*x*x*x))): `half` lives across the chain.
  Planner p;
  std::vector<sy::OperationIr> ops = {
      scalar(BinaryKind::mul, ir(1), 0.5, out(100)),            // half = 0.5 * x
      scalar(BinaryKind::mul, ir(1), 0.044715, out(101)),       // c = 0.044715 * x
      binary(BinaryKind::mul, last_use(101), ir(1), out(102)),  // c * x
      binary(BinaryKind::mul, last_use(102), ir(1), out(103)),  // c * x * x
      binary(BinaryKind::add, ir(1), last_use(103), out(104)),  // x + ...
      scalar(BinaryKind::mul, last_use(104), 0.79788456, out(105)),
      unary(UnaryKind::tanh, last_use(105), out(106)),
      scalar(BinaryKind::add, last_use(106), 1, out(107)),
      binary(BinaryKind::mul, last_use(100), last_use(107), out(108)),
  };
  auto chain = p.find(ops);
  REQUIRE(chain_size(chain) == 9);
  CHECK(chain->inputs.size() == 1);
}

TEST_CASE("planner leaves an intermediate the client still holds unfused", "[fusion][planner]") {
  Planner p;
  // t100 is read by the add without being its last use: the client holds it.
  std::vector<sy::OperationIr> ops = {scalar(BinaryKind::mul, ir(1), 2, out(100)),
                                      scalar(BinaryKind::add, ir(100), 1, out(101)),
                                      unary(UnaryKind::relu, last_use(101), out(102))};
  CHECK(chain_size(p.find(ops, 0)) == 0);
  p.existing[100] = {{4, 8}};  // the mul ran alone
  CHECK(chain_size(p.find(ops, 1)) == 2);
}

TEST_CASE("planner does not fuse past a pending input", "[fusion][planner]") {
  Planner p;
  p.pending = {2};
  std::vector<sy::OperationIr> ops = {scalar(BinaryKind::mul, ir(1), 2, out(100)),
                                      binary(BinaryKind::add, last_use(100), ir(2), out(101)),
                                      unary(UnaryKind::relu, last_use(101), out(102))};
  CHECK(chain_size(p.find(ops)) == 0);
  p.pending = {1};
  CHECK(chain_size(p.find(ops)) == 0);
  p.pending.clear();
  CHECK(chain_size(p.find(ops)) == 3);
}

TEST_CASE("planner cuts a chain before an op that fails validation", "[fusion][planner]") {
  Planner p;
  // The third op claims an i32 output for an f32 relu: invalid, so it must
  // run alone (and fail there, as unfused).
  std::vector<sy::OperationIr> ops = {scalar(BinaryKind::mul, ir(1), 2, out(100)),
                                      scalar(BinaryKind::add, last_use(100), 1, out(101)),
                                      unary(UnaryKind::relu, last_use(101), out(102, {4, 8}, DType::i32))};
  CHECK(chain_size(p.find(ops)) == 2);
}

TEST_CASE("planner cuts a chain at a change of shape and at an existing output id", "[fusion][planner]") {
  Planner p;
  // A [8] bias computed first and broadcast later: its chain would have two shapes.
  std::vector<sy::OperationIr> broadcast = {scalar(BinaryKind::mul, ir(20, {8}), 2, out(100, {8})),
                                            binary(BinaryKind::add, ir(1), last_use(100, {8}), out(101)),
                                            unary(UnaryKind::relu, last_use(101), out(102))};
  CHECK(chain_size(p.find(broadcast)) == 0);
  p.existing[100] = {{8}};  // the mul ran alone
  CHECK(chain_size(p.find(broadcast, 1)) == 2);
  // A broadcast external input is fine.
  std::vector<sy::OperationIr> bias = {binary(BinaryKind::add, ir(1), ir(20, {8}), out(200)),
                                       unary(UnaryKind::relu, last_use(200), out(201))};
  CHECK(chain_size(p.find(bias)) == 2);
  // An output id that exists already fails unfused (a misbehaving client).
  std::vector<sy::OperationIr> reused = {scalar(BinaryKind::mul, ir(1), 2, out(100)),
                                         unary(UnaryKind::relu, last_use(100), out(3))};
  CHECK(chain_size(p.find(reused)) == 0);
}

TEST_CASE("planner does not fuse an integer division nor past a tensor used after its last use", "[fusion][planner]") {
  Planner p;
  std::vector<sy::OperationIr> divide = {sy::CastOp{ir(1), out(100, {4, 8}, DType::i32)},
                                         binary(BinaryKind::remainder, last_use(100, {4, 8}, DType::i32),
                                                ir(200, {4, 8}, DType::i32), out(101, {4, 8}, DType::i32))};
  p.existing[200] = {{4, 8}, DType::i32};
  CHECK(chain_size(p.find(divide)) == 0);
  std::get<sy::BinaryOp>(divide[1].op).kind = BinaryKind::mul;  // the same chain without the division fuses
  CHECK(chain_size(p.find(divide)) == 2);
  // x's last use is the first op: a later mention must fail unfused (unknown tensor).
  std::vector<sy::OperationIr> stale = {scalar(BinaryKind::mul, last_use(1), 2, out(100)),
                                        binary(BinaryKind::add, last_use(100), ir(1), out(101)),
                                        unary(UnaryKind::relu, last_use(101), out(102))};
  CHECK(chain_size(p.find(stale)) == 0);
}

sy::OperationIr conv3x3(sy::TensorIr in, sy::TensorIr w, sy::TensorIr o) {
  sy::ConvOp c;
  c.input = std::move(in);
  c.weight = std::move(w);
  c.out = std::move(o);
  c.stride = {1, 1};
  c.pad_before = {1, 1};
  c.pad_after = {1, 1};
  c.dilation = {1, 1};
  c.output_padding = {0, 0};
  return c;
}

TEST_CASE("planner lets a convolution head a chain but not join one", "[fusion][planner]") {
  if (!sy::backends::cpu::native_f32_gemm_enabled()) {
    WARN("skipped: no native f32 GEMM here, so the cpu takes no convolution as a chain head");
    return;
  }
  Planner p;
  const Shape img{1, 2, 4, 8}, w{2, 2, 3, 3};
  p.existing[30] = {img};
  p.existing[31] = {w};
  p.existing[32] = {img};
  // relu(conv(x) + r): one chain of three.
  std::vector<sy::OperationIr> block = {conv3x3(ir(30, img), ir(31, w), out(100, img)),
                                        binary(BinaryKind::add, last_use(100, img), ir(32, img), out(101, img)),
                                        unary(UnaryKind::relu, last_use(101, img), out(102, img))};
  CHECK(chain_size(p.find(block)) == 3);
  // A convolution after an element-wise op (same shape) ends that chain
  // and may start its own.
  std::vector<sy::OperationIr> after = {unary(UnaryKind::relu, ir(30, img), out(100, img)),
                                        conv3x3(last_use(100, img), ir(31, w), out(101, img)),
                                        unary(UnaryKind::relu, last_use(101, img), out(102, img))};
  CHECK(chain_size(p.find(after)) == 0);
  p.existing[100] = {img};  // as once the relu ran alone
  CHECK(chain_size(p.find(after, 1)) == 2);
  // A convolution alone, or with its output still wanted, is no chain.
  std::vector<sy::OperationIr> held = {conv3x3(ir(30, img), ir(31, w), out(100, img)),
                                       unary(UnaryKind::relu, ir(100, img), out(101, img))};
  CHECK(chain_size(p.find(held)) == 0);
}

// --- fused against unfused through the client API ----------------------------

/// Two runtimes with one cpu device each, fusion on and off. Batches leave
/// on reads only (a long flush interval), so a chain is never split by the
/// flush timer and the counts below are exact.
struct Pair {
  sy::Runtime fused{options(true)};
  sy::Runtime unfused{options(false)};
  sy::Device on = fused.device("cpu:0");
  sy::Device off = unfused.device("cpu:0");

  static sy::RuntimeOptions options(bool fuse) {
    sy::RuntimeOptions o;
    o.devices = {"cpu:0"};
    o.flush_interval = std::chrono::seconds(30);
    o.fuse_elementwise = fuse;
    return o;
  }
};

/// n values drawn uniformly from [lo, hi).
std::vector<float> uniform_floats(std::mt19937_64& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

sy::TensorData read(const Tensor& t) {
  auto f = t.read();
  REQUIRE(f.wait_for(60s));
  return f.get();
}

sy::DeviceStats stats(const sy::Device& d) {
  auto f = d.stats();
  REQUIRE(f.wait_for(60s));
  return f.get();
}

/// Whether the element at p is a NaN of floating-point dtype t.
bool is_nan_bits(DType t, const unsigned char* p) {
  auto bits = [&]<class U>(U) {
    U u;
    std::memcpy(&u, p, sizeof u);
    return u;
  };
  switch (t) {
    case DType::f32:
      return ((bits(uint32_t{}) >> 23) & 0xff) == 0xff && (bits(uint32_t{}) & 0x7fffff) != 0;
    case DType::f64:
      return ((bits(uint64_t{}) >> 52) & 0x7ff) == 0x7ff && (bits(uint64_t{}) & 0xfffffffffffffull) != 0;
    case DType::f16:
      return ((bits(uint16_t{}) >> 10) & 0x1f) == 0x1f && (bits(uint16_t{}) & 0x3ff) != 0;
    case DType::bf16:
      return ((bits(uint16_t{}) >> 7) & 0xff) == 0xff && (bits(uint16_t{}) & 0x7f) != 0;
    default:
      return false;
  }
}

/// The result or the error of reading `t`, as text that differs whenever
/// the bits, the shape, the dtype or the error differ; a NaN is written as
/// "nan", whatever its sign and payload: of two NaN operands IEEE 754 leaves
/// open which one an add or multiply returns, and the compiler may swap the
/// operands of the unfused kernel's commutative op.
std::string outcome(const Tensor& t) {
  try {
    auto d = read(t);
    std::ostringstream s;
    s << d.shape.to_string() << " " << sy::name_of(d.dtype) << " ";
    const auto* bytes = reinterpret_cast<const unsigned char*>(d.bytes.data());
    const size_t width = sy::size_of(d.dtype);
    for (size_t i = 0; i < d.bytes.size(); ++i) {
      if (i % width == 0 && is_nan_bits(d.dtype, bytes + i)) {
        s << "nan.";
        i += width - 1;
        continue;
      }
      s << std::hex << static_cast<int>(bytes[i]) << ".";
    }
    return s.str();
  } catch (const sy::Error& e) {
    return "error " + std::to_string(static_cast<int>(e.code())) + ": " + e.what();
  }
}

TEST_CASE("relu of x times 2 plus 1 runs fused with the unfused bits", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "relu chain");
  Pair p;
  std::vector<float> v(50000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) * 0.37f - 17.0f;
  auto run = [&](const sy::Device& d) {
    auto x = d.tensor(v, Shape{250, 200});
    // A named result: temporaries die at the end of this statement, before
    // the read, so the batch carries their last uses.
    auto y = (x * 2.0f + 1.0f).relu();
    return outcome(y);
  };
  const auto before = stats(p.on);
  const auto fused = run(p.on);
  CHECK(fused == run(p.off));
  const auto after = stats(p.on);
  CHECK(after.ops_fused - before.ops_fused == 3);
  CHECK(after.ops_executed - before.ops_executed == 4);  // the upload, then three ops, each counted
  CHECK(stats(p.off).ops_fused == 0);
}

TEST_CASE("a GELU chain written by hand runs fused with the unfused bits", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "gelu chain");
  Pair p;
  auto run = [&](const sy::Device& d) {
    auto x = d.uniform(Shape{300, 170}, -4, 4);
    auto y = 0.5f * x * (1.0f + (0.79788456f * (x + 0.044715f * x * x * x)).tanh());
    return outcome(y);
  };
  const auto before = stats(p.on);
  CHECK(run(p.on) == run(p.off));
  CHECK(stats(p.on).ops_fused - before.ops_fused == 9);
}

TEST_CASE("an intermediate the client reads is computed and kept with fusion on", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "held intermediate");
  Pair p;
  auto run = [&](const sy::Device& d) {
    auto x = d.arange(-20, 20, 1, DType::f32).reshape({8, 5});
    auto y = x * 3.0f;           // held: must stay readable
    auto z = (y + 1.0f).relu();  // [add, relu] may fuse, y may not vanish
    return outcome(z) + " | " + outcome(y);
  };
  const auto before = stats(p.on);
  CHECK(run(p.on) == run(p.off));
  CHECK(stats(p.on).ops_fused - before.ops_fused == 2);
}

TEST_CASE("broadcast inputs in fused chains give the unfused bits", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "broadcasts");
  Pair p;
  std::mt19937_64 rng(7);
  auto values = [&](int64_t n) { return uniform_floats(rng, n, -2, 2); };
  // {output shape, broadcast operand shape}: scalar, bias, column, channel
  // bias of NCHW, and [N, 1, W] against [N, C, W] (no band: runs unfused).
  const std::vector<std::pair<Shape, Shape>> cases = {{{64, 300}, {}},
                                                      {{64, 300}, {300}},
                                                      {{64, 300}, {64, 1}},
                                                      {{4, 6, 30, 31}, {6, 1, 1}},
                                                      {{9, 7, 513}, {9, 1, 513}},
                                                      {{3000}, {1}}};
  for (const auto& [shape, small] : cases) {
    const auto big = values(shape.numel());
    const auto bias = values(small.numel());
    auto run = [&](const sy::Device& d) {
      auto x = d.tensor(big, shape);
      auto b = d.tensor(bias, small);
      auto y = ((x * b + b) - 0.25f).clamp(-1.5, 1.5) * 2.0f;
      return outcome(y);
    };
    INFO(shape.to_string() << " with " << small.to_string());
    CHECK(run(p.on) == run(p.off));
  }
  CHECK(stats(p.on).ops_fused > 0);
}

TEST_CASE("16-bit float chains round every op as unfused", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "f16 and bf16");
  Pair p;
  for (auto t : {DType::f16, DType::bf16}) {
    auto run = [&](const sy::Device& d) {
      auto x = d.uniform(Shape{70, 130}, -3, 3).cast(t);
      // (x * 0.1) / 0.1 differs from x once each op rounds to 16 bits; the
      // i64 operand is rounded to the 16-bit type first (type promotion).
      auto i = d.arange(0, 130, 1, DType::i64) + 2049;
      auto y = (((x * 0.1) / 0.1 + i).exp() - 1.0).sigmoid().cast(DType::f32);
      return outcome(y);
    };
    INFO(sy::name_of(t));
    CHECK(run(p.on) == run(p.off));
  }
  CHECK(stats(p.on).ops_fused > 0);
}

TEST_CASE("failing ops inside chains fail the same outputs fused and unfused", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "failures");
  Pair p;
  auto run = [&](const sy::Device& d) {
    auto x = d.arange(0, 60, 1, DType::i32).reshape({6, 10});
    auto zero_somewhere = d.arange(0, 10, 1, DType::i32);  // divisor 0 in column 0
    // A chain around an integer remainder by zero: the remainder fails, the
    // ops after it fail with its error, the ops before it still ran.
    auto before = (x + 1) * 3;
    auto failing = ((before + 2).remainder(zero_somewhere) * 5).neg();
    // A scalar zero divisor fails too; a scalar 7 does not (and may fuse).
    auto by_zero = ((x * 2).floor_divide(0) + 1).abs();
    auto by_seven = ((x * 2).floor_divide(7) + 1).abs();
    return outcome(before) + " | " + outcome(failing) + " | " + outcome(by_zero) + " | " + outcome(by_seven);
  };
  const auto fused = run(p.on);
  CHECK(fused.find("division by zero") != std::string::npos);
  CHECK(fused == run(p.off));
}

TEST_CASE("a failed input breaks the chain with the same error", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "poisoned input");
  Pair p;
  auto run = [&](const sy::Device& d) {
    auto bad = d.arange(0, 8, 1, DType::i64).remainder(d.zeros({8}, DType::i64));
    auto y = (bad * 2 + 1).abs();
    return outcome(y);
  };
  const auto fused = run(p.on);
  CHECK(fused.rfind("error", 0) == 0);
  CHECK(fused == run(p.off));
}

TEST_CASE("each op of a fused chain is traced", "[fusion]") {
  sy::testing::Watchdog watchdog(120s, "trace");
  const std::string path = "fusion_trace_" + std::to_string(std::random_device{}()) + ".json";
  {
    auto o = Pair::options(true);
    o.trace_path = path;
    sy::Runtime rt(o);
    auto x = rt.device("cpu:0").ones({16, 16});
    auto y = (x * 2.0f + 1.0f).relu();
    CHECK(read(y).bytes.size() == 16 * 16 * 4);
  }
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream text;
  text << f.rdbuf();
  std::remove(path.c_str());
  for (const char* piece : {"1 of 3", "2 of 3", "3 of 3", "\"mul_scalar\"", "\"relu\""}) {
    INFO(piece);
    CHECK(text.str().find(piece) != std::string::npos);
  }
}

// --- convolutions heading chains ---------------------------------------------

TEST_CASE("a ResNet block's relu and residual add run in the convolution's store with the unfused bits",
          "[fusion][conv]") {
  sy::testing::Watchdog watchdog(120s, "conv chains");
  Pair p;
  std::mt19937_64 rng(3);
  auto values = [&](int64_t n) { return uniform_floats(rng, n, -1, 1); };
  auto xv = values(2 * 8 * 10 * 11);
  xv[17] = std::numeric_limits<float>::quiet_NaN();  // image 0, channel 0, (1, 6)
  xv[900] = std::numeric_limits<float>::infinity();
  xv[1500] = -std::numeric_limits<float>::infinity();
  const auto w1 = values(8 * 8 * 9), b1 = values(8), w2 = values(8 * 8 * 9), b2 = values(8);
  const auto w3 = values(16 * 8 * 9), b3 = values(16), wd = values(16 * 8), bd = values(16);
  const auto w4 = values(16 * 16 * 9);
  auto run = [&](const sy::Device& d) {
    auto x = d.tensor(xv, Shape{2, 8, 10, 11});
    auto t = [&](const std::vector<float>& v, Shape s) { return d.tensor(v, std::move(s)); };
    // A basic block, then a downsampling one, as torchvision's ResNet
    // exports them: relu(conv); relu(conv + identity); relu(conv + conv).
    auto h = sy::nn::conv2d(x, t(w1, {8, 8, 3, 3}), t(b1, {8}), 1, 1).relu();
    auto y = (sy::nn::conv2d(h, t(w2, {8, 8, 3, 3}), t(b2, {8}), 1, 1) + x).relu();
    auto a = sy::nn::conv2d(y, t(w3, {16, 8, 3, 3}), t(b3, {16}), 2, 1);
    auto z = (a + sy::nn::conv2d(y, t(wd, {16, 8, 1, 1}), t(bd, {16}), 2, 0)).relu();
    // Chains the store does not cover run after it, over its result.
    auto s = (sy::nn::conv2d(z, t(w4, {16, 16, 3, 3}), {}, 1, 1) * 0.5f).sigmoid();
    return outcome(h) + " | " + outcome(y) + " | " + outcome(a) + " | " + outcome(z) + " | " + outcome(s);
  };
  const auto before = stats(p.on);
  const auto fused = run(p.on);
  CHECK(fused.find("nan") != std::string::npos);
  CHECK(fused == run(p.off));
  if (sy::backends::cpu::native_f32_gemm_enabled())  // else no convolution heads a chain
    CHECK(stats(p.on).ops_fused - before.ops_fused == 2 + 3 + 3 + 3);
  CHECK(stats(p.off).ops_fused == 0);
}

TEST_CASE("a convolution's output read again after its relu or add keeps the unfused bits", "[fusion][conv]") {
  sy::testing::Watchdog watchdog(120s, "conv outputs read later");
  Pair p;
  std::mt19937_64 rng(5);
  auto values = [&](int64_t n) { return uniform_floats(rng, n, -1, 1); };
  const auto xv = values(2 * 4 * 6 * 7), w = values(4 * 4 * 9), r = values(2 * 4 * 6 * 7);
  auto run = [&](const sy::Device& d) {
    auto x = d.tensor(xv, Shape{2, 4, 6, 7});
    auto weight = d.tensor(w, Shape{4, 4, 3, 3});
    auto residual = d.tensor(r, Shape{2, 4, 6, 7});
    // The convolution's own output is read after the relu, and after the add.
    auto c1 = sy::nn::conv2d(x, weight, {}, 1, 1);
    auto a = c1.relu() + c1;
    c1 = {};
    auto c2 = sy::nn::conv2d(x, weight, {}, 1, 1);
    auto b = (c2 + residual).relu() * c2;
    c2 = {};
    auto c3 = sy::nn::conv2d(x, weight, {}, 1, 1);
    auto s = c3 + residual;
    auto c = s.relu() - s;  // the add's output read after the relu
    s = {};
    c3 = {};
    return outcome(a) + " | " + outcome(b) + " | " + outcome(c);
  };
  const auto before = stats(p.on);
  CHECK(run(p.on) == run(p.off));
  if (sy::backends::cpu::native_f32_gemm_enabled()) CHECK(stats(p.on).ops_fused - before.ops_fused > 0);
}

// --- matmuls heading chains -------------------------------------------------

TEST_CASE("an MLP's relus and residual adds run in the linear layers' store with the unfused bits",
          "[fusion][matmul]") {
  sy::testing::Watchdog watchdog(120s, "matmul chains");
  Pair p;
  std::mt19937_64 rng(11);
  auto values = [&](int64_t n) { return uniform_floats(rng, n, -1, 1); };
  auto xv = values(5 * 24);
  xv[7] = std::numeric_limits<float>::quiet_NaN();  // row 0: NaN through every layer
  xv[30] = std::numeric_limits<float>::infinity();
  const auto w1 = values(40 * 24), b1 = values(40), w2 = values(40 * 40), b2 = values(40);
  const auto w3 = values(16 * 40), w4 = values(4 * 16), b4 = values(4);
  const auto bv = values(3 * 5 * 24), bw = values(24 * 16), br = values(3 * 5 * 16);
  // 2-D biases broadcast in a pass: no head then.
  const auto b2d = values(5 * 16), w5 = values(16 * 24);
  auto run = [&](const sy::Device& d) {
    auto t = [&](const std::vector<float>& v, Shape s) { return d.tensor(v, std::move(s)); };
    auto x = t(xv, {5, 24});
    auto h = x.linear(t(w1, {40, 24}), t(b1, {40})).relu();        // 2 ops
    auto y = (h.linear(t(w2, {40, 40}), t(b2, {40})) + h).relu();  // 3
    auto z = (y.linear(t(w3, {16, 40})) * 0.5f).sigmoid();         // 3: the rest after the store
    auto narrow = z.linear(t(w4, {4, 16}), t(b4, {4})).relu();     // 4 columns: no head
    auto batched = (t(bv, {3, 5, 24}).matmul(t(bw, {24, 16})) + t(br, {3, 5, 16})).relu();  // 3
    auto wide_bias = (x.matmul(t(bw, {24, 16})) + t(b2d, {5, 16})).relu();                  // 3: a plain add, then relu
    auto biased2d = t(xv, {5, 24}).linear(t(w5, {16, 24}), t(b2d, {5, 16})).relu();         // no head
    return outcome(h) + " | " + outcome(y) + " | " + outcome(z) + " | " + outcome(narrow) + " | " + outcome(batched) +
           " | " + outcome(wide_bias) + " | " + outcome(biased2d);
  };
  const auto before = stats(p.on);
  const auto fused = run(p.on);
  CHECK(fused.find("nan") != std::string::npos);
  CHECK(fused == run(p.off));
  if (sy::backends::cpu::native_f32_gemm_enabled() && !sy::backends::cpu::openblas_runs_avx512())
    CHECK(stats(p.on).ops_fused - before.ops_fused == 2 + 3 + 3 + 3 + 3);
  CHECK(stats(p.off).ops_fused == 0);
}

TEST_CASE("a linear layer's output read again after its relu or add keeps the unfused bits", "[fusion][matmul]") {
  sy::testing::Watchdog watchdog(120s, "matmul outputs read later");
  Pair p;
  std::mt19937_64 rng(13);
  auto values = [&](int64_t n) { return uniform_floats(rng, n, -1, 1); };
  const auto xv = values(6 * 20), w = values(32 * 20), b = values(32), r = values(6 * 32), w2 = values(20 * 32);
  auto run = [&](const sy::Device& d) {
    auto x = d.tensor(xv, Shape{6, 20});
    auto weight = d.tensor(w, Shape{32, 20});
    auto bias = d.tensor(b, Shape{32});
    auto residual = d.tensor(r, Shape{6, 32});
    auto l1 = x.linear(weight, bias);
    auto a = l1.relu() + l1;
    l1 = {};
    auto l2 = x.linear(weight, bias);
    auto c = (l2 + residual).relu() * l2;
    l2 = {};
    // A chain of one matmul into another: the second is no part of the first's chain.
    auto l3 = x.linear(weight, bias).relu().linear(d.tensor(w2, Shape{20, 32})).relu();
    return outcome(a) + " | " + outcome(c) + " | " + outcome(l3);
  };
  const auto before = stats(p.on);
  CHECK(run(p.on) == run(p.off));
  if (sy::backends::cpu::native_f32_gemm_enabled() && !sy::backends::cpu::openblas_runs_avx512())
    CHECK(stats(p.on).ops_fused - before.ops_fused > 0);
}

// --- random chains over every dtype -----------------------------------------

using Rng = std::mt19937_64;
int64_t pick(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

sy::TensorData random_data(Rng& rng, DType t, const Shape& s) {
  auto bytes = sy::Bytes::allocate(static_cast<size_t>(s.numel()) * sy::size_of(t));
  sy::visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    auto* p = bytes.mutable_as<T>();
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t r = pick(rng, 0, 99);
      double v = static_cast<double>(pick(rng, -300, 300)) / 37;
      if (r == 0) v = std::numeric_limits<double>::quiet_NaN();
      if (r == 1) v = std::numeric_limits<double>::infinity();
      if (r == 2) v = -0.0;
      if (r == 3) v = static_cast<double>(pick(rng, -100000, 100000));
      if constexpr (std::is_same_v<T, bool>)
        reinterpret_cast<uint8_t*>(p)[i] = pick(rng, 0, 1);
      else if constexpr (std::is_integral_v<T>)
        p[i] = static_cast<T>(pick(rng, -130, 300));  // wraps in the narrow types
      else
        p[i] = static_cast<T>(v);
    }
  });
  return sy::TensorData(s, t, std::move(bytes));
}

/// One step of a chain: the tensor so far and the leaves in, a tensor out
/// (throws sy::Error at the call when the rules refuse the combination).
using Step = std::function<Tensor(const Tensor&, const std::vector<Tensor>&)>;

Step random_step(Rng& rng, size_t leaves) {
  const auto leaf = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(leaves) - 1));
  const auto dt = sy::all_dtypes[pick(rng, 0, std::size(sy::all_dtypes) - 1)];
  const auto uk = static_cast<UnaryKind>(pick(rng, 0, sy::unary_kind_count - 1));
  const auto bk = static_cast<BinaryKind>(pick(rng, 0, sy::binary_kind_count - 1));
  const bool swap = pick(rng, 0, 1) == 1;
  const int64_t scalar_kind = pick(rng, 0, 2);
  const double value = static_cast<double>(pick(rng, -40, 40)) / 8;
  const double lo = static_cast<double>(pick(rng, -30, 10)) / 4, hi = lo + static_cast<double>(pick(rng, 0, 40)) / 4;
  switch (pick(rng, 0, 6)) {
    case 0:
      if (uk == UnaryKind::clamp) return [=](const Tensor& t, const auto&) { return t.clamp(lo, hi); };
      return [=](const Tensor& t, const auto&) { return t.unary(uk); };
    case 1:
      return [=](const Tensor& t, const std::vector<Tensor>& l) {
        return swap ? l[leaf].binary(bk, t) : t.binary(bk, l[leaf]);
      };
    case 2:
      return [=](const Tensor& t, const auto&) {
        const sy::Scalar s = scalar_kind == 0   ? sy::Scalar(value)
                             : scalar_kind == 1 ? sy::Scalar(static_cast<int64_t>(value * 3))
                                                : sy::Scalar(value > 0);
        return t.binary(bk, s, swap);
      };
    case 3:
      return [=](const Tensor& t, const auto&) { return t.cast(dt); };
    case 4:  // a comparison, then where() picks between the chain and a leaf
      return [=](const Tensor& t, const std::vector<Tensor>& l) {
        auto cond = t.binary(BinaryKind::gt, l[leaf]);
        return swap ? sy::where(cond, t, l[leaf]) : sy::where(cond, l[leaf], t);
      };
    case 5:
      return [=](const Tensor& t, const std::vector<Tensor>& l) {
        return sy::where(l[leaf].cast(DType::boolean), t, sy::Scalar(value) + t.cast(dt) * 0);
      };
    default:
      return [=](const Tensor& t, const auto&) { return t.clamp_min(lo); };
  }
}

TEST_CASE("random element-wise chains over every dtype give the same bits fused and unfused", "[fusion][random]") {
  sy::testing::Watchdog watchdog(600s, "random chains");
  Pair p;
  const std::vector<Shape> shapes = {{67, 613}, {5, 3}, {}, {0, 4}, {2100}, {3, 1, 700}};
  size_t chains = 0, ops = 0;
  const auto before = stats(p.on);
  for (uint64_t seed = 0; seed < 160; ++seed) {
    Rng rng(0xf05e0000 + seed);
    const Shape shape = shapes[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(shapes.size()) - 1))];
    // Leaves: the full shape, and broadcast ones (trailing, leading, scalar).
    std::vector<sy::TensorData> leaves;
    for (int k = 0; k < 4; ++k) {
      Shape s = shape;
      const int64_t mode = k == 0 ? 0 : pick(rng, 0, 3);
      if (mode == 1 && s.rank() > 0) s.dims.erase(s.dims.begin());
      if (mode == 2 && s.rank() > 0) s.dims.back() = 1;
      if (mode == 3) s = Shape{};
      leaves.push_back(random_data(rng, sy::all_dtypes[pick(rng, 0, std::size(sy::all_dtypes) - 1)], s));
    }
    // Keep the steps the rules accept (checked on the unfused runtime).
    std::vector<Tensor> ref_leaves;
    for (const auto& l : leaves) ref_leaves.push_back(p.off.from_data(l));
    std::vector<Step> steps;
    Tensor t = ref_leaves[0];
    for (int attempt = 0; attempt < 30 && steps.size() < 8; ++attempt) {
      auto step = random_step(rng, leaves.size());
      try {
        t = step(t, ref_leaves);
        steps.push_back(step);
      } catch (const sy::Error&) {
      }
    }
    const bool hold = pick(rng, 0, 3) == 0;  // sometimes the client keeps an intermediate
    auto run = [&](const sy::Device& d) {
      std::vector<Tensor> ls;
      for (const auto& l : leaves) ls.push_back(d.from_data(l));
      Tensor x = ls[0];
      Tensor held;
      for (size_t k = 0; k < steps.size(); ++k) {
        x = steps[k](x, ls);
        if (hold && k == steps.size() / 2) held = x;
      }
      return outcome(x) + (held.defined() ? " | " + outcome(held) : "");
    };
    INFO("chain " << seed << " of " << steps.size() << " steps on " << shape.to_string());
    CHECK(run(p.on) == run(p.off));
    ++chains;
    ops += steps.size();
  }
  const auto fused = stats(p.on).ops_fused - before.ops_fused;
  WARN(chains << " chains, " << ops << " steps, " << fused << " ops ran fused");
  CHECK(fused > ops / 2);
  CHECK(stats(p.off).ops_fused == 0);
}

// Chains of exact IEEE operations on one float type run as register
// programs (backends/cpu/vector_program.hpp): vectors, a few at a time, a
// partial group at the end. Lengths around the vector and group sizes,
// NaN, infinities, signed zeros and subnormals, scalars on either side, an
// operand used twice, one-element inputs as constants, bias and column
// broadcasts gathered per tile, long chains that run out of registers.
TEST_CASE("random chains of exact float ops give the unfused bits", "[fusion][random]") {
  sy::testing::Watchdog watchdog(600s, "register programs");
  Pair p;
  // {rows, columns}: lengths around the vector and group sizes, and tiles.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},   {1, 3},    {3, 5},    {1, 16},   {17, 1},
                                                           {7, 9},   {2, 32},   {5, 13},   {129, 1},  {10, 100},
                                                           {3, 683}, {1, 2049}, {97, 413}, {7, 10000}};
  const std::vector<UnaryKind> unaries = {UnaryKind::neg,   UnaryKind::abs,       UnaryKind::relu,  UnaryKind::sign,
                                          UnaryKind::floor, UnaryKind::ceil,      UnaryKind::round, UnaryKind::sqrt,
                                          UnaryKind::rsqrt, UnaryKind::reciprocal};
  const std::vector<BinaryKind> binaries = {BinaryKind::add, BinaryKind::sub,     BinaryKind::mul,
                                            BinaryKind::div, BinaryKind::maximum, BinaryKind::minimum};
  size_t steps_total = 0;
  const auto before = stats(p.on);
  for (uint64_t seed = 0; seed < 120; ++seed) {
    Rng rng(0x5e9a0000 + seed);
    const DType dtype = pick(rng, 0, 1) == 0 ? DType::f32 : DType::f64;
    const auto [rows, cols] = shapes[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(shapes.size()) - 1))];
    const int64_t n = rows * cols;
    auto values = [&](int64_t count) {
      std::vector<double> v(static_cast<size_t>(count));
      for (auto& x : v) {
        switch (pick(rng, 0, 19)) {
          case 0:
            x = std::numeric_limits<double>::quiet_NaN();
            break;
          case 1:
            x = pick(rng, 0, 1) ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
            break;
          case 2:
            x = pick(rng, 0, 1) ? 0.0 : -0.0;
            break;
          case 3:
            x = (dtype == DType::f32 ? 1e-39 : 1e-310) * static_cast<double>(pick(rng, -9, 9));
            break;
          case 4:
            x = static_cast<double>(pick(rng, -8, 8)) + 0.5;
            break;  // ties for round
          default:
            x = static_cast<double>(pick(rng, -4000, 4000)) / 97;
        }
      }
      return v;
    };
    // Leaves: three of the output's shape, and one- or no-dimension scalars.
    std::vector<std::pair<std::vector<double>, Shape>> leaves;
    for (int k = 0; k < 3; ++k) leaves.emplace_back(values(n), Shape{rows, cols});
    leaves.emplace_back(values(1), Shape{});
    leaves.emplace_back(values(1), Shape{1});
    leaves.emplace_back(values(cols), Shape{cols});     // a bias: period cols
    leaves.emplace_back(values(rows), Shape{rows, 1});  // a column: repeat cols
    // A step reads the latest value and maybe an earlier one: values read
    // again later must survive the accumulator moving on (spills).
    using Values = std::vector<Tensor>;
    const int64_t length = pick(rng, 2, seed % 10 == 0 ? 60 : 12);
    std::vector<std::function<Tensor(const Values&, const Values&)>> steps;
    for (int64_t k = 0; k < length; ++k) {
      const auto leaf = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(leaves.size()) - 1));
      const auto back = static_cast<size_t>(pick(rng, 1, 6));  // an earlier value, clamped to the first
      const auto uk = unaries[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(unaries.size()) - 1))];
      const auto bk = binaries[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(binaries.size()) - 1))];
      const bool swap = pick(rng, 0, 1) == 1;
      const double s = static_cast<double>(pick(rng, -50, 50)) / 8;
      const double lo = static_cast<double>(pick(rng, -30, 10)) / 4,
                   hi = lo + static_cast<double>(pick(rng, -4, 40)) / 4;
      auto pair = [=](const Tensor& a, const Tensor& b) { return swap ? b.binary(bk, a) : a.binary(bk, b); };
      auto earlier = [=](const Values& v) { return v[v.size() - std::min(back, v.size())]; };
      switch (pick(rng, 0, 7)) {
        case 0:
          steps.push_back([=](const Values& v, const Values&) { return v.back().unary(uk); });
          break;
        case 1:
          steps.push_back([=](const Values& v, const Values& l) { return pair(v.back(), l[leaf]); });
          break;
        case 2:
          steps.push_back([=](const Values& v, const Values&) { return v.back().binary(bk, sy::Scalar(s), swap); });
          break;
        case 3:
          steps.push_back([=](const Values& v, const Values&) { return v.back().binary(bk, v.back()); });
          break;
        case 4:
          steps.push_back([=](const Values& v, const Values&) { return v.back().clamp(lo, hi); });
          break;
        case 5:
          steps.push_back(
              [=](const Values& v, const Values&) { return swap ? v.back().clamp_min(lo) : v.back().clamp_max(hi); });
          break;
        case 6:
          steps.push_back([=](const Values& v, const Values&) { return pair(v.back(), earlier(v)); });
          break;
        default:
          steps.push_back([=](const Values& v, const Values&) { return v.back().binary(bk, sy::Scalar(s)).unary(uk); });
      }
    }
    auto run = [&](const sy::Device& d) {
      Values ls;
      for (const auto& [v, shape] : leaves) ls.push_back(d.tensor(v, shape).cast(dtype));
      REQUIRE(d.sync().wait_for(60s));  // the leaves' casts run apart from the chain
      Values values = {ls[0]};
      for (const auto& step : steps) values.push_back(step(values, ls));
      Tensor x = values.back();
      values.clear();  // every intermediate's last use is in the batch the read sends
      return outcome(x);
    };
    INFO("chain " << seed << " of " << steps.size() << " steps, " << sy::name_of(dtype) << " [" << rows << ", " << cols
                  << "]");
    CHECK(run(p.on) == run(p.off));
    steps_total += steps.size();
  }
  const auto fused = stats(p.on).ops_fused - before.ops_fused;
  WARN(steps_total << " steps, " << fused << " ops ran fused");
  CHECK(fused > steps_total / 2);
}

}  // namespace
