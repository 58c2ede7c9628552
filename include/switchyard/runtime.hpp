#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "switchyard/device.hpp"

namespace switchyard {

namespace backends {
struct BackendKind;
}

/// How a Runtime starts.
struct RuntimeOptions {
  /// Devices to start: "cpu:N", "reference:N", "cuda:N" or "cuda:*" (every
  /// GPU found; none is fine). Each gets its own runner actor.
  std::vector<std::string> devices = {"cpu:0", "cuda:*"};
  /// Kernel threads per CPU device; 0 splits the machine's cores evenly
  /// among the CPU devices (so two devices never oversubscribe them).
  size_t cpu_threads = 0;
  /// Ops queued per device on the client before they are sent as one
  /// message; reads, syncs and bridges send earlier.
  size_t max_batch = 256;
  /// Longest time an op waits in the client queue.
  std::chrono::microseconds flush_interval{200};
  /// (optional) Called with the compiled-in backend kinds before devices
  /// start; may append kinds (declared in backends/backend.hpp), which
  /// `devices` can then name. Tests use it to wrap "cpu" in a
  /// fault-injecting backend; empty: the registry as built.
  std::function<void(std::vector<backends::BackendKind>&)> extend_backends;
};

/// Owns the actor system, the router and one runner per device. Thread
/// safe: any number of threads may submit work at once. Destroying it
/// completes or fails every outstanding future; tensors that outlive it
/// become inert (reads fail with runtime_closed).
class Runtime {
 public:
  Runtime();
  explicit Runtime(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// The device named `name`; throws Error(unknown_device) listing the
  /// devices that exist (never falls back to another device).
  [[nodiscard]] Device device(std::string_view name) const;
  [[nodiscard]] std::vector<Device> devices() const;
  /// Why requested devices are missing (e.g. "cuda: no CUDA driver"), one
  /// line per backend kind that registered none.
  [[nodiscard]] std::vector<std::string> unavailable() const;

  /// Waits for every device.
  [[nodiscard]] Future<void> sync_all() const;
  /// Counters of every device (blocks for the replies).
  [[nodiscard]] std::vector<DeviceStats> stats() const;

 private:
  std::shared_ptr<detail::Core> core_;
};

}  // namespace switchyard
