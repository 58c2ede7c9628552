// SPDX-License-Identifier: Apache-2.0
// Hostile peers against switchyard-worker (issue 14, worker half; issue 13
// item 3): each test reproduces one attack on loopback against a real worker
// process, bounded in time and count, and checks that the worker bounds what
// the attacker gets and keeps serving legitimate clients. Attackers connect
// from 127.0.0.2 and up, legitimate clients from 127.0.0.1, so per-address
// limits can tell them apart. The "figure:" lines are what
// docs/RELIABILITY.md ("Hostile peers: worker") quotes.

#include <arpa/inet.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <netinet/in.h>
#include <random>
#include <sstream>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>

#include <caf/all.hpp>

#include "switchyard/switchyard.hpp"
#include "worker_process.hpp"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24  // linux/in.h; glibc's netinet/in.h lacks it
#endif

namespace sy = switchyard;
using sy::testing::ChildProcess;
using sy::testing::WorkerProcess;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Under ASan/TSan the worker's RSS measures the sanitizer's quarantine and
// shadow memory, not what the attack made it keep: the RSS bounds are then
// printed but not checked (the figures in docs/RELIABILITY.md are Release).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool check_rss = false;
#else
constexpr bool check_rss = true;
#endif

// ---- a raw TCP peer -------------------------------------------------------------

