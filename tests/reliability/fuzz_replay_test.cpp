// SPDX-License-Identifier: Apache-2.0
// Replays the fuzz corpus (tests/fuzz/corpus/) and every past finding
// through the same entry functions the libFuzzer targets call, so the
// normal suite covers them without libFuzzer. A bad input crashes or aborts
// the test; a good one returns.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>

#include "fuzz_entry.hpp"
#include "switchyard/messages/op_rules.hpp"
#include "switchyard/messages/protocol.hpp"

namespace fs = std::filesystem;
using namespace switchyard;

namespace {

std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t replay_dir(const char* sub, int (*entry)(const uint8_t*, size_t)) {
  fs::path dir = fs::path(SWITCHYARD_FUZZ_CORPUS) / sub;
  REQUIRE(fs::is_directory(dir));
  size_t n = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (!f.is_regular_file()) continue;
    auto bytes = slurp(f.path());
    INFO(f.path().string());
    CHECK(entry(bytes.data(), bytes.size()) == 0);
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("every decode corpus input is decoded or rejected without a crash", "[reliability][fuzz]") {
  CHECK(replay_dir("decode", fuzz::decode_one) >= fuzz::decode_seeds().size());
}

TEST_CASE("every rules corpus input is checked without a crash", "[reliability][fuzz]") {
  CHECK(replay_dir("rules", fuzz::check_rules) >= fuzz::rules_seeds().size());
}

TEST_CASE("the generated seeds match the committed corpus", "[reliability][fuzz]") {
  // The committed corpus is regenerated with fuzz_corpus_gen; a message
  // layout change that forgets to regenerate it shows up here.
  for (const auto& s : fuzz::decode_seeds()) {
    INFO(s.name);
    auto path = fs::path(SWITCHYARD_FUZZ_CORPUS) / "decode" / (s.name + ".bin");
    REQUIRE(fs::exists(path));
    CHECK(slurp(path) == s.bytes);
    CHECK(fuzz::decode_one(s.bytes.data(), s.bytes.size()) == 0);
  }
}

TEST_CASE("every truncation of every seed message is rejected cleanly", "[reliability][fuzz]") {
  for (const auto& s : fuzz::decode_seeds()) {
    INFO(s.name);
    for (size_t n = 0; n < s.bytes.size(); ++n) CHECK(fuzz::decode_one(s.bytes.data(), n) == 0);
  }
}

// --- findings, one test each (the inputs are also in the corpus) ---------

TEST_CASE("fuzz finding: an out-of-range scalar kind is rejected, not indexed", "[reliability][fuzz]") {
  // rules_fuzzer, 2026-12-02: scalar_result indexed its kind-name table with
  // an unchecked ScalarKind from the wire (UBSan: index 3 out of bounds).
  const std::vector<uint8_t> input = {0x03, 0x00, 0x02, 0x02, 0x03, 0x02, 0x02, 0x04, 0x01,
                                      0x00, 0x70, 0x03, 0x02, 0x00, 0x00, 0x03, 0x04, 0x00};
  CHECK(fuzz::check_rules(input.data(), input.size()) == 0);
  auto spec = scalar_result(BinaryKind::add, Shape{2}, DType::f32, static_cast<ScalarKind>(3));
  REQUIRE_FALSE(spec);
  CHECK(describe(spec.error()).message.find("unknown scalar kind") != std::string::npos);
}

TEST_CASE("fuzz finding: validate rejects out-of-range op kinds before any backend sees them", "[reliability][fuzz]") {
  TensorIr in{TensorId{1}, Shape{2}, DType::f32, TensorStatus::read_only};
  TensorIr out{TensorId{2}, Shape{2}, DType::f32, TensorStatus::not_init};
  OperationIr unary = UnaryOp{static_cast<UnaryKind>(200), in, out, 0, 0};
  CHECK(describe(validate(unary)).code == Errc::protocol_error);
  OperationIr index = IndexOp{static_cast<IndexKind>(7), in, in, in, out, 0};
  CHECK(describe(validate(index)).code == Errc::protocol_error);
}

TEST_CASE("check_view rejects strides whose products overflow int64", "[reliability][fuzz]") {
  auto err = check_view(16, Shape{4}, 0, {int64_t{1} << 62});
  REQUIRE(err);
  CHECK(describe(err).code == Errc::index_out_of_range);
}
