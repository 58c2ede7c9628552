// SPDX-License-Identifier: Apache-2.0
// Device discovery with and without GPUs: part of the main suite, so every
// machine checks that asking for "cuda:*" never fails a start.

#include <algorithm>
#include <catch2/catch.hpp>

#include "backends/backend.hpp"
#include "switchyard/switchyard.hpp"

namespace sy = switchyard;

namespace {
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
}  // namespace

TEST_CASE("a runtime asking for cpu:0 and cuda:* starts, and names why no GPU came up", "[cuda][discovery]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}});
  auto devices = rt.devices();
  const auto gpus =
      std::count_if(devices.begin(), devices.end(), [](const sy::Device& d) { return d.kind() == "cuda"; });
  const auto reasons = rt.unavailable();
  const bool cuda_reason =
      std::any_of(reasons.begin(), reasons.end(), [](const std::string& r) { return starts_with(r, "cuda: "); });
  if (gpus == 0) {
    INFO("unavailable: " << (reasons.empty() ? std::string("(nothing)") : reasons.front()));
    CHECK(cuda_reason);
    WARN("no CUDA device here: " << (reasons.empty() ? std::string("?") : reasons.front()));
  } else {
    CHECK_FALSE(cuda_reason);
  }
  // The CPU device works either way.
  auto x = rt.device("cpu:0").tensor<float>({1, 2, 3}, {3});
  CHECK(x.sum().to_vector<float>() == std::vector<float>{6});
}

TEST_CASE("asking for cuda:0 where there is none fails with unknown_device and the reason", "[cuda][discovery]") {
  auto kinds = sy::backends::backend_kinds();
  auto cuda = std::find_if(kinds.begin(), kinds.end(), [](const auto& k) { return k.name == "cuda"; });
  if (cuda != kinds.end() && cuda->device_count() > 0) {
    WARN("this machine has a GPU; nothing to check");
    return;
  }
  try {
    sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:0"}});
    FAIL("cuda:0 started without a GPU");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::unknown_device);
    CHECK(std::string(e.what()).find("cuda") != std::string::npos);
  }
}

TEST_CASE("the cuda backend kind reports zero devices with a reason instead of failing", "[cuda][discovery]") {
  auto kinds = sy::backends::backend_kinds();
  auto cuda = std::find_if(kinds.begin(), kinds.end(), [](const auto& k) { return k.name == "cuda"; });
  if (cuda == kinds.end()) {
    WARN("this build has no CUDA backend");
    return;
  }
  const int n = cuda->device_count();
  CHECK(n >= 0);
  if (n == 0) CHECK_FALSE(cuda->unavailable_reason().empty());
}
