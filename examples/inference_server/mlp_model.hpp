// SPDX-License-Identifier: Apache-2.0
#pragma once

// The MLP file format shared by make_model, the server and the serve test.
//
// All integers and floats are little-endian; no padding.
//
//   offset 0   char[8]   magic "SWYDMLP1"
//   offset 8   uint32    L, the number of layers (1..64)
//   offset 12  uint32    widths[L + 1] (each 1..65536): widths[0] is the
//                        input width, widths[L] the output width
//   then, for each layer i = 0 .. L-1:
//              float32   weight[widths[i+1]][widths[i]]  (row-major, [out, in])
//              float32   bias[widths[i+1]]
//
// The model computes x -> relu(x W0^T + b0) -> ... -> x W_{L-1}^T + b_{L-1}:
// ReLU after every layer but the last. The file must end right after the
// last bias (its size is checked).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlp {

static_assert(std::endian::native == std::endian::little, "the model format is little-endian");

inline constexpr char kMagic[8] = {'S', 'W', 'Y', 'D', 'M', 'L', 'P', '1'};
inline constexpr uint32_t kMaxLayers = 64;
inline constexpr uint32_t kMaxWidth = 65536;

struct Layer {
  uint32_t in = 0;
  uint32_t out = 0;
  std::vector<float> weight;  // [out, in]
  std::vector<float> bias;    // [out]
};

struct Model {
  std::vector<Layer> layers;
  [[nodiscard]] uint32_t input_width() const { return layers.front().in; }
  [[nodiscard]] uint32_t output_width() const { return layers.back().out; }
};

inline void save(const Model& m, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  auto put_u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); };
  f.write(kMagic, sizeof kMagic);
  put_u32(static_cast<uint32_t>(m.layers.size()));
  put_u32(m.layers.front().in);
  for (const auto& l : m.layers) put_u32(l.out);
  for (const auto& l : m.layers) {
    f.write(reinterpret_cast<const char*>(l.weight.data()), static_cast<std::streamsize>(l.weight.size() * 4));
    f.write(reinterpret_cast<const char*>(l.bias.data()), static_cast<std::streamsize>(l.bias.size() * 4));
  }
  if (!f) throw std::runtime_error("write failed: " + path);
}

/// Reads and checks a model file; throws std::runtime_error naming what is wrong.
inline Model load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open model file " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto need = [&](size_t n, const char* what) {
    if (bytes.size() - pos < n)
      throw std::runtime_error(path + ": truncated at byte " + std::to_string(pos) + " reading " + what);
  };
  auto get_u32 = [&](const char* what) {
    need(4, what);
    uint32_t v;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  };
  auto get_floats = [&](size_t n, const char* what) {
    need(n * 4, what);
    std::vector<float> v(n);
    std::memcpy(v.data(), bytes.data() + pos, n * 4);
    pos += n * 4;
    return v;
  };
  need(sizeof kMagic, "magic");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw std::runtime_error(path + ": not a Switchyard MLP file (bad magic)");
  pos = sizeof kMagic;
  uint32_t n_layers = get_u32("layer count");
  if (n_layers < 1 || n_layers > kMaxLayers)
    throw std::runtime_error(path + ": layer count " + std::to_string(n_layers) + " outside 1.." +
                             std::to_string(kMaxLayers));
  std::vector<uint32_t> widths(n_layers + 1);
  for (auto& w : widths) {
    w = get_u32("widths");
    if (w < 1 || w > kMaxWidth)
      throw std::runtime_error(path + ": layer width " + std::to_string(w) + " outside 1.." +
                               std::to_string(kMaxWidth));
  }
  Model m;
  for (uint32_t i = 0; i < n_layers; ++i) {
    Layer l;
    l.in = widths[i];
    l.out = widths[i + 1];
    l.weight = get_floats(size_t{l.out} * l.in, "weights");
    l.bias = get_floats(l.out, "biases");
    m.layers.push_back(std::move(l));
  }
  if (pos != bytes.size())
    throw std::runtime_error(path + ": " + std::to_string(bytes.size() - pos) + " trailing bytes after the last layer");
  return m;
}

/// The model on the host with plain loops (double accumulation): the
/// specification the server's output is checked against.
inline std::vector<float> forward_reference(const Model& m, const std::vector<float>& rows, size_t n) {
  std::vector<float> x = rows;
  for (size_t li = 0; li < m.layers.size(); ++li) {
    const Layer& l = m.layers[li];
    std::vector<float> y(n * l.out);
    for (size_t r = 0; r < n; ++r)
      for (uint32_t o = 0; o < l.out; ++o) {
        double acc = l.bias[o];
        for (uint32_t i = 0; i < l.in; ++i) acc += double(x[r * l.in + i]) * l.weight[size_t{o} * l.in + i];
        if (li + 1 < m.layers.size() && acc < 0) acc = 0;
        y[r * l.out + o] = static_cast<float>(acc);
      }
    x = std::move(y);
  }
  return x;
}

}  // namespace mlp
