// SPDX-License-Identifier: Apache-2.0
// Every protocol type round-trips through CAF's binary serializer: the same
// messages cross the network later, and an unregistered or half-inspected
// type would silently serialize to nothing.

// GCC 12 reports the one-byte copy of a bool inside CAF's serializer as out
// of bounds once it inlines the serializing of a whole op (a false positive
// of -Warray-bounds and -Wstringop-overread on inlined memcpy ranges); the
// copies are of one byte.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include <caf/all.hpp>

#include "switchyard/messages/id_slots.hpp"
#include "switchyard/messages/op_rules.hpp"
#include "switchyard/messages/protocol.hpp"

using namespace switchyard;

namespace {

struct Config : caf::actor_system_config {
  Config() { register_message_types(*this); }
};

template <class T>
T round_trip(caf::actor_system& sys, T value) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(value));
  T copy;
  caf::binary_deserializer source{sys, buf};
  auto err = source(copy);
  REQUIRE_FALSE(err);
  return copy;
}

TensorIr ir(uint64_t id, Shape s, DType t, TensorStatus st = TensorStatus::read_only) {
  return TensorIr{TensorId{id}, std::move(s), t, st};
}

}  // namespace

TEST_CASE("TensorData round-trips as one byte blob", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto d = TensorData::from(std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f}, Shape{2, 3});
  auto back = round_trip(sys, d);
  CHECK(back.shape == Shape{2, 3});
  CHECK(back.dtype == DType::f32);
  CHECK(std::vector<float>(back.as<float>().begin(), back.as<float>().end()) ==
        std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f});
}

TEST_CASE("Bytes::allocate gives aligned writable blocks of the size asked on both sides of the huge-page size",
          "[messages]") {
  // From 4 MiB a block is placed on a 2 MiB boundary and advised as huge
  // pages (messages/src/bytes.cpp); what a caller sees must not change.
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, (size_t{4} << 20) - 65, (size_t{4} << 20) - 1,
                      size_t{4} << 20, (size_t{4} << 20) + 1, (size_t{9} << 20) + 3}) {
    auto b = switchyard::Bytes::allocate(size);
    REQUIRE(b.size() == size);
    auto* p = b.mutable_data();
    CHECK(reinterpret_cast<uintptr_t>(p) % switchyard::Bytes::alignment == 0);
    if (size == 0) continue;
    p[size - 1] = std::byte{2};
    p[0] = std::byte{1};
    auto copy = b;  // shares the block
    CHECK(copy.data()[0] == std::byte{1});
    CHECK(copy.data()[size - 1] == (size == 1 ? std::byte{1} : std::byte{2}));
  }
}

TEST_CASE("TensorIr crosses as one compact block and a declared rank larger than the message is refused",
          "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  // Scalars, inline dims, dims on the heap (more than Dims' inline six),
  // the largest rank the op rules accept, ids and extents at their limits.
  for (const auto& shape : {Shape{}, Shape{1}, Shape{2, 3, 4, 5, 6, 7, 8}, Shape(std::vector<int64_t>(16, 1)),
                            Shape{0, int64_t{1} << 40}}) {
    auto x = ir(UINT64_MAX, shape, DType::bf16, TensorStatus::read_write);
    auto back = round_trip(sys, x);
    CHECK(back.id == x.id);
    CHECK(back.shape == x.shape);
    CHECK(back.dtype == DType::bf16);
    CHECK(back.status == TensorStatus::read_write);
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    REQUIRE_FALSE(sink(x));
    CHECK(buf.size() == 14 + 8 * shape.rank());
  }
  // A hostile rank: 2^31 axes announced, 16 bytes of them sent. Refused
  // before anything is allocated for them.
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(ir(7, Shape{2, 2}, DType::f32)));
  const uint32_t huge = uint32_t{1} << 31;
  std::memcpy(buf.data() + 10, &huge, 4);
  TensorIr back;
  caf::binary_deserializer source{sys, buf};
  auto err = source(back);
  REQUIRE(err);
  CHECK(describe(err).code == Errc::protocol_error);
  CHECK_THAT(describe(err).message, Catch::Contains("2147483648 axes"));
  CHECK(back.shape.dims.capacity() <= Dims::inline_capacity);
  // Cut short: the dims end before the rank says.
  buf.resize(buf.size() - 8);
  std::memcpy(buf.data() + 10, "\x02\0\0\0", 4);
  caf::binary_deserializer cut{sys, buf};
  CHECK(cut(back));
}

TEST_CASE("Bytes::slice shares its block and keeps copy-on-write exact", "[messages]") {
  using switchyard::Bytes;
  auto whole = Bytes::allocate(1000);
  auto* w = whole.mutable_data();
  for (size_t i = 0; i < 1000; ++i) w[i] = static_cast<std::byte>(i % 251);
  {
    // An aligned offset: a view into the same block, no copy.
    auto part = whole.slice(128, 500);
    REQUIRE(part.size() == 500);
    CHECK(part.data() == whole.data() + 128);
    CHECK(part.data()[0] == static_cast<std::byte>(128 % 251));
    CHECK(part.data()[499] == static_cast<std::byte>(627 % 251));
    // The block has two holders now: neither may write in place.
    CHECK_FALSE(whole.unique());
    CHECK_FALSE(part.unique());
    auto* own = part.mutable_data();  // copies the 500 bytes first
    CHECK(own != whole.data() + 128);
    own[0] = std::byte{7};
    CHECK(whole.data()[128] == static_cast<std::byte>(128 % 251));
    CHECK(part.data()[1] == static_cast<std::byte>(129 % 251));
    CHECK(part.size() == 500);
  }
  CHECK(whole.unique());
  {
    // A view outlives the Bytes it was cut from.
    Bytes tail;
    {
      auto source = Bytes::copy_of(whole.data(), 1000);
      tail = source.slice(960, 40);
    }
    CHECK(tail.unique());
    CHECK(tail.data()[39] == static_cast<std::byte>(999 % 251));
  }
  {
    // An offset off the alignment would break Bytes' promise: a copy.
    auto odd = whole.slice(3, 10);
    CHECK(odd.data() != whole.data() + 3);
    CHECK(reinterpret_cast<uintptr_t>(odd.data()) % Bytes::alignment == 0);
    CHECK(odd.data()[0] == std::byte{3});
    CHECK(whole.unique());
  }
}

