// SPDX-License-Identifier: Apache-2.0
// Fault injection: a backend that fails chosen calls (tests/support/
// faulty_backend.hpp). The failure must reach exactly the futures that
// depend on the failed call, later work must succeed, and no handle leaks.

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "support/faulty_backend.hpp"
#include "switchyard/switchyard.hpp"

using namespace switchyard;
using testing::FaultPlan;

namespace {

struct Faulty {
  std::shared_ptr<FaultPlan> plan = std::make_shared<FaultPlan>();
  std::unique_ptr<Runtime> rt;

  explicit Faulty(std::vector<std::string> devices = {"faulty:0"}) {
    RuntimeOptions o;
    o.devices = std::move(devices);
    o.cpu_threads = 1;
    testing::add_faulty_backend(o, plan);
    rt = std::make_unique<Runtime>(std::move(o));
  }
  Device dev(const char* name = "faulty:0") const { return rt->device(name); }

  // Arms a fault on the k-th execute from now (the counter is stable after a sync).
  void fail_execute_in(uint64_t k) {
    dev().sync().get();
    plan->fail_execute_at = plan->executes.load() + k;
  }
};

// The error code a read ends with, or nullopt when it succeeds.
std::optional<Errc> read_error(const Tensor& t, std::string* message = nullptr) {
  try {
    (void)t.read().get();
    return std::nullopt;
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
}

uint64_t live_handles(const Device& d) { return d.stats().get().live_handles; }

}  // namespace

TEST_CASE("a failing kernel poisons its output and dependents, not independent work", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  {
    auto a = d.tensor<float>({1, 2, 3, 4}, {4});
    auto b = a + 1.0f;
    f.fail_execute_in(2);
    auto c = a * 2.0f;  // 1st: runs
    auto e = b * 3.0f;  // 2nd: fails
    auto g = e + c;     // depends on e: poisoned without running
    auto h = c + 1.0f;  // independent: runs
    auto i = g.sum();   // transitively poisoned

    CHECK(c.to_vector<float>() == std::vector<float>{2, 4, 6, 8});
    CHECK(h.to_vector<float>() == std::vector<float>{3, 5, 7, 9});
    std::string msg;
    CHECK(read_error(e, &msg) == Errc::kernel_failure);
    CHECK_THAT(msg, Catch::Contains("injected fault") && Catch::Contains("faulty:0"));
    CHECK(read_error(g) == Errc::kernel_failure);
    CHECK(read_error(i) == Errc::kernel_failure);
    CHECK(f.plan->faults == 1);

    // Later work on the same device succeeds, including on old inputs.
    auto later = (a + b).sum();
    CHECK(later.to_vector<float>() == std::vector<float>{24});
    CHECK(d.stats().get().ops_failed >= 3);
  }
  CHECK(live_handles(d) == 0);
}

TEST_CASE("bad_alloc thrown by a kernel fails the op with out_of_memory", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  {
    auto a = d.full({16}, 2.0);
    f.plan->mode = FaultPlan::Mode::bad_alloc;
    f.fail_execute_in(1);
    auto b = a.exp();
    auto c = a.neg();
    CHECK(read_error(b) == Errc::out_of_memory);
    CHECK(read_error(c) == std::nullopt);
    CHECK(c.to_vector<float>() == std::vector<float>(16, -2.0f));
  }
  CHECK(live_handles(d) == 0);
}

TEST_CASE("an exception thrown by a kernel fails the op and the runner keeps serving", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  {
    auto a = d.arange(0, 6, 1, DType::f32).reshape({2, 3});
    f.plan->mode = FaultPlan::Mode::exception;
    f.fail_execute_in(1);
    auto b = a.matmul(a.mT());
    CHECK(read_error(b) == Errc::kernel_failure);
    auto c = a.matmul(a.mT());
    CHECK(c.to_vector<float>() == std::vector<float>{5, 14, 14, 50});
  }
  CHECK(live_handles(d) == 0);
}

TEST_CASE("a backend throwing what is not a std::exception fails the call and the runner keeps serving",
          "[reliability][fault]") {
  Faulty f({"cpu:0", "faulty:0"});
  auto d = f.dev();
  {
    auto a = d.arange(0, 4, 1, DType::f32);
    f.plan->mode = FaultPlan::Mode::foreign;
    f.fail_execute_in(1);
    auto b = a.exp();
    std::string msg;
    CHECK(read_error(b, &msg) == Errc::kernel_failure);
    CHECK_THAT(msg, Catch::Contains("faulty:0") && Catch::Contains("not a std::exception"));
    // An import (a bridge from cpu:0) and a read that throw fail only themselves.
    auto x = f.dev("cpu:0").tensor<float>({1, 2}, {2});
    d.sync().get();
    f.plan->fail_from_data_at = f.plan->from_datas.load() + 1;
    auto up = x.to(d);
    CHECK(read_error(up, &msg) == Errc::kernel_failure);
    CHECK_THAT(msg, Catch::Contains("import of"));
    CHECK((x.to(d) + 1.0f).to_vector<float>() == std::vector<float>{2, 3});
    d.sync().get();
    f.plan->fail_to_data_at = f.plan->to_datas.load() + 1;
    CHECK(read_error(a, &msg) == Errc::kernel_failure);
    CHECK_THAT(msg, Catch::Contains("faulty:0") && Catch::Contains("read"));
    CHECK(f.plan->faults == 3);
    CHECK(a.to_vector<float>() == std::vector<float>{0, 1, 2, 3});
    CHECK((a * 2.0f).to_vector<float>() == std::vector<float>{0, 2, 4, 6});
  }
  CHECK(live_handles(d) == 0);
  CHECK(live_handles(f.dev("cpu:0")) == 0);
}

TEST_CASE("extend_backends: a kind named wrongly or twice or without create is refused; a null backend too",
          "[reliability][fault]") {
  // A copy of the cpu kind, edited, appended to the registry.
  using Edit = std::function<void(backends::BackendKind&)>;
  auto with = [](Edit edit, std::vector<std::string> devices) {
    RuntimeOptions o;
    o.devices = std::move(devices);
    o.extend_backends = [edit](std::vector<backends::BackendKind>& kinds) {
      backends::BackendKind kind;
      for (const auto& k : kinds)
        if (k.name == "cpu") kind = k;
      edit(kind);
      kinds.push_back(kind);
    };
    return o;
  };
  auto renamed = [](std::string name) { return [name](backends::BackendKind& k) { k.name = name; }; };
  auto message = [](const RuntimeOptions& o) -> std::string {
    try {
      Runtime rt(o);
    } catch (const Error& e) {
      return std::string(to_string(e.code())) + ": " + e.what();
    }
    return "no error";
  };
  CHECK_THAT(message(with(renamed("Tiny-X"), {"cpu:0"})),
             Catch::StartsWith("invalid_argument") && Catch::Contains("'Tiny-X'") && Catch::Contains("lower-case"));
  CHECK_THAT(message(with(renamed("cpu"), {"cpu:0"})),
             Catch::StartsWith("invalid_argument") && Catch::Contains("named twice"));
  auto no_create = [](backends::BackendKind& k) {
    k.name = "nocreate";
    k.create = nullptr;
  };
  CHECK_THAT(message(with(no_create, {"cpu:0"})), Catch::StartsWith("invalid_argument") && Catch::Contains("create"));
  auto null_backend = [](backends::BackendKind& k) {
    k.name = "nullbackend";
    k.create = [](int, const backends::DeviceOptions&) -> std::unique_ptr<backends::Backend> { return nullptr; };
  };
  CHECK_THAT(message(with(null_backend, {"cpu:0", "nullbackend:0"})),
             Catch::StartsWith("unknown_device") && Catch::Contains("nullbackend:0") && Catch::Contains("null"));
  // Without a reason of its own, a kind with no devices says so plainly.
  auto none = [](backends::BackendKind& k) {
    k.name = "none";
    k.device_count = [] { return 0; };
    k.unavailable_reason = nullptr;
  };
  Runtime rt(with(none, {"cpu:0", "none:*"}));
  REQUIRE(rt.unavailable().size() == 1);
  CHECK(rt.unavailable()[0] == "none: no devices");
}

TEST_CASE("the Nth kernel fails for every N in a chain, each time exactly the dependents", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  for (uint64_t n = 1; n <= 5; ++n) {
    {
      auto x = d.full({8}, 1.0);
      f.fail_execute_in(n);
      // A chain of five ops: x1 = x + 1, x2 = x1 + 1, ...; a side branch from x.
      std::vector<Tensor> chain;
      Tensor cur = x;
      for (int k = 0; k < 5; ++k) chain.push_back(cur = cur + 1.0f);
      for (uint64_t k = 0; k < chain.size(); ++k) {
        INFO("fault at " << n << ", link " << k + 1);
        if (k + 1 < n)
          CHECK(chain[k].to_vector<float>() == std::vector<float>(8, static_cast<float>(k + 2)));
        else
          CHECK(read_error(chain[k]) == Errc::kernel_failure);
      }
      auto side = (x * 5.0f).to_vector<float>();
      CHECK(side == std::vector<float>(8, 5.0f));
    }
    CHECK(live_handles(d) == 0);
  }
}

TEST_CASE("a failed read fails that read only; the tensor stays readable", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  {
    auto a = d.full({4}, 3.0);
    d.sync().get();
    f.plan->fail_to_data_at = f.plan->to_datas.load() + 1;
    CHECK(read_error(a) == Errc::kernel_failure);
    CHECK(a.to_vector<float>() == std::vector<float>(4, 3.0f));
    CHECK((a * 2.0f).to_vector<float>() == std::vector<float>(4, 6.0f));
  }
  CHECK(live_handles(d) == 0);
}

TEST_CASE("a read reply that does not match its tensor fails that read with protocol_error", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  {
    auto a = d.tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    d.sync().get();
    for (auto lie : {FaultPlan::Lie::short_bytes, FaultPlan::Lie::wrong_shape}) {
      INFO("lie " << static_cast<int>(lie));
      f.plan->lie = lie;
      f.plan->lie_to_data_at = f.plan->to_datas.load() + 1;
      std::string msg;
      CHECK(read_error(a, &msg) == Errc::protocol_error);
      CHECK_THAT(msg, Catch::Contains("read of tensor " + std::to_string(a.id().value)) &&
                          Catch::Contains("faulty:0") && Catch::Contains("[2, 3]") && Catch::Contains("expected"));
      // The device told one lie; the tensor and later reads are fine.
      CHECK(a.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
    }
  }
  CHECK(live_handles(d) == 0);
}

TEST_CASE("a bridge export that does not match its tensor poisons the copy with protocol_error",
          "[reliability][fault]") {
  Faulty f({"cpu:0", "faulty:0"});
  auto cpu = f.dev("cpu:0");
  auto bad = f.dev("faulty:0");
  {
    auto x = bad.tensor<float>({4, 5, 6, 7}, {2, 2});
    bad.sync().get();
    for (auto lie : {FaultPlan::Lie::short_bytes, FaultPlan::Lie::wrong_shape}) {
      INFO("lie " << static_cast<int>(lie));
      f.plan->lie = lie;
      f.plan->lie_to_data_at = f.plan->to_datas.load() + 1;
      auto y = x.to(cpu);
      auto z = y + 1.0f;
      std::string msg;
      CHECK(read_error(z, &msg) == Errc::protocol_error);
      CHECK_THAT(msg, Catch::Contains("cpu:0: import of") && Catch::Contains("[2, 2]") && Catch::Contains("expected"));
      CHECK((x.to(cpu) + 1.0f).to_vector<float>() == std::vector<float>{5, 6, 7, 8});
    }
  }
  CHECK(live_handles(cpu) == 0);
  CHECK(live_handles(bad) == 0);
}

TEST_CASE("a bridge whose import fails in the backend poisons the copy, not the source", "[reliability][fault]") {
  Faulty f({"cpu:0", "faulty:0"});
  auto cpu = f.dev("cpu:0");
  auto bad = f.dev("faulty:0");
  {
    auto x = cpu.tensor<float>({1, 2, 3}, {3});
    bad.sync().get();
    SECTION("its allocation fails") {
      f.plan->fail_from_data_at = f.plan->from_datas.load() + 1;
      auto y = x.to(bad);
      auto z = y * 2.0f;  // queued on the target behind the pending import
      CHECK(read_error(y) == Errc::out_of_memory);
      CHECK(read_error(z) == Errc::out_of_memory);
    }
    SECTION("from_data returns no buffer (the process lives)") {
      f.plan->null_from_data_at = f.plan->from_datas.load() + 1;
      auto y = x.to(bad);
      std::string msg;
      CHECK(read_error(y, &msg) == Errc::kernel_failure);
      CHECK_THAT(msg, Catch::Contains("faulty:0") && Catch::Contains("from_data returned no buffer"));
    }
    CHECK(x.to_vector<float>() == std::vector<float>{1, 2, 3});
    // The next bridge of the same tensor works.
    auto w = x.to(bad) * 2.0f;
    CHECK(w.to_vector<float>() == std::vector<float>{2, 4, 6});
  }
  CHECK(live_handles(cpu) == 0);
  CHECK(live_handles(bad) == 0);
}

TEST_CASE("a bridge whose export fails poisons the copy on the target device", "[reliability][fault]") {
  Faulty f({"cpu:0", "faulty:0"});
  auto cpu = f.dev("cpu:0");
  auto bad = f.dev("faulty:0");
  {
    auto x = bad.tensor<float>({4, 5}, {2});
    bad.sync().get();
    f.plan->fail_to_data_at = f.plan->to_datas.load() + 1;
    auto y = x.to(cpu);
    auto z = y + 1.0f;
    CHECK(read_error(z) == Errc::kernel_failure);
    CHECK(read_error(y) == Errc::kernel_failure);
    auto again = x.to(cpu) + 1.0f;
    CHECK(again.to_vector<float>() == std::vector<float>{5, 6});
  }
  CHECK(live_handles(cpu) == 0);
  CHECK(live_handles(bad) == 0);
}

TEST_CASE("a poisoned tensor bridged to another device stays poisoned there", "[reliability][fault]") {
  Faulty f({"cpu:0", "faulty:0"});
  auto cpu = f.dev("cpu:0");
  auto bad = f.dev("faulty:0");
  {
    auto x = bad.full({3}, 1.0);
    f.fail_execute_in(1);
    auto y = x.exp();           // fails on faulty:0
    auto z = y.to(cpu) + 1.0f;  // poison crosses the bridge
    std::string msg;
    CHECK(read_error(z, &msg) == Errc::kernel_failure);
    CHECK_THAT(msg, Catch::Contains("injected fault"));
    CHECK((x.to(cpu) + 1.0f).to_vector<float>() == std::vector<float>(3, 2.0f));
  }
  CHECK(live_handles(cpu) == 0);
  CHECK(live_handles(bad) == 0);
}

TEST_CASE("sync reports success after failed ops: failures belong to the tensors", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  auto a = d.full({2}, 1.0);
  f.fail_execute_in(1);
  auto b = a.exp();
  CHECK_NOTHROW(d.sync().get());
  CHECK(read_error(b) == Errc::kernel_failure);
}

TEST_CASE("a fusible() that throws ends the chain and the ops run alone", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  f.plan->fuse = true;
  std::vector<float> values(4096), want(4096);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(i % 7) - 3.0f;
    want[i] = std::max((values[i] + 1.0f) * 2.0f, 0.0f);
  }
  auto x = d.tensor<float>(values, {4096});
  d.sync().get();
  // A statement of its own, so the intermediates' drops travel with the
  // chain (a temporary still alive at the read could be read later).
  // The chain fuses while fusible() answers (a few tries: on a loaded
  // machine the flusher may send part of a batch before the rest is queued).
  uint64_t fused_before = 0;
  for (int attempt = 0; attempt < 20 && fused_before == 0; ++attempt) {
    auto y = ((x + 1.0f) * 2.0f).relu();
    CHECK(y.to_vector<float>() == want);
    fused_before = d.stats().get().ops_fused;
  }
  CHECK(fused_before > 0);
  f.plan->fusible_throws = true;
  auto z = ((x + 1.0f) * 2.0f).relu();
  CHECK(z.to_vector<float>() == want);
  CHECK(d.stats().get().ops_fused == fused_before);
}

TEST_CASE("reads and syncs of a device its backend stopped fail with device_lost", "[reliability][fault]") {
  using namespace std::chrono_literals;
  Faulty f;
  auto d = f.dev();
  auto t = d.tensor<float>({1, 2}, {2});
  d.sync().get();
  f.plan->poll_throws = true;
  {
    std::lock_guard lock(f.plan->kept_mutex);
    REQUIRE(f.plan->kept_waker);
    f.plan->kept_waker();  // the runner polls, the backend throws, the device stops
  }
  // Once the runtime knows, new work is refused at the call.
  bool lost = false;
  for (int i = 0; i < 500 && !lost; ++i) {
    try {
      (void)d.tensor<float>({1}, {1});
      std::this_thread::sleep_for(10ms);
    } catch (const Error& e) {
      lost = e.code() == Errc::device_lost;
    }
  }
  REQUIRE(lost);
  auto read = t.read();
  REQUIRE(read.wait_for(30s));
  std::string msg;
  CHECK(read_error(t, &msg) == Errc::device_lost);
  CHECK_THAT(msg, Catch::Contains("faulty:0") && Catch::Contains("poll boom") && !Catch::Contains("error("));
  auto sync = d.sync();
  REQUIRE(sync.wait_for(30s));
  try {
    sync.get();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::device_lost);
  }
}

