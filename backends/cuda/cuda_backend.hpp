// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "backends/backend.hpp"

namespace switchyard::backends::cuda {

/// Registry entry of the CUDA backend ("cuda:N"): one compute stream and
/// one copy stream per device, cuBLAS for floating matmuls, own kernels
/// for every other op family, a stream-ordered memory pool and pinned
/// staging for host transfers. device_count() is 0, with the reason in
/// unavailable_reason(), when there is no driver or no GPU.
[[nodiscard]] BackendKind backend_kind();

/// Device count and, when it is 0, why ("no CUDA driver", "no GPU", ...).
struct Probe {
  int count = 0;
  std::string reason;
};
[[nodiscard]] Probe probe();

namespace testing {
/// Breaks the CUDA context of `device` on purpose (a kernel writes through a
/// bad pointer) and waits for the fault; returns the CUDA error's name. For
/// the device-lost tests only: every later use of that device in this
/// process fails, so those tests run as processes of their own.
std::string break_context(int device);
/// The calling thread's current CUDA device (-1 when there is none).
int current_device();
}  // namespace testing

}  // namespace switchyard::backends::cuda
