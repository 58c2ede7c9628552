// SPDX-License-Identifier: Apache-2.0
// Runtime behaviour: bridges and pending tensors, lifetime, concurrency,
// and every error path of the core.
#include <catch2/catch.hpp>
#include <thread>

#include <caf/all.hpp>

#include <switchyard/switchyard.hpp>

#include "actors/runner.hpp"
#include "backends/backend.hpp"

using namespace switchyard;
using namespace std::chrono_literals;

namespace {

Runtime make_runtime() { return Runtime(RuntimeOptions{.devices = {"cpu:0", "cpu:1"}}); }

uint64_t live_handles(const Device& d) { return d.stats().get().live_handles; }

// Drops are fire-and-forget: wait (bounded) until the runner has seen them.
bool eventually_no_handles(const Device& d) {
  for (int i = 0; i < 200; ++i) {
    d.sync().get();
    if (live_handles(d) == 0) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

template <class F>
Errc error_code_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  FAIL("expected an Error");
  return Errc::protocol_error;
}

template <class F>
std::string error_message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected an Error");
  return {};
}

}  // namespace

TEST_CASE("to() moves a tensor to another device and ops there wait for it", "[bridge]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0"), cpu1 = rt.device("cpu:1");
  auto a = cpu0.tensor<float>({1, 2, 3}, {3});
  auto b = a.to(cpu1);
  CHECK(b.device() == cpu1);
  // Queued right after the bridge: the runner defers them until the import lands.
  auto c = (b * 2.0 + 1.0).relu();
  CHECK(c.to_vector<float>() == std::vector<float>{3, 5, 7});
  CHECK(a.to_vector<float>() == std::vector<float>{1, 2, 3});  // the source stays
}

TEST_CASE("A chain cpu:0 -> cpu:1 -> cpu:0 keeps values and order", "[bridge]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0"), cpu1 = rt.device("cpu:1");
  auto x = cpu0.arange(0, 6, 1, DType::f32).reshape({2, 3});
  auto y = (x.to(cpu1) * 10.0).to(cpu0) + x;
  CHECK(y.device() == cpu0);
  CHECK(y.to_vector<float>() == std::vector<float>{0, 11, 22, 33, 44, 55});
  auto stats = cpu1.stats().get();
  CHECK(stats.bytes_bridged_in == 6 * sizeof(float));
  CHECK(stats.bytes_bridged_out == 6 * sizeof(float));
}

TEST_CASE("A read of a pending tensor waits for its bridge", "[bridge]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0"), cpu1 = rt.device("cpu:1");
  // A large enough source that its producing op is still running when the
  // bridge and the read are queued.
  auto big = cpu0.ones({512, 512}).matmul(cpu0.ones({512, 512}));
  auto moved = big.to(cpu1);
  auto first = moved.slice({{0, 1}, {0, 2}});
  auto f = first.read();
  CHECK(f.get().to_vector<float>() == std::vector<float>{512, 512});
}

TEST_CASE("Every dtype survives a bridge", "[bridge]") {
  auto rt = make_runtime();
  auto cpu1 = rt.device("cpu:1");
  for (DType t : all_dtypes) {
    auto a = rt.device("cpu:0").arange(0, 5, 1, DType::i64).cast(t);
    auto b = a.to(cpu1);
    CHECK(b.dtype() == t);
    CHECK(b.to_vector<double>() == a.to_vector<double>());
  }
}

TEST_CASE("Bool data holding bytes other than 0 and 1 is read as true", "[bridge]") {
  Runtime rt(RuntimeOptions{.devices = {"cpu:0", "reference:0"}});
  const uint8_t raw[] = {0, 2, 255, 1};
  Bytes bytes = Bytes::copy_of(raw, sizeof raw);
  for (auto name : {"cpu:0", "reference:0"}) {
    INFO(name);
    auto d = rt.device(name);
    auto t = d.from_data(TensorData{Shape{4}, DType::boolean, bytes});
    auto ones = d.full({4}, 1.0, DType::boolean);
    CHECK(t.to_vector<int>() == std::vector<int>{0, 1, 1, 1});
    CHECK(t.eq(ones).to_vector<int>() == std::vector<int>{0, 1, 1, 1});
    CHECK(t.logical_not().to_vector<int>() == std::vector<int>{1, 0, 0, 0});
    CHECK(t.cast(DType::i32).sum().to_vector<int>() == std::vector<int>{3});
  }
  // The caller's bytes are not rewritten behind its back.
  CHECK(bytes.as<uint8_t>()[1] == 2);
}

