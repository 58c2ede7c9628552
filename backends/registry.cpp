// SPDX-License-Identifier: Apache-2.0
#include <climits>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/reference/reference_backend.hpp"
#ifdef SWITCHYARD_WITH_CUDA
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace switchyard::backends {

bool Backend::supports(OperationIr& op) const {
  bool ok = true;
  op.each_input([&](const TensorIr& t) { ok = ok && supports(t.dtype); });
  op.each_output([&](const TensorIr& t) { ok = ok && supports(t.dtype); });
  return ok;
}

caf::error Backend::execute_fused(std::span<OperationIr> chain, std::span<const TensorIr>, std::span<BufferPtr>,
                                  BufferPtr&) {
  // Only reached when fusible() accepted ops that this backend cannot run
  // fused: a bug of the backend, reported rather than guessed around.
  return make_error(Errc::unsupported,
                    std::string(kind()) + ": no fused chains (" + std::to_string(chain.size()) + " ops offered)");
}

std::vector<BackendKind> backend_kinds() {
  std::vector<BackendKind> kinds;
  kinds.push_back(cpu::backend_kind());
  kinds.push_back(reference::backend_kind());
#ifdef SWITCHYARD_WITH_CUDA
  kinds.push_back(cuda::backend_kind());
#endif
  return kinds;
}

}  // namespace switchyard::backends
