// SPDX-License-Identifier: Apache-2.0
// The Backend interface's default entries and the module description. Built
// into the library and into every backend module (each needs its own copy:
// a module must not depend on symbols of the program that loads it).

#include "switchyard/backend.hpp"

#include <string>

#include "backends/module_loader.hpp"

#ifndef SWITCHYARD_VERSION_STRING
#error "SWITCHYARD_VERSION_STRING must be defined (CMake sets it to the project version)"
#endif

namespace switchyard::backends {

bool Backend::supports(OperationIr& op) const {
  bool ok = true;
  op.each_input([&](const TensorIr& t) { ok = ok && supports(t.dtype); });
  op.each_output([&](const TensorIr& t) { ok = ok && supports(t.dtype); });
  return ok;
}

DeviceError Backend::execute_fused(std::span<OperationIr> chain, std::span<const TensorIr>, std::span<BufferPtr>,
                                   BufferPtr&) {
  // Only reached when fusible() accepted ops that this backend cannot run
  // fused: a bug of the backend, reported rather than guessed around.
  return DeviceError(Errc::unsupported,
                     std::string(kind()) + ": no fused chains (" + std::to_string(chain.size()) + " ops offered)");
}

SwitchyardBackendModule module_description(const char* kind, BackendKind (*make)()) {
  return SwitchyardBackendModule{
      module_abi_version,
      static_cast<uint32_t>(std::variant_size_v<OperationIr::Variant>),
      {static_cast<uint32_t>(sizeof(OperationIr)), static_cast<uint32_t>(sizeof(TensorData)),
       static_cast<uint32_t>(sizeof(DeviceOptions))},
      SWITCHYARD_VERSION_STRING,
      kind,
      make,
  };
}

}  // namespace switchyard::backends