TEST_CASE("No handle is left on any device after all tensors are gone", "[lifetime]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0"), cpu1 = rt.device("cpu:1");
  {
    auto a = cpu0.uniform({64, 64});
    auto b = (a.matmul(a) + 1.0).relu();
    auto c = b.to(cpu1).sum({0});
    auto d = c.to(cpu0) * 2.0;
    CHECK(d.numel() == 64);
    (void)d.read().get();
    CHECK(live_handles(cpu0) > 0);
  }
  CHECK(eventually_no_handles(cpu0));
  CHECK(eventually_no_handles(cpu1));
}

TEST_CASE("Copies of a Tensor share it; the last copy frees it", "[lifetime]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0");
  Tensor keep;
  {
    auto a = cpu0.ones({4});
    keep = a;
  }
  cpu0.sync().get();
  CHECK(live_handles(cpu0) == 1);
  CHECK(keep.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  keep = Tensor();
  CHECK(eventually_no_handles(cpu0));
}

TEST_CASE("Many threads share one runtime and get their own results", "[concurrency]") {
  auto rt = make_runtime();
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      auto dev = rt.device(t % 2 ? "cpu:1" : "cpu:0");
      for (int i = 0; i < 40; ++i) {
        auto x = dev.full({16}, t * 100 + i, DType::f64);
        auto y = (x * 2.0 - static_cast<double>(t)).sum();
        if (y.to_vector<double>()[0] != 16.0 * (2.0 * (t * 100 + i) - t)) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(eventually_no_handles(rt.device("cpu:0")));
  CHECK(eventually_no_handles(rt.device("cpu:1")));
}

TEST_CASE("A tensor made on one thread and used on another sees its producing op", "[concurrency]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0");
  for (int round = 0; round < 20; ++round) {
    Tensor made;
    std::thread producer([&] { made = cpu0.full({8}, round) * 3.0; });
    producer.join();
    Tensor used;
    std::thread consumer([&] { used = made + 1.0; });
    consumer.join();
    CHECK(used.to_vector<float>()[7] == static_cast<float>(round * 3 + 1));
  }
}

TEST_CASE("Future::then runs without blocking and wait_for times out cleanly", "[future]") {
  auto rt = make_runtime();
  auto x = rt.device("cpu:0").tensor<float>({1, 2, 3}, {3});
  std::atomic<float> seen{0};
  auto sum = x.sum().read().then([&](TensorData d) {
    seen = d.as<float>()[0];
    return d.as<float>()[0] * 2;
  });
  CHECK(sum.get() == 12.f);
  CHECK(seen == 6.f);
  CHECK(rt.device("cpu:0").sync().wait_for(5s));
  Promise<int> never;
  CHECK_FALSE(never.future().wait_for(10ms));
}

TEST_CASE("Future::wait_for takes any duration and saturates huge ones", "[future]") {
  // Durations beyond what nanoseconds hold (hours::max) and the usual
  // units all reach the same wait; none overflows into "already timed out".
  Promise<int> later;
  std::thread completer([later] {
    std::this_thread::sleep_for(50ms);
    later.set_value(7);
  });
  auto f = later.future();
  CHECK_FALSE(f.wait_for(std::chrono::nanoseconds(0)));
  CHECK_FALSE(f.wait_for(std::chrono::microseconds(-5)));
  CHECK(f.wait_for(std::chrono::hours::max()));
  completer.join();
  CHECK(f.wait_for(std::chrono::duration<double>(0.5)));
  CHECK(f.get() == 7);
  Promise<void> never;
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(never.future().wait_for(std::chrono::duration<double, std::milli>(20.5)));
  CHECK(std::chrono::steady_clock::now() - start >= 20ms);
}

