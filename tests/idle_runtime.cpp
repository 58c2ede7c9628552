// SPDX-License-Identifier: Apache-2.0
// An idle cpu-only Runtime, as a process of its own: prints its resident
// memory (VmRSS) and the CUDA libraries it has mapped, and fails when it has
// mapped any. The CUDA backend is a module loaded only for cuda: devices
// (docs/ARCHITECTURE.md), so a program that asks for cpu:0 alone must not
// pay for cudart, cuBLAS or the driver. docs/PERFORMANCE.md records the RSS.
//
//   idle_runtime [--devices cpu:0,...]   exit 0: nothing of CUDA mapped

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include <switchyard/switchyard.hpp>

namespace {

// Mapped files whose name starts with one of these belong to CUDA.
bool is_cuda_library(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  for (const char* prefix : {"libcud", "libcublas", "libnccl", "libnvrtc", "libnvJitLink"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

std::set<std::string> cuda_mappings() {
  std::set<std::string> found;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto path = line.find('/');
    if (path != std::string::npos && is_cuda_library(line.substr(path))) found.insert(line.substr(path));
  }
  return found;
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace sy = switchyard;
  sy::RuntimeOptions options;
  options.devices = {"cpu:0"};
  if (argc == 3 && std::strcmp(argv[1], "--devices") == 0) {
    options.devices.clear();
    std::stringstream list(argv[2]);
    for (std::string d; std::getline(list, d, ',');) options.devices.push_back(d);
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: idle_runtime [--devices cpu:0,...]\n");
    return 2;
  }
  std::optional<sy::Runtime> started;
  try {
    started.emplace(options);
  } catch (const sy::Error& e) {
    std::fprintf(stderr, "idle_runtime: %s\n", e.what());
    return 2;
  }
  sy::Runtime& rt = *started;
  // One op, so the device has started its threads and the path is warm.
  (void)rt.cpu().tensor(std::vector<float>{1, 2, 3}, {3}).sum().item<float>();
  for (const auto& why : rt.unavailable()) std::printf("  unavailable: %s\n", why.c_str());
  const auto cuda = cuda_mappings();
  std::printf("idle_runtime: devices=%zu rss_kib=%ld cuda_libraries=%zu\n", rt.devices().size(), rss_kib(),
              cuda.size());
  for (const auto& lib : cuda) std::printf("  mapped: %s\n", lib.c_str());
  return cuda.empty() ? 0 : 1;
}