TEST_CASE("Bool bytes other than 0 and 1 from a peer arrive as 1", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  const uint8_t raw[] = {0, 1, 2, 255, 0, 128};
  TensorData d{Shape{6}, DType::boolean, Bytes::copy_of(raw, sizeof raw)};
  auto back = round_trip(sys, d);
  auto bytes = back.as<uint8_t>();
  CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == std::vector<uint8_t>{0, 1, 1, 1, 0, 1});
  // The same bytes as u8 are data, not truth values: untouched.
  d.dtype = DType::u8;
  auto u8 = round_trip(sys, d).to_vector<int>();
  CHECK(u8 == std::vector<int>{0, 1, 2, 255, 0, 128});
}

TEST_CASE("canonicalize_bools rewrites a private copy of shared bytes", "[messages]") {
  const uint8_t raw[] = {3, 0, 1};
  TensorData d{Shape{3}, DType::boolean, Bytes::copy_of(raw, sizeof raw)};
  Bytes callers = d.bytes;  // the caller still holds the block
  canonicalize_bools(d);
  CHECK(d.bytes.data() != callers.data());
  CHECK(d.bytes.as<uint8_t>()[0] == 1);
  CHECK(callers.as<uint8_t>()[0] == 3);
  // Canonical data is left alone: no copy.
  auto* before = d.bytes.data();
  canonicalize_bools(d);
  CHECK(d.bytes.data() == before);
}

TEST_CASE("Every op family round-trips through the binary serializer", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto a = ir(1, {2, 3}, DType::f32), b = ir(2, {3}, DType::f32), o = ir(3, {2, 3}, DType::f32, TensorStatus::not_init);
  std::vector<OperationIr> ops{
      FromDataOp{o, TensorData::from(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3})},
      FillOp{FillKind::arange, ir(4, {5}, DType::i64), 1.0, 2.0},
      RandomOp{RandomKind::normal, o, 0.5, 2.0},
      UnaryOp{UnaryKind::clamp, a, o, -1.0, 1.0},
      BinaryOp{BinaryKind::atan2, a, b, o},
      ScalarOp{BinaryKind::pow, a, int64_t{3}, true, o},
      ReduceOp{ReduceKind::var, a, ir(5, {2}, DType::f32), {1}, false, 0},
      SoftmaxOp{a, o, 1, true},
      MatmulOp{a, ir(6, {3, 4}, DType::f32), ir(7, {4}, DType::f32), ir(8, {2, 4}, DType::f32), true, false},
      CastOp{a, ir(9, {2, 3}, DType::i64)},
      ViewOp{a, ir(10, {3, 2}, DType::f32), 0, {1, 3}},
      SliceAssignOp{a, ir(11, {2}, DType::f32), o, 1, {3}},
      CatOp{{a, a}, ir(12, {4, 3}, DType::f32), 0},
      PadOp{a, ir(13, {4, 5}, DType::f32), {1, 1}, {1, 1}, -1.0},
      IndexOp{IndexKind::scatter_add, a, ir(14, {2, 3}, DType::i64), a, o, 1},
      WhereOp{ir(15, {2, 3}, DType::boolean), a, b, o},
      DropOp{TensorId{99}},
      SeedOp{12345},
      ConvOp{ir(16, {1, 2, 5}, DType::f32),
             ir(17, {4, 1, 3}, DType::f32),
             ir(18, {4}, DType::f32),
             ir(19, {1, 4, 3}, DType::f32),
             {2},
             {1},
             {0},
             {1},
             {1},
             2,
             true},
      PoolOp{PoolKind::adaptive_max_indices, a, ir(20, {2, 2}, DType::i64), {}, {}, {}, {}, {}, {2}, true, false, 3},
      NormOp{NormKind::batch, a, ir(16, {3}, DType::f32), ir(17, {3}, DType::f32), ir(18, {3}, DType::f32),
             ir(19, {3}, DType::f32), o, 0, 1e-3},
      AttentionOp{ir(20, {2, 4, 8}, DType::f32), ir(21, {2, 5, 8}, DType::f32), ir(22, {2, 5, 3}, DType::f32),
                  ir(23, {4, 5}, DType::boolean), ir(24, {2, 4, 3}, DType::f32), false, 0.25},
      ScanOp{ScanKind::cumprod, a, ir(25, {2, 3}, DType::f64), 1},
      SortOp{SortKind::topk, a, ir(26, {2, 2}, DType::i64), 1, 2, true, false},
  };
  REQUIRE(ops.size() == std::variant_size_v<OperationIr::Variant>);
  auto back = round_trip(sys, ops);
  REQUIRE(back.size() == ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    CHECK(back[i].op.index() == ops[i].op.index());
    CHECK(back[i].name() == ops[i].name());
    // Serializing the copy again gives the same bytes: every field travelled.
    std::vector<char> x, y;
    caf::binary_serializer sx{sys, x}, sy{sys, y};
    REQUIRE_FALSE(sx(ops[i]));
    REQUIRE_FALSE(sy(back[i]));
    CHECK(x == y);
  }
  auto* m = std::get_if<MatmulOp>(&back[8].op);
  REQUIRE(m != nullptr);
  CHECK(m->transpose_lhs);
  CHECK(m->bias.id == TensorId{7});
  // Found by type, not position: other families may be appended before these.
  auto find = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    for (auto& o : back)
      if (auto* p = std::get_if<T>(&o.op)) return p;
    return static_cast<T*>(nullptr);
  };
  auto* at = find(static_cast<AttentionOp*>(nullptr));
  REQUIRE(at != nullptr);
  CHECK(at->scale == 0.25);
  CHECK(at->mask.id == TensorId{23});
  auto* so = find(static_cast<SortOp*>(nullptr));
  REQUIRE(so != nullptr);
  CHECK((so->k == 2 && so->descending && !so->sorted));
}

