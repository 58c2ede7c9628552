// SPDX-License-Identifier: Apache-2.0
#include "onnx_serving.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <simdjson.h>

#include "json_io.hpp"
#include "replica_choice.hpp"

namespace sy = switchyard;
namespace sox = switchyard::onnx;
using json = nlohmann::json;

namespace serve {
namespace {

constexpr size_t kMaxRank = 8;

// Shape of a nested list (rectangular), or an error.
// Every list at depth d holds dims[d] entries and every number sits at
// depth dims.size(). (Read as it went, a row shallower than a later
// sibling slipped through: [[1, 1], [[2], [3]]] was taken as [2, 2, 1].)
bool shape_fits(const json& v, size_t depth, const std::vector<int64_t>& dims, std::string& err) {
  if (!v.is_array()) {
    if (depth == dims.size()) return true;
    err = "is ragged (a number where a list was expected)";
    return false;
  }
  if (depth >= dims.size()) {
    err = "is ragged (a list where a number was expected)";
    return false;
  }
  if (dims[depth] != static_cast<int64_t>(v.size())) {
    err = "is ragged (lists of different lengths at depth " + std::to_string(depth) + ")";
    return false;
  }
  for (const auto& e : v)
    if (!shape_fits(e, depth + 1, dims, err)) return false;
  return true;
}

// The shape, read down the first entries, then checked on every entry.
bool shape_of(const json& v, std::vector<int64_t>& dims, std::string& err) {
  dims.clear();
  for (const json* p = &v; p->is_array(); p = &p->front()) {
    if (dims.size() >= kMaxRank) {
      err = "nests deeper than " + std::to_string(kMaxRank) + " levels";
      return false;
    }
    dims.push_back(static_cast<int64_t>(p->size()));
    if (p->empty()) break;
  }
  return shape_fits(v, 0, dims, err);
}

template <class T>
bool fill(const json& v, std::vector<T>& out, sy::DType t, std::string& err) {
  if (v.is_array()) {
    for (const auto& e : v)
      if (!fill(e, out, t, err)) return false;
    return true;
  }
  if (t == sy::DType::boolean) {
    if (v.is_boolean()) {
      out.push_back(static_cast<T>(v.get<bool>()));
      return true;
    }
    if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) {
      out.push_back(static_cast<T>(v.get<int64_t>()));
      return true;
    }
    err = "must hold booleans";
    return false;
  }
  if (!v.is_number()) {
    err = "must hold numbers";
    return false;
  }
  if (sy::is_floating(t)) {
    double d = v.get<double>();
    const double max = t == sy::DType::f32    ? 3.4028234663852886e38
                       : t == sy::DType::f16  ? 65504.0
                       : t == sy::DType::bf16 ? 3.3895313892515355e38
                                              : 1.7976931348623157e308;
    if (!std::isfinite(d) || std::abs(d) > max) {
      err = "holds a value outside " + std::string(sy::name_of(t));
      return false;
    }
    out.push_back(static_cast<T>(d));
    return true;
  }
  if (!v.is_number_integer()) {
    err = "must hold integers (dtype " + std::string(sy::name_of(t)) + ")";
    return false;
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    err = "holds " + std::to_string(v.get<uint64_t>()) + ", outside " + std::string(sy::name_of(t));
    return false;
  }
  const auto i = v.get<int64_t>();
  const bool fits = t == sy::DType::i64 || (t == sy::DType::i32 && i >= INT32_MIN && i <= INT32_MAX) ||
                    (t == sy::DType::u8 && i >= 0 && i <= 255) || (t == sy::DType::i8 && i >= -128 && i <= 127) ||
                    (t == sy::DType::i16 && i >= -32768 && i <= 32767);
  if (!fits) {
    err = "holds " + std::to_string(i) + ", outside " + std::string(sy::name_of(t));
    return false;
  }
  out.push_back(static_cast<T>(i));
  return true;
}

std::string to_data(const json& v, const sox::ValueInfo& info, sy::TensorData& out) {
  std::vector<int64_t> dims;
  std::string err;
  if (!shape_of(v, dims, err)) return err;
  // A model that declares no shape for the input takes any rank.
  if (info.has_shape && dims.size() != info.dims.size())
    return "must have " + std::to_string(info.dims.size()) + " axes (nesting levels), got " +
           std::to_string(dims.size());
  for (size_t a = 0; a < info.dims.size(); ++a)
    if (info.dims[a] >= 0 && dims[a] != info.dims[a])
      return "axis " + std::to_string(a) + " must have " + std::to_string(info.dims[a]) + " entries, got " +
             std::to_string(dims[a]);
  sy::Shape shape(dims);
  auto finish = [&](auto vec) -> std::string {
    if (!fill(v, vec, info.dtype, err)) return err;
    out = sy::TensorData::from(vec, shape);
    return "";
  };
  switch (info.dtype) {
    case sy::DType::f32:
      return finish(std::vector<float>{});
    case sy::DType::f64:
      return finish(std::vector<double>{});
    case sy::DType::i32:
      return finish(std::vector<int32_t>{});
    case sy::DType::i64:
      return finish(std::vector<int64_t>{});
    case sy::DType::u8:
      return finish(std::vector<uint8_t>{});
    case sy::DType::boolean:
      return finish(std::vector<bool>{});
    case sy::DType::f16:
      return finish(std::vector<sy::Half>{});
    case sy::DType::bf16:
      return finish(std::vector<sy::BFloat16>{});
    case sy::DType::i8:
      return finish(std::vector<int8_t>{});
    case sy::DType::i16:
      return finish(std::vector<int16_t>{});
  }
  return "has an unknown dtype";
}

json to_json(const sy::TensorData& d) {
  // Row-major walk building nested arrays.
  const auto& dims = d.shape.dims;
  std::vector<double> f;
  std::vector<int64_t> i;
  const bool fl = sy::is_floating(d.dtype), b = sy::is_bool(d.dtype);
  if (fl)
    f = d.to_vector<double>();
  else
    i = d.to_vector<int64_t>();
  size_t at = 0;
  std::function<json(size_t)> build = [&](size_t depth) -> json {
    if (depth == dims.size()) {
      size_t k = at++;
      if (fl) return std::isfinite(f[k]) ? json(f[k]) : json(nullptr);
      if (b) return json(i[k] != 0);
      return json(i[k]);
    }
    json arr = json::array();
    for (int64_t k = 0; k < dims[depth]; ++k) arr.push_back(build(depth + 1));
    return arr;
  };
  return build(0);
}

std::string key_of(const sox::DataMap& inputs) {
  std::string key;
  for (const auto& [name, d] : inputs) {
    key += name + ":";
    for (size_t a = 1; a < d.shape.rank(); ++a) key += std::to_string(d.shape[a]) + ",";
    key += ";";
  }
  return key;
}

// Stacks the parts along axis 0 (row-major: their bytes one after another).
sy::TensorData stack_rows(const std::vector<const sy::TensorData*>& parts) {
  sy::Shape shape = parts.front()->shape;
  shape.dims[0] = 0;
  size_t bytes = 0;
  for (auto* p : parts) {
    shape.dims[0] += p->shape[0];
    bytes += p->bytes.size();
  }
  sy::Bytes out = sy::Bytes::allocate(bytes);
  size_t at = 0;
  for (auto* p : parts) {
    std::memcpy(out.mutable_data() + at, p->bytes.data(), p->bytes.size());
    at += p->bytes.size();
  }
  return sy::TensorData(shape, parts.front()->dtype, std::move(out));
}

sy::TensorData rows_of(const sy::TensorData& d, int64_t first, int64_t n) {
  sy::Shape shape = d.shape;
  shape.dims[0] = n;
  const size_t row_bytes = d.shape[0] == 0 ? 0 : d.bytes.size() / static_cast<size_t>(d.shape[0]);
  return sy::TensorData(
      shape, d.dtype,
      sy::Bytes::copy_of(d.bytes.data() + static_cast<size_t>(first) * row_bytes, static_cast<size_t>(n) * row_bytes));
}

// The fast path for the common request: a body that is valid JSON (by
// simdjson's parser, about ten times nlohmann's speed on a megabyte of
// numbers), and an acceptable request, read straight into each input's
// buffer. It declines (nullopt) whatever the slow path below would refuse
// or read differently: it never reports an error itself, so every message
// a client sees comes from one place, and what it accepts it reads to the
// same bytes (tests/serve compares the two on generated bodies).
namespace fast {

namespace dom = simdjson::dom;

// The extents of a nested list, following first elements, or nullopt past
// kMaxRank levels. Raggedness is found by `fill`.
std::optional<std::vector<int64_t>> dims_of(dom::element v) {
  std::vector<int64_t> dims;
  dom::array a;
  while (v.get(a) == simdjson::SUCCESS) {
    if (dims.size() == kMaxRank) return std::nullopt;
    dims.push_back(static_cast<int64_t>(a.size()));
    if (a.size() == 0) break;
    v = *a.begin();
  }
  return dims;
}

// One number as `fill` above reads it for dtype t, or nullopt where that
// would refuse it.
template <class T>
std::optional<T> number(dom::element v, sy::DType t) {
  if (sy::is_floating(t)) {
    double d = 0;
    int64_t i = 0;
    uint64_t u = 0;
    if (v.get(i) == simdjson::SUCCESS)
      d = static_cast<double>(i);
    else if (v.get(u) == simdjson::SUCCESS)
      d = static_cast<double>(u);
    else if (v.get(d) != simdjson::SUCCESS)
      return std::nullopt;
    const double max = t == sy::DType::f32    ? 3.4028234663852886e38
                       : t == sy::DType::f16  ? 65504.0
                       : t == sy::DType::bf16 ? 3.3895313892515355e38
                                              : 1.7976931348623157e308;
    if (!std::isfinite(d) || std::abs(d) > max) return std::nullopt;
    return static_cast<T>(d);
  }
  // Integers: an integer token of the dtype's range (a float token, 1.0
  // included, is refused by the slow path too).
  if (v.type() != dom::element_type::INT64) return std::nullopt;
  const int64_t i = int64_t(v);
  const bool fits = t == sy::DType::i64 || (t == sy::DType::i32 && i >= INT32_MIN && i <= INT32_MAX) ||
                    (t == sy::DType::u8 && i >= 0 && i <= 255) || (t == sy::DType::i8 && i >= -128 && i <= 127) ||
                    (t == sy::DType::i16 && i >= -32768 && i <= 32767);
  if (!fits) return std::nullopt;
  return static_cast<T>(i);
}

// Appends the numbers of `v` (depth `depth` of `dims`) to `out`; false
// where the list is ragged or holds anything but numbers of the dtype.
template <class T>
bool fill(dom::element v, size_t depth, const std::vector<int64_t>& dims, sy::DType t, T*& out) {
  if (depth == dims.size()) {
    auto x = number<T>(v, t);
    if (!x) return false;
    *out++ = *x;
    return true;
  }
  dom::array a;
  if (v.get(a) != simdjson::SUCCESS || static_cast<int64_t>(a.size()) != dims[depth]) return false;
  for (dom::element e : a)
    if (!fill(e, depth + 1, dims, t, out)) return false;
  return true;
}

template <class T>
std::optional<sy::TensorData> typed(dom::element v, const std::vector<int64_t>& dims, sy::DType t) {
  sy::Shape shape(dims);
  const auto n = static_cast<size_t>(shape.numel());
  auto bytes = sy::Bytes::allocate(n * sizeof(T));
  T* out = reinterpret_cast<T*>(bytes.mutable_data());
  if (!fill(v, 0, dims, t, out)) return std::nullopt;
  return sy::TensorData(std::move(shape), t, std::move(bytes));
}

std::optional<sy::TensorData> to_data(dom::element v, const sox::ValueInfo& info) {
  auto dims = dims_of(v);
  if (!dims || (info.has_shape && dims->size() != info.dims.size())) return std::nullopt;
  for (size_t a = 0; a < info.dims.size(); ++a)
    if (info.dims[a] >= 0 && (*dims)[a] != info.dims[a]) return std::nullopt;
  switch (info.dtype) {
    case sy::DType::f32:
      return typed<float>(v, *dims, info.dtype);
    case sy::DType::f64:
      return typed<double>(v, *dims, info.dtype);
    case sy::DType::f16:
      return typed<sy::Half>(v, *dims, info.dtype);
    case sy::DType::bf16:
      return typed<sy::BFloat16>(v, *dims, info.dtype);
    case sy::DType::i32:
      return typed<int32_t>(v, *dims, info.dtype);
    case sy::DType::i64:
      return typed<int64_t>(v, *dims, info.dtype);
    case sy::DType::u8:
      return typed<uint8_t>(v, *dims, info.dtype);
    case sy::DType::i8:
      return typed<int8_t>(v, *dims, info.dtype);
    case sy::DType::i16:
      return typed<int16_t>(v, *dims, info.dtype);
    case sy::DType::boolean:
      return std::nullopt;  // rare in requests; the slow path reads them
  }
  return std::nullopt;
}

// Each declared input with its data, in declaration order.
using Given = std::vector<std::pair<const sox::ValueInfo*, sy::TensorData>>;

std::optional<Given> inputs(const std::string& body, const std::vector<sox::ValueInfo>& decl) {
  // One parser per thread: it keeps its buffers (about the body's size)
  // between requests.
  thread_local dom::parser parser;
  dom::element doc;
  if (parser.parse(body.data(), body.size(), true).get(doc) != simdjson::SUCCESS) return std::nullopt;
  dom::object top;
  if (doc.get(top) != simdjson::SUCCESS) return std::nullopt;
  // A key given twice: nlohmann keeps the last, simdjson's lookup the first.
  std::optional<dom::element> in;
  for (auto field : top) {
    if (field.key != "inputs") continue;
    if (in) return std::nullopt;
    in = field.value;
  }
  if (!in) return std::nullopt;
  Given given;
  dom::object named;
  if (in->is_array()) {
    if (decl.size() != 1) return std::nullopt;
    auto d = to_data(*in, decl[0]);
    if (!d) return std::nullopt;
    given.emplace_back(&decl[0], std::move(*d));
    return given;
  }
  if (in->get(named) != simdjson::SUCCESS || named.size() != decl.size()) return std::nullopt;
  for (const auto& v : decl) {
    std::optional<dom::element> value;
    for (auto field : named) {
      if (field.key != v.name) continue;
      if (value) return std::nullopt;
      value = field.value;
    }
    if (!value) return std::nullopt;
    auto d = to_data(*value, v);
    if (!d) return std::nullopt;
    given.emplace_back(&v, std::move(*d));
  }
  return given;
}

}  // namespace fast

// The slow path: nlohmann's DOM, and the error messages.
std::string slow_inputs(const std::string& body, const std::vector<sox::ValueInfo>& decl, fast::Given& out) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return malformed_json(body, e);
  }
  if (!j.is_object() || !j.contains("inputs")) return "request body must be an object with \"inputs\"";
  const json& in = j["inputs"];
  std::vector<std::pair<const sox::ValueInfo*, const json*>> given;
  if (in.is_array()) {
    if (decl.size() != 1)
      return "the model takes " + std::to_string(decl.size()) +
             " inputs: give \"inputs\" as an object {NAME: nested list, ...}";
    given.emplace_back(&decl[0], &in);
  } else if (in.is_object()) {
    for (auto it = in.begin(); it != in.end(); ++it)
      if (std::none_of(decl.begin(), decl.end(), [&](const sox::ValueInfo& v) { return v.name == it.key(); }))
        return "the model has no input '" + it.key() + "'";
    for (const auto& v : decl) {
      if (!in.contains(v.name)) return "input '" + v.name + "' is missing";
      given.emplace_back(&v, &in[v.name]);
    }
  } else {
    return "\"inputs\" must be a nested list or an object of them";
  }
  for (auto [info, value] : given) {
    sy::TensorData d;
    if (auto err = to_data(*value, *info, d); !err.empty()) return "input '" + info->name + "' " + err;
    out.emplace_back(info, std::move(d));
  }
  return "";
}

