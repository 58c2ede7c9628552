// SPDX-License-Identifier: Apache-2.0
// Soak / stress: 8 client threads build random op graphs over two devices
// with bridges, random drops, reads and syncs. Every future must resolve,
// every value must match what plain loops compute, handles must return to
// zero and RSS must stay flat. The short run is part of the default suite;
// the ~1 minute run is opt-in (SWITCHYARD_SOAK=ON, ctest -L soak).

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "remote/worker_process.hpp"
#include "switchyard/switchyard.hpp"

using namespace switchyard;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;  // quarantines and shadow memory make RSS meaningless
#else
constexpr bool sanitized = false;
#endif

constexpr auto resolve_bound = 120s;

long rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A tensor with the values it must hold, computed independently.
struct Value {
  Tensor t;
  std::vector<double> want;
  std::vector<int64_t> dims;  // 1-D or 2-D
};

struct PendingRead {
  Future<TensorData> f;
  std::vector<double> want;
};

struct Totals {
  std::atomic<uint64_t> ops{0}, reads{0}, syncs{0}, bridges{0}, drops{0}, mismatches{0}, unresolved{0}, errors{0};
};

bool close_to(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return std::abs(got - want) <= 1e-9 * std::max(1.0, std::abs(want));
}

void check_read(PendingRead& r, Totals& totals, std::mutex& report) {
  if (!r.f.wait_for(resolve_bound)) {
    totals.unresolved.fetch_add(1);
    return;
  }
  try {
    auto data = r.f.get();
    auto got = data.to_vector<double>();
    bool ok = got.size() == r.want.size();
    for (size_t i = 0; ok && i < got.size(); ++i) ok = close_to(got[i], r.want[i]);
    if (!ok) {
      totals.mismatches.fetch_add(1);
      std::lock_guard lock(report);
      UNSCOPED_INFO("mismatch: " << got.size() << " values, first " << (got.empty() ? 0.0 : got[0]) << " want "
                                 << (r.want.empty() ? 0.0 : r.want[0]));
    }
  } catch (const std::exception& e) {
    totals.errors.fetch_add(1);
    std::lock_guard lock(report);
    UNSCOPED_INFO("read failed: " << e.what());
  }
}

class Client {
 public:
  Client(std::vector<Device> devices, uint64_t seed, Totals& totals, std::mutex& report)
      : devices_(std::move(devices)), rng_(seed), totals_(totals), report_(report) {}

