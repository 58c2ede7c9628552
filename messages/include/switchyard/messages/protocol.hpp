// SPDX-License-Identifier: Apache-2.0
#pragma once

// The actor protocol: atoms and the typed interfaces of runner and router.
// Every type named here is registered in `register_message_types`, except
// LocalReply, which must never be.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/expected.hpp>
#include <caf/node_id.hpp>
#include <caf/typed_actor.hpp>

#include "switchyard/messages/device_stats.hpp"
#include "switchyard/messages/operation_ir.hpp"

namespace switchyard {

/// Bumped whenever a message layout changes; checked when a client connects
/// to a remote worker.
inline constexpr uint32_t protocol_version = 11;  // 11: the bulk lane (hello names its port and token)

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using read_atom = caf::atom_constant<caf::atom("read")>;
using sync_atom = caf::atom_constant<caf::atom("sync")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using expect_atom = caf::atom_constant<caf::atom("expect")>;
using import_atom = caf::atom_constant<caf::atom("import")>;
using export_atom = caf::atom_constant<caf::atom("export")>;
using bridge_atom = caf::atom_constant<caf::atom("bridge")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using detach_atom = caf::atom_constant<caf::atom("detach")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using poll_atom = caf::atom_constant<caf::atom("poll")>;
using trim_atom = caf::atom_constant<caf::atom("trim")>;
using idle_atom = caf::atom_constant<caf::atom("idle")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using peer_atom = caf::atom_constant<caf::atom("peer")>;
using bye_atom = caf::atom_constant<caf::atom("bye")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using ingress_atom = caf::atom_constant<caf::atom("ingress")>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DeviceStats& x) {
  return f(caf::meta::type_name("device_stats"), x.device, x.ops_executed, x.ops_failed, x.queue_depth, x.live_handles,
           x.live_bytes, x.cached_bytes, x.bytes_bridged_in, x.bytes_bridged_out, x.bytes_staged, x.ops_fused);
}

/// One part of a tensor's bytes crossing a connection. A tensor larger than
/// the sender's transfer chunk travels as consecutive parts, each its own
/// message, so no message exceeds a worker's --max-message-bytes. `total`
/// is the tensor's whole size; the receiver keeps the parts until that many
/// bytes arrived and allocates nothing a peer only declared.
struct DataPart {
  TensorId id;
  Shape shape;
  DType dtype = DType::f32;
  uint64_t total = 0;
  uint64_t offset = 0;
  Bytes bytes;
  /// A bridge from another device (counted in bytes_bridged_in), not a
  /// client's upload.
  bool bridge = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, DataPart& x) {
  return f(caf::meta::type_name("data_part"), x.id, x.shape, x.dtype, x.total, x.offset, x.bytes, x.bridge);
}

/// A read answered on the bulk lane (worker/bulk_lane.hpp): the runner hands
/// the tensor's bytes to its worker's lane, which writes them to the
/// requesting client's lane connection under this number; the request's own
/// reply says only that they left, or why they could not.
struct BulkTicket {
  uint64_t number = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BulkTicket& x) {
  return f(caf::meta::type_name("bulk_ticket"), x.number);
}

/// A tensor that arrived on a worker's bulk lane, for one of its runners.
/// Not registered for serialization (like LocalReply): only the worker's
/// own lane can send one. `owner` is the node of the client that sent it,
/// so its data goes with the client if the client goes first.
struct BulkImport {
  TensorId id;
  TensorData data;
  caf::node_id owner;
  bool bridge = false;  // as DataPart::bridge
};

/// How a runner answers a client of its own process: it calls `deliver` on
/// its own thread, where a request would send a response message to a
/// requesting actor. A local read or sync then crosses two threads (client,
/// runner, client) instead of five (a spawned request actor and the router
/// on CAF's scheduler, both ways). Deliberately not registered for
/// serialization: a message holding one cannot be decoded from another
/// node, so only code in the runner's own process can send it.
template <class T>
struct LocalReply {
  std::function<void(caf::expected<T>)> deliver;
};

/// A batch from a client of the runner's own process. Not registered for
/// serialization either (like LocalReply), so no other node can send one:
/// the runner takes its ops as checked at the call, where the client
/// applied the same rules, and skips the second check (validate_local).
/// Batches from elsewhere come as a plain vector and are validated in full.
struct LocalBatch {
  std::vector<OperationIr> ops;
};