/// A TCP connection from `source` (a loopback address) to the worker; raw
/// bytes only, no CAF.
class RawPeer {
 public:
  RawPeer(const std::string& source, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    sockaddr_in src{};
    src.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    // The port is chosen at connect() from the whole 4-tuple, so a flood's
    // closed connections (TIME_WAIT here) do not use up the source ports.
    int one = 1;
    ::setsockopt(fd_, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawPeer() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  [[nodiscard]] bool connected() const { return fd_ >= 0; }
  bool send(const std::vector<uint8_t>& bytes) {
    return fd_ >= 0 && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  /// Whether the worker closed the connection within `limit` (whatever it
  /// sent before, such as its own handshake, is read and dropped).
  bool closed_by_peer(std::chrono::milliseconds limit) {
    if (fd_ < 0) return true;
    auto deadline = Clock::now() + limit;
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
};

std::vector<uint8_t> basp_header(uint8_t op, uint32_t payload_len, uint64_t op_data = 0, uint64_t src = 0,
                                 uint64_t dst = 0) {
  std::vector<uint8_t> h(32, 0);
  h[0] = op;
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<uint8_t>(payload_len >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) {
    h[8 + i] = static_cast<uint8_t>(op_data >> (56 - 8 * i));
    h[16 + i] = static_cast<uint8_t>(src >> (56 - 8 * i));
    h[24 + i] = static_cast<uint8_t>(dst >> (56 - 8 * i));
  }
  return h;
}

/// A complete, valid BASP client handshake from a made-up node: what a
/// handshake flood sends (a different node id every time).
std::vector<uint8_t> fake_client_handshake(caf::actor_system& sys, std::mt19937& rng) {
  caf::node_id::default_data::host_id_type host{};
  for (auto& b : host) b = static_cast<uint8_t>(rng());
  auto node = caf::make_node_id(static_cast<uint32_t>(rng() | 1), host);
  std::vector<char> payload;
  caf::binary_serializer sink{sys, payload};
  if (auto err = sink(node)) throw std::runtime_error("cannot serialize a node id");
  auto out = basp_header(1, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// ---- the worker process seen from outside ------------------------------------------

/// Resident set size of `pid` in KiB (0 if gone).
long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

/// The most RSS a process reaches over `span`, sampled every 100 ms,
/// starting from `from`.
long peak_rss_kib(pid_t pid, long from, std::chrono::milliseconds span) {
  long peak = from;
  for (auto until = Clock::now() + span; Clock::now() < until; std::this_thread::sleep_for(100ms))
    peak = std::max(peak, rss_kib(pid));
  return peak;
}

/// Reads every tensor: how many succeeded, and per error kind how many
/// failed with it and the last message it came with.
struct ReadOutcomes {
  int ok = 0;
  std::map<sy::Errc, std::pair<int, std::string>> failed;
  [[nodiscard]] int count(sy::Errc code) const {
    auto it = failed.find(code);
    return it == failed.end() ? 0 : it->second.first;
  }
  [[nodiscard]] std::string message(sy::Errc code) const {
    auto it = failed.find(code);
    return it == failed.end() ? std::string() : it->second.second;
  }
};
ReadOutcomes read_each(const std::vector<sy::Tensor>& tensors) {
  ReadOutcomes r;
  for (const auto& t : tensors) {
    try {
      (void)t.to_vector<float>();
      ++r.ok;
    } catch (const sy::Error& e) {
      auto& [n, last] = r.failed[e.code()];
      ++n;
      last = e.what();
    }
  }
  return r;
}

/// CPU time `pid` used so far (user + system), in seconds.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), {});
  auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

sy::RuntimeOptions client_options() { return sy::testing::remote_client_options(); }

/// One legitimate client session: connect, run an op, check it, leave.
bool legit_session(const WorkerProcess& w, std::string* error = nullptr,
                   std::chrono::milliseconds connect_timeout = 10s) {
  try {
    auto options = client_options();
    options.connect_timeout = connect_timeout;
    sy::Runtime rt(options);
    rt.connect(w.host(), w.port());
    auto dev = rt.device(w.address() + "/cpu:0");
    auto v = (dev.ones({4}) * 3.0).to_vector<float>();
    return v == std::vector<float>{3, 3, 3, 3};
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    return false;
  }
}

/// Runs the worker through /bin/sh so that stderr comes back too; returns
/// the exit status and everything it printed.
std::pair<int, std::string> run_worker_to_exit(const std::string& args) {
  std::string cmd = std::string(SWITCHYARD_WORKER_PATH) + " " + args + " 2>&1";
  ChildProcess p({"/bin/sh", "-c", "exec " + cmd});
  std::string out = p.read_until_exit(20s, "listening on");
  int status = p.stop(SIGTERM);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

// ---- 1. allocation before and after the handshake ----------------------------------

TEST_CASE("a BASP header declaring a huge payload is refused before anything is allocated", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  const long before = rss_kib(w.pid());
  std::vector<std::unique_ptr<RawPeer>> peers;
  // The measured attack: client-handshake headers declaring 4 GiB, and
  // direct-message headers declaring 512 MiB, 6 connections each.
  for (int i = 0; i < 12; ++i) {
    peers.push_back(std::make_unique<RawPeer>("127.0.0.2", w.port()));
    REQUIRE(peers.back()->connected());
    REQUIRE(peers.back()->send(i < 6 ? basp_header(1, 0xFFFFFFFFu) : basp_header(2, 512u << 20, 0, 1, 1)));
  }
  // 300 random headers (seeded): whatever passes CAF's own checks must
  // still not pass the size bound.
  std::mt19937 rng(14);
  int random_closed = 0;
  for (int i = 0; i < 300; ++i) {
    RawPeer p("127.0.0.3", w.port());
    REQUIRE(p.connected());
    std::vector<uint8_t> h(32);
    for (auto& b : h) b = static_cast<uint8_t>(rng());
    h[0] = static_cast<uint8_t>(rng() % 8);  // mostly valid operations
    p.send(h);
    random_closed += p.closed_by_peer(5s) ? 1 : 0;
  }
  int closed = 0;
  for (auto& p : peers) closed += p->closed_by_peer(5s) ? 1 : 0;
  const long after = rss_kib(w.pid());
  std::printf(
      "figure: oversize headers: %d of 12 connections closed, %d of 300 random headers closed, RSS %ld -> %ld "
      "KiB\n",
      closed, random_closed, before, after);
  CHECK(closed == 12);
  CHECK(random_closed == 300);
  if (check_rss) CHECK(after - before < 32 * 1024);  // the attack cost 4 GiB per socket before
  CHECK(legit_session(w));
}

TEST_CASE("a declared payload costs what has arrived and a stalled one is closed at the stall deadline",
          "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--payload-stall-timeout-ms=1000"});
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::mt19937 rng(33);
  const long before = rss_kib(w.pid());
  // Eight peers complete a handshake, declare a 200 MiB direct message each,
  // send 2 MiB of it and go silent (CAF allocated and zeroed the whole
  // payload at the header: 8 such held 2 GiB for as long as they stayed).
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int i = 0; i < 8; ++i) {
    peers.push_back(std::make_unique<RawPeer>("127.0.0.4", w.port()));
    REQUIRE(peers.back()->connected());
    auto bytes = fake_client_handshake(sys, rng);
    auto h = basp_header(2, 200u << 20, 0, rng() | 1, rng() | 1);
    bytes.insert(bytes.end(), h.begin(), h.end());
    bytes.resize(bytes.size() + (2u << 20), 0x5a);
    REQUIRE(peers.back()->send(bytes));
  }
  std::this_thread::sleep_for(300ms);
  const long holding = rss_kib(w.pid());
  int closed = 0;
  for (auto& p : peers) closed += p->closed_by_peer(5s) ? 1 : 0;
  std::printf("figure: 8 stalled 200 MiB payloads: RSS %ld -> %ld KiB while held, %d of 8 closed at the deadline\n",
              before, holding, closed);
  if (check_rss) CHECK(holding - before < 64 * 1024);  // 8 x 200 MiB before
  CHECK(closed == 8);
  CHECK(legit_session(w));
}

TEST_CASE("a message above --max-message-bytes closes only that client's connection", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-message-bytes=1048576"});
  {
    auto options = client_options();
    options.bulk_lane_min_bytes = 0;  // every byte over BASP, under its bound
    sy::Runtime rt(options);
    rt.connect(w.host(), w.port());
    auto dev = rt.device(w.address() + "/cpu:0");
    // 512 KiB crosses; 2 MiB is one message above the bound.
    CHECK(dev.tensor<float>(std::vector<float>(128 * 1024, 1.0f), {128 * 1024}).sum().to_vector<float>()[0] ==
          Approx(128 * 1024));
    auto err = sy::Errc{};
    try {
      (void)dev.tensor<float>(std::vector<float>(512 * 1024, 1.0f), {512 * 1024}).sum().to_vector<float>();
    } catch (const sy::Error& e) {
      err = e.code();
    }
    CHECK(err == sy::Errc::device_lost);
  }
  CHECK(legit_session(w));
}

TEST_CASE("a worker's --max-device-bytes bounds what clients' ops and uploads hold and the device goes on",
          "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-device-bytes=67108864"});
  sy::Runtime rt(client_options());
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  auto held = dev.full({int64_t{8} << 20}, 1.0);  // 32 MiB
  CHECK(held.sum().to_vector<float>()[0] == 8.0f * 1024 * 1024);
  auto refused = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const sy::Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(sy::Errc{}, std::string());
  };
  // An op's output past the limit (a peer's `full` of 1 GiB, three times,
  // took the worker to 3 GiB before).
  auto [op_code, op_msg] = refused([&] { (void)dev.full({int64_t{12} << 20}, 2.0).sum().to_vector<float>(); });
  CHECK(op_code == sy::Errc::out_of_memory);
  CHECK_THAT(op_msg, Catch::Contains("memory limit of 64.0 MiB"));
  // An upload past it, over the bulk lane and in parts over BASP.
  for (uint64_t lane_min : {uint64_t{0}, uint64_t{1} << 40}) {
    auto options = client_options();
    options.bulk_lane_min_bytes = lane_min;
    sy::Runtime up(options);
    up.connect(w.host(), w.port());
    auto remote = up.device(w.address() + "/cpu:0");
    auto [code, msg] = refused(
        [&] { (void)remote.tensor<float>(std::vector<float>(12 << 20, 1.0f), {12 << 20}).sum().to_vector<float>(); });
    INFO("bulk_lane_min_bytes " << lane_min << ": " << msg);
    CHECK(code == sy::Errc::out_of_memory);
  }
  // The device goes on, and freed memory is room again.
  CHECK(dev.ones({4}).sum().to_vector<float>()[0] == 4.0f);
  held = sy::Tensor();
  // (Its 64 MiB pooled block fills the limit: a sum's 4-byte output, counted
  // too, would not fit beside it, so the tensor itself is read.)
  auto again = dev.full({int64_t{12} << 20}, 2.0).to_vector<float>();
  CHECK(again.size() == size_t{12} << 20);
  CHECK(again.back() == 2.0f);
  CHECK(legit_session(w));
}

TEST_CASE("a worker bounds how many tensors clients hold: small ones, views and failures included",
          "[remote][hostile]") {
  // Each tensor costs the worker a record of ~0.5 KiB however small it is:
  // 1M `full({1})` took a worker to 480 MiB before, its byte limit seeing
  // none of it. --max-device-tensors counts every record.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-device-tensors=1000"});
  sy::Runtime rt(client_options());
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  auto base = dev.full({1}, 7.0);
  std::vector<sy::Tensor> held;
  for (int i = 0; i < 1300; ++i) held.push_back(i % 2 == 0 ? dev.full({1}, 1.0) : base.reshape({1, 1}));
  (void)dev.sync().get();
  const auto reads = read_each(held);
  const int ok = reads.ok, out_of_memory = reads.count(sy::Errc::out_of_memory),
            unknown = reads.count(sy::Errc::unknown_tensor);
  const int other = static_cast<int>(held.size()) - ok - out_of_memory - unknown;
  const std::string oom_message = reads.message(sy::Errc::out_of_memory);
  INFO("ok " << ok << ", out_of_memory " << out_of_memory << ", unknown " << unknown << ": " << oom_message << " / "
             << reads.message(sy::Errc::unknown_tensor));
  // Up to the limit they are made, for a sixteenth more they fail saying
  // why, past that they are refused without a record.
  CHECK(ok >= 990);
  CHECK(ok <= 1000);
  CHECK(out_of_memory >= 70);
  CHECK(out_of_memory <= 80);
  CHECK(ok + out_of_memory + unknown == 1300);
  CHECK(other == 0);
  CHECK_THAT(oom_message, Catch::Contains("its limit is 1000") && Catch::Contains("drop tensors"));
  // Dropped tensors are room again, and the device goes on.
  held.clear();
  CHECK((dev.full({4}, 2.0) + base).to_vector<float>() == std::vector<float>{9, 9, 9, 9});
  CHECK(legit_session(w));
}

TEST_CASE("a worker's --max-device-bytes counts tensors under 4 KiB", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-device-bytes=65536", "--max-device-tensors=100000"});
  sy::Runtime rt(client_options());
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  std::vector<sy::Tensor> held;
  for (int i = 0; i < 1100; ++i) held.push_back(dev.full({1}, 1.0));  // 64 bytes each, as counted
  const auto reads = read_each(held);
  const int ok = reads.ok, out_of_memory = reads.count(sy::Errc::out_of_memory);
  const std::string message = reads.message(sy::Errc::out_of_memory);
  INFO(message);
  CHECK(ok <= 1024);
  CHECK(ok >= 1000);
  CHECK(ok + out_of_memory == 1100);
  CHECK_THAT(message, Catch::Contains("memory limit of 64.0 KiB"));
  held.clear();
  CHECK(dev.full({4}, 2.0).to_vector<float>() == std::vector<float>{2, 2, 2, 2});
}

TEST_CASE("a worker's --max-staged-bytes bounds uploads in transit and the device goes on", "[remote][hostile]") {
  // Parts of a tensor wait on the worker until its last part comes; a peer
  // that sends many first parts held all of them before.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-staged-bytes=1048576"});
  auto options = client_options();
  options.bulk_lane_min_bytes = uint64_t{1} << 40;  // every byte over BASP, in parts
  options.transfer_chunk_bytes = 256 << 10;
  sy::Runtime rt(options);
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  // 4 parts: the last is joined, not staged, so 768 KiB is the most held.
  auto fits = dev.tensor<float>(std::vector<float>(256 << 10, 1.0f), {256 << 10});
  CHECK(fits.sum().to_vector<float>()[0] == 262144.0f);
  std::string message;
  sy::Errc code{};
  try {
    (void)dev.tensor<float>(std::vector<float>(1 << 20, 1.0f), {1 << 20}).sum().to_vector<float>();  // 4 MiB
  } catch (const sy::Error& e) {
    code = e.code();
    message = e.what();
  }
  INFO(message);
  CHECK(code == sy::Errc::out_of_memory);
  CHECK_THAT(message, Catch::Contains("in transit would pass the device's limit of 1048576"));
  CHECK(dev.stats().get().bytes_staged == 0);
  CHECK(fits.sum().to_vector<float>()[0] == 262144.0f);
  CHECK(legit_session(w));
}

TEST_CASE("a peer sending ops faster than the device runs them is read no further than --max-queued-bytes",
          "[remote][hostile]") {
  // 300,000 products of 128 x 128 matrices, ~40 us each to run and ~100
  // bytes each to send: a worker that read them all as they came held them
  // in its runner's mailbox, 18 -> 330 MiB measured before the bound.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-queued-bytes=1048576"}, true);
  const long rss_before = rss_kib(w.pid());
  ChildProcess flood({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "1", "flood"});
  REQUIRE(flood.read_line(30s) == "ready");
  REQUIRE(flood.read_line(60s) == "flooded");
  const long rss_peak = peak_rss_kib(w.pid(), rss_before, 3s);
  std::printf("figure: op flood at --max-queued-bytes=1048576: worker RSS %ld -> peak %ld KiB\n", rss_before, rss_peak);
  // 1 MiB as received is ~10 MiB of ops in memory (32 MiB measured in all).
  if (check_rss) CHECK(rss_peak - rss_before < 96 * 1024);
  // Other clients are served meanwhile (behind the ops the device took).
  std::string error;
  CHECK(legit_session(w, &error));
  INFO(error);
  flood.stop(SIGKILL);
  CHECK(legit_session(w, &error));
  const auto exit = w.stop_logged("paused (queued bytes) ");
  INFO(exit.log);
  CHECK(exit.clean);
  CHECK(exit.counted > 0);
}

TEST_CASE("peers flooding ops over several connections are held to --max-queued-bytes-total together",
          "[remote][hostile]") {
  // Each connection may queue 16 MiB as received (~170 MiB in the
  // mailbox), the worker 1 MiB for all: two floods grew it by ~340 MiB
  // without the total.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-queued-bytes=16777216", "--max-queued-bytes-total=1048576"},
                  true);
  const long rss_before = rss_kib(w.pid());
  std::vector<std::unique_ptr<ChildProcess>> floods;
  for (int i = 0; i < 2; ++i)
    floods.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "1", "flood"}));
  for (auto& f : floods) REQUIRE(f->read_line(30s) == "ready");
  for (auto& f : floods) REQUIRE(f->read_line(60s) == "flooded");
  const long rss_peak = peak_rss_kib(w.pid(), rss_before, 3s);
  std::printf("figure: two op floods at --max-queued-bytes-total=1048576: worker RSS %ld -> peak %ld KiB\n", rss_before,
              rss_peak);
  if (check_rss) CHECK(rss_peak - rss_before < 128 * 1024);
  std::string error;
  CHECK(legit_session(w, &error));
  INFO(error);
  for (auto& f : floods) f->stop(SIGKILL);
  CHECK(legit_session(w, &error));
  const auto exit = w.stop_logged("paused (queued bytes) ");
  INFO(exit.log);
  CHECK(exit.clean);
  CHECK(exit.counted > 0);
}