// Found by decode_fuzzer: CAF 0.17's pack754 never returns for +-inf and
// garbles NaN, so a fill with inf hung the sending thread and a clamp
// without bounds (NaN) arrived with garbage bounds on a worker.
TEST_CASE("Non-finite and subnormal op parameters cross the wire bit-exactly", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto o = ir(1, {4}, DType::f32, TensorStatus::not_init);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double tiny = std::numeric_limits<double>::denorm_min();
  for (double v : {inf, -inf, nan, -nan, tiny, -0.0, 1e308, 0.1}) {
    INFO("value " << v);
    std::vector<OperationIr> ops{FillOp{FillKind::full, o, v, v}, UnaryOp{UnaryKind::clamp, o, o, v, v},
                                 ScalarOp{BinaryKind::add, o, v, false, o},
                                 PadOp{o, ir(2, {6}, DType::f32), {1}, {1}, v}, RandomOp{RandomKind::uniform, o, v, v}};
    auto back = round_trip(sys, ops);
    const auto want = std::bit_cast<uint64_t>(v);
    CHECK(std::bit_cast<uint64_t>(std::get<FillOp>(back[0].op).value) == want);
    CHECK(std::bit_cast<uint64_t>(std::get<FillOp>(back[0].op).step) == want);
    CHECK(std::bit_cast<uint64_t>(std::get<UnaryOp>(back[1].op).a) == want);
    CHECK(std::bit_cast<uint64_t>(std::get<UnaryOp>(back[1].op).b) == want);
    CHECK(std::bit_cast<uint64_t>(std::get<ScalarOp>(back[2].op).scalar.f) == want);
    CHECK(std::bit_cast<uint64_t>(std::get<PadOp>(back[3].op).value) == want);
    CHECK(std::bit_cast<uint64_t>(std::get<RandomOp>(back[4].op).b) == want);
  }
}

TEST_CASE("DeviceStats and TensorIr round-trip", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  DeviceStats s{"cpu:1", 10, 2, 3, 4, 5, 6, 7, 8};
  auto back = round_trip(sys, s);
  CHECK(back.device == "cpu:1");
  CHECK(back.ops_executed == 10);
  CHECK(back.bytes_bridged_out == 8);
  auto t = round_trip(sys, ir(42, {0, 7}, DType::boolean, TensorStatus::read_write));
  CHECK(t.id == TensorId{42});
  CHECK(t.shape == Shape{0, 7});
  CHECK(t.dtype == DType::boolean);
  CHECK(t.status == TensorStatus::read_write);
}

TEST_CASE("A message declaring more payload than it carries is rejected without allocating", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto d = TensorData::from(std::vector<uint8_t>{1, 2, 3, 4}, Shape{4});
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(d));
  // The blob's length prefix is the varint right before the 4 payload bytes:
  // overwrite it with a huge value (and drop the payload).
  buf.resize(buf.size() - 5);
  for (char c : {'\xff', '\xff', '\xff', '\xff', '\x0f'}) buf.push_back(c);
  TensorData back;
  caf::binary_deserializer source{sys, buf};
  auto err = source(back);
  REQUIRE(err);
  CHECK(back.bytes.size() == 0);
}

TEST_CASE("An unknown operation tag is a protocol error, not an exception", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  std::vector<char> buf{static_cast<char>(200)};
  OperationIr op;
  caf::binary_deserializer source{sys, buf};
  auto err = source(op);
  REQUIRE(err);
  CHECK(describe(err).code == Errc::protocol_error);
}

TEST_CASE("Broadcasting follows NumPy", "[messages][rules]") {
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}) == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {5}) == Shape{5});
  CHECK(broadcast_shapes({0, 1}, {1, 3}) == Shape{0, 3});
  CHECK_FALSE(broadcast_shapes({2, 3}, {3, 2}).has_value());
  CHECK(broadcast_strides(Shape{3, 1}, Shape{2, 3, 4}) == std::vector<int64_t>{0, 1, 0});
}

TEST_CASE("Dtype promotion matches PyTorch for the supported types", "[messages][rules]") {
  CHECK(promote(DType::i32, DType::f32) == DType::f32);
  CHECK(promote(DType::u8, DType::i32) == DType::i32);
  CHECK(promote(DType::boolean, DType::u8) == DType::u8);
  CHECK(promote(DType::f32, DType::f64) == DType::f64);
  CHECK(promote(DType::i64, DType::i32) == DType::i64);
  CHECK(promote_scalar(DType::i32, ScalarKind::floating) == DType::f32);
  CHECK(promote_scalar(DType::f64, ScalarKind::floating) == DType::f64);
  CHECK(promote_scalar(DType::u8, ScalarKind::integral) == DType::u8);
  CHECK(promote_scalar(DType::boolean, ScalarKind::integral) == DType::i64);
  // True division of integers gives the default float type.
  auto spec = binary_result(BinaryKind::div, {2}, DType::i64, {2}, DType::i64);
  REQUIRE(spec);
  CHECK(spec->dtype == DType::f32);
}

TEST_CASE("validate rejects an op whose declared output contradicts the rules", "[messages][rules]") {
  OperationIr op = BinaryOp{BinaryKind::add, ir(1, {2, 3}, DType::f32), ir(2, {3}, DType::f32),
                            ir(3, {2, 4}, DType::f32, TensorStatus::not_init)};
  auto err = validate(op);
  REQUIRE(err);
  CHECK(describe(err).code == Errc::protocol_error);
  OperationIr view = ViewOp{ir(1, {2, 3}, DType::f32), ir(4, {4}, DType::f32, TensorStatus::not_init), 3, {1}};
  auto verr = validate(view);
  REQUIRE(verr);
  CHECK(describe(verr).code == Errc::index_out_of_range);
}

