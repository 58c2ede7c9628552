// SPDX-License-Identifier: Apache-2.0
// Backend modules (issue 16): found on the search path, checked against this
// build, loaded only when a device of their kind is asked for, and reported
// through Runtime::unavailable() when missing. This executable has no
// RUNPATH to <build>/lib, so the CUDA module built there is not found unless
// a case points at it (ctest runs each case as its own process: a case that
// loads CUDA cannot disturb one that checks nothing of CUDA is mapped).

#include "backends/module_loader.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "switchyard/switchyard.hpp"

namespace sy = switchyard;
namespace sb = switchyard::backends;

namespace {

std::vector<std::string> cuda_mappings() {
  std::vector<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string name = line.substr(slash + 1);
    if (name.rfind("libcud", 0) == 0 || name.rfind("libcublas", 0) == 0) found.push_back(line.substr(line.find('/')));
  }
  return found;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// A Runtime whose extra kinds come from the test modules' folder.
sy::RuntimeOptions with_module(const std::string& kind, std::vector<std::string> devices) {
  sy::RuntimeOptions options;
  options.devices = std::move(devices);
  options.extend_backends = [kind](std::vector<sb::BackendKind>& kinds) {
    kinds.push_back(sb::module_kind(kind, {SWITCHYARD_TEST_MODULE_DIR}));
  };
  return options;
}

}  // namespace

TEST_CASE("a missing cuda module leaves cuda unavailable naming the file and the folders searched", "[modules]") {
  unsetenv("SWITCHYARD_BACKEND_PATH");
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}});
  const auto reasons = rt.unavailable();
  REQUIRE(reasons.size() == 1);
  if (starts_with(reasons[0], "cuda: no CUDA driver") || starts_with(reasons[0], "cuda: no GPU")) {
    WARN("a CUDA module is installed in a folder every program searches: " << reasons[0]);
    return;
  }
  CHECK(starts_with(reasons[0], "cuda: backend module libswitchyard-backend-cuda.so not found (searched: "));
  CHECK(reasons[0].find(SWITCHYARD_INSTALL_LIBDIR) != std::string::npos);
  CHECK(cuda_mappings().empty());
  try {
    sy::Runtime gpu(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:0"}});
    FAIL("cuda:0 started without its module");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::unknown_device);
    CHECK(std::string(e.what()).find("backend module libswitchyard-backend-cuda.so not found (searched: ") !=
          std::string::npos);
  }
}

TEST_CASE("the module search path starts with the environment, then the options, and ends at the install libdir",
          "[modules]") {
  setenv("SWITCHYARD_BACKEND_PATH", "/from/env/a:/from/env/b/", 1);
  const auto dirs = sb::module_search_path({"/from/options"});
  unsetenv("SWITCHYARD_BACKEND_PATH");
  REQUIRE(dirs.size() >= 4);
  CHECK(dirs[0] == "/from/env/a");
  CHECK(dirs[1] == "/from/env/b");
  CHECK(dirs[2] == "/from/options");
  CHECK(std::count(dirs.begin(), dirs.end(), SWITCHYARD_INSTALL_LIBDIR) == 1);
  // The folder of the object holding Switchyard's code (here: this program).
  Dl_info self{};
  REQUIRE(dladdr(reinterpret_cast<void*>(&sb::module_search_path), &self) != 0);
  const std::string object = self.dli_fname;
  CHECK(dirs[3] == object.substr(0, object.rfind('/')));
}

TEST_CASE("relative module folders are taken against the working directory at the runtime's start", "[modules]") {
  const auto cwd = std::filesystem::current_path();
  setenv("SWITCHYARD_BACKEND_PATH", "rel/env", 1);
  const auto dirs = sb::module_search_path({"./rel/options/../opt", "rel/options/"});
  unsetenv("SWITCHYARD_BACKEND_PATH");
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == (cwd / "rel/env").string());
  CHECK(dirs[1] == (cwd / "rel/opt").string());
  CHECK(dirs[2] == (cwd / "rel/options").string());
  // A module found through a relative folder loads even once the program
  // has changed directory between the search path's making and the load.
  const auto module_dir = std::filesystem::relative(SWITCHYARD_TEST_MODULE_DIR, cwd);
  REQUIRE(module_dir.is_relative());
  unsetenv("SWITCHYARD_BACKEND_PATH");
  const std::vector<std::string> search = {sb::module_search_path({module_dir.string()}).front()};
  struct RestoreDirectory {
    std::filesystem::path dir;
    ~RestoreDirectory() { std::filesystem::current_path(dir); }
  } restore{cwd};
  std::filesystem::current_path("/");
  sy::RuntimeOptions options;
  options.devices = {"cpu:0", "testmod:0"};
  options.extend_backends = [&search](std::vector<sb::BackendKind>& kinds) {
    kinds.push_back(sb::module_kind("testmod", search));
  };
  {
    sy::Runtime rt(std::move(options));
    CHECK(rt.unavailable().empty());
    auto x = rt.device("testmod:0").tensor(std::vector<float>{1, -2}, {2});
    CHECK((-x).to_vector<float>() == std::vector<float>{-1, 2});
  }
}

