// SPDX-License-Identifier: Apache-2.0
#include <cmath>
#include <limits>
#include <new>
#include <sstream>
#include <type_traits>

#include <caf/sec.hpp>

#include "switchyard/messages/dtype.hpp"
#include "switchyard/messages/error.hpp"
#include "switchyard/messages/scalar.hpp"
#include "switchyard/messages/shape.hpp"
#include "switchyard/messages/tensor_data.hpp"

namespace switchyard {

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (auto t : all_dtypes)
    if (name_of(t) == name) return t;
  return std::nullopt;
}

Dims::Dims(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }

Dims::operator std::vector<int64_t>() const { return {begin(), end()}; }

std::vector<int64_t> Dims::to_vector() const { return {begin(), end()}; }

void Dims::grow(size_t n) {
  n = n < 2 * size_t{capacity_} ? 2 * size_t{capacity_} : n;
  if (n > UINT32_MAX) throw std::bad_array_new_length();
  std::vector<int64_t> bigger(n);
  const int64_t* old = data();
  for (size_t i = 0; i < size_; ++i) bigger[i] = old[i];
  heap_ = std::move(bigger);
  capacity_ = static_cast<uint32_t>(n);
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims.size());
  // Unsigned: wraps instead of overflowing for hostile shapes (rules_fuzzer).
  uint64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = static_cast<int64_t>(acc);
    acc *= static_cast<uint64_t>(dims[i]);
  }
  return s;
}

std::string Shape::to_string() const {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.rank(), b.rank());
  Shape out;
  out.dims.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.rank() ? 1 : a.dims[i - (rank - a.rank())];
    int64_t db = i < rank - b.rank() ? 1 : b.dims[i - (rank - b.rank())];
    if (da == db || db == 1)
      out.dims[i] = da;
    else if (da == 1)
      out.dims[i] = db;
    else
      return std::nullopt;
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& from, const Shape& to) {
  std::vector<int64_t> out(to.rank(), 0);
  auto s = from.strides();
  size_t lead = to.rank() - from.rank();
  for (size_t i = 0; i < from.rank(); ++i) out[lead + i] = from.dims[i] == 1 && to.dims[lead + i] != 1 ? 0 : s[i];
  return out;
}

std::optional<int64_t> normalize_axis(int64_t axis, size_t rank) noexcept {
  auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

const char* to_string(Errc code) noexcept {
  switch (code) {
    case Errc::shape_mismatch:
      return "shape_mismatch";
    case Errc::dtype_mismatch:
      return "dtype_mismatch";
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::unknown_device:
      return "unknown_device";
    case Errc::device_mismatch:
      return "device_mismatch";
    case Errc::invalid_tensor:
      return "invalid_tensor";
    case Errc::unknown_tensor:
      return "unknown_tensor";
    case Errc::kernel_failure:
      return "kernel_failure";
    case Errc::out_of_memory:
      return "out_of_memory";
    case Errc::index_out_of_range:
      return "index_out_of_range";
    case Errc::device_lost:
      return "device_lost";
    case Errc::runtime_closed:
      return "runtime_closed";
    case Errc::protocol_error:
      return "protocol_error";
    case Errc::unsupported:
      return "unsupported";
    case Errc::worker_unreachable:
      return "worker_unreachable";
  }
  return "unknown";
}

ErrorInfo describe(const caf::error& err) {
  ErrorInfo info;
  if (!err) {
    info.code = Errc::protocol_error;
    info.message = "empty error";
    return info;
  }
  if (err.category() == error_category) {
    info.code = static_cast<Errc>(err.code());
    const auto& ctx = err.context();
    // (message) or (message, failed op's output id); anything else a peer
    // sends is not trusted for either.
    if ((ctx.size() == 1 || ctx.size() == 2) && ctx.match_element<std::string>(0))
      info.message = ctx.get_as<std::string>(0);
    else
      info.message = to_string(info.code);
    if (ctx.size() == 2 && ctx.match_element<std::string>(0) && ctx.match_element<uint64_t>(1))
      info.tensor = TensorId{ctx.get_as<uint64_t>(1)};
    return info;
  }
  if (err.category() == caf::atom("system")) {
    auto code = static_cast<caf::sec>(err.code());
    switch (code) {
      case caf::sec::request_receiver_down:
      case caf::sec::request_timeout:
        info.code = Errc::device_lost;
        info.message = "device lost: " + caf::to_string(code);
        return info;
      default:
        break;
    }
  }
  info.code = Errc::protocol_error;
  info.message = "actor system error: " + caf::to_string(err);
  return info;
}

TensorData::TensorData(Shape s, DType t, Bytes b) : shape(std::move(s)), dtype(t), bytes(std::move(b)) {
  // The shape first: a negative extent or an overflowing product made the
  // byte count below meaningless (18446744073709551600 bytes for [-2, 2]).
  uint64_t want = size_of(dtype);
  bool overflow = false, empty = false;
  for (auto d : shape.dims) {
    if (d < 0) throw Error(Errc::shape_mismatch, "TensorData: shape " + shape.to_string() + " has a negative extent");
    empty = empty || d == 0;
    overflow = overflow || __builtin_mul_overflow(want, static_cast<uint64_t>(d), &want);
  }
  if (empty) want = 0;
  if (overflow && !empty)
    throw Error(Errc::shape_mismatch, "TensorData: shape " + shape.to_string() + " of " + std::string(name_of(dtype)) +
                                          " holds more bytes than memory can (" + std::to_string(bytes.size()) +
                                          " given)");
  if (bytes.size() != want)
    throw Error(Errc::shape_mismatch, "TensorData: " + std::to_string(bytes.size()) + " bytes do not match shape " +
                                          shape.to_string() + " of " + std::string(name_of(dtype)) + " (" +
                                          std::to_string(want) + " bytes)");
}

void TensorData::check_dtype(DType expected) const {
  // bool and u8 share storage; reading bool data as u8 is allowed.
  if (expected == dtype || (expected == DType::u8 && dtype == DType::boolean)) return;
  throw Error(Errc::dtype_mismatch, "TensorData: requested " + std::string(name_of(expected)) +
                                        " elements but the tensor holds " + std::string(name_of(dtype)));
}

void canonicalize_bools(TensorData& x) noexcept {
  if (x.dtype != DType::boolean) return;
  const auto* src = x.bytes.as<const uint8_t>();
  const size_t n = x.bytes.size();
  size_t first = 0;
  while (first < n && src[first] <= 1) ++first;
  if (first == n) return;  // the common case: already canonical, nothing written
  // Copy-on-write: a holder sharing the block keeps its bytes.
  auto* dst = x.bytes.mutable_as<uint8_t>();
  for (size_t i = first; i < n; ++i) dst[i] = dst[i] != 0 ? 1 : 0;
}

double TensorData::at(int64_t i) const {
  if (i < 0 || i >= numel())
    throw Error(Errc::index_out_of_range,
                "TensorData::at: index " + std::to_string(i) + " outside " + std::to_string(numel()) + " elements");
  return visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    // A bool byte from the wire may hold any value; loading it as bool is UB.
    if constexpr (std::is_same_v<T, bool>)
      return bytes.as<const uint8_t>()[i] != 0 ? 1.0 : 0.0;
    else
      return static_cast<double>(bytes.as<const T>()[i]);
  });
}

}  // namespace switchyard

