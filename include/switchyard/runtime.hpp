// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// switchyard::Runtime, which owns the devices, and its RuntimeOptions.

#include <string>
#include <string_view>
#include <vector>

#include "switchyard/detail/std_light.hpp"
#include "switchyard/device.hpp"
#include "switchyard/log.hpp"
#include "switchyard/messages/std_memory.hpp"

namespace switchyard {

/// TLS for connections to workers (caf::openssl). With a CA file the peer
/// must present a certificate it signed; a worker that checks clients then
/// needs `cert` and `key` here too. PEM files.
struct TlsOptions {
  std::string cert{};
  std::string key{};
  std::string ca{};
  /// Whether any TLS file is set.
  [[nodiscard]] bool enabled() const noexcept { return !cert.empty() || !key.empty() || !ca.empty(); }
};
namespace backends {
struct BackendKind;
}

/// How a Runtime starts.
struct RuntimeOptions {
  /// Devices to start: "cpu:N", "reference:N", "cuda:N" or "cuda:*" (every
  /// GPU found; none is fine). Each gets its own runner actor.
  std::vector<std::string> devices = {"cpu:0", "cuda:*"};
  /// Kernel threads per CPU device; 0 splits the CPUs this process may use
  /// (its affinity mask, capped by the cgroup CPU quota) evenly among the
  /// CPU devices (so two devices never oversubscribe them). At most 1024.
  size_t cpu_threads = 0;
  /// Cap on the tensor bytes each CUDA device holds (0: none, the GPU's
  /// memory is the limit). An op that would exceed it fails with
  /// out_of_memory; the device keeps working.
  uint64_t cuda_memory_limit = 0;
  /// Cap on the tensor bytes each CPU device holds (0: none, the host's
  /// memory is the limit). An op whose output would pass it fails with
  /// out_of_memory naming the limit; the device keeps working. Buffers of
  /// 4 KiB and up count at their pooled size (the next power of two),
  /// smaller ones at their size rounded up to 64 bytes.
  uint64_t cpu_memory_limit = 0;
  /// Let f32 matmul (and linear, addmm) on CUDA devices use TF32 tensor
  /// cores: several times faster on Ampere and later, with products rounded
  /// to 10 mantissa bits (PyTorch's torch.backends.cuda.matmul.allow_tf32).
  /// Off by default, so f32 results stay f32-exact. The 16-bit dtypes'
  /// own matmul does not depend on it.
  bool cuda_allow_tf32 = false;
  /// Most bytes of freed tensor buffers each CPU device keeps for reuse
  /// (large tensors then skip page faults in loops); beyond it, freed
  /// memory goes back to the system at once. 0: no cache. The same bound
  /// again applies to weights kept packed between calls (a convolution's,
  /// a matrix product's right operand).
  uint64_t cpu_cache_limit = uint64_t{256} << 20;
  /// A device that took in no op for this long gives its cached memory
  /// back to the system (0: only Device::trim() does).
  std::chrono::milliseconds idle_trim_after{1000};
  /// Ops queued per device on the client before they are sent as one
  /// message; reads, syncs and bridges send earlier, and so does a heavy op
  /// (a matmul, convolution or attention of at least 2^20 multiply-adds)
  /// queued while its local device has run every batch sent to it: its
  /// batch goes when the next op that is not element-wise is queued (the
  /// element-wise ones between may fuse into it), so the device computes
  /// while the client builds the rest of its graph.
  size_t max_batch = 256;
  /// Longest time an op waits in the client queue.
  std::chrono::microseconds flush_interval{200};
  /// Mark an input whose drop follows its last use in the same batch as
  /// read_write, so the device may write the result into its buffer (off:
  /// for measuring the effect; results are the same either way).
  bool reuse_last_use = true;
  /// Run chains of element-wise ops (unary, binary with broadcasting,
  /// scalar ops, casts, comparisons, where, clamp) sent in one batch as one
  /// pass over memory on devices that can (cpu): relu(x * 2 + 1) reads x
  /// and writes the result once instead of three times. Results are bit for
  /// bit those of op-by-op execution; off: for measuring the effect.
  bool fuse_elementwise = true;
  /// Write a Chrome/Perfetto trace (JSON trace events: a track per device,
  /// a slice per op, bridges as flows) to this path while the runtime runs
  /// (at least every 100 ms), closed when it shuts down. Empty: the
  /// SWITCHYARD_TRACE environment variable, if set.
  std::string trace_path{};
  /// Workers to connect to at start, "host:port" each (see
  /// Runtime::connect); one that cannot be reached makes the constructor
  /// throw. The environment variable SWITCHYARD_WORKERS adds a
  /// comma-separated list; a bad or unreachable entry there does not throw
  /// but is listed by Runtime::unavailable().
  std::vector<std::string> workers{};
  /// When set, every worker connection uses TLS.
  TlsOptions tls{};
  /// Deadline of each read, sync or bridge on a remote device. A worker that
  /// dies or disconnects fails them at once; this bounds a hung one.
  std::chrono::milliseconds remote_timeout{std::chrono::minutes(2)};
  /// Deadline of Runtime::connect (and of each SWITCHYARD_WORKERS /
  /// `workers` entry at start): TCP connect, CAF's handshake and the hello
  /// together. A port that accepts but never answers fails with
  /// `worker_unreachable` naming the address, instead of hanging.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  /// Where the library's log messages go (see switchyard/log.hpp for the
  /// threads it is called on). Empty, the default: nothing is logged, and
  /// Switchyard writes nothing to stdout or stderr.
  LogSink log_sink{};
  /// Least severe level passed to `log_sink`: `info` (the default) reports
  /// devices started or unavailable (with the reason) and workers connected
  /// or reconnected; `warn` devices lost, failed bridges and
  /// SWITCHYARD_WORKERS entries left out; `debug` adds failed ops (where
  /// they fail, not each op the failure spreads to) and failed connects;
  /// `off` silences the sink.
  LogLevel log_level = LogLevel::info;
  /// Largest piece of a tensor sent over a worker connection in one
  /// message. Larger uploads to, reads from and bridges into or out of a
  /// remote device travel as consecutive parts of this size, and a batch of
  /// queued ops is sent before its uploads grow past it, so no message
  /// exceeds a worker's --max-message-bytes (keep this below it; the
  /// default 16 MiB is well under the default 256 MiB). 0: never split.
  size_t transfer_chunk_bytes = size_t{16} << 20;
  /// Tensors of at least this many bytes cross a worker connection on its
  /// bulk lane: a second TCP connection to the worker (port and a per-client
  /// token from the hello) on which uploads to, reads from and bridges
  /// from this process into a remote device travel as raw bytes, several
  /// times faster than in parts over BASP. Used where the worker offers one
  /// (not with TLS: the worker then offers none, and bytes stay on the
  /// encrypted connection) and it can be opened within connect_timeout
  /// (else the connection works without it, logged at `warn`). If the lane
  /// breaks, uploads not yet acknowledged are sent again over BASP and
  /// reads waiting on it fail with `device_lost`; later transfers use
  /// BASP. 0: never use a bulk lane.
  size_t bulk_lane_min_bytes = size_t{1} << 20;
  /// (optional) Called with the library's backend kinds before devices
  /// start; may append kinds (switchyard/backend.hpp: the public interface
  /// for custom backends, see the README's "Custom backends"), which
  /// `devices` can then name. Tests use it to wrap "cpu" in a
  /// fault-injecting backend; empty: the registry as built.
  std::function<void(std::vector<backends::BackendKind>&)> extend_backends{};
  /// Directories searched for backend modules (libswitchyard-backend-cuda.so)
  /// after those in the SWITCHYARD_BACKEND_PATH environment variable and
  /// before the directory of the Switchyard library, the dynamic loader's
  /// path and the install libdir. A module is loaded only when a device of
  /// its kind is asked for; a missing one is reported by unavailable().
  std::vector<std::string> backend_module_path{};
  /// How long destroying the runtime lets queued work run, for all devices
  /// together, before every op not yet run fails with runtime_closed (a
  /// kernel already running finishes first), and so do reads of what such
  /// ops would have produced.
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(10)};
};

