// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared by the C++ benchmarks: workload sizes (torch_bench.py mirrors them)
// and the resident-set probe used by the churn workload.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bench {

inline constexpr int64_t tiny_chain_ops = 100000;  // dependent 4-element adds
inline constexpr int client_threads = 8;
inline constexpr int64_t ops_per_client = 20000;          // independent 4-element adds each
inline constexpr int64_t large_elems = int64_t{1} << 24;  // 16M f32 = 64 MiB
inline constexpr int64_t churn_tensors = 1000000;
inline constexpr int64_t churn_warmup = 100000;

/// Current resident set in bytes (VmRSS of /proc/self/status).
inline uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "VmRSS:", 6) == 0) kb = std::strtoull(line + 6, nullptr, 10);
  std::fclose(f);
  return kb * 1024;
}

}  // namespace bench
