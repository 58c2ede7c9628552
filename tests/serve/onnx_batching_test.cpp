// SPDX-License-Identifier: Apache-2.0
// Dynamic batching of ONNX models is sound only where axis 0 is a batch
// axis: the server's start-up probe (serve::check_batching) turns batching
// off for models whose rows see each other or whose outputs do not keep the
// rows; a batch that fails, or whose outputs cannot be split back, is run
// again request by request; and a request's own bad data is its 422 alone.
// The models are tests/serve/models/*.onnx (make_models.py there).
#include <future>

#include <switchyard/onnx.hpp>
#include <switchyard/switchyard.hpp>

#include "onnx_serving.hpp"
#include "support.hpp"

using namespace serve_test;
namespace sy = switchyard;

namespace {

std::string test_model(const std::string& name) { return std::string(SERVE_TEST_MODELS) + "/" + name + ".onnx"; }

json healthz(int port) {
  auto res = client(port).Get("/healthz");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  return json::parse(res->body);
}

// Posts every body at once (each on its own connection); the replies in order.
std::vector<Reply> post_together(int port, const std::vector<std::string>& bodies) {
  std::vector<std::future<Reply>> futures;
  for (const auto& b : bodies) futures.push_back(std::async(std::launch::async, [port, b] { return post(port, b); }));
  std::vector<Reply> out;
  for (auto& f : futures) {
    REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    out.push_back(f.get());
  }
  return out;
}

// JSON objects and nested lists of numbers, equal but for numbers within
// 1e-5 (relative, at least absolute).
bool close(const json& a, const json& b) {
  if (a.type() != b.type() && !(a.is_number() && b.is_number())) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items())
      if (!b.contains(key) || !close(value, b[key])) return false;
    return true;
  }
  if (!a.is_array()) {
    if (a.is_null() || b.is_null()) return a.is_null() && b.is_null();
    const double x = a.get<double>(), y = b.get<double>();
    return std::abs(x - y) <= 1e-5 * std::max(1.0, std::abs(y));
  }
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!close(a[k], b[k])) return false;
  return true;
}

// serve_batch_rows: whether some dispatched batch had more than `rows` rows.
bool batched_more_than(int port, int rows) {
  const std::string text = get_metrics(port);
  return metric(text, "serve_batch_rows_count") >
         metric(text, "serve_batch_rows_bucket{le=\"" + std::to_string(rows) + "\"}");
}

}  // namespace

TEST_CASE("onnx batching: the probe refuses models whose axis 0 is not a batch axis", "[serve][onnx]") {
  sy::Runtime rt({.devices = {"cpu:0"}});
  // Rows that see each other: outputs differ from the rows run alone.
  for (const char* name : {"center", "cumsum0", "gru_seqfirst"}) {
    INFO(name);
    auto check = serve::check_batching(sy::onnx::Model::load(test_model(name), rt.cpu()));
    CHECK_FALSE(check.ok);
    CHECK_THAT(check.why, Catch::Contains("output 'y' of a 3-row batch") && Catch::Contains("differs from") &&
                              Catch::Contains("axis 0 is not a batch axis"));
  }
  // Outputs whose axis 0 does not keep the rows.
  for (const char* name : {"flat", "halve"}) {
    INFO(name);
    auto check = serve::check_batching(sy::onnx::Model::load(test_model(name), rt.cpu()));
    CHECK_FALSE(check.ok);
    CHECK_THAT(check.why, Catch::Contains("output 'y' of a 3-row batch") && Catch::Contains("not 3 rows"));
  }
  // Batch-invariant models pass, integer index inputs included (probed in
  // range: 0 or 1 where no index_extent is known, [0, 50) for token ids).
  for (const std::string& path :
       {test_model("gather_el"), test_model("pairs"), std::string(SERVE_ONNX_MODELS) + "/mlp/model.onnx",
        std::string(SERVE_ONNX_MODELS) + "/gpt_step/model.onnx"}) {
    INFO(path);
    auto check = serve::check_batching(sy::onnx::Model::load(path, rt.cpu()));
    CHECK(check.ok);
    CHECK(check.why.empty());
  }
}

TEST_CASE("onnx batching: requests to a model whose rows see each other get their own answers", "[serve][onnx]") {
  const std::string name = GENERATE("center", "cumsum0", "gru_seqfirst", "flat", "halve");
  INFO("model " << name);
  ServerProcess server({"--model", test_model(name), "--batch-window-us", "300000", "--max-batch", "64"});
  json health = healthz(server.port());
  CHECK(health["batching"] == false);
  CHECK_THAT(health.value("batching_off", ""),
             Catch::Contains("output 'y'") && Catch::Contains("axis 0 is not a batch axis"));
  // The same trailing shapes, so that a batching server would stack them.
  const bool gru = name == "gru_seqfirst";
  const std::vector<std::string> bodies =
      gru ? std::vector<std::string>{R"({"inputs": {"x": [[[1, 2]]]}})", R"({"inputs": {"x": [[[3, 4]], [[5, 6]]]}})"}
          : std::vector<std::string>{R"({"inputs": {"x": [[1, 2, 3]]}})",
                                     R"({"inputs": {"x": [[10, 20, 30], [40, 50, 60]]}})"};
  std::vector<json> alone;
  for (const auto& b : bodies) {
    Reply r = post(server.port(), b);
    INFO(r.body);
    REQUIRE(r.status == 200);
    alone.push_back(json::parse(r.body));
  }
  for (int round = 0; round < 3; ++round) {
    auto together = post_together(server.port(), bodies);
    for (size_t k = 0; k < bodies.size(); ++k) {
      INFO("request " << k << " alone: " << alone[k].dump() << " together: " << together[k].body);
      REQUIRE(together[k].status == 200);
      CHECK(close(json::parse(together[k].body), alone[k]));
    }
  }
  CHECK_FALSE(batched_more_than(server.port(), 2));
}

