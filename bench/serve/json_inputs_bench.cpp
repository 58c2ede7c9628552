// SPDX-License-Identifier: Apache-2.0
// The inference server's reading of an ONNX request body, by its two JSON
// readers (examples/inference_server/onnx_serving.cpp): nlohmann's DOM
// (the slow path, which also words every error) against simdjson (the fast
// path), interleaved, on one ResNet input (1 x 3 x 224 x 224 floats, written
// as bench/serve/resnet writes them: three decimals, about 1 MB).
//
//   build/examples/inference_server/json_inputs_bench [ROUNDS] [DIGITS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "onnx_serving.hpp"

namespace {

double millis_of(const std::string& body, const std::vector<switchyard::onnx::ValueInfo>& decl,
                 serve::InputParser parser) {
  const auto t0 = std::chrono::steady_clock::now();
  auto parsed = serve::parse_onnx_inputs(body, decl, parser);
  const auto t1 = std::chrono::steady_clock::now();
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "json_inputs_bench: %s\n", parsed.error.c_str());
    std::exit(1);
  }
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 21;
  const int digits = argc > 2 ? std::atoi(argv[2]) : 3;
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> value(-1, 1);
  std::string body = "{\"inputs\":{\"x\":[[";
  char buf[64];
  for (int c = 0; c < 3; ++c) {
    body += c ? ",[" : "[";
    for (int h = 0; h < 224; ++h) {
      body += h ? ",[" : "[";
      for (int w = 0; w < 224; ++w) {
        std::snprintf(buf, sizeof buf, "%s%.*f", w ? "," : "", digits, value(rng));
        body += buf;
      }
      body += "]";
    }
    body += "]";
  }
  body += "]]}}";
  switchyard::onnx::ValueInfo x;
  x.name = "x";
  x.dtype = switchyard::DType::f32;
  x.dims = {-1, 3, 224, 224};
  x.has_shape = true;
  const std::vector decl{x};
  std::vector<double> slow, fast;
  for (int r = 0; r < rounds; ++r) {
    slow.push_back(millis_of(body, decl, serve::InputParser::slow_only));
    fast.push_back(millis_of(body, decl, serve::InputParser::both));
  }
  std::printf("body %zu bytes (%d digits), %d rounds interleaved, median ms: nlohmann %.2f, simdjson %.2f (%.1fx)\n",
              body.size(), digits, rounds, median(slow), median(fast), median(slow) / median(fast));
}
