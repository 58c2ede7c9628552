// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a switchyard-worker accepts on one BASP connection, decided before
// CAF allocates anything. CAF 0.17's BASP broker reads a 32-byte header and
// then asks its transport for exactly `payload_len` bytes, which the
// transport allocates and zero-fills at once; nothing in 0.17 bounds it.
// worker/guard.cpp puts this check into the transport (the scribe), so every
// header is judged here before the broker sees it.
//
// Pure logic, no CAF and no sockets: the framing fuzz target
// (tests/fuzz/framing_fuzzer.cpp) drives it with arbitrary bytes.

#include <cstddef>
#include <cstdint>
#include <string>

namespace switchyard::worker {

/// Bounds on what one peer may make the worker read and hold.
struct FramingLimits {
  /// Largest BASP payload accepted once the handshake is done. A tensor
  /// sent to the worker (from_data, a bridge into it) travels as one
  /// message, so this is also the largest tensor a client can upload.
  size_t max_message_bytes = size_t{256} << 20;
  /// Largest payload accepted before the handshake completes. A client
  /// handshake carries one node id (about 30 bytes); a server handshake our
  /// own peer connections receive carries the node id, application ids and
  /// the published actor's interface (a few hundred bytes).
  size_t max_handshake_bytes = 4096;
};

/// BASP message types (CAF 0.17 caf/io/basp/message_type.hpp).
enum class BaspOp : uint8_t {
  server_handshake = 0,
  client_handshake = 1,
  direct_message = 2,
  routed_message = 3,
  monitor_message = 4,
  down_message = 5,
  heartbeat = 6,
};

/// Size of a BASP header on the wire.
inline constexpr size_t basp_header_size = 32;

/// Follows one connection's BASP framing unit by unit (a header, then its
/// payload if any) and says whether to go on. Once it refuses, it refuses
/// everything after.
class BaspFraming {
 public:
  /// `accepted`: the peer connected to us, so its first message must be a
  /// client handshake; otherwise we connected and expect a server handshake.
  BaspFraming(FramingLimits limits, bool accepted) : limits_(limits), accepted_(accepted) {}

  /// The transport is asked to read exactly `n` bytes next. False when `n`
  /// is more than this connection may ask for now (nothing is allocated).
  [[nodiscard]] bool allow_read(size_t n);

  /// A complete unit of `n` bytes arrived (the size last allowed). False
  /// when it breaks the rules; `error()` then says why.
  [[nodiscard]] bool on_unit(const void* data, size_t n);

  [[nodiscard]] bool handshake_done() const { return handshake_done_; }
  [[nodiscard]] bool refused() const { return !error_.empty(); }
  /// Why the connection was refused ("" while it is not).
  [[nodiscard]] const std::string& error() const { return error_; }
  /// The most this connection may ask the transport to read right now.
  [[nodiscard]] size_t read_limit() const;
  /// The unit on_unit last accepted was the payload of a message to one
  /// actor of this node (a direct or routed message): that actor's id,
  /// else 0.
  [[nodiscard]] uint64_t delivered_to() const { return delivered_to_; }

 private:
  bool refuse(std::string why);

  FramingLimits limits_;
  bool accepted_;
  bool handshake_done_ = false;
  bool expect_payload_ = false;  // else: a header comes next
  BaspOp payload_op_ = BaspOp::heartbeat;
  uint32_t payload_len_ = 0;
  uint64_t payload_dest_ = 0;
  uint64_t delivered_to_ = 0;
  std::string error_;
};

}  // namespace switchyard::worker
