// SPDX-License-Identifier: Apache-2.0
// The inference server's two JSON readers for ONNX requests
// (examples/inference_server/onnx_serving.cpp): the fast one (simdjson)
// must read every body it accepts to the same tensors as the slow one
// (nlohmann), and decline every body the slow one refuses, so that clients
// see one reader's results and one reader's messages.
#include <catch2/catch.hpp>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "onnx_serving.hpp"

namespace sy = switchyard;
using serve::InputParser;

namespace {

sy::onnx::ValueInfo input(std::string name, sy::DType t, std::vector<int64_t> dims) {
  sy::onnx::ValueInfo v;
  v.name = std::move(name);
  v.dtype = t;
  v.dims = std::move(dims);
  v.has_shape = true;
  return v;
}

// Both readers on `body`: the default (fast, then slow) must give what the
// slow one alone gives, byte for byte or message for message; returns
// whether the fast path took the body. With `plain`, a body the slow path
// accepts must be taken by the fast path too (no bools, BOMs or repeated keys).
bool same_as_slow(const std::string& body, const std::vector<sy::onnx::ValueInfo>& decl, bool plain = false) {
  INFO("body: " << (body.size() > 300 ? body.substr(0, 300) + "..." : body));
  const auto slow = serve::parse_onnx_inputs(body, decl, InputParser::slow_only);
  const auto both = serve::parse_onnx_inputs(body, decl, InputParser::both);
  const auto fast = serve::parse_onnx_inputs(body, decl, InputParser::fast_only);
  CHECK(both.error == slow.error);
  CHECK(both.rows == slow.rows);
  if (fast.error.empty()) CHECK(slow.error.empty());  // the fast path takes nothing the slow one refuses
  if (plain && slow.error.empty()) CHECK(fast.error.empty());
  for (const auto* got : {&both, &fast}) {
    if (!got->error.empty()) continue;
    REQUIRE(got->inputs.size() == slow.inputs.size());
    for (const auto& [name, d] : slow.inputs) {
      INFO("input " << name);
      REQUIRE(got->inputs.count(name) == 1);
      const auto& g = got->inputs.at(name);
      CHECK(g.shape == d.shape);
      CHECK(g.dtype == d.dtype);
      REQUIRE(g.bytes.size() == d.bytes.size());
      CHECK(std::equal(g.bytes.data(), g.bytes.data() + g.bytes.size(), d.bytes.data()));
    }
  }
  return fast.error.empty();
}

// A number as a client might write it: integers, fractions, exponents,
// negative zero, values near and past the dtype's range.
std::string random_number(std::mt19937_64& rng, bool integral) {
  std::uniform_int_distribution<int> kind(0, integral ? 2 : 8);
  char buf[64];
  switch (kind(rng)) {
    case 0:
      return std::to_string(std::uniform_int_distribution<int>(-300, 300)(rng));
    case 1:
      return std::to_string(std::uniform_int_distribution<int64_t>(-100000, 100000)(rng));
    case 2:
      return std::to_string(std::uniform_int_distribution<int>(-128, 127)(rng));
    case 3:
      std::snprintf(buf, sizeof buf, "%.17g", std::uniform_real_distribution<double>(-3, 3)(rng));
      return buf;
    case 4:
      std::snprintf(buf, sizeof buf, "%.6e", std::uniform_real_distribution<double>(-1e30, 1e30)(rng));
      return buf;
    case 5:
      return "-0.0";
    case 6:
      std::snprintf(buf, sizeof buf, "%.9g", std::uniform_real_distribution<double>(65000, 66000)(rng));
      return buf;
    case 7:
      std::snprintf(buf, sizeof buf, "%.3E", std::uniform_real_distribution<double>(1e-45, 1e-38)(rng));
      return buf;
    default:
      return "3.4028235e38";
  }
}

std::string nested(std::mt19937_64& rng, const std::vector<int64_t>& dims, size_t depth, bool integral) {
  if (depth == dims.size()) return random_number(rng, integral);
  std::string s = "[";
  for (int64_t i = 0; i < dims[depth]; ++i) s += (i ? ", " : "") + nested(rng, dims, depth + 1, integral);
  return s + "]";
}

}  // namespace

