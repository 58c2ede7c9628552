// SPDX-License-Identifier: Apache-2.0
#pragma once

// What Recording::record collects while its body runs (recording.hpp): the
// ops the thread submits, the drops of tensors they made, and the handles
// of every tensor the body touched (so that tensors read from outside, such
// as weights, stay alive as long as the recording). Core and Tensor report
// to the recorder of the calling thread; with none, each hook is one
// thread-local load.

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "switchyard/messages/protocol.hpp"

namespace switchyard::detail {

class Core;
struct TensorHandle;

class Recorder {
 public:
  explicit Recorder(const Core* core) : core_(core) {}

  /// The body touched this tensor (a handle it may pass to an op).
  void saw(const std::shared_ptr<TensorHandle>& h);
  /// `core` queued `op` for `device` (called before the op is moved).
  void op(const Core* core, DeviceId device, const OperationIr& op);
  /// `core` was asked to drop `id` on `device`.
  void drop(const Core* core, DeviceId device, TensorId id);
  /// The body did something a replay cannot repeat; the first reason stays.
  void refuse(std::string why);

  [[nodiscard]] const Core* core() const { return core_; }
  [[nodiscard]] const std::string& refused() const { return refused_; }
  [[nodiscard]] DeviceId device() const { return device_; }
  void set_device(DeviceId d) { device_ = d; }
  [[nodiscard]] std::vector<OperationIr>& ops() { return ops_; }
  [[nodiscard]] const std::unordered_set<uint64_t>& made() const { return made_; }
  [[nodiscard]] const std::unordered_set<uint64_t>& dropped() const { return dropped_; }
  /// The handle of a tensor the body touched, or nullptr.
  [[nodiscard]] std::shared_ptr<TensorHandle> handle_of(TensorId id) const;

 private:
  const Core* core_;
  DeviceId device_ = 0;
  std::vector<OperationIr> ops_;
  std::unordered_set<uint64_t> made_;
  std::unordered_set<uint64_t> dropped_;
  std::unordered_map<uint64_t, std::shared_ptr<TensorHandle>> seen_;
  std::string refused_;
};

/// The recorder of the calling thread (per thread by nature: it says what
/// this thread is doing right now), or nullptr.
inline thread_local Recorder* thread_recorder = nullptr;

}  // namespace switchyard::detail