TEST_CASE("a read its backend never answers fails when the device stops", "[reliability][fault]") {
  using namespace std::chrono_literals;
  // The backend keeps the reads' callbacks beyond its own life and the
  // runtime's: the runner answers them when it stops, with the reason.
  auto plan = std::make_shared<FaultPlan>();
  auto runtime = [&] {
    RuntimeOptions o;
    o.devices = {"faulty:0"};
    o.cpu_threads = 1;
    o.shutdown_timeout = 200ms;
    testing::add_faulty_backend(o, plan);
    return std::make_unique<Runtime>(std::move(o));
  };
  auto message_of = [](const Future<TensorData>& f) {
    try {
      (void)f.get();
    } catch (const Error& e) {
      return std::string(e.what()) + " [" + std::to_string(static_cast<int>(e.code())) + "]";
    }
    return std::string("no error");
  };
  const auto lost_code = " [" + std::to_string(static_cast<int>(Errc::device_lost)) + "]";
  // A runtime whose device holds a read its backend will never answer.
  struct Held {
    std::unique_ptr<Runtime> rt;
    Device d;
    Tensor t;
    Future<TensorData> read;
  };
  auto held_read = [&] {
    plan->poll_throws = false;
    plan->hold_reads = false;
    Held h{runtime(), {}, {}, {}};
    h.d = h.rt->device("faulty:0");
    h.t = h.d.tensor<float>({1, 2}, {2});
    h.d.sync().get();
    plan->hold_reads = true;
    h.read = h.t.read();
    CHECK_FALSE(h.read.wait_for(100ms));
    return h;
  };
  {
    auto h = held_read();
    plan->poll_throws = true;
    {
      std::lock_guard lock(plan->kept_mutex);
      REQUIRE(plan->kept_waker);
      plan->kept_waker();  // the runner polls, the backend throws, the device stops
    }
    REQUIRE(h.read.wait_for(30s));
    auto msg = message_of(h.read);
    CHECK_THAT(msg, Catch::Contains("poll boom") && Catch::EndsWith(lost_code));
    // A read asked right after names the reason too, whether or not the
    // router has heard of the loss yet.
    auto later = h.t.read();
    REQUIRE(later.wait_for(30s));
    msg = message_of(later);
    CHECK_THAT(msg, Catch::Contains("poll boom") && Catch::EndsWith(lost_code));
    CHECK(h.d.lost());
  }
  {
    // Shut down with a read the backend holds: it fails, it does not wait for ever.
    auto h = held_read();
    h.rt.reset();
    REQUIRE(h.read.wait_for(30s));
    CHECK(message_of(h.read) != "no error");
  }
  std::lock_guard lock(plan->held_mutex);
  CHECK(plan->held_reads.size() == 2);  // never called: the runner answered instead
}