// --- errors ------------------------------------------------------------------

TEST_CASE("A shape mismatch fails at the call and names both shapes", "[errors]") {
  auto rt = make_runtime();
  auto a = rt.device("cpu:0").zeros({2, 3});
  auto b = rt.device("cpu:0").zeros({4});
  CHECK(error_code_of([&] { (void)(a + b); }) == Errc::shape_mismatch);
  auto msg = error_message_of([&] { (void)(a + b); });
  CHECK_THAT(msg, Catch::Contains("[2, 3]") && Catch::Contains("[4]") && Catch::Contains("add"));
  CHECK(error_code_of([&] { (void)a.matmul(a); }) == Errc::shape_mismatch);
  CHECK(error_code_of([&] { (void)a.reshape({5}); }) == Errc::shape_mismatch);
  CHECK(error_code_of([&] { (void)a.sum({2}); }) == Errc::shape_mismatch);
}

TEST_CASE("A dtype mismatch fails at the call and names the dtypes", "[errors]") {
  auto rt = make_runtime();
  auto f = rt.device("cpu:0").zeros({2});
  auto d = rt.device("cpu:0").zeros({2, 2}, DType::f64);
  auto msg = error_message_of([&] { (void)f.reshape({1, 2}).matmul(d); });
  CHECK_THAT(msg, Catch::Contains("f32") && Catch::Contains("f64"));
  CHECK(error_code_of([&] { (void)f.bitwise_and(f); }) == Errc::dtype_mismatch);
  CHECK(error_code_of([&] { (void)rt.device("cpu:0").ones({2}, DType::i32).mean(); }) == Errc::dtype_mismatch);
}

TEST_CASE("An unknown device is an error, never a fallback", "[errors]") {
  auto rt = make_runtime();
  CHECK(error_code_of([&] { (void)rt.device("cpu:7"); }) == Errc::unknown_device);
  auto msg = error_message_of([&] { (void)rt.device("gpu:0"); });
  CHECK_THAT(msg, Catch::Contains("gpu:0") && Catch::Contains("cpu:0") && Catch::Contains("cpu:1"));
  CHECK(error_code_of([] { Runtime bad(RuntimeOptions{.devices = {"tpu:0"}}); }) == Errc::unknown_device);
  CHECK(error_code_of([] { Runtime bad(RuntimeOptions{.devices = {"cpu"}}); }) == Errc::unknown_device);
}

