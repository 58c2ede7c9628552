// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <caf/actor_system.hpp>

#include "switchyard/messages/logger.hpp"
#include "switchyard/messages/protocol.hpp"

namespace switchyard::actors {

struct RouterOptions {
  /// Deadline of every request to a runner on another node (reads, syncs,
  /// exports). Losing the node fails them earlier, through its monitor.
  std::chrono::milliseconds remote_timeout{std::chrono::minutes(2)};
  /// Called (on the router's thread) once per lost device, with the message
  /// its failed requests carry ("device <name> lost: <why>").
  std::function<void(DeviceId, const std::string&)> on_lost;
  /// The runtime's log (failed bridges out of remote devices).
  Logger log;
};

/// Spawns the router: the one address clients talk to. It forwards ops by
/// device, relays reads and syncs (so it can fail them when a device is
/// lost: CAF does not fail requests to a dead remote peer by itself), and
/// coordinates bridges as message exchanges between runners.
[[nodiscard]] router_actor spawn_router(caf::actor_system& sys, RouterOptions options = {});

/// A failure the client has already named ("cpu:0: ..." for its local
/// cpu:0), marked for a worker's runner it is sent to: coming back, the
/// router reads it as is, not as the worker's own cpu:0 (which it renames
/// "host:port/cpu:0").
[[nodiscard]] caf::error client_named(const caf::error& err);

}  // namespace switchyard::actors
