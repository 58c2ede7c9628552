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
// Batching needs every input and output to have a dynamic axis 0 (the batch
// axis); a model without one runs each request alone.
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

class OnnxBatcher {
 public:
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

 private:
  struct Job {
    switchyard::onnx::DataMap inputs;
    int64_t rows = 0;
    std::string key;  // trailing shapes: only equal keys stack
    switchyard::Promise<switchyard::onnx::DataMap> done;
    std::chrono::steady_clock::time_point arrived;
  };
  void loop();
  void dispatch(size_t replica, std::vector<std::shared_ptr<Job>> jobs);
  void finish(size_t replica);

  std::vector<switchyard::onnx::Model> replicas_;
  BatchOptions opts_;
  bool batchable_ = false;
  Histogram batch_rows_{{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<int64_t> in_flight_;
  std::vector<uint64_t> dispatched_;
  size_t next_ = 0;
  bool draining_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace serve
