// SPDX-License-Identifier: Apache-2.0
// Behaviour added for performance (issue 4): last-use buffer reuse must not
// change results, and tracing must write a valid Chrome trace.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
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

// Reuse needs the op and its input's drop in one batch. With the default
// 200 us flush interval, a slow moment between the two (a loaded CI machine
// under ASan) let the flusher send the op alone, and the address check
// failed about once in 20 runs; holding the queue until the read sends it
// makes the batch, and so the check, deterministic.
sy::RuntimeOptions cpu_only_one_batch(bool reuse = true) {
  auto o = cpu_only(reuse);
  o.flush_interval = std::chrono::seconds(30);
  return o;
}

// Uploads ones and returns the tensor with the address of its bytes; the
// sync makes the runner drop the upload message, so the tensor then holds
// the only reference.
std::pair<sy::Tensor, const std::byte*> upload_ones(const sy::Device& dev) {
  auto data = sy::TensorData::from(std::vector<float>(n, 1.0f), sy::Shape{n});
  const std::byte* p = data.bytes.data();
  auto t = dev.from_data(std::move(data));
  auto synced = dev.sync();
  REQUIRE(synced.wait_for(std::chrono::seconds(120)));
  synced.get();
  return {std::move(t), p};
}

// A read that gives up after two minutes instead of hanging the suite.
sy::TensorData read_bounded(const sy::Tensor& t) {
  auto f = t.read();
  REQUIRE(f.wait_for(std::chrono::seconds(120)));
  return f.get();
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
  sy::Runtime rt(cpu_only_one_batch());
  auto dev = rt.device("cpu:0");
  auto [a, p] = upload_ones(dev);
  auto b = a + 1.0;
  // Longer than the default flush interval: the drop below still joins the
  // op's batch, since nothing sends the queue before the read.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  a = sy::Tensor{};
  auto data = b.read().get();
  CHECK(data.bytes.data() == p);
  CHECK(data.to_vector<float>() == std::vector<float>(n, 2.0f));
}

TEST_CASE("a drop queued after other ops still lets the tensor's last op reuse its buffer", "[perf][reuse]") {
  // The client marks a drop that directly follows its tensor's last op at
  // once; this drop follows an op on another tensor, so the batch's own pass
  // finds it, next to a drop marked at once.
  sy::Runtime rt(cpu_only_one_batch());
  auto dev = rt.device("cpu:0");
  auto [a, pa] = upload_ones(dev);
  auto [b, pb] = upload_ones(dev);
  auto x = a * 2.0;                               // a's last use ...
  auto y = std::exchange(b, sy::Tensor{}) + 1.0;  // (b's drop directly follows its last use)
  a = sy::Tensor{};                               // ... whose drop comes one op later
  auto xd = read_bounded(x);
  auto yd = read_bounded(y);
  CHECK(xd.bytes.data() == pa);
  CHECK(yd.bytes.data() == pb);
  CHECK(xd.to_vector<float>() == std::vector<float>(n, 2.0f));
  CHECK(yd.to_vector<float>() == std::vector<float>(n, 2.0f));
}

TEST_CASE("with reuse_last_use off, results go to a fresh buffer", "[perf][reuse]") {
  sy::Runtime rt(cpu_only_one_batch(false));
  auto dev = rt.device("cpu:0");
  auto [a, p] = upload_ones(dev);
  auto b = std::exchange(a, sy::Tensor{}) + 1.0;
  auto data = b.read().get();
  CHECK(data.bytes.data() != p);
  CHECK(data.to_vector<float>() == std::vector<float>(n, 2.0f));
}

