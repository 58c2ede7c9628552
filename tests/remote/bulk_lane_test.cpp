// SPDX-License-Identifier: Apache-2.0
// The bulk lane (worker/bulk_lane.hpp, src/bulk_lane_client.hpp): what
// crosses it arrives whole and equal, and a peer breaking its rules costs
// the worker a closed socket, never a crash, a hang or memory it only
// declared. The first half drives a worker process through the public API;
// the second talks raw bytes to an in-process lane.

#include "worker/bulk_lane.hpp"

#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <caf/all.hpp>

#include "switchyard/messages/bulk_frames.hpp"
#include "switchyard/messages/protocol.hpp"
#include "switchyard/switchyard.hpp"
#include "worker_process.hpp"

namespace sy = switchyard;
using sy::testing::ChildProcess;
using sy::testing::WorkerProcess;
using namespace std::chrono_literals;

namespace {

// The hostile tests' client (hostile_test.cpp), here with the bulk lane on
// by default.
sy::RuntimeOptions lane_client() { return sy::testing::remote_client_options(); }

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1000.0f, 1000.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("tensors of a MiB and more cross the bulk lane whole and equal", "[remote][bulk]") {
  // BASP messages above 1 MiB close the connection here: a 4 MiB upload or
  // bridge that arrives intact took the lane.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-message-bytes=1048576"});
  std::vector<std::string> warnings;
  auto options = lane_client();
  options.log_level = sy::LogLevel::warn;
  options.log_sink = [&](sy::LogLevel, std::string_view m) { warnings.emplace_back(m); };
  sy::Runtime rt(options);
  rt.connect(w.host(), w.port());
  CHECK(warnings.empty());
  auto remote = rt.device(w.address() + "/cpu:0");
  auto local = rt.device("cpu:0");
  const size_t n = size_t{1} << 20;  // 4 MiB of f32
  const auto values = random_floats(n, 7);

  SECTION("an upload of host data, read back") {
    auto there = remote.tensor<float>(values, {static_cast<int64_t>(n)});
    CHECK(there.to_vector<float>() == values);
    // Ops queued right behind the upload wait for its bytes.
    auto doubled = (there * 2.0).to_vector<float>();
    REQUIRE(doubled.size() == n);
    for (size_t i = 0; i < n; i += 4099) CHECK(doubled[i] == values[i] * 2.0f);
  }
  SECTION("a bridge from a local device and back") {
    auto here = local.tensor<float>(values, {static_cast<int64_t>(n)});
    auto there = here.to(remote);
    auto back = there.to(local);
    CHECK(back.to_vector<float>() == values);
    CHECK(remote.stats().get().bytes_bridged_in >= n * sizeof(float));
  }
  SECTION("other dtypes, shapes and bools keep their meaning") {
    std::vector<uint8_t> raw(3 << 20);
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i * 7 % 5);  // 0..4
    sy::TensorData bools({3, 1 << 20}, sy::DType::boolean, sy::Bytes::copy_of(raw.data(), raw.size()));
    auto t = remote.from_data(bools);
    auto back = t.read().get();
    REQUIRE(back.shape == sy::Shape{3, 1 << 20});
    const auto* b = reinterpret_cast<const uint8_t*>(back.bytes.data());
    bool canonical = true;
    for (size_t i = 0; i < raw.size(); ++i) canonical = canonical && b[i] == (raw[i] != 0 ? 1 : 0);
    CHECK(canonical);
    std::vector<int64_t> longs(300000);
    for (size_t i = 0; i < longs.size(); ++i) longs[i] = static_cast<int64_t>(i) * -977;
    CHECK(remote.tensor<int64_t>(longs, {300, 1000}).to_vector<int64_t>() == longs);
  }
  SECTION("many transfers from several threads at once") {
    std::vector<std::thread> threads;
    std::atomic<int> equal{0};
    for (int k = 0; k < 4; ++k)
      threads.emplace_back([&, k] {
        auto mine = random_floats(n / 2 + static_cast<size_t>(k), static_cast<uint32_t>(k));
        for (int r = 0; r < 3; ++r) {
          auto there = remote.tensor<float>(mine, {static_cast<int64_t>(mine.size())});
          if (there.to_vector<float>() == mine) ++equal;
        }
      });
    for (auto& t : threads) t.join();
    CHECK(equal == 12);
  }
}

