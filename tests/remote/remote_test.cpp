// SPDX-License-Identifier: Apache-2.0
// Remote devices: worker processes on 127.0.0.1, reached over caf::io.

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "support/watchdog.hpp"
#include "switchyard/messages/protocol.hpp"
#include "switchyard/switchyard.hpp"
#include "worker_process.hpp"

namespace sy = switchyard;
using sy::testing::WorkerProcess;
using namespace std::chrono_literals;

namespace {

sy::RuntimeOptions local_cpu() {
  sy::RuntimeOptions o;
  o.devices = {"cpu:0"};
  o.cpu_threads = 1;
  return o;
}

std::vector<float> iota(size_t n, float start = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// Bytes this process received over TCP, summed over its open sockets (the
// kernel's count, so it includes anything CAF forwards for other nodes).
uint64_t tcp_bytes_received() {
  uint64_t total = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return 0;
  while (auto* e = readdir(dir)) {
    int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && len >= offsetof(tcp_info, tcpi_bytes_received) + 8)
      total += info.tcpi_bytes_received;
  }
  closedir(dir);
  return total;
}

// A worker with a small --max-queued-bytes stops reading a connection
// while its device is busy and resumes once the device has taken what
// came: work queued behind a slow op (2 MiB of small ops and a 1 MiB upload
// in parts, far past a bound of 64 KiB) must come out whole and in order.
// Returns how many times the worker paused, from its log at exit.
long queued_behind_slow_op(WorkerProcess& w, sy::Runtime& rt) {
  auto dev = rt.device(w.address() + "/cpu:0");
  auto big = dev.full({640, 640}, 1.0 / 640);
  auto slow = big;
  for (int i = 0; i < 8; ++i) slow = slow.matmul(big);  // ~0.5 GFLOP each
  auto x = dev.zeros({4});
  for (int i = 0; i < 20000; ++i) x = x + 1.0;
  auto up = rt.device("cpu:0").tensor<float>(iota(256 << 10), {256 << 10}).to(dev);
  auto read = (x + up.slice(0, {0, 4})).read();
  REQUIRE(read.wait_for(60s));
  CHECK(read.get().to_vector<float>() == std::vector<float>{20000, 20001, 20002, 20003});
  CHECK(up.slice(0, {262140, 262144}).to_vector<float>() == std::vector<float>{262140, 262141, 262142, 262143});
  const auto s = slow.slice({{0, 1}, {0, 2}}).to_vector<float>();
  CHECK_THAT(s[0], Catch::WithinRel(1.0f / 640, 1e-3f));
  const auto exit = w.stop_logged("paused (queued bytes) ");
  INFO(exit.log);
  CHECK(exit.clean);
  return exit.counted;
}

sy::Errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sy::Error& e) {
    return e.code();
  }
  return sy::Errc{};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("worker devices appear under host:port names and run ops", "[remote]") {
  WorkerProcess w({"--devices=cpu:0,cpu:1", "--threads=1"});
  sy::Runtime rt(local_cpu());
  auto added = rt.connect(w.host(), w.port());
  REQUIRE(added.size() == 2);
  CHECK(added[0].name() == w.address() + "/cpu:0");
  CHECK(added[0].kind() == "cpu");
  auto dev = rt.device(w.address() + "/cpu:1");
  auto x = dev.tensor<float>(iota(6), {2, 3});
  auto y = (x * 2.0 + 1.0).sum({1});
  CHECK(y.to_vector<float>() == std::vector<float>{9, 27});
  auto s = dev.stats().get();
  CHECK(s.device == w.address() + "/cpu:1");  // as the client knows it
  CHECK(s.ops_executed >= 3);
  rt.sync_all().get();
}

TEST_CASE("a failure on a worker names the tensor of the op where it began", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  (void)rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  auto x = dev.tensor<float>(iota(3), {3});
  auto bad = x.index_select(0, dev.tensor<int64_t>({0, 9}, {2}));
  auto later = (bad + 1.0).to(rt.device("cpu:0")).sum();
  try {
    (void)later.read().get();
    FAIL("expected the worker's failure");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::index_out_of_range);
    CHECK(e.tensor() == bad.id());
    CHECK_THAT(std::string(e.what()), Catch::Contains(w.address() + "/cpu:0"));
  }
}

TEST_CASE("a recording replays on a worker device and leaves nothing there", "[remote]") {
  sy::testing::Watchdog dog(60s, "remote replay");
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  (void)rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  auto w1 = dev.tensor<float>(iota(6, 1), {3, 2});
  auto x = dev.tensor<float>(iota(6), {2, 3});
  auto layer = [&](std::span<const sy::Tensor> in) {
    auto h = (in[0].matmul(w1) - 4.0).relu();
    return std::vector<sy::Tensor>{h * 2.0, h.sum()};
  };
  auto base_handles = dev.stats().get().live_handles;
  std::vector<sy::Tensor> first;
  auto rec = sy::Recording::record(std::span<const sy::Tensor>(&x, 1), layer, first);
  REQUIRE(rec.replayable());
  for (int i = 0; i < 10; ++i) {
    auto xi = dev.tensor<float>(iota(6, static_cast<float>(i)), {2, 3});
    auto direct = layer(std::span<const sy::Tensor>(&xi, 1));
    auto replayed = rec.replay(std::span<const sy::Tensor>(&xi, 1));
    CHECK(replayed[0].to_vector<float>() == direct[0].to_vector<float>());
    CHECK(replayed[1].to_vector<float>() == direct[1].to_vector<float>());
  }
  // A recording of a body that replays this one (its ops pass the submit
  // hooks on this path: recorded once, not twice).
  auto outer_body = [&](std::span<const sy::Tensor> in) {
    auto r = rec.replay(in);
    return std::vector<sy::Tensor>{r[0] + 1.0};
  };
  std::vector<sy::Tensor> outer_first;
  auto outer = sy::Recording::record(std::span<const sy::Tensor>(&x, 1), outer_body, outer_first);
  INFO(outer.why_not());
  REQUIRE(outer.replayable());
  for (int i = 0; i < 3; ++i) {
    auto xi = dev.tensor<float>(iota(6, static_cast<float>(2 * i)), {2, 3});
    CHECK(outer.replay(std::span<const sy::Tensor>(&xi, 1))[0].to_vector<float>() ==
          outer_body(std::span<const sy::Tensor>(&xi, 1))[0].to_vector<float>());
  }
  // The same recordings on the local device hold as many ops.
  auto local = rt.device("cpu:0");
  auto w1_local = local.tensor<float>(iota(6, 1), {3, 2});
  auto x_local = local.tensor<float>(iota(6), {2, 3});
  auto layer_local = [&](std::span<const sy::Tensor> in) {
    auto h = (in[0].matmul(w1_local) - 4.0).relu();
    return std::vector<sy::Tensor>{h * 2.0, h.sum()};
  };
  std::vector<sy::Tensor> local_first;
  auto inner_local = sy::Recording::record(std::span<const sy::Tensor>(&x_local, 1), layer_local, local_first);
  auto outer_local = sy::Recording::record(
      std::span<const sy::Tensor>(&x_local, 1),
      [&](std::span<const sy::Tensor> in) {
        auto r = inner_local.replay(in);
        return std::vector<sy::Tensor>{r[0] + 1.0};
      },
      local_first);
  CHECK(inner_local.size() == rec.size());
  CHECK(outer_local.size() == outer.size());
  outer_first.clear();
  outer = sy::Recording();
  first.clear();
  rec = sy::Recording();
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    dev.sync().get();
    back = dev.stats().get().live_handles == base_handles;
    if (!back) std::this_thread::sleep_for(5ms);
  }
  CHECK(back);
}

