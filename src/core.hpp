#pragma once

// The client side of a Runtime: the actor system, the per-device op queues
// that batch submissions, and the request helpers behind futures.

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "switchyard/runtime.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::detail {

/// Client-side state of one tensor; the last reference sends its drop.
struct TensorHandle {
  std::shared_ptr<Core> core;
  DeviceId device;
  TensorIr ir;
  TensorHandle(std::shared_ptr<Core> c, DeviceId d, TensorIr t) : core(std::move(c)), device(d), ir(std::move(t)) {}
  ~TensorHandle();
  TensorHandle(const TensorHandle&) = delete;
  TensorHandle& operator=(const TensorHandle&) = delete;
};

struct DeviceInfo {
  std::string name;
  std::string kind;
};

/// Converts a caf::error into the exception futures rethrow.
[[nodiscard]] std::exception_ptr to_exception(const caf::error& err);
/// Throws Error for a failed rule check at the call site.
[[noreturn]] void throw_error(const caf::error& err);

class Core : public std::enable_shared_from_this<Core> {
 public:
  explicit Core(RuntimeOptions options);
  ~Core();

  /// Starts the devices; separate from the constructor because runners
  /// need shared_from_this for nothing, but devices() does.
  void start();
  /// Completes outstanding work, fails what cannot complete, stops actors.
  void close();

  [[nodiscard]] TensorId new_id() noexcept { return TensorId{next_id_.fetch_add(1, std::memory_order_relaxed)}; }
  [[nodiscard]] const DeviceInfo& info(DeviceId id) const { return devices_.at(id); }
  [[nodiscard]] size_t device_count() const noexcept { return devices_.size(); }
  [[nodiscard]] const std::vector<std::string>& unavailable() const noexcept { return unavailable_; }
  [[nodiscard]] std::optional<DeviceId> find(std::string_view name) const;

  /// Queues an op for a device (sent with the next batch).
  void submit(DeviceId device, OperationIr op);
  void flush(DeviceId device);
  void flush_all();

  /// A new tensor `ir` on `device` produced by `op` (already holding ir).
  [[nodiscard]] Tensor emit(DeviceId device, const TensorIr& ir, OperationIr op);

  /// `keep` (the reading tensor's handle) stays alive until the reply, so
  /// the tensor's drop cannot overtake the read.
  [[nodiscard]] Future<TensorData> read(DeviceId device, TensorId id, std::shared_ptr<const void> keep = nullptr);
  [[nodiscard]] Future<void> sync(DeviceId device);
  [[nodiscard]] Future<DeviceStats> stats(DeviceId device);
  void bridge(DeviceId src, TensorId src_id, DeviceId dst, const TensorIr& dst_ir);

  [[nodiscard]] caf::actor_system& system() { return *system_; }
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

 private:
  struct Queue {
    std::mutex mutex;
    std::vector<OperationIr> ops;
  };

  void flush_locked(DeviceId device, Queue& q);
  void flusher_loop();
  template <class Reply, class Value, class Convert, class... Ts>
  Future<Value> ask(std::shared_ptr<const void> keep, Convert convert, Ts... xs);

  RuntimeOptions options_;
  caf::actor_system_config config_;
  std::unique_ptr<caf::actor_system> system_;
  router_actor router_;
  std::vector<DeviceInfo> devices_;
  std::vector<std::string> unavailable_;
  std::vector<caf::actor> runners_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::atomic<uint64_t> next_id_;
  std::atomic<bool> closed_{false};

  std::mutex flusher_mutex_;
  std::condition_variable flusher_wake_;
  bool flusher_stop_ = false;
  bool flusher_armed_ = false;
  std::thread flusher_;
};

}  // namespace switchyard::detail
