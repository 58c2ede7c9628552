// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/cpu_backend.hpp"
#include "backends/module_loader.hpp"
#include "backends/reference/reference_backend.hpp"

namespace switchyard::backends {

std::vector<BackendKind> backend_kinds(const std::vector<std::string>& module_dirs) {
  std::vector<BackendKind> kinds;
  kinds.push_back(cpu::backend_kind());
  kinds.push_back(reference::backend_kind());
  // A module, whether or not this build made it (it may be installed apart):
  // loaded only when a cuda device is counted or created, and only where
  // the CUDA driver is present.
  kinds.push_back(module_kind("cuda", module_search_path(module_dirs), "libcuda.so.1", "no CUDA driver"));
  return kinds;
}

}  // namespace switchyard::backends
