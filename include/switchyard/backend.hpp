// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// The extension point for backends. A device kind ("cpu", "cuda", yours) is
/// a BackendKind: how many devices there are, why there are none, and how to
/// make one. Each device is a Backend, which executes ops on buffers it owns.
/// Add a kind through RuntimeOptions::extend_backends (README, "Custom
/// backends"); the CUDA backend is the same interface in a module the runtime
/// loads at run time (switchyard_backend_module_v1 below).
///
/// Not included by switchyard.hpp: only backend writers need it, and it
/// brings the op set (switchyard/messages/ops.hpp). Like every public header
/// it includes no CAF header; errors are DeviceError values, never
/// exceptions across the runner.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "switchyard/detail/std_light.hpp"
#include "switchyard/error.hpp"
#include "switchyard/messages/ops.hpp"
#include "switchyard/messages/std_memory.hpp"

namespace switchyard::backends {

/// An error a backend reports, or none. Default-constructed it means
/// success and converts to false (as a null PJRT_Error* or an empty
/// std::error_code), so `if (auto err = f()) return err;` passes errors up.
/// The runner fails the op's outputs with it; the client then sees an Error
/// with the same code and message.
class DeviceError {
 public:
  /// No error.
  DeviceError() = default;
  /// An error of kind `code` (Errc{} counts as kernel_failure); `message`
  /// names the op and what went wrong.
  DeviceError(Errc code, std::string message)
      : code_(code == Errc{} ? Errc::kernel_failure : code), message_(std::move(message)) {}
  /// Whether this holds an error.
  explicit operator bool() const noexcept { return code_ != Errc{}; }
  /// The kind of error (Errc{} when there is none).
  [[nodiscard]] Errc code() const noexcept { return code_; }
  /// What went wrong (empty when there is no error).
  [[nodiscard]] const std::string& message() const noexcept { return message_; }

 private:
  Errc code_{};
  std::string message_;
};

/// A value or the DeviceError that prevented it (std::expected, C++23, in
/// the few words a backend needs).
template <class T>
class Expected {
 public:
  /// A value (anything T converts from, e.g. a shared_ptr to a Buffer subclass).
  template <class U = T>
  requires(std::is_convertible_v<U&&, T> && !std::is_same_v<std::decay_t<U>, DeviceError> &&
           !std::is_same_v<std::decay_t<U>, Expected>)
      Expected(U&& value)  // NOLINT(google-explicit-constructor,bugprone-forwarding-reference-overload): returned
                           // from functions as is; the constraint excludes Expected itself
      : state_(std::in_place_index<0>, std::forward<U>(value)) {}
  /// An error; one that holds none counts as a kernel_failure, so an
  /// Expected without a value always says why.
  Expected(DeviceError error)  // NOLINT(google-explicit-constructor)
      : state_(std::in_place_index<1>,
               error ? std::move(error) : DeviceError(Errc::kernel_failure, "no value and no error")) {}

  /// Whether this holds a value.
  explicit operator bool() const noexcept { return state_.index() == 0; }
  /// The value (only when there is one).
  [[nodiscard]] T& operator*() & { return std::get<0>(state_); }
  /// The value (only when there is one).
  [[nodiscard]] const T& operator*() const& { return std::get<0>(state_); }
  /// The value, moved out (only when there is one).
  [[nodiscard]] T&& operator*() && { return std::get<0>(std::move(state_)); }
  /// Member access to the value (only when there is one).
  T* operator->() { return &std::get<0>(state_); }
  /// Member access to the value (only when there is one).
  const T* operator->() const { return &std::get<0>(state_); }
  /// The error (only when there is no value).
  [[nodiscard]] DeviceError& error() { return std::get<1>(state_); }
  /// The error (only when there is no value).
  [[nodiscard]] const DeviceError& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, DeviceError> state_;
};

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
/// Buffers are shared: the runner's table and ops in flight hold them.
using BufferPtr = std::shared_ptr<Buffer>;

/// Completion of a read: called exactly once, possibly on another thread.
using ReadCallback = std::function<void(Expected<TensorData>)>;

/// Memory a device holds (Backend::memory).
struct MemoryStats {
  /// Bytes held by live buffers.
  uint64_t bytes_in_use = 0;
  /// Bytes of freed buffers kept for reuse, and other caches trim() gives
  /// back (the cpu backend's weights kept packed between calls).
  uint64_t bytes_cached = 0;
};

/// One device's executor. It knows nothing of actors, ids or other devices:
/// the runner that owns it resolves ids to buffers and calls these entries
/// from its own thread, one at a time. An entry that throws fails what it
/// was doing (std::bad_alloc as out_of_memory), but errors are meant to be
/// returned as DeviceError. Entries marked (optional) have a default.
class Backend {
 public:
  virtual ~Backend() = default;

  /// Kind of this backend, the part of a device name before the colon.
  [[nodiscard]] virtual std::string_view kind() const noexcept = 0;

  /// Whether tensors of dtype `t` can live on this device.
  [[nodiscard]] virtual bool supports(DType t) const noexcept = 0;

  /// (optional) Whether this op runs here; the default accepts every op
  /// whose tensors have supported dtypes. The runner rejects others with
  /// an unsupported error instead of calling execute.
  [[nodiscard]] virtual bool supports(OperationIr& op) const;

  /// Makes a buffer from host data (host backends keep the shared bytes).
  [[nodiscard]] virtual Expected<BufferPtr> from_data(const TensorIr& t, TensorData data) = 0;

