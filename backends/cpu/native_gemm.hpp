// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the native GEMM kernels (bf16_gemm.cpp, f32_gemm.cpp) share: the
// on/off switch each one has (CPU support, an environment variable read
// once, a process-wide override for tests and benchmarks, a run counter),
// and the work-item loop that spreads result tiles over the device's pool.

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backends/cpu/thread_pool.hpp"

namespace switchyard::backends::cpu {

/// The switch of one native kernel. `supported` says whether this build and
/// CPU can run it; `env` names the variable that turns it off ("0", "off").
/// Constructed once, as a function-local static, at the kernel's first use.
class NativeKernelSwitch {
 public:
  NativeKernelSwitch(bool supported, const char* env) noexcept : supported_(supported), on_(supported && !off(env)) {}

  [[nodiscard]] bool supported() const noexcept { return supported_; }
  [[nodiscard]] bool enabled() const noexcept { return on_.load(std::memory_order_relaxed); }
  /// Turns the kernel on or off for the process (it stays off where it is
  /// not supported); returns the previous setting.
  bool set(bool on) noexcept { return on_.exchange(on && supported_, std::memory_order_relaxed); }
  [[nodiscard]] uint64_t runs() const noexcept { return runs_.load(std::memory_order_relaxed); }
  void count_run() noexcept { runs_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // "0", "off", "false" or "no", in any case (a value such as "false" that
  // was silently ignored read as a switch that did nothing).
  static bool off(const char* env) noexcept {
    const char* v = std::getenv(env);
    std::string_view s = v == nullptr ? "" : v;
    if (s.size() > 5) return false;
    char lower[6] = {};
    for (size_t i = 0; i < s.size(); ++i) lower[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    s = std::string_view(lower, s.size());
    return s == "0" || s == "off" || s == "false" || s == "no";
  }

  const bool supported_;
  std::atomic<bool> on_;
  std::atomic<uint64_t> runs_{0};
};

/// Runs take(next) on every thread of the pool (inline when `serial`) in one
/// pass: each thread takes work items from the shared counter until none is
/// left. Items differ in size at the edges, and the pool's static chunks
/// would leave a thread idle for up to a chunk at the end.
template <class Take>
void run_work_items(ThreadPool& pool, bool serial, Take&& take) {
  std::atomic<int64_t> next{0};
  const auto threads = static_cast<int64_t>(pool.threads());
  pool.parallel_for(threads, serial ? threads : 1, [&](int64_t, int64_t) { take(next); });
}

}  // namespace switchyard::backends::cpu
