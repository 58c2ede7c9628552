// SPDX-License-Identifier: Apache-2.0
// A batch of ops on the wire (operation_ir.hpp, inspect of
// std::vector<OperationIr>): the op structs' own inspect functions walk
// their fields, as they do for CAF's processors, but into and out of one
// byte block with plain loads and stores. CAF's processors return an error
// object from every field and call virtually per primitive: decoding a batch
// of tiny ops cost a worker ~2,200 instructions per op that way.
//
// Layout (little-endian), as one CAF byte sequence: u64 length of the block,
// the block, then the bytes of every upload (FromDataOp) in op order, sent
// from where they are (a copy into the block cost an inline upload one more
// pass over its bytes). The block: u32 op count, then per op its tag (the
// variant index, one byte) and its fields in inspect order. bool: one byte;
// integers and enums: their width; doubles (F64Bits): their 8 IEEE bytes;
// TensorId: 8 bytes; TensorIr: the compact 14-byte head and its dims
// (inspect.hpp); Shape: u32 rank and the dims; Bytes: u64 size (its bytes
// follow the block); a vector: u32 count and its elements.

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <type_traits>

#include "switchyard/messages/operation_ir.hpp"

namespace switchyard::detail {
namespace {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

class Writer {
 public:
  // What the op structs' inspect functions ask of an inspector (the
  // fields they hand over are taken below, F64Bits included).
  using result_type = bool;  // true: failed (never, when writing)

  /// Writes into `out.block` from its start (finish() trims it to what was
  /// written) and lists uploads' bytes in `out.data`.
  explicit Writer(EncodedOps& out) : out_(out.block), data_(out.data) {}

  void finish() { out_.resize(size_); }

  template <class... Ts>
  bool operator()(Ts&&... xs) {
    (put(xs), ...);
    return false;
  }

  // A copy into room made ahead, inline: vector::insert's general range
  // path cost a client ~700 instructions per tiny op.
  [[gnu::always_inline]] void raw(const void* p, size_t n) {
    if (out_.size() - size_ < n) [[unlikely]]
      out_.resize(std::max(2 * out_.size(), size_ + n));
    if (n != 0) std::memcpy(out_.data() + size_, p, n);  // p may be null when n is 0
    size_ += n;
  }

  template <class T>
  void put(const T& x) {
    if constexpr (std::is_base_of_v<caf::meta::annotation, T>) {
      // type names: the tag says what follows
    } else if constexpr (std::is_same_v<T, bool>) {
      const char b = x ? 1 : 0;
      raw(&b, 1);
    } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
      raw(&x, sizeof x);
    } else if constexpr (std::is_same_v<T, F64Bits>) {
      const auto bits = std::bit_cast<uint64_t>(x.value);
      raw(&bits, 8);
    } else if constexpr (std::is_same_v<T, TensorId>) {
      raw(&x.value, 8);
    } else if constexpr (std::is_same_v<T, TensorIr>) {
      const auto head = pack_tensor_ir_head(x);
      raw(head.data(), head.size());
      raw(x.shape.dims.data(), x.shape.rank() * 8);
    } else if constexpr (std::is_same_v<T, Shape>) {
      const auto rank = static_cast<uint32_t>(x.rank());
      raw(&rank, 4);
      raw(x.dims.data(), size_t{rank} * 8);
    } else if constexpr (std::is_same_v<T, Bytes>) {
      const uint64_t n = x.size();
      raw(&n, 8);
      if (n != 0) data_.emplace_back(x.data(), n);
    } else if constexpr (std::is_same_v<T, TensorData>) {
      put(x.shape);
      put(x.dtype);
      put(x.bytes);
    } else if constexpr (is_vector<T>::value) {
      const auto n = static_cast<uint32_t>(x.size());
      raw(&n, 4);
      if constexpr (std::is_same_v<T, std::vector<int64_t>>)
        raw(x.data(), x.size() * 8);
      else
        for (const auto& e : x) put(e);
    } else {
      static_assert(!std::is_floating_point_v<T>, "doubles cross as F64Bits");
      inspect(*this, const_cast<T&>(x));  // an op struct or Scalar: reads only
    }
  }

 private:
  std::vector<char>& out_;
  std::vector<std::span<const std::byte>>& data_;
  size_t size_ = 0;  // bytes written
};

class Reader {
 public:
  using result_type = bool;  // true: failed

  /// `block`: the ops; `data`: the uploads' bytes after it; `budget`: the
  /// most bytes the decoded ops may take in memory.
  Reader(std::span<const std::byte> block, std::span<const std::byte> data, size_t budget)
      : at_(block.data()), end_(block.data() + block.size()), data_(data), budget_(budget) {}

  template <class... Ts>
  bool operator()(Ts&&... xs) {
    return !(get(xs) && ...);
  }

  [[nodiscard]] size_t remaining() const { return static_cast<size_t>(end_ - at_); }
  [[nodiscard]] size_t data_remaining() const { return data_.size(); }

