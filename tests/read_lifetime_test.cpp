// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>

#include <switchyard/switchyard.hpp>

namespace sy = switchyard;

TEST_CASE("a read completes after the tensor's last handle is gone", "[runtime]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0"}});
  auto dev = rt.device("cpu:0");
  // The temporary's drop is queued right after the read; the read must not be
  // overtaken by it. Many rounds, since losing that race was intermittent.
  int failures = 0;
  for (int i = 0; i < 300; ++i) {
    sy::Future<sy::TensorData> f = (dev.full({4}, i, sy::DType::f32) + 1.0).read();
    try {
      if (f.get().to_vector<float>()[0] != static_cast<float>(i + 1)) ++failures;
    } catch (const sy::Error& e) {
      UNSCOPED_INFO("round " << i << ": " << e.what());
      ++failures;
    }
  }
  CHECK(failures == 0);
}
