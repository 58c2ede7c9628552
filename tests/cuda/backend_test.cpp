// The CUDA backend on its own, below the runner: memory limit, the
// waker/poll completion path of reads, and the memory statistics.

#include "backends/backend.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <optional>
#include <thread>

namespace sb = switchyard::backends;
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

caf::expected<sb::BufferPtr> fill(sb::Backend& be, const TensorIr& out, double v) {
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
  CHECK(describe(big.error()).code == Errc::out_of_memory);
  auto small = fill(*be, tensor(2, {16}), 3);
  REQUIRE(small);
  std::optional<caf::expected<TensorData>> got;
  be->to_data(tensor(2, {16}), *small, [&](caf::expected<TensorData> r) { got = std::move(r); });
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
  std::optional<caf::expected<TensorData>> got;
  be->to_data(tensor(1, {1000}, DType::i64), *x, [&](caf::expected<TensorData> r) { got = std::move(r); });
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