/// Owns the actor system, the router and one runner per device. Thread
/// safe: any number of threads may submit work at once. Destroying it
/// completes or fails every outstanding future; tensors that outlive it
/// become inert (reads fail with runtime_closed).
class Runtime {
 public:
  /// RuntimeOptions{}: cpu:0 and every GPU found.
  Runtime();
  /// Starts the devices `options` names (throws Error when one cannot start).
  explicit Runtime(RuntimeOptions options);
  /// Lets queued work run for up to RuntimeOptions::shutdown_timeout, fails
  /// what is left with runtime_closed, then stops the devices.
  ~Runtime();
  /// Not copyable: a Runtime owns its devices.
  Runtime(const Runtime&) = delete;
  /// Not copyable.
  Runtime& operator=(const Runtime&) = delete;
  /// Moves the ownership; the moved-from Runtime may only be destroyed or
  /// assigned (its other calls throw invalid_argument).
  Runtime(Runtime&& other) noexcept = default;
  /// Shuts down this runtime's devices (as the destructor), then takes
  /// over `other`'s.
  Runtime& operator=(Runtime&& other) noexcept;

  /// device("cpu:<index>").
  [[nodiscard]] Device cpu(int index = 0) const;
  /// device("cuda:<index>").
  [[nodiscard]] Device cuda(int index = 0) const;
  /// device("reference:<index>").
  [[nodiscard]] Device reference(int index = 0) const;

  /// The device named `name`; throws Error(unknown_device) listing the
  /// devices that exist (never falls back to another device).
  [[nodiscard]] Device device(std::string_view name) const;
  /// Every live device (lost remote devices leave the list).
  [[nodiscard]] std::vector<Device> devices() const;
  /// Why requested devices are missing (for example "cuda: no CUDA driver"), one
  /// line per backend kind that registered none, and one per
  /// SWITCHYARD_WORKERS entry that could not be connected ("SWITCHYARD_WORKERS
  /// entry 'host:port': <why>").
  [[nodiscard]] std::vector<std::string> unavailable() const;

  /// Connects to a `switchyard-worker` listening on host:port and adds its
  /// devices as "host:port/<device>" (for example "127.0.0.1:4242/cpu:0"); returns
  /// them. Safe while other threads submit work. Throws Error when the
  /// worker cannot be reached (worker_unreachable), speaks another protocol
  /// version, or is already connected. When the worker goes away, its devices are removed
  /// and every pending future on them fails with "device <name> lost";
  /// connecting again (same or new port) adds fresh devices.
  std::vector<Device> connect(const std::string& host, uint16_t port);

  /// Waits for every device.
  [[nodiscard]] Future<void> sync_all() const;
  /// Counters of every device (blocks for the replies).
  [[nodiscard]] std::vector<DeviceStats> stats() const;

 private:
  detail::Core& core() const;
  std::shared_ptr<detail::Core> core_;
};

}  // namespace switchyard
