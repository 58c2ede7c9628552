// SPDX-License-Identifier: Apache-2.0
// ONNX element types and TensorProto contents as Switchyard data; the
// node context the op implementations see.

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <onnx/onnx-data_pb.h>

#include "onnx_internal.hpp"

namespace switchyard::onnx {
namespace detail {

std::optional<DType> to_dtype(int32_t t) {
  switch (t) {
    case ::onnx::TensorProto::FLOAT:
      return DType::f32;
    case ::onnx::TensorProto::DOUBLE:
      return DType::f64;
    case ::onnx::TensorProto::INT32:
      return DType::i32;
    case ::onnx::TensorProto::INT64:
      return DType::i64;
    case ::onnx::TensorProto::UINT8:
      return DType::u8;
    case ::onnx::TensorProto::BOOL:
      return DType::boolean;
    case ::onnx::TensorProto::FLOAT16:
      return DType::f16;
    case ::onnx::TensorProto::BFLOAT16:
      return DType::bf16;
    case ::onnx::TensorProto::INT8:
      return DType::i8;
    case ::onnx::TensorProto::INT16:
      return DType::i16;
    default:
      return std::nullopt;
  }
}

std::string onnx_type_name(int32_t t) {
  if (::onnx::TensorProto::DataType_IsValid(t))
    return ::onnx::TensorProto::DataType_Name(static_cast<::onnx::TensorProto::DataType>(t));
  return "type " + std::to_string(t);
}

namespace {

template <class T, class Field>
TensorData from_field(const ::onnx::TensorProto& t, const Field& field, Shape shape) {
  if (field.size() != shape.numel())
    throw Error(Errc::invalid_argument, "onnx: tensor '" + t.name() + "' holds " + std::to_string(field.size()) +
                                            " values, its shape " + shape.to_string() + " needs " +
                                            std::to_string(shape.numel()));
  std::vector<T> v(field.begin(), field.end());
  return TensorData::from(v, std::move(shape));
}

// A decimal offset or length of an external data entry; anything else
// (a sign, junk, a value past int64) is refused naming the entry.
int64_t external_number(const ::onnx::TensorProto& t, const std::string& key, const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || ptr != end || v < 0)
    throw Error(Errc::invalid_argument, "onnx: tensor '" + t.name() + "': external data " + key + " '" + text +
                                            "' is not a non-negative decimal number");
  return v;
}

std::string read_external(const ::onnx::TensorProto& t, const std::string& base_dir) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = external_number(t, "offset", kv.value());
    if (kv.key() == "length") length = external_number(t, "length", kv.value());
  }
  const std::string label = "onnx: tensor '" + t.name() + "': ";
  if (location.empty() || location.find("..") != std::string::npos || location.front() == '/')
    throw Error(Errc::invalid_argument, label + "bad external data location '" + location + "'");
  // The file must lie in the model's folder once links are followed (a link
  // to /etc/passwd read it), and be a regular file (a FIFO blocked the load
  // for ever; a directory read as garbage).
  std::error_code ec;
  const auto folder = std::filesystem::weakly_canonical(base_dir.empty() ? "." : base_dir, ec);
  const auto path =
      std::filesystem::weakly_canonical(std::filesystem::path(base_dir.empty() ? "." : base_dir) / location, ec);
  if (ec)
    throw Error(Errc::invalid_argument, label + "cannot resolve external data '" + location + "': " + ec.message());
  const auto inside = std::mismatch(folder.begin(), folder.end(), path.begin(), path.end()).first == folder.end();
  if (!inside)
    throw Error(Errc::invalid_argument, label + "external data '" + location + "' resolves to " + path.string() +
                                            ", outside the model's folder");
  if (!std::filesystem::exists(path, ec))
    throw Error(Errc::invalid_argument, label + "cannot open external data " + path.string() + " (no such file)");
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(Errc::invalid_argument, label + "external data " + path.string() + " is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::invalid_argument, label + "cannot open external data " + path.string());
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) throw Error(Errc::invalid_argument, label + "cannot size external data " + path.string());
  // Compared without adding (offset + length overflowed and read nothing).
  if (offset > size || (length >= 0 && length > size - offset))
    throw Error(Errc::invalid_argument, label + "external data range (offset " + std::to_string(offset) +
                                            (length >= 0 ? ", length " + std::to_string(length) : "") +
                                            ") past the end of " + path.string() + " (" + std::to_string(size) +
                                            " bytes)");
  if (length < 0) length = size - offset;
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (in.gcount() != length)
    throw Error(Errc::invalid_argument, label + "external data " + path.string() + " ended early");
  return bytes;
}

}  // namespace

