// SPDX-License-Identifier: Apache-2.0
// The server with --model x.onnx (issue 19): named and bare nested-list
// inputs, integer token ids, dynamic batching along axis 0, errors naming
// the input. Expected outputs are PyTorch's, stored with the exported models.
#include <future>

#include <switchyard/onnx.hpp>

#include "support.hpp"
#include "worker_process.hpp"

using namespace serve_test;

namespace {

std::string onnx_model(const std::string& name) { return std::string(SERVE_ONNX_MODELS) + "/" + name; }

switchyard::TensorData stored(const std::string& name, const std::string& file) {
  return switchyard::onnx::read_tensor_proto(onnx_model(name) + "/" + file);
}

// Row r of a [rows, width] tensor as a JSON list.
json row_json(const std::vector<float>& flat, size_t width, size_t r) {
  return json(std::vector<float>(flat.begin() + r * width, flat.begin() + (r + 1) * width));
}

}  // namespace

TEST_CASE("onnx: single-row requests within a window are batched and each gets its own row", "[serve][onnx]") {
  ServerProcess server({"--model", onnx_model("mlp/model.onnx"), "--batch-window-us", "20000", "--max-batch", "64"});
  auto x = stored("mlp", "test_data_set_1/input_0.pb");   // [64, 64]
  auto y = stored("mlp", "test_data_set_1/output_0.pb");  // [64, 10]
  REQUIRE(x.shape == switchyard::Shape{64, 64});
  auto xs = x.to_vector<float>(), ys = y.to_vector<float>();
  std::vector<std::future<Reply>> replies;
  for (size_t r = 0; r < 64; ++r)
    replies.push_back(std::async(std::launch::async, [&, r] {
      // A bare nested list: the model has one input.
      return post(server.port(), json{{"inputs", json::array({row_json(xs, 64, r)})}}.dump());
    }));
  for (size_t r = 0; r < 64; ++r) {
    REQUIRE(replies[r].wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    Reply rep = replies[r].get();
    INFO("row " << r << ": " << rep.body);
    REQUIRE(rep.status == 200);
    auto got = json::parse(rep.body)["outputs"]["y"];
    REQUIRE(got.size() == 1);
    for (size_t c = 0; c < 10; ++c) CHECK(got[0][c].get<double>() == Approx(ys[r * 10 + c]).margin(1e-5));
  }
  // 64 requests in fewer than 64 batches: some were stacked.
  CHECK(metric(get_metrics(server.port()), "serve_batch_rows_count") < 64);
}

TEST_CASE("onnx: after a remote replica's device is lost every request goes to the replicas left", "[serve][onnx]") {
  switchyard::testing::WorkerProcess worker({"--devices=cpu:0", "--threads=1"});
  setenv("SWITCHYARD_WORKERS", worker.address().c_str(), 1);
  ServerProcess server({"--model", onnx_model("mlp/model.onnx"), "--no-batching"});
  unsetenv("SWITCHYARD_WORKERS");
  auto c = client(server.port());
  REQUIRE(json::parse(c.Get("/healthz")->body)["devices"].size() == 2);
  auto x = stored("mlp", "test_data_set_1/input_0.pb");   // [64, 64]
  auto y = stored("mlp", "test_data_set_1/output_0.pb");  // [64, 10]
  auto xs = x.to_vector<float>(), ys = y.to_vector<float>();
  const std::string body = json{{"inputs", json::array({row_json(xs, 64, 0)})}}.dump();
  auto check_row = [&](const Reply& rep) {
    INFO(rep.body);
    REQUIRE(rep.status == 200);
    auto got = json::parse(rep.body)["outputs"]["y"];
    for (size_t col = 0; col < 10; ++col) CHECK(got[0][col].get<double>() == Approx(ys[col]).margin(1e-5));
  };
  for (int i = 0; i < 4; ++i) check_row(post(server.port(), body));  // both replicas served
  worker.stop(SIGKILL);
  json lost = json::array();
  for (int i = 0; i < 500 && lost.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    lost = json::parse(c.Get("/healthz")->body)["lost_devices"];
  }
  REQUIRE(lost.size() == 1);
  // The first request after the loss went to the retired replica and got
  // 503 before (a replica was retired only by a batch of its own failing).
  for (int i = 0; i < 10; ++i) check_row(post(server.port(), body));
}

TEST_CASE("onnx: integer token ids by name give PyTorch's logits", "[serve][onnx]") {
  ServerProcess server({"--model", onnx_model("gpt_step/model.onnx")});
  auto ids = stored("gpt_step", "test_data_set_0/input_0.pb");  // [2, 7] int64
  auto want = stored("gpt_step", "test_data_set_0/output_0.pb").to_vector<float>();
  auto v = ids.to_vector<int64_t>();
  json rows = json::array();
  for (int64_t r = 0; r < ids.shape[0]; ++r)
    rows.push_back(std::vector<int64_t>(v.begin() + r * ids.shape[1], v.begin() + (r + 1) * ids.shape[1]));
  Reply rep = post(server.port(), json{{"inputs", {{"ids", rows}}}}.dump());
  INFO(rep.body);
  REQUIRE(rep.status == 200);
  auto got = json::parse(rep.body)["outputs"]["logits"];
  REQUIRE(got.size() == 2);
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 50; ++c) CHECK(got[r][c].get<double>() == Approx(want[r * 50 + c]).margin(1e-4));

  auto health = json::parse(client(server.port()).Get("/healthz")->body);
  CHECK(health["model"]["inputs"][0]["name"] == "ids");
  CHECK(health["model"]["inputs"][0]["dtype"] == "i64");
}