namespace switchyard {

bool Scalar::fits(DType t) const noexcept {
  if (is_bool(t)) return true;
  if (kind == ScalarKind::floating) {
    if (std::isnan(f)) return is_floating(t);
    if (std::isinf(f)) return is_floating(t);
    switch (t) {
      case DType::f32:
        return std::fabs(f) <= static_cast<double>(std::numeric_limits<float>::max());
      case DType::f64:
        return true;
      case DType::i32:
        return f >= -2147483648.0 && f <= 2147483647.0;
      case DType::i64:  // 2^63 itself does not fit; -2^63 does
        return f >= -9223372036854775808.0 && f < 9223372036854775808.0;
      case DType::u8:
        return f >= 0 && f <= 255;
      case DType::i8:
        return f >= -128.0 && f <= 127.0;
      case DType::i16:
        return f >= -32768.0 && f <= 32767.0;
      case DType::f16:  // c10 refuses finite values beyond the type's range
        return std::fabs(f) <= 65504.0;
      case DType::bf16:
        return std::fabs(f) <= 3.3895313892515355e38;
      case DType::boolean:
        return true;
    }
    return false;
  }
  if (t == DType::f16) {  // the only float type whose range an int64 exceeds
    if (is_unsigned) return static_cast<uint64_t>(i) <= 65504u;
    return i >= -65504 && i <= 65504;
  }
  if (is_floating(t)) return true;
  if (is_unsigned) {
    const auto u = static_cast<uint64_t>(i);
    switch (t) {
      case DType::i32:
        return u <= 2147483647u;
      case DType::i64:
        return u <= 9223372036854775807u;
      case DType::u8:
        return u <= 255u;
      case DType::i8:
        return u <= 127u;
      case DType::i16:
        return u <= 32767u;
      default:
        return true;
    }
  }
  switch (t) {
    case DType::i32:
      return i >= std::numeric_limits<int32_t>::min() && i <= std::numeric_limits<int32_t>::max();
    case DType::u8:  // c10 lets negative values down to -255 wrap
      return i >= -255 && i <= 255;
    case DType::i8:
      return i >= -128 && i <= 127;
    case DType::i16:
      return i >= -32768 && i <= 32767;
    default:
      return true;
  }
}

std::string Scalar::to_string() const {
  switch (kind) {
    case ScalarKind::boolean:
      return i != 0 ? "true" : "false";
    case ScalarKind::integral:
      return is_unsigned ? std::to_string(static_cast<uint64_t>(i)) : std::to_string(i);
    case ScalarKind::floating:
      break;
  }
  std::ostringstream s;
  s.precision(17);
  s << f;
  return s.str();
}

}  // namespace switchyard