// ---- 2. a client that stops reading ---------------------------------------------------------

TEST_CASE("a client that stops reading is disconnected and its tensors freed", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-output-bytes=16777216"});
  sy::Runtime observer(client_options());
  observer.connect(w.host(), w.port());
  auto dev = observer.device(w.address() + "/cpu:0");
  const auto baseline = dev.stats().get().live_handles;
  const long rss_before = rss_kib(w.pid());
  ChildProcess stalled({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "16", "stall"});
  REQUIRE(stalled.read_line(20s) == "ready");
  // 64 reads x 4 MiB = 256 MiB of replies toward a stopped client; the
  // worker may queue 16 MiB (twice that with the batch in flight).
  long rss_peak = rss_before;
  bool freed = false;
  auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline && !freed) {
    rss_peak = std::max(rss_peak, rss_kib(w.pid()));
    std::this_thread::sleep_for(100ms);
    freed = dev.stats().get().live_handles == baseline;
  }
  std::printf("figure: stalled reader: tensors freed %s, worker RSS %ld -> peak %ld KiB\n", freed ? "yes" : "no",
              rss_before, rss_peak);
  CHECK(freed);
  // Its 16 small tensors and one 4 MiB tensor, 256 MiB of replies asked:
  // what stays bounded is about twice the output bound plus the tensor.
  if (check_rss) CHECK(rss_peak - rss_before < 128 * 1024);
  stalled.stop(SIGKILL);
  CHECK((dev.ones({2}) + 1.0).to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("tensors larger than --max-message-bytes cross in parts: uploads, reads and bridges", "[remote][hostile]") {
  // 1 MiB per message on both workers (they send parts of 512 KiB), 256 KiB
  // from the client: every tensor below is larger than one message.
  WorkerProcess w1({"--devices=cpu:0", "--threads=1", "--max-message-bytes=1048576"});
  WorkerProcess w2({"--devices=cpu:0", "--threads=1", "--max-message-bytes=1048576"});
  auto options = client_options();
  options.transfer_chunk_bytes = 256 * 1024;
  options.bulk_lane_min_bytes = 0;  // parts over BASP, not the bulk lane
  sy::Runtime rt(options);
  rt.connect(w1.host(), w1.port());
  rt.connect(w2.host(), w2.port());
  auto local = rt.device("cpu:0");
  auto d1 = rt.device(w1.address() + "/cpu:0"), d2 = rt.device(w2.address() + "/cpu:0");
  const auto base1 = d1.stats().get().live_handles;
  const auto base2 = d2.stats().get().live_handles;
  {
    // 3 MiB + 4 bytes of f32: not a multiple of any part size.
    constexpr int64_t n = 3 * 256 * 1024 + 1;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000) - 500.0f;
    auto a = d1.tensor<float>(values, {n});
    CHECK(a.to_vector<float>() == values);
    auto doubled = (a * 2.0).to_vector<float>();
    REQUIRE(doubled.size() == values.size());
    bool all = true;
    for (int64_t i = 0; i < n; ++i) all = all && doubled[i] == 2 * values[i];
    CHECK(all);
    // Worker to worker, worker to client, client to worker.
    CHECK(a.to(d2).to_vector<float>() == values);
    CHECK(a.to(local).to_vector<float>() == values);
    CHECK(local.tensor<float>(values, {n}).to(d2).to_vector<float>() == values);
    CHECK(d2.stats().get().bytes_bridged_in == 2 * n * sizeof(float));
  }
  {
    // Other dtypes: f64 across parts, bools (canonical after reassembly).
    std::vector<double> wide(300000);
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = 1.0 / static_cast<double>(i + 1);
    CHECK(d1.tensor<double>(wide, {300000}).to_vector<double>() == wide);
    auto mask = d1.arange(0, 2000000).lt(1000000.0);
    auto bits = mask.to(d2).to_vector<uint8_t>();
    REQUIRE(bits.size() == 2000000);
    CHECK(std::count(bits.begin(), bits.end(), uint8_t{1}) == 1000000);
  }
  {
    // Twelve 200 KiB uploads queued together: the batch is sent before its
    // uploads pass one part, so no message exceeds the bound.
    std::vector<sy::Tensor> parts;
    for (int i = 0; i < 12; ++i) parts.push_back(d1.tensor<float>(std::vector<float>(51200, float(i)), {51200}));
    auto total = parts[0].sum();
    for (int i = 1; i < 12; ++i) total = total + parts[i].sum();
    CHECK(total.to_vector<float>()[0] == Approx(51200.0 * 66));
  }
  // The connections stayed up (a message over the bound closes them) and
  // everything was freed.
  CHECK((d1.ones({2}) + 1.0).to_vector<float>() == std::vector<float>{2, 2});
  auto settled = [&](sy::Device& d, uint64_t base) {
    for (int i = 0; i < 100; ++i) {
      if (d.stats().get().live_handles == base) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  };
  CHECK(settled(d1, base1));
  CHECK(settled(d2, base2));
}

// ---- 3. handshake and garbage floods -------------------------------------------------------

TEST_CASE("handshake and garbage floods leak nothing and legitimate clients stay served", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto flood = [&](std::chrono::seconds length, int seed) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> sent{0};
    std::vector<std::thread> attackers;
    for (int t = 0; t < 3; ++t) {
      attackers.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(seed * 10 + t));
        const std::string source = "127.0.0." + std::to_string(2 + 3 * seed + t);
        // Paced at about 1000 connections/s per attacker: the machine has
        // two cores, and the point is the worker's state, not raw rate.
        auto next = Clock::now();
        while (!stop.load()) {
          next += 1ms;
          std::this_thread::sleep_until(next);
          RawPeer p(source, w.port());
          if (!p.connected()) continue;
          auto bytes = fake_client_handshake(sys, rng);
          if (t == 2) {
            // Garbage after the handshake: a direct message whose payload
            // is random bytes.
            std::vector<uint8_t> junk(64 + rng() % 2048);
            for (auto& b : junk) b = static_cast<uint8_t>(rng());
            auto h = basp_header(2, static_cast<uint32_t>(junk.size()), 0, rng() | 1, rng() | 1);
            bytes.insert(bytes.end(), h.begin(), h.end());
            bytes.insert(bytes.end(), junk.begin(), junk.end());
          }
          if (p.send(bytes)) sent.fetch_add(1);
        }
      });
    }
    int ok = 0, tried = 0;
    std::string last_error;
    auto end = Clock::now() + length;
    // A legitimate client connects a few times a second (a service
    // reconnecting), far below the per-address rate limit.
    auto next_session = Clock::now();
    while (Clock::now() < end) {
      std::this_thread::sleep_until(next_session);
      next_session += 250ms;
      ++tried;
      auto t0 = Clock::now();
      // 5 s: a stalled hello costs one session, not the whole flood.
      if (legit_session(w, &last_error, 5s) && Clock::now() - t0 < 5s)
        ++ok;
      else
        std::printf("figure: legitimate session %d failed after %.2f s: %s\n", tried,
                    std::chrono::duration<double>(Clock::now() - t0).count(), last_error.c_str());
    }
    stop.store(true);
    for (auto& a : attackers) a.join();
    return std::tuple{sent.load(), ok, tried, last_error};
  };
  const long rss0 = rss_kib(w.pid());
  auto [sent1, ok1, tried1, err1] = flood(10s, 0);
  std::this_thread::sleep_for(1s);
  const long rss1 = rss_kib(w.pid());
  auto [sent2, ok2, tried2, err2] = flood(10s, 1);
  std::this_thread::sleep_for(1s);
  const long rss2 = rss_kib(w.pid());
  std::printf(
      "figure: flood 1: %llu fake handshakes, legitimate %d of %d; flood 2: %llu, legitimate %d of %d; RSS %ld "
      "-> %ld -> %ld KiB\n",
      static_cast<unsigned long long>(sent1), ok1, tried1, static_cast<unsigned long long>(sent2), ok2, tried2, rss0,
      rss1, rss2);
  INFO(err1 << " / " << err2);
  CHECK(sent1 > 1000);
  CHECK(tried1 >= 5);
  CHECK(tried2 >= 5);
  // Every legitimate session. Lost hellos came from CAF reusing a closed
  // fake peer's descriptor as the new client's handle while that peer's
  // route was still being removed (docs/RELIABILITY.md); the guard's
  // scribes now have handles of their own.
  CHECK(ok1 == tried1);
  CHECK(ok2 == tried2);
  // A second flood as long as the first must not grow the worker by as
  // much again: what the first left is allocator caches, not a leak.
  if (check_rss) CHECK(rss2 - rss1 < std::max<long>(16 * 1024, (rss1 - rss0) / 2));
}

