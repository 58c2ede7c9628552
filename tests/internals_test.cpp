// SPDX-License-Identifier: Apache-2.0
// Internal pieces on the per-op path, against plain standard-library
// equivalents: the runner's tensor table (actors/tensor_table.hpp), the
// op queue's lock (src/queue_mutex.hpp) and the poll before parking
// (messages/include/switchyard/messages/spin_wait.hpp).

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "actors/tensor_table.hpp"
#include "src/queue_mutex.hpp"
#include "switchyard/messages/spin_wait.hpp"

using switchyard::SpinWait;
using switchyard::TensorId;
using switchyard::actors::TensorTable;
using switchyard::detail::QueueMutex;

namespace {

// A value that counts its live instances, so the table's destruction of
// what it erases (and of what it holds at the end) is checked.
struct Counted {
  static inline int live = 0;
  explicit Counted(uint64_t v) : value(v), big(std::make_unique<uint64_t>(v)) { ++live; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  ~Counted() { --live; }
  uint64_t value;
  std::unique_ptr<uint64_t> big;  // a real resource: ASan reports a leak
};

}  // namespace

TEST_CASE("tensor table: random inserts, finds and erases agree with unordered_map", "[internals]") {
  Counted::live = 0;
  {
    TensorTable<Counted> table(0x1234);
    std::unordered_map<uint64_t, Counted*> oracle;
    std::mt19937_64 rng(7);
    // Sequential ids (as clients make them), ids sharing low bits, and the
    // extremes a peer may send.
    auto pick = [&]() -> uint64_t {
      switch (rng() % 4) {
        case 0:
          return rng() % 3000;
        case 1:
          return (rng() % 64) << 40;
        case 2:
          return ~uint64_t{0} - rng() % 8;
        default:
          return rng();
      }
    };
    for (int step = 0; step < 200000; ++step) {
      const uint64_t id = pick();
      switch (rng() % 3) {
        case 0: {
          auto [p, made] = table.try_emplace(TensorId{id}, id);
          auto it = oracle.find(id);
          REQUIRE(made == (it == oracle.end()));
          if (made)
            oracle.emplace(id, p);
          else
            REQUIRE(p == it->second);  // the value made first, where it was made
          break;
        }
        case 1: {
          auto* p = table.find(TensorId{id});
          auto it = oracle.find(id);
          REQUIRE((p == nullptr) == (it == oracle.end()));
          if (p != nullptr) {
            REQUIRE(p == it->second);
            REQUIRE(p->value == id);
            REQUIRE(*p->big == id);
          }
          break;
        }
        default:
          table.erase(TensorId{id});
          oracle.erase(id);
      }
      REQUIRE(table.size() == oracle.size());
    }
    // Every survivor is still found where it was made, and only those.
    size_t seen = 0;
    table.for_each([&](TensorId id, Counted& v) {
      ++seen;
      REQUIRE(oracle.at(id.value) == &v);
    });
    CHECK(seen == oracle.size());
    CHECK(Counted::live == static_cast<int>(oracle.size()));
  }
  CHECK(Counted::live == 0);
}

TEST_CASE("tensor table: grows past thousands of entries and shrinks back", "[internals]") {
  Counted::live = 0;
  TensorTable<Counted> table;
  constexpr uint64_t n = 50000;
  for (uint64_t id = 1; id <= n; ++id) REQUIRE(table.try_emplace(TensorId{id}, id).second);
  CHECK(table.size() == n);
  for (uint64_t id = 1; id <= n; id += 2) table.erase(TensorId{id});
  for (uint64_t id = 1; id <= n; ++id) {
    auto* p = table.find(TensorId{id});
    REQUIRE((p != nullptr) == (id % 2 == 0));
  }
  for (uint64_t id = 2; id <= n; id += 2) table.erase(TensorId{id});
  CHECK(table.size() == 0);
  CHECK(Counted::live == 0);
  CHECK(table.find(TensorId{2}) == nullptr);
  table.erase(TensorId{2});                           // erasing what is gone is a no-op
  REQUIRE(table.try_emplace(TensorId{0}, 0).second);  // id 0 is a key like any other
  CHECK(table.find(TensorId{0})->value == 0);
}

TEST_CASE("queue mutex: contended increments from four threads are exclusive", "[internals]") {
  QueueMutex mutex;
  uint64_t counter = 0;  // plain: the lock alone orders it (TSan checks)
  std::atomic<bool> go{false};
  constexpr int per_thread = 200000;
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < per_thread; ++i) {
        std::lock_guard lock(mutex);
        ++counter;
      }
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  CHECK(counter == uint64_t{4} * per_thread);
  CHECK(mutex.try_lock());
  CHECK_FALSE(mutex.try_lock());
  mutex.unlock();
}

TEST_CASE("queue mutex: a waiter sleeps while the holder is away and gets the lock when it leaves", "[internals]") {
  QueueMutex a;
  QueueMutex b;
  std::atomic<int> stage{0};
  std::thread holder([&] {
    std::lock_guard lock(a);
    stage = 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past the waiter's spinning
    stage = 2;
  });
  while (stage.load() == 0) std::this_thread::yield();
  const auto begin = std::chrono::steady_clock::now();
  {
    std::scoped_lock both(a, b);  // std::lock: try_lock and back-off
    CHECK(stage.load() == 2);
  }
  holder.join();
  CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(30));
}

namespace {
// One wait that never sees its condition: how often it asked, and whether
// it polled (more than one ask) or only looked once (backed off).
size_t asks_of_a_miss(SpinWait& spin, std::chrono::nanoseconds limit) {
  size_t asks = 0;
  CHECK_FALSE(spin(
      [&] {
        ++asks;
        return false;
      },
      limit));
  return asks;
}
}  // namespace

TEST_CASE("spin wait: true as soon as the condition holds, false once its limit passed", "[internals]") {
  SpinWait spin;
  int asks = 0;
  CHECK(spin([&] { return ++asks == 3; }, std::chrono::seconds(10)));
  CHECK(asks == 3);
  const auto start = std::chrono::steady_clock::now();
  CHECK(asks_of_a_miss(spin, std::chrono::milliseconds(2)) > 1);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(2));
}

TEST_CASE("spin wait: backs off after four misses in a row, probes every sixteenth wait, a hit restores it",
          "[internals]") {
  using namespace std::chrono_literals;
  SpinWait spin;
  for (int i = 0; i < 4; ++i) CHECK(asks_of_a_miss(spin, 2ms) > 1);
  // (A poll asks at least twice: its clock is read after the first ask.)
  // Backed off: fifteen waits look once, the sixteenth polls again.
  for (int i = 0; i < 15; ++i) CHECK(asks_of_a_miss(spin, 2ms) == 1);
  CHECK(asks_of_a_miss(spin, 2ms) > 1);
  CHECK(asks_of_a_miss(spin, 2ms) == 1);
  // A backed-off wait whose condition already holds still says so.
  CHECK(spin([] { return true; }, 2ms));
  // ... but only a poll that saw it restores polling: until the next probe
  // the waits still look once.
  for (int i = 0; i < 13; ++i) CHECK(asks_of_a_miss(spin, 2ms) == 1);
  int asks = 0;
  CHECK(spin([&] { return ++asks == 2; }, 10s));  // the probe, answered
  CHECK(asks == 2);
  for (int i = 0; i < 3; ++i) CHECK(asks_of_a_miss(spin, 2ms) > 1);
}
