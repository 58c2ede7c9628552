// SPDX-License-Identifier: Apache-2.0
#pragma once

// The runtime every GPU test case runs on: cpu:0 (the side a GPU result is
// compared with) and every CUDA device there is.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "switchyard/switchyard.hpp"
#include "tests/cuda/wait.hpp"

namespace sytest_cuda {

/// The CUDA devices of a runtime with cpu:0 and cuda:*, or none with a
/// warning naming why.
struct Rig {
  switchyard::Runtime rt{switchyard::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}}};
  switchyard::Device cpu = rt.device("cpu:0");
  std::vector<switchyard::Device> gpus;
  Rig() {
    for (auto& d : rt.devices())
      if (d.kind() == "cuda") gpus.push_back(d);
    if (gpus.empty()) WARN("no CUDA device: " << (rt.unavailable().empty() ? "?" : rt.unavailable().front()));
  }
};

/// Runs `build` on the same inputs on `cpu` and on `gpu` and hands both
/// results to `compare`. Ops the rules reject for these inputs (the call
/// throws on the CPU) are skipped; a refusal on the GPU alone fails the
/// case, and data the CPU refuses (an integer remainder by zero) the GPU
/// must refuse too. Returns whether the op ran.
template <class Build, class Compare>
bool run_on_both(const switchyard::Device& cpu, const switchyard::Device& gpu,
                 const std::vector<switchyard::TensorData>& inputs, const Build& build, const std::string& what,
                 const Compare& compare) {
  std::vector<switchyard::Tensor> ci, gi;
  for (const auto& d : inputs) {
    ci.push_back(cpu.from_data(d));
    gi.push_back(gpu.from_data(d));
  }
  switchyard::Tensor c;
  try {
    c = build(ci);
  } catch (const switchyard::Error&) {
    return false;
  }
  INFO(what << " on " << gpu.name());
  switchyard::Tensor g = build(gi);
  switchyard::TensorData cd;
  try {
    cd = read(c);
  } catch (const switchyard::Error& e) {
    try {
      (void)read(g);
      FAIL("cpu failed with '" << e.what() << "', the GPU succeeded");
    } catch (const switchyard::Error& ge) {
      CHECK(ge.code() == e.code());
    }
    return true;
  }
  compare(cd, read(g));
  return true;
}

}  // namespace sytest_cuda