TEST_CASE("a sync of a remote device waits for uploads and bridges still on the bulk lane", "[remote][bulk]") {
  // The bytes take the lane, the sync BASP: it overtook them and answered
  // while 64 MiB were still on the way.
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(lane_client());
  rt.connect(w.host(), w.port());
  auto remote = rt.device(w.address() + "/cpu:0");
  auto local = rt.device("cpu:0");
  const int64_t n = int64_t{16} << 20;  // 64 MiB of f32
  auto uploaded = remote.tensor<float>(std::vector<float>(static_cast<size_t>(n), 1.5f), {n});
  auto here = local.full({n}, 2.0);
  auto bridged = here.to(remote);
  auto sync = remote.sync();
  REQUIRE(sync.wait_for(120s));
  sync.get();
  auto stats = remote.stats();
  REQUIRE(stats.wait_for(60s));
  CHECK(stats.get().live_bytes >= uint64_t(2 * n * 4));
  CHECK(bridged.slice(0, {n - 1, n}).to_vector<float>() == std::vector<float>{2.0f});
  CHECK(uploaded.slice(0, {n - 1, n}).to_vector<float>() == std::vector<float>{1.5f});
}

TEST_CASE("a worker without a bulk lane serves the same over BASP", "[remote][bulk]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--no-bulk-lane"});
  sy::Runtime rt(lane_client());
  rt.connect(w.host(), w.port());
  auto remote = rt.device(w.address() + "/cpu:0");
  const auto values = random_floats(size_t{1} << 20, 3);
  auto there = rt.device("cpu:0").tensor<float>(values, {1 << 20}).to(remote);
  CHECK(there.to_vector<float>() == values);
  CHECK(remote.tensor<float>(values, {1 << 20}).to_vector<float>() == values);
}

TEST_CASE("a client killed during a lane upload leaves nothing behind on the worker", "[remote][bulk][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime observer(lane_client());
  observer.connect(w.host(), w.port());
  auto dev = observer.device(w.address() + "/cpu:0");
  const auto baseline = dev.stats().get().live_handles;
  {
    ChildProcess client({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "4", "upload-lane"});
    REQUIRE(client.read_line(20s) == "ready");
    REQUIRE(client.read_line(20s) == "uploading");
    client.stop(SIGKILL);
  }
  bool freed = false;
  for (auto deadline = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < deadline && !freed;) {
    std::this_thread::sleep_for(100ms);
    freed = dev.stats().get().live_handles == baseline && dev.stats().get().bytes_staged == 0;
  }
  CHECK(freed);
  CHECK((dev.ones({4}) * 2.0).to_vector<float>() == std::vector<float>{2, 2, 2, 2});
}

TEST_CASE("a client that stops reading its lane is cut after the stall timeout", "[remote][bulk][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--bulk-stall-timeout-ms=1000"});
  ChildProcess stalled({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "4", "stall-lane"});
  REQUIRE(stalled.read_line(20s) == "ready");
  std::this_thread::sleep_for(2500ms);  // the stall timeout passes
  // Others are served meanwhile and after, over the lane too.
  sy::Runtime rt(lane_client());
  rt.connect(w.host(), w.port());
  auto remote = rt.device(w.address() + "/cpu:0");
  const auto values = random_floats(size_t{1} << 20, 11);
  CHECK(remote.tensor<float>(values, {1 << 20}).to_vector<float>() == values);
  stalled.stop(SIGKILL);
}

// ---- raw peers against an in-process lane ---------------------------------------------------

namespace {

// Collects what the lane hands its "runner".
struct Received {
  std::mutex mutex;
  std::vector<sy::BulkImport> imports;
};

struct LaneFixture {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<Received> received = std::make_shared<Received>();
  caf::actor sink;
  std::unique_ptr<sy::worker::BulkLane> lane;
  uint16_t port = 0;

