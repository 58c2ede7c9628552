// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "backends/backend.hpp"

namespace switchyard::backends::reference {

/// Registry entry of the reference backend ("reference:N"): plain loops,
/// double-precision arithmetic, no threads, no BLAS. The executable
/// specification the other backends are tested against.
[[nodiscard]] BackendKind backend_kind();

}  // namespace switchyard::backends::reference
