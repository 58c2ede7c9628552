// SPDX-License-Identifier: Apache-2.0
// The worker's guarded middleman (worker/guard.hpp) in this process: what
// its ports and connections hold once they are closed.

#include "worker/guard.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

using namespace std::chrono_literals;

namespace {

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// A loopback port nobody listens on right now.
uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

// A port opened and closed in one turn of CAF's broker never reaches the
// event loop; CAF 0.17 alone then keeps its socket (and the servant) forever.
TEST_CASE("guard: a port closed in the turn that opened it frees its socket", "[framing][guard]") {
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  caf::actor_system sys{cfg};
  auto guard = std::make_shared<switchyard::worker::ConnectionGuard>(switchyard::worker::GuardLimits{});
  auto connector = switchyard::worker::spawn_guarded_middleman(sys, guard, false);
  caf::scoped_actor self{sys};
  // The actor system may still be opening or closing a descriptor of its
  // own just after it starts (a run saw 11 before and 10 after): counted
  // once the count holds still for a moment.
  size_t before = open_descriptors();
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(20ms);
    const size_t now = open_descriptors();
    if (now == before) break;
    before = now;
  }
  constexpr int rounds = 40;
  int published = 0;
  int closed = 0;
  for (int i = 0; i < rounds; ++i) {
    const uint16_t port = free_port();
    // Back to back, without waiting: the broker then reads both at once.
    auto publish = self->request(connector, 5s, caf::publish_atom::value, port, caf::strong_actor_ptr{},
                                 std::set<std::string>{}, std::string{"127.0.0.1"}, true);
    auto close = self->request(connector, 5s, caf::close_atom::value, port);
    publish.receive([&](uint16_t) { ++published; }, [](caf::error&) {});
    close.receive([&] { ++closed; }, [](caf::error&) {});
  }
  CHECK(published == rounds);
  CHECK(closed == rounds);
  // Sockets the loop did see close on its next turn: allow it a moment.
  size_t after = open_descriptors();
  for (int i = 0; i < 100 && after > before; ++i) {
    std::this_thread::sleep_for(20ms);
    after = open_descriptors();
  }
  // A socket left open by any round would show here (fewer is the system
  // settling further, not a leak).
  CHECK(after <= before);
  self->send_exit(connector, caf::exit_reason::kill);
}

namespace {
// A connection the guard only counts: its handshake is done, so the
// deadline sweep leaves it alone.
class CountedConnection : public switchyard::worker::GuardedConnection {
 public:
  void expire() override {}
  void cover_queued() override {}
  [[nodiscard]] bool handshake_done() const override { return true; }
  [[nodiscard]] std::chrono::steady_clock::time_point opened_at() const override { return at_; }
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> payload_progress() const override {
    return std::nullopt;
  }

 private:
  std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
};
}  // namespace

TEST_CASE("guard: a peer held at its connection cap is refused for the cap and keeps its rate tokens",
          "[framing][guard]") {
  switchyard::worker::GuardLimits limits;
  limits.max_connections = 16;
  limits.max_connections_per_address = 1;
  limits.max_connect_rate_per_address = 1;  // burst 64
  switchyard::worker::ConnectionGuard guard(limits);
  CountedConnection first;
  REQUIRE(guard.admit("10.0.0.1"));
  guard.opened(&first, "10.0.0.1", true);
  // Retries while its one connection lives: each is refused for the cap,
  // however many (more than the bucket's 64 tokens).
  constexpr int retries = 200;
  for (int i = 0; i < retries; ++i) CHECK_FALSE(guard.admit("10.0.0.1"));
  auto c = guard.counters();
  CHECK(c.refused_address_limit == retries);
  CHECK(c.refused_rate_limit == 0);
  // Once it closes, the peer connects again at once: the refusals took no tokens.
  guard.closed(&first, "10.0.0.1", true);
  CountedConnection second;
  REQUIRE(guard.admit("10.0.0.1"));
  guard.opened(&second, "10.0.0.1", true);
  guard.closed(&second, "10.0.0.1", true);
  // The total cap, too, is counted as itself and leaves other peers' buckets alone.
  std::vector<CountedConnection> many(16);
  for (size_t i = 0; i < many.size(); ++i) {
    const auto peer = "10.0.1." + std::to_string(i);
    REQUIRE(guard.admit(peer));
    guard.opened(&many[i], peer, true);
  }
  for (int i = 0; i < retries; ++i) CHECK_FALSE(guard.admit("10.0.2.1"));
  c = guard.counters();
  CHECK(c.refused_total_limit == retries);
  CHECK(c.refused_rate_limit == 0);
  guard.closed(&many[0], "10.0.1.0", true);
  CHECK(guard.admit("10.0.2.1"));
  for (size_t i = 1; i < many.size(); ++i) guard.closed(&many[i], "10.0.1." + std::to_string(i), true);
}
