// SPDX-License-Identifier: Apache-2.0
#pragma once

// How many CPUs this process may really use, for default thread counts.
// std::thread::hardware_concurrency() counts the machine's CPUs: under
// `taskset -c 0` or a container limited to 2 CPUs, pools sized by it run
// many more threads than there are CPUs to run them.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace switchyard {

/// CPUs in the calling thread's affinity mask (sched_getaffinity), capped by
/// the cgroup CPU quota (rounded up); at least 1.
[[nodiscard]] size_t available_cpus();

/// The CPU quota of the cgroup the process is in, in CPUs rounded up, or
/// nullopt when none is set. `proc_self_cgroup` is the text of
/// /proc/self/cgroup; quotas are read under `cgroup_root` (/sys/fs/cgroup),
/// for cgroup v2 (cpu.max) and v1 (cpu.cfs_quota_us / cpu.cfs_period_us),
/// and the smallest along the path up to the root wins. Parameters so that
/// tests can feed it a fake hierarchy.
[[nodiscard]] std::optional<size_t> cgroup_cpu_limit(const std::string& cgroup_root,
                                                     const std::string& proc_self_cgroup);

/// The memory limit of the cgroup the process is in, in bytes, or nullopt
/// when none is set: cgroup v2's memory.max ("max": none) and v1's
/// memory.limit_in_bytes (2^62 and up: none), the smallest along the path
/// up to the root. Parameters as cgroup_cpu_limit's.
[[nodiscard]] std::optional<uint64_t> cgroup_memory_limit(const std::string& cgroup_root,
                                                          const std::string& proc_self_cgroup);

/// Physical memory, capped by the cgroup memory limit; 0 where the system
/// does not say.
[[nodiscard]] uint64_t available_memory();

}  // namespace switchyard
