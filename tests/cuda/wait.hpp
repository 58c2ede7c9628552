// SPDX-License-Identifier: Apache-2.0
#pragma once

// Bounded waits for the GPU tests: a hung device fails one case (after
// `limit`) instead of hanging the whole run, and says what it waited for.

#include <catch2/catch.hpp>
#include <chrono>

#include "switchyard/switchyard.hpp"

namespace sytest_cuda {

inline constexpr std::chrono::seconds default_wait{30};

/// f.get() once f is ready, or a test failure after `limit`.
template <class Future>
auto got(Future&& f, std::chrono::seconds limit = default_wait) {
  if (!f.wait_for(limit)) FAIL("no result within " << limit.count() << " s (a hung device or a lost completion)");
  return f.get();
}

/// The tensor's data, read with a bounded wait.
inline switchyard::TensorData read(const switchyard::Tensor& t, std::chrono::seconds limit = default_wait) {
  return got(t.read(), limit);
}

}  // namespace sytest_cuda
