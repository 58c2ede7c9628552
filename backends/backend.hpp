// SPDX-License-Identifier: Apache-2.0
#pragma once

// The internal side of the backend interface: the interface itself is
// public (include/switchyard/backend.hpp, for custom backends); this adds
// the registry of the kinds this library provides.

#include <string>
#include <vector>

#include "switchyard/backend.hpp"

namespace switchyard::backends {

/// Every backend kind this library provides: the built-in ones (cpu,
/// reference) and one entry per backend module (cuda), which loads its
/// module only when a device of that kind is counted or created, looking
/// in module_search_path(module_dirs) (backends/module_loader.hpp).
[[nodiscard]] std::vector<BackendKind> backend_kinds(const std::vector<std::string>& module_dirs = {});

}  // namespace switchyard::backends
