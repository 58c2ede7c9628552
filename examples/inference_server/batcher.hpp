// SPDX-License-Identifier: Apache-2.0
#pragma once

// Dynamic batching over model replicas.
//
//   handler threads --submit()--> queue --batcher thread--> stack rows
//        ^                                                     |
//        | per-request Promise                                 v
//   split rows <--Future::then()-- read() <-- MLP on the least-loaded replica
//
// One batcher thread forms batches: it opens a batch at the first queued
// request and closes it when the window has passed since that request
// arrived, when max_batch rows are queued, or at shutdown. While every
// replica already runs max_inflight batches it keeps the batch open, so
// batches grow under load. Results come back through Switchyard futures: a
// continuation splits the output rows to the requests' promises; nothing
// blocks per batch.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <switchyard/switchyard.hpp>

#include "metrics.hpp"
#include "mlp_model.hpp"

namespace serve {

struct BatchOptions {
  std::chrono::microseconds window{1000};
  /// Rows per batch; a single request with more rows runs alone.
  int64_t max_batch = 64;
  /// Batches in flight per replica before the batcher waits.
  int64_t max_inflight = 2;
  /// A request queued this long is dropped, not run: the server answered it
  /// 504 then (--request-timeout-ms). 0: never.
  std::chrono::milliseconds give_up_after{0};
};

/// The model's weights placed on one device.
struct Replica {
  switchyard::Device device;
  std::vector<switchyard::Tensor> weights;
  std::vector<switchyard::Tensor> biases;
};

[[nodiscard]] Replica place(const mlp::Model& m, const switchyard::Device& d);

/// Output rows (n * output width floats) of one request.
using Rows = std::vector<float>;

class Batcher {
 public:
  Batcher(const mlp::Model& model, std::vector<Replica> replicas, BatchOptions opts);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  /// Queues `n` rows (n * input width floats, already validated). The future
  /// fails with switchyard::Error when the device fails the batch.
  /// `inject_fault` makes the batch fail on the device (a test hook; such a
  /// request is batched alone so only it is affected).
  [[nodiscard]] switchyard::Future<Rows> submit(std::vector<float> rows, int64_t n, bool inject_fault = false);

  /// Stops waiting for batch windows: queued requests are dispatched at once.
  void drain();
  /// drain(), then waits (at most `limit`) until every batch has completed
  /// and stops the batcher thread. Idempotent.
  void stop(std::chrono::milliseconds limit = std::chrono::milliseconds(30000));

  [[nodiscard]] const std::vector<Replica>& replicas() const { return replicas_; }
  /// Batches in flight per replica.
  [[nodiscard]] std::vector<int64_t> in_flight() const;
  /// Batches dispatched per replica.
  [[nodiscard]] std::vector<uint64_t> dispatched() const;
  [[nodiscard]] const Histogram& batch_rows() const { return batch_rows_; }

 private:
  struct Job {
    std::vector<float> rows;
    int64_t n = 0;
    bool inject_fault = false;
    switchyard::Promise<Rows> done;
    std::chrono::steady_clock::time_point arrived;
  };
  void loop();
  void dispatch(size_t replica, const std::vector<std::shared_ptr<Job>>& jobs, int64_t rows);
  // Ends a batch; `failure`, if it is the device's loss, retires the replica.
  void finish(size_t replica, const std::exception_ptr& failure = nullptr);

  int64_t in_width_;
  int64_t out_width_;
  std::vector<Replica> replicas_;
  BatchOptions opts_;
  Histogram batch_rows_{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t queued_rows_ = 0;
  std::vector<int64_t> in_flight_;
  std::vector<uint64_t> dispatched_;
  std::vector<char> lost_;  // replicas whose device was lost: no more batches
  size_t next_ = 0;         // round-robin start among equally loaded replicas
  bool draining_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace serve
