// SPDX-License-Identifier: Apache-2.0
#include "backends/module_loader.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <link.h>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <sys/stat.h>

namespace switchyard::backends {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void add_dir(std::vector<std::string>& dirs, std::string dir) {
  // A relative directory is taken against the working directory now, when
  // the runtime starts: the module loads later (at the first use of its
  // kind), by when the program may have changed directory; and the
  // absolute name is what a "not found" message should show.
  if (!dir.empty() && dir.front() != '/') {
    std::error_code ec;
    auto absolute = std::filesystem::absolute(dir, ec);
    if (!ec) dir = absolute.lexically_normal().string();
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(std::move(dir));
}

void add_colon_list(std::vector<std::string>& dirs, std::string_view list) {
  while (!list.empty()) {
    const auto colon = list.find(':');
    add_dir(dirs, std::string(list.substr(0, colon)));
    if (colon == std::string_view::npos) break;
    list.remove_prefix(colon + 1);
  }
}

// The directories the dynamic loader searches for the dependencies of the
// object `handle` (glibc's dlinfo RTLD_DI_SERINFO): its RPATH / RUNPATH,
// LD_LIBRARY_PATH and the system directories. In the build tree the
// programs' RUNPATH names the folder the modules are built into.
void add_loader_dirs(std::vector<std::string>& dirs, void* handle) {
  if (handle == nullptr) return;
  Dl_serinfo size{};
  if (dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size < sizeof(Dl_serinfo)) return;
  // Dl_serinfo ends in a flexible array; malloc'd storage is aligned for it.
  // NOLINTNEXTLINE(cppcoreguidelines-no-malloc): a flexible array of dls_size bytes, as dlinfo documents
  std::unique_ptr<Dl_serinfo, decltype(&std::free)> info(static_cast<Dl_serinfo*>(std::malloc(size.dls_size)),
                                                         &std::free);
  if (!info) return;
  *info = size;
  if (dlinfo(handle, RTLD_DI_SERINFOSIZE, info.get()) != 0 || dlinfo(handle, RTLD_DI_SERINFO, info.get()) != 0) return;
  for (unsigned i = 0; i < info->dls_cnt; ++i) add_dir(dirs, info->dls_serpath[i].dls_name);
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

/// A module once loaded: the library handle (kept: RTLD_NODELETE) and the
/// kind it registered.
struct Loaded {
  BackendKind kind;
  std::string reason;  // why there is no kind (kind.create empty)
};

// Finds, checks and loads the module of `kind`; never throws.
Loaded load(const std::string& kind, const std::vector<std::string>& search_path, const std::string& driver_library,
            const std::string& no_driver_reason) {
  const std::string file = module_file_name(kind);
  std::string path;
  for (const auto& dir : search_path) {
    std::string candidate = dir;
    candidate += '/';
    candidate += file;
    if (is_file(candidate)) {
      path = std::move(candidate);
      break;
    }
  }
  if (path.empty()) return {{}, "backend module " + file + " not found (searched: " + join(search_path, ", ") + ")"};
  // The driver first: without it the module (and the libraries it links)
  // would be mapped for nothing.
  if (!driver_library.empty()) {
    void* driver = dlopen(driver_library.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return {{}, no_driver_reason.empty() ? driver_library + " not found" : no_driver_reason};
    dlclose(driver);
  }
  // RTLD_LOCAL: the module's symbols (its copies of Switchyard's value types'
  // code among them) stay out of the global scope. RTLD_NODELETE: backends
  // and buffers it made may outlive whoever loaded it.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* why = dlerror();
    return {{}, "cannot load backend module " + path + ": " + (why != nullptr ? why : "unknown dlopen error")};
  }
  auto entry = reinterpret_cast<SwitchyardBackendModuleEntry>(dlsym(handle, "switchyard_backend_module_v1"));
  if (entry == nullptr) {
    dlclose(handle);
    return {{}, "backend module " + path + " has no entry point switchyard_backend_module_v1"};
  }
  const SwitchyardBackendModule* got = entry();
  const SwitchyardBackendModule want = module_description(kind.c_str(), nullptr);
  auto describe = [](const SwitchyardBackendModule& m) {
    return "Switchyard " + std::string(m.switchyard_version != nullptr ? m.switchyard_version : "?") +
           ", backend ABI " + std::to_string(m.abi_version) + ", " + std::to_string(m.op_count) + " ops, layout " +
           std::to_string(m.layout[0]) + "/" + std::to_string(m.layout[1]) + "/" + std::to_string(m.layout[2]);
  };
  if (got == nullptr || got->abi_version != want.abi_version || got->op_count != want.op_count ||
      !std::equal(std::begin(got->layout), std::end(got->layout), std::begin(want.layout)) ||
      got->switchyard_version == nullptr || std::strcmp(got->switchyard_version, want.switchyard_version) != 0) {
    // Not dlclose'd: NODELETE keeps it mapped anyway, and nothing of it runs.
    return {{},
            "backend module " + path + " does not match this library: it is built for " +
                (got != nullptr ? describe(*got) : std::string("nothing (null description)")) + ", this library is " +
                describe(want)};
  }
  if (got->kind == nullptr || kind != got->kind || got->backend_kind == nullptr)
    return {{},
            "backend module " + path + " provides kind '" + (got->kind != nullptr ? got->kind : "") + "', not '" +
                kind + "'"};
  BackendKind registered;
  try {
    registered = got->backend_kind();
  } catch (const std::exception& e) {
    return {{}, "backend module " + path + " failed to register: " + e.what()};
  } catch (...) {
    return {{}, "backend module " + path + " failed to register: it threw an exception that is not a std::exception"};
  }
  if (registered.name != kind || !registered.device_count || !registered.unavailable_reason || !registered.create)
    return {{}, "backend module " + path + " registered an incomplete kind '" + registered.name + "'"};
  return {std::move(registered), {}};
}

}  // namespace

bool valid_kind_name(const std::string& kind) {
  return !kind.empty() && std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string module_file_name(const std::string& kind) { return "libswitchyard-backend-" + kind + ".so"; }

std::vector<std::string> module_search_path(const std::vector<std::string>& option_dirs) {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SWITCHYARD_BACKEND_PATH")) add_colon_list(dirs, env);
  for (const auto& d : option_dirs) add_dir(dirs, d);
  Dl_info self{};
  void* self_handle = nullptr;
  if (dladdr(reinterpret_cast<void*>(&module_search_path), &self) != 0 && self.dli_fname != nullptr) {
    std::string object = self.dli_fname;
    // A relative name is the program's own, as it was started (Switchyard
    // linked statically): relative to a working directory that may have
    // changed since. The kernel's link to it is absolute.
    if (object.empty() || object.front() != '/') {
      std::error_code ec;
      auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (!ec) object = exe.string();
    }
    if (const auto slash = object.rfind('/'); slash != std::string::npos) {
      const auto dir = std::filesystem::path(object.substr(0, slash));
      add_dir(dirs, dir.string());
      // An installed program and its modules: PREFIX/bin and PREFIX/lib.
      if (dir.filename() == "bin") add_dir(dirs, (dir.parent_path() / "lib").string());
    }
    self_handle = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }
  add_loader_dirs(dirs, self_handle);
  if (self_handle != nullptr) dlclose(self_handle);
  void* program = dlopen(nullptr, RTLD_LAZY);
  add_loader_dirs(dirs, program);
  if (program != nullptr) dlclose(program);
#ifdef SWITCHYARD_INSTALL_LIBDIR
  add_dir(dirs, SWITCHYARD_INSTALL_LIBDIR);
#endif
  return dirs;
}

BackendKind module_kind(const std::string& kind, std::vector<std::string> search_path, std::string driver_library,
                        std::string no_driver_reason) {
  // Shared by the entry's three functions (and their copies); loads once.
  struct Lazy {
    std::once_flag once;
    Loaded loaded;
    std::string kind, driver_library, no_driver_reason;
    std::vector<std::string> search_path;
    const Loaded& get() {
      std::call_once(once, [this] {
        loaded = valid_kind_name(kind) ? load(kind, search_path, driver_library, no_driver_reason)
                                       : Loaded{{}, "'" + kind + "' is no valid backend kind name (a-z, 0-9, _)"};
      });
      return loaded;
    }
  };
  auto lazy = std::make_shared<Lazy>();
  lazy->kind = kind;
  lazy->search_path = std::move(search_path);
  lazy->driver_library = std::move(driver_library);
  lazy->no_driver_reason = std::move(no_driver_reason);
  return BackendKind{
      kind,
      [lazy] {
        const auto& l = lazy->get();
        return l.kind.device_count ? l.kind.device_count() : 0;
      },
      [lazy] {
        const auto& l = lazy->get();
        return l.kind.unavailable_reason ? l.kind.unavailable_reason() : l.reason;
      },
      [lazy](int index, const DeviceOptions& options) -> std::unique_ptr<Backend> {
        const auto& l = lazy->get();
        if (!l.kind.create) throw Error(Errc::unknown_device, lazy->kind + ": " + l.reason);
        return l.kind.create(index, options);
      },
  };
}

}  // namespace switchyard::backends