// ---- 4. connection limits and descriptor exhaustion --------------------------------------------

TEST_CASE("one address gets at most its share of connections and silent ones expire", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-connections-per-address=8", "--handshake-timeout-ms=1500"});
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int i = 0; i < 40; ++i) {
    peers.push_back(std::make_unique<RawPeer>("127.0.0.2", w.port()));
    REQUIRE(peers.back()->connected());
  }
  int refused = 0;
  for (auto& p : peers) refused += p->closed_by_peer(100ms) ? 1 : 0;
  std::string error;
  const bool legit_ok = legit_session(w, &error);
  int expired = 0;
  for (auto& p : peers) expired += p->closed_by_peer(8s) ? 1 : 0;
  std::printf(
      "figure: 40 silent connections from one address: %d refused at once, %d held then expired by the "
      "handshake deadline; legitimate client %s\n",
      refused, expired - refused, legit_ok ? "served" : "NOT served");
  INFO(error);
  CHECK(refused == 32);
  CHECK(legit_ok);
  CHECK(expired == 40);
}

TEST_CASE("out of file descriptors the accept loop neither spins nor stops serving", "[remote][hostile]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-connections=100000", "--max-connections-per-address=100000",
                   "--handshake-timeout-ms=3000"});
  rlimit small{128, 128};
  REQUIRE(::prlimit(w.pid(), RLIMIT_NOFILE, &small, nullptr) == 0);
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int i = 0; i < 300; ++i) peers.push_back(std::make_unique<RawPeer>("127.0.0.2", w.port()));
  std::this_thread::sleep_for(500ms);
  const double cpu0 = cpu_seconds(w.pid());
  std::this_thread::sleep_for(2s);
  const double cpu_used = cpu_seconds(w.pid()) - cpu0;
  // With the limits off, the attacker holds every descriptor until its
  // connections miss the handshake deadline (3 s); then descriptors come
  // back and a legitimate client gets in (until then it is shed at once,
  // its connect fails fast rather than hanging).
  std::string error;
  bool legit_ok = false;
  auto until = Clock::now() + 15s;
  while (!legit_ok && Clock::now() < until) {
    legit_ok = legit_session(w, &error);
    if (!legit_ok) std::this_thread::sleep_for(200ms);
  }
  std::printf("figure: 300 connections against 128 descriptors: worker CPU %.2f s in 2 s; legitimate client %s\n",
              cpu_used, legit_ok ? "served" : "NOT served");
  INFO(error);
  CHECK(cpu_used < 0.5);  // spinning is ~2 s in 2 s
  CHECK(legit_ok);
}