/// One device's executor: owns the device's tensor handles and runs the ops
/// it receives in order.
using runner_actor = caf::typed_actor<
    // Ops in submission order (fire and forget; failures poison outputs).
    caf::reacts_to<submit_atom, std::vector<OperationIr>>,
    // The same from a client in this process (trusted: see LocalBatch).
    caf::reacts_to<submit_atom, LocalBatch>,
    // A tensor's contents; waits while the tensor is pending.
    caf::replies_to<read_atom, TensorId>::with<TensorData>,
    // The same for a client in this process, answered through LocalReply,
    // with the ops it queued before the read (taken in first; may be empty).
    caf::reacts_to<read_atom, TensorId, std::vector<OperationIr>, LocalReply<TensorData>>,
    // Bytes [offset, offset + max) of a tensor, for reads too large for one
    // message; the runner keeps a snapshot from the part at offset 0 until
    // the last part is served or the tensor is dropped. The reply holds
    // exactly min(max, size - offset) bytes, so a client may ask for later
    // parts several at a time once the part at 0 has come.
    caf::replies_to<read_atom, TensorId, uint64_t, uint64_t>::with<DataPart>,
    // The same whole, its bytes on the worker's bulk lane under the ticket
    // (refused where the runner has no lane).
    caf::replies_to<read_atom, TensorId, BulkTicket>::with<done_atom>,
    // Completes once every op received before it has run.
    caf::replies_to<sync_atom>::with<done_atom>,
    caf::reacts_to<sync_atom, std::vector<OperationIr>, LocalReply<done_atom>>,
    caf::replies_to<stats_atom>::with<DeviceStats>,
    // Bridge, target side: `TensorIr` will arrive by import; ops on it wait.
    caf::reacts_to<expect_atom, TensorIr>, caf::reacts_to<import_atom, TensorId, TensorData>,
    caf::reacts_to<import_atom, TensorId, caf::error>,
    // One part of an import (a bridge from another node, or a client's
    // upload too large for one message, announced by an expect).
    caf::replies_to<import_atom, DataPart>::with<done_atom>,
    // A client's tensor from the worker's bulk lane (after or before its
    // expect, like any import).
    caf::reacts_to<import_atom, BulkImport>,
    // Bridge, source side: send tensor `TensorId` to the runner as import of
    // the second id; replies once sent, or with the failure (the requester
    // then fails the import, naming the source as its client knows it).
    caf::replies_to<export_atom, TensorId, caf::actor, TensorId>::with<done_atom>,
    // The same for a client in this process (it sends the runners of its
    // own process their batches itself, so it must order their exports
    // too: an export relayed by the router could arrive after the drop
    // that the client sent behind it).
    caf::reacts_to<export_atom, TensorId, caf::actor, TensorId, LocalReply<done_atom>>,
    // An async backend has completions ready (sent by its waker).
    caf::reacts_to<poll_atom>,
    // A mark in the mailbox from the worker's transport, which bounds what
    // one connection may have queued here (worker/guard.hpp): answered when
    // it is taken, i.e. once every message queued before it has been. Only
    // this process can send one (a LocalReply cannot be decoded).
    caf::reacts_to<ingress_atom, LocalReply<done_atom>>,
    // Gives the backend's cached memory back to the system, after the ops
    // received before it.
    caf::replies_to<trim_atom>::with<done_atom>,
    // Self-sent timer: trims the cache if no op came in for a while.
    caf::reacts_to<idle_atom>,
    // A client node went away: free every tensor it owns. Accepted only
    // from the runner's own node (a worker's entry actor sends it).
    caf::reacts_to<detach_atom, caf::node_id>>;

/// Forwards requests by device and coordinates bridges between runners.
using router_actor =
    caf::typed_actor<caf::reacts_to<submit_atom, DeviceId, std::vector<OperationIr>>,
                     caf::replies_to<read_atom, DeviceId, TensorId>::with<TensorData>,
                     caf::replies_to<read_atom, DeviceId, TensorId, uint64_t, uint64_t>::with<DataPart>,
                     caf::replies_to<read_atom, DeviceId, TensorId, BulkTicket>::with<done_atom>,
                     // A client's upload in parts: the expect, then its parts, in
                     // queue order with the device's submits.
                     caf::reacts_to<expect_atom, DeviceId, TensorIr>, caf::reacts_to<import_atom, DeviceId, DataPart>,
                     caf::replies_to<sync_atom, DeviceId>::with<done_atom>,
                     caf::replies_to<stats_atom, DeviceId>::with<DeviceStats>,
                     caf::replies_to<trim_atom, DeviceId>::with<done_atom>,
                     // Move tensor (src device, src id) to (dst device) as TensorIr.
                     caf::reacts_to<bridge_atom, DeviceId, TensorId, DeviceId, TensorIr>,
                     // Register a device's runner under an id and a name.
                     caf::replies_to<attach_atom, DeviceId, std::string, runner_actor>::with<done_atom>,
                     // Remove a device: its outstanding requests fail with device_lost.
                     caf::reacts_to<detach_atom, DeviceId>,
                     // Stop every runner of this node; answered once the down
                     // message of each has arrived (see Core::shut_down).
                     caf::replies_to<stop_atom>::with<done_atom>>;

/// A worker's entry actor (dynamically typed, so a client of another
/// protocol version still gets a readable answer instead of an interface
/// mismatch). It answers:
///   (hello_atom, uint32_t version, caf::actor client)
///     -> (uint32_t version, std::vector<std::string> device names,
///         std::vector<std::string> device kinds, std::vector<caf::actor> runners,
///         uint16_t bulk port, std::string bulk token)
///     or Errc::protocol_error on a version mismatch. The worker monitors
///     `client` and frees every tensor of its node when it goes away.
///     Bulk port 0: this worker has no bulk lane (TLS, or --no-bulk-lane);
///     otherwise the client may open one connection to it, presenting the
///     token (worker/bulk_lane.hpp).
///   (bye_atom, caf::actor client) -> done_atom: the client's Runtime is
///     shutting down; the worker frees its tensors now and logs a clean
///     disconnect (only from the client's own node).
///   (peer_atom, std::string host, uint16_t port) -> done_atom once this
///     worker holds a direct connection to the worker at host:port, so
///     bridges between the two never pass through the client.

/// Registers every message type and the error category with a config.
void register_message_types(caf::actor_system_config& cfg);

}  // namespace switchyard

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(switchyard::LocalReply<switchyard::TensorData>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(switchyard::LocalReply<switchyard::done_atom>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(switchyard::LocalBatch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(switchyard::BulkImport)