// The batch-invariance probe of check_batching().

template <class T>
sy::TensorData typed_data(const std::vector<double>& v, const sy::Shape& shape) {
  std::vector<T> out;
  out.reserve(v.size());
  for (double d : v) out.push_back(static_cast<T>(d));
  return sy::TensorData::from(out, shape);
}

// Synthetic data for `info` with `rows` rows on axis 0 (see check_batching).
sy::TensorData probe_data(const sox::ValueInfo& info, int64_t rows, std::mt19937_64& rng) {
  std::vector<int64_t> dims = info.dims;
  dims[0] = rows;
  for (size_t a = 1; a < dims.size(); ++a)
    if (dims[a] < 0) dims[a] = 2;
  sy::Shape shape(dims);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  if (sy::is_floating(info.dtype)) {
    std::uniform_real_distribution<double> dist(0.1, 1.0);
    for (auto& x : v) x = dist(rng);
  } else {
    const int64_t extent = info.index_extent >= 0 ? std::max<int64_t>(info.index_extent, 1) : 2;
    std::uniform_int_distribution<int64_t> dist(0, extent - 1);
    for (auto& x : v) x = static_cast<double>(dist(rng));
  }
  switch (info.dtype) {
    case sy::DType::f32:
      return typed_data<float>(v, shape);
    case sy::DType::f64:
      return typed_data<double>(v, shape);
    case sy::DType::f16:
      return typed_data<sy::Half>(v, shape);
    case sy::DType::bf16:
      return typed_data<sy::BFloat16>(v, shape);
    case sy::DType::i32:
      return typed_data<int32_t>(v, shape);
    case sy::DType::i64:
      return typed_data<int64_t>(v, shape);
    case sy::DType::u8:
      return typed_data<uint8_t>(v, shape);
    case sy::DType::i8:
      return typed_data<int8_t>(v, shape);
    case sy::DType::i16:
      return typed_data<int16_t>(v, shape);
    case sy::DType::boolean: {
      std::vector<bool> b(v.size());
      for (size_t k = 0; k < v.size(); ++k) b[k] = v[k] != 0;
      return sy::TensorData::from(b, shape);
    }
  }
  throw sy::Error(sy::Errc::unsupported, "input '" + info.name + "' has an unknown dtype");
}