TEST_CASE("a local failure bridged to a worker device of the same name keeps its device", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  auto remote = rt.connect(w.host(), w.port())[0];
  auto cpu0 = rt.device("cpu:0");
  // Failed on the local cpu:0; the worker's device is its own cpu:0 too:
  // the message read "127.0.0.1:P/cpu:0: ..." once it had crossed.
  auto y = cpu0.tensor<float>({1, 2, 3}, {3}).index_select(0, cpu0.tensor<int64_t>({4}, {1}));
  for (const auto& t : {y, y.to(remote), y.to(remote).to(cpu0), (y.to(remote) + 1.0f).to(cpu0)}) {
    auto f = t.read();
    REQUIRE(f.wait_for(60s));
    try {
      (void)f.get();
      FAIL("no error");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::index_out_of_range);
      CHECK_THAT(e.what(), Catch::StartsWith("cpu:0: index_select: index 4"));
    }
  }
  // A failure on the worker still names the worker's device.
  auto z = remote.tensor<float>({1, 2, 3}, {3}).index_select(0, remote.tensor<int64_t>({7}, {1}));
  auto g = z.to(cpu0).read();
  REQUIRE(g.wait_for(60s));
  CHECK_THROWS_WITH(g.get(), Catch::StartsWith(w.address() + "/cpu:0: index_select: index 7"));
}

