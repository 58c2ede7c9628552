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
