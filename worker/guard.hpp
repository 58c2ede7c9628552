// SPDX-License-Identifier: Apache-2.0
#pragma once

// The worker's own transport for CAF's BASP connections: bounds what an
// unauthenticated or misbehaving peer can make the worker allocate, hold or
// buffer. docs/RELIABILITY.md ("Hostile peers: worker") explains the design.
//
// CAF 0.17 lets a middleman actor choose how it opens ports and connections
// (caf::io::middleman_actor_impl::open / connect, the hook caf::openssl
// uses). The guarded middleman actor returns its own doorman (accept loop
// with connection limits and EMFILE shedding) and its own scribes (a
// caf::io::scribe around CAF's stream, plain TCP or TLS) that check every
// BASP header with worker/framing.hpp before the broker sees it, bound the
// output queued toward the peer, and close connections whose handshake
// does not complete in time.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/io/middleman_actor.hpp>

#include "worker/framing.hpp"

namespace switchyard::worker {

struct GuardLimits {
  FramingLimits framing;
  /// Output queued toward one peer beyond which it is disconnected (a peer
  /// that stops reading). Checked whenever a message is queued; CAF's stream
  /// may hold one more batch in flight, so the most held is about twice this.
  size_t max_output_bytes = size_t{1} << 30;
  /// Connections held at once; 0: the open-file limit less a reserve.
  size_t max_connections = 0;
  /// Connections held at once from one peer address.
  size_t max_connections_per_address = 64;
  /// New connections per second from one peer address (token bucket with
  /// a burst of max(64, rate)); 0: no rate limit. A handshake flood from an
  /// address is then mostly refused at accept, before BASP sees it.
  double max_connect_rate_per_address = 20;
  /// Time from accept to a completed BASP handshake (TLS included).
  std::chrono::milliseconds handshake_timeout{5000};
  /// A payload over 1 MiB is read in pieces of at most 1 MiB, assembled by
  /// the transport, so what it holds follows the bytes the peer has sent;
  /// a connection whose payload in progress gets no byte for this long is
  /// closed.
  std::chrono::milliseconds payload_stall_timeout{30000};
  /// Bytes of messages (as received) one connection may have sent to the
  /// worker's runners that the runners have not taken from their mailboxes
  /// yet; past it the connection is not read until they have (0: no
  /// bound). A runner busy with a long op would otherwise queue whatever
  /// a peer sends meanwhile, ~0.6 KiB per op however cheap to send.
  size_t max_queued_bytes = size_t{4} << 20;
  /// The same for all connections together: past it, a connection that
  /// delivers one more message stops being read until the devices have
  /// taken its own (0: no bound). Without it the worst case was the
  /// connections held times max_queued_bytes.
  size_t max_queued_bytes_total = size_t{64} << 20;
};

/// What the guard did, for logs and tests (printed at exit).
struct GuardCounters {
  uint64_t accepted = 0;
  uint64_t refused_total_limit = 0;
  uint64_t refused_address_limit = 0;
  uint64_t refused_rate_limit = 0;
  uint64_t shed_no_fds = 0;
  uint64_t closed_framing = 0;
  uint64_t closed_output = 0;
  uint64_t closed_handshake_timeout = 0;
  uint64_t closed_payload_stall = 0;
  /// Times a connection stopped being read at max_queued_bytes.
  uint64_t paused_queued = 0;
  size_t open = 0;
  size_t peak_open = 0;
};

/// One guarded connection as the guard's registry sees it.
class GuardedConnection {
 public:
  virtual ~GuardedConnection() = default;
  /// Closes the connection from any thread: marks it refused and shuts the
  /// socket down, so CAF's event loop sees the end and cleans up on its own
  /// thread, as for a peer that hung up.
  virtual void expire() = 0;
  [[nodiscard]] virtual bool handshake_done() const = 0;
  [[nodiscard]] virtual std::chrono::steady_clock::time_point opened_at() const = 0;
  /// While a payload is being assembled: when its last piece arrived (or
  /// its header); otherwise nullopt.
  [[nodiscard]] virtual std::optional<std::chrono::steady_clock::time_point> payload_progress() const = 0;
  /// From any thread: bytes this connection queued for the runners that no
  /// barrier covers yet get one (see GuardLimits::max_queued_bytes_total),
  /// so a connection gone quiet does not keep them in the worker's total.
  virtual void cover_queued() = 0;
};

/// Shared state of all guarded connections of one worker: limits, counts
/// per address, the registry the handshake deadline sweeps, counters.
class ConnectionGuard {
 public:
  /// `warn`: where a refusal of a peer that completed its handshake is
  /// reported (the worker's log; nothing when empty).
  explicit ConnectionGuard(GuardLimits limits, std::function<void(const std::string&)> warn = {});
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  [[nodiscard]] const GuardLimits& limits() const { return limits_; }
  void warn(const std::string& line) const {
    if (warn_) warn_(line);
  }
  [[nodiscard]] GuardCounters counters() const;

