#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "switchyard/future.hpp"
#include "switchyard/messages/protocol.hpp"
#include "switchyard/messages/tensor_data.hpp"

namespace switchyard {

class Tensor;
namespace detail {
class Core;
}

/// A device of a Runtime ("cpu:0", "reference:0", "cuda:1", later
/// "host:port/cpu:0"). Cheap to copy; creates tensors on itself.
class Device {
 public:
  Device() = default;

  [[nodiscard]] const std::string& name() const;
  /// The backend kind, the part of the name before the colon.
  [[nodiscard]] std::string kind() const;
  [[nodiscard]] DeviceId id() const noexcept { return id_; }
  [[nodiscard]] bool valid() const noexcept { return core_ != nullptr; }

  // --- creation (ids are allocated here: nothing waits for the device) ---
  /// A tensor holding `data` (its bytes must fill its shape).
  [[nodiscard]] Tensor from_data(TensorData data) const;
  /// A tensor of `values` (row-major) in `shape`; a count that does not
  /// fill the shape is Error(shape_mismatch).
  template <class T>
  [[nodiscard]] Tensor tensor(const std::vector<T>& values, Shape shape) const;
  [[nodiscard]] Tensor full(Shape shape, double value, DType dtype = DType::f32) const;
  [[nodiscard]] Tensor zeros(Shape shape, DType dtype = DType::f32) const;
  [[nodiscard]] Tensor ones(Shape shape, DType dtype = DType::f32) const;
  /// start, start + step, ... below end.
  [[nodiscard]] Tensor arange(double start, double end, double step = 1, DType dtype = DType::i64) const;
  [[nodiscard]] Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::f32) const;
  /// Uniform in [low, high) (low > high, or a NaN bound, is invalid_argument).
  [[nodiscard]] Tensor uniform(Shape shape, double low = 0, double high = 1, DType dtype = DType::f32) const;
  /// Normal(mean, stddev) (stddev < 0, or NaN, is invalid_argument).
  [[nodiscard]] Tensor normal(Shape shape, double mean = 0, double stddev = 1, DType dtype = DType::f32) const;
  [[nodiscard]] Tensor bernoulli(Shape shape, double p, DType dtype = DType::f32) const;

  /// Restarts this device's random stream (ordered with the ops around it).
  void seed(uint64_t seed) const;
  /// Completes once every op submitted to this device so far has run.
  [[nodiscard]] Future<void> sync() const;
  [[nodiscard]] Future<DeviceStats> stats() const;

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
