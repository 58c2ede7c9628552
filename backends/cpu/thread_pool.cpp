// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/thread_pool.hpp"

#include <algorithm>

namespace switchyard::backends::cpu {

ThreadPool::ThreadPool(size_t threads) {
  for (size_t i = 1; i < std::max<size_t>(threads, 1); ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(const std::function<void(int64_t, int64_t)>* job, int64_t n, int64_t chunk) {
  for (;;) {
    int64_t begin = next_.fetch_add(chunk, std::memory_order_relaxed);
    if (begin >= n) return;
    (*job)(begin, std::min(n, begin + chunk));
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job = nullptr;
    int64_t n = 0, chunk = 1;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
      chunk = chunk_;
      ++busy_;
    }
    if (job != nullptr) run_chunks(job, n, chunk);
    {
      std::lock_guard lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::run_parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  grain = std::max<int64_t>(grain, 1);
  auto parts = static_cast<int64_t>(threads());
  {
    std::lock_guard lock(mutex_);
    job_ = &f;
    n_ = n;
    // A few chunks per thread balance uneven rows without much contention.
    chunk_ = std::max(grain, (n + parts * 4 - 1) / (parts * 4));
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(&f, n_, chunk_);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return busy_ == 0 && next_.load(std::memory_order_relaxed) >= n_; });
  job_ = nullptr;
}

}  // namespace switchyard::backends::cpu
