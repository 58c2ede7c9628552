// SPDX-License-Identifier: Apache-2.0
#pragma once

// Serving ONNX models (--model x.onnx): JSON <-> named tensors, and dynamic
// batching along axis 0 over one loaded model per device.
//
//   {"inputs": {NAME: nested list, ...}}  or, for a single-input model, a bare nested list
//     -> rows stacked along axis 0 with other requests of the same trailing shapes
//     -> sy::onnx::Model::infer on the least-loaded replica
//     -> outputs split back along axis 0 -> {"outputs": {NAME: nested list, ...}}
//
// Batching needs every input and output to have a dynamic axis 0, and the
// model to be batch-invariant along it: at start-up check_batching() runs a
// probe (two synthetic requests, alone and stacked) and batching stays off
// unless the stacked outputs split back into the requests' own. A batch that
// fails, or whose outputs cannot be split back, is run again request by
// request, so each gets its own result or its own error.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

#include "batcher.hpp"
#include "metrics.hpp"

namespace serve {

/// A request's inputs as host data, or why they are not acceptable.
struct OnnxParsed {
  switchyard::onnx::DataMap inputs;
  /// Extent of axis 0 (the batch axis) shared by every input; 0 when the
  /// inputs disagree or have no axes (then the request runs alone).
  int64_t rows = 0;
  std::string error;
};

/// Which JSON reader parse_onnx_inputs uses: both (simdjson first, nlohmann
/// for whatever it declines, and for every error message), or one alone
/// (for tests: `fast_only` fails whatever the fast path declines).
enum class InputParser { both, slow_only, fast_only };

/// Parses a request body against the model's declared inputs (names, dtypes,
/// ranks, fixed extents); errors name the input.
[[nodiscard]] OnnxParsed parse_onnx_inputs(const std::string& body,
                                           const std::vector<switchyard::onnx::ValueInfo>& decl,
                                           InputParser parser = InputParser::both);

/// {"outputs": {NAME: nested list, ...}}.
[[nodiscard]] std::string onnx_outputs_body(const switchyard::onnx::DataMap& outputs);

/// {"inputs": [...], "outputs": [...]} with name, dtype and dims of each.
[[nodiscard]] std::string onnx_signature_json(const switchyard::onnx::Model& m);

/// Whether requests to a model may be stacked along axis 0.
struct BatchCheck {
  bool ok = false;
  /// Why not, when !ok ("output 'y' of ... differs ...").
  std::string why;
};

/// Checks that `m` is batch-invariant along axis 0. Structurally first:
/// every input and output a tensor with a dynamic axis 0. Then a probe: two
/// synthetic requests of 1 and 2 rows (seeded random floats in [0.1, 1),
/// integers in [0, index_extent) where the input has one, else 0 or 1; a
/// dynamic non-batch axis gets extent 2, a fixed one its declared extent)
/// run alone and stacked; the stacked outputs must have 3 rows on axis 0 and
/// split back into the alone outputs: the same shapes, integers and booleans
/// equal, floats within 1e-4 relative plus 1e-5 times (1 + the output's
/// largest magnitude) (1e-2 and 1e-3 for f16 and bf16; NaN matches NaN). A
/// probe that fails to run, or takes longer than `limit`, says no too.
[[nodiscard]] BatchCheck check_batching(const switchyard::onnx::Model& m,
                                        std::chrono::milliseconds limit = std::chrono::milliseconds(60000));

class OnnxBatcher {
 public:
  /// Batches when opts.max_batch > 1 and check_batching() on the first
  /// replica agrees (see batching()).
  OnnxBatcher(std::vector<switchyard::onnx::Model> replicas, BatchOptions opts);
  ~OnnxBatcher();
  OnnxBatcher(const OnnxBatcher&) = delete;
  OnnxBatcher& operator=(const OnnxBatcher&) = delete;

  /// Queues one request (already parsed). The future fails with
  /// switchyard::Error when the model fails on it.
  [[nodiscard]] switchyard::Future<switchyard::onnx::DataMap> submit(switchyard::onnx::DataMap inputs, int64_t rows);
  void drain();
  void stop(std::chrono::milliseconds limit = std::chrono::milliseconds(30000));

  [[nodiscard]] std::vector<switchyard::Device> devices() const;
  [[nodiscard]] std::vector<int64_t> in_flight() const;
  [[nodiscard]] std::vector<uint64_t> dispatched() const;
  [[nodiscard]] const Histogram& batch_rows() const { return batch_rows_; }
  [[nodiscard]] const switchyard::onnx::Model& model() const { return replicas_.front(); }
  /// Whether requests are stacked; when batching was asked for (max_batch
  /// > 1) but the model is not batch-invariant, batching_off() says why.
  [[nodiscard]] bool batching() const { return batchable_; }
  [[nodiscard]] const std::string& batching_off() const { return batching_off_; }

 private:
  struct Job {
    switchyard::onnx::DataMap inputs;
    int64_t rows = 0;
    std::string key;  // trailing shapes: only equal keys stack
    switchyard::Promise<switchyard::onnx::DataMap> done;
    std::chrono::steady_clock::time_point arrived;
    bool alone = false;  // its batch failed or could not be split: run it by itself
  };
  void loop();
  void dispatch(size_t replica, std::vector<std::shared_ptr<Job>> jobs);
  // Ends a batch; `failure`, if it is the device's loss, retires the replica.
  void finish(size_t replica, const std::exception_ptr& failure = nullptr);
  // Ends a batch that failed or whose outputs could not be split: its
  // requests go back to the front of the queue, each to run alone (on
  // another replica where `failure` was this one's device lost).
  void retry_alone(size_t replica, const std::vector<std::shared_ptr<Job>>& jobs,
                   const std::exception_ptr& failure = nullptr);
  // Whether a request that failed with `failure` runs again on another
  // replica: `failure` is this one's device lost (which retires it) and a
  // replica is left.
  bool rerun_elsewhere(size_t replica, const std::vector<std::shared_ptr<Job>>& jobs,
                       const std::exception_ptr& failure);
  [[nodiscard]] bool idle() const;  // under mu_: no batch in flight

  std::vector<switchyard::onnx::Model> replicas_;
  BatchOptions opts_;
  bool batchable_ = false;
  std::string batching_off_;
  Histogram batch_rows_{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<int64_t> in_flight_;
  std::vector<uint64_t> dispatched_;
  std::vector<char> lost_;  // replicas whose device was lost: no more batches
  size_t next_ = 0;
  bool draining_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_by_;  // stop()'s limit for the batches in flight
  std::thread thread_;
};

}  // namespace serve
