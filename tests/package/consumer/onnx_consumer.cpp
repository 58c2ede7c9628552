// SPDX-License-Identifier: Apache-2.0
// The ONNX loader from outside the tree: <switchyard/onnx.hpp> and
// libswitchyard-onnx as installed. Usage: onnx_consumer MODEL.onnx. Runs the
// model on cpu:0 and reference:0 with the same input (dynamic axes as 2) and
// exits 0 when every output agrees between them and is finite.
#include <cmath>
#include <cstdio>
#include <vector>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

int main(int argc, char** argv) {
  namespace sy = switchyard;
  if (argc != 2) {
    std::fprintf(stderr, "usage: onnx_consumer MODEL.onnx\n");
    return 2;
  }
  sy::RuntimeOptions options;
  options.devices = {"cpu:0", "reference:0"};
  sy::Runtime rt(options);
  auto on_cpu = sy::onnx::Model::load(argv[1], rt.cpu());
  auto on_reference = sy::onnx::Model::load(argv[1], rt.reference());
  sy::onnx::TensorMap cpu_in, reference_in;
  for (const auto& input : on_cpu.inputs()) {
    std::vector<int64_t> dims;
    for (int64_t d : input.dims) dims.push_back(d < 0 ? 2 : d);
    auto x = rt.cpu().uniform(sy::Shape{dims}, -1, 1).cast(input.dtype);
    cpu_in[input.name] = x;
    reference_in[input.name] = x.to(rt.reference());
  }
  auto got = on_cpu.run(cpu_in);
  auto want = on_reference.run(reference_in);
  for (const auto& output : on_cpu.outputs()) {
    const auto a = got.at(output.name).cast(sy::DType::f64).to_vector<double>();
    const auto b = want.at(output.name).cast(sy::DType::f64).to_vector<double>();
    if (a.empty() || a.size() != b.size()) {
      std::fprintf(stderr, "onnx_consumer: output '%s' has %zu values on cpu:0, %zu on reference:0\n",
                   output.name.c_str(), a.size(), b.size());
      return 1;
    }
    for (size_t i = 0; i < a.size(); ++i)
      if (!std::isfinite(a[i]) || std::abs(a[i] - b[i]) > 1e-4 * (1 + std::abs(b[i]))) {
        std::fprintf(stderr, "onnx_consumer: output '%s'[%zu]: cpu:0 %g, reference:0 %g\n", output.name.c_str(), i,
                     a[i], b[i]);
        return 1;
      }
  }
  std::printf("onnx_consumer: ok (%zu outputs agree)\n", on_cpu.outputs().size());
  return 0;
}
