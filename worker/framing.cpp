// SPDX-License-Identifier: Apache-2.0
#include "worker/framing.hpp"

namespace switchyard::worker {

size_t BaspFraming::read_limit() const {
  if (refused()) return 0;
  return expect_payload_ ? payload_len_ : basp_header_size;
}

bool BaspFraming::allow_read(size_t n) {
  if (refused()) return false;
  // BASP only ever asks for a header or for the payload it just announced;
  // any other size means the broker and this guard disagree, and the safe
  // side of that is to stop.
  if (n != read_limit())
    return refuse("read of " + std::to_string(n) + " bytes asked, " + std::to_string(read_limit()) + " expected");
  return true;
}

bool BaspFraming::on_unit(const void* data, size_t n) {
  if (refused()) return false;
  if (n != read_limit())
    return refuse("unit of " + std::to_string(n) + " bytes, " + std::to_string(read_limit()) + " expected");
  delivered_to_ = 0;
  if (expect_payload_) {
    expect_payload_ = false;
    if (payload_op_ == (accepted_ ? BaspOp::client_handshake : BaspOp::server_handshake)) handshake_done_ = true;
    if (payload_op_ == BaspOp::direct_message || payload_op_ == BaspOp::routed_message) delivered_to_ = payload_dest_;
    return true;
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  const auto op = bytes[0];
  // Network byte order, as CAF's binary serializer writes it.
  const uint32_t len = (uint32_t{bytes[4]} << 24) | (uint32_t{bytes[5]} << 16) | (uint32_t{bytes[6]} << 8) | bytes[7];
  if (op > static_cast<uint8_t>(BaspOp::heartbeat)) return refuse("unknown BASP operation " + std::to_string(op));
  const auto expected_first = accepted_ ? BaspOp::client_handshake : BaspOp::server_handshake;
  if (!handshake_done_ && op != static_cast<uint8_t>(expected_first))
    return refuse("BASP operation " + std::to_string(op) + " before the handshake");
  const size_t limit = handshake_done_ ? limits_.max_message_bytes : limits_.max_handshake_bytes;
  if (len > limit)
    return refuse("message of " + std::to_string(len) + " bytes declared, limit " + std::to_string(limit) +
                  (handshake_done_ ? "" : " before the handshake"));
  if (len == 0) {
    // A handshake always carries a node id; BASP rejects an empty one too.
    if (!handshake_done_) return refuse("empty handshake");
    return true;
  }
  expect_payload_ = true;
  payload_op_ = static_cast<BaspOp>(op);
  payload_len_ = len;
  // The header ends with the source and the destination actor's ids.
  payload_dest_ = 0;
  for (size_t i = 24; i < basp_header_size; ++i) payload_dest_ = payload_dest_ << 8 | bytes[i];
  return true;
}

bool BaspFraming::refuse(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  return false;
}

}  // namespace switchyard::worker