// validate() accepts unary, binary and scalar ops through plain tests first
// (op_rules.cpp, passes_quickly) and runs the full checks only on the ops
// those do not accept: both must accept exactly what the rules allow.
TEST_CASE("validate accepts exactly the element-wise ops the rules allow", "[messages][rules]") {
  const std::vector<DType> dtypes(std::begin(all_dtypes), std::end(all_dtypes));
  const Shape s{2, 3};
  size_t accepted = 0, refused = 0;
  // `op` with the output the rules give must pass; with any other dtype or
  // a wrong shape it must not.
  auto check = [&](OperationIr& op, const caf::expected<TensorSpec>& spec) {
    TensorIr* output = nullptr;
    op.each_output([&](TensorIr& t) { output = &t; });
    TensorIr& out = *output;
    std::string operands;
    op.each_input(
        [&](const TensorIr& t) { operands.append(" ").append(name_of(t.dtype)).append(t.shape.to_string()); });
    INFO(op.name() << " of" << operands);
    if (!spec) {
      CHECK(validate(op));
      ++refused;
      return;
    }
    out.shape = spec->shape;
    out.dtype = spec->dtype;
    OperationIr good = op;
    CHECK_FALSE(validate(good));
    ++accepted;
    for (DType other : dtypes) {
      if (other == spec->dtype) continue;
      out.dtype = other;
      OperationIr bad = op;
      CHECK(validate(bad));
    }
    out.dtype = spec->dtype;
    out.shape = Shape{7};
    OperationIr bad_shape = op;
    CHECK(validate(bad_shape));
    out.id = TensorId{};
    out.shape = spec->shape;
    OperationIr no_id = op;
    CHECK(validate(no_id));
  };
  for (DType t : dtypes) {
    for (size_t k = 0; k < unary_kind_count; ++k) {
      UnaryOp u{static_cast<UnaryKind>(k), ir(1, s, t), ir(2, s, t, TensorStatus::not_init)};
      auto spec = unary_result(u.kind, s, t);
      OperationIr op = u;
      check(op, spec);
    }
    for (DType t2 : dtypes) {
      for (const Shape& rs : {s, Shape{3}, Shape{}}) {
        for (size_t k = 0; k < binary_kind_count; ++k) {
          BinaryOp b{static_cast<BinaryKind>(k), ir(1, s, t), ir(2, rs, t2), ir(3, s, t, TensorStatus::not_init)};
          auto spec = binary_result(b.kind, s, t, rs, t2);
          OperationIr op = b;
          check(op, spec);
        }
      }
    }
    for (Scalar sc : {Scalar(true), Scalar(int64_t{3}), Scalar(2.5)}) {
      for (size_t k = 0; k < binary_kind_count; ++k) {
        ScalarOp x{static_cast<BinaryKind>(k), ir(1, s, t), sc, false, ir(2, s, t, TensorStatus::not_init)};
        auto spec = scalar_result(x.kind, s, t, sc.kind);
        OperationIr op = x;
        check(op, spec);
      }
    }
  }
  // Both outcomes were exercised in numbers.
  CHECK(accepted > 1000);
  CHECK(refused > 100);
  // An input with a status no peer may send, a negative extent, an unknown kind.
  OperationIr bad_status = UnaryOp{UnaryKind::neg, ir(1, s, DType::f32, static_cast<TensorStatus>(9)),
                                   ir(2, s, DType::f32, TensorStatus::not_init)};
  CHECK(validate(bad_status));
  OperationIr negative = UnaryOp{UnaryKind::neg, ir(1, {-2, 3}, DType::f32), ir(2, {-2, 3}, DType::f32)};
  CHECK(validate(negative));
  OperationIr unknown = ScalarOp{static_cast<BinaryKind>(250), ir(1, s, DType::f32), 1.0, false, ir(2, s, DType::f32)};
  CHECK(validate(unknown));
}

TEST_CASE("validate rejects conv and pool ops that a lying peer sends", "[messages][rules][conv]") {
  auto conv = [] {
    ConvOp c{ir(1, {1, 4, 5, 5}, DType::f32), ir(2, {6, 2, 3, 3}, DType::f32), TensorIr{},
             ir(3, {1, 6, 3, 3}, DType::f32, TensorStatus::not_init)};
    c.stride = {1, 1};
    c.pad_before = {0, 0};
    c.pad_after = {0, 0};
    c.dilation = {1, 1};
    c.output_padding = {0, 0};
    c.groups = 2;
    return c;
  };
  OperationIr ok = conv();
  CHECK_FALSE(validate(ok));
  auto code_of = [](ConvOp c) {
    OperationIr op = std::move(c);
    auto err = validate(op);
    return err ? describe(err).code : Errc{};
  };
  auto lie = conv();
  lie.out.shape = Shape{1, 6, 4, 4};  // the rules give 3 x 3
  CHECK(code_of(lie) == Errc::protocol_error);
  auto groups = conv();
  groups.groups = 3;  // 4 channels are not 3 groups of 2
  CHECK(code_of(groups) == Errc::shape_mismatch);
  auto huge = conv();
  huge.stride = {int64_t{1} << 62, 1};  // would overflow the output extent
  CHECK(code_of(huge) == Errc::invalid_argument);
  auto zero = conv();
  zero.dilation = {0, 1};
  CHECK(code_of(zero) == Errc::invalid_argument);
  auto axes = conv();
  axes.pad_after = {0};  // one entry for two spatial axes
  CHECK(code_of(axes) == Errc::invalid_argument);
  auto dtype = conv();
  dtype.weight.dtype = DType::f64;
  CHECK(code_of(dtype) == Errc::dtype_mismatch);
  auto bias = conv();
  bias.bias = ir(4, {5}, DType::f32);
  CHECK(code_of(bias) == Errc::shape_mismatch);

  PoolOp pool{PoolKind::max_indices, ir(1, {2, 3, 6}, DType::f32),
              ir(5, {2, 3, 3}, DType::i64, TensorStatus::not_init)};
  pool.kernel = {2};
  pool.stride = {2};
  pool.pad_before = {0};
  pool.pad_after = {0};
  pool.dilation = {1};
  OperationIr pool_ok = pool;
  CHECK_FALSE(validate(pool_ok));
  auto pool_code = [](PoolOp p) {
    OperationIr op = std::move(p);
    auto err = validate(op);
    return err ? describe(err).code : Errc{};
  };
  auto values = pool;
  values.out.dtype = DType::f32;  // indices are i64
  CHECK(pool_code(values) == Errc::protocol_error);
  auto kind = pool;
  kind.kind = static_cast<PoolKind>(9);
  CHECK(pool_code(kind) == Errc::protocol_error);
  auto pad = pool;
  pad.pad_before = {2};  // more than half the kernel
  CHECK(pool_code(pad) == Errc::invalid_argument);
  auto adaptive = pool;
  adaptive.kind = PoolKind::adaptive_avg;
  adaptive.output_size = {int64_t{1} << 40};
  CHECK(pool_code(adaptive) != Errc{});
}

