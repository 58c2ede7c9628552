// SPDX-License-Identifier: Apache-2.0
// Hostile peers against examples/inference_server, on loopback: each attack
// of issue #14 (server half) reproduced with raw sockets, bounded in count
// and time, while legitimate clients check that they are still served.
// Figures printed with "[figure]" go to docs/RELIABILITY.md.
#include <algorithm>
#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <sys/socket.h>

#include "json_io.hpp"
#include "metrics.hpp"
#include "support.hpp"

using namespace serve_test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Bounds on the server's memory and latency hold for its own bytes and speed;
// a ThreadSanitizer build adds shadow memory and runs several times slower.
#ifdef SERVE_UNDER_TSAN
constexpr double kMemoryFactor = 5;
constexpr double kSlowdownFactor = 4;
#else
constexpr double kMemoryFactor = 1;
constexpr double kSlowdownFactor = 1;
#endif

/// One HTTP response as read off a raw socket.
struct RawResponse {
  int status = -1;
  std::string headers;  // lower-cased
  std::string body;
};

/// A TCP connection to the server that says exactly what the test writes.
class RawConn {
 public:
  /// Blocking connect (bounded by the kernel's SYN retries; the server's
  /// backlog is large, so this is quick on loopback).
  /// `source`: the local address to connect from (another 127.x.y.z is
  /// another peer to the server).
  explicit RawConn(int port, bool nonblocking_connect = false, const char* source = nullptr) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      inet_pton(AF_INET, source, &from.sin_addr);
      if (bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0)
        throw std::runtime_error(std::string("bind ") + source + ": " + std::strerror(errno));
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (nonblocking_connect) fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    int rc = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    if (rc != 0 && !(nonblocking_connect && errno == EINPROGRESS))
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
  }
  ~RawConn() {
    if (fd_ >= 0) close(fd_);
  }
  RawConn(RawConn&& o) noexcept : fd_(std::exchange(o.fd_, -1)), in_(std::move(o.in_)) {}
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  [[nodiscard]] int fd() const { return fd_; }

  /// Writes all of `s` (waiting at most `limit`); false if the peer closed.
  bool send_all(std::string_view s, std::chrono::milliseconds limit = 5000ms) {
    auto deadline = Clock::now() + limit;
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        s.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (Clock::now() > deadline) return false;
        pollfd p{fd_, POLLOUT, 0};
        poll(&p, 1, 50);
        continue;
      }
      return false;
    }
    return true;
  }

  /// Reads one response (Content-Length framed), waiting at most `limit`.
  std::optional<RawResponse> read_response(std::chrono::milliseconds limit = 10000ms) {
    auto deadline = Clock::now() + limit;
    for (;;) {
      auto end = in_.find("\r\n\r\n");
      if (end != std::string::npos) {
        RawResponse r;
        r.headers = in_.substr(0, end);
        std::transform(r.headers.begin(), r.headers.end(), r.headers.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (r.headers.rfind("http/1.", 0) == 0 && r.headers.size() > 12) r.status = std::stoi(r.headers.substr(9, 3));
        size_t length = 0;
        auto cl = r.headers.find("content-length:");
        if (cl != std::string::npos) length = std::stoul(r.headers.substr(cl + 15));
        if (r.status == 100) {  // interim: skip
          in_.erase(0, end + 4);
          continue;
        }
        if (in_.size() >= end + 4 + length) {
          r.body = in_.substr(end + 4, length);
          in_.erase(0, end + 4 + length);
          return r;
        }
      }
      if (!fill(deadline)) return std::nullopt;
    }
  }

  /// True if the server closes the connection (EOF or reset) within `limit`;
  /// any data read meanwhile is discarded.
  bool closed_within(std::chrono::milliseconds limit) {
    auto deadline = Clock::now() + limit;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    }
  }

 private:
  bool fill(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return true;  // loop re-checks the deadline
    char buf[16384];
    ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  int fd_ = -1;
  std::string in_;
};

std::string get_request(const std::string& target) { return "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"; }