TEST_CASE("json inputs: the fast reader gives the slow reader's tensors on generated bodies", "[serve][json]") {
  std::mt19937_64 rng(20261206);
  const sy::DType dtypes[] = {sy::DType::f32, sy::DType::f64, sy::DType::f16, sy::DType::bf16, sy::DType::i32,
                              sy::DType::i64, sy::DType::u8,  sy::DType::i8,  sy::DType::i16};
  int taken = 0, cases = 0;
  for (int round = 0; round < 60; ++round) {
    for (sy::DType t : dtypes) {
      INFO("dtype " << sy::name_of(t));
      std::vector<int64_t> dims;
      const int rank = std::uniform_int_distribution<int>(0, 4)(rng);
      for (int a = 0; a < rank; ++a) dims.push_back(std::uniform_int_distribution<int64_t>(0, 4)(rng));
      const bool integral = !sy::is_floating(t);
      const auto list = nested(rng, dims, 0, integral);
      auto decl = std::vector{input("x", t, dims)};
      if (rank > 0) decl[0].dims[0] = -1;  // a dynamic batch axis
      taken += same_as_slow("{\"inputs\": " + list + "}", decl, true) ? 1 : 0;
      taken += same_as_slow("{\"inputs\": {\"x\": " + list + "}}", decl, true) ? 1 : 0;
      auto two = std::vector{input("x", t, dims), input("y", sy::DType::f32, {2})};
      taken +=
          same_as_slow("{\"inputs\": {\"y\": [1, 2.5], \"x\": " + list + "}, \"note\": [\"any\", null]}", two, true)
              ? 1
              : 0;
      cases += 3;
    }
  }
  // Values past a dtype's range are refused by both; the rest (about
  // half, by this generator) must have been taken by the fast path.
  CHECK(taken > cases / 3);
}