// Issue 18, part B: a lying peer cannot get a norm, attention, scan, sort or
// scatter op past validate with arguments the client-side rules refuse.
TEST_CASE("validate rejects norm, attention, scan, sort and scatter ops that break the rules", "[messages][rules]") {
  auto out = [](Shape s, DType t = DType::f32) { return ir(90, std::move(s), t, TensorStatus::not_init); };
  auto x = ir(1, {2, 6, 3}, DType::f32);
  struct Bad {
    const char* what;
    OperationIr op;
    Errc code;
    const char* mentions;
  };
  std::vector<Bad> bad{
      {"channels not divisible", NormOp{NormKind::group, x, {}, {}, {}, {}, out({2, 6, 3}), 4, 1e-5},
       Errc::shape_mismatch, "num_groups=4"},
      {"normalized axes beyond the rank", NormOp{NormKind::layer, x, {}, {}, {}, {}, out({2, 6, 3}), 4, 1e-5},
       Errc::shape_mismatch, "layer_norm"},
      {"weight of the wrong shape",
       NormOp{NormKind::layer, x, {}, {}, ir(2, {4}, DType::f32), {}, out({2, 6, 3}), 1, 1e-5}, Errc::shape_mismatch,
       "[4]"},
      {"batch norm without statistics", NormOp{NormKind::batch, x, {}, {}, {}, {}, out({2, 6, 3}), 0, 1e-5},
       Errc::protocol_error, "input without an id"},
      {"negative eps", NormOp{NormKind::rms, x, {}, {}, {}, {}, out({2, 6, 3}), 1, -1.0}, Errc::invalid_argument,
       "eps"},
      {"mask not broadcastable",
       AttentionOp{ir(3, {2, 4, 8}, DType::f32), ir(4, {2, 5, 8}, DType::f32), ir(5, {2, 5, 3}, DType::f32),
                   ir(6, {3, 5}, DType::boolean), out({2, 4, 3}), false, 1.0},
       Errc::shape_mismatch, "attn_mask"},
      {"infinite scale",
       AttentionOp{ir(3, {2, 4, 8}, DType::f32),
                   ir(4, {2, 5, 8}, DType::f32),
                   ir(5, {2, 5, 3}, DType::f32),
                   {},
                   out({2, 4, 3}),
                   false,
                   std::numeric_limits<double>::infinity()},
       Errc::invalid_argument, "scale"},
      {"lying attention output",
       AttentionOp{ir(3, {2, 4, 8}, DType::f32),
                   ir(4, {2, 5, 8}, DType::f32),
                   ir(5, {2, 5, 3}, DType::f32),
                   {},
                   out({2, 4, 8}),
                   false,
                   1.0},
       Errc::protocol_error, "declared output"},
      {"k beyond the extent", SortOp{SortKind::topk, x, out({2, 6, 4}, DType::i64), 2, 4, true, true},
       Errc::invalid_argument, "k=4"},
      {"scan axis out of range", ScanOp{ScanKind::cumsum, x, out({2, 6, 3}), 3}, Errc::shape_mismatch, "axis 3"},
      {"scan into bool", ScanOp{ScanKind::cumsum, x, out({2, 6, 3}, DType::boolean), 0}, Errc::dtype_mismatch, "bool"},
      {"scatter source of another dtype",
       IndexOp{IndexKind::scatter_amax, x, ir(7, {2, 6, 3}, DType::i64), ir(8, {2, 6, 3}, DType::f64), out({2, 6, 3}),
               0},
       Errc::dtype_mismatch, "scatter_amax"},
  };
  for (auto& b : bad) {
    INFO(b.what);
    auto err = validate(b.op);
    REQUIRE(err);
    CHECK(describe(err).code == b.code);
    CHECK_THAT(describe(err).message, Catch::Contains(b.mentions));
  }
  // Kinds beyond the enums arrive as raw bytes: protocol errors.
  NormOp n{NormKind::layer, x, {}, {}, {}, {}, out({2, 6, 3}), 1, 1e-5};
  n.kind = static_cast<NormKind>(9);
  OperationIr bad_kind = n;
  auto err = validate(bad_kind);
  REQUIRE(err);
  CHECK(describe(err).code == Errc::protocol_error);
  IndexOp i{IndexKind::scatter, x, ir(7, {2, 6, 3}, DType::i64), x, out({2, 6, 3}), 0};
  i.kind = static_cast<IndexKind>(7);
  OperationIr bad_index = i;
  REQUIRE(validate(bad_index));
}

TEST_CASE("Scalars cross the wire exactly by kind (int64, uint64, double)", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto o = ir(1, {2}, DType::i64, TensorStatus::not_init);
  const std::vector<Scalar> scalars{Scalar(int64_t{(int64_t{1} << 62) + 1}),
                                    Scalar(std::numeric_limits<int64_t>::min()),
                                    Scalar(std::numeric_limits<uint64_t>::max()),
                                    Scalar(true),
                                    Scalar(0.1),
                                    Scalar(int32_t{-7})};
  std::vector<OperationIr> ops;
  for (const auto& s : scalars) ops.push_back(ScalarOp{BinaryKind::add, o, s, false, o});
  auto back = round_trip(sys, ops);
  REQUIRE(back.size() == scalars.size());
  for (size_t i = 0; i < scalars.size(); ++i) {
    INFO("scalar " << scalars[i].to_string());
    CHECK(std::get<ScalarOp>(back[i].op).scalar == scalars[i]);
  }
  CHECK(std::get<ScalarOp>(back[0].op).scalar.as<int64_t>() == (int64_t{1} << 62) + 1);
  CHECK(std::get<ScalarOp>(back[2].op).scalar.as<double>() == 18446744073709551615.0);
  CHECK(std::get<ScalarOp>(back[2].op).scalar.to_string() == "18446744073709551615");
}

TEST_CASE("result_type: a 0-d tensor counts less than a dimensioned one", "[messages][rules]") {
  CHECK(result_type(false, DType::i32, true, DType::i64) == DType::i32);
  CHECK(result_type(false, DType::u8, true, DType::i64) == DType::u8);
  CHECK(result_type(true, DType::i32, false, DType::u8) == DType::u8);
  CHECK(result_type(false, DType::i32, true, DType::f64) == DType::f64);  // higher category wins
  CHECK(result_type(false, DType::f32, true, DType::f64) == DType::f32);
  CHECK(result_type(false, DType::boolean, true, DType::i64) == DType::i64);
  CHECK(result_type(true, DType::i32, true, DType::i64) == DType::i64);
  CHECK(float_to_int64(9.2e18) == 9200000000000000000);
  CHECK(float_to_int64(9223372036854774784.0) == 9223372036854774784);
  CHECK(float_to_int64(-9223372036854775808.0) == std::numeric_limits<int64_t>::min());
  CHECK(float_to_int64(9223372036854775808.0) == std::numeric_limits<int64_t>::min());
}

