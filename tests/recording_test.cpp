// SPDX-License-Identifier: Apache-2.0
// switchyard::Recording: a replay is the recorded call on new inputs (values
// compared with the call itself, bit for bit), refuses what it cannot
// repeat, keeps what it reads alive, leaves nothing behind on the device,
// and fails only its own outputs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <thread>

#include <switchyard/switchyard.hpp>

#include "support/watchdog.hpp"

using namespace switchyard;
using namespace std::chrono_literals;

namespace {

constexpr auto kWait = 20s;

template <class T>
std::vector<T> values_of(const Tensor& t) {
  auto f = t.read();
  REQUIRE(f.wait_for(kWait));
  return f.get().to_vector<T>();
}

std::optional<Error> failure_of(const Tensor& t) {
  auto f = t.read();
  REQUIRE(f.wait_for(kWait));
  try {
    (void)f.get();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an Error");
  return Error(Errc::protocol_error, "");
}

uint64_t live_handles(const Device& d) {
  auto s = d.stats();
  REQUIRE(s.wait_for(kWait));
  return s.get().live_handles;
}

// Drops travel after the ops: wait (bounded) for the count to come back.
bool handles_return_to(const Device& d, uint64_t count) {
  for (int i = 0; i < 400; ++i) {
    auto s = d.sync();
    REQUIRE(s.wait_for(kWait));
    if (live_handles(d) == count) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// A small layer: relu(x @ w + b) * 2 - x[:, :1] (weights from outside, a
// temporary dropped halfway, a broadcast, an input read twice).
struct Layer {
  Tensor w, b;
  std::vector<Tensor> operator()(std::span<const Tensor> in) const {
    const Tensor& x = in[0];
    Tensor h = (x.matmul(w) + b).relu();
    return {h * 2.0 - x.slice(1, Slice{0, 1}), h};
  }
};

Layer make_layer(const Device& d) {
  std::vector<float> w(4 * 3), b(3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f - static_cast<float>(i);
  return {d.tensor<float>(w, {4, 3}), d.tensor<float>(b, {3})};
}

Tensor input(const Device& d, float scale) {
  std::vector<float> x(2 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = scale * (static_cast<float>(i) - 3.5f);
  return d.tensor<float>(x, {2, 4});
}

}  // namespace

TEST_CASE("a replay gives what the recorded call gives on the new inputs", "[recording]") {
  testing::Watchdog dog(60s, "replay values");
  Runtime rt({.devices = {"cpu:0", "reference:0"}});
  for (const char* name : {"cpu:0", "reference:0"}) {
    INFO(name);
    auto d = rt.device(name);
    Layer layer = make_layer(d);
    auto x0 = input(d, 1.0f);
    std::vector<Tensor> recorded_out;
    auto rec = Recording::record(std::span<const Tensor>(&x0, 1), layer, recorded_out);
    INFO(rec.why_not());
    REQUIRE(rec.replayable());
    CHECK(rec.why_not().empty());
    CHECK(rec.size() > 0);
    REQUIRE(recorded_out.size() == 2);
    CHECK(values_of<float>(recorded_out[0]) == values_of<float>(layer(std::span<const Tensor>(&x0, 1))[0]));
    for (float scale : {-2.0f, 0.5f, 3.0f}) {
      auto x = input(d, scale);
      auto direct = layer(std::span<const Tensor>(&x, 1));
      auto replayed = rec.replay(std::span<const Tensor>(&x, 1));
      REQUIRE(replayed.size() == 2);
      CHECK(replayed[0].shape() == Shape{2, 3});
      CHECK(replayed[0].dtype() == DType::f32);
      CHECK(values_of<float>(replayed[0]) == values_of<float>(direct[0]));
      CHECK(values_of<float>(replayed[1]) == values_of<float>(direct[1]));
      // The input itself is untouched (a replay's in-place reuse is of its
      // own temporaries only).
      CHECK(values_of<float>(x) == values_of<float>(input(d, scale)));
    }
  }
}

TEST_CASE("a replay keeps the tensors it read alive and leaves nothing behind", "[recording]") {
  testing::Watchdog dog(60s, "replay lifetime");
  Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  const uint64_t before = live_handles(d);
  std::vector<float> expected;
  Recording rec;
  {
    Layer layer = make_layer(d);
    auto x = input(d, 1.0f);
    std::vector<Tensor> out;
    rec = Recording::record(std::span<const Tensor>(&x, 1), layer, out);
    auto x2 = input(d, 2.0f);
    expected = values_of<float>(layer(std::span<const Tensor>(&x2, 1))[0]);
  }
  // The caller's weights are gone; the recording holds them.
  for (int i = 0; i < 20; ++i) {
    auto x2 = input(d, 2.0f);
    auto out = rec.replay(std::span<const Tensor>(&x2, 1));
    CHECK(values_of<float>(out[0]) == expected);
  }
  rec = Recording();
  CHECK(handles_return_to(d, before));
}

TEST_CASE("a replay inside another recording's body is recorded with it", "[recording]") {
  testing::Watchdog dog(60s, "nested replay");
  Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  const uint64_t before = live_handles(d);
  {
    Recording outer;
    std::vector<float> expected;
    {
      Layer layer = make_layer(d);
      auto x = input(d, 1.0f);
      std::vector<Tensor> out;
      auto inner = Recording::record(std::span<const Tensor>(&x, 1), layer, out);
      REQUIRE(inner.replayable());
      // The inner replay's temporaries die inside it, its weights are held.
      auto body = [&](std::span<const Tensor> in) {
        auto r = inner.replay(in);
        return std::vector<Tensor>{(r[0] + r[1]) * 3.0};
      };
      outer = Recording::record(std::span<const Tensor>(&x, 1), body, out);
      INFO(outer.why_not());
      REQUIRE(outer.replayable());
      auto x2 = input(d, -1.5f);
      expected = values_of<float>(body(std::span<const Tensor>(&x2, 1))[0]);
    }
    for (int i = 0; i < 5; ++i) {
      auto x2 = input(d, -1.5f);
      CHECK(values_of<float>(outer.replay(std::span<const Tensor>(&x2, 1))[0]) == expected);
    }
  }
  CHECK(handles_return_to(d, before));
}

TEST_CASE("a replay runs a view of a view as one view where it is strided", "[recording]") {
  testing::Watchdog dog(60s, "view chains");
  Runtime rt({.devices = {"cpu:0", "reference:0"}});
  for (const char* name : {"cpu:0", "reference:0"}) {
    INFO(name);
    auto d = rt.device(name);
    // An attention's heads: a third of [16, 1, 96] split into 4 heads of
    // 8, by head; and a flip, which stays two views.
    auto heads = [](std::span<const Tensor> in) {
      auto q = in[0].slice(2, Slice{32, 64}).reshape({16, 4, 8}).transpose(0, 1);
      auto flipped = in[0].slice(2, Slice{0, 8}).flip({0}).reshape({128});
      return std::vector<Tensor>{q * 2.0, flipped};
    };
    std::vector<float> values(16 * 96);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    auto x = d.tensor<float>(values, {16, 1, 96});
    auto ops_run = [&] {
      auto s = d.stats();
      REQUIRE(s.wait_for(kWait));
      return s.get().ops_executed;
    };
    std::vector<Tensor> out;
    auto rec = Recording::record(std::span<const Tensor>(&x, 1), heads, out);
    REQUIRE(rec.replayable());
    auto x2 = d.tensor<float>(std::vector<float>(values.rbegin(), values.rend()), {16, 1, 96});
    REQUIRE(d.sync().wait_for(kWait));
    const uint64_t before_direct = ops_run();
    auto direct = heads(std::span<const Tensor>(&x2, 1));
    auto want0 = values_of<float>(direct[0]), want1 = values_of<float>(direct[1]);
    const uint64_t direct_ops = ops_run() - before_direct;
    const uint64_t before_replay = ops_run();
    auto replayed = rec.replay(std::span<const Tensor>(&x2, 1));
    CHECK(values_of<float>(replayed[0]) == want0);
    CHECK(values_of<float>(replayed[1]) == want1);
    CHECK(replayed[0].shape() == Shape{4, 16, 8});
    // slice -> reshape -> transpose is one view; the flip's chain is not.
    CHECK(ops_run() - before_replay == direct_ops - 2);
  }
}

TEST_CASE("a replay refuses inputs unlike the recorded ones naming the input", "[recording]") {
  Runtime rt({.devices = {"cpu:0", "cpu:1"}});
  auto d = rt.cpu();
  Layer layer = make_layer(d);
  auto x = input(d, 1.0f);
  std::vector<Tensor> out;
  auto rec = Recording::record(std::span<const Tensor>(&x, 1), layer, out);
  INFO(rec.why_not());
  REQUIRE(rec.replayable());
  auto none = error_of([&] { (void)rec.replay({}); });
  CHECK(none.code() == Errc::invalid_argument);
  CHECK_THAT(std::string(none.what()), Catch::Contains("takes 1 inputs, given 0"));
  Tensor undefined;
  CHECK(error_of([&] { (void)rec.replay(std::span<const Tensor>(&undefined, 1)); }).code() == Errc::invalid_tensor);
  auto wide = d.zeros({2, 5});
  auto shape = error_of([&] { (void)rec.replay(std::span<const Tensor>(&wide, 1)); });
  CHECK(shape.code() == Errc::invalid_argument);
  CHECK_THAT(std::string(shape.what()), Catch::Contains("input 0 has shape [2, 5], recorded as [2, 4]"));
  auto doubles = d.zeros({2, 4}, DType::f64);
  auto dtype = error_of([&] { (void)rec.replay(std::span<const Tensor>(&doubles, 1)); });
  CHECK(dtype.code() == Errc::dtype_mismatch);
  CHECK_THAT(std::string(dtype.what()), Catch::Contains("input 0 is f64, recorded as f32"));
  auto elsewhere = rt.cpu(1).zeros({2, 4});
  auto device = error_of([&] { (void)rec.replay(std::span<const Tensor>(&elsewhere, 1)); });
  CHECK(device.code() == Errc::device_mismatch);
  CHECK_THAT(std::string(device.what()), Catch::Contains("input 0 is on cpu:1, recorded on cpu:0"));
  // Still replays after the refusals.
  auto ok = rec.replay(std::span<const Tensor>(&x, 1));
  CHECK(values_of<float>(ok[0]) == values_of<float>(out[0]));
}

TEST_CASE("record refuses missing undefined and scattered inputs before running the body", "[recording]") {
  Runtime rt({.devices = {"cpu:0", "cpu:1"}});
  int runs = 0;
  auto body = [&](std::span<const Tensor> in) {
    ++runs;
    return std::vector<Tensor>(in.begin(), in.end());
  };
  std::vector<Tensor> out;
  CHECK(error_of([&] { (void)Recording::record({}, body, out); }).code() == Errc::invalid_argument);
  std::vector<Tensor> holes{rt.cpu().zeros({1}), Tensor()};
  CHECK(error_of([&] { (void)Recording::record(holes, body, out); }).code() == Errc::invalid_tensor);
  std::vector<Tensor> two{rt.cpu(0).zeros({1}), rt.cpu(1).zeros({1})};
  auto scattered = error_of([&] { (void)Recording::record(two, body, out); });
  CHECK(scattered.code() == Errc::device_mismatch);
  CHECK_THAT(std::string(scattered.what()), Catch::Contains("input 1 is on cpu:1"));
  CHECK(runs == 0);
  CHECK(Recording().why_not() == "empty recording");
  CHECK(error_of([&] { (void)Recording().replay({}); }).code() == Errc::invalid_argument);
}

TEST_CASE("a body that reads moves or spreads its work is recorded as not replayable", "[recording]") {
  testing::Watchdog dog(60s, "not replayable");
  Runtime rt({.devices = {"cpu:0", "cpu:1"}});
  auto d = rt.cpu();
  auto x = input(d, 1.0f);
  auto other = rt.cpu(1).ones({2, 4});
  struct Case {
    const char* what;
    std::function<std::vector<Tensor>(std::span<const Tensor>)> body;
  };
  const std::vector<Case> cases{
      {"read tensor",
       [](std::span<const Tensor> in) {
         // The value steers the body: a replay could not follow it.
         auto s = in[0].sum();
         return std::vector<Tensor>{values_of<float>(s)[0] > 0 ? in[0] + 1.0 : in[0] - 1.0};
       }},
      {"moved tensor", [&](std::span<const Tensor> in) { return std::vector<Tensor>{(in[0] * 2.0).to(rt.cpu(1))}; }},
      {"two devices (cpu:0 and cpu:1)",
       [&](std::span<const Tensor> in) {
         return std::vector<Tensor>{in[0] * 2.0, other + 1.0};
       }},
      {"already recording",
       [&](std::span<const Tensor> in) {
         std::vector<Tensor> inner;
         (void)Recording::record(
             in, [](std::span<const Tensor> i) { return std::vector<Tensor>{i[0]}; }, inner);
         return inner;
       }},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    std::vector<Tensor> out;
    if (std::string(c.what) == "already recording") {
      auto e = error_of([&] { (void)Recording::record(std::span<const Tensor>(&x, 1), c.body, out); });
      CHECK(e.code() == Errc::invalid_argument);
      CHECK_THAT(std::string(e.what()), Catch::Contains(c.what));
      continue;
    }
    auto rec = Recording::record(std::span<const Tensor>(&x, 1), c.body, out);
    CHECK_FALSE(rec.replayable());
    CHECK_THAT(rec.why_not(), Catch::Contains(c.what));
    // The body's results are those of a plain call.
    REQUIRE_FALSE(out.empty());
    CHECK(values_of<float>(out[0]).size() == 8);
    auto e = error_of([&] { (void)rec.replay(std::span<const Tensor>(&x, 1)); });
    CHECK(e.code() == Errc::invalid_argument);
    CHECK_THAT(std::string(e.what()), Catch::Contains("not replayable"));
  }
  // The same tensor as two inputs: a replay could not tell which one an op read.
  std::vector<Tensor> twice{x, x}, out;
  auto rec = Recording::record(
      twice, [](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] + in[1]}; }, out);
  CHECK_FALSE(rec.replayable());
  CHECK_THAT(rec.why_not(), Catch::Contains("inputs 0 and 1 are the same tensor"));
}

TEST_CASE("a replay returns inputs and outside tensors as themselves and a repeated result once", "[recording]") {
  Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  auto weight = d.ones({3});
  auto x = d.zeros({3});
  std::vector<Tensor> out;
  auto rec = Recording::record(
      std::span<const Tensor>(&x, 1),
      [&](std::span<const Tensor> in) {
        auto y = in[0] + weight;
        return std::vector<Tensor>{in[0], weight, y, y, Tensor()};
      },
      out);
  INFO(rec.why_not());
  REQUIRE(rec.replayable());
  auto x2 = d.tensor<float>({1, 2, 3}, {3});
  auto r = rec.replay(std::span<const Tensor>(&x2, 1));
  REQUIRE(r.size() == 5);
  CHECK(r[0].id() == x2.id());
  CHECK(r[1].id() == weight.id());
  CHECK(r[2].id() == r[3].id());
  CHECK_FALSE(r[4].defined());
  CHECK(values_of<float>(r[2]) == std::vector<float>{2, 3, 4});
}

TEST_CASE("a replayed op's failure fails only its outputs and names a made tensor", "[recording]") {
  testing::Watchdog dog(60s, "replay failure");
  Runtime rt({.devices = {"cpu:0", "reference:0"}});
  for (const char* name : {"cpu:0", "reference:0"}) {
    INFO(name);
    auto d = rt.device(name);
    auto table = d.tensor<float>({10, 20, 30}, {3});
    auto ids = d.tensor<int64_t>({0, 2}, {2});
    // The indices are computed on the device: no check at the call sees them.
    auto lookup = [&](std::span<const Tensor> in) {
      auto shifted = in[0] + int64_t{1};
      return std::vector<Tensor>{table.index_select(0, shifted - int64_t{1}), in[0] * int64_t{3}};
    };
    std::vector<Tensor> out;
    auto rec = Recording::record(std::span<const Tensor>(&ids, 1), lookup, out);
    INFO(rec.why_not());
    REQUIRE(rec.replayable());
    CHECK(values_of<float>(out[0]) == std::vector<float>{10, 30});
    auto bad = d.tensor<int64_t>({5, 1}, {2});
    TensorId first;
    auto r = rec.replay(std::span<const Tensor>(&bad, 1), &first);
    auto e = failure_of(r[0]);
    REQUIRE(e);
    CHECK(e->code() == Errc::index_out_of_range);
    // Error::tensor() is one of the replay's tensors, in the recorded
    // order: the counterpart of the tensor the recorded call fails on.
    REQUIRE(e->tensor());
    CHECK(e->tensor().value >= first.value);
    CHECK(e->tensor().value < first.value + rec.made().size());
    std::vector<Tensor> failing_out;
    auto failing = Recording::record(std::span<const Tensor>(&bad, 1), lookup, failing_out);
    auto recorded_error = failure_of(failing_out[0]);
    REQUIRE(recorded_error);
    const auto made = failing.made();
    const auto at = std::find(made.begin(), made.end(), recorded_error->tensor());
    REQUIRE(at != made.end());
    TensorId again_first;
    auto again = failing.replay(std::span<const Tensor>(&bad, 1), &again_first);
    auto again_error = failure_of(again[0]);
    REQUIRE(again_error);
    CHECK(again_error->tensor().value == again_first.value + static_cast<uint64_t>(at - made.begin()));
    CHECK(values_of<int64_t>(r[1]) == std::vector<int64_t>{15, 3});
    // The device runs on: the next replay is fine.
    auto good = rec.replay(std::span<const Tensor>(&ids, 1));
    CHECK(values_of<float>(good[0]) == std::vector<float>{10, 30});
  }
}

TEST_CASE("replays from many threads at once each get their own results", "[recording]") {
  testing::Watchdog dog(120s, "concurrent replays");
  Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  Layer layer = make_layer(d);
  auto x = input(d, 1.0f);
  std::vector<Tensor> out;
  const auto rec = Recording::record(std::span<const Tensor>(&x, 1), layer, out);
  INFO(rec.why_not());
  REQUIRE(rec.replayable());
  std::vector<std::vector<float>> expected;
  for (int k = 0; k < 8; ++k) {
    auto xk = input(d, static_cast<float>(k + 1));
    expected.push_back(values_of<float>(layer(std::span<const Tensor>(&xk, 1))[0]));
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        auto xk = input(d, static_cast<float>(k + 1));
        auto r = rec.replay(std::span<const Tensor>(&xk, 1));
        auto f = r[0].read();
        if (!f.wait_for(kWait) || f.get().to_vector<float>() != expected[static_cast<size_t>(k)]) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("random ops in a replay draw new numbers as a second call would", "[recording]") {
  Runtime rt({.devices = {"cpu:0"}});
  auto d = rt.cpu();
  auto x = d.zeros({64});
  std::vector<Tensor> out;
  auto rec = Recording::record(
      std::span<const Tensor>(&x, 1),
      [&](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] + d.uniform({64})}; }, out);
  INFO(rec.why_not());
  REQUIRE(rec.replayable());
  auto a = values_of<float>(rec.replay(std::span<const Tensor>(&x, 1))[0]);
  auto b = values_of<float>(rec.replay(std::span<const Tensor>(&x, 1))[0]);
  CHECK(a != b);
  for (float v : a) CHECK((v >= 0.0f && v < 1.0f));
}

TEST_CASE("a replay after the runtime closed fails as any op does", "[recording]") {
  std::optional<Runtime> rt(Runtime({.devices = {"cpu:0"}}));
  auto d = rt->cpu();
  auto x = d.zeros({3});
  std::vector<Tensor> out;
  auto rec = Recording::record(
      std::span<const Tensor>(&x, 1), [](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] + 1.0}; }, out);
  INFO(rec.why_not());
  REQUIRE(rec.replayable());
  rt.reset();
  CHECK(error_of([&] { (void)rec.replay(std::span<const Tensor>(&x, 1)); }).code() == Errc::runtime_closed);
}
