// SPDX-License-Identifier: Apache-2.0
#pragma once

// The internal side of the backend interface: the interface itself is
// public (include/switchyard/backend.hpp, for custom backends); this adds
// the registry of the kinds this library provides.

#include <exception>
#include <string>
#include <vector>

#include "switchyard/backend.hpp"
#include "switchyard/error.hpp"

namespace switchyard::backends {

/// Every backend kind this library provides: the built-in ones (cpu,
/// reference) and one entry per backend module (cuda), which loads its
/// module only when a device of that kind is counted or created, looking
/// in module_search_path(module_dirs) (backends/module_loader.hpp).
[[nodiscard]] std::vector<BackendKind> backend_kinds(const std::vector<std::string>& module_dirs = {});

/// One device a devices list asks for.
struct PlannedDevice {
  std::string name;  ///< kind:index
  const BackendKind* kind = nullptr;
  int index = 0;
};

/// The devices a list of names asks of `kinds`, as the runtime and the
/// worker read `devices` alike: "kind:N" is that device, which must exist;
/// "kind:*" every device of the kind, possibly none (then, or for a kind
/// not in `kinds`, a line in `unavailable` says why). An index is decimal
/// digits without sign or leading zeros. Throws Error(unknown_device)
/// naming the entry and what is wrong with it, Error(invalid_argument) for
/// a device named twice, and Error(invalid_argument) for a list of more
/// than `max_planned_devices` devices (a process holds at most that many;
/// "cpu:*" would be all 65,536 indices a cpu kind accepts).
inline constexpr size_t max_planned_devices = 1024;
/// Kernel threads a cpu device may be given (RuntimeOptions::cpu_threads,
/// the worker's --threads): far above any machine's cores, far below what
/// exhausts a process's threads.
inline constexpr size_t max_cpu_threads = 1024;
[[nodiscard]] std::vector<PlannedDevice> plan_devices(const std::vector<BackendKind>& kinds,
                                                      const std::vector<std::string>& names,
                                                      std::vector<std::string>& unavailable);

/// Calls `f`, an entry of a BackendKind (possibly a user's), and gives what
/// it throws as an Error with `code` naming `what` (its own Error too, whose
/// message follows).
template <class F>
auto call_kind_entry(Errc code, const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {  // an Error too: named as well
    throw Error(code, what + ": " + e.what());
  } catch (...) {
    throw Error(code, what + ": threw an exception that is not a std::exception");
  }
}

}  // namespace switchyard::backends
