// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "backends/backend.hpp"

namespace switchyard::backends::cpu {

/// Registry entry of the CPU backend ("cpu:N"): OpenBLAS GEMM, own
/// multi-threaded kernels for everything else.
[[nodiscard]] BackendKind backend_kind();

}  // namespace switchyard::backends::cpu