  void run(Clock::time_point until) {
    for (uint64_t i = 0; i < 2'000'000 && Clock::now() < until; ++i) {
      step();
      if (reads_.size() > 64) settle(32);
    }
    settle(reads_.size());
    for (auto& s : syncs_) {
      if (!s.wait_for(resolve_bound))
        totals_.unresolved.fetch_add(1);
      else
        try {
          s.get();
        } catch (const std::exception&) {
          totals_.errors.fetch_add(1);
        }
    }
    syncs_.clear();
    pool_.clear();
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  int small() { return static_cast<int>(pick(7)) - 3; }
  const Device& device() { return devices_[pick(devices_.size())]; }

  std::vector<int64_t> random_dims() {
    static const std::vector<std::vector<int64_t>> shapes = {{4}, {6}, {2, 3}, {3, 2}, {3, 3}};
    return shapes[pick(shapes.size())];
  }
  static int64_t numel(const std::vector<int64_t>& d) {
    int64_t n = 1;
    for (auto x : d) n *= x;
    return n;
  }

  void add(Value v) {
    double mx = 0;
    for (auto x : v.want) mx = std::max(mx, std::abs(x));
    if (mx > 1e6) return;  // keep magnitudes exact in f64
    totals_.ops.fetch_add(1);
    pool_.push_back(std::move(v));
    if (pool_.size() > 24) drop();
  }

  void drop() {
    if (pool_.empty()) return;
    auto i = pick(pool_.size());
    pool_[i] = std::move(pool_.back());
    pool_.pop_back();
    totals_.drops.fetch_add(1);
  }

  Value& any() { return pool_[pick(pool_.size())]; }

  // `v` on the device of `like` (bridging when they differ).
  Tensor on(const Value& v, const Tensor& like) {
    if (v.t.device() == like.device()) return v.t;
    totals_.bridges.fetch_add(1);
    return v.t.to(like.device());
  }

  void step() {
    auto r = pick(100);
    if (pool_.empty() || r < 12) {
      auto dims = random_dims();
      std::vector<double> vals(static_cast<size_t>(numel(dims)));
      for (auto& x : vals) x = small();
      add({device().tensor<double>(vals, Shape(dims)), vals, dims});
      return;
    }
    if (r < 18) {
      auto dims = random_dims();
      double k = small();
      add({device().full(Shape(dims), k, DType::f64), std::vector<double>(static_cast<size_t>(numel(dims)), k), dims});
      return;
    }
    Value& a = any();
    if (r < 38) {
      Value out{Tensor(), a.want, a.dims};
      int k = small();
      switch (pick(4)) {
        case 0:
          out.t = a.t + k;
          for (auto& x : out.want) x += k;
          break;
        case 1:
          out.t = a.t * k;
          for (auto& x : out.want) x *= k;
          break;
        case 2:
          out.t = -a.t;
          for (auto& x : out.want) x = -x;
          break;
        default:
          out.t = a.t.abs();
          for (auto& x : out.want) x = std::abs(x);
          break;
      }
      add(std::move(out));
      return;
    }
    if (r < 52) {
      // Binary op with a same-shaped partner, wherever it lives.
      std::vector<Value*> partners;
      for (auto& v : pool_)
        if (v.dims == a.dims) partners.push_back(&v);
      Value& b = *partners[pick(partners.size())];
      auto bt = on(b, a.t);
      Value out{Tensor(), a.want, a.dims};
      if (pick(2) == 0) {
        out.t = a.t + bt;
        for (size_t i = 0; i < out.want.size(); ++i) out.want[i] += b.want[i];
      } else {
        out.t = a.t * bt;
        for (size_t i = 0; i < out.want.size(); ++i) out.want[i] *= b.want[i];
      }
      add(std::move(out));
      return;
    }
    if (r < 60) {
      const Device& target = device();
      if (!(target == a.t.device())) totals_.bridges.fetch_add(1);
      add({a.t.to(target), a.want, a.dims});
      return;
    }
    if (r < 66) {
      if (a.dims.size() == 2 && pick(2) == 0) {
        // Row sums.
        auto rows = a.dims[0], cols = a.dims[1];
        std::vector<double> want(static_cast<size_t>(rows), 0);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) want[i] += a.want[i * cols + j];
        add({a.t.sum({1}), want, {rows}});
      } else {
        double s = 0;
        for (auto x : a.want) s += x;
        add({a.t.sum().reshape({1}), {s}, {1}});
      }
      return;
    }
    if (r < 70 && a.dims.size() == 2) {
      // a @ a^T through a transposed view.
      auto rows = a.dims[0], cols = a.dims[1];
      std::vector<double> want(static_cast<size_t>(rows * rows), 0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < rows; ++j)
          for (int64_t k = 0; k < cols; ++k) want[i * rows + j] += a.want[i * cols + k] * a.want[j * cols + k];
      add({a.t.matmul(a.t.mT()), want, {rows, rows}});
      return;
    }
    if (r < 74) {
      if (a.dims.size() == 2) {
        auto rows = a.dims[0], cols = a.dims[1];
        std::vector<double> want(a.want.size());
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) want[j * rows + i] = a.want[i * cols + j];
        add({a.t.mT(), want, {cols, rows}});
      } else if (numel(a.dims) == 6) {
        add({a.t.reshape({2, 3}), a.want, {2, 3}});
      } else {
        add({a.t.flatten(), a.want, {numel(a.dims)}});
      }
      return;
    }
    if (r < 86) {
      totals_.reads.fetch_add(1);
      reads_.push_back({a.t.read(), a.want});
      if (pick(4) == 0) drop();  // the tensor may go while its read is in flight
      return;
    }
    if (r < 94) {
      drop();
      return;
    }
    if (r < 97) {
      totals_.syncs.fetch_add(1);
      syncs_.push_back(device().sync());
      if (syncs_.size() > 16) {
        auto s = std::move(syncs_.front());
        syncs_.erase(syncs_.begin());
        if (!s.wait_for(resolve_bound)) totals_.unresolved.fetch_add(1);
      }
      return;
    }
    // A whole-graph read: sum of everything this client holds on one device.
    double s = 0;
    Tensor acc;
    for (auto& v : pool_) {
      if (!(v.t.device() == a.t.device())) continue;
      auto part = v.t.sum();
      acc = acc.defined() ? acc + part : part;
      for (auto x : v.want) s += x;
    }
    totals_.reads.fetch_add(1);
    reads_.push_back({acc.read(), {s}});
  }

  void settle(size_t n) {
    n = std::min(n, reads_.size());
    for (size_t i = 0; i < n; ++i) check_read(reads_[i], totals_, report_);
    reads_.erase(reads_.begin(), reads_.begin() + static_cast<std::ptrdiff_t>(n));
  }

  std::vector<Device> devices_;
  std::mt19937_64 rng_;
  Totals& totals_;
  std::mutex& report_;
  std::vector<Value> pool_;
  std::vector<PendingRead> reads_;
  std::vector<Future<void>> syncs_;
};

