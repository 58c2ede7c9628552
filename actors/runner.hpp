// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/trace.hpp"
#include "backends/backend.hpp"
#include "switchyard/messages/logger.hpp"
#include "switchyard/messages/protocol.hpp"

namespace switchyard::actors {

/// Hands a read's bytes to the worker's bulk lane for `client` under
/// `ticket`; false if that client has no lane connection (worker side).
using BulkSend = std::function<bool(const caf::node_id& client, uint64_t ticket, TensorData data)>;
/// Takes a bridge's bytes for runner `target` on another node onto the
/// client's bulk lane to that node; false: not taken (no lane, too small),
/// the bridge goes over BASP (client side).
using BulkExport = std::function<bool(const caf::actor_addr& target, TensorId dst, const TensorData& data)>;

/// Spawns the runner of one device. Runners are detached (one thread each):
/// a kernel may run for seconds, and on a shared scheduler that would stall
/// every other actor (router, other runners) queued behind it.
/// Optional links between a runner and an in-process client.
struct RunnerHooks {
  /// Every op becomes a slice on track `track` (null: tracing off).
  std::shared_ptr<Tracer> tracer;
  uint32_t track = 0;
  /// Incremented once per submitted batch the runner has taken in (run or
  /// deferred): lets a local client bound the batches in flight, so a
  /// client faster than its device cannot grow the mailbox without limit.
  std::shared_ptr<std::atomic<uint64_t>> batches_done;
  /// A runner that took in no op for this long trims its backend's cache
  /// (memory goes back to the system while a service idles); 0: never.
  std::chrono::milliseconds idle_trim_after{1000};
  /// A tensor bridged to a runner on another node travels in parts of at
  /// most this many bytes (0: whole), below every peer's message bound.
  size_t transfer_chunk_bytes = size_t{16} << 20;
  /// Deadline for each part's acknowledgement (the peer may die silently).
  std::chrono::milliseconds transfer_timeout{120000};
  /// Runs chains of element-wise ops within a batch as one pass when the
  /// backend can (actors/fusion.hpp); results are the same either way.
  bool fuse_elementwise = true;
  /// Where failed ops (debug) and failed bridges out of this device are
  /// logged, on the runner's thread; silent by default.
  Logger log;
  /// Set by the runtime's shutdown once it stops waiting for queued work:
  /// from then on every op not yet run fails with runtime_closed instead of
  /// running (a kernel already running finishes), so the runner reaches its
  /// stop message within the shutdown's bound. Null: never.
  std::shared_ptr<const std::atomic<bool>> abandon;
  /// The worker's bulk lane (empty: reads on a lane are refused).
  BulkSend bulk_send;
  /// The client's bulk lanes (empty: bridges to other nodes use BASP).
  BulkExport bulk_export;
  /// Called on the runner's thread when its backend's failure stops it,
  /// with the reason, before the requests it leaves unanswered are
  /// dropped: a local client's reply, failing then, finds the device
  /// already lost with that reason (the router's down message comes
  /// later, from another thread). Empty: nothing to tell.
  std::function<void(const std::string&)> on_stop;
  /// Bounds on what peers make this runner hold besides its device's
  /// buffers (the worker's; 0: none). Records: tensors in the table (an
  /// op's output, a view or a failed result costs ~0.5 KiB however small),
  /// imports that came before their expect, imports arriving in parts. At
  /// the limit an op's outputs or an import fail with out_of_memory; past
  /// it by a sixteenth (a peer that ignores those failures) ops and imports
  /// are refused without a record, so a read of what they would have made
  /// fails with unknown_tensor. As many reads, bridges and syncs may wait
  /// on tensors not ready yet; more fail with out_of_memory.
  uint64_t max_records = 0;
  /// Bytes of imports not yet joined into the device (parts received so
  /// far, imports that came before their expect): a part or import past it
  /// fails that tensor with out_of_memory.
  uint64_t max_staged_bytes = 0;
};

[[nodiscard]] runner_actor spawn_runner(caf::actor_system& sys, std::string device_name,
                                        std::shared_ptr<backends::Backend> backend, RunnerHooks hooks = {});

}  // namespace switchyard::actors
