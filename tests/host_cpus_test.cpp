// SPDX-License-Identifier: Apache-2.0
// Default thread counts follow the CPUs the process may use (issue 16):
// the affinity mask and the cgroup CPU quota, not the machine's CPU count.
#include "switchyard/messages/host_cpus.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sched.h>
#include <string>

namespace fs = std::filesystem;
using switchyard::available_cpus;
using switchyard::cgroup_cpu_limit;

namespace {

// A throw-away folder standing in for /sys/fs/cgroup.
struct FakeCgroupRoot {
  fs::path root;
  FakeCgroupRoot() {
    root = fs::temp_directory_path() / ("sy_cgroup_" + std::to_string(std::random_device{}()));
    fs::create_directories(root);
  }
  ~FakeCgroupRoot() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  }
};

}  // namespace

TEST_CASE("cgroup v2: cpu.max quota rounds up, 'max' is no limit, the tightest ancestor wins", "[cpus]") {
  FakeCgroupRoot fake;
  fake.write("cpu.max", "max 100000");
  fake.write("svc/cpu.max", "150000 100000");
  fake.write("svc/job/cpu.max", "max 100000");
  CHECK(cgroup_cpu_limit(fake.root.string(), "0::/svc/job\n") == 2u);
  CHECK(cgroup_cpu_limit(fake.root.string(), "0::/svc\n") == 2u);
  CHECK_FALSE(cgroup_cpu_limit(fake.root.string(), "0::/\n").has_value());
  fake.write("svc/job/cpu.max", "50000 100000");
  CHECK(cgroup_cpu_limit(fake.root.string(), "0::/svc/job\n") == 1u);
}

TEST_CASE("cgroup v1: cfs quota over period, -1 is no limit", "[cpus]") {
  FakeCgroupRoot fake;
  fake.write("cpu,cpuacct/cpu.cfs_quota_us", "-1");
  fake.write("cpu,cpuacct/cpu.cfs_period_us", "100000");
  fake.write("cpu,cpuacct/box/cpu.cfs_quota_us", "300000");
  fake.write("cpu,cpuacct/box/cpu.cfs_period_us", "100000");
  const std::string self = "4:memory:/box\n3:cpu,cpuacct:/box\n0::/\n";
  CHECK(cgroup_cpu_limit(fake.root.string(), self) == 3u);
  CHECK_FALSE(cgroup_cpu_limit(fake.root.string(), "3:cpu,cpuacct:/\n").has_value());
  // Garbage in the files is no limit, not a crash.
  fake.write("cpu,cpuacct/box/cpu.cfs_quota_us", "lots");
  CHECK_FALSE(cgroup_cpu_limit(fake.root.string(), self).has_value());
}

TEST_CASE("cgroup memory limits: v2 memory.max and v1 limit_in_bytes, none and garbage are no limit", "[cpus]") {
  using switchyard::cgroup_memory_limit;
  FakeCgroupRoot fake;
  fake.write("memory.max", "max");
  fake.write("svc/memory.max", "8589934592");
  fake.write("svc/job/memory.max", "max");
  CHECK(cgroup_memory_limit(fake.root.string(), "0::/svc/job\n") == uint64_t{8} << 30);
  CHECK_FALSE(cgroup_memory_limit(fake.root.string(), "0::/\n").has_value());
  fake.write("svc/job/memory.max", "1073741824");
  CHECK(cgroup_memory_limit(fake.root.string(), "0::/svc/job\n") == uint64_t{1} << 30);
  fake.write("memory/box/memory.limit_in_bytes", "2147483648");
  fake.write("memory/memory.limit_in_bytes", "9223372036854771712");  // v1's "no limit"
  CHECK(cgroup_memory_limit(fake.root.string(), "5:memory:/box\n3:cpu:/box\n") == uint64_t{2} << 30);
  CHECK_FALSE(cgroup_memory_limit(fake.root.string(), "5:memory:/\n").has_value());
  fake.write("memory/box/memory.limit_in_bytes", "plenty");
  CHECK_FALSE(cgroup_memory_limit(fake.root.string(), "5:memory:/box\n").has_value());
  CHECK(switchyard::available_memory() > 0);
}

TEST_CASE("available_cpus counts the affinity mask (taskset -c 0 gives 1)", "[cpus]") {
  cpu_set_t original;
  CPU_ZERO(&original);
  REQUIRE(sched_getaffinity(0, sizeof original, &original) == 0);
  const size_t before = available_cpus();
  CHECK(before >= 1);
  CHECK(before <= static_cast<size_t>(CPU_COUNT(&original)));
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const size_t pinned = available_cpus();
  REQUIRE(sched_setaffinity(0, sizeof original, &original) == 0);
  CHECK(pinned == 1);
}