  explicit LaneFixture(sy::worker::BulkLaneLimits limits = fast_limits()) {
    // The state as a spawn argument: CAF 0.17 spawning a function actor
    // without arguments dereferences a null pointer.
    sink = sys.spawn(
        [](caf::event_based_actor*, std::shared_ptr<Received> r) -> caf::behavior {
          return {[r](sy::import_atom, sy::BulkImport& in) {
            std::lock_guard lock(r->mutex);
            r->imports.push_back(std::move(in));
          }};
        },
        received);
    lane = std::make_unique<sy::worker::BulkLane>(limits, nullptr);
    port = lane->listen("127.0.0.1", 0, {{sink, nullptr}});
  }
  ~LaneFixture() {
    lane.reset();
    caf::anon_send_exit(sink, caf::exit_reason::kill);
  }
  static sy::worker::BulkLaneLimits fast_limits() {
    sy::worker::BulkLaneLimits l;
    l.handshake_timeout = 300ms;
    l.stall_timeout = 300ms;
    l.max_unadmitted = 4;
    return l;
  }
  size_t imports() {
    std::lock_guard lock(received->mutex);
    return received->imports.size();
  }
};

// A raw TCP peer with bounded waits.
struct Peer {
  int fd = -1;
  explicit Peer(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Peer() { ::close(fd); }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  void send(const void* p, size_t n) const { (void)::send(fd, p, n, MSG_NOSIGNAL); }
  void send(const std::vector<uint8_t>& v) const { send(v.data(), v.size()); }
  void hello(const std::string& token) const {
    std::vector<uint8_t> h(sy::bulk::magic.begin(), sy::bulk::magic.end());
    h.insert(h.end(), token.begin(), token.end());
    send(h);
  }
  // Reads exactly n bytes within `limit`; empty if the peer closed or time ran out.
  std::vector<uint8_t> read(size_t n, std::chrono::milliseconds limit = 5s) const {
    std::vector<uint8_t> out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      uint8_t buf[65536];
      auto k = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
      if (k <= 0) return {};
      out.insert(out.end(), buf, buf + k);
    }
    return out.size() == n ? out : std::vector<uint8_t>{};
  }
  // Whether the lane closed this connection within `limit`.
  bool closed_within(std::chrono::milliseconds limit) const {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      uint8_t buf[4096];
      auto k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN)) return true;
    }
    return false;
  }
  bool admitted() const {
    auto b = read(1, 2s);
    return b.size() == 1 && b[0] == sy::bulk::admitted;
  }
};

std::vector<uint8_t> upload_frame(uint32_t device, uint64_t id, sy::DType dtype, const sy::Shape& shape,
                                  uint64_t bytes) {
  return sy::bulk::encode(sy::bulk::UploadHeader{device, sy::TensorId{id}, dtype, shape, bytes, false});
}

}  // namespace

TEST_CASE("the lane admits only tokens it handed out, one connection each", "[bulk][hostile]") {
  LaneFixture f;
  const auto token = f.lane->admit(f.sys.node());
  CHECK(token.size() == sy::bulk::token_bytes);
  CHECK(f.lane->admit(f.sys.node()) == token);  // a second hello of the same node
  {
    Peer wrong_magic(f.port);
    wrong_magic.send(std::string("GET / HTTP/1.1\r\n\r\nxxxxxx").data(), sy::bulk::hello_bytes);
    CHECK(wrong_magic.closed_within(2s));
  }
  {
    Peer wrong_token(f.port);
    auto bad = token;
    bad[3] = static_cast<char>(bad[3] ^ 1);
    wrong_token.hello(bad);
    CHECK(wrong_token.closed_within(2s));
  }
  Peer first(f.port);
  first.hello(token);
  REQUIRE(first.admitted());
  Peer second(f.port);
  second.hello(token);
  CHECK(second.closed_within(2s));
  CHECK_FALSE(first.closed_within(200ms));
  // Revoked (its client went): the connection closes, the token is dead.
  f.lane->revoke(f.sys.node());
  CHECK(first.closed_within(2s));
  Peer late(f.port);
  late.hello(token);
  CHECK(late.closed_within(2s));
  CHECK(f.lane->counters().admitted == 1);
}