// Runs `m` on `inputs`, waiting at most `limit`; throws what the run throws.
sox::DataMap probe_run(const sox::Model& m, const sox::DataMap& inputs, std::chrono::milliseconds limit) {
  auto fut = m.infer(inputs);
  if (!fut.wait_for(limit))
    throw sy::Error(sy::Errc::kernel_failure, "it did not finish within " + std::to_string(limit.count()) + " ms");
  return fut.get();
}

// Whether `part` (rows of a batched output) is what the request got alone;
// floats within the tolerance of check_batching().
bool same_output(const sy::TensorData& part, const sy::TensorData& alone) {
  if (part.shape != alone.shape || part.dtype != alone.dtype) return false;
  if (!sy::is_floating(alone.dtype)) return part.to_vector<int64_t>() == alone.to_vector<int64_t>();
  const auto a = part.to_vector<double>(), b = alone.to_vector<double>();
  const bool half = alone.dtype == sy::DType::f16 || alone.dtype == sy::DType::bf16;
  const double rtol = half ? 1e-2 : 1e-4, atol = half ? 1e-3 : 1e-5;
  double scale = 1;
  for (double x : b)
    if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  for (size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k]) || std::isnan(b[k])) {
      if (std::isnan(a[k]) != std::isnan(b[k])) return false;
      continue;
    }
    if (a[k] == b[k]) continue;  // infinities of the same sign
    if (!(std::abs(a[k] - b[k]) <= rtol * std::max(std::abs(a[k]), std::abs(b[k])) + atol * scale)) return false;
  }
  return true;
}

}  // namespace