std::string post_request(const std::string& body) {
  return "POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

/// The response's body must be JSON with an "error" naming `needle`.
void check_error_json(const RawResponse& r, const std::string& needle) {
  INFO("body: " << r.body);
  json j = json::parse(r.body);  // throws (fails the test) if not JSON
  REQUIRE(j.contains("error"));
  CHECK_THAT(j["error"].get<std::string>(), Catch::Matchers::Contains(needle));
}

/// check_outputs without Catch's macros (they are not thread-safe).
bool outputs_match(const std::string& body, const Rows& rows) {
  try {
    json out = json::parse(body).at("outputs");
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    auto want = mlp::forward_reference(model(), flat, rows.size());
    if (out.size() != rows.size()) return false;
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < kOut; ++c) {
        double w = want[r * kOut + c];
        if (std::abs(out.at(r).at(c).get<double>() - w) > 1e-4 + 1e-4 * std::abs(w)) return false;
      }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

/// A legitimate client that keeps asking /healthz and /v1/infer (one fresh
/// connection per request, like a client arriving during the attack) until
/// told to stop, and counts what it got.
class LegitClient {
 public:
  explicit LegitClient(int port, bool healthz_only = false)
      : healthz_only_(healthz_only), thread_([this, port] { run(port); }) {}
  ~LegitClient() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int sent = 0, ok = 0;
  double worst_s = 0;

 private:
  void run(int port) {
    Rows rows = random_rows(1, 42);
    std::string infer = post_request(body_of(rows));
    for (int i = 0; !stop_; ++i) {
      auto t0 = Clock::now();
      ++sent;
      try {
        RawConn c(port);
        bool healthz = healthz_only_ || i % 2 == 0;
        if (c.send_all(healthz ? get_request("/healthz") : infer)) {
          auto r = c.read_response(10000ms);
          if (r && r->status == 200 && (healthz || outputs_match(r->body, rows))) ++ok;
        }
      } catch (const std::exception&) {
      }
      worst_s = std::max(worst_s, std::chrono::duration<double>(Clock::now() - t0).count());
      std::this_thread::sleep_for(20ms);
    }
  }
  bool healthz_only_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// A counter that the server bumps just after the socket is already closed
/// (tcp_stream closes it at a deadline before our handler runs): polls
/// /metrics (at most 3 s) until `name` reaches `at_least`; its last value.
double metric_reaching(int port, const std::string& name, double at_least) {
  double v = metric(get_metrics(port), name);
  for (auto until = Clock::now() + 3s; v < at_least && Clock::now() < until;) {
    std::this_thread::sleep_for(50ms);
    v = metric(get_metrics(port), name);
  }
  return v;
}

/// The server's resident set in MiB (from /proc), or -1.
double rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

void report(const char* what, const LegitClient& c) {
  std::printf("[figure] %s: legitimate requests answered %d/%d, slowest %.3f s\n", what, c.ok, c.sent, c.worst_s);
}

}  // namespace

TEST_CASE("a target that is not UTF-8 (/%FF, raw 0xFF) gets a JSON 404 and the server lives on", "[serve][hostile]") {
  ServerProcess server({});
  for (std::string target : {"/%FF", "/%ff%fe?x=%FF", "/\xff\xfe", "/a\x80"}) {
    INFO("target " << target);
    RawConn c(server.port());
    REQUIRE(c.send_all(get_request(target)));
    auto r = c.read_response();
    REQUIRE(r);
    // A raw non-ASCII byte may be refused by the parser (400); %FF reaches
    // the routes (404). Either way the body is valid JSON.
    CHECK((r->status == 404 || r->status == 400));
    check_error_json(*r, r->status == 404 ? "no such endpoint" : "malformed request");
  }
  RawConn c(server.port());
  REQUIRE(c.send_all(get_request("/healthz")));
  auto r = c.read_response();
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("invalid UTF-8 in a request body is 400, not 500", "[serve][hostile]") {
  ServerProcess server({});
  std::string body = body_of(random_rows(1, 3));
  SECTION("in a string") { body.insert(body.size() - 1, ",\"note\":\"\xff\xfe\""); }
  SECTION("outside a string") { body.insert(body.size() - 1, ",\xc3\x28"); }
  SECTION("an overlong encoding") { body.insert(body.size() - 1, ",\"note\":\"\xc0\xaf\""); }
  RawConn c(server.port());
  REQUIRE(c.send_all(post_request(body)));
  auto r = c.read_response();
  REQUIRE(r);
  CHECK(r->status == 400);
  check_error_json(*r, "not valid UTF-8");
}

TEST_CASE("the UTF-8 check accepts every well-formed sequence and names the first bad byte", "[serve][hostile]") {
  CHECK_FALSE(serve::invalid_utf8_at("plain ascii"));
  CHECK_FALSE(serve::invalid_utf8_at("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  CHECK(serve::invalid_utf8_at("ab\xff") == 2u);
  CHECK(serve::invalid_utf8_at("\xc0\xaf") == 0u);          // overlong '/'
  CHECK(serve::invalid_utf8_at("x\xed\xa0\x80") == 1u);     // a surrogate
  CHECK(serve::invalid_utf8_at("\xf4\x90\x80\x80") == 0u);  // above U+10FFFF
  CHECK(serve::invalid_utf8_at("\xe2\x82") == 0u);          // truncated
}

TEST_CASE("outputs that overflow to inf or NaN never make invalid JSON: 422 names the value", "[serve][hostile]") {
  // Finite float32 inputs near the top of the range, signed like the first
  // neuron's weights, overflow that neuron (sum |w| x 3.4e38 > FLT_MAX); the
  // plain-loop model confirms that the outputs are not finite.
  Rows rows(1, std::vector<float>(kIn));
  const auto& w0 = model().layers.front().weight;
  for (size_t i = 0; i < kIn; ++i) rows[0][i] = w0[i] >= 0 ? 3.4e38f : -3.4e38f;
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  auto want = mlp::forward_reference(model(), flat, rows.size());
  REQUIRE(std::any_of(want.begin(), want.end(), [](float v) { return !std::isfinite(v); }));

  ServerProcess server({});
  Reply r = post(server.port(), body_of(rows));
  INFO("body: " << r.body);
  CHECK(r.status == 422);
  json j = json::parse(r.body);  // valid JSON, whatever happened
  REQUIRE(j.contains("error"));
  CHECK_THAT(j["error"].get<std::string>(), Catch::Matchers::Contains("overflow float32"));
  CHECK(metric(get_metrics(server.port()), "serve_requests_total{code=\"422\"}") == 1);
  // Unit level: the writer refuses every non-finite value.
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    auto o = serve::outputs_body({1.0f, bad}, 1, 2);
    CHECK(o.body.empty());
    CHECK_THAT(o.error, Catch::Matchers::Contains("outputs[0][1]"));
  }
}

TEST_CASE("a transfer coding other than chunked is refused with 501 and the server goes on", "[serve][hostile]") {
  ServerProcess server({});
  Rows rows = random_rows(1, 5);
  const std::string body = body_of(rows);
  // One request with these Transfer-Encoding fields and `body` chunked.
  auto exchange = [&](const std::string& fields) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", body.size());
    RawConn c(server.port());
    REQUIRE(c.send_all("POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields +
                       "Content-Type: application/json\r\n\r\n" + size + body + "\r\n0\r\n\r\n"));
    auto r = c.read_response(5000ms);
    REQUIRE(r);
    return *r;
  };
  // What Beast would have passed on still encoded (a gzip stream read as
  // JSON), and what it would have read as having no body at all.
  for (const char* coding :
       {"gzip, chunked", "GZIP,chunked", "deflate", "chunked, gzip", "br ;q=1, chunked", "chunked;ext=1, x-custom"}) {
    INFO("Transfer-Encoding: " << coding);
    auto r = exchange(std::string("Transfer-Encoding: ") + coding + "\r\n");
    CHECK(r.status == 501);
    check_error_json(r, "not implemented");
  }
  // Two fields: the second one's coding counts too.
  const int two_fields = exchange("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n").status;
  CHECK((two_fields == 501 || two_fields == 400));
  // Plain chunked, any case, is read as before.
  auto plain = exchange("Transfer-Encoding:  Chunked \r\n");
  CHECK(plain.status == 200);
  check_outputs(plain.body, rows);
  Reply ok = post(server.port(), body);
  REQUIRE(ok.status == 200);
  check_outputs(ok.body, rows);
}

TEST_CASE("a chunked body is held to --max-body-bytes", "[serve][hostile]") {
  ServerProcess server({"--max-body-bytes", "4096", "--body-timeout-ms", "30000"});
  const std::string head =
      "POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Type: "
      "application/json\r\n\r\n";
  SECTION("many small chunks past the limit") {
    RawConn c(server.port());
    REQUIRE(c.send_all(head));
    std::string chunk = "400\r\n" + std::string(1024, ' ') + "\r\n";
    // 64 KiB offered; the server stops at 4 KiB. Sending may fail once it has
    // answered and closed: that is the point.
    for (int i = 0; i < 64; ++i)
      if (!c.send_all(chunk, 2000ms)) break;
    auto r = c.read_response(5000ms);
    REQUIRE(r);
    CHECK(r->status == 413);
    check_error_json(*r, "too large");
  }
  SECTION("one chunk declaring 2 GiB") {
    RawConn c(server.port());
    auto t0 = Clock::now();
    REQUIRE(c.send_all(head + "7fffffff\r\n" + std::string(1000, ' ')));
    auto r = c.read_response(5000ms);
    REQUIRE(r);
    CHECK(r->status == 413);
    std::printf("[figure] chunk declaring 2 GiB: 413 after %.3f s, server RSS %.0f MiB\n",
                std::chrono::duration<double>(Clock::now() - t0).count(), rss_mib(server.pid()));
    // At once, not after the body deadline (30 s).
    CHECK(Clock::now() - t0 < 5s);
  }
  Rows rows = random_rows(1, 11);
  Reply ok = post(server.port(), body_of(rows));
  REQUIRE(ok.status == 200);
  check_outputs(ok.body, rows);
}

TEST_CASE("request bodies of all connections together stay under --max-body-memory-bytes", "[serve][hostile]") {
  ServerProcess server({"--max-body-bytes", "100000", "--max-body-memory-bytes", "250000"});
  const int port = server.port();
  const std::string held = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"inputs\":";
  std::vector<RawConn> holders;
  for (int i = 0; i < 2; ++i) {
    holders.emplace_back(port);
    REQUIRE(holders.back().send_all(held));
  }
  std::this_thread::sleep_for(500ms);  // both headers read: 200000 bytes reserved
  {
    RawConn third(port);
    REQUIRE(third.send_all(held));
    auto r = third.read_response(3000ms);
    REQUIRE(r);
    CHECK(r->status == 503);
    check_error_json(*r, "--max-body-memory-bytes");
  }
  // A small request still fits beside them, and /healthz has no body.
  Rows rows = random_rows(1, 21);
  Reply small = post(port, body_of(rows));
  REQUIRE(small.status == 200);
  check_outputs(small.body, rows);
  // A holder leaves: its reservation returns, and a full 100000-byte body
  // (JSON padded with spaces) is admitted again.
  holders.pop_back();
  std::string big = body_of(rows);
  big.resize(100000, ' ');
  Reply again;
  for (auto until = Clock::now() + 5s; Clock::now() < until;) {
    again = post(port, big);
    if (again.status != 503) break;
    std::this_thread::sleep_for(100ms);  // the server has not seen the close yet
  }
  REQUIRE(again.status == 200);
  check_outputs(again.body, rows);
  CHECK(metric(get_metrics(port), "serve_http_dropped_total{reason=\"body_memory\"}") >= 1);
}

TEST_CASE("200 peers each holding a nearly complete 1 MiB body cost at most the body budget", "[serve][hostile]") {
  ServerProcess server({"--max-body-memory-bytes", std::to_string(64 << 20), "--body-timeout-ms", "6000"});
  const int port = server.port();
  const double rss_before = rss_mib(server.pid());
  const std::string head = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n";
  const std::string almost(1048575, ' ');
  std::vector<RawConn> peers;
  int refused = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < 200; ++i) {
    peers.emplace_back(port);
    peers.back().send_all(head);
  }
  std::this_thread::sleep_for(500ms);  // every header read: 64 admitted, the rest refused at once
  for (auto& p : peers) {
    auto r = p.read_response(20ms);
    if (r && r->status == 503)
      ++refused;
    else
      p.send_all(almost, 2000ms);
  }
  const double rss_held = rss_mib(server.pid());
  // While the budget is taken: bodyless requests are served, a request with a
  // body gets a clear, retryable 503.
  LegitClient legit(port, /*healthz_only=*/true);
  Rows rows = random_rows(1, 31);
  Reply during = post(port, body_of(rows));
  std::this_thread::sleep_for(1s);
  legit.stop();
  std::printf(
      "[figure] 200 peers x 1 MiB bodies, --max-body-memory-bytes 64 MiB: %d refused with 503, RSS %.0f -> %.0f "
      "MiB\n",
      refused, rss_before, rss_held);
  report("body-memory attack (200 peers holding 1 MiB bodies), /healthz", legit);
  CHECK(refused >= 200 - 64);
  // The budget plus buffers and allocator slack; under TSan the bodies' bytes
  // also have their shadow (4 shadow bytes per application byte).
  CHECK(rss_held - rss_before < (64 + 96) * kMemoryFactor);
  CHECK(legit.ok == legit.sent);
  check_rejected(during, 503, "--max-body-memory-bytes");
  // The body deadline cuts the holders and returns their budget.
  Reply after;
  for (auto until = Clock::now() + 10s; Clock::now() < until;) {
    after = post(port, body_of(rows));
    if (after.status != 503) break;
    std::this_thread::sleep_for(200ms);
  }
  std::printf("[figure] body-memory attack: inference served again %.1f s after the attack began\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  REQUIRE(after.status == 200);
  check_outputs(after.body, rows);
}

TEST_CASE("bad or missing Content-Length is refused at once, not after a timeout", "[serve][hostile]") {
  // Deadlines far beyond the checks below: an answer within 3 s can only
  // come from the framing check.
  ServerProcess server({"--header-timeout-ms", "60000", "--body-timeout-ms", "60000"});
  const std::string body = body_of(random_rows(1, 5));
  const std::string start = "POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  struct Case {
    const char* name;
    std::string request;
    int status;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"negative", start + "Content-Length: -5\r\n\r\n" + body, 400, "Content-Length"},
      {"2^64", start + "Content-Length: 18446744073709551616\r\n\r\n" + body, 400, "Content-Length"},
      {"not a number", start + "Content-Length: 12abc\r\n\r\n" + body, 400, "Content-Length"},
      {"duplicated, conflicting",
       start + "Content-Length: " + std::to_string(body.size()) + "\r\nContent-Length: 3\r\n\r\n" + body, 400,
       "Content-Length"},
      {"missing, with a body", start + "\r\n" + body, 411, "Content-Length"},
      {"with chunked too", start + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
       400, "malformed"},
  };
  for (const auto& k : cases) {
    INFO("case " << k.name);
    RawConn c(server.port());
    auto t0 = Clock::now();
    REQUIRE(c.send_all(k.request));
    auto r = c.read_response(3000ms);
    REQUIRE(r);
    CHECK(r->status == k.status);
    check_error_json(*r, k.needle);
    CHECK(Clock::now() - t0 < 3s);
    CHECK(c.closed_within(3000ms));  // the framing is lost: the server hangs up
  }
}

TEST_CASE("a header over --max-header-bytes gets 431 and the connection is closed", "[serve][hostile]") {
  ServerProcess server({"--max-header-bytes", "4096"});
  RawConn c(server.port());
  REQUIRE(c.send_all("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n"));
  auto r = c.read_response(3000ms);
  REQUIRE(r);
  CHECK(r->status == 431);
  check_error_json(*r, "header too large");
  CHECK(c.closed_within(3000ms));
}

TEST_CASE("the whole header is held to --max-header-bytes however many fields and packets", "[serve][hostile]") {
  ServerProcess server({"--max-header-bytes", "4096"});
  auto fields = [](int n) {
    std::string h = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < n; ++i) h += "X: a\r\n";
    return h + "\r\n";
  };
  auto status_of = [&](const std::string& request, size_t piece) {
    RawConn c(server.port());
    for (size_t at = 0; at < request.size(); at += piece) {
      if (!c.send_all(std::string_view(request).substr(at, piece))) break;
      if (piece < request.size()) std::this_thread::sleep_for(1ms);
    }
    auto r = c.read_response(5000ms);
    return r ? r->status : -1;
  };
  CHECK(status_of(fields(600), 1 << 20) == 200);  // 3.6 KB
  CHECK(status_of(fields(600), 100) == 200);
  CHECK(status_of(fields(1000), 1 << 20) == 431);  // 6 KB of 6-byte fields
  CHECK(status_of(fields(1000), 100) == 431);
  CHECK(status_of(fields(5000), 1 << 20) == 431);
  CHECK(status_of(fields(0), 1 << 20) == 200);
}