// ---- 5. and 6. start-up checks ----------------------------------------------------------------

TEST_CASE("without TLS the listen host must resolve to loopback addresses only", "[remote][hostile]") {
  auto [rc_any, out_any] = run_worker_to_exit("--host=0");
  CHECK(rc_any == 2);
  CHECK_THAT(out_any, Catch::Contains("0.0.0.0, not a loopback address"));
  auto [rc_bad, out_bad] = run_worker_to_exit("--host=127.0.0.1.invalid");
  CHECK(rc_bad == 2);
  CHECK_THAT(out_bad, Catch::Contains("cannot resolve '127.0.0.1.invalid'"));
  auto [rc_ok, out_ok] = run_worker_to_exit("--host=localhost --threads=1");
  CHECK(rc_ok == 0);
  CHECK_THAT(out_ok, Catch::Contains("listening on 127.0.0.1:"));
}

TEST_CASE("missing unreadable or broken TLS files stop the worker at start", "[remote][hostile]") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("sy-badtls-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string d = dir.string();
  std::ofstream(d + "/garbage.pem") << "not a certificate\n";
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; };
  const bool have_openssl =
      sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=a -keyout " + d + "/a.key -out " + d +
         "/a.pem") &&
      sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=b -keyout " + d + "/b.key -out " + d + "/b.pem");
  struct Case {
    std::string args, expect;
  };
  const std::string some_ca = " --ca=" + d + "/garbage.pem";  // readable: the files are read in order
  std::vector<Case> cases = {
      {"--cert=" + d + "/missing.pem --key=" + d + "/missing.key" + some_ca,
       "--cert '" + d + "/missing.pem': cannot read"},
      {"--cert=" + d + " --key=" + d + "/x.key" + some_ca, "--cert '" + d + "': cannot read"},  // a directory
      {"--cert=" + d + "/garbage.pem --key=" + d + "/garbage.pem" + some_ca, "not a usable PEM certificate"},
      // Half a TLS setup, before any file is read.
      {"--cert=" + d + "/garbage.pem --key=" + d + "/garbage.pem", "missing: --ca"},
  };
  if (have_openssl) {
    cases.push_back({"--cert=" + d + "/a.pem --key=" + d + "/b.key --ca=" + d + "/a.pem", "does not match --cert"});
    cases.push_back({"--cert=" + d + "/a.pem --key=" + d + "/a.key --ca=" + d + "/missing-ca.pem",
                     "--ca '" + d + "/missing-ca.pem': cannot read"});
  }
  // Limits a process cannot hold.
  cases.push_back({"--threads=100000", "--threads"});
  cases.push_back({"--devices=cpu:*", "more than the 1024 a process holds"});
  for (const auto& c : cases) {
    auto [rc, out] = run_worker_to_exit(c.args);
    INFO(c.args << "\n" << out);
    CHECK(rc == 2);
    CHECK_THAT(out, Catch::Contains(c.expect));
    CHECK_THAT(out, !Catch::Contains("listening"));
  }
  fs::remove_all(dir);
}