  /// (optional) Host memory for `size` bytes that from_data() takes in
  /// without a copy, for bytes that arrive from elsewhere (the parts of a
  /// tensor from another node are joined into it): the cpu backend gives a
  /// block of its pool, which comes back to the pool for the next transfer
  /// when the tensor goes, instead of fresh pages the kernel must fault in
  /// and zero. The default: a fresh block. Called from any thread (a
  /// worker's bulk lane reads uploads into it on its own), so an override
  /// must be thread-safe.
  [[nodiscard]] virtual Bytes host_block(size_t size) { return Bytes::allocate(size); }

  /// Host copy of a buffer (host backends share the bytes). `done` may run
  /// before this returns or later from another thread.
  virtual void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) = 0;

  /// Runs one op. `inputs` are in each_input order; inputs whose TensorIr
  /// is read_write may be consumed (their buffer reused for an output).
  /// `outputs` arrive empty, in each_output order, and are filled on
  /// success. Ops arrive validated: shapes and dtypes follow the rules.
  [[nodiscard]] virtual DeviceError execute(OperationIr& op, std::span<BufferPtr> inputs,
                                            std::span<BufferPtr> outputs) = 0;

  /// (optional) Whether `op` may run inside a fused element-wise chain
  /// (execute_fused). The runner asks before it plans a chain, so what a
  /// backend cannot fuse (an op family, a broadcast it has no loop for, an
  /// op whose failure depends on the data) simply ends the chain there. The
  /// default: no op, so a backend without fusion runs every op alone.
  [[nodiscard]] virtual bool fusible(const OperationIr& /*op*/) const { return false; }

  /// (optional) Whether `op` may start a fused chain whose other ops
  /// fusible() accepts, though it may not appear later in one: an op that
  /// can apply element-wise ops to its result as it writes it (the CPU's
  /// convolutions: a residual add and relu in the GEMM's store). Default: none.
  [[nodiscard]] virtual bool fusible_head(const OperationIr& /*op*/) const { return false; }

  /// (optional) Runs `chain`, adjacent ops each accepted by fusible() (the
  /// first one possibly by fusible_head() instead), as one pass, with
  /// exactly the bits running them one by one with execute() gives. All ops
  /// have the same output shape; each op's output except the
  /// last is read only by later ops of the chain (the last of those reads
  /// marks it read_write), so only the last op's output is materialised, in
  /// `output`. `tensors` are the chain's other inputs, each once, in order
  /// of first mention (read_write if any mention is), and `inputs` their
  /// buffers; read_write ones may be consumed as in execute(). An error
  /// fails the chain's output.
  [[nodiscard]] virtual DeviceError execute_fused(std::span<OperationIr> chain, std::span<const TensorIr> tensors,
                                                  std::span<BufferPtr> inputs, BufferPtr& output);

  /// Restarts the random stream: the n-th random op after seed(s) gives the
  /// same values on every backend for the same s.
  virtual void seed(uint64_t s) = 0;

  /// (optional) Async backends: a thread-safe function that wakes the
  /// runner, which then calls poll() on its own thread.
  virtual void set_waker(std::function<void()> /*wake*/) {}  // NOLINT(performance-unnecessary-value-param): a sink

  /// (optional) Runs completions (read callbacks) that became ready since
  /// the last call; called on the runner's thread after a wake.
  virtual void poll() {}

  /// (optional) Waits for enqueued device work; host backends finish in
  /// execute.
  [[nodiscard]] virtual DeviceError synchronize() { return {}; }

  /// (optional) Memory held by live buffers and by caches.
  [[nodiscard]] virtual MemoryStats memory() const { return {}; }

  /// (optional) Gives cached (free) memory back to the system.
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

/// A backend kind in the device registry: what RuntimeOptions::devices
/// names before the colon.
struct BackendKind {
  /// The kind's name ("cpu", "cuda", ...): lower-case letters, digits, '_'.
  std::string name;
  /// Devices of this kind present on this machine (host kinds: unbounded).
  std::function<int()> device_count;
  /// Human-readable reason when device_count() is 0 (e.g. "no CUDA driver").
  std::function<std::string()> unavailable_reason;
  /// Makes device `index` (0 <= index < device_count()); may throw Error.
  std::function<std::unique_ptr<Backend>(int index, const DeviceOptions&)> create;
};

/// Version of this interface as a backend module sees it. Bumped with every
/// change to this header or to the op set's layout; a module built for
/// another version is refused (and reported by Runtime::unavailable()).
inline constexpr uint32_t module_abi_version = 3;  // 3: Backend::host_block

}  // namespace switchyard::backends

extern "C" {

/// What a backend module (libswitchyard-backend-\<kind\>.so) describes itself
/// with. The runtime loads the module when a device of its kind is
/// requested and uses it only when every field matches its own build: the
/// interface above is C++, so a module must come from the same Switchyard
/// version, built with the same compiler ABI.
struct SwitchyardBackendModule {
  /// switchyard::backends::module_abi_version the module was built with.
  uint32_t abi_version;
  /// Ops in OperationIr::Variant (catches an op set that grew without a bump).
  uint32_t op_count;
  /// sizeof(OperationIr), sizeof(TensorData), sizeof(DeviceOptions): a
  /// cheap check that both sides see the same layouts.
  uint32_t layout[3];
  /// The Switchyard version the module was built from ("0.1.0").
  const char* switchyard_version;
  /// The kind it provides; must equal the kind its file is named after.
  const char* kind;
  /// The registry entry; called once per Runtime that asks for the kind.
  switchyard::backends::BackendKind (*backend_kind)();
};

/// The one symbol the runtime looks up in a backend module.
using SwitchyardBackendModuleEntry = const SwitchyardBackendModule* (*)();

}  // extern "C"
