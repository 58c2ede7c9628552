// SPDX-License-Identifier: Apache-2.0
// Starts examples/inference_server as a real process on 127.0.0.1 and checks
// its HTTP behaviour against the MLP computed with plain loops
// (mlp::forward_reference) from the same model file.
#include "support.hpp"
#include "worker_process.hpp"

using namespace serve_test;
using namespace std::chrono_literals;

TEST_CASE("healthz reports the model's widths and the serving devices", "[serve]") {
  ServerProcess server({"--devices", "cpu:0,cpu:1"});
  auto c = client(server.port());
  auto res = c.Get("/healthz");
  REQUIRE(res);
  CHECK(res->status == 200);
  json j = json::parse(res->body);
  CHECK(j["status"] == "ok");
  CHECK(j["input_width"] == kIn);
  CHECK(j["output_width"] == kOut);
  CHECK(j["devices"] == json::array({"cpu:0", "cpu:1"}));
}

TEST_CASE("a request with several rows gets the MLP's output for each row", "[serve]") {
  ServerProcess server({});
  Rows rows = random_rows(5, 1);
  Reply r = post(server.port(), body_of(rows));
  REQUIRE(r.status == 200);
  check_outputs(r.body, rows);
}

TEST_CASE("concurrent requests on two replicas each get their own rows back", "[serve]") {
  ServerProcess server({"--devices", "cpu:0,cpu:1", "--batch-window-us", "2000", "--max-batch", "16"});
  constexpr int kThreads = 12;
  constexpr int kRequests = 8;
  std::vector<std::vector<Rows>> sent(kThreads);
  std::vector<std::vector<Reply>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRequests; ++i) {
        Rows rows = random_rows(1 + (t + i) % 3, 100 * t + i);
        got[t].push_back(post(server.port(), body_of(rows)));
        sent[t].push_back(std::move(rows));
      }
    });
  for (auto& th : threads) th.join();
  double total_rows = 0;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kRequests; ++i) {
      REQUIRE(got[t][i].status == 200);
      check_outputs(got[t][i].body, sent[t][i]);
      total_rows += static_cast<double>(sent[t][i].size());
    }
  std::string m = get_metrics(server.port());
  CHECK(metric(m, "serve_requests_total{code=\"200\"}") == kThreads * kRequests);
  CHECK(metric(m, "serve_batch_rows_sum") == total_rows);
  CHECK(metric(m, "serve_request_duration_seconds_count") == kThreads * kRequests);
  // Every batch ran on some replica, and the runtime's device stats are there.
  CHECK(metric(m, "serve_batches_total{device=\"cpu:0\"}") + metric(m, "serve_batches_total{device=\"cpu:1\"}") ==
        metric(m, "serve_batch_rows_count"));
  CHECK(metric(m, "switchyard_device_ops_executed_total{device=\"cpu:0\"}") > 0);
  CHECK(metric(m, "switchyard_device_live_handles{device=\"cpu:1\"}") >= 6);  // the replica's weights
}

TEST_CASE("requests arriving within the batch window are stacked into one batch", "[serve]") {
  // A window far longer than the test: the batch closes because max-batch
  // rows are queued, so exactly one batch runs.
  ServerProcess server({"--batch-window-us", "10000000", "--max-batch", "8"});
  std::vector<Rows> sent(8);
  std::vector<Reply> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      sent[t] = random_rows(1, 500 + t);
      got[t] = post(server.port(), body_of(sent[t]));
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    REQUIRE(got[t].status == 200);
    check_outputs(got[t].body, sent[t]);
  }
  std::string m = get_metrics(server.port());
  CHECK(metric(m, "serve_batch_rows_count") == 1);
  CHECK(metric(m, "serve_batch_rows_sum") == 8);
}

TEST_CASE("with --no-batching every request runs as its own batch", "[serve]") {
  ServerProcess server({"--no-batching"});
  std::vector<Rows> sent(6);
  std::vector<Reply> got(6);
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      sent[t] = random_rows(1, 900 + t);
      got[t] = post(server.port(), body_of(sent[t]));
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 6; ++t) {
    REQUIRE(got[t].status == 200);
    check_outputs(got[t].body, sent[t]);
  }
  CHECK(metric(get_metrics(server.port()), "serve_batch_rows_count") == 6);
}

TEST_CASE("bad input gets a 4xx with a JSON error and the server keeps serving", "[serve]") {
  ServerProcess server({"--max-body-bytes", "4096"});
  const int port = server.port();
  SECTION("malformed JSON") { check_rejected(post(port, "{\"inputs\": [[1, 2,"), 400, "malformed JSON"); }
  SECTION("a row of the wrong width") {
    Rows rows = random_rows(2, 3);
    rows[1].pop_back();
    check_rejected(post(port, body_of(rows)), 400, "inputs[1] has 15 values; the model takes 16");
  }
  SECTION("a body over --max-body-bytes") { check_rejected(post(port, body_of(random_rows(40, 4))), 413, "too large"); }
  SECTION("a NaN literal") {
    std::string body = body_of(random_rows(1, 5));
    body.replace(body.find("[[") + 2, 0, "NaN,");
    check_rejected(post(port, body), 400, "NaN");
  }
  SECTION("an infinite number") {
    std::string body = body_of(random_rows(1, 6));
    body.replace(body.find("[[") + 2, 0, "1e999,");
    check_rejected(post(port, body), 400, "finite");
  }
  SECTION("a number beyond float32") {
    Rows rows = random_rows(1, 7);
    json j{{"inputs", rows}};
    j["inputs"][0][3] = 1e39;
    check_rejected(post(port, j.dump()), 400, "inputs[0][3] = 1e+39 is not a finite float32");
  }
  SECTION("empty inputs") { check_rejected(post(port, "{\"inputs\": []}"), 400, "empty"); }
  SECTION("a missing inputs field") { check_rejected(post(port, "{\"rows\": [[1]]}"), 400, "missing field"); }
  SECTION("a non-number value") {
    json j{{"inputs", random_rows(1, 8)}};
    j["inputs"][0][0] = "x";
    check_rejected(post(port, j.dump()), 400, "inputs[0][0] is not a number");
  }
  SECTION("an unknown endpoint") {
    auto c = client(port);
    auto res = c.Get("/v2/nothing");
    REQUIRE(res);
    check_rejected({res->status, res->body}, 404, "no such endpoint");
  }
  Rows rows = random_rows(2, 9);
  Reply ok = post(port, body_of(rows));
  REQUIRE(ok.status == 200);
  check_outputs(ok.body, rows);
}