// Shapes keep up to Dims::inline_capacity extents in place: every path
// between in place and on the heap must keep the values.
TEST_CASE("Dims behave as a vector of extents in place and on the heap", "[messages]") {
  const size_t small = Dims::inline_capacity;
  for (size_t n : {size_t{0}, size_t{1}, small - 1, small, small + 1, 3 * small}) {
    INFO("rank " << n);
    std::vector<int64_t> want;
    Dims d;
    for (size_t i = 0; i < n; ++i) {
      d.push_back(static_cast<int64_t>(i * 7 + 1));
      want.push_back(static_cast<int64_t>(i * 7 + 1));
    }
    CHECK(d == want);
    CHECK(d.to_vector() == want);
    Dims copy = d;
    CHECK(copy == d);
    copy.push_back(-1);  // a copy owns its values
    CHECK(d == want);
    Dims moved = std::move(copy);
    CHECK(moved.size() == n + 1);
    CHECK(moved.back() == -1);
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty, and usable
    copy.push_back(5);
    CHECK(copy == std::vector<int64_t>{5});
    moved = d;  // assigning over heap storage
    CHECK(moved == want);

    // insert and erase at the front, the middle and the end, across the
    // inline capacity
    auto ref = want;
    Dims e = d;
    e.insert(e.begin(), 100);
    ref.insert(ref.begin(), 100);
    e.insert(e.begin() + static_cast<std::ptrdiff_t>(e.size() / 2), 3, 200);
    ref.insert(ref.begin() + static_cast<std::ptrdiff_t>(ref.size() / 2), 3, 200);
    e.insert(e.end(), {300, 301});
    ref.insert(ref.end(), {300, 301});
    CHECK(e == ref);
    e.insert(e.begin() + 1, e.begin(), e.end());  // a range out of itself
    const auto snapshot = ref;
    ref.insert(ref.begin() + 1, snapshot.begin(), snapshot.end());
    CHECK(e == ref);
    e.erase(e.begin());
    ref.erase(ref.begin());
    e.erase(e.begin() + 2, e.begin() + 5);
    ref.erase(ref.begin() + 2, ref.begin() + 5);
    CHECK(e.to_vector() == ref);
    e.resize(2);
    CHECK(e == std::vector<int64_t>(ref.begin(), ref.begin() + 2));
    e.resize(small + 2, 9);
    CHECK(e.back() == 9);
    CHECK(e.size() == small + 2);
  }
}

TEST_CASE("Shapes of every rank round-trip through the binary serializer", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  for (size_t rank : {size_t{0}, size_t{1}, Dims::inline_capacity, Dims::inline_capacity + 1, size_t{16}}) {
    Shape s;
    for (size_t i = 0; i < rank; ++i) s.dims.push_back(static_cast<int64_t>(i + 2));
    auto back = round_trip(sys, ir(7, s, DType::f32));
    CHECK(back.shape == s);
    CHECK(back.shape.rank() == rank);
  }
}

namespace {

// A batch's bytes as they cross the wire: the block's length, the block,
// then the uploads' bytes.
std::vector<char> wire_bytes(const std::vector<char>& block, const std::vector<char>& data = {}) {
  std::vector<char> wire(8);
  const uint64_t length = block.size();
  std::memcpy(wire.data(), &length, 8);
  wire.insert(wire.end(), block.begin(), block.end());
  wire.insert(wire.end(), data.begin(), data.end());
  return wire;
}

// A batch as encode_ops writes it, with `edit` applied to its block (and
// `edit_data` to its uploads' bytes), decoded the way a worker decodes a
// message: CAF's binary deserializer and the inspect overload of
// std::vector<OperationIr>.
caf::error decode_edited(caf::actor_system& sys, const std::vector<OperationIr>& ops,
                         const std::function<void(std::vector<char>&)>& edit, std::vector<OperationIr>& back,
                         const std::function<void(std::vector<char>&)>& edit_data = {}) {
  auto encoded = detail::encode_ops(ops);
  edit(encoded.block);
  std::vector<char> data;
  for (auto d : encoded.data) {
    const auto* p = reinterpret_cast<const char*>(d.data());
    data.insert(data.end(), p, p + d.size());
  }
  if (edit_data) edit_data(data);
  auto wire = wire_bytes(encoded.block, data);
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  size_t n = wire.size();
  REQUIRE_FALSE(sink.begin_sequence(n));
  REQUIRE_FALSE(sink.apply_raw(n, wire.data()));
  caf::binary_deserializer source{sys, buf};
  return source(back);
}

template <class T>
void put_at(std::vector<char>& block, size_t at, T v) {
  REQUIRE(at + sizeof v <= block.size());
  std::memcpy(block.data() + at, &v, sizeof v);
}

}  // namespace

TEST_CASE("An op batch crosses as one block and a hostile block is refused before it allocates", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto a = ir(1, {2, 3}, DType::f32), o = ir(3, {2, 3}, DType::f32, TensorStatus::not_init);
  const std::vector<OperationIr> ops{ScalarOp{BinaryKind::add, a, 1.0, false, o}, DropOp{TensorId{1}}};
  auto encoded = detail::encode_ops(ops);
  // u32 count, then add: tag, kind, lhs (14 + 16), scalar (1 + 1 + 8 + 8),
  // scalar_first, out (14 + 16); drop: tag, id.
  const size_t add_bytes = 1 + 1 + 30 + 18 + 1 + 30;
  REQUIRE(encoded.block.size() == 4 + add_bytes + 9);
  CHECK(encoded.data.empty());
  CHECK(encoded.wire_size() == 8 + encoded.block.size());
  std::vector<OperationIr> back;
  REQUIRE_FALSE(decode_edited(
      sys, ops, [](auto&) {}, back));
  REQUIRE(back.size() == 2);
  CHECK(std::get<ScalarOp>(back[0].op).lhs.shape == Shape{2, 3});
  CHECK(std::get<DropOp>(back[1].op).id == TensorId{1});

  auto refused = [&](const std::function<void(std::vector<char>&)>& edit, const std::string& why) {
    std::vector<OperationIr> out;
    auto err = decode_edited(sys, ops, edit, out);
    REQUIRE(err);
    CHECK(describe(err).code == Errc::protocol_error);
    CHECK_THAT(describe(err).message, Catch::Contains(why));
  };
  SECTION("more ops than a batch may hold") {
    refused([](auto& b) { put_at<uint32_t>(b, 0, detail::max_wire_ops + 1); }, "more than the 65536");
  }
  SECTION("more ops than the bytes could hold") {
    refused([](auto& b) { put_at<uint32_t>(b, 0, 60000); }, "declares 60000 ops");
  }
  SECTION("an op cut short") {
    refused([](auto& b) { b.resize(b.size() - 3); }, "op 1: ends inside an op");
  }
  SECTION("bytes after the last op") {
    refused([](auto& b) { b.push_back(0); }, "1 bytes after the last op");
  }
  SECTION("an unknown tag") {
    refused([&](auto& b) { b[4 + add_bytes] = static_cast<char>(250); }, "op 1: unknown operation tag 250");
  }
  SECTION("a rank larger than the bytes") {
    // lhs's rank field: count, tag, kind, then id (8), dtype, status.
    refused([](auto& b) { put_at<uint32_t>(b, 4 + 1 + 1 + 10, 0x7fffffff); }, "axes exceeds the bytes received");
  }
  SECTION("a block larger than the message") {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    size_t n = 1u << 30;
    REQUIRE_FALSE(sink.begin_sequence(n));
    std::vector<OperationIr> out;
    caf::binary_deserializer source{sys, buf};
    auto err = source(out);
    REQUIRE(err);
    CHECK_THAT(describe(err).message, Catch::Contains("exceeds the 0 bytes received"));
  }
}

