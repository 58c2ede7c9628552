// SPDX-License-Identifier: Apache-2.0
#pragma once

// Backend modules: a backend kind whose code (and heavy libraries: cudart,
// cuBLAS) lives in a shared library, libswitchyard-backend-<kind>.so, that
// is loaded only when a device of that kind is asked for. Until then nothing
// of it is mapped, so a CPU-only process never pays for CUDA.

#include <string>
#include <vector>

#include "switchyard/backend.hpp"

namespace switchyard::backends {

/// Whether `kind` is a valid backend kind name: lower-case letters, digits
/// and '_' (it names a module file and the devices "kind:index").
[[nodiscard]] bool valid_kind_name(const std::string& kind);

/// The file a module of `kind` is looked for under.
[[nodiscard]] std::string module_file_name(const std::string& kind);

/// Where modules are looked for, in order, without duplicates:
///   1. the directories in $SWITCHYARD_BACKEND_PATH (colon-separated),
///   2. `option_dirs` (RuntimeOptions::backend_module_path),
///   3. the directory of the object holding Switchyard's code (dladdr: the
///      directory of libswitchyard.so, or of the program it is linked into,
///      and for a program in PREFIX/bin also PREFIX/lib),
///   4. the dynamic loader's search path for that object and the program
///      (their RUNPATH, LD_LIBRARY_PATH, the system library directories),
///   5. the install libdir this library was configured with.
[[nodiscard]] std::vector<std::string> module_search_path(const std::vector<std::string>& option_dirs);

/// A registry entry for `kind` that loads its module on first use (its
/// device_count, unavailable_reason or create) and only then: listing the
/// kind maps nothing. When the module is missing, is of another build, or
/// `driver_library` (when not empty) cannot be loaded, the kind has zero
/// devices and unavailable_reason() says why, e.g. "backend module
/// libswitchyard-backend-cuda.so not found (searched: ...)" or
/// `no_driver_reason`. Loaded modules are never unloaded (RTLD_NODELETE):
/// backends and buffers made by them may outlive every Runtime.
[[nodiscard]] BackendKind module_kind(const std::string& kind, std::vector<std::string> search_path,
                                      std::string driver_library = {}, std::string no_driver_reason = {});

/// What a module built from this tree describes itself with (the entry
/// point of backends/<kind>/module.cpp returns it); the loader compares a
/// module's description against this one.
[[nodiscard]] SwitchyardBackendModule module_description(const char* kind, BackendKind (*make)());

}  // namespace switchyard::backends
