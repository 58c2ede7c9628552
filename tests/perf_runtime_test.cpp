// SPDX-License-Identifier: Apache-2.0
// Behaviour added for performance (issue 4): last-use buffer reuse must not
// change results, and tracing must write a valid Chrome trace.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>
#include <utility>

#include <switchyard/switchyard.hpp>

namespace sy = switchyard;

namespace {

constexpr int64_t n = 4096;  // large enough for the pool, small for a test

sy::RuntimeOptions cpu_only(bool reuse = true) {
  sy::RuntimeOptions o{.devices = {"cpu:0"}};
  o.reuse_last_use = reuse;
  return o;
}

// Uploads ones and returns the tensor with the address of its bytes; the
// sync makes the runner drop the upload message, so the tensor then holds
// the only reference.
std::pair<sy::Tensor, const std::byte*> upload_ones(const sy::Device& dev) {
  auto data = sy::TensorData::from(std::vector<float>(n, 1.0f), sy::Shape{n});
  const std::byte* p = data.bytes.data();
  auto t = dev.from_data(std::move(data));
  dev.sync().get();
  return {std::move(t), p};
}

}  // namespace

TEST_CASE("a tensor used again after an op is not overwritten by last-use reuse", "[perf][reuse]") {
  sy::Runtime rt(cpu_only());
  auto dev = rt.device("cpu:0");
  auto x = dev.full({n}, 1.0);
  auto keep = x;
  for (int i = 0; i < 10; ++i) x = x + 1.0;  // x's old value dies each time; keep holds the first
  auto twice = keep + keep;                  // the same tensor twice in one op
  auto chain = (keep * 2.0 + 1.0).relu();    // temporaries reused in place
  CHECK(keep.to_vector<float>() == std::vector<float>(n, 1.0f));
  CHECK(x.to_vector<float>() == std::vector<float>(n, 11.0f));
  CHECK(twice.to_vector<float>() == std::vector<float>(n, 2.0f));
  CHECK(chain.to_vector<float>() == std::vector<float>(n, 3.0f));
  CHECK(keep.to_vector<float>() == std::vector<float>(n, 1.0f));
}

TEST_CASE("a tensor being read is not overwritten by its last use", "[perf][reuse]") {
  sy::Runtime rt(cpu_only());
  auto dev = rt.device("cpu:0");
  auto x = dev.full({n}, 5.0);
  auto before = x.read();
  auto y = std::exchange(x, sy::Tensor{}) * 2.0;  // last use of x, while a read of it is out
  CHECK(before.get().to_vector<float>() == std::vector<float>(n, 5.0f));
  CHECK(y.to_vector<float>() == std::vector<float>(n, 10.0f));
}

TEST_CASE("the last use of a tensor writes its result into the tensor's buffer", "[perf][reuse]") {
  sy::Runtime rt(cpu_only());
  auto dev = rt.device("cpu:0");
  auto [a, p] = upload_ones(dev);
  auto b = std::exchange(a, sy::Tensor{}) + 1.0;  // the temporary dies right after the op
  auto data = b.read().get();
  CHECK(data.bytes.data() == p);
  CHECK(data.to_vector<float>() == std::vector<float>(n, 2.0f));
}

TEST_CASE("with reuse_last_use off, results go to a fresh buffer", "[perf][reuse]") {
  sy::Runtime rt(cpu_only(false));
  auto dev = rt.device("cpu:0");
  auto [a, p] = upload_ones(dev);
  auto b = std::exchange(a, sy::Tensor{}) + 1.0;
  auto data = b.read().get();
  CHECK(data.bytes.data() != p);
  CHECK(data.to_vector<float>() == std::vector<float>(n, 2.0f));
}

TEST_CASE("last-use detection leaves no handles behind", "[perf][reuse]") {
  sy::Runtime rt(cpu_only());
  auto dev = rt.device("cpu:0");
  {
    auto x = dev.full({n}, 1.0);
    for (int i = 0; i < 100; ++i) x = (x + 1.0).relu();
    CHECK(x.to_vector<float>()[0] == 101.0f);
  }
  dev.sync().get();
  CHECK(dev.stats().get().live_handles == 0);
}

TEST_CASE("tracing writes a Chrome trace with a track per runner, op slices and bridge flows", "[perf][trace]") {
  auto path =
      std::filesystem::temp_directory_path() / ("switchyard_trace_test_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  {
    sy::RuntimeOptions o{.devices = {"cpu:0", "cpu:1"}};
    o.trace_path = path.string();
    sy::Runtime rt(o);
    auto a = rt.device("cpu:0").full({2, 3}, 1.0);
    auto b = (a + a).to(rt.device("cpu:1"));
    CHECK(b.relu().to_vector<float>() == std::vector<float>(6, 2.0f));
  }
  std::ifstream in(path);
  REQUIRE(in.good());
  auto trace = nlohmann::json::parse(in);  // throws (fails the test) on invalid JSON
  std::set<std::string> tracks, slices;
  int flow_begin = 0, flow_end = 0;
  for (const auto& e : trace.at("traceEvents")) {
    const auto ph = e.at("ph").get<std::string>();
    if (ph == "M") tracks.insert(e.at("args").at("name").get<std::string>());
    if (ph == "X") {
      slices.insert(e.at("name").get<std::string>());
      CHECK(e.at("dur").get<double>() >= 0);
    }
    flow_begin += ph == "s";
    flow_end += ph == "f";
  }
  CHECK(tracks == std::set<std::string>{"cpu:0", "cpu:1"});
  CHECK(slices.count("full") == 1);
  CHECK(slices.count("add") == 1);
  CHECK(slices.count("relu") == 1);
  CHECK(slices.count("export") == 1);
  CHECK(slices.count("import") == 1);
  CHECK(flow_begin == 1);
  CHECK(flow_end == 1);
  std::filesystem::remove(path);
}

TEST_CASE("an unwritable trace path does not stop the runtime", "[perf][trace]") {
  sy::RuntimeOptions o{.devices = {"cpu:0"}};
  o.trace_path = "/nonexistent-dir/trace.json";
  sy::Runtime rt(o);
  CHECK(rt.device("cpu:0").full({2}, 3.0).to_vector<float>() == std::vector<float>{3.0f, 3.0f});
}