namespace tiny {

// x op s for every IEEE operation the cpu backend computes in place for a
// last-use input of at most 64 elements, on edge values; read back as bytes.
template <class T>
std::vector<sy::TensorData> scalar_ops(bool reuse, int64_t size) {
  auto options = cpu_only(reuse);
  options.fuse_elementwise = false;  // each op through the backend's execute
  sy::Runtime rt(options);
  auto dev = rt.device("cpu:0");
  const T inf = std::numeric_limits<T>::infinity();
  const std::vector<T> edges = {T(1.5),
                                T(-0.0),
                                std::numeric_limits<T>::denorm_min(),
                                inf,
                                -inf,
                                std::numeric_limits<T>::quiet_NaN(),
                                std::numeric_limits<T>::max(),
                                T(-7.25)};
  std::vector<T> values(static_cast<size_t>(size));
  for (size_t i = 0; i < values.size(); ++i) values[i] = edges[i % edges.size()];
  std::vector<sy::TensorData> out;
  for (auto k : {sy::BinaryKind::add, sy::BinaryKind::sub, sy::BinaryKind::mul, sy::BinaryKind::div})
    for (bool first : {false, true})
      for (double s : {2.5, 0.0, -3.0e38}) {
        auto x = dev.from_data(sy::TensorData::from(values, sy::Shape{size}));
        auto y = std::exchange(x, sy::Tensor{}).binary(k, s, first);  // x's last use
        out.push_back(read_bounded(y));
      }
  return out;
}

template <class T>
void same_bits_as_the_general_path() {
  for (int64_t size : {1, 3, 64, 65}) {
    INFO("elements: " << size);
    auto in_place = scalar_ops<T>(true, size);
    auto general = scalar_ops<T>(false, size);  // no last use: no input to write into
    REQUIRE(in_place.size() == general.size());
    for (size_t i = 0; i < in_place.size(); ++i) {
      INFO("case " << i);
      REQUIRE(in_place[i].bytes.size() == general[i].bytes.size());
      CHECK(std::memcmp(in_place[i].bytes.data(), general[i].bytes.data(), general[i].bytes.size()) == 0);
    }
  }
}

}  // namespace tiny

TEST_CASE("a tiny scalar op written into its input gives the general path's bits", "[perf][reuse]") {
  tiny::same_bits_as_the_general_path<float>();
  tiny::same_bits_as_the_general_path<double>();
}

