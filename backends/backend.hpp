// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one interface every backend implements. A backend executes ops on one
// device; it knows nothing of actors, ids or other devices. The runner that
// owns it resolves ids to buffers and calls these entries from its own
// thread, one at a time.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "switchyard/messages/operation_ir.hpp"

namespace switchyard::backends {

/// A tensor's storage on a device; only its backend looks inside.
class Buffer {
 public:
  virtual ~Buffer() = default;
  /// Bytes of tensor data this buffer holds.
  [[nodiscard]] virtual size_t size() const noexcept = 0;
  /// The bytes of a host backend's buffer; nullptr for device memory. (A
  /// virtual call, not a dynamic_cast: kernels ask once per input per op.)
  [[nodiscard]] virtual const Bytes* host() const noexcept { return nullptr; }
};
using BufferPtr = std::shared_ptr<Buffer>;

/// Completion of a read: called exactly once, possibly on another thread.
using ReadCallback = std::function<void(caf::expected<TensorData>)>;

struct MemoryStats {
  uint64_t bytes_in_use = 0;
  uint64_t bytes_cached = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Kind of this backend, the part of a device name before the colon.
  [[nodiscard]] virtual std::string_view kind() const noexcept = 0;

  // Whether tensors of dtype `t` can live on this device.
  [[nodiscard]] virtual bool supports(DType t) const noexcept = 0;

  // (optional) Whether this op runs here; the default accepts every op whose
  // tensors have supported dtypes. The runner rejects others with a clear
  // error instead of calling execute.
  [[nodiscard]] virtual bool supports(OperationIr& op) const;

  // Makes a buffer from host data (host backends keep the shared bytes).
  [[nodiscard]] virtual caf::expected<BufferPtr> from_data(const TensorIr& t, TensorData data) = 0;

  // Host copy of a buffer (host backends share the bytes). `done` may run
  // before this returns or later from another thread.
  virtual void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) = 0;

  // Runs one op. `inputs` are in each_input order; inputs whose TensorIr is
  // read_write may be consumed (their buffer reused for an output).
  // `outputs` arrive empty, in each_output order, and are filled on success.
  [[nodiscard]] virtual caf::error execute(OperationIr& op, std::span<BufferPtr> inputs,
                                           std::span<BufferPtr> outputs) = 0;

  // (optional) Whether `op` may run inside a fused element-wise chain
  // (execute_fused). The runner asks before it plans a chain, so what a
  // backend cannot fuse (an op family, a broadcast it has no loop for, an op
  // whose failure depends on the data) simply ends the chain there. The
  // default: no op, so a backend without fusion runs every op alone.
  [[nodiscard]] virtual bool fusible(const OperationIr& /*op*/) const { return false; }

  // (optional) Runs `chain`, adjacent ops each accepted by fusible(), as one
  // pass, with exactly the bits running them one by one with execute()
  // gives. All ops have the same output shape; each op's output except the
  // last is read only by later ops of the chain (the last of those reads
  // marks it read_write), so only the last op's output is materialised, in
  // `output`. `tensors` are the chain's other inputs, each once, in order of
  // first mention (read_write if any mention is), and `inputs` their
  // buffers; read_write ones may be consumed as in execute(). An error fails
  // the chain's output.
  [[nodiscard]] virtual caf::error execute_fused(std::span<OperationIr> chain, std::span<const TensorIr> tensors,
                                                 std::span<BufferPtr> inputs, BufferPtr& output);

  // Restarts the random stream: the n-th random op after seed(s) gives the
  // same values on every backend for the same s.
  virtual void seed(uint64_t s) = 0;

  // (optional) Async backends: a thread-safe function that wakes the runner,
  // which then calls poll() on its own thread.
  virtual void set_waker(std::function<void()> /*wake*/) {}

  // (optional) Runs completions (read callbacks) that became ready since the
  // last call; called on the runner's thread after a wake.
  virtual void poll() {}

  // (optional) Waits for enqueued device work; host backends finish in execute.
  [[nodiscard]] virtual caf::error synchronize() { return {}; }

  // (optional) Memory held by live buffers and by caches.
  [[nodiscard]] virtual MemoryStats memory() const { return {}; }

  // (optional) Gives cached (free) memory back to the system.
  virtual void trim() {}
};

/// Options a device is created with.
struct DeviceOptions {
  /// Kernel threads for host backends (0: the runtime decides).
  size_t threads = 0;
  /// Upper bound on bytes the device may allocate (0: none).
  uint64_t memory_limit = 0;
  /// Most bytes of freed buffers kept for reuse (0: no cache).
  uint64_t cache_limit = uint64_t{256} << 20;
  /// cuda: f32 GEMMs may use TF32 tensor cores (RuntimeOptions::cuda_allow_tf32).
  bool allow_tf32 = false;
};

/// One compiled-in backend kind in the device registry.
struct BackendKind {
  std::string name;
  // Devices of this kind present on this machine (host kinds: unbounded).
  std::function<int()> device_count;
  // Human-readable reason when device_count() is 0 (e.g. "no CUDA driver").
  std::function<std::string()> unavailable_reason;
  std::function<std::unique_ptr<Backend>(int index, const DeviceOptions&)> create;
};

/// Every backend kind this build contains. One line per backend in
/// registry.cpp, guarded by its CMake option.
[[nodiscard]] std::vector<BackendKind> backend_kinds();

}  // namespace switchyard::backends