TEST_CASE("onnx batching: a bad index in one request is its own 422 and its batch-mate is served", "[serve][onnx]") {
  // GatherElements(x [N, 5], i [N, 2], axis 1): i is the request's data, so
  // no index_extent check can refuse 9 up front; the op fails on the device.
  // --max-batch 2 closes the batch as soon as both requests are queued.
  ServerProcess server({"--model", test_model("gather_el"), "--batch-window-us", "5000000", "--max-batch", "2"});
  json health = healthz(server.port());
  CHECK(health["batching"] == true);
  CHECK_FALSE(health.contains("batching_off"));
  const std::string good = R"({"inputs": {"x": [[10, 11, 12, 13, 14]], "i": [[4, 1]]}})";
  const std::string bad = R"({"inputs": {"x": [[10, 11, 12, 13, 14]], "i": [[9, 0]]}})";
  for (int round = 0; round < 3; ++round) {
    auto replies = post_together(server.port(), {good, bad});
    INFO("good: " << replies[0].body << " bad: " << replies[1].body);
    REQUIRE(replies[0].status == 200);
    CHECK(json::parse(replies[0].body) == json::parse(R"({"outputs": {"y": [[14.0, 11.0]]}})"));
    check_rejected(replies[1], 422, "index 9 is out of range");
  }
  // They did share a batch (2 rows), which failed and ran again request by request.
  CHECK(batched_more_than(server.port(), 1));
  // Two good requests still share a batch and get their own rows.
  auto replies = post_together(server.port(), {good, R"({"inputs": {"x": [[20, 21, 22, 23, 24]], "i": [[0, -1]]}})"});
  REQUIRE(replies[0].status == 200);
  REQUIRE(replies[1].status == 200);
  CHECK(json::parse(replies[0].body) == json::parse(R"({"outputs": {"y": [[14.0, 11.0]]}})"));
  CHECK(json::parse(replies[1].body) == json::parse(R"({"outputs": {"y": [[20.0, 24.0]]}})"));
}

TEST_CASE("onnx batching: a batch whose outputs cannot be split back is served request by request", "[serve][onnx]") {
  // Reshape(x [N, S], [-1, 2]) keeps the rows for S = 2, as probed, but
  // makes 2 output rows of each input row for S = 4: a batch of 3 rows gives
  // 6, which cannot be split back along the requests' rows.
  ServerProcess server({"--model", test_model("pairs"), "--batch-window-us", "5000000", "--max-batch", "3"});
  CHECK(healthz(server.port())["batching"] == true);
  auto replies = post_together(
      server.port(), {R"({"inputs": {"x": [[1, 2, 3, 4]]}})", R"({"inputs": {"x": [[5, 6, 7, 8], [9, 10, 11, 12]]}})"});
  INFO("first: " << replies[0].body << " second: " << replies[1].body);
  REQUIRE(replies[0].status == 200);
  REQUIRE(replies[1].status == 200);
  CHECK(json::parse(replies[0].body) == json::parse(R"({"outputs": {"y": [[1.0, 2.0], [3.0, 4.0]]}})"));
  CHECK(json::parse(replies[1].body) ==
        json::parse(R"({"outputs": {"y": [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]}})"));
  CHECK(batched_more_than(server.port(), 2));
}

TEST_CASE("onnx batching: --no-batching serves a batchable model request by request", "[serve][onnx]") {
  ServerProcess server({"--model", test_model("gather_el"), "--no-batching"});
  json health = healthz(server.port());
  CHECK(health["batching"] == false);
  CHECK_FALSE(health.contains("batching_off"));  // not the model's doing
  const std::string good = R"({"inputs": {"x": [[10, 11, 12, 13, 14]], "i": [[4, 1]]}})";
  auto replies = post_together(server.port(), {good, good, good});
  for (const auto& r : replies) {
    REQUIRE(r.status == 200);
    CHECK(json::parse(r.body) == json::parse(R"({"outputs": {"y": [[14.0, 11.0]]}})"));
  }
  // A bad index fails its own run: the request's fault, 422 (not 503).
  check_rejected(post(server.port(), R"({"inputs": {"x": [[10, 11, 12, 13, 14]], "i": [[9, 0]]}})"), 422,
                 "index 9 is out of range");
  CHECK_FALSE(batched_more_than(server.port(), 1));
}
