// SPDX-License-Identifier: Apache-2.0
// Writes an MLP with random weights in the format of mlp_model.hpp, so the
// example and its tests never download a model.
//
//   make_model OUT.bin --layers 32,256,256,10 [--seed 1]
//
// Weights and biases are uniform in [-1/sqrt(in), 1/sqrt(in)] (PyTorch's
// nn.Linear default), from a seeded std::mt19937_64: the same arguments give
// the same file.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "mlp_model.hpp"
#include "tools/cli.hpp"

// NOLINTNEXTLINE(bugprone-exception-escape): bad input and save errors are caught; only bad_alloc is left
int main(int argc, char** argv) {
  std::string out;
  std::string layers;
  uint64_t seed = 1;
  CLI::App app{"make_model " SWITCHYARD_VERSION
               ": writes an MLP with seeded random weights in the format of examples/inference_server/mlp_model.hpp.",
               "make_model"};
  switchyard::cli::apply_conventions(app);
  app.add_option("output", out, "(required) file to write");
  app.add_option("--layers", layers, "(required) layer widths IN,HIDDEN...,OUT (2 to 65 of them, each 1..65536)");
  app.add_option("--seed", seed, "seed of the weights: the same arguments give the same file")
      ->check(switchyard::cli::integer_in<uint64_t>(0, std::numeric_limits<uint64_t>::max()))
      ->capture_default_str();
  if (auto exit_code = switchyard::cli::parse(app, argc, argv)) return *exit_code;
  auto usage = [&](const std::string& what) { return switchyard::cli::usage_error(app, what); };
  if (out.empty()) return usage("the output file is required");
  if (layers.empty()) return usage("--layers is required");
  std::vector<uint32_t> widths;
  std::stringstream ss(layers);
  for (std::string w; std::getline(ss, w, ',');) {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
    if (ec == std::errc::invalid_argument || end != w.data() + w.size())
      return usage("--layers: width '" + w + "' is not a number");
    if (ec != std::errc() || v < 1 || v > mlp::kMaxWidth) return usage("--layers: width '" + w + "' outside 1..65536");
    widths.push_back(static_cast<uint32_t>(v));
  }
  if (widths.size() < 2 || widths.size() > mlp::kMaxLayers + 1)
    return usage("--layers needs 2 to 65 widths (input, hidden..., output)");

  std::mt19937_64 rng(seed);
  mlp::Model m;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    mlp::Layer l;
    l.in = widths[i];
    l.out = widths[i + 1];
    float bound = 1.0f / std::sqrt(static_cast<float>(l.in));
    std::uniform_real_distribution<float> dist(-bound, bound);
    l.weight.resize(size_t{l.out} * l.in);
    for (auto& w : l.weight) w = dist(rng);
    l.bias.resize(l.out);
    for (auto& b : l.bias) b = dist(rng);
    m.layers.push_back(std::move(l));
  }
  try {
    mlp::save(m, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_model: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s: %zu layers, %s\n", out.c_str(), m.layers.size(), layers.c_str());
  return 0;
}
