// SPDX-License-Identifier: Apache-2.0
#include "fuzz_entry.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "switchyard/messages/op_rules.hpp"
#include "switchyard/messages/protocol.hpp"

namespace switchyard::fuzz {
namespace {

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond)          \
  do {                            \
    if (!(cond)) violated(#cond); \
  } while (false)

// One actor system for the process: decoding needs a context, and starting
// a system per input would dominate the run time. Function-local, created
// on first use, never mutated after.
caf::actor_system& system() {
  struct Holder {
    caf::actor_system_config cfg;
    std::unique_ptr<caf::actor_system> sys;
    Holder() {
      register_message_types(cfg);
      cfg.set("scheduler.max-threads", size_t{1});
      cfg.set("logger.verbosity", caf::atom("quiet"));
      sys = std::make_unique<caf::actor_system>(cfg);
    }
  };
  // Never destroyed: ~actor_system at exit runs after CAF's own statics are
  // gone and crashes (seen under ASan). Still reachable, so LSan is quiet.
  static auto* holder = std::make_unique<Holder>().release();
  return *holder->sys;
}

template <class T>
std::vector<char> encode(T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{system(), buf};
  if (auto err = sink(x)) violated("serializing a decoded value failed");
  return buf;
}

template <class T>
caf::error decode(const char* data, size_t size, T& x) {
  caf::binary_deserializer src{system(), data, size};
  return src(x);
}

// A decoded value must survive encode -> decode -> encode unchanged.
template <class T>
void round_trip(T& x) {
  auto first = encode(x);
  T y;
  if (decode(first.data(), first.size(), y)) violated("re-decoding an encoded value failed");
  auto second = encode(y);
  FUZZ_CHECK(first == second);
}

// Decoding canonicalises bool bytes (kernels load them as bool); ops built
// by the rules fuzzer were never decoded and are not checked for it.
void check_bools(const TensorData& d) {
  if (d.dtype != DType::boolean) return;
  const auto* bytes = d.bytes.as<const uint8_t>();
  for (size_t i = 0; i < d.bytes.size(); ++i) FUZZ_CHECK(bytes[i] <= 1);
}
void check_bools(const OperationIr& op) {
  if (const auto* upload = std::get_if<FromDataOp>(&op.op)) check_bools(upload->data);
}
void check_bools(const std::vector<OperationIr>& ops) {
  for (const auto& op : ops) check_bools(op);
}
void check_bools(const TensorIr&) {}
void check_bools(const DeviceStats&) {}
// Parts carry raw bytes: the receiver canonicalises bools once a tensor's
// parts are whole, not the decoder.
void check_bools(const DataPart&) {}

void exercise(OperationIr& op) {
  (void)op.name();
  auto copy = op;
  if (auto err = validate(copy)) {
    (void)describe(err);
    return;
  }
  // Accepted ops name only well-formed tensors.
  auto ok = [](const TensorIr& t) {
    FUZZ_CHECK(static_cast<bool>(t.id));
    FUZZ_CHECK(is_valid(t.dtype));
    for (auto d : t.shape.dims) FUZZ_CHECK(d >= 0);
  };
  copy.each_input(ok);
  copy.each_output(ok);
}

void exercise(TensorData& d) {
  if (auto err = validate_data(d)) return;
  // Accepted data can be read in full without leaving its bytes.
  double acc = 0;
  for (int64_t i = 0; i < d.numel(); ++i) acc += d.at(i);
  (void)acc;
  (void)d.to_vector<double>();
}

void exercise(TensorIr&) {}
void exercise(DeviceStats&) {}
void exercise(DataPart& p) {
  // What the receiver checks before keeping a part.
  FUZZ_CHECK(p.bytes.empty() || p.bytes.data() != nullptr);
  (void)is_valid(p.dtype);
  (void)p.shape.numel();
}
void exercise(std::vector<OperationIr>& ops) {
  for (auto& op : ops) exercise(op);
}

template <class T>
void decode_as(const char* data, size_t size) {
  T x;
  if (auto err = decode(data, size, x)) return;  // rejected cleanly
  check_bools(x);
  exercise(x);
  round_trip(x);
}

// --- rules ------------------------------------------------------------------

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  int64_t i64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | u8();
    return static_cast<int64_t>(v);
  }
  // Mostly small, sometimes negative, sometimes anything.
  int64_t number() {
    auto b = u8();
    if (b < 192) return b % 9;
    if (b < 240) return static_cast<int64_t>(b) - 244;
    return i64();
  }
  Shape shape() {
    Shape s;
    auto rank = u8() % 7;
    for (int i = 0; i < rank; ++i) s.dims.push_back(number());
    return s;
  }
  std::vector<int64_t> numbers() {
    std::vector<int64_t> v(u8() % 7);
    for (auto& x : v) x = number();
    return v;
  }
  DType dtype() { return static_cast<DType>(u8() % 8); }  // 6, 7: invalid
  TensorIr tensor() {
    TensorIr t;
    t.id = TensorId{u8()};
    t.shape = shape();
    t.dtype = dtype();
    t.status = static_cast<TensorStatus>(u8() % 4);
    return t;
  }
  template <class E>
  E kind(int valid) {
    return static_cast<E>(u8() % (valid + 2));  // two invalid values
  }
  bool flag() { return u8() & 1; }
  double real() {
    switch (u8() % 5) {
      case 0:
        return 0;
      case 1:
        return std::numeric_limits<double>::quiet_NaN();
      case 2:
        return std::numeric_limits<double>::infinity();
      case 3:
        return static_cast<double>(number()) / 2;
      default: {
        auto v = static_cast<uint64_t>(i64());
        double d;
        std::memcpy(&d, &v, sizeof d);
        return d;
      }
    }
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// What validate() guarantees before calling a rule: extents in range.
bool well_formed(const Shape& s) {
  if (s.rank() > 16) return false;
  __int128 n = 1;
  for (auto d : s.dims) {
    if (d < 0) return false;
    n *= d;
    if (n > (__int128{1} << 40)) return false;
  }
  return true;
}
bool well_formed(const TensorIr& t) { return well_formed(t.shape) && is_valid(t.dtype); }

void check_spec(const caf::expected<TensorSpec>& spec) {
  if (!spec) {
    (void)describe(spec.error());
    return;
  }
  FUZZ_CHECK(is_valid(spec->dtype));
  for (auto d : spec->shape.dims) FUZZ_CHECK(d >= 0);
}

OperationIr random_op(Reader& r) {
  switch (r.u8() % 24) {
    case 0: {
      FromDataOp o{r.tensor(), {}};
      o.data.shape = r.flag() ? o.out.shape : r.shape();
      o.data.dtype = r.flag() ? o.out.dtype : r.dtype();
      if (well_formed(o.data.shape) && o.data.shape.numel() < 4096 && is_valid(o.data.dtype))
        o.data.bytes =
            Bytes::allocate(static_cast<size_t>(o.data.shape.numel()) * size_of(o.data.dtype) + (r.flag() ? 1 : 0));
      return o;
    }
    case 1:
      return FillOp{r.kind<FillKind>(3), r.tensor(), r.real(), r.real()};
    case 2:
      return RandomOp{r.kind<RandomKind>(3), r.tensor(), r.real(), r.real()};
    case 3:
      return UnaryOp{r.kind<UnaryKind>(static_cast<int>(unary_kind_count)), r.tensor(), r.tensor(), r.real(), r.real()};
    case 4:
      return BinaryOp{r.kind<BinaryKind>(static_cast<int>(binary_kind_count)), r.tensor(), r.tensor(), r.tensor()};
    case 5: {
      Scalar value = r.real();  // then any kind and integer payload, as a hostile peer may send
      value.kind = r.kind<ScalarKind>(3);
      value.i = r.number();
      return ScalarOp{r.kind<BinaryKind>(static_cast<int>(binary_kind_count)), r.tensor(), value, r.flag(), r.tensor()};
    }
    case 6:
      return ReduceOp{r.kind<ReduceKind>(11), r.tensor(), r.tensor(), r.numbers(), r.flag(), r.number()};
    case 7:
      return SoftmaxOp{r.tensor(), r.tensor(), r.number(), r.flag()};
    case 8:
      return MatmulOp{r.tensor(), r.tensor(), r.flag() ? r.tensor() : TensorIr{}, r.tensor(), r.flag(), r.flag()};
    case 9:
      return CastOp{r.tensor(), r.tensor()};
    case 10:
      return ViewOp{r.tensor(), r.tensor(), r.number(), r.numbers()};
    case 11:
      return SliceAssignOp{r.tensor(), r.tensor(), r.tensor(), r.number(), r.numbers()};
    case 12: {
      CatOp o;
      auto n = r.u8() % 4;
      for (int i = 0; i < n; ++i) o.inputs.push_back(r.tensor());
      o.out = r.tensor();
      o.axis = r.number();
      return o;
    }
    case 13:
      return PadOp{r.tensor(), r.tensor(), r.numbers(), r.numbers(), r.real()};
    case 14:
      return IndexOp{r.kind<IndexKind>(7), r.tensor(), r.tensor(), r.tensor(), r.tensor(), r.number()};
    case 15:
      return WhereOp{r.tensor(), r.tensor(), r.tensor(), r.tensor()};
    case 16:
      return DropOp{TensorId{r.u8()}};
    case 17: {
      ConvOp o{r.tensor(), r.tensor(), r.flag() ? r.tensor() : TensorIr{}, r.tensor()};
      o.stride = r.numbers();
      o.pad_before = r.numbers();
      o.pad_after = r.numbers();
      o.dilation = r.numbers();
      o.output_padding = r.numbers();
      o.groups = r.number();
      o.transposed = r.flag();
      return o;
    }
    case 18: {
      PoolOp o{r.kind<PoolKind>(6), r.tensor(), r.tensor()};
      o.kernel = r.numbers();
      o.stride = r.numbers();
      o.pad_before = r.numbers();
      o.pad_after = r.numbers();
      o.dilation = r.numbers();
      o.output_size = r.numbers();
      o.ceil_mode = r.flag();
      o.count_include_pad = r.flag();
      o.divisor_override = r.number();
      return o;
    }
    case 19:  // issue 18, part B
      return NormOp{r.kind<NormKind>(4), r.tensor(), r.tensor(), r.tensor(), r.tensor(),
                    r.tensor(),          r.tensor(), r.number(), r.real()};
    case 20:
      return AttentionOp{r.tensor(), r.tensor(), r.tensor(), r.tensor(), r.tensor(), r.flag(), r.real()};
    case 21:
      return ScanOp{r.kind<ScanKind>(2), r.tensor(), r.tensor(), r.number()};
    case 22:
      return SortOp{r.kind<SortKind>(2), r.tensor(), r.tensor(), r.number(), r.number(), r.flag(), r.flag()};
    default:
      return SeedOp{static_cast<uint64_t>(r.i64())};
  }
}

// Builds an op whose output is what the rules say for its inputs, so that
// validate() gets past the output check and into the deeper rules.
void consistent_output(OperationIr& op) {
  std::visit(
      [](auto& o) {
        using T = std::decay_t<decltype(o)>;
        caf::expected<TensorSpec> spec = make_error(Errc::invalid_argument, "none");
        if constexpr (std::is_same_v<T, UnaryOp>) spec = unary_result(o.kind, o.in.shape, o.in.dtype);
        if constexpr (std::is_same_v<T, BinaryOp>)
          spec = binary_result(o.kind, o.lhs.shape, o.lhs.dtype, o.rhs.shape, o.rhs.dtype);
        if constexpr (std::is_same_v<T, ReduceOp>) {
          auto axes = o.axes;
          spec = reduce_result(o.kind, o.in.shape, o.in.dtype, axes, o.keepdim);
        }
        if constexpr (std::is_same_v<T, PadOp>) spec = pad_result(o.in.shape, o.in.dtype, o.before, o.after);
        if constexpr (std::is_same_v<T, CatOp>) {
          auto axis = o.axis;
          spec = cat_result(o.inputs, axis);
        }
        if constexpr (std::is_same_v<T, IndexOp>) {
          auto axis = o.axis;
          spec = index_result(o.kind, o.in, o.index, o.has_src() ? &o.src : nullptr, axis);
        }
        if constexpr (std::is_same_v<T, MatmulOp>)
          spec = matmul_result(o.lhs.shape, o.lhs.dtype, o.rhs.shape, o.rhs.dtype, o.transpose_lhs, o.transpose_rhs);
        if constexpr (std::is_same_v<T, WhereOp>) spec = where_result(o.cond, o.lhs, o.rhs);
        // Like validate(), call these rules with well-formed inputs only.
        if constexpr (std::is_same_v<T, ConvOp>)
          if (well_formed(o.input) && well_formed(o.weight) && (!o.has_bias() || well_formed(o.bias)))
            spec = conv_result(o);
        if constexpr (std::is_same_v<T, PoolOp>)
          if (well_formed(o.in)) spec = pool_result(o);
        if constexpr (std::is_same_v<T, NormOp>)
          spec = norm_result(o.kind, o.in, &o.mean, &o.var, &o.weight, &o.bias, o.count, o.eps);
        if constexpr (std::is_same_v<T, AttentionOp>) spec = attention_result(o.q, o.k, o.v, &o.mask, o.causal);
        if constexpr (std::is_same_v<T, ScanOp>) {
          auto axis = o.axis;
          spec = scan_result(o.kind, o.in.shape, o.in.dtype, axis, o.out.dtype);
        }
        if constexpr (std::is_same_v<T, SortOp>) {
          auto axis = o.axis;
          spec = sort_result(o.kind, o.in.shape, o.in.dtype, axis, o.k);
        }
        if constexpr (requires { o.out; }) {
          if (spec) {
            o.out.shape = spec->shape;
            o.out.dtype = spec->dtype;
          }
        }
      },
      op.op);
}

void check_view_bounds(int64_t in_numel, const Shape& out, int64_t offset, const std::vector<int64_t>& strides) {
  auto err = check_view(in_numel, out, offset, strides);
  if (err) return;
  // Accepted: every element the view touches lies inside the input. The
  // extremes are enough (each axis contributes 0 or (extent-1)*stride).
  if (out.numel() == 0) return;
  __int128 lo = offset, hi = offset;
  for (size_t i = 0; i < strides.size(); ++i) {
    __int128 span = static_cast<__int128>(out.dims[i] - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  FUZZ_CHECK(lo >= 0 && hi < in_numel);
}

}  // namespace

int decode_one(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto* body = reinterpret_cast<const char*>(data + 1);
  auto n = size - 1;
  switch (static_cast<Target>(data[0] % static_cast<uint8_t>(Target::count))) {
    case Target::operation:
      decode_as<OperationIr>(body, n);
      break;
    case Target::tensor_data:
      decode_as<TensorData>(body, n);
      break;
    case Target::tensor_ir:
      decode_as<TensorIr>(body, n);
      break;
    case Target::device_stats:
      decode_as<DeviceStats>(body, n);
      break;
    case Target::operations:
      decode_as<std::vector<OperationIr>>(body, n);
      break;
    case Target::data_part:
      decode_as<DataPart>(body, n);
      break;
    case Target::count:
      break;
  }
  return 0;
}

int check_rules(const uint8_t* data, size_t size) {
  Reader r(data, size);
  switch (r.u8() % 8) {
    case 0: {
      auto a = r.shape(), b = r.shape();
      if (!well_formed(a) || !well_formed(b)) break;
      if (auto s = broadcast_shapes(a, b)) {
        FUZZ_CHECK(s->rank() == std::max(a.rank(), b.rank()));
        for (auto d : s->dims) FUZZ_CHECK(d >= 0);
        auto sa = broadcast_strides(a, *s);
        FUZZ_CHECK(sa.size() == s->rank());
      }
      break;
    }
    case 1: {
      auto s = r.shape();
      auto axis = r.number();
      auto rank = static_cast<size_t>(r.u8() % 20);
      if (auto n = normalize_axis(axis, rank)) FUZZ_CHECK(*n >= 0 && static_cast<size_t>(*n) < rank);
      if (!well_formed(s)) break;
      auto axes = r.numbers();
      auto kind = r.kind<ReduceKind>(11);
      auto dtype = r.dtype();
      if (!is_valid(dtype)) break;  // validate() rejects it before any rule runs
      auto spec = reduce_result(kind, s, dtype, axes, r.flag());
      check_spec(spec);
      if (spec) {
        FUZZ_CHECK(std::is_sorted(axes.begin(), axes.end()));
        for (auto ax : axes) FUZZ_CHECK(ax >= 0 && static_cast<size_t>(ax) < std::max<size_t>(s.rank(), 1));
      }
      break;
    }
    case 2: {
      auto in = r.shape(), out = r.shape();
      if (!well_formed(in) || !well_formed(out)) break;
      auto offset = r.number();
      auto strides = r.numbers();
      if (r.flag()) strides.resize(out.rank(), r.number());
      check_view_bounds(in.numel(), out, offset, strides);
      break;
    }
    case 3: {
      auto a = r.tensor(), b = r.tensor();
      if (!well_formed(a) || !well_formed(b)) break;
      check_spec(matmul_result(a.shape, a.dtype, b.shape, b.dtype, r.flag(), r.flag()));
      check_spec(
          binary_result(r.kind<BinaryKind>(static_cast<int>(binary_kind_count)), a.shape, a.dtype, b.shape, b.dtype));
      check_spec(scalar_result(r.kind<BinaryKind>(static_cast<int>(binary_kind_count)), a.shape, a.dtype,
                               r.kind<ScalarKind>(3)));
      check_spec(unary_result(r.kind<UnaryKind>(static_cast<int>(unary_kind_count)), a.shape, a.dtype));
      int64_t axis = r.number();
      check_spec(softmax_result(a.shape, a.dtype, axis));
      check_spec(pad_result(a.shape, a.dtype, r.numbers(), r.numbers()));
      break;
    }
    case 4: {
      std::vector<TensorIr> ins(r.u8() % 5);
      for (auto& t : ins) t = r.tensor();
      if (!std::all_of(ins.begin(), ins.end(), [](const TensorIr& t) { return well_formed(t); })) break;
      int64_t axis = r.number();
      check_spec(cat_result(ins, axis));
      auto c = r.tensor(), x = r.tensor(), y = r.tensor();
      if (!well_formed(c) || !well_formed(x) || !well_formed(y)) break;
      check_spec(where_result(c, x, y));
      check_spec(index_result(r.kind<IndexKind>(3), c, x, r.flag() ? &y : nullptr, axis));
      break;
    }
    default: {
      // Whole ops as a runner receives them.
      auto op = random_op(r);
      if (r.flag()) consistent_output(op);
      exercise(op);
      break;
    }
  }
  return 0;
}

// --- seeds -------------------------------------------------------------------

namespace {

template <class T>
Seed seed_of(std::string name, Target target, T x) {
  auto buf = encode(x);
  Seed s{std::move(name), {static_cast<uint8_t>(target)}};
  s.bytes.insert(s.bytes.end(), buf.begin(), buf.end());
  return s;
}

TensorIr tir(uint64_t id, Shape s, DType t = DType::f32, TensorStatus st = TensorStatus::read_only) {
  return TensorIr{TensorId{id}, std::move(s), t, st};
}

std::vector<std::pair<std::string, OperationIr>> sample_ops() {
  auto out = [](uint64_t id, Shape s, DType t = DType::f32) {
    return tir(id, std::move(s), t, TensorStatus::not_init);
  };
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  std::vector<std::pair<std::string, OperationIr>> ops;
  ops.emplace_back("from_data", FromDataOp{out(1, {2, 3}), TensorData::from(v, Shape{2, 3})});
  ops.emplace_back("fill_full", FillOp{FillKind::full, out(2, {4}), 1.5, 0});
  ops.emplace_back("fill_arange", FillOp{FillKind::arange, out(3, {5}, DType::i64), 0, 1});
  ops.emplace_back("fill_eye", FillOp{FillKind::eye, out(4, {3, 3}), 1, 0});
  ops.emplace_back("random_normal", RandomOp{RandomKind::normal, out(5, {8}), 0, 1});
  ops.emplace_back("unary_exp", UnaryOp{UnaryKind::exp, tir(1, {2, 3}), out(6, {2, 3}), 0, 0});
  ops.emplace_back("unary_clamp", UnaryOp{UnaryKind::clamp, tir(1, {2, 3}), out(7, {2, 3}), -1, 1});
  ops.emplace_back("binary_add", BinaryOp{BinaryKind::add, tir(1, {2, 3}), tir(2, {3}), out(8, {2, 3})});
  ops.emplace_back("binary_lt", BinaryOp{BinaryKind::lt, tir(1, {2, 1}), tir(2, {3}), out(9, {2, 3}, DType::boolean)});
  ops.emplace_back("scalar_mul", ScalarOp{BinaryKind::mul, tir(1, {2, 3}), 2.0, false, out(10, {2, 3})});
  ops.emplace_back("reduce_sum", ReduceOp{ReduceKind::sum, tir(1, {2, 3}), out(11, {2}), {1}, false, 1});
  ops.emplace_back("reduce_var", ReduceOp{ReduceKind::var, tir(1, {2, 3}), out(12, {1, 3}), {0}, true, 1});
  ops.emplace_back("softmax", SoftmaxOp{tir(1, {2, 3}), out(13, {2, 3}), 1, false});
  ops.emplace_back("matmul", MatmulOp{tir(1, {2, 3}), tir(4, {3, 3}), TensorIr{}, out(14, {2, 3}), false, false});
  ops.emplace_back("linear", MatmulOp{tir(1, {2, 3}), tir(4, {3, 3}), tir(2, {3}), out(15, {2, 3}), false, true});
  ops.emplace_back("cast", CastOp{tir(1, {2, 3}), out(16, {2, 3}, DType::i32)});
  ops.emplace_back("view_transpose", ViewOp{tir(1, {2, 3}), out(17, {3, 2}), 0, {1, 3}});
  ops.emplace_back("view_flip", ViewOp{tir(2, {4}), out(18, {4}), 3, {-1}});
  ops.emplace_back("slice_assign", SliceAssignOp{tir(1, {2, 3}), tir(19, {2, 1}), out(20, {2, 3}), 1, {3, 1}});
  ops.emplace_back("cat", CatOp{{tir(1, {2, 3}), tir(6, {2, 3})}, out(21, {4, 3}), 0});
  ops.emplace_back("pad", PadOp{tir(1, {2, 3}), out(22, {4, 4}), {1, 0}, {1, 1}, 0});
  ops.emplace_back("gather", IndexOp{IndexKind::gather, tir(1, {2, 3}), tir(23, {2, 2}, DType::i64), TensorIr{},
                                     out(24, {2, 2}), 1});
  ops.emplace_back("scatter_add", IndexOp{IndexKind::scatter_add, tir(1, {2, 3}), tir(23, {2, 2}, DType::i64),
                                          tir(25, {2, 2}), out(26, {2, 3}), 1});
  ops.emplace_back("index_select", IndexOp{IndexKind::index_select, tir(1, {2, 3}), tir(27, {2}, DType::i64),
                                           TensorIr{}, out(28, {2, 2}), 1});
  ops.emplace_back("where", WhereOp{tir(9, {2, 3}, DType::boolean), tir(1, {2, 3}), tir(2, {3}), out(29, {2, 3})});
  {
    ConvOp conv{tir(1, {1, 2, 3}), tir(30, {4, 1, 2}), tir(31, {4}), out(32, {1, 4, 3})};
    conv.stride = {1};
    conv.pad_before = {1};
    conv.pad_after = {0};
    conv.dilation = {1};
    conv.output_padding = {0};
    conv.groups = 2;
    ops.emplace_back("conv1d", conv);
    PoolOp pool{PoolKind::max_indices, tir(1, {2, 3}), out(33, {2, 2}, DType::i64)};
    pool.kernel = {2};
    pool.stride = {1};
    pool.pad_before = {0};
    pool.pad_after = {0};
    pool.dilation = {1};
    ops.emplace_back("max_pool1d_indices", pool);
  }
  ops.emplace_back("drop", DropOp{TensorId{1}});
  ops.emplace_back("seed", SeedOp{42});
  return ops;
}

}  // namespace

std::vector<Seed> decode_seeds() {
  std::vector<Seed> seeds;
  std::vector<OperationIr> batch;
  for (auto& [name, op] : sample_ops()) {
    seeds.push_back(seed_of("op_" + name, Target::operation, op));
    batch.push_back(op);
  }
  seeds.push_back(seed_of("ops_batch", Target::operations, batch));
  seeds.push_back(seed_of("ops_empty", Target::operations, std::vector<OperationIr>{}));
  std::vector<double> d{1, 2, 3};
  seeds.push_back(seed_of("data_f64", Target::tensor_data, TensorData::from(d, Shape{3})));
  std::vector<bool> b{true, false};
  seeds.push_back(seed_of("data_bool", Target::tensor_data, TensorData::from(b, Shape{2, 1})));
  std::vector<int64_t> scalar{7};
  seeds.push_back(seed_of("data_scalar", Target::tensor_data, TensorData::from(scalar, Shape{})));
  seeds.push_back(seed_of("tensor_ir", Target::tensor_ir, tir(9, {2, 3, 4}, DType::i32, TensorStatus::read_write)));
  seeds.push_back(
      seed_of("device_stats", Target::device_stats, DeviceStats{"cpu:0", 10, 1, 2, 3, 4096, 8192, 16, 32, 64}));
  std::vector<float> part_values{1, 2, 3, 4};
  seeds.push_back(seed_of("data_part", Target::data_part,
                          DataPart{TensorId{5}, Shape{16}, DType::f32, 64, 16,
                                   Bytes::copy_of(part_values.data(), part_values.size() * sizeof(float)), true}));
  return seeds;
}

std::vector<Seed> rules_seeds() {
  auto bytes = [](std::string name, std::initializer_list<uint8_t> b) { return Seed{std::move(name), b}; };
  return {
      bytes("broadcast", {0, 2, 3, 1, 1, 4}),
      bytes("reduce", {1, 2, 2, 3, 1, 1, 2, 0, 1, 0, 1}),
      bytes("view", {2, 1, 6, 2, 3, 2, 0, 2, 1, 3, 0}),
      bytes("matmul", {3, 0, 2, 2, 3, 0, 0, 0, 2, 3, 4, 0, 0, 0, 0, 1}),
      bytes("cat_where", {4, 2, 1, 1, 2, 0, 0, 2, 1, 2, 0, 0, 0}),
      bytes("op_binary", {5, 4, 0, 1, 1, 3, 0, 1, 2, 1, 3, 0, 1, 3, 1, 3, 0, 0, 1}),
      bytes("op_view", {6, 10, 1, 1, 6, 0, 1, 2, 2, 1, 3, 0, 0, 0, 1, 2, 1, 3, 0}),
      bytes("op_index", {7, 14, 0, 1, 1, 2, 2, 3, 0, 1, 2, 2, 2, 2, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1, 1}),
  };
}

}  // namespace switchyard::fuzz
