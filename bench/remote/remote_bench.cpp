// SPDX-License-Identifier: Apache-2.0
// Remote device overhead, measured against the local device and against a
// plain TCP copy of the same bytes over loopback, in one run.
//
//   cmake -B build -DSWITCHYARD_BENCHMARKS=ON && ninja -C build remote_bench
//   build/bench/remote/remote_bench [--mib=64] [--reps=5] [--chunk=BYTES] [--ops=20000]
//                                   [--only=roundtrip|throughput|bulk|mlp] [--warmup=3] [--max-batch=N]
//                                   [--flush-us=N] [--worker=HOST:PORT] [--no-lane]
// (--chunk: transfer_chunk_bytes of the client and the worker; default theirs;
// --only: one section, for profiling it alone; --warmup: unmeasured bulk
// transfers first; --no-lane: every byte over BASP, as before the bulk lane;
// REMOTE_BENCH_VERBOSE=1 prints every transfer)

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "switchyard/switchyard.hpp"
#include "worker_process.hpp"

namespace sy = switchyard;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One read round trip of a 1-element op chain of `ops` ops.
double tiny_op_us(sy::Device dev, int reps) {
  auto x = dev.full({1}, 1);
  (void)x.to_vector<float>();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    (void)(x + 1.0).to_vector<float>();
    t.push_back(seconds_since(start) * 1e6);
  }
  return median(t);
}

// Throughput of fire-and-forget tiny ops, then one sync.
double op_throughput(sy::Device dev, int n) {
  auto x = dev.full({1}, 0);
  dev.sync().get();
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) x = x + 1.0;
  dev.sync().get();
  return n / seconds_since(start);
}

// GB/s of local -> remote (to, then a read of its last element: a sync alone
// would not wait for the bridged bytes; a sum, read before session 22, added
// a pass over the tensor) and remote -> local (read).
std::pair<double, double> bulk(sy::Device local, sy::Device remote, size_t bytes, int reps, int warmup) {
  auto n = static_cast<int64_t>(bytes / 4);
  auto src = local.ones({n});
  local.sync().get();
  std::vector<double> up, down;
  // The first transfers grow CAF's per-connection buffers (a write buffer
  // only ever grows, by doubling, in fresh pages): warm them up unmeasured,
  // as a service's long-lived connection would be.
  for (int i = 0; i < warmup; ++i) {
    auto there = src.to(remote);
    (void)there.slice(0, {n - 1, n}).read().get();
    (void)there.read().get();
  }
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    auto there = src.to(remote);
    (void)there.slice(0, {n - 1, n}).read().get();
    up.push_back(bytes / seconds_since(start) / 1e9);
    start = Clock::now();
    auto data = there.read().get();
    down.push_back(bytes / seconds_since(start) / 1e9);
    if (std::getenv("REMOTE_BENCH_VERBOSE") != nullptr)
      std::printf("  rep %d: up %.2f GB/s, down %.2f GB/s\n", i, up.back(), down.back());
  }
  return {median(up), median(down)};
}

// The same bytes through one loopback TCP connection, no framing. The
// receiver reads into one 1 MiB buffer that stays in cache, or, `keep`,
// into a 64 MiB-sized block (touched before, as a pool's block is) that
// holds the whole transfer afterwards, as a read's result must.
double plain_tcp(size_t bytes, int reps, bool keep) {
  int server = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(server, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(server, 1);
  std::vector<char> out(bytes, 1);
  std::thread receiver([&] {
    int c = accept(server, nullptr, nullptr);
    std::vector<char> in(keep ? bytes : size_t{1} << 20, 0);
    for (int r = 0; r < reps; ++r) {
      size_t got = 0;
      while (got < bytes) {
        char* to = keep ? in.data() + got : in.data();
        auto k = recv(c, to, keep ? bytes - got : std::min(in.size(), bytes - got), 0);
        if (k <= 0) break;
        got += static_cast<size_t>(k);
      }
      char ack = 1;
      send(c, &ack, 1, 0);
    }
    close(c);
  });
  int s = socket(AF_INET, SOCK_STREAM, 0);
  connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto start = Clock::now();
    size_t sent = 0;
    while (sent < bytes) {
      auto k = send(s, out.data() + sent, bytes - sent, 0);
      if (k <= 0) break;
      sent += static_cast<size_t>(k);
    }
    char ack;
    recv(s, &ack, 1, 0);
    t.push_back(bytes / seconds_since(start) / 1e9);
  }
  close(s);
  receiver.join();
  close(server);
  return median(t);
}