// ---- 7. SIGTERM with clients at work (also issue 13, item 3) -------------------------------------

TEST_CASE("SIGTERM stops a worker with busy clients within 5 s every time", "[remote][hostile][shutdown]") {
  int runs = 100;
  if (const char* env = std::getenv("SWITCHYARD_SIGTERM_RUNS")) runs = std::max(1, std::atoi(env));
  std::mt19937 rng(13);
  int clean = 0;
  double worst = 0;
  for (int i = 0; i < runs; ++i) {
    WorkerProcess w({"--devices=cpu:0", "--threads=1"});
    ChildProcess c1({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "4", "busy"});
    ChildProcess c2({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "4", "busy"});
    REQUIRE(c1.read_line(20s) == "ready");
    REQUIRE(c2.read_line(20s) == "ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 300));
    auto t0 = Clock::now();
    int status = w.stop(SIGTERM);  // SIGKILL after 10 s
    double took = std::chrono::duration<double>(Clock::now() - t0).count();
    worst = std::max(worst, took);
    // What it printed while stopping; a teardown its watchdog had to cut
    // short (CAF still holding a runner) is not a clean stop either.
    const std::string said = w.read_until_exit(2s);
    const bool cut_short = said.find("teardown cut short") != std::string::npos;
    if (cut_short) std::printf("figure: SIGTERM run %d: %s", i, said.c_str());
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && took < 5.0 && !cut_short)
      ++clean;
    else {
      // Printed at once as well: a cut log still shows how the run ended.
      std::printf("figure: SIGTERM run %d: %s %d after %.2f s\n", i,
                  WIFEXITED(status) ? "exit status" : (WIFSIGNALED(status) ? "killed by signal" : "status"),
                  WIFEXITED(status) ? WEXITSTATUS(status) : (WIFSIGNALED(status) ? WTERMSIG(status) : status), took);
      UNSCOPED_INFO("run " << i << ": status " << status << " after " << took << " s");
    }
  }
  std::printf("figure: SIGTERM with 2 busy clients: %d of %d runs exited 0 within 5 s, slowest %.2f s\n", clean, runs,
              worst);
  CHECK(clean == runs);
}