TEST_CASE("SIGTERM answers requests already begun whole or in part", "[serve][hostile]") {
  ServerProcess server({});
  const int port = server.port();
  constexpr int kConns = 16;
  std::vector<RawConn> conns;
  for (int i = 0; i < kConns; ++i) conns.emplace_back(port);
  // All accepted (the metrics request's own connection counts too): a
  // connection still in the listen backlog is refused by the stop.
  REQUIRE(metric_reaching(port, "serve_http_connections_open", kConns + 1) >= kConns + 1);
  const Rows rows = random_rows(1, 4242);
  const std::string request = post_request(body_of(rows));
  const size_t head = request.find("\r\n") + 2;  // the request line: the header has begun
  for (auto& c : conns) REQUIRE(c.send_all(std::string_view(request).substr(0, head)));
  std::this_thread::sleep_for(200ms);
  kill(server.pid(), SIGTERM);
  std::this_thread::sleep_for(200ms);  // the stop has closed what it closes
  for (auto& c : conns) (void)c.send_all(std::string_view(request).substr(head));
  int answered = 0;
  for (auto& c : conns) {
    auto r = c.read_response(5000ms);
    if (r && r->status == 200) ++answered;
  }
  CHECK(answered == kConns);
  CHECK(server.terminate() == 0);
}

