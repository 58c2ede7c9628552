// SPDX-License-Identifier: Apache-2.0
// The worker's BASP framing guard (worker/framing.hpp) and start-up checks
// (worker/listen_checks.hpp) as plain functions, plus the framing fuzz
// corpus replayed through the fuzz entry.

#include "worker/framing.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "framing_entry.hpp"
#include "worker/listen_checks.hpp"

using switchyard::worker::BaspFraming;
using switchyard::worker::FramingLimits;

namespace {

std::vector<uint8_t> header(uint8_t op, uint32_t len) {
  std::vector<uint8_t> h(32, 0);
  h[0] = op;
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<uint8_t>(len >> (24 - 8 * i));
  return h;
}

}  // namespace

TEST_CASE("framing: before the handshake only a small client handshake passes", "[framing]") {
  BaspFraming f(FramingLimits{}, true);
  REQUIRE(f.allow_read(32));
  auto huge = header(1, 0xFFFFFFFFu);
  CHECK_FALSE(f.on_unit(huge.data(), huge.size()));
  CHECK_THAT(f.error(), Catch::Contains("4294967295 bytes declared, limit 4096 before the handshake"));
  CHECK_FALSE(f.allow_read(32));  // refused stays refused

  BaspFraming direct(FramingLimits{}, true);
  REQUIRE(direct.allow_read(32));
  auto msg = header(2, 16);
  CHECK_FALSE(direct.on_unit(msg.data(), msg.size()));
  CHECK_THAT(direct.error(), Catch::Contains("before the handshake"));

  BaspFraming empty(FramingLimits{}, true);
  REQUIRE(empty.allow_read(32));
  auto e = header(1, 0);
  CHECK_FALSE(empty.on_unit(e.data(), e.size()));
}

TEST_CASE("framing: after the handshake messages up to the bound pass and larger ones do not", "[framing]") {
  FramingLimits limits;
  limits.max_message_bytes = 1000;
  BaspFraming f(limits, true);
  auto hs = header(1, 24);
  std::vector<uint8_t> node(24, 1);
  REQUIRE(f.allow_read(32));
  REQUIRE(f.on_unit(hs.data(), hs.size()));
  CHECK_FALSE(f.handshake_done());
  REQUIRE(f.read_limit() == 24);
  REQUIRE(f.allow_read(24));
  REQUIRE(f.on_unit(node.data(), node.size()));
  CHECK(f.handshake_done());
  auto ok = header(2, 1000);
  REQUIRE(f.allow_read(32));
  REQUIRE(f.on_unit(ok.data(), ok.size()));
  std::vector<uint8_t> body(1000);
  REQUIRE(f.allow_read(1000));
  REQUIRE(f.on_unit(body.data(), body.size()));
  auto hb = header(6, 0);
  REQUIRE(f.allow_read(32));
  REQUIRE(f.on_unit(hb.data(), hb.size()));
  auto big = header(2, 1001);
  REQUIRE(f.allow_read(32));
  CHECK_FALSE(f.on_unit(big.data(), big.size()));
  CHECK_THAT(f.error(), Catch::Contains("1001 bytes declared, limit 1000"));
}

// What the queued-bytes bound counts (worker/guard.cpp): the unit just
// accepted was a message's payload to one actor, named by the header's
// last eight bytes; every other unit names none.
TEST_CASE("framing: a message's payload names the actor it goes to, other units none", "[framing]") {
  BaspFraming f(FramingLimits{}, true);
  auto hs = header(1, 24);
  std::vector<uint8_t> node(24, 1);
  REQUIRE(f.allow_read(32));
  REQUIRE(f.on_unit(hs.data(), hs.size()));
  CHECK(f.delivered_to() == 0);
  REQUIRE(f.allow_read(24));
  REQUIRE(f.on_unit(node.data(), node.size()));
  CHECK(f.delivered_to() == 0);  // the handshake's payload
  for (uint8_t op : {uint8_t{2}, uint8_t{3}, uint8_t{4}}) {
    auto msg = header(op, 8);
    for (int i = 0; i < 8; ++i) msg[24 + i] = static_cast<uint8_t>(0x11 * (i + 1));  // 0x1122334455667788
    msg[16] = 0xFF;  // the source actor's id is not the destination
    REQUIRE(f.allow_read(32));
    REQUIRE(f.on_unit(msg.data(), msg.size()));
    CHECK(f.delivered_to() == 0);  // a header alone
    std::vector<uint8_t> body(8);
    REQUIRE(f.allow_read(8));
    REQUIRE(f.on_unit(body.data(), body.size()));
    INFO("BASP operation " << int{op});
    // Direct and routed messages go to an actor here; a monitor message
    // does not deliver anything to it.
    CHECK(f.delivered_to() == (op == 4 ? 0 : 0x1122334455667788ull));
  }
  auto hb = header(6, 0);
  REQUIRE(f.allow_read(32));
  REQUIRE(f.on_unit(hb.data(), hb.size()));
  CHECK(f.delivered_to() == 0);
}

TEST_CASE("framing: a read size nobody announced is refused", "[framing]") {
  BaspFraming f(FramingLimits{}, true);
  CHECK_FALSE(f.allow_read(1 << 30));
  CHECK(f.refused());
  BaspFraming g(FramingLimits{}, false);
  REQUIRE(g.allow_read(32));
  auto client = header(1, 24);  // we connected: the peer must send a server handshake
  CHECK_FALSE(g.on_unit(client.data(), client.size()));
}

TEST_CASE("listen checks: loopback means the resolved address and not its spelling", "[framing]") {
  using switchyard::worker::is_loopback_address;
  CHECK(is_loopback_address("127.0.0.1"));
  CHECK(is_loopback_address("127.255.0.9"));
  CHECK(is_loopback_address("::1"));
  CHECK(is_loopback_address("::ffff:127.0.0.1"));
  CHECK_FALSE(is_loopback_address("0.0.0.0"));
  CHECK_FALSE(is_loopback_address("::"));
  CHECK_FALSE(is_loopback_address("10.0.0.1"));
  CHECK_FALSE(is_loopback_address("127.0.0.1.evil.test"));  // a name, not an address
  CHECK_FALSE(is_loopback_address("::ffff:10.0.0.1"));
  auto r = switchyard::worker::resolve_listen_host("0");
  REQUIRE(r.error.empty());
  CHECK(r.addresses == std::vector<std::string>{"0.0.0.0"});
  CHECK_FALSE(switchyard::worker::resolve_listen_host("127.0.0.1.invalid").error.empty());
}

TEST_CASE("framing fuzz corpus replays without a finding", "[framing][fuzz]") {
  namespace fs = std::filesystem;
  size_t replayed = 0;
  for (const auto& seed : switchyard::fuzz::framing_seeds()) {
    switchyard::fuzz::check_framing(seed.bytes.data(), seed.bytes.size());
    ++replayed;
  }
  fs::path dir = fs::path(SWITCHYARD_FUZZ_CORPUS) / "framing";
  REQUIRE(fs::is_directory(dir));
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    switchyard::fuzz::check_framing(bytes.data(), bytes.size());
    ++replayed;
  }
  CHECK(replayed >= 16);
}