// ---- 8. client side: connect timeout ------------------------------------------------------------------

namespace {

/// A port that accepts TCP connections (the kernel completes them into the
/// backlog) and never says a word.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot open a silent listener");
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

}  // namespace

TEST_CASE("destroying the runtime during a connect to a silent port does not wait out connect_timeout",
          "[remote][hostile]") {
  SilentListener silent;
  auto options = client_options();
  options.connect_timeout = 20s;
  options.shutdown_timeout = 0ms;
  auto rt = std::make_unique<sy::Runtime>(options);
  std::promise<std::pair<sy::Errc, std::string>> outcome;
  // The thread is given the Runtime itself: reading `rt` there while this
  // thread resets it would be the test's own data race (TSan).
  sy::Runtime* runtime = rt.get();
  std::thread connecting([&outcome, runtime, port = silent.port()] {
    try {
      runtime->connect("127.0.0.1", port);
      outcome.set_value({sy::Errc{}, "connected"});
    } catch (const sy::Error& e) {
      outcome.set_value({e.code(), e.what()});
    }
  });
  std::this_thread::sleep_for(300ms);  // the connect waits for the handshake
  const auto t0 = Clock::now();
  rt.reset();  // waited ~20 s: the connect held the device list's lock until its deadline
  const auto took = Clock::now() - t0;
  auto result = outcome.get_future();
  const bool ended = result.wait_for(10s) == std::future_status::ready;
  if (!ended) connecting.detach();  // fail this case, not the run
  REQUIRE(ended);
  connecting.join();
  CHECK(took < 5s);
  const auto [code, message] = result.get();
  CHECK(code == sy::Errc::runtime_closed);
  CHECK_THAT(message, Catch::Contains("127.0.0.1:" + std::to_string(silent.port())) &&
                          Catch::Contains("shut down during the handshake"));
}