TEST_CASE("silent and surplus connections to the lane are closed", "[bulk][hostile]") {
  LaneFixture f;
  std::vector<std::unique_ptr<Peer>> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(std::make_unique<Peer>(f.port));
  std::this_thread::sleep_for(50ms);
  Peer surplus(f.port);  // the fifth unadmitted one
  CHECK(surplus.closed_within(1s));
  for (auto& p : silent) CHECK(p->closed_within(2s));  // the 300 ms handshake bound
  // Refused before admission, not stalls (which count admitted transfers).
  CHECK(f.lane->counters().refused == 5);
  CHECK(f.lane->counters().closed_stall == 0);
  // Slots are free again: a client with a token gets in.
  const auto token = f.lane->admit(f.sys.node());
  Peer ok(f.port);
  ok.hello(token);
  CHECK(ok.admitted());
}

TEST_CASE("an upload reaches its runner and is acknowledged and malformed ones close only their connection",
          "[bulk][hostile]") {
  LaneFixture f;
  const auto token = f.lane->admit(f.sys.node());
  auto admitted_peer = [&] {
    auto p = std::make_unique<Peer>(f.port);
    p->hello(token);
    REQUIRE(p->admitted());
    return p;
  };
  {
    auto p = admitted_peer();
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
    p->send(upload_frame(0, 42, sy::DType::f32, {10, 100}, v.size() * 4));
    p->send(v.data(), v.size() * 4);
    auto ack = p->read(sy::bulk::reply_header_bytes);
    REQUIRE(ack.size() == sy::bulk::reply_header_bytes);
    auto h = sy::bulk::decode_reply(ack.data());
    REQUIRE(h);
    CHECK(h->kind == sy::bulk::FrameKind::upload_ack);
    CHECK(h->number == 42);
    for (int i = 0; i < 100 && f.imports() == 0; ++i) std::this_thread::sleep_for(20ms);
    std::lock_guard lock(f.received->mutex);
    REQUIRE(f.received->imports.size() == 1);
    const auto& in = f.received->imports[0];
    CHECK(in.id.value == 42);
    CHECK(in.owner == f.sys.node());
    CHECK(in.data.shape == sy::Shape{10, 100});
    CHECK(std::memcmp(in.data.bytes.data(), v.data(), v.size() * 4) == 0);
  }
  struct Case {
    const char* what;
    std::vector<uint8_t> frame;
  };
  auto negative_dim = upload_frame(0, 1, sy::DType::f32, {4}, 16);
  negative_dim[sy::bulk::upload_fixed_bytes + 7] = 0x80;
  std::vector<Case> cases = {
      {"device out of range", upload_frame(7, 1, sy::DType::f32, {4}, 16)},
      {"bytes not the shape's", upload_frame(0, 1, sy::DType::f32, {4}, 17)},
      {"huge declared size",
       upload_frame(0, 1, sy::DType::f64, {int64_t{1} << 40, int64_t{1} << 20}, uint64_t{1} << 63)},
      {"negative extent", negative_dim},
      {"unknown kind", std::vector<uint8_t>(sy::bulk::upload_fixed_bytes, 0x77)},
  };
  {
    auto bad_dtype = upload_frame(0, 1, sy::DType::f32, {4}, 16);
    bad_dtype[13] = 99;
    cases.push_back({"unknown dtype", bad_dtype});
    auto bad_rank = upload_frame(0, 1, sy::DType::f32, {4}, 16);
    bad_rank[14] = 200;
    cases.push_back({"rank over the bound", bad_rank});
    auto bad_flags = upload_frame(0, 1, sy::DType::f32, {4}, 16);
    bad_flags[23] = 2;
    cases.push_back({"unknown flags", bad_flags});
  }
  for (const auto& c : cases) {
    INFO(c.what);
    auto p = admitted_peer();
    p->send(c.frame);
    CHECK(p->closed_within(2s));
  }
  // An upload that stops halfway: cut after the stall bound.
  {
    auto p = admitted_peer();
    p->send(upload_frame(0, 9, sy::DType::f32, {1 << 20}, 4 << 20));
    std::vector<uint8_t> half(2 << 20, 1);
    p->send(half);
    CHECK(p->closed_within(3s));
  }
  CHECK(f.imports() == 1);
  CHECK(f.lane->counters().closed_stall >= 1);
  // Through all of it the lane kept serving.
  auto p = admitted_peer();
  p->send(upload_frame(0, 43, sy::DType::u8, {3}, 3));
  p->send("abc", 3);
  CHECK(p->read(sy::bulk::reply_header_bytes).size() == sy::bulk::reply_header_bytes);
}

