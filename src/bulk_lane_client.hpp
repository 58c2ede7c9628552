// SPDX-License-Identifier: Apache-2.0
#pragma once

// A client's end of one worker's bulk lane (wire format in
// switchyard/messages/bulk_frames.hpp; the worker's end in
// worker/bulk_lane.hpp). Two threads of its own: one writes uploads in
// order, one reads the worker's frames. Neither ever waits on a runtime
// thread, and every callback they make runs under a RuntimeThreadScope.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <caf/expected.hpp>

#include "backends/cpu/buffer_pool.hpp"
#include "switchyard/messages/tensor_data.hpp"

namespace switchyard::detail {

class BulkLaneClient {
 public:
  /// The bytes of a read, or why the lane could not bring them.
  using ReadDone = std::function<void(caf::expected<Bytes>)>;
  /// An upload the worker did not acknowledge before the lane broke: the
  /// caller sends it another way.
  using Resend = std::function<void(TensorData)>;

  /// Connects to `host`:`port` and presents `token` within `timeout`; null
  /// with `why` set when it cannot. `name` names the worker in errors.
  /// Reads land in blocks of a pool of this lane's (as a cpu device's:
  /// warm pages instead of fresh ones for every transfer) that keeps at most
  /// `cache_limit` bytes of blocks their readers dropped, and gives them
  /// back after `idle_trim_after` without a read (0: keeps them).
  static std::shared_ptr<BulkLaneClient> open(const std::string& host, uint16_t port, const std::string& token,
                                              std::chrono::milliseconds timeout, std::string name, uint64_t cache_limit,
                                              std::chrono::milliseconds idle_trim_after, std::string& why);
  ~BulkLaneClient();
  BulkLaneClient(const BulkLaneClient&) = delete;
  BulkLaneClient& operator=(const BulkLaneClient&) = delete;

  /// Stops both threads; reads still waiting fail with runtime_closed, and
  /// unacknowledged uploads are dropped (the runtime is going). Not from
  /// the lane's own threads.
  void close();
  [[nodiscard]] bool alive() const noexcept { return alive_.load(std::memory_order_acquire); }

  /// Queues `data` as tensor `id` of the worker's device `device` (a bridge
  /// from a device of ours, or host data); false if
  /// the lane is down (nothing queued). `resend` is kept until the worker
  /// acknowledges the upload and is called if the lane breaks first.
  bool upload(uint32_t device, TensorId id, const TensorData& data, bool bridge, Resend resend);

  /// A read of exactly `bytes` bytes: its ticket (0: the lane is down).
  /// `done` is called once, on the lane's thread, unless cancel_read comes
  /// first.
  uint64_t expect_read(uint64_t bytes, ReadDone done);
  /// The read's request failed: its bytes will not come (or are dropped).
  void cancel_read(uint64_t ticket);

 private:
  struct Upload {
    std::vector<uint8_t> header;
    TensorData data;
    Resend resend;
  };
  struct PendingRead {
    uint64_t bytes = 0;
    ReadDone done;
  };

  BulkLaneClient(int fd, std::string name, uint64_t cache_limit, std::chrono::milliseconds idle_trim_after);
  void write_loop();
  void read_loop();
  // The lane broke (`why`) or closes (`closing`): fails what waits on it.
  void fail(const std::string& why, bool closing);

  const int fd_;
  const std::string name_;
  backends::cpu::BufferPool pool_;
  const std::chrono::milliseconds idle_trim_after_;
  std::atomic<uint64_t> reads_done_{0};
  std::atomic<bool> alive_{true};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool failed_ = false;
  std::deque<Upload> queued_;              // not yet written
  std::map<uint64_t, Upload> unacked_;     // written, by tensor id
  std::map<uint64_t, PendingRead> reads_;  // by ticket
  uint64_t next_ticket_ = 1;
  std::thread writer_;
  std::thread reader_;
};

}  // namespace switchyard::detail