  /// Takes `bytes` of memory from the budget (false, and why, when it is
  /// spent): a tensor in a list is 14 bytes on the wire and 96 in memory.
  bool charge(size_t bytes) {
    if (bytes > budget_)
      return fail("decodes to more than the " + std::to_string(budget_ + bytes) + " bytes its size allows");
    budget_ -= bytes;
    return true;
  }
  [[nodiscard]] const std::string& why() const { return why_; }

  [[gnu::cold, gnu::noinline]] bool fail(std::string why) {
    if (why_.empty()) why_ = std::move(why);
    return false;
  }

  [[gnu::cold, gnu::noinline]] bool short_by(size_t n) {
    return fail("ends inside an op (" + std::to_string(remaining()) + " bytes left, " + std::to_string(n) + " needed)");
  }

  // Inline, with the failure out of line: this is most of a decode.
  [[gnu::always_inline]] bool raw(void* p, size_t n) {
    if (n > remaining()) [[unlikely]]
      return short_by(n);
    if (n != 0) std::memcpy(p, at_, n);  // p may be null when n is 0
    at_ += n;
    return true;
  }

  template <class T>
  bool get(T& x) {
    if constexpr (std::is_base_of_v<caf::meta::annotation, T>) {
      return true;
    } else if constexpr (std::is_same_v<T, bool>) {
      uint8_t b = 0;
      if (!raw(&b, 1)) return false;
      x = b != 0;
      return true;
    } else if constexpr (std::is_integral_v<T> || std::is_enum_v<T>) {
      // Any value of the underlying type: the op rules refuse a kind or
      // dtype that is not one.
      return raw(&x, sizeof x);
    } else if constexpr (std::is_same_v<T, F64Bits>) {
      uint64_t bits = 0;
      if (!raw(&bits, 8)) return false;
      x.value = std::bit_cast<double>(bits);
      return true;
    } else if constexpr (std::is_same_v<T, TensorId>) {
      return raw(&x.value, 8);
    } else if constexpr (std::is_same_v<T, TensorIr>) {
      std::array<char, tensor_ir_head> head{};
      if (!raw(head.data(), head.size())) return false;
      return dims(x.shape, unpack_tensor_ir_head(head, x));
    } else if constexpr (std::is_same_v<T, Shape>) {
      uint32_t rank = 0;
      return raw(&rank, 4) && dims(x, rank);
    } else if constexpr (std::is_same_v<T, Bytes>) {
      uint64_t n = 0;
      if (!raw(&n, 8)) return false;
      // Checked before allocating: a peer's size never gets allocated
      // beyond what it sent.
      if (n > data_.size())
        return fail("declares " + std::to_string(n) + " bytes of data with " + std::to_string(data_.size()) + " left");
      x = Bytes::allocate(n);
      if (n != 0) std::memcpy(x.mutable_data(), data_.data(), n);
      data_ = data_.subspan(n);
      return true;
    } else if constexpr (std::is_same_v<T, TensorData>) {
      if (!get(x.shape) || !get(x.dtype) || !get(x.bytes)) return false;
      canonicalize_bools(x);
      return true;
    } else if constexpr (is_vector<T>::value) {
      uint32_t n = 0;
      if (!raw(&n, 4)) return false;
      // Each element takes at least min_bytes on the wire: the count is
      // checked against what came before anything is allocated.
      constexpr size_t min_bytes = std::is_same_v<typename T::value_type, TensorIr> ? tensor_ir_head : 8;
      static_assert(std::is_same_v<typename T::value_type, TensorIr> ||
                    std::is_same_v<typename T::value_type, int64_t>);
      if (size_t{n} > remaining() / min_bytes)
        return fail("declares " + std::to_string(n) + " elements with " + std::to_string(remaining()) + " bytes left");
      if constexpr (!std::is_same_v<T, std::vector<int64_t>>)  // int64s take what they took on the wire
        if (!charge(size_t{n} * sizeof(typename T::value_type))) return false;
      x.resize(n);
      if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
        return raw(x.data(), size_t{n} * 8);
      } else {
        for (auto& e : x)
          if (!get(e)) return false;
        return true;
      }
    } else {
      static_assert(!std::is_floating_point_v<T>, "doubles cross as F64Bits");
      return !inspect(*this, x);  // an op struct or Scalar
    }
  }

 private:
  bool dims(Shape& s, uint32_t rank) {
    if (rank > tensor_ir_max_rank || size_t{rank} * 8 > remaining())
      return fail("a tensor of " + std::to_string(rank) + " axes exceeds the bytes received or any rank");
    s.dims.resize(rank);
    return raw(s.dims.data(), size_t{rank} * 8);
  }

  const std::byte* at_;
  const std::byte* end_;
  std::span<const std::byte> data_;
  size_t budget_;
  std::string why_;
};

// The smallest op on the wire: a tag and an id (drop, seed).
constexpr size_t min_op_bytes = 9;

}  // namespace