TEST_CASE("Vectors and data inside a batch declare no more than the block holds", "[messages]") {
  Config cfg;
  caf::actor_system sys{cfg};
  auto a = ir(1, {6}, DType::f32), o = ir(3, {3}, DType::f32, TensorStatus::not_init);
  SECTION("a view's strides") {
    const std::vector<OperationIr> ops{ViewOp{a, o, 0, {2}}};
    // count, tag, in (14 + 8), out (14 + 8), offset (8): the strides' count.
    std::vector<OperationIr> back;
    auto err = decode_edited(
        sys, ops, [](auto& b) { put_at<uint32_t>(b, 4 + 1 + 22 + 22 + 8, 0xffffffffu); }, back);
    REQUIRE(err);
    CHECK_THAT(describe(err).message, Catch::Contains("declares 4294967295 elements"));
  }
  SECTION("an upload's bytes") {
    const std::vector<OperationIr> ops{FromDataOp{o, TensorData::from(std::vector<float>{1, 2, 3}, Shape{3})}};
    // count, tag, out (14 + 8), then the data: rank (4), dim (8), dtype: its size.
    std::vector<OperationIr> back;
    auto err = decode_edited(
        sys, ops, [](auto& b) { put_at<uint64_t>(b, 4 + 1 + 22 + 4 + 8 + 1, uint64_t{1} << 40); }, back);
    REQUIRE(err);
    CHECK_THAT(describe(err).message, Catch::Contains("declares 1099511627776 bytes of data"));
  }
  SECTION("a list of tensors that would take far more memory than the block") {
    // One cat of a million 0-d tensors: 14 bytes each on the wire, 96 in
    // memory, past what a block of this size may decode to.
    const uint32_t n = 1'000'000;
    std::vector<char> block(4 + 1 + 4 + size_t{n} * detail::tensor_ir_head + detail::tensor_ir_head + 8, 0);
    put_at<uint32_t>(block, 0, 1);
    block[4] = static_cast<char>(OperationIr{CatOp{}}.op.index());
    put_at<uint32_t>(block, 5, n);
    std::vector<OperationIr> back;
    auto wire = wire_bytes(block);
    const auto why = detail::decode_ops(std::as_bytes(std::span(wire)), back);
    CHECK_THAT(why, Catch::Contains("op 0: decodes to more than the"));
    // A tenth of it is a list like any other.
    put_at<uint32_t>(block, 5, n / 10);
    block.resize(4 + 1 + 4 + size_t{n / 10} * detail::tensor_ir_head + detail::tensor_ir_head + 8);
    wire = wire_bytes(block);
    CHECK(detail::decode_ops(std::as_bytes(std::span(wire)), back).empty());
    CHECK(std::get<CatOp>(back.at(0).op).inputs.size() == n / 10);
  }
  SECTION("an upload's bytes travel after the block, not in it") {
    const std::vector<OperationIr> ops{FromDataOp{o, TensorData::from(std::vector<float>{1, 2, 3}, Shape{3})}};
    auto encoded = detail::encode_ops(ops);
    REQUIRE(encoded.data.size() == 1);
    CHECK(encoded.data[0].size() == 12);
    CHECK(encoded.wire_size() == 8 + encoded.block.size() + 12);
    std::vector<OperationIr> back;
    REQUIRE_FALSE(decode_edited(
        sys, ops, [](auto&) {}, back));
    CHECK(std::get<FromDataOp>(back[0].op).data.to_vector<float>() == std::vector<float>{1, 2, 3});
    // Bytes after the last upload, or fewer than it declares.
    auto err = decode_edited(
        sys, ops, [](auto&) {}, back, [](auto& data) { data.push_back(0); });
    REQUIRE(err);
    CHECK_THAT(describe(err).message, Catch::Contains("1 bytes of data no op declared"));
    err = decode_edited(
        sys, ops, [](auto&) {}, back, [](auto& data) { data.pop_back(); });
    REQUIRE(err);
    CHECK_THAT(describe(err).message, Catch::Contains("declares 12 bytes of data with 11 left"));
  }
  SECTION("a block longer than the batch") {
    auto wire = wire_bytes(detail::encode_ops({DropOp{TensorId{1}}}).block);
    const uint64_t length = 1000;
    std::memcpy(wire.data(), &length, 8);
    std::vector<OperationIr> back;
    CHECK_THAT(detail::decode_ops(std::as_bytes(std::span(wire)), back),
               Catch::Contains("a block of 1000 bytes in 13"));
  }
  SECTION("bool bytes other than 0 and 1 arrive as 1") {
    auto d = TensorData::from(std::vector<uint8_t>{0, 1, 0}, Shape{3});
    d.dtype = DType::boolean;
    const std::vector<OperationIr> ops{FromDataOp{ir(4, {3}, DType::boolean, TensorStatus::not_init), d}};
    std::vector<OperationIr> back;
    REQUIRE_FALSE(decode_edited(
        sys, ops, [](auto&) {}, back, [](auto& data) { data.back() = 7; }));
    CHECK(std::get<FromDataOp>(back[0].op).data.to_vector<int>() == std::vector<int>{0, 1, 1});
  }
}