/// `worker`: the second device is a worker's instead of cpu:1, started with
/// these extra arguments.
void soak(std::chrono::seconds duration, const std::vector<std::string>* worker = nullptr) {
  if (const char* env = std::getenv("SWITCHYARD_SOAK_SECONDS")) duration = std::chrono::seconds(std::atoi(env));
  std::unique_ptr<testing::WorkerProcess> w;
  if (worker != nullptr) {
    std::vector<std::string> args = {"--devices=cpu:0", "--threads=1"};
    args.insert(args.end(), worker->begin(), worker->end());
    w = std::make_unique<testing::WorkerProcess>(args, true);
  }
  RuntimeOptions options;
  options.devices = {"cpu:0"};
  if (!w) options.devices.push_back("cpu:1");
  options.cpu_threads = 1;
  options.connect_timeout = 10s;
  options.remote_timeout = 60s;
  Runtime rt(options);
  if (w) rt.connect(w->host(), w->port());
  auto devices = rt.devices();
  Totals totals;
  std::mutex report;
  constexpr int clients = 8;

  auto start = Clock::now();
  auto until = start + duration;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] { Client(devices, 0x5eed0000u + c, totals, report).run(until); });

  // RSS once warm (pools filled, first graphs run), and again at the end.
  std::this_thread::sleep_until(start + duration / 4);
  long warm_rss = rss_bytes();
  for (auto& t : threads) t.join();
  rt.sync_all().get();
  long end_rss = rss_bytes();

  INFO("ops " << totals.ops << ", reads " << totals.reads << ", syncs " << totals.syncs << ", bridges "
              << totals.bridges << ", drops " << totals.drops);
  INFO("rss warm " << warm_rss / 1024 << " KiB, end " << end_rss / 1024 << " KiB");
  CHECK(totals.unresolved == 0);
  CHECK(totals.mismatches == 0);
  CHECK(totals.errors == 0);
  CHECK(totals.reads > 0);
  CHECK(totals.bridges > 0);
  for (auto& s : rt.stats()) {
    INFO(s.device);
    CHECK(s.live_handles == 0);
    CHECK(s.live_bytes == 0);
    CHECK(s.queue_depth == 0);
    CHECK(s.ops_failed == 0);
  }
  if (!sanitized) CHECK(end_rss - warm_rss < 64L * 1024 * 1024);
  if (w) {
    const auto exit = w->stop_logged("paused (queued bytes) ");
    INFO(exit.log);
    CHECK(exit.clean);
    std::printf("figure: remote soak: worker paused the connection %ld times\n", exit.counted);
  }
}

}  // namespace

TEST_CASE("soak (short): 8 clients, random graphs over two devices, every result right", "[reliability][soak_short]") {
  soak(5s);
}

// The same with the second device a worker's that reads the client's
// connection only while its runner has taken all but 16 KiB of it: reading
// paused and resumed many times under 8 client threads, bridges both ways.
TEST_CASE("soak (short, remote): 8 clients over a local device and a worker's that keeps pausing, every result right",
          "[reliability][soak_short]") {
  const std::vector<std::string> args = {"--max-queued-bytes=16384", "--max-queued-bytes-total=32768"};
  soak(5s, &args);
}

// Hidden from the default run; registered as ctest `soak_long` (label soak)
// when SWITCHYARD_SOAK=ON.
TEST_CASE("soak (long): 8 clients for about a minute", "[.][soak]") { soak(60s); }
