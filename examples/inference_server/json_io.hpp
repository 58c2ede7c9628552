// SPDX-License-Identifier: Apache-2.0
#pragma once

// The inference server's JSON in and out: request rows checked against the
// model's input width, output rows written back, error bodies. Nothing here
// knows about HTTP or the model format beyond its widths, so the tests use
// it directly.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace serve {

/// Offset of the first byte that is not part of well-formed UTF-8
/// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF),
/// or nullopt when all of `s` is well-formed.
[[nodiscard]] inline std::optional<size_t> invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::nullopt;
}

/// Why `body` is not JSON, from the parser's exception. A bare NaN or
/// Infinity (which some encoders write for non-finite floats) is named as
/// such, other mistakes only by the parser's own message and position.
[[nodiscard]] inline std::string malformed_json(std::string_view body, const nlohmann::json::exception& e) {
  if (dynamic_cast<const nlohmann::json::out_of_range*>(&e) != nullptr)
    return "a number in the body is out of range (inputs must be finite): " + std::string(e.what());
  std::string why = "malformed JSON: " + std::string(e.what());
  const auto* parse = dynamic_cast<const nlohmann::json::parse_error*>(&e);
  if (parse == nullptr || parse->byte == 0) return why;
  // The parser stops inside the word it could not read: take the whole word.
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  size_t begin = std::min(parse->byte - 1, body.size());
  while (begin > 0 && letter(body[begin - 1])) --begin;
  size_t end = begin;
  while (end < body.size() && letter(body[end])) ++end;
  std::string word(body.substr(begin, end - begin));
  for (char& c : word) c = static_cast<char>(c | 0x20);
  if (word == "nan" || word == "inf" || word == "infinity") why += " (NaN and Infinity are not JSON numbers)";
  return why;
}

/// {"error": msg}. Never throws on bytes from a peer quoted in `msg`:
/// invalid UTF-8 becomes U+FFFD instead of making the JSON writer throw.
[[nodiscard]] inline std::string error_body(const std::string& msg) {
  return nlohmann::json{{"error", msg}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Checked request rows, or the reason they are not acceptable.
struct Parsed {
  std::vector<float> rows;
  int64_t n = 0;
  std::string error;
};

/// Parses {"inputs": [[...], ...]} whose rows all have `width` finite
/// float32 values.
[[nodiscard]] inline Parsed parse_inputs(const std::string& body, uint32_t width) {
  using json = nlohmann::json;
  Parsed p;
  auto fail = [](std::string why) {
    Parsed bad;
    bad.error = std::move(why);
    return bad;
  };
  if (auto at = invalid_utf8_at(body)) return fail("the body is not valid UTF-8 (byte " + std::to_string(*at) + ")");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    return fail(malformed_json(body, e));
  }
  if (!j.is_object()) return fail("the body must be a JSON object {\"inputs\": [[...], ...]}");
  auto it = j.find("inputs");
  if (it == j.end()) return fail("missing field \"inputs\"");
  if (!it->is_array()) return fail("\"inputs\" must be an array of rows");
  if (it->empty()) return fail("\"inputs\" is empty: send at least one row");
  p.rows.reserve(it->size() * width);
  for (size_t r = 0; r < it->size(); ++r) {
    const json& row = (*it)[r];
    std::string where = "inputs[" + std::to_string(r) + "]";
    if (!row.is_array()) return fail(where + " is not an array");
    if (row.size() != width)
      return fail(where + " has " + std::to_string(row.size()) + " values; the model takes " + std::to_string(width));
    for (size_t c = 0; c < row.size(); ++c) {
      const json& v = row[c];
      if (!v.is_number()) return fail(where + "[" + std::to_string(c) + "] is not a number");
      auto f = static_cast<float>(v.get<double>());
      if (!std::isfinite(f))
        return fail(where + "[" + std::to_string(c) + "] = " + v.dump() + " is not a finite float32");
      p.rows.push_back(f);
    }
  }
  p.n = static_cast<int64_t>(it->size());
  return p;
}

/// The reply body for `n` output rows of `width` values, or (if any value is
/// NaN or infinite, which JSON cannot carry) the error naming the first one.
struct OutputsBody {
  std::string body;
  std::string error;
};

[[nodiscard]] inline OutputsBody outputs_body(const std::vector<float>& out, int64_t n, uint32_t width) {
  OutputsBody o;
  for (size_t i = 0; i < static_cast<size_t>(n) * width && i < out.size(); ++i)
    if (!std::isfinite(out[i])) {
      size_t r = i / width, c = i % width;
      o.error = "the model's output outputs[" + std::to_string(r) + "][" + std::to_string(c) + "] is " +
                (std::isnan(out[i]) ? "NaN" : (out[i] > 0 ? "+inf" : "-inf")) +
                ": these inputs overflow float32 inside the model (JSON has no such numbers)";
      return o;
    }
  std::string& s = o.body;
  s = "{\"outputs\":[";
  s.reserve(out.size() * 16 + 32);
  char buf[32];
  for (int64_t r = 0; r < n; ++r) {
    s += r ? ",[" : "[";
    for (uint32_t c = 0; c < width; ++c) {
      if (c) s += ',';
      // Shortest text that reads back as the same float32.
      auto [p, ec] = std::to_chars(buf, buf + sizeof buf, out[static_cast<size_t>(r) * width + c]);
      s.append(buf, p);
    }
    s += ']';
  }
  s += "]}";
  return o;
}

}  // namespace serve
