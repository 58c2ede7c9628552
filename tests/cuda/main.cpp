// SPDX-License-Identifier: Apache-2.0
// GPU test runner: without a CUDA device it prints why and exits with 77,
// which ctest reports as "skipped" (SKIP_RETURN_CODE in CMakeLists.txt).
// Listing the cases works without a GPU: scripts/gpu-check's run script
// lists them to run each case as its own process.

#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>

#include "backends/backend.hpp"

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const auto& cfg = session.configData();
  const bool listing = cfg.listTests || cfg.listTestNamesOnly || cfg.listTags || cfg.listReporters || cfg.showHelp;
  if (!listing) {
    // Through the registry, as a Runtime sees it: a module that is missing
    // or fails to load is the skip reason too.
    auto kinds = switchyard::backends::backend_kinds();
    auto cuda = std::find_if(kinds.begin(), kinds.end(), [](const auto& k) { return k.name == "cuda"; });
    const int count = cuda->device_count();
    if (count == 0) {
      std::printf("SKIPPED: the GPU tests need a CUDA device: %s\n", cuda->unavailable_reason().c_str());
      return 77;
    }
    std::printf("running the GPU tests on %d CUDA device(s)\n", count);
  }
  return session.run();
}
