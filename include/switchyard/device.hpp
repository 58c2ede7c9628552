// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::Device: a device of a Runtime, and the tensors created on it.

#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/future.hpp"
#include "switchyard/messages/device_stats.hpp"
#include "switchyard/messages/dtype_support.hpp"
#include "switchyard/messages/std_memory.hpp"
#include "switchyard/messages/tensor_data.hpp"
#include "switchyard/messages/tensor_id.hpp"

namespace switchyard {

class Tensor;
namespace detail {
class Core;
}

/// A device of a Runtime ("cpu:0", "reference:0", "cuda:1", later
/// "host:port/cpu:0"). Cheap to copy; creates tensors on itself.
class Device {
 public:
  /// An empty device (valid() is false).
  Device() = default;

  /// Its name in the runtime ("cpu:0", "127.0.0.1:4242/cpu:0").
  [[nodiscard]] const std::string& name() const;
  /// The backend kind, the part of the name before the colon.
  [[nodiscard]] std::string kind() const;
  /// What this device does with tensors of `t`: whether it can hold them,
  /// compute with them and multiply matrices of them, and how (the type the
  /// arithmetic happens in). An op the device cannot run for a dtype throws
  /// Errc::unsupported at the call, naming device, op and dtype.
  [[nodiscard]] DTypeSupport dtype_support(DType t) const;
  /// Whether the device is lost (a remote device whose worker connection
  /// went): it never comes back (a reconnect adds new devices), its pending
  /// futures failed, and every later call on it throws Errc::device_lost.
  [[nodiscard]] bool lost() const;
  /// Its index in the runtime's device table.
  [[nodiscard]] DeviceId id() const noexcept { return id_; }
  /// False for a default-constructed Device.
  [[nodiscard]] bool valid() const noexcept { return core_ != nullptr; }

  /// \name Creation
  /// Ids are allocated here: nothing waits for the device.
  /// @{
  /// A tensor holding `data` (its bytes must fill its shape).
  [[nodiscard]] Tensor from_data(TensorData data) const;
  /// A tensor of `values` (row-major) in `shape`; a count that does not
  /// fill the shape is Error(shape_mismatch).
  template <class T>
  [[nodiscard]] Tensor tensor(const std::vector<T>& values, Shape shape) const;
  /// Every element `value` (converted as a cast would). A shape of more
  /// than 2^40 elements (or a negative extent) is shape_mismatch.
  [[nodiscard]] Tensor full(Shape shape, double value, DType dtype = DType::f32) const;
  /// full(shape, 0).
  [[nodiscard]] Tensor zeros(Shape shape, DType dtype = DType::f32) const;
  /// full(shape, 1).
  [[nodiscard]] Tensor ones(Shape shape, DType dtype = DType::f32) const;
  /// start, start + step, ... below end (above it for a negative step);
  /// bounds against the step's sign are refused (invalid_argument). Integer
  /// dtypes take PyTorch's rule: start and step truncated first, a step
  /// truncating to 0 refused, the count from the truncated bounds for i64
  /// and from the given ones otherwise.
  [[nodiscard]] Tensor arange(double start, double end, double step = 1, DType dtype = DType::i64) const;
  /// n x m (m < 0: n x n) with ones on the diagonal.
  [[nodiscard]] Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::f32) const;
  /// Uniform in [low, high) (low > high, or a NaN bound, is invalid_argument).
  [[nodiscard]] Tensor uniform(Shape shape, double low = 0, double high = 1, DType dtype = DType::f32) const;
  /// Normal(mean, stddev) (stddev < 0, or NaN, is invalid_argument).
  [[nodiscard]] Tensor normal(Shape shape, double mean = 0, double stddev = 1, DType dtype = DType::f32) const;
  /// 1 with probability p, else 0 (p outside [0, 1] is invalid_argument).
  [[nodiscard]] Tensor bernoulli(Shape shape, double p, DType dtype = DType::f32) const;
  /// @}

  /// Restarts this device's random stream (ordered with the ops around it).
  void seed(uint64_t seed) const;
  /// Completes once every op submitted to this device so far has run and
  /// every upload and bridge into it submitted so far has arrived (or
  /// failed), also where those bytes travel apart from the ops (a worker's
  /// bulk lane).
  [[nodiscard]] Future<void> sync() const;
  /// Its counters (ops executed, queue depth, live handles and bytes).
  [[nodiscard]] Future<DeviceStats> stats() const;
  /// Gives the memory this device caches for reuse back to the system, after
  /// the ops submitted before it; completes when done (`stats().cached_bytes`
  /// is then 0). Devices also do this by themselves when idle
  /// (RuntimeOptions::idle_trim_after).
  [[nodiscard]] Future<void> trim() const;

  /// The same device of the same runtime.
  friend bool operator==(const Device& a, const Device& b) noexcept { return a.core_ == b.core_ && a.id_ == b.id_; }

 private:
  friend class Runtime;
  friend class Tensor;
  friend class detail::Core;
  Device(std::shared_ptr<detail::Core> core, DeviceId id) : core_(std::move(core)), id_(id) {}
  static void check_values(size_t count, const Shape& shape);
  std::shared_ptr<detail::Core> core_;
  DeviceId id_ = 0;
};

}  // namespace switchyard