TensorData to_data(const ::onnx::TensorProto& t, const std::string& base_dir) {
  auto dt = to_dtype(t.data_type());
  if (!dt)
    throw Error(Errc::unsupported, "onnx: tensor '" + t.name() + "' has dtype " + onnx_type_name(t.data_type()) +
                                       ", which Switchyard lacks");
  Shape shape(std::vector<int64_t>(t.dims().begin(), t.dims().end()));
  // Checked here: Shape::numel wraps, and a wrapped count of 0 matched an
  // empty tensor's 0 values (a [2^40, 2^40] tensor with no bytes).
  int64_t elements = 1;
  for (auto d : shape.dims) {
    if (d < 0) throw Error(Errc::invalid_argument, "onnx: tensor '" + t.name() + "' has a negative extent");
    if (d > 0 && elements > (int64_t{1} << 48) / d)
      throw Error(Errc::invalid_argument,
                  "onnx: tensor '" + t.name() + "' has shape " + shape.to_string() + ", too many elements");
    elements *= d;
  }
  const size_t bytes_needed = static_cast<size_t>(shape.numel()) * size_of(*dt);
  const bool external = t.data_location() == ::onnx::TensorProto::EXTERNAL;
  if (external || t.has_raw_data()) {
    std::string raw = external ? read_external(t, base_dir) : t.raw_data();
    if (raw.size() != bytes_needed)
      throw Error(Errc::invalid_argument, "onnx: tensor '" + t.name() + "' holds " + std::to_string(raw.size()) +
                                              " bytes, its shape " + shape.to_string() + " needs " +
                                              std::to_string(bytes_needed));
    TensorData d(shape, *dt, Bytes::copy_of(raw.data(), raw.size()));
    if (*dt == DType::boolean) {
      auto* p = d.bytes.mutable_as<uint8_t>();
      for (int64_t i = 0; i < d.numel(); ++i) p[i] = p[i] != 0;
    }
    return d;
  }
  TensorData d;
  switch (*dt) {
    case DType::f32:
      d = from_field<float>(t, t.float_data(), shape);
      break;
    case DType::f64:
      d = from_field<double>(t, t.double_data(), shape);
      break;
    case DType::i64:
      d = from_field<int64_t>(t, t.int64_data(), shape);
      break;
    case DType::i32:
      d = from_field<int32_t>(t, t.int32_data(), shape);
      break;
    case DType::u8:
      d = from_field<uint8_t>(t, t.int32_data(), shape);
      break;
    case DType::i8:
      d = from_field<int8_t>(t, t.int32_data(), shape);
      break;
    case DType::i16:
      d = from_field<int16_t>(t, t.int32_data(), shape);
      break;
    case DType::f16:
    case DType::bf16: {  // int32_data holds each element's 16 bits
      std::vector<uint16_t> bits(t.int32_data().begin(), t.int32_data().end());
      if (static_cast<int64_t>(bits.size()) != shape.numel())
        throw Error(Errc::invalid_argument, "onnx: tensor '" + t.name() + "' holds " + std::to_string(bits.size()) +
                                                " values, its shape " + shape.to_string() + " needs " +
                                                std::to_string(shape.numel()));
      d = TensorData(shape, *dt, Bytes::copy_of(bits.data(), bits.size() * sizeof(uint16_t)));
      break;
    }
    case DType::boolean: {
      std::vector<int32_t> v = from_field<int32_t>(t, t.int32_data(), shape).to_vector<int32_t>();
      d = TensorData::from(std::vector<bool>(v.begin(), v.end()), shape);
      break;
    }
  }
  return d;
}

Value& Ctx::value(size_t i) const {
  if (!has(i)) fail(Errc::invalid_argument, "input " + std::to_string(i) + " is missing");
  return *inputs_[i];
}

Value& Ctx::in(size_t i) const {
  Value& v = value(i);
  if (!v.is_tensor()) {
    const std::string name = static_cast<int>(i) < node_.input_size() ? node_.input(static_cast<int>(i)) : "";
    fail(Errc::invalid_argument,
         "input " + std::to_string(i) + " ('" + name + "') is " + v.kind_name() + ", expected a tensor");
  }
  return v;
}

Tensor Ctx::dev(size_t i) const {
  Value& v = in(i);
  if (!v.dev.defined()) v.dev = device_.from_data(*v.host);
  // A value from another pipeline stage (or an input given elsewhere) is
  // bridged to this node's device.
  if (!(v.dev.device() == device_)) return v.dev.to(device_);
  return v.dev;
}

const TensorData& Ctx::host(size_t i) const { return read(in(i)); }

const TensorData& Ctx::read(const Value& v) const {
  if (v.host) return *v.host;
  if (v.input_read)
    *v.input_read = true;
  else if (computed_read_ != nullptr)
    *computed_read_ = true;
  if (!v.readback) v.readback = v.dev.read().get();
  return *v.readback;
}

std::vector<int64_t> Ctx::ints(size_t i) const {
  const TensorData& d = host(i);
  if (is_floating(d.dtype)) fail(Errc::dtype_mismatch, "input " + std::to_string(i) + " must be integers");
  return d.to_vector<int64_t>();
}

bool Ctx::all_host() const {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i] != nullptr && !inputs_[i]->host) return false;
  return true;
}

