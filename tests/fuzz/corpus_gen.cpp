// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus: real messages serialized (decode/) and rule
// inputs (rules/), BASP byte streams for the worker's framing guard (framing/). Usage: fuzz_corpus_gen <corpus dir>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "framing_entry.hpp"
#include "fuzz_entry.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  namespace fs = std::filesystem;
  auto write = [&](const char* sub, const std::vector<switchyard::fuzz::Seed>& seeds) {
    fs::path dir = fs::path(argv[1]) / sub;
    fs::create_directories(dir);
    for (const auto& s : seeds) {
      std::ofstream out(dir / (s.name + ".bin"), std::ios::binary);
      out.write(reinterpret_cast<const char*>(s.bytes.data()), static_cast<std::streamsize>(s.bytes.size()));
    }
    std::printf("%zu seeds in %s\n", seeds.size(), dir.c_str());
  };
  write("decode", switchyard::fuzz::decode_seeds());
  write("rules", switchyard::fuzz::rules_seeds());
  std::vector<switchyard::fuzz::Seed> framing;
  for (auto& s : switchyard::fuzz::framing_seeds()) framing.push_back({s.name, s.bytes});
  write("framing", framing);
  return 0;
}