  /// A connection handle never used before by this worker. CAF 0.17 names a
  /// connection by its socket descriptor and removes a closed connection's
  /// route only later, through its ordered message queue; the kernel hands
  /// the same descriptor to the next accepted socket at once, so a client
  /// connecting in that window inherited the dead peer's route and its
  /// replies went to that peer (lost hellos during handshake floods).
  [[nodiscard]] int64_t next_connection_id() { return next_connection_id_.fetch_add(1); }
  /// Whether a new connection from `peer` fits the limits (counts a refusal).
  bool admit(const std::string& peer);
  void opened(GuardedConnection* c, const std::string& peer, bool accepted);
  void closed(GuardedConnection* c, const std::string& peer, bool accepted);
  /// Closes every connection (shutdown): their nodes go down as if the
  /// peers had hung up.
  void expire_all();
  void count_framing_close();
  void count_output_close();
  void count_pause();
  /// Bytes queued for the runners by all connections, as counted by their
  /// scribes until a barrier passes (shared with the barriers, which may
  /// pass after their connection has gone).
  [[nodiscard]] const std::shared_ptr<std::atomic<size_t>>& queued_total() const { return queued_total_; }
  /// The actors whose mailboxes max_queued_bytes bounds (the worker's
  /// runners), held weakly: the guard outlives the actor system, and a
  /// strong reference would keep a stopped runner's thread waited for.
  /// Set once, before any connection is accepted.
  void set_runners(const std::vector<caf::actor>& runners);
  [[nodiscard]] bool is_runner(caf::actor_id id) const { return runners_.count(id) != 0; }
  /// The runner with this id while it lives, else null.
  [[nodiscard]] caf::actor runner(caf::actor_id id) const;
  /// EMFILE/ENFILE on accept: frees the reserve descriptor, accepts and
  /// closes one pending connection, takes the reserve back. Without it the
  /// listening socket stays readable and the event loop spins.
  void shed_one(int listen_fd);

 private:
  void sweep_loop();

  GuardLimits limits_;
  std::function<void(const std::string&)> warn_;
  mutable std::mutex mutex_;
  std::set<GuardedConnection*> live_;
  std::map<std::string, size_t> per_address_;
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point last;
  };
  std::map<std::string, Bucket> buckets_;
  GuardCounters counters_;
  std::map<caf::actor_id, caf::weak_actor_ptr> runners_;
  std::shared_ptr<std::atomic<size_t>> queued_total_ = std::make_shared<std::atomic<size_t>>(0);
  int reserve_fd_ = -1;
  // Above any descriptor number, so no id collides with a handle CAF derives
  // from a socket elsewhere in the process.
  std::atomic<int64_t> next_connection_id_{int64_t{1} << 32};
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread sweeper_;
};

/// Spawns a middleman actor (caf::io::middleman_actor interface) whose ports
/// and connections are guarded by `guard`; with `tls`, they use caf::openssl
/// sessions (the openssl manager must be loaded). Stop it with
/// `stop_guarded_middleman` before the actor system goes.
[[nodiscard]] caf::io::middleman_actor spawn_guarded_middleman(caf::actor_system& sys,
                                                               std::shared_ptr<ConnectionGuard> guard, bool tls);

}  // namespace switchyard::worker
