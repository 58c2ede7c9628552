// SPDX-License-Identifier: Apache-2.0
#pragma once

// The entry actor a switchyard-worker publishes (protocol in
// messages/protocol.hpp, "A worker's entry actor").

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/io/middleman_actor.hpp>

#include "worker/bulk_lane.hpp"

namespace switchyard::worker {

struct LocalDevice {
  std::string name;
  std::string kind;
  caf::actor runner;
};

/// Where the entry reports clients coming and going (the worker's log);
/// either may be empty.
struct EntryLog {
  /// A client said hello; a client closed its connection.
  std::function<void(const std::string&)> info;
  /// A client's connection was lost (it died, or its link broke).
  std::function<void(const std::string&)> warn;
  /// Set by the worker before it closes every connection to stop: the
  /// clients it then loses were not lost, the worker left them (info).
  std::shared_ptr<std::atomic<bool>> stopping;
};

/// The worker's bulk lane as the entry sees it: where clients connect and
/// the lane that admits them (null: no lane, port 0 in every hello).
struct EntryLane {
  std::weak_ptr<BulkLane> lane;  // the worker owns it, and stops it first
  uint16_t port = 0;
};

/// Spawns the entry actor serving `devices`. `connector` is the middleman
/// actor used to reach peer workers (the TLS one when TLS is on).
[[nodiscard]] caf::actor spawn_entry(caf::actor_system& sys, std::vector<LocalDevice> devices,
                                     caf::io::middleman_actor connector, EntryLog log = {}, EntryLane lane = {});

}  // namespace switchyard::worker