TEST_CASE("pipelined requests are all answered, in order", "[serve][hostile]") {
  ServerProcess server({"--batch-window-us", "500"});
  constexpr int kRequests = 40;
  std::vector<Rows> sent;
  std::string burst;
  for (int i = 0; i < kRequests; ++i) {
    if (i % 4 == 3) {
      burst += get_request("/healthz");
      sent.emplace_back();
    } else {
      sent.push_back(random_rows(1 + i % 3, 2000 + i));
      burst += post_request(body_of(sent.back()));
    }
  }
  RawConn c(server.port());
  REQUIRE(c.send_all(burst));  // one write: every request arrives before the first answer
  for (int i = 0; i < kRequests; ++i) {
    INFO("request " << i);
    auto r = c.read_response(10000ms);
    REQUIRE(r);
    REQUIRE(r->status == 200);
    if (sent[i].empty())
      CHECK(json::parse(r->body)["status"] == "ok");
    else
      check_outputs(r->body, sent[i]);  // its own rows: the order held
  }
}

TEST_CASE("slowloris: 160 connections dribbling headers cost nothing, are cut at the header deadline",
          "[serve][hostile]") {
  // The attack of the issue: a header line every 4 s on each of 160
  // connections. With a 6 s header deadline every one is cut after its
  // second line; meanwhile a legitimate client keeps being answered.
  ServerProcess server({"--header-timeout-ms", "6000"});
  const int port = server.port();
  constexpr int kSlow = 160;
  std::vector<RawConn> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.emplace_back(port);
    REQUIRE(slow.back().send_all("GET /healthz HTTP/1.1\r\n"));
  }
  LegitClient legit(port);
  auto t0 = Clock::now();
  std::this_thread::sleep_for(500ms);
  std::printf("[figure] slowloris: server RSS %.0f MiB holding the 160 connections\n", rss_mib(server.pid()));
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(4s);
    for (int i = 0; i < kSlow; ++i) slow[i].send_all("X-Slow-" + std::to_string(round) + ": 1\r\n", 100ms);
  }
  legit.stop();
  report("slowloris, 160 connections, a header line every 4 s, --header-timeout-ms 6000", legit);
  CHECK(legit.sent >= 20);
  CHECK(legit.ok == legit.sent);
  CHECK(legit.worst_s < 5.0);  // ~0.1-0.25 s in Release; generous for ASan and load
  int closed = 0;
  for (auto& s : slow) closed += s.closed_within(3000ms) ? 1 : 0;
  std::printf("[figure] slowloris: %d/%d slow connections closed by the header deadline within %.1f s\n", closed, kSlow,
              std::chrono::duration<double>(Clock::now() - t0).count());
  CHECK(closed == kSlow);
  CHECK(metric_reaching(port, "serve_http_dropped_total{reason=\"header_timeout\"}", kSlow) >= kSlow);
}

