// SPDX-License-Identifier: Apache-2.0
// The entry point of libswitchyard-backend-cuda.so: the runtime's module
// loader (backends/module_loader.cpp) looks this symbol up, checks the
// description against its own build and registers the kind.

#include "backends/cuda/cuda_backend.hpp"
#include "backends/module_loader.hpp"

extern "C" const SwitchyardBackendModule* switchyard_backend_module_v1() {
  static const SwitchyardBackendModule description =
      switchyard::backends::module_description("cuda", &switchyard::backends::cuda::backend_kind);
  return &description;
}
