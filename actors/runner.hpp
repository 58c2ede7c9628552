#pragma once

#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/trace.hpp"
#include "backends/backend.hpp"
#include "switchyard/messages/protocol.hpp"

namespace switchyard::actors {

/// Spawns the runner of one device. Runners are detached (one thread each):
/// a kernel may run for seconds, and on a shared scheduler that would stall
/// every other actor (router, other runners) queued behind it.
/// With a `tracer`, every op becomes a slice on track `track`.
[[nodiscard]] runner_actor spawn_runner(caf::actor_system& sys, std::string device_name,
                                        std::shared_ptr<backends::Backend> backend,
                                        std::shared_ptr<Tracer> tracer = nullptr, uint32_t track = 0);

}  // namespace switchyard::actors
