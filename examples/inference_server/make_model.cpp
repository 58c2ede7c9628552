// SPDX-License-Identifier: Apache-2.0
// Writes an MLP with random weights in the format of mlp_model.hpp, so the
// example and its tests never download a model.
//
//   make_model OUT.bin --layers 32,256,256,10 [--seed 1]
//
// Weights and biases are uniform in [-1/sqrt(in), 1/sqrt(in)] (PyTorch's
// nn.Linear default), from a seeded std::mt19937_64: the same arguments give
// the same file.
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>

#include "mlp_model.hpp"

namespace {

int usage(const char* why) {
  std::fprintf(stderr, "make_model: %s\nusage: make_model OUT.bin --layers IN,HIDDEN...,OUT [--seed N]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  std::string layers;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--layers" && i + 1 < argc) {
      layers = argv[++i];
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (!a.empty() && a[0] != '-' && out.empty()) {
      out = a;
    } else {
      return usage(("unexpected argument '" + a + "'").c_str());
    }
  }
  if (out.empty()) return usage("missing output path");
  if (layers.empty()) return usage("missing --layers");
  std::vector<uint32_t> widths;
  std::stringstream ss(layers);
  for (std::string w; std::getline(ss, w, ',');) {
    unsigned long v = 0;
    try {
      v = std::stoul(w);
    } catch (const std::exception&) {
      return usage(("layer width '" + w + "' is not a number").c_str());
    }
    if (v < 1 || v > mlp::kMaxWidth) return usage(("layer width '" + w + "' outside 1..65536").c_str());
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