TEST_CASE("a read error a backend returns names the device", "[reliability][fault]") {
  Faulty f;
  auto d = f.dev();
  auto a = d.tensor<float>({1, 2}, {2});
  d.sync().get();
  f.plan->mode = FaultPlan::Mode::error;
  f.plan->fail_to_data_at = f.plan->to_datas.load() + 1;
  std::string msg;
  CHECK(read_error(a, &msg) == Errc::kernel_failure);
  CHECK_THAT(msg, Catch::StartsWith("faulty:0: injected fault in to_data"));
  CHECK(a.to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("a backend kind whose entries throw fails the runtime's start with an Error naming it",
          "[reliability][fault]") {
  auto kind = [](std::function<int()> count, std::function<void()> on_create) {
    return backends::BackendKind{
        "thrower", std::move(count), [] { return std::string{}; },
        [on_create = std::move(on_create)](int, const backends::DeviceOptions&) -> std::unique_ptr<backends::Backend> {
          on_create();
          return nullptr;
        }};
  };
  auto start = [](std::function<void(std::vector<backends::BackendKind>&)> extend) {
    RuntimeOptions o;
    o.devices = {"thrower:0"};
    o.extend_backends = std::move(extend);
    try {
      Runtime rt(std::move(o));
      return std::pair{Errc{}, std::string("no error")};
    } catch (const Error& e) {
      return std::pair{e.code(), std::string(e.what())};
    }
  };
  auto [c1, m1] = start(
      [&](auto& kinds) { kinds.push_back(kind([] { return 1; }, [] { throw std::runtime_error("no such card"); })); });
  CHECK(c1 == Errc::unknown_device);
  CHECK_THAT(m1, Catch::Contains("thrower:0") && Catch::Contains("create") && Catch::Contains("no such card"));
  auto [c2, m2] = start([&](auto& kinds) {
    kinds.push_back(kind([]() -> int { throw 7; }, [] {}));  // NOLINT(hicpp-exception-baseclass)
  });
  CHECK(c2 == Errc::unknown_device);
  CHECK_THAT(m2, Catch::Contains("device_count") && Catch::Contains("not a std::exception"));
  auto [c3, m3] = start([](auto&) { throw std::logic_error("bad extension"); });
  CHECK(c3 == Errc::invalid_argument);
  CHECK_THAT(m3, Catch::Contains("extend_backends") && Catch::Contains("bad extension"));
  // An entry's own Error is named too (it passed through as it was).
  auto [c4, m4] = start([&](auto& kinds) {
    kinds.push_back(kind([] { return 1; }, [] { throw Error(Errc::out_of_memory, "card full"); }));
  });
  CHECK(c4 == Errc::unknown_device);
  CHECK_THAT(m4, Catch::Contains("thrower:0") && Catch::Contains("create") && Catch::Contains("card full"));
  // A kind without devices whose reason throws: still an Error naming it.
  auto [c5, m5] = start([](auto& kinds) {
    kinds.push_back(backends::BackendKind{
        "thrower", [] { return 0; }, []() -> std::string { throw std::runtime_error("why boom"); },
        [](int, const backends::DeviceOptions&) -> std::unique_ptr<backends::Backend> { return nullptr; }});
  });
  CHECK(c5 == Errc::unknown_device);
  CHECK_THAT(m5, Catch::Contains("thrower") && Catch::Contains("unavailable_reason") && Catch::Contains("why boom"));
}