TEST_CASE("a module registers its kind only when a device of it is asked for, and its devices run ops", "[modules]") {
  const std::string file = std::string(SWITCHYARD_TEST_MODULE_DIR) + "/" + sb::module_file_name("testmod");
  {
    sy::Runtime cpu_only(with_module("testmod", {"cpu:0"}));
    CHECK(dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD) == nullptr);  // listed, never loaded
  }
  sy::Runtime rt(with_module("testmod", {"cpu:0", "testmod:*"}));
  CHECK(rt.unavailable().empty());
  REQUIRE(rt.devices().size() == 3);
  auto x = rt.device("testmod:1").tensor(std::vector<float>{1, -2, 3}, {3});
  CHECK((-x).to_vector<float>() == std::vector<float>{-1, 2, -3});
  // Across devices: the module's buffers read back and bridge to cpu:0.
  CHECK((-x).to(rt.cpu()).sum().item<float>() == -2.0f);
  try {
    (void)(x + x).to_vector<float>();
    FAIL("an op the module does not run succeeded");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::unsupported);
  }
  // Which dtypes it holds, the backend says (supports(DType): f32 only),
  // and a dtype it does not hold is refused at the call.
  auto dev = rt.device("testmod:0");
  CHECK(dev.dtype_support(sy::DType::f32).storage);
  CHECK(dev.dtype_support(sy::DType::f32).matmul);
  CHECK_FALSE(dev.dtype_support(sy::DType::f64).storage);
  CHECK_FALSE(dev.dtype_support(sy::DType::i8).arithmetic);
  CHECK_THAT(dev.dtype_support(sy::DType::f64).how, Catch::Contains("testmod"));
  try {
    (void)dev.tensor(std::vector<double>{1, 2}, {2});
    FAIL("an f64 tensor was accepted on an f32-only device");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::unsupported);
    CHECK_THAT(std::string(e.what()), Catch::Contains("testmod:0") && Catch::Contains("f64"));
  }
}

TEST_CASE("a module of another ABI, of another kind or without entry point is refused with the reason", "[modules]") {
  struct Case {
    const char* kind;
    const char* reason;
  };
  for (const Case& c : {Case{"badabi", "does not match this library: it is built for Switchyard "},
                        Case{"wrongkind", "provides kind 'liar', not 'wrongkind'"},
                        Case{"noentry", "has no entry point switchyard_backend_module_v1"},
                        Case{"absent", "backend module libswitchyard-backend-absent.so not found (searched: "}}) {
    INFO(c.kind);
    sy::Runtime rt(with_module(c.kind, {"cpu:0", std::string(c.kind) + ":*"}));
    const auto reasons = rt.unavailable();
    REQUIRE(reasons.size() == 1);
    CHECK(starts_with(reasons[0], std::string(c.kind) + ": "));
    CHECK(reasons[0].find(c.reason) != std::string::npos);
    CHECK(rt.devices().size() == 1);
  }
}

#ifdef SWITCHYARD_CUDA_MODULE_DIR
TEST_CASE("with the cuda module found and no driver, cuda reports no CUDA driver and maps nothing of CUDA",
          "[modules][cuda]") {
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(driver);
    WARN("this machine has a CUDA driver; nothing to check");
    return;
  }
  sy::Runtime rt(
      sy::RuntimeOptions{.devices = {"cpu:0", "cuda:*"}, .backend_module_path = {SWITCHYARD_CUDA_MODULE_DIR}});
  CHECK(rt.unavailable() == std::vector<std::string>{"cuda: no CUDA driver"});
  CHECK(cuda_mappings().empty());
}

TEST_CASE("the built cuda module loads, matches this build and probes for devices", "[modules][cuda]") {
  // No driver check here: the module itself is loaded (mapping cudart and
  // cuBLAS) and asked, as it would be on a GPU machine.
  auto kind = sb::module_kind("cuda", {SWITCHYARD_CUDA_MODULE_DIR});
  const int count = kind.device_count();
  const std::string reason = kind.unavailable_reason();
  INFO("devices: " << count << ", reason: " << reason);
  CHECK(reason.find("backend module") == std::string::npos);  // it loaded and matched
  if (count == 0) CHECK_FALSE(reason.empty());
  CHECK_FALSE(cuda_mappings().empty());
}
#endif
