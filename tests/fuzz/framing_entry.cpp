// SPDX-License-Identifier: Apache-2.0
#include "framing_entry.hpp"

#include <cstdio>
#include <cstdlib>

#include "worker/framing.hpp"

namespace switchyard::fuzz {
namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

std::vector<uint8_t> header(uint8_t op, uint32_t len, uint64_t src = 0, uint64_t dst = 0) {
  std::vector<uint8_t> h(32, 0);
  h[0] = op;
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<uint8_t>(len >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) {
    h[16 + i] = static_cast<uint8_t>(src >> (56 - 8 * i));
    h[24 + i] = static_cast<uint8_t>(dst >> (56 - 8 * i));
  }
  return h;
}

}  // namespace

int check_framing(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool accepted = (data[0] & 1) != 0;
  worker::FramingLimits limits;
  if (data[0] & 2) limits.max_message_bytes = 1024;
  if (data[0] & 4) limits.max_handshake_bytes = 16;
  worker::BaspFraming framing(limits, accepted);
  size_t pos = 1;
  bool was_refused = false;
  while (true) {
    const size_t want = framing.read_limit();
    // The bounds: nothing above the handshake bound before the handshake,
    // nothing above the message bound after, a header is 32 bytes.
    if (framing.handshake_done())
      require(want <= std::max(limits.max_message_bytes, worker::basp_header_size), "read above the message bound");
    else
      require(want <= std::max(limits.max_handshake_bytes, worker::basp_header_size),
              "read above the handshake bound before the handshake");
    if (!framing.allow_read(want)) {
      require(framing.refused(), "a refusal without a reason");
      was_refused = true;
      break;
    }
    if (size - pos < want) break;
    const bool ok = framing.on_unit(data + pos, want);
    pos += want;
    if (!ok) {
      require(framing.refused() && !framing.error().empty(), "a refusal without a reason");
      was_refused = true;
      break;
    }
  }
  if (was_refused) {
    // Refused stays refused.
    require(!framing.allow_read(worker::basp_header_size), "allowed again after a refusal");
    require(framing.read_limit() == 0, "a read limit after a refusal");
  }
  return 0;
}

std::vector<FramingSeed> framing_seeds() {
  std::vector<FramingSeed> out;
  auto cat = [](std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // The first byte picks side and limits (see check_framing).
  auto input = [&](uint8_t flags, const std::vector<uint8_t>& stream) {
    std::vector<uint8_t> out;
    out.reserve(stream.size() + 1);
    out.push_back(flags);
    return cat(std::move(out), stream);
  };
  std::vector<uint8_t> node(24, 7);
  auto handshake = cat(header(1, static_cast<uint32_t>(node.size())), node);
  out.push_back({"huge-handshake", input(1, header(1, 0xFFFFFFFFu))});
  out.push_back({"direct-before-handshake", input(1, header(2, 512u << 20, 1, 1))});
  out.push_back(
      {"handshake-then-message", cat(input(1, handshake), cat(header(2, 8, 1, 1), std::vector<uint8_t>(8, 1)))});
  out.push_back({"handshake-then-huge", cat(input(1, handshake), header(2, 0xFFFFFFF0u, 1, 1))});
  out.push_back({"handshake-then-heartbeats", cat(input(1, handshake), cat(header(6, 0), header(6, 0)))});
  out.push_back({"small-limits", cat(input(7, handshake), header(2, 2048, 1, 1))});
  out.push_back({"outgoing-server-handshake", cat(input(0, header(0, 24)), node)});
  out.push_back({"unknown-op", input(1, header(9, 0))});
  return out;
}

}  // namespace switchyard::fuzz