// MLP 784-512-512-10 forward on batch 64; the input comes from the client
// each time and the logits go back to it.
double mlp_ms(sy::Device dev, int reps) {
  dev.seed(1);
  auto w1 = dev.uniform({512, 784}, -0.05, 0.05), b1 = dev.zeros({512});
  auto w2 = dev.uniform({512, 512}, -0.05, 0.05), b2 = dev.zeros({512});
  auto w3 = dev.uniform({10, 512}, -0.05, 0.05), b3 = dev.zeros({10});
  std::vector<float> input(64 * 784, 0.5f);
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {
    auto start = Clock::now();
    auto x = dev.tensor<float>(input, {64, 784});
    auto y = x.linear(w1, b1).relu().linear(w2, b2).relu().linear(w3, b3);
    auto out = y.to_vector<float>();
    if (i > 0) t.push_back(seconds_since(start) * 1e3);  // the first warms up
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  size_t mib = 64;
  int reps = 5;
  size_t chunk = 0;
  int ops = 20000;
  int warmup = 3;
  size_t max_batch = 0;
  long flush_us = -1;
  std::string external;
  std::string only;
  bool lane = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--mib=", 0) == 0) mib = std::stoul(a.substr(6));
    if (a.rfind("--reps=", 0) == 0) reps = std::stoi(a.substr(7));
    if (a.rfind("--chunk=", 0) == 0) chunk = std::stoul(a.substr(8));
    if (a.rfind("--ops=", 0) == 0) ops = std::stoi(a.substr(6));
    if (a.rfind("--warmup=", 0) == 0) warmup = std::stoi(a.substr(9));
    if (a.rfind("--max-batch=", 0) == 0) max_batch = std::stoul(a.substr(12));
    if (a.rfind("--flush-us=", 0) == 0) flush_us = std::stol(a.substr(11));
    if (a.rfind("--only=", 0) == 0) only = a.substr(7);
    if (a.rfind("--worker=", 0) == 0) external = a.substr(9);
    if (a == "--no-lane") lane = false;
  }
  std::vector<std::string> worker_args{"--devices=cpu:0"};
  if (chunk > 0) worker_args.push_back("--transfer-chunk-bytes=" + std::to_string(chunk));
  // --worker=HOST:PORT: a worker started elsewhere (under a profiler, say)
  // instead of one of our own.
  std::optional<sy::testing::WorkerProcess> own;
  if (external.empty()) own.emplace(worker_args);
  const std::string host = own ? own->host() : external.substr(0, external.rfind(':'));
  const auto port = own ? own->port() : static_cast<uint16_t>(std::stoul(external.substr(external.rfind(':') + 1)));
  sy::RuntimeOptions o;
  o.devices = {"cpu:0"};
  if (chunk > 0) o.transfer_chunk_bytes = chunk;
  if (max_batch > 0) o.max_batch = max_batch;
  if (flush_us >= 0) o.flush_interval = std::chrono::microseconds(flush_us);
  if (!lane) o.bulk_lane_min_bytes = 0;
  sy::Runtime rt(o);
  rt.connect(host, port);
  auto local = rt.device("cpu:0");
  auto remote = rt.device(host + ":" + std::to_string(port) + "/cpu:0");
  std::printf("remote = %s (separate process on loopback%s)\n", remote.name().c_str(), lane ? "" : ", no bulk lane");
  auto wanted = [&](const char* section) { return only.empty() || only == section; };
  if (wanted("roundtrip"))
    std::printf("tiny op round trip (op + read, median of 200): local %.1f us, remote %.1f us\n",
                tiny_op_us(local, 200), tiny_op_us(remote, 200));
  if (wanted("throughput"))
    std::printf("tiny op throughput (%d chained adds + sync): local %.0f ops/s, remote %.0f ops/s\n", ops,
                op_throughput(local, ops), op_throughput(remote, ops));
  if (wanted("bulk")) {
    size_t bytes = mib << 20;
    auto [up, down] = bulk(local, remote, bytes, reps, warmup);
    std::printf(
        "bulk %zu MiB (median of %d after %d unmeasured): local->remote %.2f GB/s, remote->local %.2f GB/s, plain "
        "TCP %.2f GB/s (into a %zu MiB block the reader keeps: %.2f GB/s)\n",
        mib, reps, warmup, up, down, plain_tcp(bytes, reps, false), mib, plain_tcp(bytes, reps, true));
  }
  if (wanted("mlp"))
    std::printf(
        "MLP 784-512-512-10 batch 64 forward incl. input upload + logits read (median of %d): local %.2f ms, "
        "remote %.2f ms\n",
        reps * 4, mlp_ms(local, reps * 4), mlp_ms(remote, reps * 4));
  return 0;
}