TEST_CASE("A device index is plain decimal digits and a device is named once", "[errors]") {
  for (const char* bad : {"cpu:01", "cpu: 0", "cpu:+0", "cpu:-1", "cpu:0x0", "cpu:0 ", "cpu:99999999999", "cpu:**"}) {
    INFO(bad);
    auto msg = error_message_of([&] { Runtime rt(RuntimeOptions{.devices = {bad}}); });
    CHECK_THAT(msg, Catch::Contains(std::string("'") + bad + "'") && Catch::Contains("invalid index"));
    CHECK(error_code_of([&] { Runtime rt(RuntimeOptions{.devices = {bad}}); }) == Errc::unknown_device);
  }
  CHECK(error_code_of([] { Runtime rt(RuntimeOptions{.devices = {"cpu:0", "cpu:0"}}); }) == Errc::invalid_argument);
  CHECK_THAT(error_message_of([] {
               Runtime rt(RuntimeOptions{.devices = {"cpu:0", "cpu:0"}});
             }),
             Catch::Contains("'cpu:0' requested twice"));
  CHECK_THAT(error_message_of([] {
               Runtime rt(RuntimeOptions{.devices = {"cpu:1", "cpu:0", "cpu:1"}});
             }),
             Catch::Contains("'cpu:1' requested twice"));
  Runtime ok(RuntimeOptions{.devices = {"cpu:10", "cpu:0"}});
  CHECK(ok.device("cpu:10").name() == "cpu:10");
  CHECK((ok.device("cpu:10").ones({2}) + 1).to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("The default runtime starts cpu:0 and says why other devices are missing", "[runtime]") {
  Runtime rt;
  auto devices = rt.devices();
  REQUIRE_FALSE(devices.empty());
  CHECK(devices.front().name() == "cpu:0");
  bool has_cuda = false;
  for (const auto& d : devices) has_cuda = has_cuda || d.kind() == "cuda";
  if (!has_cuda) {
    REQUIRE_FALSE(rt.unavailable().empty());
    CHECK_THAT(rt.unavailable().front(), Catch::Contains("cuda"));
  }
}

TEST_CASE("Operands on different devices are rejected with both names", "[errors]") {
  auto rt = make_runtime();
  auto a = rt.device("cpu:0").zeros({2});
  auto b = rt.device("cpu:1").zeros({2});
  auto msg = error_message_of([&] { (void)(a + b); });
  CHECK_THAT(msg, Catch::Contains("cpu:0") && Catch::Contains("cpu:1"));
}

TEST_CASE("Use of a moved-from tensor fails clearly", "[errors]") {
  auto rt = make_runtime();
  auto a = rt.device("cpu:0").zeros({2});
  auto b = std::move(a);
  CHECK(error_code_of([&] { (void)a.relu(); }) == Errc::invalid_tensor);  // NOLINT(bugprone-use-after-move)
  CHECK_THAT(error_message_of([&] { (void)(a + b); }), Catch::Contains("moved-from"));
  CHECK(b.to_vector<float>() == std::vector<float>{0, 0});
}

TEST_CASE("A failing kernel poisons its outputs and their dependents only", "[errors]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0");
  auto a = cpu0.tensor<int32_t>({5, 6}, {2});
  auto zero = cpu0.tensor<int32_t>({1, 0}, {2});
  auto bad = a.remainder(zero);  // integer remainder by zero: the kernel fails
  auto worse = (bad + 1).sum();
  auto fine = (a * 2).sum();
  auto msg = error_message_of([&] { (void)bad.read().get(); });
  CHECK_THAT(msg, Catch::Contains("division by zero") && Catch::Contains("cpu:0"));
  CHECK(error_code_of([&] { (void)worse.read().get(); }) == Errc::kernel_failure);
  // Bridging a poisoned tensor carries the error to the other device.
  CHECK(error_code_of([&] { (void)bad.to(rt.device("cpu:1")).read().get(); }) == Errc::kernel_failure);
  CHECK(fine.to_vector<int64_t>() == std::vector<int64_t>{22});
  // The runner keeps serving.
  CHECK((a + a).to_vector<int32_t>() == std::vector<int32_t>{10, 12});
  auto idx = cpu0.tensor<int64_t>({0, 5}, {2});
  CHECK(error_code_of([&] { (void)a.index_select(0, idx).read().get(); }) == Errc::index_out_of_range);
}

TEST_CASE("A device failure names the tensor of the op where it began", "[errors]") {
  auto rt = make_runtime();
  auto cpu0 = rt.device("cpu:0");
  auto a = cpu0.tensor<int32_t>({5, 6}, {2});
  auto zero = cpu0.tensor<int32_t>({1, 0}, {2});
  auto bad = a.remainder(zero);
  auto worse = (bad + 1).sum();
  auto elsewhere = (bad * 3).to(rt.device("cpu:1")).relu();
  auto failed_tensor = [](const Tensor& t) {
    try {
      (void)t.read().get();
    } catch (const Error& e) {
      return e.tensor();
    }
    return TensorId{};
  };
  REQUIRE(bad.id());
  CHECK(failed_tensor(bad) == bad.id());
  CHECK(failed_tensor(worse) == bad.id());
  CHECK(failed_tensor(elsewhere) == bad.id());
  // A failure that is no op's names no tensor.
  try {
    (void)cpu0.tensor<float>({1, 2}, {2}).matmul(cpu0.tensor<float>({1, 2, 3}, {3}));
    FAIL("expected a shape error at the call");
  } catch (const Error& e) {
    CHECK(!e.tensor());
  }
}

TEST_CASE("Futures of an empty future and a closed runtime fail clearly", "[errors]") {
  Future<int> empty;
  CHECK(error_code_of([&] { (void)empty.get(); }) == Errc::invalid_argument);
  Tensor survivor;
  {
    auto rt = make_runtime();
    survivor = rt.device("cpu:0").ones({2});
  }
  CHECK(error_code_of([&] { (void)survivor.read().get(); }) == Errc::runtime_closed);
  CHECK(error_code_of([&] { (void)survivor.relu(); }) == Errc::runtime_closed);
}

// --- runner protocol, driven directly -----------------------------------------

namespace {
struct ProtocolConfig : caf::actor_system_config {
  ProtocolConfig() { register_message_types(*this); }
};

runner_actor spawn_cpu_runner(caf::actor_system& sys, const std::string& name) {
  auto kinds = backends::backend_kinds();
  std::shared_ptr<backends::Backend> backend = kinds.front().create(0, backends::DeviceOptions{1});
  return actors::spawn_runner(sys, name, std::move(backend));
}

TensorIr tir(uint64_t id, Shape s, TensorStatus st = TensorStatus::read_only) {
  return TensorIr{TensorId{id}, std::move(s), DType::f32, st};
}
}  // namespace

TEST_CASE("A runner defers only the ops that need a pending import, in order", "[protocol]") {
  ProtocolConfig cfg;
  caf::actor_system sys{cfg};
  auto runner = spawn_cpu_runner(sys, "test:0");
  caf::scoped_actor self{sys};
  auto data = TensorData::from(std::vector<float>{1, 2}, Shape{2});
  self->send(runner, expect_atom::value, tir(10, {2}));
  std::vector<OperationIr> ops;
  ops.emplace_back(ScalarOp{BinaryKind::mul, tir(10, {2}), 3.0, false, tir(11, {2}, TensorStatus::not_init)});
  ops.emplace_back(FillOp{FillKind::full, tir(20, {2}, TensorStatus::not_init), 7.0, 0});  // independent
  self->send(runner, submit_atom::value, ops);
  // The independent op ran although #11 waits.
  self->request(runner, caf::infinite, read_atom::value, TensorId{20})
      .receive(
          [](TensorData& d) {
            CHECK(d.to_vector<float>() == std::vector<float>{7, 7});
          },
          [](caf::error& e) { FAIL(caf::to_string(e)); });
  self->request(runner, caf::infinite, stats_atom::value)
      .receive([](DeviceStats& s) { CHECK(s.queue_depth == 1); }, [](caf::error& e) { FAIL(caf::to_string(e)); });
  self->send(runner, import_atom::value, TensorId{10}, data);
  self->request(runner, caf::infinite, read_atom::value, TensorId{11})
      .receive(
          [](TensorData& d) {
            CHECK(d.to_vector<float>() == std::vector<float>{3, 6});
          },
          [](caf::error& e) { FAIL(caf::to_string(e)); });
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}

TEST_CASE("A tensor imported in parts is joined into a block of the device's pool", "[protocol]") {
  // Parts from another node are joined into Backend::host_block, which on
  // cpu is the device's pool: once the tensor goes, the block is kept for
  // the next transfer (a block from malloc would just be freed).
  ProtocolConfig cfg;
  caf::actor_system sys{cfg};
  auto runner = spawn_cpu_runner(sys, "test:0");
  caf::scoped_actor self{sys};
  constexpr int64_t n = 3 * 256 * 1024 + 5;  // 3 MiB + 20 bytes: 4 MiB in the pool's classes
  constexpr uint64_t total = n * sizeof(float);
  constexpr uint64_t part_bytes = 1 << 20;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 977) - 300.0f;
  self->send(runner, expect_atom::value, tir(30, {n}));
  for (uint64_t offset = 0; offset < total; offset += part_bytes) {
    const auto size = std::min(part_bytes, total - offset);
    DataPart part{TensorId{30}, Shape{n},
                  DType::f32,   total,
                  offset,       Bytes::copy_of(reinterpret_cast<const std::byte*>(values.data()) + offset, size),
                  true};
    bool acked = false;
    self->request(runner, std::chrono::seconds(10), import_atom::value, std::move(part))
        .receive([&](done_atom) { acked = true; }, [](caf::error& e) { FAIL(caf::to_string(e)); });
    CHECK(acked);
  }
  self->request(runner, std::chrono::seconds(10), read_atom::value, TensorId{30})
      .receive([&](TensorData& d) { CHECK(d.to_vector<float>() == values); },
               [](caf::error& e) { FAIL(caf::to_string(e)); });
  auto stats = [&] {
    DeviceStats out;
    self->request(runner, std::chrono::seconds(10), stats_atom::value)
        .receive([&](DeviceStats& s) { out = s; }, [](caf::error& e) { FAIL(caf::to_string(e)); });
    return out;
  };
  constexpr uint64_t pool_class = uint64_t{4} << 20;
  auto before = stats();
  CHECK(before.live_bytes == total);
  CHECK(before.bytes_bridged_in == total);
  CHECK(before.cached_bytes == 0);
  self->send(runner, submit_atom::value, std::vector<OperationIr>{OperationIr{DropOp{TensorId{30}}}});
  auto after = stats();
  CHECK(after.live_bytes == 0);
  CHECK(after.cached_bytes == pool_class);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}