TEST_CASE("a failed device batch answers 503 to its requests only", "[serve]") {
  ServerProcess server({"--fault-injection", "--batch-window-us", "20000"});
  const int port = server.port();
  std::vector<Rows> sent(5);
  std::vector<Reply> got(5);
  std::vector<std::thread> threads;
  for (int t = 0; t < 5; ++t)
    threads.emplace_back([&, t] {
      sent[t] = random_rows(1, 700 + t);
      httplib::Headers h;
      if (t == 2) h.emplace("X-Inject-Fault", "1");
      got[t] = post(port, body_of(sent[t]), h);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 5; ++t) {
    if (t == 2) {
      check_rejected(got[t], 503, "device failure");
    } else {
      REQUIRE(got[t].status == 200);
      check_outputs(got[t].body, sent[t]);
    }
  }
  Rows rows = random_rows(1, 99);
  Reply after = post(port, body_of(rows));
  REQUIRE(after.status == 200);
  check_outputs(after.body, rows);
  CHECK(metric(get_metrics(port), "switchyard_device_ops_failed_total{device=\"cpu:0\"}") >= 1);
}

TEST_CASE("SIGTERM completes in-flight requests and exits 0", "[serve]") {
  // A 60 s window keeps the requests queued until the shutdown drains them;
  // without the drain terminate() would give up (30 s) before the window ends.
  ServerProcess server({"--batch-window-us", "60000000", "--max-batch", "64"});
  const int port = server.port();
  constexpr int kClients = 4;
  std::vector<Rows> sent(kClients);
  std::vector<Reply> got(kClients);
  for (int t = 0; t < kClients; ++t) sent[t] = random_rows(2, 300 + t);
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) threads.emplace_back([&, t] { got[t] = post(port, body_of(sent[t])); });
  // Wait (bounded) until all are inside the server.
  double in_flight = 0;
  for (int i = 0; i < 1000 && in_flight < kClients; ++i) {
    in_flight = metric(get_metrics(port), "serve_requests_in_flight");
    if (in_flight < kClients) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(in_flight == kClients);
  CHECK(server.terminate() == 0);
  for (auto& th : threads) th.join();
  for (int t = 0; t < kClients; ++t) {
    REQUIRE(got[t].status == 200);
    check_outputs(got[t].body, sent[t]);
  }
}

TEST_CASE("a replica whose remote worker died takes no more batches", "[serve]") {
  switchyard::testing::WorkerProcess worker({"--devices=cpu:0", "--threads=1"});
  setenv("SWITCHYARD_WORKERS", worker.address().c_str(), 1);
  ServerProcess server({"--no-batching"});
  unsetenv("SWITCHYARD_WORKERS");
  const int port = server.port();
  auto c = client(port);
  auto health = c.Get("/healthz");
  REQUIRE(health);
  REQUIRE(json::parse(health->body)["devices"].size() == 2);  // cpu:0 and the worker's
  Rows rows = random_rows(1, 5);
  for (int i = 0; i < 4; ++i) REQUIRE(post(port, body_of(rows)).status == 200);
  CHECK(json::parse(c.Get("/healthz")->body)["lost_devices"].empty());
  worker.stop(SIGKILL);
  // Once the runtime knows the device is lost (healthz says so), no request
  // goes to its replica: before, the first one after the loss still did and
  // got 503, and a retired replica looked idle and took every other one.
  json lost = json::array();
  for (int i = 0; i < 500 && lost.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    lost = json::parse(c.Get("/healthz")->body)["lost_devices"];
  }
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].get<std::string>().find("/cpu:0") != std::string::npos);
  for (int i = 0; i < 20; ++i) {
    Reply r = post(port, body_of(rows));
    INFO("request " << i << " after the loss: " << r.body);
    REQUIRE(r.status == 200);
    check_outputs(r.body, rows);
  }
}

TEST_CASE("requests answered 504 while queued are dropped, not run", "[serve]") {
  // A 1.5 s batch window holds the batch open past the 300 ms request
  // timeout: every request gets its 504, and the batch that would have run
  // them after the window has nobody left to answer.
  ServerProcess server({"--batch-window-us", "1500000", "--request-timeout-ms", "300"});
  const int port = server.port();
  std::vector<std::thread> threads;
  std::vector<int> status(3, 0);
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] { status[t] = post(port, body_of(random_rows(1, 40 + t))).status; });
  for (auto& th : threads) th.join();
  CHECK(status == std::vector<int>{504, 504, 504});
  std::this_thread::sleep_for(2s);  // past the window
  CHECK(metric(get_metrics(port), "serve_batches_total{device=\"cpu:0\"}") == 0);
  // The server goes on serving requests that do not time out.
  ServerProcess quick({"--batch-window-us", "1000", "--request-timeout-ms", "5000"});
  Rows rows = random_rows(2, 9);
  Reply ok = post(quick.port(), body_of(rows));
  REQUIRE(ok.status == 200);
  check_outputs(ok.body, rows);
}