const ::onnx::AttributeProto* Ctx::attr(std::string_view name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t Ctx::attr_i(std::string_view name, int64_t fallback) const {
  const auto* a = attr(name);
  return a ? a->i() : fallback;
}

float Ctx::attr_f(std::string_view name, float fallback) const {
  const auto* a = attr(name);
  return a ? a->f() : fallback;
}

std::string Ctx::attr_s(std::string_view name, const std::string& fallback) const {
  const auto* a = attr(name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<int64_t>> Ctx::attr_ints(std::string_view name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<Value> Ctx::run_subgraph(std::string_view attribute, std::vector<Value> inputs) const {
  if (subgraphs_ == nullptr) fail(Errc::invalid_argument, "no subgraphs here");
  return (*subgraphs_)(attribute, std::move(inputs));
}

void Ctx::fail(Errc code, const std::string& what) const {
  std::string name = !node_.name().empty() ? node_.name() : index_ >= 0 ? "#" + std::to_string(index_) : "(unnamed)";
  throw Error(code, "onnx: node '" + name + "' (" + node_.op_type() + "): " + what);
}

}  // namespace detail

HostValue::HostValue(TensorData tensor) : kind_(Kind::tensor) { items_.push_back(std::move(tensor)); }

HostValue HostValue::sequence(std::vector<TensorData> items) {
  HostValue v;
  v.kind_ = Kind::sequence;
  v.items_ = std::move(items);
  return v;
}

HostValue HostValue::none() { return HostValue(); }

const TensorData& HostValue::tensor() const {
  if (kind_ != Kind::tensor)
    throw Error(Errc::invalid_argument, std::string("onnx: the value is ") +
                                            (is_sequence() ? "a sequence" : "an empty optional") + ", not a tensor");
  return items_.front();
}

const std::vector<TensorData>& HostValue::items() const {
  if (kind_ != Kind::sequence)
    throw Error(Errc::invalid_argument, std::string("onnx: the value is ") +
                                            (is_tensor() ? "a tensor" : "an empty optional") + ", not a sequence");
  return items_;
}

namespace {

HostValue from_sequence_proto(const ::onnx::SequenceProto& s, const std::string& dir, const std::string& path) {
  if (s.elem_type() != ::onnx::SequenceProto::TENSOR && s.tensor_values_size() == 0 &&
      s.elem_type() != ::onnx::SequenceProto::UNDEFINED)
    throw Error(Errc::unsupported, "onnx: " + path + " holds a sequence of non-tensors");
  std::vector<TensorData> items;
  for (const auto& t : s.tensor_values()) items.push_back(detail::to_data(t, dir));
  return HostValue::sequence(std::move(items));
}

}  // namespace

HostValue read_value_proto(const std::string& path, ValueKind kind) {
  if (kind == ValueKind::tensor) return read_tensor_proto(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::invalid_argument, "onnx: cannot open " + path);
  auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (kind == ValueKind::sequence) {
    ::onnx::SequenceProto s;
    if (!s.ParseFromIstream(&in)) throw Error(Errc::invalid_argument, "onnx: " + path + " is not a SequenceProto");
    return from_sequence_proto(s, dir, path);
  }
  ::onnx::OptionalProto o;
  if (!o.ParseFromIstream(&in)) throw Error(Errc::invalid_argument, "onnx: " + path + " is not an OptionalProto");
  if (o.has_tensor_value()) return detail::to_data(o.tensor_value(), dir);
  if (o.has_sequence_value()) return from_sequence_proto(o.sequence_value(), dir, path);
  if (o.elem_type() != ::onnx::OptionalProto::UNDEFINED && o.elem_type() != ::onnx::OptionalProto::TENSOR &&
      o.elem_type() != ::onnx::OptionalProto::SEQUENCE)
    throw Error(Errc::unsupported, "onnx: " + path + " holds an optional of a map or sparse tensor");
  return HostValue::none();
}

namespace {

::onnx::TensorProto parse_tensor_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::invalid_argument, "onnx: cannot open " + path);
  ::onnx::TensorProto t;
  if (!t.ParseFromIstream(&in)) throw Error(Errc::invalid_argument, "onnx: " + path + " is not a TensorProto");
  return t;
}

std::string directory_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

TensorData read_tensor_proto(const std::string& path) {
  return detail::to_data(parse_tensor_proto(path), directory_of(path));
}

TensorData read_tensor_proto(const std::string& path, DType as) {
  auto t = parse_tensor_proto(path);
  const auto held = detail::to_dtype(t.data_type());
  if (held == as) return detail::to_data(t, directory_of(path));
  if (t.data_type() == ::onnx::TensorProto::UINT16 && (as == DType::bf16 || as == DType::f16)) {
    // Raw bytes and int32_data hold 16-bit patterns alike for all three.
    t.set_data_type(as == DType::bf16 ? ::onnx::TensorProto::BFLOAT16 : ::onnx::TensorProto::FLOAT16);
    return detail::to_data(t, directory_of(path));
  }
  throw Error(Errc::invalid_argument, "onnx: " + path + " holds " + detail::onnx_type_name(t.data_type()) +
                                          " data, the value is declared " + std::string(name_of(as)));
}

}  // namespace switchyard::onnx