TEST_CASE("json inputs: the fast reader declines what the slow reader refuses or reads otherwise", "[serve][json]") {
  const auto f32 = std::vector{input("x", sy::DType::f32, {-1, 2})};
  const auto i32 = std::vector{input("x", sy::DType::i32, {-1, 2})};
  const auto u8 = std::vector{input("x", sy::DType::u8, {2})};
  const auto two = std::vector{input("a", sy::DType::f32, {2}), input("b", sy::DType::f32, {2})};
  for (const char* body : {
           R"({"inputs": [[1, 2], [3]]})",                   // ragged
           R"({"inputs": [[1, 2], 3]})",                     // a number where a list was expected
           R"({"inputs": [1, [2, 3]]})",                     //
           R"({"inputs": [[1, [2]], [3, 4]]})",              // deeper in one place
           R"({"inputs": [[1, 2, 3]]})",                     // a fixed extent wrong
           R"({"inputs": [1, 2]})",                          // the rank wrong
           R"({"inputs": [[[[[[[[[[1]]]]]]]]]]})",           // nests past the limit
           R"({"inputs": [["1", 2]]})",                      // a string
           R"({"inputs": [[null, 2]]})",                     //
           R"({"inputs": [[true, 2]]})",                     //
           R"({"inputs": [[1e39, 2]]})",                     // past f32
           R"({"inputs": [[1e400, 2]]})",                    // past double
           R"({"inputs": [[-1e39, 2]]})",                    //
           R"({"inputs": [[NaN, 2]]})",                      // not JSON
           R"({"inputs": [[1, 2]]} trailing)",               //
           R"({"inputs": [[01, 2]]})",                       //
           R"({"inputs": [[+1, 2]]})",                       //
           R"({"inputs": [[.5, 2]]})",                       //
           R"({"inputs": [[1, 2]], "inputs": [[3, 4]]})",    // a key twice: nlohmann keeps the last
           R"({"inputs": {"x": [[1, 2]], "x": [[5, 6]]}})",  //
           R"({"inputs": {"x": [[1, 2]], "y": [[5, 6]]}})",  // an input the model lacks
           R"({"inputs": {}})",                              // one missing
           R"({"input": [[1, 2]]})",                         // no "inputs"
           R"([[1, 2]])",                                    // not an object
           R"({"inputs": 3})",                               //
           "\xEF\xBB\xBF{\"inputs\": [[1, 2]]}",             // a byte order mark (nlohmann skips it)
           R"({"inputs": [[18446744073709551616, 2]]})",     // past u64
           R"({"inputs": [[-9223372036854775809, 2]]})",     //
       }) {
    same_as_slow(body, f32);
  }
  for (const char* body : {
           R"({"inputs": [[1.0, 2]]})",                  // a float token for an integer input
           R"({"inputs": [[1e2, 2]]})",                  //
           R"({"inputs": [[2147483648, 2]]})",           // past i32
           R"({"inputs": [[-2147483649, 2]]})",          //
           R"({"inputs": [[9223372036854775808, 2]]})",  // past i64
           R"({"inputs": [[-0, 2147483647]]})",          // fine
       }) {
    same_as_slow(body, i32);
  }
  for (const char* body : {R"({"inputs": [256, 0]})", R"({"inputs": [-1, 0]})", R"({"inputs": [255, 0]})"})
    same_as_slow(body, u8);
  for (const char* body : {
           R"({"inputs": [1, 2]})",         // a bare list for two inputs
           R"({"inputs": {"a": [1, 2]}})",  // b missing
           R"({"inputs": {"a": [1, 2], "b": [3, 4], "c": [5, 6]}})",
           R"({"inputs": {"b": [3, 4], "a": [1, 2]}})",  // fine, in another order
       }) {
    same_as_slow(body, two);
  }
  // An input the model declares without a shape takes any rank, on both paths.
  auto shapeless = std::vector{input("x", sy::DType::f32, {})};
  shapeless[0].has_shape = false;
  same_as_slow(R"({"inputs": 1.5})", shapeless);  // not a list: refused by both
  for (const char* body : {R"({"inputs": [1, 2]})", R"({"inputs": [[1, 2], [3, 4]]})"})
    CHECK(same_as_slow(body, shapeless));
  CHECK(serve::parse_onnx_inputs(R"({"inputs": [[1, 2], [3, 4]]})", shapeless).inputs.at("x").shape == sy::Shape{2, 2});
  // Plain requests are the fast path's: it must take them.
  CHECK(same_as_slow(R"({"inputs": [[1, -2.5e-3], [3E2, 4]]})", f32));
  CHECK(same_as_slow(R"({"inputs": {"b": [3, 4], "a": [1, 2]}})", two));
  CHECK(same_as_slow(R"({"inputs": [[-0, 2147483647]]})", i32));
}

TEST_CASE("json inputs: a row shallower than a later sibling is ragged on both readers", "[serve][json]") {
  // [batch, 2, 1] and a shapeless input: [[1, 1], [[2], [3]]] was read as
  // [2, 2, 1] (the first row reshaped) or failed as a 500.
  const auto column = std::vector{input("x", sy::DType::f32, {-1, 2, 1})};
  auto shapeless = std::vector{input("x", sy::DType::f32, {})};
  shapeless[0].has_shape = false;
  for (const auto& decl : {column, shapeless})
    for (const char* body : {
             R"({"inputs": {"x": [[1, 1], [[2], [3]]]}})",
             R"({"inputs": [[1, 1], [[2], [3]]]})",
             R"({"inputs": [[1], [[2, 3]]]})",
             R"({"inputs": [[[1], [2]], [3, 4]]})",
             R"({"inputs": [[[1], [2]], [[3], 4]]})",
             R"({"inputs": [[], [[1]]]})",
         }) {
      for (auto reader : {InputParser::slow_only, InputParser::both}) {
        INFO(body);
        const auto got = serve::parse_onnx_inputs(body, decl, reader);
        CHECK_THAT(got.error, Catch::Contains("input 'x' is ragged"));
      }
    }
  // Well-formed ones still read.
  CHECK(serve::parse_onnx_inputs(R"({"inputs": [[[1], [1]], [[2], [3]]]})", column).inputs.at("x").shape ==
        sy::Shape{2, 2, 1});
  CHECK(serve::parse_onnx_inputs(R"({"inputs": [[], []]})", shapeless).inputs.at("x").shape == sy::Shape{2, 0});
}
