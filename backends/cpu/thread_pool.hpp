// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/isa_clones.hpp"
#include "switchyard/messages/spin_wait.hpp"

namespace switchyard::backends::cpu {

/// Kernel threads of one CPU device. The runner's own thread takes part in
/// every parallel_for, so a device with `threads` = n runs n busy threads,
/// never more: two devices sharing a 2-core machine are given 1 each by the
/// runtime instead of oversubscribing.
class ThreadPool {
 public:
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] size_t threads() const noexcept { return workers_.size() + 1; }

  /// Runs f(begin, end) over [0, n) in chunks of at least `grain`; returns
  /// when all chunks are done. Serial when n is small or the pool has one
  /// thread. Each chunk runs through run_for_this_cpu, compiled for the
  /// CPU's instruction-set level (isa_clones.hpp).
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& f) {
    if (n <= 0) return;
    // Small jobs (every tiny op) run inline: no type erasure, no allocation.
    if (workers_.empty() || n <= std::max<int64_t>(grain, 1)) {
      run_for_this_cpu(f, int64_t{0}, n);
      return;
    }
    const std::function<void(int64_t, int64_t)> job(
        [&f](int64_t begin, int64_t end) { run_for_this_cpu(f, begin, end); });
    run_parallel(n, grain, job);
  }

 private:
  void run_parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
  void work();
  void run_chunks(const std::function<void(int64_t, int64_t)>* job, int64_t n, int64_t chunk);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<size_t> busy_{0};
  std::atomic<uint64_t> generation_{0};
  size_t sleepers_ = 0;
  bool caller_waiting_ = false;
  bool stop_ = false;
  SpinWait caller_spin_;
};

}  // namespace switchyard::backends::cpu