size_t EncodedOps::wire_size() const {
  size_t n = 8 + block.size();
  for (const auto& d : data) n += d.size();
  return n;
}

EncodedOps encode_ops(const std::vector<OperationIr>& ops) {
  EncodedOps out;
  // Room for a typical op (a tag, a kind, two 2-d tensors, a scalar) each.
  out.block.resize(4 + ops.size() * 96);
  Writer w(out);
  const auto n = static_cast<uint32_t>(ops.size());
  w.raw(&n, 4);
  for (const auto& op : ops) {
    const auto tag = static_cast<uint8_t>(op.op.index());
    w.raw(&tag, 1);
    std::visit([&](const auto& alt) { w.put(alt); }, op.op);
  }
  w.finish();
  return out;
}

std::string decode_ops(std::span<const std::byte> bytes, std::vector<OperationIr>& ops) {
  uint64_t length = 0;
  if (bytes.size() < 8) return "shorter than its block's length";
  std::memcpy(&length, bytes.data(), 8);
  if (length > bytes.size() - 8)
    return "a block of " + std::to_string(length) + " bytes in " + std::to_string(bytes.size() - 8);
  // What the ops may take in memory: every op a batch may hold, plus twice
  // the block for what lists expand to. Data bytes and axes take what they
  // took on the wire and are not counted.
  Reader r(bytes.subspan(8, length), bytes.subspan(8 + length), max_wire_ops * sizeof(OperationIr) + 2 * length);
  uint32_t n = 0;
  if (!r.raw(&n, 4)) return "shorter than its op count";
  // An op is 608 bytes in memory and may be 9 on the wire: the cap keeps
  // what one message can make a worker allocate near 40 MiB (the client
  // sends no more ops in one message).
  if (n > max_wire_ops)
    return std::to_string(n) + " ops, more than the " + std::to_string(max_wire_ops) + " a batch may hold";
  if (size_t{n} > r.remaining() / min_op_bytes)
    return "declares " + std::to_string(n) + " ops with " + std::to_string(r.remaining()) + " bytes left";
  ops.clear();
  if (!r.charge(size_t{n} * sizeof(OperationIr))) return r.why();
  ops.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t tag = 0;
    if (!r.raw(&tag, 1)) return "op " + std::to_string(i) + ": " + r.why();
    auto& op = ops.emplace_back();
    if (!emplace_alternative(op.op, tag))
      return "op " + std::to_string(i) + ": unknown operation tag " + std::to_string(tag);
    if (!std::visit([&](auto& alt) { return r.get(alt); }, op.op)) return "op " + std::to_string(i) + ": " + r.why();
  }
  if (r.remaining() != 0) return std::to_string(r.remaining()) + " bytes after the last op";
  if (r.data_remaining() != 0) return std::to_string(r.data_remaining()) + " bytes of data no op declared";
  return {};
}

caf::error save_ops(caf::serializer& f, const std::vector<OperationIr>& ops) {
  const auto encoded = encode_ops(ops);
  size_t n = encoded.wire_size();
  uint64_t length = encoded.block.size();
  if (auto err = f.begin_sequence(n)) return err;
  if (auto err = f.apply_raw(8, &length)) return err;
  if (auto err = f.apply_raw(encoded.block.size(), const_cast<char*>(encoded.block.data()))) return err;
  // CAF's serializer only reads what apply_raw points at.
  for (const auto& d : encoded.data)
    if (auto err = f.apply_raw(d.size(), const_cast<std::byte*>(d.data()))) return err;
  return f.end_sequence();
}

caf::error load_ops(caf::deserializer& f, std::vector<OperationIr>& ops) {
  size_t n = 0;
  if (auto err = f.begin_sequence(n)) return err;
  std::string why;
  if (auto* bin = dynamic_cast<caf::binary_deserializer*>(&f)) {
    if (n > bin->remaining())
      return make_error(Errc::protocol_error, "op batch of " + std::to_string(n) + " bytes exceeds the " +
                                                  std::to_string(bin->remaining()) + " bytes received");
    // Read where it lies in the received message, without a copy first.
    why = decode_ops({reinterpret_cast<const std::byte*>(bin->remainder().data()), n}, ops);
    bin->skip(n);
  } else {
    // Another deserializer: copied in steps, so memory follows what
    // actually arrives.
    std::vector<std::byte> bytes;
    for (size_t done = 0; done < n;) {
      const size_t step = std::min<size_t>(n - done, size_t{1} << 20);
      bytes.resize(done + step);
      if (auto err = f.apply_raw(step, bytes.data() + done)) return err;
      done += step;
    }
    why = decode_ops(bytes, ops);
  }
  if (!why.empty()) return make_error(Errc::protocol_error, "op batch: " + why);
  return f.end_sequence();
}

std::vector<std::string> op_names(const std::vector<OperationIr>& ops) {
  std::vector<std::string> names;
  names.reserve(ops.size());
  for (const auto& op : ops) names.push_back(op.name());
  return names;
}

}  // namespace switchyard::detail