OnnxParsed parse_onnx_inputs(const std::string& body, const std::vector<sox::ValueInfo>& decl, InputParser parser) {
  OnnxParsed p;
  if (auto at = invalid_utf8_at(body)) {
    p.error = "the body is not valid UTF-8 (byte " + std::to_string(*at) + ")";
    return p;
  }
  std::optional<fast::Given> given;
  if (parser != InputParser::slow_only) given = fast::inputs(body, decl);
  if (!given && parser == InputParser::fast_only) {
    p.error = "declined by the fast path";
    return p;
  }
  if (!given) {
    given.emplace();
    if (auto err = slow_inputs(body, decl, *given); !err.empty()) {
      p.error = std::move(err);
      return p;
    }
  }
  p.rows = -1;
  for (auto& [info, d] : *given) {
    // An index (token id) out of range here, before batching: on the device
    // it would fail every request of the batch.
    if (info->index_extent >= 0) {
      const std::vector<int64_t> ids = d.to_vector<int64_t>();
      for (size_t k = 0; k < ids.size(); ++k)
        if (ids[k] < -info->index_extent || ids[k] >= info->index_extent) {
          p.error = "input '" + info->name + "' holds " + std::to_string(ids[k]) + " (value " + std::to_string(k) +
                    " in row-major order): the model indexes " + std::to_string(info->index_extent) +
                    " entries with it, so values must lie in [" + std::to_string(-info->index_extent) + ", " +
                    std::to_string(info->index_extent) + ")";
          return p;
        }
    }
    const int64_t rows = d.shape.rank() > 0 ? d.shape[0] : 0;
    p.rows = p.rows < 0 || p.rows == rows ? rows : 0;
    p.inputs.emplace(info->name, std::move(d));
  }
  if (p.rows < 0) p.rows = 0;
  return p;
}