TEST_CASE("onnx: a reply over --max-reply-values is 413 naming the limit and smaller ones are served",
          "[serve][onnx]") {
  // Each row of token ids gives 50 logits: 2 rows are 100 values.
  ServerProcess server({"--model", onnx_model("gpt_step/model.onnx"), "--max-reply-values", "100"});
  Reply fits = post(server.port(), R"({"inputs": {"ids": [[1, 2], [3, 4]]}})");
  INFO(fits.body);
  CHECK(fits.status == 200);
  check_rejected(post(server.port(), R"({"inputs": {"ids": [[1, 2], [3, 4], [5, 6]]}})"), 413,
                 "the reply would hold 150 values, more than --max-reply-values (100)");
  CHECK(post(server.port(), R"({"inputs": {"ids": [[1, 2]]}})").status == 200);
}

TEST_CASE("onnx: bad inputs are refused naming the input", "[serve][onnx]") {
  ServerProcess server({"--model", onnx_model("gpt_step/model.onnx")});
  check_rejected(post(server.port(), R"({"inputs": {"ids": [[1, 2.5]]}})"), 400, "input 'ids' must hold integers");
  check_rejected(post(server.port(), R"({"inputs": {"tokens": [[1, 2]]}})"), 400, "no input 'tokens'");
  check_rejected(post(server.port(), R"({"inputs": {"ids": [1, 2]}})"), 400, "input 'ids' must have 2 axes");
  check_rejected(post(server.port(), R"({"inputs": [[1, 2], [3]]})"), 400, "input 'ids' is ragged");
  check_rejected(post(server.port(), R"({"inputs": {}})"), 400, "input 'ids' is missing");
  check_rejected(post(server.port(), R"({"inputs": {"ids": [[1, 2)"), 400, "malformed JSON");
  Reply bare_nan = post(server.port(), R"({"inputs": {"ids": [[1, NaN]]}})");
  check_rejected(bare_nan, 400, "NaN and Infinity are not JSON numbers");
  // Only a bare NaN or Infinity is called one.
  Reply other = post(server.port(), R"({"inputs": {"ids": [[1, 2]]]}})");
  check_rejected(other, 400, "malformed JSON");
  CHECK(other.body.find("NaN") == std::string::npos);
}

TEST_CASE("onnx: a token id outside the embedding is a 400 naming the input and batch-mates are served",
          "[serve][onnx]") {
  // The exported GPT step embeds 50 tokens.
  ServerProcess server({"--model", onnx_model("gpt_step/model.onnx"), "--batch-window-us", "50000"});
  auto health = json::parse(client(server.port()).Get("/healthz")->body);
  CHECK(health["model"]["inputs"][0]["index_extent"] == 50);
  check_rejected(post(server.port(), R"({"inputs": {"ids": [[1, 2, 50]]}})"), 400,
                 "input 'ids' holds 50 (value 2 in row-major order)");
  check_rejected(post(server.port(), R"({"inputs": {"ids": [[-51]]}})"), 400, "[-50, 50)");
  check_rejected(post(server.port(), R"({"inputs": {"ids": [[1, 9223372036854775808]]}})"), 400,
                 "holds 9223372036854775808, outside i64");
  // A sequence longer than the positional table (64) passes the input
  // checks but not the graph: the request's fault (422, naming the node),
  // not a device failure (503) a client would retry.
  json long_ids = json::array({std::vector<int64_t>(65, 1)});
  Reply too_long = post(server.port(), json{{"inputs", {{"ids", long_ids}}}}.dump());
  check_rejected(too_long, 422, "(Gather)");
  json fits = json::array({std::vector<int64_t>(64, 1)});
  CHECK(post(server.port(), json{{"inputs", {{"ids", fits}}}}.dump()).status == 200);
  // A bad request among good ones in the same window costs only itself.
  std::vector<std::future<Reply>> replies;
  for (int r = 0; r < 6; ++r)
    replies.push_back(std::async(std::launch::async, [&, r] {
      return post(server.port(), json{{"inputs", {{"ids", {{r == 3 ? 99 : r, 1, 2}}}}}}.dump());
    }));
  for (int r = 0; r < 6; ++r) {
    REQUIRE(replies[r].wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    Reply rep = replies[r].get();
    INFO("request " << r << ": " << rep.body);
    CHECK(rep.status == (r == 3 ? 400 : 200));
  }
  // Negative ids count from the end, as Gather does: -1 is token 49.
  Reply last = post(server.port(), R"({"inputs": {"ids": [[49, 3]]}})");
  Reply negative = post(server.port(), R"({"inputs": {"ids": [[-1, 3]]}})");
  REQUIRE(last.status == 200);
  REQUIRE(negative.status == 200);
  CHECK(json::parse(last.body) == json::parse(negative.body));
}
