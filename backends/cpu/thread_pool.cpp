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
  SpinWait spin;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job = nullptr;
    int64_t n = 0, chunk = 1;
    // A model's ops come one after another, each a parallel_for: polling a
    // few microseconds for the next one saves the ~13 us cross-core wake-up
    // (switchyard/messages/spin_wait.hpp) that every op paid.
    spin([&] { return generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      --sleepers_;
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
      if (--busy_ == 0 && caller_waiting_) done_.notify_one();
    }
  }
}

void ThreadPool::run_parallel(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  grain = std::max<int64_t>(grain, 1);
  auto parts = static_cast<int64_t>(threads());
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    job_ = &f;
    n_ = n;
    // A few chunks per thread balance uneven rows without much contention.
    chunk_ = std::max(grain, (n + parts * 4 - 1) / (parts * 4));
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
    wake = sleepers_ > 0;
  }
  if (wake) wake_.notify_all();
  run_chunks(&f, n_, chunk_);
  // The other threads' last chunks usually end within microseconds of ours.
  caller_spin_([&] { return busy_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mutex_);
  caller_waiting_ = true;
  done_.wait(lock, [&] { return busy_ == 0 && next_.load(std::memory_order_relaxed) >= n_; });
  caller_waiting_ = false;
  job_ = nullptr;
}

}  // namespace switchyard::backends::cpu