std::string onnx_outputs_body(const sox::DataMap& outputs) {
  json out = json::object();
  for (const auto& [name, d] : outputs) out[name] = to_json(d);
  return json{{"outputs", out}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string onnx_signature_json(const sox::Model& m) {
  auto list = [](const std::vector<sox::ValueInfo>& vs) {
    json a = json::array();
    for (const auto& v : vs) {
      json entry = {{"name", v.name}, {"dtype", std::string(sy::name_of(v.dtype))}, {"dims", v.dims}};
      if (v.index_extent >= 0) entry["index_extent"] = v.index_extent;
      a.push_back(std::move(entry));
    }
    return a;
  };
  return json{{"inputs", list(m.inputs())}, {"outputs", list(m.outputs())}}.dump();
}

BatchCheck check_batching(const sox::Model& m, std::chrono::milliseconds limit) {
  for (const auto* vs : {&m.inputs(), &m.outputs()})
    for (const auto& v : *vs) {
      const char* what = vs == &m.inputs() ? "input" : "output";
      if (v.kind != sox::ValueKind::tensor) return {false, std::string(what) + " '" + v.name + "' is not a tensor"};
      if (v.dims.empty()) return {false, std::string(what) + " '" + v.name + "' has no axes"};
      if (v.dims[0] >= 0)
        return {false, std::string(what) + " '" + v.name + "' has a fixed axis 0 (" + std::to_string(v.dims[0]) + ")"};
    }
  // Two requests, of 1 and 2 rows, alone and stacked.
  std::mt19937_64 rng(20240611);
  const int64_t rows[2] = {1, 2};
  sox::DataMap req[2], stacked, alone[2], both;
  try {
    for (int r = 0; r < 2; ++r)
      for (const auto& v : m.inputs()) req[r].emplace(v.name, probe_data(v, rows[r], rng));
    for (const auto& v : m.inputs()) stacked.emplace(v.name, stack_rows({&req[0].at(v.name), &req[1].at(v.name)}));
    for (int r = 0; r < 2; ++r) alone[r] = probe_run(m, req[r], limit);
  } catch (const std::exception& e) {
    return {false, std::string("the probe (synthetic requests of 1 and 2 rows) failed to run: ") + e.what()};
  }
  try {
    both = probe_run(m, stacked, limit);
  } catch (const std::exception& e) {
    return {false, std::string("the probe's 3-row batch (requests of 1 and 2 rows) failed to run: ") + e.what()};
  }
  for (const auto& [name, d] : both) {
    if (d.shape.rank() == 0 || d.shape[0] != 3)
      return {false, "output '" + name + "' of a 3-row batch (requests of 1 and 2 rows) has shape " +
                         d.shape.to_string() + ", not 3 rows (axis 0 is not a batch axis)"};
    int64_t at = 0;
    for (int r = 0; r < 2; ++r) {
      const auto it = alone[r].find(name);
      if (it == alone[r].end() || !same_output(rows_of(d, at, rows[r]), it->second))
        return {false, "output '" + name +
                           "' of a 3-row batch (requests of 1 and 2 rows) differs from the requests run alone "
                           "(axis 0 is not a batch axis)"};
      at += rows[r];
    }
  }
  return {true, ""};
}

OnnxBatcher::OnnxBatcher(std::vector<sox::Model> replicas, BatchOptions opts)
    : replicas_(std::move(replicas)),
      opts_(opts),
      in_flight_(replicas_.size(), 0),
      dispatched_(replicas_.size(), 0),
      lost_(replicas_.size(), 0) {
  if (replicas_.empty()) throw std::invalid_argument("OnnxBatcher: no replicas");
  opts_.max_batch = std::max<int64_t>(opts_.max_batch, 1);
  opts_.max_inflight = std::max<int64_t>(opts_.max_inflight, 1);
  // Stacking requests is sound only when axis 0 of every input and output
  // is the (dynamic) batch axis, and the model treats its rows apart.
  if (opts_.max_batch > 1) {
    BatchCheck check = check_batching(model());
    batchable_ = check.ok;
    batching_off_ = std::move(check.why);
  }
  thread_ = std::thread([this] { loop(); });
}

OnnxBatcher::~OnnxBatcher() { stop(); }

sy::Future<sox::DataMap> OnnxBatcher::submit(sox::DataMap inputs, int64_t rows) {
  auto job = std::make_shared<Job>();
  job->key = key_of(inputs);
  job->inputs = std::move(inputs);
  job->rows = rows;
  job->arrived = std::chrono::steady_clock::now();
  auto fut = job->done.future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      job->done.set_error(std::make_exception_ptr(sy::Error(sy::Errc::runtime_closed, "the server is shutting down")));
      return fut;
    }
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return fut;
}

void OnnxBatcher::drain() {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
  }
  cv_.notify_all();
}

