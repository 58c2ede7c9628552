// SPDX-License-Identifier: Apache-2.0
#pragma once

// A worker's bulk lane: a second listening port on which admitted clients
// send and receive tensor bytes raw (wire format in
// switchyard/messages/bulk_frames.hpp), beside BASP, which still carries
// every op, expect and read request. A client is admitted by the token the
// entry actor gave it in its hello; anyone else costs one socket for at
// most the handshake timeout, and at most `max_unadmitted` of them at once.
//
// One thread (Boost.Asio) serves every connection. A connection's frames
// are read one after the other straight into a block of the tensor's size,
// allocated once the header is known to describe a tensor, and handed to
// the device's runner (BulkImport). Reads leave from the runner's own
// block (BulkSend), never copied in user space.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/node_id.hpp>

#include "switchyard/messages/tensor_data.hpp"

namespace switchyard::worker {

struct BulkLaneLimits {
  /// Time a new connection has to present a valid token.
  std::chrono::milliseconds handshake_timeout{5000};
  /// A frame that moves no byte for this long (either way) closes its
  /// connection, and with it the client's pending lane transfers. Reads
  /// queued toward a client hold no copies, only references to blocks of
  /// its tensors (what its tensors held anyway); a client that stops
  /// reading is cut after this long.
  std::chrono::milliseconds stall_timeout{30000};
  /// Connections that have not presented a token, at once.
  size_t max_unadmitted = 16;
};

struct BulkLaneCounters {
  uint64_t admitted = 0;
  uint64_t refused = 0;  // over max_unadmitted, bad hello, unknown or used token, no hello in time
  uint64_t closed_protocol = 0;
  uint64_t closed_stall = 0;
  uint64_t uploads = 0;
  uint64_t reads = 0;
};

struct LaneConnection;

class BulkLane {
 public:
  /// `log_warn` hears why a connection was closed (on the lane's thread).
  BulkLane(BulkLaneLimits limits, std::function<void(const std::string&)> log_warn);
  ~BulkLane();
  BulkLane(const BulkLane&) = delete;
  BulkLane& operator=(const BulkLane&) = delete;

  /// Where uploads for one device go: its runner, and the host memory its
  /// backend takes in without a copy (Backend::host_block, thread-safe).
  struct Device {
    caf::actor runner;
    std::function<Bytes(size_t)> host_block;
  };

  /// Listens on `address`:`port` (0: a free one) and starts the lane's
  /// thread; uploads for device i go to devices[i]. Returns the port, or
  /// throws std::runtime_error naming what failed.
  uint16_t listen(const std::string& address, uint16_t port, std::vector<Device> devices);

  /// A client said hello: the token it presents on the lane (one
  /// connection per token). Any thread.
  [[nodiscard]] std::string admit(const caf::node_id& client);
  /// The client went: its token stops working and its connection closes.
  void revoke(const caf::node_id& client);

  /// Queues `data` toward `client` as the bytes of read `ticket`; false if
  /// that client holds no admitted connection. Any thread.
  [[nodiscard]] bool send(const caf::node_id& client, uint64_t ticket, TensorData data);

  [[nodiscard]] BulkLaneCounters counters() const;

 private:
  friend struct LaneConnection;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace switchyard::worker