TEST_CASE("connect to a port that never answers the handshake fails after connect_timeout", "[remote][hostile]") {
  SilentListener silent;
  const std::string address = "127.0.0.1:" + std::to_string(silent.port());
  auto options = client_options();
  options.connect_timeout = 1s;
  {
    sy::Runtime rt(options);
    auto t0 = Clock::now();
    std::string message;
    sy::Errc code{};
    try {
      rt.connect("127.0.0.1", silent.port());
    } catch (const sy::Error& e) {
      message = e.what();
      code = e.code();
    }
    auto took = Clock::now() - t0;
    CHECK(code == sy::Errc::worker_unreachable);
    CHECK_THAT(message, Catch::Contains(address) && Catch::Contains("connect_timeout"));
    CHECK(took < 5s);
  }
  {
    // From the environment, the entry is reported by unavailable() and the
    // runtime starts without it (issue 16), within the same deadline.
    setenv("SWITCHYARD_WORKERS", address.c_str(), 1);
    auto t0 = Clock::now();
    std::string message;
    try {
      sy::Runtime rt(options);
      for (const auto& line : rt.unavailable()) message += line + "\n";
    } catch (const std::exception& e) {
      FAIL("a bad SWITCHYARD_WORKERS entry made the constructor throw: " << e.what());
    }
    unsetenv("SWITCHYARD_WORKERS");
    CHECK_THAT(message,
               Catch::Contains("SWITCHYARD_WORKERS entry '" + address + "'") && Catch::Contains("connect_timeout"));
    CHECK(Clock::now() - t0 < 5s);
  }
}