void OnnxBatcher::stop(std::chrono::milliseconds limit) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) stop_by_ = std::chrono::steady_clock::now() + limit;
    draining_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, stop_by_, [&] { return idle(); });
}

std::vector<sy::Device> OnnxBatcher::devices() const {
  std::vector<sy::Device> out;
  for (const auto& m : replicas_) out.push_back(m.device());
  return out;
}

std::vector<int64_t> OnnxBatcher::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

std::vector<uint64_t> OnnxBatcher::dispatched() const {
  std::lock_guard lock(mu_);
  return dispatched_;
}

bool OnnxBatcher::idle() const {
  return std::all_of(in_flight_.begin(), in_flight_.end(), [](int64_t n) { return n == 0; });
}

void OnnxBatcher::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Once stopping, the thread stays while batches are in flight (up to
    // stop()'s limit): a batch that fails comes back to run request by
    // request.
    auto ready = [&] { return !queue_.empty() || (stopping_ && idle()); };
    while (!ready()) {
      if (!stopping_)
        cv_.wait(lock);
      else if (cv_.wait_until(lock, stop_by_) == std::cv_status::timeout)
        break;
    }
    if (queue_.empty()) return;
    const bool alone = queue_.front()->alone;
    const auto deadline = queue_.front()->arrived + opts_.window;
    auto queued_rows = [&] {
      int64_t n = 0;
      for (const auto& j : queue_)
        if (j->key == queue_.front()->key) n += j->rows;
      return n;
    };
    if (batchable_ && !alone)
      cv_.wait_until(lock, deadline,
                     [&] { return draining_ || queue_.front()->alone || queued_rows() >= opts_.max_batch; });
    auto least_loaded = [&] {
      serve::mark_lost(lost_, [&](size_t i) { return replicas_[i].device(); });
      return serve::least_loaded(in_flight_, lost_, next_);
    };
    cv_.wait(lock, [&] { return draining_ || in_flight_[least_loaded()] < opts_.max_inflight; });
    (void)drop_expired(queue_, opts_.give_up_after, [](const Job& j) { return j.rows; });
    if (queue_.empty()) continue;

    // The front request and every later one of the same trailing shapes,
    // up to max_batch rows (a larger single request runs alone).
    std::vector<std::shared_ptr<Job>> jobs{queue_.front()};
    queue_.pop_front();
    int64_t rows = jobs.front()->rows;
    if (batchable_ && rows > 0 && !jobs.front()->alone) {
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->key == jobs.front()->key && (*it)->rows > 0 && !(*it)->alone &&
            rows + (*it)->rows <= opts_.max_batch) {
          rows += (*it)->rows;
          jobs.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    const size_t r = least_loaded();
    next_ = r + 1;
    ++in_flight_[r];
    ++dispatched_[r];
    lock.unlock();
    batch_rows_.observe(static_cast<double>(rows));
    dispatch(r, std::move(jobs));
    lock.lock();
  }
}

