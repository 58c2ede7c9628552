// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/host_cpus.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <sched.h>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <vector>

namespace switchyard {
namespace {

std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::optional<int64_t> parse_int(const std::string& s) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(s, &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

size_t cpus_of(int64_t quota, int64_t period) {
  return static_cast<size_t>(std::max<int64_t>(1, (quota + period - 1) / period));
}

// cgroup v2: "max 100000" (no limit) or "<quota> <period>".
std::optional<size_t> v2_limit(const std::string& dir) {
  auto line = read_first_line(dir + "/cpu.max");
  if (!line) return std::nullopt;
  std::istringstream fields(*line);
  std::string quota, period;
  fields >> quota >> period;
  auto q = parse_int(quota), p = parse_int(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return cpus_of(*q, *p);
}

// cgroup v1: cpu.cfs_quota_us (-1: no limit) over cpu.cfs_period_us.
std::optional<size_t> v1_limit(const std::string& dir) {
  auto quota = read_first_line(dir + "/cpu.cfs_quota_us");
  auto period = read_first_line(dir + "/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  auto q = parse_int(*quota), p = parse_int(*period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return cpus_of(*q, *p);
}

// A byte count from a memory limit file: "max", garbage and v1's "no
// limit" (PAGE_COUNTER_MAX pages, just under 2^63) are none.
std::optional<uint64_t> bytes_limit(const std::string& file) {
  auto line = read_first_line(file);
  if (!line) return std::nullopt;
  auto v = parse_int(*line);
  if (!v || *v <= 0 || *v >= (int64_t{1} << 62)) return std::nullopt;
  return static_cast<uint64_t>(*v);
}

// The smallest limit from `dir` up to `root` (a parent's quota bounds its children).
template <class Read>
auto min_along_path(const std::string& root, std::string rel, Read read) {
  decltype(read(root)) best;
  while (true) {
    if (auto v = read(root + rel)) best = best ? std::min(*best, *v) : *v;
    if (rel.empty() || rel == "/") break;
    auto slash = rel.rfind('/');
    rel = slash == std::string::npos || slash == 0 ? std::string() : rel.substr(0, slash);
  }
  return best;
}

// The tightest limit of `controller` over the cgroups /proc/self/cgroup
// names: lines are "id:controllers:path"; v2 is "0::path" (read by
// `read_v2` along the path under `root`), v1 lists the controller among
// the line's controllers (read by `read_v1` under root + each of
// `v1_mounts`).
template <class T, class ReadV2, class ReadV1>
std::optional<T> tightest_limit(const std::string& root, const std::string& proc_self_cgroup,
                                const std::string& controller, std::initializer_list<const char*> v1_mounts,
                                ReadV2 read_v2, ReadV1 read_v1) {
  std::optional<T> best;
  auto take = [&](std::optional<T> v) {
    if (v) best = best ? std::min(*best, *v) : *v;
  };
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    auto first = line.find(':');
    auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    if (controllers.empty()) {
      take(min_along_path(root, path, read_v2));
      continue;
    }
    std::vector<std::string> names;
    std::istringstream list(controllers);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), controller) == names.end()) continue;
    for (const char* mount : v1_mounts) take(min_along_path(root + mount, path, read_v1));
  }
  return best;
}

}  // namespace

std::optional<size_t> cgroup_cpu_limit(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  // v1's cpu controller is mounted at <root>/cpu or <root>/cpu,cpuacct.
  return tightest_limit<size_t>(cgroup_root, proc_self_cgroup, "cpu", {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"},
                                v2_limit, v1_limit);
}

std::optional<uint64_t> cgroup_memory_limit(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  return tightest_limit<uint64_t>(
      cgroup_root, proc_self_cgroup, "memory", {"/memory"},
      [](const std::string& dir) { return bytes_limit(dir + "/memory.max"); },
      [](const std::string& dir) { return bytes_limit(dir + "/memory.limit_in_bytes"); });
}

uint64_t available_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  uint64_t bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  std::ifstream self("/proc/self/cgroup");
  std::stringstream text;
  text << self.rdbuf();
  if (auto limit = cgroup_memory_limit("/sys/fs/cgroup", text.str()))
    bytes = bytes == 0 ? *limit : std::min(bytes, *limit);
  return bytes;
}

size_t available_cpus() {
  size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  // A mask sized for the CPUs the kernel may report (not the 1024 of cpu_set_t).
  for (size_t capacity = 1024; capacity <= (size_t{1} << 20); capacity *= 2) {
    const size_t bytes = CPU_ALLOC_SIZE(capacity);
    std::vector<uint8_t> storage(bytes);
    auto* set = reinterpret_cast<cpu_set_t*>(storage.data());
    if (sched_getaffinity(0, bytes, set) == 0) {
      cpus = std::max(1, CPU_COUNT_S(bytes, set));
      break;
    }
    if (errno != EINVAL) break;  // EINVAL: the mask is too small, retry larger
  }
  std::ifstream self("/proc/self/cgroup");
  std::stringstream text;
  text << self.rdbuf();
  if (auto limit = cgroup_cpu_limit("/sys/fs/cgroup", text.str())) cpus = std::min(cpus, *limit);
  return std::max<size_t>(1, cpus);
}

}  // namespace switchyard
