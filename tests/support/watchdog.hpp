// SPDX-License-Identifier: Apache-2.0
#pragma once

// Ends the test process with a message when a case overruns its bound, so a
// hang or a deadlock fails that test at once (with what it was waiting for)
// instead of running into ctest's timeout or stalling the whole run.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace switchyard::testing {

class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds bound, std::string what)
      : what_(std::move(what)), thread_([this, bound] {
          std::unique_lock lock(mutex_);
          if (cv_.wait_for(lock, bound, [&] { return stopped_; })) return;
          std::fprintf(stderr, "WATCHDOG: %s did not finish within %lld ms\n", what_.c_str(),
                       static_cast<long long>(bound.count()));
          std::fflush(stderr);
          std::_Exit(3);
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace switchyard::testing