TEST_CASE("Id slots find every id put in and no other however the ids collide", "[messages]") {
  // Sequential ids (as a client hands them out), ids a power of two apart
  // (which share their low bits), and ids near the top of the range.
  const std::vector<std::vector<uint64_t>> id_sets = {
      [] {
        std::vector<uint64_t> ids;
        for (uint64_t i = 1; i <= 31; ++i) ids.push_back(i);
        return ids;
      }(),
      [] {
        std::vector<uint64_t> ids;
        for (uint64_t i = 1; i <= 31; ++i) ids.push_back(i << 32);
        return ids;
      }(),
      {std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() - 1, 1, 2},
  };
  for (const auto& ids : id_sets) {
    std::vector<IdSlot<uint32_t>> slots(64);
    for (size_t k = 0; k < ids.size(); ++k) {
      auto& slot = probe_id(slots, TensorId{ids[k]});
      REQUIRE(slot.key == 0);  // not in yet
      slot = {ids[k], static_cast<uint32_t>(k + 100)};
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      const uint32_t* value = find_id(slots, TensorId{ids[k]});
      REQUIRE(value != nullptr);
      CHECK(*value == k + 100);
    }
    for (uint64_t absent : {uint64_t{1000}, uint64_t{33} << 32, uint64_t{3} << 40})
      CHECK(find_id(slots, TensorId{absent}) == nullptr);
    // A full table but one slot still ends every probe.
    std::array<IdSlot<uint8_t>, 2> tiny{};
    probe_id(tiny, TensorId{ids[0]}) = {ids[0], 7};
    CHECK(*find_id(tiny, TensorId{ids[0]}) == 7);
    CHECK(find_id(tiny, TensorId{ids[1]}) == nullptr);
  }
}

namespace {

// in_flat[offset + sum_k i_k * strides[k]] for every index of `shape`, row-major.
std::vector<int64_t> gather_view(const std::vector<int64_t>& in, const Shape& shape, const ViewMap& v) {
  std::vector<int64_t> out;
  std::vector<int64_t> idx(shape.rank(), 0);
  for (int64_t n = 0; n < shape.numel(); ++n) {
    int64_t at = v.offset;
    for (size_t k = 0; k < idx.size(); ++k) at += idx[k] * v.strides[k];
    out.push_back(in.at(static_cast<size_t>(at)));
    for (size_t k = idx.size(); k-- > 0;) {
      if (++idx[k] < shape.dims[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("compose_views gives the view of a view where it is strided and nothing elsewhere", "[messages][view]") {
  // An exported attention's heads: q = qkv[:, :, 128:256] ([16, 1, 384] ->
  // [16, 1, 128]), reshaped to [16, 4, 32], transposed to [4, 16, 32].
  const Shape qkv{16, 1, 384}, q{16, 1, 128}, heads{16, 4, 32}, by_head{4, 16, 32};
  std::vector<int64_t> in(static_cast<size_t>(qkv.numel()));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int64_t>(i);
  const ViewMap slice{128, {384, 384, 1}}, reshape{0, heads.strides()}, transpose{0, {32, 128, 1}};
  auto sliced = gather_view(in, q, slice);
  auto shaped = gather_view(sliced, heads, reshape);
  auto moved = gather_view(shaped, by_head, transpose);
  auto two = compose_views(slice, q, reshape, heads);
  REQUIRE(two);
  CHECK(gather_view(in, heads, *two) == shaped);
  auto three = compose_views(*two, heads, transpose, by_head);
  REQUIRE(three);
  CHECK(three->offset == 128);
  CHECK(three->strides == std::vector<int64_t>{32, 384, 1});
  CHECK(gather_view(in, by_head, *three) == moved);
  // Merging two axes a transpose split apart needs a copy: no single view.
  const ViewMap back{0, {32, 512, 1}};  // [4, 16, 32] -> [16, 4, 32]
  CHECK_FALSE(compose_views(back, heads, ViewMap{0, Shape{16, 128}.strides()}, Shape{16, 128}));
  // Negative strides (flip) and empty views are left alone.
  CHECK_FALSE(compose_views(ViewMap{0, {1}}, Shape{4}, ViewMap{3, {-1}}, Shape{4}));
  CHECK_FALSE(compose_views(ViewMap{0, {1}}, Shape{4}, ViewMap{0, {1}}, Shape{0}));

  // Random views of random views: where a composition is given, it reads
  // exactly what the two steps read.
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  // A random valid view of `from` (its elements in row-major order): a
  // permutation of a reshape of a slice, or an expand.
  auto random_view = [&](const Shape& from, Shape& shape) {
    std::vector<int64_t> dims;
    int64_t left = from.numel();
    while (left > 1 && dims.size() < 3) {
      std::vector<int64_t> divisors;
      for (int64_t f = 1; f <= left; ++f)
        if (left % f == 0) divisors.push_back(f);
      const int64_t f = divisors[static_cast<size_t>(pick(0, static_cast<int64_t>(divisors.size()) - 1))];
      dims.push_back(f);
      left /= f;
    }
    if (left > 1 || dims.empty()) dims.push_back(left);
    Shape reshaped(dims);
    ViewMap v{0, reshaped.strides()};
    // Slice each axis, then permute.
    for (size_t k = 0; k < dims.size(); ++k) {
      const int64_t start = pick(0, dims[k] - 1), len = pick(1, dims[k] - start);
      v.offset += start * v.strides[k];
      dims[k] = len;
    }
    std::vector<size_t> order(dims.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> pd, ps;
    for (size_t k : order) {
      pd.push_back(dims[k]);
      ps.push_back(v.strides[k]);
    }
    shape = Shape(pd);
    v.strides = ps;
    return v;
  };
  int composed = 0;
  for (int round = 0; round < 2000; ++round) {
    const Shape base{pick(1, 6), pick(1, 6), pick(1, 4)};
    std::vector<int64_t> data(static_cast<size_t>(base.numel()));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>(i) * 3 + 1;
    Shape mid, out;
    const ViewMap first = random_view(base, mid);
    const ViewMap second = random_view(mid, out);
    REQUIRE_FALSE(check_view(base.numel(), mid, first.offset, first.strides));
    REQUIRE_FALSE(check_view(mid.numel(), out, second.offset, second.strides));
    auto both = compose_views(first, mid, second, out);
    if (!both) continue;
    ++composed;
    INFO("round " << round << ": " << base.to_string() << " -> " << mid.to_string() << " -> " << out.to_string());
    REQUIRE_FALSE(check_view(base.numel(), out, both->offset, both->strides));
    CHECK(gather_view(data, out, *both) == gather_view(gather_view(data, mid, first), out, second));
  }
  CHECK(composed > 500);
}