void OnnxBatcher::dispatch(size_t replica, std::vector<std::shared_ptr<Job>> jobs) {
  sy::Future<sox::DataMap> fut;
  try {
    if (jobs.size() == 1) {
      fut = replicas_[replica].infer(jobs.front()->inputs);
    } else {
      sox::DataMap batch;
      for (const auto& [name, first] : jobs.front()->inputs) {
        std::vector<const sy::TensorData*> parts;
        parts.reserve(jobs.size());
        for (const auto& j : jobs) parts.push_back(&j->inputs.at(name));
        batch.emplace(name, stack_rows(parts));
      }
      fut = replicas_[replica].infer(batch);
    }
  } catch (...) {
    const auto e = std::current_exception();
    if (jobs.size() > 1 || rerun_elsewhere(replica, jobs, e)) return retry_alone(replica, jobs, e);
    jobs.front()->done.set_error(e);
    finish(replica, e);
    return;
  }
  fut.on_complete([this, fut, jobs, replica](const std::exception_ptr& e) {
    if (jobs.size() == 1) {
      if (e && rerun_elsewhere(replica, jobs, e)) return retry_alone(replica, jobs, e);
      if (e)
        jobs.front()->done.set_error(e);
      else
        jobs.front()->done.set_value(fut.get());
      finish(replica, e);
      return;
    }
    // A batch fails as a whole (one request's bad index fails every op
    // after it): each request runs again alone, for its own result or error.
    if (e) return retry_alone(replica, jobs, e);
    sox::DataMap all = fut.get();
    int64_t total = 0;
    for (const auto& j : jobs) total += j->rows;
    // Outputs whose axis 0 is not the batch's rows (the probe passed, but
    // these requests' shapes make, say, a reshape mix rows) cannot be split
    // back: run the requests alone instead of failing them.
    for (const auto& [name, d] : all)
      if (d.shape.rank() == 0 || d.shape[0] != total) return retry_alone(replica, jobs);
    int64_t at = 0;
    for (auto& j : jobs) {
      sox::DataMap mine;
      for (const auto& [name, d] : all) mine.emplace(name, rows_of(d, at, j->rows));
      at += j->rows;
      j->done.set_value(std::move(mine));
    }
    finish(replica);
  });
}

