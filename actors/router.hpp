#pragma once

#include <caf/actor_system.hpp>

#include "switchyard/messages/protocol.hpp"

namespace switchyard::actors {

/// Spawns the router: the one address clients talk to. It forwards ops by
/// device, relays reads and syncs (so it can fail them when a device is
/// lost: CAF does not fail requests to a dead remote peer by itself), and
/// coordinates bridges as message exchanges between runners.
[[nodiscard]] router_actor spawn_router(caf::actor_system& sys);

}  // namespace switchyard::actors