TEST_CASE("An import that overtakes its expect is kept, not lost", "[protocol]") {
  ProtocolConfig cfg;
  caf::actor_system sys{cfg};
  auto runner = spawn_cpu_runner(sys, "test:0");
  caf::scoped_actor self{sys};
  self->send(runner, import_atom::value, TensorId{5}, TensorData::from(std::vector<float>{4, 5}, Shape{2}));
  self->send(runner, expect_atom::value, tir(5, {2}));
  self->request(runner, caf::infinite, read_atom::value, TensorId{5})
      .receive(
          [](TensorData& d) {
            CHECK(d.to_vector<float>() == std::vector<float>{4, 5});
          },
          [](caf::error& e) { FAIL(caf::to_string(e)); });
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}

TEST_CASE("A runner answers lies and unknown ids with errors and keeps serving", "[protocol]") {
  ProtocolConfig cfg;
  caf::actor_system sys{cfg};
  auto runner = spawn_cpu_runner(sys, "test:0");
  caf::scoped_actor self{sys};
  std::vector<OperationIr> ops;
  // Input that does not exist.
  ops.emplace_back(UnaryOp{UnaryKind::relu, tir(1, {2}), tir(2, {2}, TensorStatus::not_init), 0, 0});
  // Output shape that contradicts the rules.
  ops.emplace_back(FillOp{FillKind::full, tir(3, {2}, TensorStatus::not_init), 1.0, 0});
  ops.emplace_back(UnaryOp{UnaryKind::relu, tir(3, {2}), tir(4, {5}, TensorStatus::not_init), 0, 0});
  // Import data of the wrong size.
  self->send(runner, submit_atom::value, ops);
  self->send(runner, expect_atom::value, tir(6, {3}));
  self->send(runner, import_atom::value, TensorId{6}, TensorData::from(std::vector<float>{1}, Shape{1}));
  for (uint64_t id : {2, 4, 6})
    self->request(runner, caf::infinite, read_atom::value, TensorId{id})
        .receive([](TensorData&) { FAIL("expected an error"); },
                 [&](caf::error& e) { CHECK(describe(e).message.find("test:0") != std::string::npos); });
  self->request(runner, caf::infinite, read_atom::value, TensorId{777})
      .receive([](TensorData&) { FAIL("expected an error"); },
               [](caf::error& e) { CHECK(describe(e).code == Errc::unknown_tensor); });
  self->request(runner, caf::infinite, read_atom::value, TensorId{3})
      .receive(
          [](TensorData& d) {
            CHECK(d.to_vector<float>() == std::vector<float>{1, 1});
          },
          [](caf::error& e) { FAIL(caf::to_string(e)); });
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}
