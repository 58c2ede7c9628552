// SPDX-License-Identifier: Apache-2.0
// The CUDA backend on its own, below the runner: memory limit, the
// waker/poll completion path of reads, and the memory statistics.

#include "backends/backend.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <thread>

#include "backends/cuda/cuda_backend.hpp"
#include "switchyard/switchyard.hpp"

namespace sb = switchyard::backends;
namespace sy = switchyard;
using namespace switchyard;

namespace {

std::unique_ptr<sb::Backend> make_cuda(uint64_t limit = 0) {
  auto kinds = sb::backend_kinds();
  auto cuda = std::find_if(kinds.begin(), kinds.end(), [](const auto& k) { return k.name == "cuda"; });
  if (cuda == kinds.end() || cuda->device_count() == 0) return nullptr;
  sb::DeviceOptions opts;
  opts.memory_limit = limit;
  return cuda->create(0, opts);
}

TensorIr tensor(uint64_t id, Shape s, DType t = DType::f32) { return TensorIr{TensorId{id}, std::move(s), t}; }

sb::Expected<sb::BufferPtr> fill(sb::Backend& be, const TensorIr& out, double v) {
  OperationIr op = FillOp{FillKind::full, out, v, 0};
  std::array<sb::BufferPtr, 1> outs;
  if (auto err = be.execute(op, {}, outs)) return err;
  return outs[0];
}

}  // namespace

TEST_CASE("cuda backend: an allocation over the memory limit fails with out_of_memory, later ones work",
          "[cuda][gpu]") {
  auto be = make_cuda(1 << 20);
  if (!be) {
    WARN("no CUDA device");
    return;
  }
  auto big = fill(*be, tensor(1, {1 << 20}), 1);  // 4 MiB > 1 MiB
  REQUIRE_FALSE(big);
  CHECK(big.error().code() == Errc::out_of_memory);
  auto small = fill(*be, tensor(2, {16}), 3);
  REQUIRE(small);
  std::optional<sb::Expected<TensorData>> got;
  be->to_data(tensor(2, {16}), *small, [&](sb::Expected<TensorData> r) { got = std::move(r); });
  REQUIRE_FALSE(be->synchronize());
  REQUIRE(got.has_value());
  REQUIRE(*got);
  CHECK((*got)->to_vector<float>() == std::vector<float>(16, 3.0f));
}

TEST_CASE("cuda backend: a read completes through the waker and poll, without synchronize", "[cuda][gpu]") {
  auto be = make_cuda();
  if (!be) {
    WARN("no CUDA device");
    return;
  }
  std::atomic<int> wakes{0};
  be->set_waker([&] { ++wakes; });
  auto x = fill(*be, tensor(1, {1000}, DType::i64), 7);
  REQUIRE(x);
  std::optional<sb::Expected<TensorData>> got;
  be->to_data(tensor(1, {1000}, DType::i64), *x, [&](sb::Expected<TensorData> r) { got = std::move(r); });
  for (int i = 0; i < 1000 && wakes.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(wakes.load() > 0);
  be->poll();
  REQUIRE(got.has_value());
  REQUIRE(*got);
  CHECK((*got)->to_vector<int64_t>() == std::vector<int64_t>(1000, 7));
}

TEST_CASE("cuda backend: memory() counts live bytes and keeps freed memory cached", "[cuda][gpu]") {
  auto be = make_cuda();
  if (!be) {
    WARN("no CUDA device");
    return;
  }
  {
    auto x = fill(*be, tensor(1, {1 << 20}), 0);
    REQUIRE(x);
    CHECK(be->memory().bytes_in_use >= 4u << 20);
  }
  REQUIRE_FALSE(be->synchronize());
  auto m = be->memory();
  CHECK(m.bytes_in_use < 4u << 20);
  CHECK(m.bytes_cached >= 4u << 20);
}

TEST_CASE("cuda backend: creating a backend leaves the caller's current device as it was", "[cuda][gpu][review]") {
  auto kinds = sb::backend_kinds();
  auto cuda = std::find_if(kinds.begin(), kinds.end(), [](const auto& k) { return k.name == "cuda"; });
  if (cuda == kinds.end() || cuda->device_count() == 0) {
    WARN("no CUDA device");
    return;
  }
  const int before = switchyard::backends::cuda::testing::current_device();
  REQUIRE(before >= 0);
  std::vector<std::unique_ptr<sb::Backend>> all;
  for (int i = 0; i < cuda->device_count(); ++i) all.push_back(cuda->create(i, {}));
  CHECK(switchyard::backends::cuda::testing::current_device() == before);
  if (cuda->device_count() < 2) WARN("one GPU: the check cannot tell the devices apart");
}

// A broken context (an illegal address) must fail what is pending on that
// device with device_lost, fail later requests at once, and leave the other
// devices working. Hidden ([.]): the fault breaks the device for the rest of
// the process, so the GPU check runs this case as its own process.
TEST_CASE("cuda: a sticky CUDA error fails pending and later reads with device_lost", "[.][cuda][gpu][fault]") {
  sy::Runtime rt(sy::RuntimeOptions{.devices = {"cpu:0", "cuda:0"}});
  auto gpu = rt.device("cuda:0");
  auto cpu = rt.device("cpu:0");
  // Queue enough work that the read is still waiting when the fault hits.
  auto a = gpu.normal({4096, 4096});
  auto y = a;
  for (int i = 0; i < 20; ++i) y = y.matmul(a) * 1e-3;
  auto pending = y.sum().read();
  const std::string fault = switchyard::backends::cuda::testing::break_context(0);
  INFO("the fault gave " << fault);
  CHECK(fault != "cudaSuccess");
  // The pending read ends (either it finished before the fault, or it fails).
  REQUIRE(pending.wait_for(std::chrono::seconds(30)));
  try {
    (void)pending.get();
    WARN("the read finished before the fault");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::device_lost);
    CHECK(std::string(e.what()).find("cudaError") != std::string::npos);
  }
  // Later requests fail at once, naming the CUDA error.
  auto later = gpu.ones({16}).sum().read();
  REQUIRE(later.wait_for(std::chrono::seconds(30)));
  try {
    (void)later.get();
    FAIL("a read on a lost device succeeded");
  } catch (const sy::Error& e) {
    CHECK(e.code() == sy::Errc::device_lost);
    CHECK(std::string(e.what()).find(fault) != std::string::npos);
  }
  // Other devices keep working.
  auto on_cpu = cpu.ones({16}).sum().read();
  REQUIRE(on_cpu.wait_for(std::chrono::seconds(30)));
  CHECK(on_cpu.get().to_vector<float>() == std::vector<float>{16});
}