TEST_CASE("SWITCHYARD_WORKERS connects at start", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  // Spaces around entries and empty entries are allowed.
  const std::string list = " , " + w.address() + " ,,";
  setenv("SWITCHYARD_WORKERS", list.c_str(), 1);
  std::unique_ptr<sy::Runtime> rt;
  REQUIRE_NOTHROW(rt = std::make_unique<sy::Runtime>(local_cpu()));
  unsetenv("SWITCHYARD_WORKERS");
  CHECK(rt->unavailable().empty());
  CHECK(rt->devices().size() == 2);
  CHECK(rt->device(w.address() + "/cpu:0").zeros({3}).to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("seeded random ops on a worker match the local device", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  auto local = rt.device("cpu:0"), remote = rt.device(w.address() + "/cpu:0");
  local.seed(7);
  remote.seed(7);
  auto a = local.uniform({64}, -1, 1).to_vector<float>();
  auto b = remote.uniform({64}, -1, 1).to_vector<float>();
  CHECK(a == b);
}

TEST_CASE("bridges move tensors local to worker and back", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  auto local = rt.device("cpu:0"), remote = rt.device(w.address() + "/cpu:0");
  auto x = local.tensor<float>(iota(1000), {10, 100});
  auto there = (x.to(remote) + 1.0).matmul(remote.ones({100, 1}));
  auto back = there.to(local) * 0.5;
  // Bounded, and on a hang the stats say which side holds what.
  auto read = back.read();
  if (!read.wait_for(30s)) {
    auto describe = [](sy::Device& d) {
      auto s = d.stats();
      if (!s.wait_for(5s)) return std::string("no stats within 5 s");
      auto v = s.get();
      return v.device + ": queue_depth " + std::to_string(v.queue_depth) + ", live_handles " +
             std::to_string(v.live_handles) + ", bridged in " + std::to_string(v.bytes_bridged_in) + " out " +
             std::to_string(v.bytes_bridged_out);
    };
    FAIL("the read after two bridges did not complete in 30 s; " << describe(local) << "; " << describe(remote));
  }
  auto v = read.get().to_vector<float>();
  REQUIRE(v.size() == 10);
  for (int r = 0; r < 10; ++r) CHECK(v[r] == Approx(0.5 * (100 * (100 * r) + 4950 + 100)));
  CHECK(remote.stats().get().bytes_bridged_in == 1000 * sizeof(float));
  CHECK(remote.stats().get().bytes_bridged_out == 10 * sizeof(float));
}

TEST_CASE("every dtype crosses to a worker and back bit for bit and computes there", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  auto local = rt.device("cpu:0"), remote = rt.device(w.address() + "/cpu:0");
  const std::vector<double> v = {-2.5, 0.1, 127, -128, 65504, 3, 0, 1};
  for (auto t : sy::all_dtypes) {
    INFO(sy::name_of(t));
    CHECK(remote.dtype_support(t).storage);
    auto x = local.tensor(v, {8}).cast(t);
    auto want = x.read().get();
    // Uploaded as data, bridged, computed on the worker, bridged back.
    auto uploaded = remote.from_data(want);
    auto bridged = x.to(remote);
    auto got = bridged.to(local).read();
    REQUIRE(got.wait_for(30s));
    auto back = got.get();
    CHECK(back.dtype == t);
    CHECK(std::memcmp(back.bytes.data(), want.bytes.data(), want.bytes.size()) == 0);
    auto up = uploaded.read();
    REQUIRE(up.wait_for(30s));
    CHECK(std::memcmp(up.get().bytes.data(), want.bytes.data(), want.bytes.size()) == 0);
    if (t != sy::DType::boolean) {
      auto sum_there = bridged.sum().read();
      REQUIRE(sum_there.wait_for(30s));
      CHECK(sum_there.get().at(0) == x.sum().item<double>());
    }
  }
}

// A worker that saw a local runner (a bridge's target or a message's sender)
// made CAF's BASP broker monitor it; a broker stopped before it read that
// runner's down message kept a reference to it, and ~Runtime waited forever
// for the detached runner (about 1 run in 30 of the test above, on two
// loaded cores; Core::shut_down explains the order that prevents it).
TEST_CASE("a runtime whose runner a worker has seen shuts down every time", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  constexpr int runs = 60;
  sy::testing::Watchdog watchdog(std::chrono::seconds(50),
                                 "60 runtimes that bridged to a worker and back, each destroyed");
  for (int i = 0; i < runs; ++i) {
    sy::Runtime rt(local_cpu());
    rt.connect(w.host(), w.port());
    auto local = rt.device("cpu:0"), remote = rt.device(w.address() + "/cpu:0");
    auto x = local.tensor<float>(iota(64), {64});
    auto back = (x.to(remote) + 1.0).to(local);
    auto read = back.read();
    REQUIRE(read.wait_for(10s));
    REQUIRE(read.get().to_vector<float>()[63] == 64.0f);
  }  // each ~Runtime here is what used to hang
}

TEST_CASE("a worker-to-worker bridge does not pass through the client", "[remote]") {
  WorkerProcess w1({"--devices=cpu:0", "--threads=1"});
  WorkerProcess w2({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  rt.connect(w1.host(), w1.port());
  rt.connect(w2.host(), w2.port());
  auto d1 = rt.device(w1.address() + "/cpu:0"), d2 = rt.device(w2.address() + "/cpu:0");
  constexpr int64_t n = 4 << 20;  // 16 MiB of f32
  auto big = d1.ones({n});
  d1.sync().get();
  auto before = tcp_bytes_received();
  auto moved = big.to(d2);
  auto total = moved.sum().to_vector<float>();
  auto received = tcp_bytes_received() - before;
  CHECK(total[0] == Approx(static_cast<double>(n)));
  CHECK(d2.stats().get().bytes_bridged_in == n * sizeof(float));
  CHECK(d1.stats().get().bytes_bridged_out == n * sizeof(float));
  // Control messages only: far below the 16 MiB that moved.
  CHECK(received < 256 * 1024);
  // The counter does see tensor bytes when they do come here.
  before = tcp_bytes_received();
  CHECK(moved.read().get().bytes.size() == n * sizeof(float));
  CHECK(tcp_bytes_received() - before >= n * sizeof(float));
}

TEST_CASE("each client's ops reach a worker in order across many batches", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::RuntimeOptions o = local_cpu();
  o.max_batch = 16;  // many messages
  sy::Runtime rt(o);
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  // A runner fails an op whose input does not exist yet, so any reordering
  // of batches shows up as an unknown_tensor error instead of 500.
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      auto x = dev.full({4}, t);
      for (int i = 0; i < 500; ++i) x = x + 1.0;
      if (x.to_vector<float>() == std::vector<float>(4, 500.0f + t)) ++good;
    });
  for (auto& th : threads) th.join();
  CHECK(good == 3);
  CHECK(dev.stats().get().ops_failed == 0);
}

TEST_CASE("a batch longer than one message may carry reaches a worker whole and in order", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::RuntimeOptions o = local_cpu();
  // One batch of every op: nothing but the read sends it.
  o.max_batch = 200000;
  o.flush_interval = std::chrono::minutes(5);
  sy::Runtime rt(o);
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  const int n = static_cast<int>(sy::detail::max_wire_ops) + 4000;
  auto x = dev.full({2}, 0);
  for (int i = 0; i < n; ++i) x = x + 1.0;
  auto got = x.read();
  REQUIRE(got.wait_for(60s));
  CHECK(got.get().to_vector<float>() == std::vector<float>(2, static_cast<float>(n)));
  auto stats = dev.stats();
  REQUIRE(stats.wait_for(10s));
  CHECK(stats.get().ops_failed == 0);
  CHECK(stats.get().ops_executed >= static_cast<uint64_t>(n));
}

TEST_CASE("a killed worker fails pending futures with device lost; the rest keeps working", "[remote]") {
  auto w = std::make_unique<WorkerProcess>(std::vector<std::string>{"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  rt.connect(w->host(), w->port());
  auto name = w->address() + "/cpu:0";
  auto remote = rt.device(name);
  auto local = rt.device("cpu:0");
  // Enough work that it is still running when the worker dies.
  auto a = remote.uniform({768, 768}, -1, 1);
  auto acc = a;
  for (int i = 0; i < 200; ++i) acc = acc.matmul(a).tanh();
  auto pending = acc.read();
  auto synced = remote.sync();
  auto from_remote = acc.to(local).sum().read();
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(remote.lost());
  w->stop(SIGKILL);
  REQUIRE(pending.wait_for(10s));
  REQUIRE(synced.wait_for(10s));
  REQUIRE(from_remote.wait_for(10s));
  auto msg = message_of([&] { (void)pending.get(); });
  CHECK(msg.find("device " + name + " lost") != std::string::npos);
  CHECK(code_of([&] { (void)synced.get(); }) == sy::Errc::device_lost);
  CHECK(code_of([&] { (void)from_remote.get(); }) == sy::Errc::device_lost);
  // Removed: not listed, lookups and new ops fail clearly.
  CHECK(remote.lost());
  CHECK_FALSE(local.lost());
  CHECK(rt.devices().size() == 1);
  CHECK(code_of([&] { (void)rt.device(name); }) == sy::Errc::device_lost);
  CHECK(code_of([&] { (void)remote.zeros({2}); }) == sy::Errc::device_lost);
  CHECK(code_of([&] { remote.seed(1); }) == sy::Errc::device_lost);  // not an op, checked too
  CHECK(code_of([&] { (void)acc.read().get(); }) == sy::Errc::device_lost);
  // The local device never noticed.
  CHECK(local.ones({3}).sum().to_vector<float>() == std::vector<float>{3});
  rt.sync_all().get();
  // Reconnecting to a new worker gives fresh devices.
  WorkerProcess again({"--devices=cpu:0", "--threads=1"});
  auto added = rt.connect(again.host(), again.port());
  REQUIRE(added.size() == 1);
  CHECK(added[0].ones({2}).to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("reads in parts: concurrent readers of one tensor each get it whole and a killed worker fails the read",
          "[remote]") {
  // Parts of 64 KiB, three in flight per read after the first: readers of
  // one tensor share the worker's snapshot and its count of readers.
  auto w = std::make_unique<WorkerProcess>(std::vector<std::string>{"--devices=cpu:0", "--threads=1"});
  auto options = local_cpu();
  options.transfer_chunk_bytes = 64 * 1024;
  options.bulk_lane_min_bytes = 0;  // parts over BASP, not the bulk lane
  sy::Runtime rt(options);
  rt.connect(w->host(), w->port());
  auto name = w->address() + "/cpu:0";
  auto remote = rt.device(name);
  constexpr int64_t n = 3 * 256 * 1024 + 7;  // 3 MiB + 28 bytes: a short last part
  auto x = remote.arange(0, n);
  std::vector<sy::Future<sy::TensorData>> reads;
  for (int i = 0; i < 4; ++i) reads.push_back(x.read());
  auto y = x * 2.0;  // pending while its read starts
  auto doubled = y.read();
  for (auto& r : reads) {
    REQUIRE(r.wait_for(20s));
    auto v = r.get().to_vector<float>();
    REQUIRE(v.size() == static_cast<size_t>(n));
    bool exact = true;
    for (int64_t i = 0; i < n; ++i) exact = exact && v[static_cast<size_t>(i)] == static_cast<float>(i);
    CHECK(exact);
  }
  REQUIRE(doubled.wait_for(20s));
  auto d = doubled.get().to_vector<float>();
  REQUIRE(d.size() == static_cast<size_t>(n));
  CHECK(d.back() == static_cast<float>(2 * (n - 1)));
  // The snapshots went with their last parts: nothing stays on the worker
  // but the two tensors.
  y = sy::Tensor();
  x = sy::Tensor();
  remote.sync().get();
  {
    // Parts of 1,000 bytes on both sides: off Bytes' 64-byte alignment, so
    // the parts are copies, not views; uploads and reads (the client's
    // parts) and a bridge back (the worker's) still arrive whole.
    WorkerProcess odd_worker({"--devices=cpu:0", "--threads=1", "--transfer-chunk-bytes=1000"});
    auto odd_options = local_cpu();
    odd_options.transfer_chunk_bytes = 1000;
    odd_options.bulk_lane_min_bytes = 0;  // parts over BASP, not the bulk lane
    sy::Runtime odd(odd_options);
    odd.connect(odd_worker.host(), odd_worker.port());
    auto there = odd.device(odd_worker.address() + "/cpu:0");
    std::vector<float> values(10007);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
    auto up = there.tensor(values, {static_cast<int64_t>(values.size())});
    auto read = up.read();
    REQUIRE(read.wait_for(20s));
    CHECK(read.get().to_vector<float>() == values);
    auto back = (up + 1.0).to(odd.cpu()).read();
    REQUIRE(back.wait_for(20s));
    auto b = back.get().to_vector<float>();
    REQUIRE(b.size() == values.size());
    CHECK(b.front() == values.front() + 1.0f);
    CHECK(b.back() == values.back() + 1.0f);
  }
  // 128 MiB in parts of 8 KiB (16,384 parts, three in flight): the worker
  // dies mid-read.
  auto options_small = local_cpu();
  options_small.transfer_chunk_bytes = 8 * 1024;
  options_small.bulk_lane_min_bytes = 0;  // parts over BASP, not the bulk lane
  sy::Runtime rt2(options_small);
  rt2.connect(w->host(), w->port());
  auto big = rt2.device(name).arange(0, int64_t{32} << 20);
  auto reading = big.read();
  std::this_thread::sleep_for(150ms);
  w->stop(SIGKILL);
  REQUIRE(reading.wait_for(10s));
  CHECK(code_of([&] { (void)reading.get(); }) == sy::Errc::device_lost);
  // The runtime goes on.
  CHECK(rt2.cpu().ones({2}).to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("a worker frees the tensors of a client that went away and keeps serving others", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime observer(local_cpu());
  observer.connect(w.host(), w.port());
  auto dev = observer.device(w.address() + "/cpu:0");
  {
    sy::Runtime client(local_cpu());
    client.connect(w.host(), w.port());
    auto d = client.device(w.address() + "/cpu:0");
    std::vector<sy::Tensor> keep;
    for (int i = 0; i < 10; ++i) keep.push_back(d.ones({1024}));
    d.sync().get();
    CHECK(dev.stats().get().live_handles >= 10);
    // The runtime closes while `keep` still holds tensors: no drops are sent.
    client.sync_all().get();
  }
  uint64_t live = 1;
  for (int i = 0; i < 100 && live != 0; ++i) {
    live = dev.stats().get().live_handles;
    if (live != 0) std::this_thread::sleep_for(20ms);
  }
  CHECK(live == 0);
  CHECK(dev.full({2}, 4).to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("a worker frees the tensors of a client process that was killed", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime observer(local_cpu());
  observer.connect(w.host(), w.port());
  auto dev = observer.device(w.address() + "/cpu:0");
  sy::testing::ChildProcess client({SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "25"});
  REQUIRE(client.read_line(30s) == "ready");
  CHECK(dev.stats().get().live_handles == 25);
  // SIGKILL: no drop, no close, no goodbye; only the connection ends.
  client.stop(SIGKILL);
  uint64_t live = 1;
  for (int i = 0; i < 250 && live != 0; ++i) {
    live = dev.stats().get().live_handles;
    if (live != 0) std::this_thread::sleep_for(20ms);
  }
  CHECK(live == 0);
  CHECK(dev.stats().get().live_bytes == 0);
  CHECK(dev.full({2}, 4).to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("a client killed in the middle of an upload leaves nothing waiting on the worker", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime observer(local_cpu());
  observer.connect(w.host(), w.port());
  auto dev = observer.device(w.address() + "/cpu:0");
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    sy::testing::ChildProcess client(
        {SWITCHYARD_CLIENT_PROCESS_PATH, w.host(), std::to_string(w.port()), "4", "upload"});
    REQUIRE(client.read_line(30s) == "ready");
    REQUIRE(client.read_line(30s) == "uploading");
    // Killed once part of the tensor is on the worker and ops wait behind
    // it (if the upload won the race, the checks below hold all the same).
    for (int i = 0; i < 2000 && dev.stats().get().bytes_staged == 0; ++i) std::this_thread::sleep_for(1ms);
    client.stop(SIGKILL);
    sy::DeviceStats s;
    for (int i = 0; i < 250; ++i) {
      s = dev.stats().get();
      if (s.live_handles == 0 && s.queue_depth == 0 && s.bytes_staged == 0) break;
      std::this_thread::sleep_for(20ms);
    }
    CHECK(s.live_handles == 0);
    CHECK(s.queue_depth == 0);
    CHECK(s.bytes_staged == 0);
    CHECK(s.live_bytes == 0);
  }
  CHECK(dev.full({2}, 4).to_vector<float>() == std::vector<float>{4, 4});
}

TEST_CASE("connecting to a dead address or twice gives clear errors", "[remote]") {
  sy::Runtime rt(local_cpu());
  uint16_t port = 0;
  {
    WorkerProcess w({"--devices=cpu:0", "--threads=1"});
    port = w.port();
    rt.connect(w.host(), w.port());
    CHECK(code_of([&] { rt.connect(w.host(), w.port()); }) == sy::Errc::invalid_argument);
    // The same worker by another name is the same worker.
    const std::string other = w.host() == "localhost" ? "127.0.0.1" : "localhost";
    CHECK_THAT(message_of([&] { rt.connect(other, w.port()); }),
               Catch::Contains("already connected to worker " + other + ":" + std::to_string(w.port())));
    CHECK(rt.devices().size() == 2);  // cpu:0 and the worker's one device, once
  }
  auto msg = message_of([&] { rt.connect("127.0.0.1", port); });
  CHECK(msg.find("cannot connect to worker 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  sy::RuntimeOptions bad = local_cpu();
  bad.workers = {"no-port-here"};
  CHECK(code_of([&] { sy::Runtime r(bad); }) == sy::Errc::invalid_argument);
}

// --- raw CAF peers: what a buggy or hostile client could send -------------

namespace {

// Declares a huge payload but carries 16 bytes; named like the real
// TensorData so the worker decodes it with its own inspector.
struct LyingBytes {};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LyingBytes&) {
  if constexpr (std::is_same_v<Inspector, caf::serializer>) {
    size_t n = size_t{1} << 40;
    if (auto err = f.begin_sequence(n)) return err;
    char junk[16] = {};
    if (auto err = f.apply_raw(sizeof(junk), junk)) return err;
    return f.end_sequence();
  } else {
    return f(caf::meta::type_name("lying_bytes"));
  }
}
struct LyingTensorData {
  sy::Shape shape{std::vector<int64_t>{1 << 20, 1 << 20}};
  sy::DType dtype = sy::DType::f32;
  LyingBytes bytes;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LyingTensorData& x) {
  return f(caf::meta::type_name("tensor_data"), x.shape, x.dtype, x.bytes);
}

struct RawConfig : caf::actor_system_config {
  explicit RawConfig(bool lying) {
    load<caf::io::middleman>();
    set("logger.verbosity", caf::atom("quiet"));
    if (lying) {
      add_message_type<sy::TensorId>("sy_tensor_id");
      add_message_type<LyingTensorData>("sy_tensor_data");
    } else {
      sy::register_message_types(*this);
    }
  }
};

/// Says hello as a raw client and returns the worker's runners (none on failure).
std::vector<caf::actor> hello_runners(caf::scoped_actor& self, const caf::actor& entry) {
  std::vector<caf::actor> runners;
  self->request(entry, 5s, sy::hello_atom::value, sy::protocol_version, caf::actor_cast<caf::actor>(self))
      .receive([&](uint32_t, std::vector<std::string>&, std::vector<std::string>&, std::vector<caf::actor>& r, uint16_t,
                   std::string&) { runners = r; },
               [](caf::error&) {});
  return runners;
}

// A client speaking CAF to a worker directly, without a Runtime, so it can
// send what a Runtime never would. `lying`: see RawConfig.
struct RawPeer {
  RawPeer(const WorkerProcess& w, bool lying) : cfg(lying), sys(cfg), self(sys) {
    auto e = sys.middleman().remote_actor(w.host(), w.port());
    REQUIRE(e);
    entry = *e;
  }
  /// The worker's one runner, after a hello.
  sy::runner_actor runner() {
    auto runners = hello_runners(self, entry);
    REQUIRE(runners.size() == 1);
    return caf::actor_cast<sy::runner_actor>(runners[0]);
  }
  RawConfig cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  caf::actor entry;
};

}  // namespace

TEST_CASE("a client of another protocol version is refused with a clear error", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  RawConfig cfg(false);
  caf::actor_system sys{cfg};
  auto entry = sys.middleman().remote_actor(w.host(), w.port());
  REQUIRE(entry);
  caf::scoped_actor self{sys};
  std::string error;
  self->request(*entry, 5s, sy::hello_atom::value, sy::protocol_version + 1, caf::actor_cast<caf::actor>(self))
      .receive([](uint32_t, std::vector<std::string>&, std::vector<std::string>&, std::vector<caf::actor>&, uint16_t,
                  std::string&) {},
               [&](caf::error& e) { error = sy::describe(e).message; });
  CHECK(error.find("protocol version mismatch") != std::string::npos);
}

TEST_CASE("malformed messages get errors and the worker keeps serving", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  {
    RawConfig cfg(false);
    caf::actor_system sys{cfg};
    auto entry = sys.middleman().remote_actor(w.host(), w.port());
    REQUIRE(entry);
    caf::scoped_actor self{sys};
    std::string error;
    // Wrong types to the entry actor.
    self->request(*entry, 5s, std::string("gimme"), 42)
        .receive([](caf::message&) {}, [&](caf::error& e) { error = sy::describe(e).message; });
    CHECK(error.find("unexpected message") != std::string::npos);
    // An unknown tensor id on a runner.
    auto runners = hello_runners(self, *entry);
    REQUIRE(runners.size() == 1);
    sy::Errc code{};
    self->request(runners[0], 5s, sy::read_atom::value, sy::TensorId{123456789})
        .receive([](sy::TensorData&) {}, [&](caf::error& e) { code = sy::describe(e).code; });
    CHECK(code == sy::Errc::unknown_tensor);
    // An op naming inputs that do not exist: its output is poisoned, nothing crashes.
    sy::TensorIr in{sy::TensorId{999}, sy::Shape{{4}}, sy::DType::f32, sy::TensorStatus::read_only};
    sy::TensorIr out{sy::TensorId{1000}, sy::Shape{{4}}, sy::DType::f32, sy::TensorStatus::not_init};
    std::vector<sy::OperationIr> ops{sy::OperationIr{sy::UnaryOp{sy::UnaryKind::neg, in, out, 0, 0}}};
    self->send(caf::actor_cast<sy::runner_actor>(runners[0]), sy::submit_atom::value, ops);
    code = {};
    self->request(runners[0], 5s, sy::read_atom::value, out.id)
        .receive([](sy::TensorData&) {}, [&](caf::error& e) { code = sy::describe(e).code; });
    CHECK(code == sy::Errc::unknown_tensor);
  }
  {
    // A payload that declares 1 TiB: the worker must refuse, not allocate.
    RawConfig cfg(true);
    caf::actor_system sys{cfg};
    auto entry = sys.middleman().remote_actor(w.host(), w.port());
    REQUIRE(entry);
    caf::scoped_actor self{sys};
    self->send(*entry, sy::import_atom::value, sy::TensorId{5}, LyingTensorData{});
    self->request(*entry, 2s, sy::import_atom::value, sy::TensorId{6}, LyingTensorData{})
        .receive([](caf::message&) {}, [](caf::error&) {});
  }
  {
    // A batch of more ops than one message may carry (a Runtime splits
    // such a batch): refused whole when it is decoded, so the fill at its
    // end never runs.
    RawPeer peer(w, false);
    auto& self = peer.self;
    auto runner = peer.runner();
    sy::TensorIr filled{sy::TensorId{4242}, sy::Shape{{2}}, sy::DType::f32, sy::TensorStatus::not_init};
    std::vector<sy::OperationIr> ops(sy::detail::max_wire_ops, sy::OperationIr{sy::DropOp{sy::TensorId{77}}});
    ops.emplace_back(sy::FillOp{sy::FillKind::full, filled, 1.0, 0.0});
    self->send(runner, sy::submit_atom::value, ops);
    bool read = false;
    self->request(runner, 5s, sy::read_atom::value, filled.id)
        .receive([&](sy::TensorData&) { read = true; }, [](caf::error&) {});
    CHECK_FALSE(read);
    // One op fewer is a batch like any other.
    ops.erase(ops.begin());
    self->send(runner, sy::submit_atom::value, ops);
    self->request(runner, 5s, sy::read_atom::value, filled.id)
        .receive(
            [&](sy::TensorData& d) {
              read = d.to_vector<float>() == std::vector<float>{1, 1};
            },
            [](caf::error&) {});
    CHECK(read);
  }
  // Still alive and serving a normal client.
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  CHECK(rt.device(w.address() + "/cpu:0").arange(0, 4).to_vector<float>() == std::vector<float>{0, 1, 2, 3});
}

TEST_CASE("parts that do not continue a tensor fail its import, and a leaving client's parts are freed", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1"});
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  {
    RawPeer peer(w, false);
    auto& self = peer.self;
    auto runner = peer.runner();
    const sy::Shape shape{{1024}};
    auto part = [&](uint64_t id, uint64_t offset, size_t n, uint64_t total = 4096, sy::Shape of = sy::Shape{{1024}}) {
      return sy::DataPart{sy::TensorId{id},
                          of,
                          sy::DType::f32,
                          total,
                          offset,
                          sy::Bytes::copy_of(std::vector<char>(n, 0).data(), n),
                          false};
    };
    auto send = [&](sy::DataPart p) {
      self->request(runner, 5s, sy::import_atom::value, std::move(p)).receive([](sy::done_atom) {}, [](caf::error&) {});
    };
    auto read_code = [&](uint64_t id) {
      sy::Errc code{};
      self->request(runner, 5s, sy::read_atom::value, sy::TensorId{id})
          .receive([](sy::TensorData&) {}, [&](caf::error& e) { code = sy::describe(e).code; });
      return code;
    };
    // A gap between parts, parts beyond the announced size, parts that
    // change the shape: each fails its tensor with protocol_error.
    const sy::TensorIr meta{sy::TensorId{7001}, shape, sy::DType::f32, sy::TensorStatus::not_init};
    for (uint64_t id : {7001, 7002, 7003, 7004}) {
      auto ir = meta;
      ir.id = sy::TensorId{id};
      self->send(runner, sy::expect_atom::value, ir);
    }
    send(part(7001, 0, 1024));
    send(part(7001, 2048, 1024));
    CHECK(read_code(7001) == sy::Errc::protocol_error);
    send(part(7002, 0, 3000));
    send(part(7002, 3000, 2000));
    CHECK(read_code(7002) == sy::Errc::protocol_error);
    send(part(7003, 0, 1024));
    auto other = part(7003, 1024, 1024);
    other.shape = sy::Shape{{2048}};
    send(std::move(other));
    CHECK(read_code(7003) == sy::Errc::protocol_error);
    // A first part announcing more bytes than its shape holds (it would
    // size the tensor's block).
    send(part(7004, 0, 1024, uint64_t{1} << 30));
    CHECK(read_code(7004) == sy::Errc::protocol_error);
    // A bye in another node's name (here: for the worker's own runner) is
    // refused: it would free that client's tensors.
    sy::Errc bye_code{};
    self->request(peer.entry, 5s, sy::bye_atom::value, caf::actor_cast<caf::actor>(runner))
        .receive([](sy::done_atom) {}, [&](caf::error& e) { bye_code = sy::describe(e).code; });
    CHECK(bye_code == sy::Errc::protocol_error);
    // Parts of tensors nobody expects: 64 x 1 MiB of 4 MiB each.
    for (uint64_t id = 8000; id < 8064; ++id) send(part(id, 0, 1 << 20, uint64_t{4} << 20, sy::Shape{{1 << 20}}));
    CHECK(dev.stats().get().bytes_staged == uint64_t{64} << 20);
  }
  // That raw client is gone: its partial imports went with it, and the
  // worker still serves ours.
  bool freed = false;
  for (int i = 0; i < 100 && !freed; ++i) {
    freed = dev.stats().get().bytes_staged == 0;
    if (!freed) std::this_thread::sleep_for(50ms);
  }
  CHECK(freed);
  CHECK((dev.arange(0, 4) * 2.0).to_vector<float>() == std::vector<float>{0, 2, 4, 6});
}

TEST_CASE("reads and syncs waiting on a tensor whose data never comes are bounded", "[remote][hostile]") {
  // A peer announces an upload, never sends it, and asks for it again and
  // again: each read (and each sync, waiting for the upload) was kept for
  // as long as the peer stayed.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-device-tensors=1000"});
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  {
    RawPeer peer(w, false);
    auto& self = peer.self;
    auto runner = peer.runner();
    const sy::TensorIr never{sy::TensorId{9001}, sy::Shape{{4}}, sy::DType::f32, sy::TensorStatus::not_init};
    self->send(runner, sy::expect_atom::value, never);
    for (int i = 0; i < 1000; ++i) self->send(runner, sy::read_atom::value, never.id);
    sy::Errc read_code{}, sync_code{};
    std::string message;
    self->request(runner, 5s, sy::read_atom::value, never.id)
        .receive([](sy::TensorData&) {},
                 [&](caf::error& e) {
                   read_code = sy::describe(e).code;
                   message = sy::describe(e).message;
                 });
    self->request(runner, 5s, sy::sync_atom::value)
        .receive([](sy::done_atom) {}, [&](caf::error& e) { sync_code = sy::describe(e).code; });
    INFO(message);
    CHECK(read_code == sy::Errc::out_of_memory);
    CHECK_THAT(message, Catch::Contains("1000 requests already wait"));
    CHECK(sync_code == sy::Errc::out_of_memory);
    // Other clients' work goes on meanwhile.
    CHECK((dev.arange(0, 4) * 2.0).to_vector<float>() == std::vector<float>{0, 2, 4, 6});
  }
  // The peer went: its waiting reads failed with it, and there is room again.
  for (int i = 0; i < 100; ++i) {
    if (dev.stats().get().live_handles < 10) break;
    std::this_thread::sleep_for(50ms);
  }
  CHECK((dev.ones({3}) + 1.0).to_vector<float>() == std::vector<float>{2, 2, 2});
  CHECK(dev.sync().wait_for(5s));
}

TEST_CASE("a peer's whole imports count against the worker's device bytes", "[remote][hostile]") {
  // An import sent in one message (not in parts) was held in the decoder's
  // block, outside --max-device-bytes: a peer could announce tensors and
  // send each whole, up to a message apiece.
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-device-bytes=67108864"});
  sy::Runtime rt(local_cpu());
  rt.connect(w.host(), w.port());
  auto dev = rt.device(w.address() + "/cpu:0");
  {
    RawPeer peer(w, false);
    auto& self = peer.self;
    auto runner = peer.runner();
    const sy::Shape shape{{int64_t{6} << 20}};  // 24 MiB each, pooled at 32 MiB
    auto read_code = [&](uint64_t id) {
      sy::Errc code{};
      std::string message;
      self->request(runner, 30s, sy::read_atom::value, sy::TensorId{id})
          .receive([](sy::TensorData&) {},
                   [&](caf::error& e) {
                     code = sy::describe(e).code;
                     message = sy::describe(e).message;
                   });
      return std::make_pair(code, message);
    };
    for (uint64_t id : {9101, 9102, 9103}) {
      self->send(runner, sy::expect_atom::value,
                 sy::TensorIr{sy::TensorId{id}, shape, sy::DType::f32, sy::TensorStatus::not_init});
      self->send(runner, sy::import_atom::value, sy::TensorId{id},
                 sy::TensorData::from(std::vector<float>(size_t{6} << 20, 1.0f), shape));
    }
    CHECK(read_code(9101).first == sy::Errc{});
    CHECK(read_code(9102).first == sy::Errc{});
    const auto [code, message] = read_code(9103);
    INFO(message);
    CHECK(code == sy::Errc::out_of_memory);
    CHECK_THAT(message, Catch::Contains("memory limit of 64.0 MiB"));
  }
  // The peer went with its tensors: the device has room again.
  bool room = false;
  for (int i = 0; i < 100 && !room; ++i) {
    try {
      room = dev.full({int64_t{12} << 20}, 1.0).to_vector<float>().size() == size_t{12} << 20;
    } catch (const sy::Error&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  CHECK(room);
}

TEST_CASE("a non-loopback address without TLS is refused", "[remote]") {
  CHECK_THROWS_WITH(WorkerProcess({"--host=0.0.0.0"}), Catch::Contains("did not report its address"));
}

TEST_CASE("SIGTERM stops a worker cleanly", "[remote]") {
  WorkerProcess w({"--devices=cpu:0"});
  int status = w.stop(SIGTERM);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("TLS options with a part missing are refused at construction naming it", "[remote]") {
  // A CA alone once terminated the process at the first connect (CAF's TLS
  // endpoint without a certificate throws on its multiplexer thread).
  const auto refused = [](sy::TlsOptions tls, const std::string& missing) {
    sy::RuntimeOptions o;
    o.devices = {"cpu:0"};
    o.tls = std::move(tls);
    try {
      sy::Runtime rt(std::move(o));
      FAIL("a runtime started with TLS options missing " << missing);
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains("missing: " + missing));
    }
  };
  refused({"", "", "ca.pem"}, "cert, key");
  refused({"client.pem", "client.key", ""}, "ca");
  refused({"client.pem", "", "ca.pem"}, "key");
  // All three given, one of them unreadable: named at construction, not a
  // connect that times out.
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("sy-tlsopt-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string d = dir.string();
  std::ofstream(d + "/some.pem") << "-----BEGIN CERTIFICATE-----\n";
  for (const auto& [tls, named] :
       {std::pair{sy::TlsOptions{d + "/missing.pem", d + "/some.pem", d + "/some.pem"},
                  "tls.cert '" + d + "/missing.pem'"},
        {sy::TlsOptions{d + "/some.pem", d, d + "/some.pem"}, "tls.key '" + d + "'"},  // a directory
        {sy::TlsOptions{d + "/some.pem", d + "/some.pem", d + "/none.pem"}, "tls.ca '" + d + "/none.pem'"}}) {
    sy::RuntimeOptions o;
    o.devices = {"cpu:0"};
    o.tls = tls;
    try {
      sy::Runtime rt(std::move(o));
      FAIL("a runtime started with an unreadable TLS file: " << named);
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains(named) && Catch::Contains("cannot read"));
    }
  }
  // Readable but not a certificate: refused at construction too (CAF's
  // manager printed an exception to stdout at the first connect, and the
  // connect timed out without naming the file).
  {
    sy::RuntimeOptions o;
    o.devices = {"cpu:0"};
    o.tls = {d + "/some.pem", d + "/some.pem", d + "/some.pem"};
    try {
      sy::Runtime rt(std::move(o));
      FAIL("a runtime started with a certificate that is none");
    } catch (const sy::Error& e) {
      CHECK(e.code() == sy::Errc::invalid_argument);
      CHECK_THAT(e.what(), Catch::Contains("tls.cert '" + d + "/some.pem': not a usable PEM certificate"));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("work queued behind a slow op passes a small --max-queued-bytes whole and in order", "[remote]") {
  WorkerProcess w({"--devices=cpu:0", "--threads=1", "--max-queued-bytes=65536", "--no-bulk-lane"}, true);
  auto o = local_cpu();
  o.transfer_chunk_bytes = 256 << 10;
  sy::Runtime rt(o);
  rt.connect(w.host(), w.port());
  CHECK(queued_behind_slow_op(w, rt) > 0);
}

TEST_CASE("TLS: a client with certificates signed by the worker's CA runs ops", "[remote]") {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("sy-tls-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto d = dir.string();
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  REQUIRE(sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=sy-test-ca -keyout " + d + "/ca.key -out " +
             d + "/ca.pem") == 0);
  for (std::string who : {"worker", "client"}) {
    REQUIRE(sh("openssl req -newkey rsa:2048 -nodes -subj /CN=" + who + " -keyout " + d + "/" + who + ".key -out " + d +
               "/" + who + ".csr") == 0);
    REQUIRE(sh("openssl x509 -req -days 1 -in " + d + "/" + who + ".csr -CA " + d + "/ca.pem -CAkey " + d +
               "/ca.key -CAcreateserial -out " + d + "/" + who + ".pem") == 0);
  }
  {
    WorkerProcess w({"--devices=cpu:0", "--threads=1", "--cert=" + d + "/worker.pem", "--key=" + d + "/worker.key",
                     "--ca=" + d + "/ca.pem"});
    sy::RuntimeOptions o = local_cpu();
    o.tls = {d + "/client.pem", d + "/client.key", d + "/ca.pem"};
    sy::Runtime rt(o);
    rt.connect(w.host(), w.port());
    auto dev = rt.device(w.address() + "/cpu:0");
    auto x = rt.device("cpu:0").tensor<float>(iota(5), {5});
    // Bounded: this read hung once in a loaded ASan run of the whole suite
    // (session 6; 12 reruns passed). On a hang, the remote device's counters
    // say whether the bridged tensor ever arrived.
    auto read = (x.to(dev) * 3.0).read();
    if (!read.wait_for(30s)) {
      auto s = dev.stats();
      std::string state = "no stats within 5 s";
      if (s.wait_for(5s)) {
        auto v = s.get();
        state = v.device + ": queue_depth " + std::to_string(v.queue_depth) + ", live_handles " +
                std::to_string(v.live_handles) + ", bridged in " + std::to_string(v.bytes_bridged_in);
      }
      FAIL("the read over TLS did not complete in 30 s; " << state);
    }
    CHECK(read.get().to_vector<float>() == std::vector<float>{0, 3, 6, 9, 12});
  }
  {
    // Reading paused and resumed under TLS: what the TLS session decrypted
    // before a pause is not on the socket, so no event announces it.
    WorkerProcess w({"--devices=cpu:0", "--threads=1", "--cert=" + d + "/worker.pem", "--key=" + d + "/worker.key",
                     "--ca=" + d + "/ca.pem", "--max-queued-bytes=65536"},
                    true);
    sy::RuntimeOptions o = local_cpu();
    o.tls = {d + "/client.pem", d + "/client.key", d + "/ca.pem"};
    o.transfer_chunk_bytes = 256 << 10;
    sy::Runtime rt(o);
    rt.connect(w.host(), w.port());
    CHECK(queued_behind_slow_op(w, rt) > 0);
  }
  fs::remove_all(dir);
}