TEST_CASE("a body that stops arriving and an idle connection are cut at their deadlines", "[serve][hostile]") {
  ServerProcess server({"--body-timeout-ms", "1500", "--idle-timeout-ms", "1500", "--header-timeout-ms", "60000"});
  const int port = server.port();
  SECTION("body") {
    RawConn c(port);
    REQUIRE(c.send_all(
        "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"in"));
    CHECK(c.closed_within(6000ms));
    CHECK(metric_reaching(port, "serve_http_dropped_total{reason=\"body_timeout\"}", 1) == 1);
  }
  SECTION("idle, after a request") {
    RawConn c(port);
    REQUIRE(c.send_all(get_request("/healthz")));
    REQUIRE(c.read_response());
    CHECK(c.closed_within(6000ms));
    CHECK(metric_reaching(port, "serve_http_dropped_total{reason=\"idle_timeout\"}", 1) >= 1);
  }
  SECTION("idle, never a byte") {
    RawConn c(port);
    CHECK(c.closed_within(6000ms));
    CHECK(metric_reaching(port, "serve_http_dropped_total{reason=\"idle_timeout\"}", 1) >= 1);
  }
}

TEST_CASE("1000 concurrent connections are all answered (real backlog, no thread per connection)", "[serve][hostile]") {
  ServerProcess server({});
  const int port = server.port();
  constexpr int kConns = 1000;
  // Every connection is opened at once (non-blocking connect), then each
  // sends one request and waits for its answer; one poll loop drives all.
  std::vector<RawConn> conns;
  conns.reserve(kConns);
  auto t0 = Clock::now();
  for (int i = 0; i < kConns; ++i) conns.emplace_back(port, /*nonblocking_connect=*/true);
  std::vector<bool> sent(kConns, false), done(kConns, false);
  std::vector<double> latency(kConns, 0);
  std::vector<std::string> in(kConns);
  // Half ask /healthz, half run the model.
  const Rows rows = random_rows(1, 77);
  const std::string requests[2] = {get_request("/healthz"), post_request(body_of(rows))};
  int answered = 0;
  auto deadline = t0 + 40s;
  while (answered < kConns && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    std::vector<int> index;
    for (int i = 0; i < kConns; ++i) {
      if (done[i]) continue;
      fds.push_back({conns[i].fd(), static_cast<short>(sent[i] ? POLLIN : POLLOUT), 0});
      index.push_back(i);
    }
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      int i = index[k];
      if (!fds[k].revents) continue;
      if (!sent[i]) {
        const std::string& request = requests[i % 2];
        if (::send(conns[i].fd(), request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()))
          sent[i] = true;
        else
          done[i] = true;  // refused or reset: counted as unanswered
        continue;
      }
      char buf[4096];
      ssize_t n = recv(conns[i].fd(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) in[i].append(buf, static_cast<size_t>(n));
      auto end = in[i].find("\r\n\r\n");
      bool complete = false;
      if (end != std::string::npos) {
        auto cl = in[i].find("Content-Length: ");
        complete = cl != std::string::npos && cl < end && in[i].size() >= end + 4 + std::stoul(in[i].substr(cl + 16));
      }
      if (complete || n == 0 || (n < 0 && errno != EAGAIN)) {
        done[i] = true;
        if (complete && in[i].rfind("HTTP/1.1 200", 0) == 0 &&
            (i % 2 == 0 || outputs_match(in[i].substr(end + 4), rows))) {
          ++answered;
          latency[i] = std::chrono::duration<double>(Clock::now() - t0).count();
        }
      }
    }
  }
  std::vector<double> ok;
  for (int i = 0; i < kConns; ++i)
    if (latency[i] > 0) ok.push_back(latency[i]);
  std::sort(ok.begin(), ok.end());
  double p99 = ok.empty() ? -1 : ok[std::min(ok.size() - 1, ok.size() * 99 / 100)];
  std::printf(
      "[figure] 1000 concurrent connections (half /healthz, half /v1/infer): %d/%d answered, p99 %.3f s, last %.3f s, "
      "server RSS %.0f MiB with them open\n",
      answered, kConns, p99, ok.empty() ? -1.0 : ok.back(), rss_mib(server.pid()));
  CHECK(answered == kConns);
  // No connection waiting for a free thread (the old server: p99 14.6 s).
  // Generous for the sanitizer builds and a loaded machine; a quiet Release
  // build sees ~0.3 s, a TSan build on 2 loaded cores ~3.4 s.
  CHECK(p99 < 3.0 * kSlowdownFactor);
}

TEST_CASE("at --max-connections new connections wait in the backlog and are served once one closes",
          "[serve][hostile]") {
  ServerProcess server({"--max-connections", "20", "--idle-timeout-ms", "60000"});
  const int port = server.port();
  std::vector<RawConn> idle;
  for (int i = 0; i < 20; ++i) {
    // One request each, so each is surely accepted before the next opens.
    idle.emplace_back(port);
    REQUIRE(idle.back().send_all(get_request("/healthz")));
    REQUIRE(idle.back().read_response());
  }
  RawConn waiting(port);  // completes in the kernel's backlog
  REQUIRE(waiting.send_all(get_request("/healthz")));
  CHECK_FALSE(waiting.read_response(1000ms));  // not accepted while 20 are open
  idle.pop_back();                             // one closes: a slot frees
  auto r = waiting.read_response(5000ms);
  REQUIRE(r);
  CHECK(r->status == 200);
  idle.clear();
  CHECK(metric(get_metrics(port), "serve_http_accept_pauses_total") >= 1);
}

TEST_CASE("one address holds at most --max-connections-per-address; other addresses are still served",
          "[serve][hostile]") {
  ServerProcess server({"--max-connections", "20", "--max-connections-per-address", "4", "--idle-timeout-ms", "60000"});
  const int port = server.port();
  std::vector<RawConn> held;
  for (int i = 0; i < 4; ++i) {
    held.emplace_back(port);
    REQUIRE(held.back().send_all(get_request("/healthz")));
    REQUIRE(held.back().read_response());
  }
  // A fifth from 127.0.0.1 is closed at accept, unanswered.
  RawConn over(port);
  (void)over.send_all(get_request("/healthz"));
  CHECK(over.closed_within(5000ms));
  // Another address is served while 127.0.0.1 holds its share.
  RawConn other(port, false, "127.0.0.2");
  REQUIRE(other.send_all(get_request("/healthz")));
  auto r = other.read_response(5000ms);
  REQUIRE(r);
  CHECK(r->status == 200);
  // A slot of 127.0.0.1 freed is a slot again.
  held.pop_back();
  bool served = false;
  for (int attempt = 0; attempt < 50 && !served; ++attempt) {  // the close reaches the server first
    RawConn again(port);
    if (again.send_all(get_request("/healthz")))
      if (auto a = again.read_response(2000ms)) served = a->status == 200;
    if (!served) std::this_thread::sleep_for(20ms);
  }
  CHECK(served);
  CHECK(metric_reaching(port, "serve_http_address_refusals_total", 1) >= 1);
}

TEST_CASE("garbage floods get 400 and closed connections while legitimate clients are served", "[serve][hostile]") {
  ServerProcess server({});
  const int port = server.port();
  LegitClient legit(port);
  std::mt19937_64 rng(14);
  int flood = 0, refused = 0;
  // At most 2000 connections (each leaves a TIME_WAIT socket for a minute:
  // the machine's other tests need ephemeral ports too), at most 4 s.
  auto until = Clock::now() + 4s;
  while (Clock::now() < until && flood < 2000) {
    std::string junk(64 + rng() % 2048, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    if (flood % 3 == 1) junk = "GET / HTTP/1.1\r\nHost: x\r\n" + junk;  // garbage inside the header
    if (flood % 3 == 2) junk = post_request("{}").substr(0, 60) + junk;
    ++flood;
    RawConn c(port);
    c.send_all(junk, 200ms);
    auto r = c.read_response(3000ms);
    if (r && r->status >= 400 && r->status < 500) ++refused;
    CHECK(c.closed_within(3000ms));
    std::this_thread::sleep_for(1ms);  // spread over the legitimate client's requests
  }
  legit.stop();
  report("garbage flood (at most 2000 connections in 4 s, 64-2112 random bytes each)", legit);
  std::printf("[figure] garbage flood: %d connections, %d answered with a 4xx\n", flood, refused);
  CHECK(flood > 20);
  CHECK(legit.sent >= 5);
  CHECK(legit.ok == legit.sent);
}

TEST_CASE("a peer that never reads its replies is dropped at the write deadline", "[serve][hostile]") {
  ServerProcess server({"--write-timeout-ms", "1000"});
  RawConn c(server.port());
  // Pipelined requests for a 404 that quotes a 12 KB target: 2000 replies
  // (24 MB) outgrow both sockets' buffers, and the test reads nothing.
  const std::string one = get_request("/" + std::string(12000, 'x'));
  std::string burst;
  for (int i = 0; i < 2000; ++i) burst += one;
  c.send_all(burst, 5000ms);  // stalls once the server stops reading: fine
  CHECK(c.closed_within(15000ms));
  CHECK(metric_reaching(server.port(), "serve_http_dropped_total{reason=\"write_timeout\"}", 1) >= 1);
}

TEST_CASE("/metrics prints sums exactly", "[serve][hostile]") {
  CHECK(serve::format_number(1280140.5) == "1280140.5");
  CHECK(serve::format_number(1280140) == "1280140");
  CHECK(serve::format_number(0) == "0");
  for (double v : {0.1 + 0.2, 1.0 / 3, 123456.789012345, 6.02214076e23, 1e-300, 36028797018963968.0 * 3})
    CHECK(std::stod(serve::format_number(v)) == v);
  serve::Histogram h({1, 10});
  h.observe(1280140.25);
  h.observe(0.5);
  std::ostringstream out;
  h.render(out, "x", "help");
  CHECK_THAT(out.str(), Catch::Matchers::Contains("x_sum 1280140.75\n"));
  CHECK_THAT(out.str(), Catch::Matchers::Contains("x_bucket{le=\"1\"} 1\n"));
}
