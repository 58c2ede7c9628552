// SPDX-License-Identifier: Apache-2.0
#pragma once

// An event-driven HTTP/1.1 server core (Boost.Beast on Boost.Asio) for
// programs that face untrusted peers. It knows nothing about the model: the
// program gives it one handler and gets every well-formed request.
//
//   accept loop --(at most max_connections)--> session per connection
//   session: idle --first byte--> header --> body --> handler --> write --+
//              ^                                                          |
//              +---------------- keep-alive, next (pipelined) request ----+
//
// What an unauthenticated peer can cost is bounded here:
// - every phase has a deadline (idle keep-alive, header from its first byte,
//   body, writing the reply); a peer that misses one is disconnected;
// - headers are capped at max_header_bytes and bodies (chunked or not) at
//   max_body_bytes; a declared Content-Length over the limit gets 413 before
//   any of the body is read; all bodies in progress together stay under
//   max_body_memory (503 beyond it);
// - malformed framing (a bad, negative, overflowing or conflicting
//   Content-Length, a body without a length on POST) gets 400/411 at once;
// - at max_connections the server stops accepting, so new connections wait
//   in the kernel's listen backlog (of `backlog`), until one closes; nothing
//   spins when the process runs out of file descriptors;
// - one peer address holds at most max_connections_per_address of them: a
//   connection beyond it is closed at accept, so one address cannot keep
//   the whole cap full and everyone else in the backlog.
// Requests on one connection are handled one after another, so pipelined
// requests are all answered, in order. No thread ever blocks on a peer: a
// few threads run every connection, and a handler answers whenever it likes
// (from any thread) through its Responder.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace http {

/// One request, fully read. The target is the raw bytes the peer sent
/// (not decoded, not guaranteed to be UTF-8).
struct Request {
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  /// Value of the first header named `name` (case-insensitive), or "".
  [[nodiscard]] std::string_view header(std::string_view name) const;
  /// The target without its query string.
  [[nodiscard]] std::string_view path() const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

namespace detail {
struct ReplySlot;
struct ServerCore;
}  // namespace detail

/// The way back to a request's connection. Copies share one slot: the first
/// call sends the reply, later calls are ignored. Callable from any thread.
/// If every copy is dropped unanswered the peer gets 500 (a handler bug must
/// not leave the connection hanging).
class Responder {
 public:
  explicit Responder(std::shared_ptr<detail::ReplySlot> slot) : slot_(std::move(slot)) {}
  void operator()(Response r) const;
  /// True once some copy has answered.
  [[nodiscard]] bool answered() const;
  /// Runs `on_expiry` (on the connection's event-loop strand) if no reply has
  /// been sent within `limit`; it typically answers 504. Call it inside the
  /// handler, on the thread that runs it; once per request.
  void on_deadline(std::chrono::milliseconds limit, std::function<void()> on_expiry) const;

 private:
  std::shared_ptr<detail::ReplySlot> slot_;
};

/// Gets every well-formed request; must answer through the Responder exactly
/// once, from any thread, and must not block (it runs on an event-loop
/// thread). An exception thrown by it is answered with 500.
using Handler = std::function<void(Request, Responder)>;

/// How the layer words the errors it answers itself (400, 408, 411, 413,
/// 431, 500, 503): returns the response for `status` and a message that
/// names what was wrong.
using ErrorFormatter = std::function<Response(int status, const std::string& message)>;

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  ///< 0 picks a free port
  /// listen(2) backlog: connections the kernel queues before accept.
  int backlog = 1024;
  /// Event-loop threads.
  size_t threads = 2;
  /// Open connections at most; beyond it new ones wait in the backlog.
  size_t max_connections = 4096;
  /// Open connections from one peer address at most (0: no limit); beyond
  /// it a new one is closed at once. Behind a proxy every peer is the proxy:
  /// raise it or pass 0 there.
  size_t max_connections_per_address = 1024;
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 1 << 20;
  /// Request bodies being received or handled, all connections together;
  /// a request whose body does not fit gets 503.
  size_t max_body_memory = 256 << 20;
  /// A kept-alive connection may stay silent this long between requests.
  std::chrono::milliseconds idle_timeout{15000};
  /// From a request's first byte to the end of its header.
  std::chrono::milliseconds header_timeout{10000};
  /// From the end of the header to the end of the body.
  std::chrono::milliseconds body_timeout{20000};
  /// Writing one reply (a peer that does not read is dropped).
  std::chrono::milliseconds write_timeout{10000};
};

/// Counters for /metrics and the tests; all monotonic except `open`.
struct Stats {
  int64_t open = 0;
  uint64_t accepted = 0;
  uint64_t requests = 0;
  uint64_t idle_timeouts = 0;
  uint64_t header_timeouts = 0;
  uint64_t body_timeouts = 0;
  uint64_t write_timeouts = 0;
  uint64_t bad_requests = 0;          ///< malformed framing: 400 / 411 / 431
  uint64_t too_large = 0;             ///< 413
  uint64_t body_memory_refusals = 0;  ///< 503: max_body_memory reached
  uint64_t accept_pauses = 0;         ///< times max_connections stopped the accept loop
  uint64_t accept_errors = 0;         ///< failed accepts (e.g. out of file descriptors)
  uint64_t address_refusals = 0;      ///< closed at accept: max_connections_per_address reached
};

class Server {
 public:
  /// Binds and listens at once (throws std::runtime_error naming the
  /// address on failure); serving starts with run().
  Server(Options opts, Handler handler, ErrorFormatter errors);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The bound port (the chosen one when Options::port was 0).
  [[nodiscard]] uint16_t port() const;
  /// Serves on Options::threads threads until stop() and every connection
  /// that had a request in progress has been answered and closed.
  void run();
  /// Thread-safe, idempotent: stops accepting, closes connections that
  /// are between requests, lets requests in progress finish (each such
  /// connection closes after its reply).
  void stop();
  [[nodiscard]] Stats stats() const;

 private:
  std::unique_ptr<detail::ServerCore> impl_;
};

}  // namespace http