TEST_CASE("the lane writes a read's bytes to its client and refuses clients it does not hold", "[bulk][hostile]") {
  LaneFixture f;
  const auto token = f.lane->admit(f.sys.node());
  std::vector<int32_t> v(300000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i * 31);
  sy::TensorData data({300000}, sy::DType::i32, sy::Bytes::copy_of(v.data(), v.size() * 4));
  CHECK_FALSE(f.lane->send(f.sys.node(), 5, data));  // no connection yet
  Peer p(f.port);
  p.hello(token);
  REQUIRE(p.admitted());
  REQUIRE(f.lane->send(f.sys.node(), 5, data));
  auto head = p.read(sy::bulk::reply_header_bytes);
  REQUIRE(head.size() == sy::bulk::reply_header_bytes);
  auto h = sy::bulk::decode_reply(head.data());
  REQUIRE(h);
  CHECK(h->kind == sy::bulk::FrameKind::read_data);
  CHECK(h->number == 5);
  REQUIRE(h->bytes == v.size() * 4);
  auto body = p.read(v.size() * 4);
  REQUIRE(body.size() == v.size() * 4);
  CHECK(std::memcmp(body.data(), v.data(), body.size()) == 0);
}

TEST_CASE("a worker killed during a lane read fails the read with device lost", "[remote][bulk]") {
  auto w = std::make_unique<WorkerProcess>(std::vector<std::string>{"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(lane_client());
  rt.connect(w->host(), w->port());
  auto remote = rt.device(w->address() + "/cpu:0");
  auto big = remote.ones({int64_t{64} << 20});  // 256 MiB
  remote.sync().get();
  std::vector<sy::Future<sy::TensorData>> reads;
  for (int i = 0; i < 4; ++i) reads.push_back(big.read());
  std::this_thread::sleep_for(50ms);
  w->stop(SIGKILL);
  for (auto& r : reads) {
    REQUIRE(r.wait_for(20s));
    // Either it came whole before the kill, or it failed as lost.
    size_t got = 0;
    auto code = sy::Errc{};
    std::string what;
    try {
      got = r.get().bytes.size();
    } catch (const sy::Error& e) {
      code = e.code();
      what = e.what();
    }
    CHECK((got == size_t{256} << 20 || code == sy::Errc::device_lost));
    // Whether the lane or the link noticed first, the device is named.
    if (got == 0) CHECK_THAT(what, Catch::Contains(w->address() + "/cpu:0"));
  }
  CHECK(rt.device("cpu:0").ones({2}).to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("a connect whose devices would pass the runtime's slots adds none of them", "[remote]") {
  std::string many = "--devices=";
  for (int i = 0; i < 512; ++i) many += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  sy::Runtime rt(lane_client());
  {
    WorkerProcess w({many, "--threads=1"});
    CHECK(rt.connect(w.host(), w.port()).size() == 512);
    w.stop(SIGKILL);
    for (int i = 0; i < 200 && rt.devices().size() > 1; ++i) std::this_thread::sleep_for(50ms);
  }
  REQUIRE(rt.devices().size() == 1);  // lost devices keep their slots, unlisted
  WorkerProcess again({many, "--threads=1"});
  try {
    (void)rt.connect(again.host(), again.port());
    FAIL("no error");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::invalid_argument);
    CHECK(std::string(e.what()).find("device slots") != std::string::npos);
  }
  CHECK(rt.devices().size() == 1);
  CHECK(rt.device("cpu:0").ones({2}).to_vector<float>() == std::vector<float>{1, 1});
}