TEST_CASE("a tiny scalar op on a last use writes into its input's buffer", "[perf][reuse]") {
  auto options = cpu_only_one_batch();
  options.fuse_elementwise = false;
  sy::Runtime rt(options);
  auto dev = rt.device("cpu:0");
  auto data = sy::TensorData::from(std::vector<float>{1.0f, 2.0f}, sy::Shape{2});
  const std::byte* p = data.bytes.data();
  auto x = dev.from_data(std::move(data));
  auto synced = dev.sync();
  REQUIRE(synced.wait_for(std::chrono::seconds(120)));
  synced.get();
  x = 10.0 - x;
  x = x * 0.5;
  auto keep = x;  // shared: the next op may not write into it
  x = x + 1.0;
  auto kept = read_bounded(keep);
  auto result = read_bounded(x);
  CHECK(kept.bytes.data() == p);
  CHECK(kept.to_vector<float>() == std::vector<float>{4.5f, 4.0f});
  CHECK(result.bytes.data() != p);
  CHECK(result.to_vector<float>() == std::vector<float>{5.5f, 5.0f});
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

namespace trace {

using Json = nlohmann::json;

// A trace file in the temporary directory, removed when the case ends.
struct TempFile {
  explicit TempFile(const std::string& what)
      : path(std::filesystem::temp_directory_path() /
             ("switchyard_trace_" + what + "_" + std::to_string(::getpid()) + ".json")) {
    std::filesystem::remove(path);
  }
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::filesystem::path path;
};

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A trace still being written lacks its closing `]` (the JSON Array Format
// allows that); a JSON parser needs it.
Json parse_unfinished(const std::string& text) { return Json::parse(text + "\n]"); }

// The events of a finished trace (the JSON Object Format's `traceEvents`
// too, so that these checks say what is wrong in a trace of either format).
Json events_of(const std::string& text) {
  auto trace = Json::parse(text);  // throws (fails the test) on invalid JSON
  return trace.is_object() ? trace.at("traceEvents") : trace;
}

// The flow id as JavaScript or jq reads it: strings stay as they are,
// numbers become doubles.
std::string flow_key(const Json& id) {
  return id.is_string() ? id.get<std::string>() : std::to_string(id.get<double>());
}

// Whether an "X" slice named `name` on the flow event's track encloses it.
bool bound_to_slice(const Json& events, const Json& flow, const std::string& name) {
  const double ts = flow.at("ts").get<double>();
  for (const auto& e : events) {
    if (e.at("ph") != "X" || e.at("name") != name || e.at("tid") != flow.at("tid") || e.at("pid") != flow.at("pid"))
      continue;
    const double begin = e.at("ts").get<double>();
    if (begin <= ts && ts <= begin + e.at("dur").get<double>()) return true;
  }
  return false;
}

}  // namespace trace

TEST_CASE("tracing writes a Chrome trace with a track per runner, op slices and bridge flows", "[perf][trace]") {
  trace::TempFile file("shape");
  {
    sy::RuntimeOptions o{.devices = {"cpu:0", "cpu:1"}};
    o.trace_path = file.path.string();
    sy::Runtime rt(o);
    auto a = rt.device("cpu:0").full({2, 3}, 1.0);
    auto b = (a + a).to(rt.device("cpu:1"));
    CHECK(b.relu().to_vector<float>() == std::vector<float>(6, 2.0f));
  }
  const std::string text = trace::read_text(file.path);
  REQUIRE(!text.empty());
  const auto events = trace::Json::parse(text);  // throws (fails the test) on invalid JSON
  REQUIRE(events.is_array());                    // the JSON Array Format, closed
  std::set<std::string> tracks, slices;
  int flow_begin = 0, flow_end = 0;
  for (const auto& e : events) {
    const auto ph = e.at("ph").get<std::string>();
    if (ph == "M" && e.at("name") == "thread_name") tracks.insert(e.at("args").at("name").get<std::string>());
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
}

TEST_CASE("each of 50 bridges has its own flow id even for a JSON reader with doubles", "[perf][trace]") {
  trace::TempFile file("bridges");
  constexpr int bridges = 50;
  {
    sy::RuntimeOptions o{.devices = {"cpu:0", "cpu:1"}};
    o.trace_path = file.path.string();
    sy::Runtime rt(o);
    std::vector<sy::Tensor> moved;
    for (int i = 0; i < bridges; ++i) moved.push_back(rt.device("cpu:0").full({4}, i).to(rt.device("cpu:1")));
    for (int i = 0; i < bridges; ++i) CHECK(moved[i].to_vector<float>() == std::vector<float>(4, float(i)));
  }
  const auto events = trace::events_of(trace::read_text(file.path));
  std::set<std::string> begins, ends;
  for (const auto& e : events) {
    if (e.at("ph") == "s") {
      begins.insert(trace::flow_key(e.at("id")));
      CHECK(trace::bound_to_slice(events, e, "export"));
    }
    if (e.at("ph") == "f") {
      ends.insert(trace::flow_key(e.at("id")));
      CHECK(trace::bound_to_slice(events, e, "import"));
    }
  }
  CHECK(begins.size() == bridges);
  CHECK(ends == begins);
}

TEST_CASE("the trace names its process and each runner's track", "[perf][trace]") {
  trace::TempFile file("names");
  {
    sy::RuntimeOptions o{.devices = {"cpu:0", "cpu:1"}};
    o.trace_path = file.path.string();
    sy::Runtime rt(o);
    CHECK(rt.device("cpu:0").full({2}, 1.0).to_vector<float>() == std::vector<float>(2, 1.0f));
    CHECK(rt.device("cpu:1").full({2}, 2.0).to_vector<float>() == std::vector<float>(2, 2.0f));
  }
  const auto events = trace::events_of(trace::read_text(file.path));
  const int pid = ::getpid();
  std::set<std::string> process_names;
  std::map<int, std::string> track_names;
  std::set<int> slice_tracks;
  for (const auto& e : events) {
    CHECK(e.at("pid") == pid);
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      process_names.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      track_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    if (e.at("ph") == "X") slice_tracks.insert(e.at("tid").get<int>());
  }
  REQUIRE(process_names.size() == 1);
  CHECK(process_names.begin()->find("switchyard") != std::string::npos);
  REQUIRE(track_names.size() == 2);
  std::set<std::string> names;
  for (const auto& [tid, name] : track_names) names.insert(name);
  CHECK(names == std::set<std::string>{"cpu:0", "cpu:1"});
  for (int tid : slice_tracks) CHECK(track_names.count(tid) == 1);
}

TEST_CASE("the trace reaches its file while the runtime runs", "[perf][trace]") {
  trace::TempFile file("streamed");
  sy::RuntimeOptions o{.devices = {"cpu:0"}};
  o.trace_path = file.path.string();
  std::optional<sy::Runtime> rt(o);
  auto dev = rt->device("cpu:0");
  // Waits (bounded) until the file, closed with `]`, parses and holds a slice named `op`.
  auto appears = [&](const std::string& op) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        for (const auto& e : trace::parse_unfinished(trace::read_text(file.path)))
          if (e.at("ph") == "X" && e.at("name") == op) return true;
      } catch (const trace::Json::parse_error&) {
        // absent, empty or caught mid-write: look again
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  auto x = dev.full({4}, 1.0);
  CHECK((x + x).to_vector<float>() == std::vector<float>(4, 2.0f));
  CHECK(appears("add"));
  const auto size_before = std::filesystem::file_size(file.path);
  CHECK((x * 3.0).to_vector<float>() == std::vector<float>(4, 3.0f));
  CHECK(appears("mul_scalar"));
  CHECK(std::filesystem::file_size(file.path) > size_before);
  rt.reset();
  const auto events = trace::Json::parse(trace::read_text(file.path));  // closed: valid as it is
  CHECK(events.is_array());
}

TEST_CASE("an unwritable trace path does not stop the runtime", "[perf][trace]") {
  sy::RuntimeOptions o{.devices = {"cpu:0"}};
  o.trace_path = "/nonexistent-dir/trace.json";
  sy::Runtime rt(o);
  CHECK(rt.device("cpu:0").full({2}, 3.0).to_vector<float>() == std::vector<float>{3.0f, 3.0f});
}

// A heavy op for an idle local runner is sent early, with what was queued
// before it and the element-wise ops right after it (fused into its
// store), when the first other op is queued, so the device computes while
// the client builds the rest of a graph; light ops still wait for a read, a
// sync, max_batch or the flusher. The flush interval here is far longer
// than the test: only that early send can start the matmul, and the trace
// (written every 100 ms) shows when it ran, without a read or a request
// that would flush the queue.
TEST_CASE("a heavy op starts on an idle device before the client reads", "[perf][trace]") {
  trace::TempFile file("early");
  {
    sy::RuntimeOptions o{.devices = {"cpu:0"}};
    o.trace_path = file.path.string();
    o.flush_interval = std::chrono::seconds(60);
    sy::Runtime rt(o);
    const sy::Device d = rt.device("cpu:0");
    auto seen = [&](const char* name) { return trace::read_text(file.path).find(name) != std::string::npos; };
    auto light = d.full({4}, 1.0) + 1.0;  // queued: nothing heavy follows it
    auto a = d.full({256, 256}, 1.0);
    auto product = a.matmul(a).relu();  // 16.7M multiply-adds, and an op to fuse into its store
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(seen("\"name\":\"matmul\""));  // waiting for what follows it
    auto total = product.sum();                // not element-wise: the batch so far goes
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!seen("\"name\":\"matmul\"") && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(seen("\"name\":\"matmul\""));
    // A light op after it waits in the queue (the runner is idle again).
    auto later = d.full({4}, 2.0) * 3.0;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(seen("\"name\":\"mul\""));
    CHECK(later.to_vector<float>() == std::vector<float>(4, 6.0f));
    CHECK(light.to_vector<float>() == std::vector<float>(4, 2.0f));
    CHECK(total.item<float>() == 256.0f * 256 * 256);
    CHECK(product.to_vector<float>() == std::vector<float>(256 * 256, 256.0f));
    // A product below the early start (2^18 multiply-adds, about a
    // microsecond of work) waits for the batch like any op.
    auto count = [&](const std::string& needle) {
      const std::string text = trace::read_text(file.path);
      size_t n = 0;
      for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
      return n;
    };
    const size_t products = count("\"name\":\"matmul\"");
    auto b = d.full({64, 64}, 1.0);
    auto small_product = b.matmul(b);
    auto small_total = small_product.sum();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(count("\"name\":\"matmul\"") == products);
    CHECK(small_total.item<float>() == 64.0f * 64 * 64);
    const auto written_by = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // traced every 100 ms
    while (count("\"name\":\"matmul\"") == products && std::chrono::steady_clock::now() < written_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(count("\"name\":\"matmul\"") == products + 1);
  }
}