bool OnnxBatcher::rerun_elsewhere(size_t replica, const std::vector<std::shared_ptr<Job>>& jobs,
                                  const std::exception_ptr& failure) {
  if (jobs.size() != 1 || !device_lost(failure)) return false;
  // retry_alone or finish retires the replica either way; a request runs
  // elsewhere while another is left, so this ends.
  std::lock_guard lock(mu_);
  return any_left(lost_, replica);
}

void OnnxBatcher::retry_alone(size_t replica, const std::vector<std::shared_ptr<Job>>& jobs,
                              const std::exception_ptr& failure) {
  const bool lost = device_lost(failure);
  // Not infer() here: this may run on a runtime thread, which must not
  // block. The batcher thread dispatches them, first in the queue.
  std::lock_guard lock(mu_);
  for (auto it = jobs.rbegin(); it != jobs.rend(); ++it) {
    (*it)->alone = true;
    queue_.push_front(*it);
  }
  --in_flight_[replica];
  if (lost) lost_[replica] = 1;
  cv_.notify_all();
}

void OnnxBatcher::finish(size_t replica, const std::exception_ptr& failure) {
  const bool lost = device_lost(failure);
  // Under the lock, as Batcher::finish: stop() may destroy cv_ as soon as it
  // sees the last batch finish.
  std::lock_guard lock(mu_);
  --in_flight_[replica];
  if (lost) lost_[replica] = 1;
  cv_.notify_all();
}

}  // namespace serve
