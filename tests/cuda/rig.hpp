// SPDX-License-Identifier: Apache-2.0
#pragma once

// The runtime every GPU test case runs on: cpu:0 (the side a GPU result is
// compared with) and every CUDA device there is.

#include <catch2/catch.hpp>
#include <vector>

#include "switchyard/switchyard.hpp"

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

}  // namespace sytest_cuda
