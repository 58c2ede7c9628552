// An HTTP/1.1 inference server for an MLP, with dynamic batching over one
// replica per device (see batcher.hpp for the batching design).
//
//   make_model model.bin --layers 32,256,256,10
//   inference_server --model model.bin --devices cpu:0,cpu:1 --port 8080
//   curl -s localhost:8080/v1/infer -d '{"inputs": [[0.1, ...32 values]]}'
//
// Endpoints: POST /v1/infer ({"inputs": [[...], ...]} -> {"outputs": [[...], ...]}),
// GET /healthz, GET /metrics (Prometheus text). Bad input gets a 4xx with
// {"error": "..."}; a failed device batch gets 503 for its requests only.
// SIGTERM/SIGINT: stop accepting, finish in-flight requests, exit 0.
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <switchyard/switchyard.hpp>

#include "batcher.hpp"
#include "metrics.hpp"
#include "mlp_model.hpp"

namespace sy = switchyard;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> devices = {"cpu:0"};
  serve::BatchOptions batch;
  bool batching = true;
  size_t max_body_bytes = 1 << 20;
  size_t http_threads = 128;
  std::chrono::milliseconds request_timeout{30000};
  bool fault_injection = false;
};

constexpr const char* kUsage =
    "usage: inference_server --model FILE [options]\n"
    "  --host ADDR              listen address (default 127.0.0.1)\n"
    "  --port N                 port; 0 picks a free one (default 8080)\n"
    "  --devices LIST           comma-separated devices, one replica each (default cpu:0; cuda:* for every GPU)\n"
    "  --batch-window-us N      how long a batch stays open after its first request (default 1000)\n"
    "  --max-batch N            rows per batch (default 64)\n"
    "  --max-inflight N         batches in flight per replica before batches are held open (default 2)\n"
    "  --no-batching            one request per batch (batch window 0)\n"
    "  --max-body-bytes N       largest request body (default 1048576)\n"
    "  --http-threads N         HTTP worker threads = concurrent connections served (default 128)\n"
    "  --request-timeout-ms N   give up on a request after this long with 504 (default 30000)\n"
    "  --fault-injection        honour the test header 'X-Inject-Fault: 1' (fails that request's batch on the "
    "device)\n";

[[noreturn]] void die_usage(const std::string& why) {
  std::fprintf(stderr, "inference_server: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < lo || out > hi)
    die_usage(flag + " wants an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + v + "'");
  return out;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die_usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") {
      o.model = value();
    } else if (a == "--host") {
      o.host = value();
    } else if (a == "--port") {
      o.port = static_cast<int>(parse_int(a, value(), 0, 65535));
    } else if (a == "--devices") {
      o.devices.clear();
      std::stringstream ss(value());
      for (std::string d; std::getline(ss, d, ',');)
        if (!d.empty()) o.devices.push_back(d);
      if (o.devices.empty()) die_usage("--devices is empty");
    } else if (a == "--batch-window-us") {
      o.batch.window = std::chrono::microseconds(parse_int(a, value(), 0, 60'000'000));
    } else if (a == "--max-batch") {
      o.batch.max_batch = parse_int(a, value(), 1, 1 << 20);
    } else if (a == "--max-inflight") {
      o.batch.max_inflight = parse_int(a, value(), 1, 1024);
    } else if (a == "--no-batching") {
      o.batching = false;
    } else if (a == "--max-body-bytes") {
      o.max_body_bytes = static_cast<size_t>(parse_int(a, value(), 16, int64_t{1} << 32));
    } else if (a == "--http-threads") {
      o.http_threads = static_cast<size_t>(parse_int(a, value(), 1, 4096));
    } else if (a == "--request-timeout-ms") {
      o.request_timeout = std::chrono::milliseconds(parse_int(a, value(), 1, 3'600'000));
    } else if (a == "--fault-injection") {
      o.fault_injection = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      die_usage("unknown argument '" + a + "'");
    }
  }
  if (o.model.empty()) die_usage("--model is required");
  if (!o.batching) {
    o.batch.window = std::chrono::microseconds(0);
    o.batch.max_batch = 1;
  }
  return o;
}

std::string error_body(const std::string& msg) { return json{{"error", msg}}.dump(); }

/// Checked request rows, or the reason they are not acceptable.
struct Parsed {
  std::vector<float> rows;
  int64_t n = 0;
  std::string error;
};

Parsed parse_inputs(const std::string& body, uint32_t width) {
  Parsed p;
  auto fail = [](std::string why) {
    Parsed bad;
    bad.error = std::move(why);
    return bad;
  };
  json j;
  try {
    j = json::parse(body);
  } catch (const json::out_of_range& e) {
    return fail("a number in the body is out of range (inputs must be finite float32): " + std::string(e.what()));
  } catch (const json::exception& e) {
    return fail("malformed JSON (NaN and Infinity are not JSON numbers): " + std::string(e.what()));
  }
  if (!j.is_object()) return fail("the body must be a JSON object {\"inputs\": [[...], ...]}");
  auto it = j.find("inputs");
  if (it == j.end()) return fail("missing field \"inputs\"");
  if (!it->is_array()) return fail("\"inputs\" must be an array of rows");
  if (it->empty()) return fail("\"inputs\" is empty: send at least one row");
  p.rows.reserve(it->size() * width);
  for (size_t r = 0; r < it->size(); ++r) {
    const json& row = (*it)[r];
    std::string where = "inputs[" + std::to_string(r) + "]";
    if (!row.is_array()) return fail(where + " is not an array");
    if (row.size() != width)
      return fail(where + " has " + std::to_string(row.size()) + " values; the model takes " + std::to_string(width));
    for (size_t c = 0; c < row.size(); ++c) {
      const json& v = row[c];
      if (!v.is_number()) return fail(where + "[" + std::to_string(c) + "] is not a number");
      auto f = static_cast<float>(v.get<double>());
      if (!std::isfinite(f))
        return fail(where + "[" + std::to_string(c) + "] = " + v.dump() + " is not a finite float32");
      p.rows.push_back(f);
    }
  }
  p.n = static_cast<int64_t>(it->size());
  return p;
}

std::string outputs_body(const serve::Rows& out, int64_t n, uint32_t width) {
  std::string s = "{\"outputs\":[";
  s.reserve(out.size() * 16 + 32);
  char buf[32];
  for (int64_t r = 0; r < n; ++r) {
    s += r ? ",[" : "[";
    for (uint32_t c = 0; c < width; ++c) {
      if (c) s += ',';
      // Shortest text that reads back as the same float32.
      auto [p, ec] = std::to_chars(buf, buf + sizeof buf, out[static_cast<size_t>(r) * width + c]);
      s.append(buf, p);
    }
    s += ']';
  }
  s += "]}";
  return s;
}

// The signal handler's only way to reach the server: the write end of the
// signal pipe (a signal handler can use nothing but globals).
std::atomic<int> signal_write_fd{-1};

extern "C" void on_stop_signal(int sig) {
  int fd = signal_write_fd.load();
  auto c = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!write(fd, &c, 1);
}

struct InFlightGuard {
  std::atomic<int64_t>& n;
  explicit InFlightGuard(std::atomic<int64_t>& c) : n(c) { ++n; }
  ~InFlightGuard() { --n; }
};

}  // namespace

int main(int argc, char** argv) {
  // Shutdown signals become a byte on a pipe that the signal thread below
  // reads. Not sigwait with the signals blocked: libraries start threads
  // before main (OpenBLAS's pool), and those would still take the signal.
  int signal_pipe[2];
  if (pipe(signal_pipe) != 0) {
    std::perror("inference_server: pipe");
    return 1;
  }
  signal_write_fd.store(signal_pipe[1]);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client hanging up must not kill the server
  // Blocked here, so in every thread main starts (HTTP workers, CAF, the
  // batcher); only the signal thread unblocks them. A handler run on the main
  // thread, blocked in accept(), was deferred under TSan until the next
  // connection arrived; on an HTTP worker it would interrupt request I/O.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Options opt = parse_args(argc, argv);
  mlp::Model model;
  try {
    model = mlp::load(opt.model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inference_server: %s\n", e.what());
    return 1;
  }

  std::optional<sy::Runtime> rt;
  std::vector<serve::Replica> replicas;
  try {
    rt.emplace(sy::RuntimeOptions{.devices = opt.devices});
    for (const auto& why : rt->unavailable()) std::fprintf(stderr, "inference_server: note: %s\n", why.c_str());
    for (const auto& d : rt->devices()) replicas.push_back(serve::place(model, d));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inference_server: cannot start devices: %s\n", e.what());
    return 1;
  }
  if (replicas.empty()) {
    std::fprintf(stderr, "inference_server: none of the devices in --devices is available\n");
    return 1;
  }
  // Fail now, not on the first request, if a device cannot hold the weights.
  for (const auto& r : replicas) {
    try {
      r.device.sync().get();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "inference_server: placing the model on %s failed: %s\n", r.device.name().c_str(), e.what());
      return 1;
    }
  }
  serve::Batcher batcher(model, replicas, opt.batch);

  serve::Histogram latency({0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10});
  serve::LabeledCounter requests;
  std::atomic<int64_t> in_flight{0};
  const uint32_t in_width = model.input_width();
  const uint32_t out_width = model.output_width();

  httplib::Server svr;
  // httplib owns the queue it gets from this factory (its API takes a raw
  // pointer). One thread serves one connection at a time, so this bounds the
  // concurrent connections.
  svr.new_task_queue = [n = opt.http_threads] { return new httplib::ThreadPool(n); };
  svr.set_payload_max_length(opt.max_body_bytes);
  svr.set_keep_alive_max_count(1'000'000);
  svr.set_keep_alive_timeout(2);  // idle keep-alive connections delay shutdown by this much at most
  svr.set_read_timeout(10);
  // httplib writes headers and body separately: without this, Nagle plus the
  // client's delayed ACK add ~40 ms to every keep-alive reply.
  svr.set_tcp_nodelay(true);

  svr.Get("/healthz", [&](const httplib::Request&, httplib::Response& res) {
    json j{{"status", "ok"}, {"input_width", in_width}, {"output_width", out_width}};
    json devs = json::array();
    for (const auto& r : batcher.replicas()) devs.push_back(r.device.name());
    j["devices"] = devs;
    res.set_content(j.dump(), "application/json");
  });

  svr.Post("/v1/infer", [&](const httplib::Request& req, httplib::Response& res) {
    InFlightGuard guard(in_flight);
    const auto t0 = Clock::now();
    auto reply = [&](int status, std::string body) {
      res.status = status;
      res.set_content(std::move(body), "application/json");
      requests.add(std::to_string(status));
      latency.observe(std::chrono::duration<double>(Clock::now() - t0).count());
    };
    Parsed p = parse_inputs(req.body, in_width);
    if (!p.error.empty()) return reply(400, error_body(p.error));
    bool fault = opt.fault_injection && req.get_header_value("X-Inject-Fault") == "1";
    const int64_t n = p.n;
    auto fut = batcher.submit(std::move(p.rows), n, fault);
    if (!fut.wait_for(opt.request_timeout)) return reply(504, error_body("timed out waiting for the model"));
    try {
      serve::Rows out = fut.get();
      reply(200, outputs_body(out, n, out_width));
    } catch (const sy::Error& e) {
      reply(503, error_body(std::string("device failure: ") + e.what()));
    } catch (const std::exception& e) {
      reply(500, error_body(std::string("internal error: ") + e.what()));
    }
  });

  svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::ostringstream out;
    const auto& reps = batcher.replicas();
    std::vector<sy::Future<sy::DeviceStats>> stats;
    for (const auto& r : reps) stats.push_back(r.device.stats());
    std::vector<std::optional<sy::DeviceStats>> got;
    for (auto& f : stats) {
      std::optional<sy::DeviceStats> s;
      try {
        if (f.wait_for(std::chrono::seconds(2))) s = f.get();
      } catch (const std::exception&) {
      }
      got.push_back(std::move(s));
    }
    auto device_metric = [&](const char* name, const char* type, const char* help, auto field) {
      out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
      for (size_t i = 0; i < reps.size(); ++i)
        if (got[i]) out << name << "{device=\"" << reps[i].device.name() << "\"} " << field(*got[i]) << '\n';
    };
    out << "# HELP switchyard_device_up 1 if the device answered its stats request\n"
           "# TYPE switchyard_device_up gauge\n";
    for (size_t i = 0; i < reps.size(); ++i)
      out << "switchyard_device_up{device=\"" << reps[i].device.name() << "\"} " << (got[i] ? 1 : 0) << '\n';
    device_metric("switchyard_device_ops_executed_total", "counter", "Ops the device has run",
                  [](const sy::DeviceStats& s) { return s.ops_executed; });
    device_metric("switchyard_device_ops_failed_total", "counter", "Ops that failed on the device",
                  [](const sy::DeviceStats& s) { return s.ops_failed; });
    device_metric("switchyard_device_queue_depth", "gauge", "Ops waiting on a pending input",
                  [](const sy::DeviceStats& s) { return s.queue_depth; });
    device_metric("switchyard_device_live_handles", "gauge", "Tensors alive on the device",
                  [](const sy::DeviceStats& s) { return s.live_handles; });
    device_metric("switchyard_device_live_bytes", "gauge", "Bytes of live tensors on the device",
                  [](const sy::DeviceStats& s) { return s.live_bytes; });
    device_metric("switchyard_device_cached_bytes", "gauge", "Bytes the backend keeps pooled for reuse",
                  [](const sy::DeviceStats& s) { return s.cached_bytes; });
    auto inflight = batcher.in_flight();
    auto dispatched = batcher.dispatched();
    out << "# HELP serve_batches_in_flight Batches running on each replica\n# TYPE serve_batches_in_flight gauge\n";
    for (size_t i = 0; i < reps.size(); ++i)
      out << "serve_batches_in_flight{device=\"" << reps[i].device.name() << "\"} " << inflight[i] << '\n';
    out << "# HELP serve_batches_total Batches dispatched to each replica\n# TYPE serve_batches_total counter\n";
    for (size_t i = 0; i < reps.size(); ++i)
      out << "serve_batches_total{device=\"" << reps[i].device.name() << "\"} " << dispatched[i] << '\n';
    out << "# HELP serve_requests_in_flight Inference requests being handled\n# TYPE serve_requests_in_flight gauge\n"
        << "serve_requests_in_flight " << in_flight.load() << '\n';
    requests.render(out, "serve_requests_total", "code", "Inference requests answered, by HTTP status");
    latency.render(out, "serve_request_duration_seconds", "Inference request latency from body received to reply");
    batcher.batch_rows().render(out, "serve_batch_rows", "Rows per dispatched batch");
    res.set_content(out.str(), "text/plain; version=0.0.4");
  });

  // httplib's own errors (413 body too large, 404, 400 bad request line)
  // come with an empty body: give them the same JSON shape as ours.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    if (res.status == 413)
      msg = "request body too large (limit set by --max-body-bytes)";
    else if (res.status == 404)
      msg = "no such endpoint: " + req.method + " " + req.path + " (try POST /v1/infer, GET /healthz, GET /metrics)";
    else
      msg = "HTTP error " + std::to_string(res.status);
    res.set_content(error_body(msg), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(error_body("internal error: " + what), "application/json");
  });

  int port = opt.port;
  if (port == 0) {
    port = svr.bind_to_any_port(opt.host);
    if (port < 0) {
      std::fprintf(stderr, "inference_server: cannot bind %s\n", opt.host.c_str());
      return 1;
    }
  } else if (!svr.bind_to_port(opt.host, port)) {
    std::fprintf(stderr, "inference_server: cannot bind %s:%d\n", opt.host.c_str(), port);
    return 1;
  }

  std::atomic<bool> listening_done{false};
  std::thread signal_thread([&] {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);  // a signal pending since start-up arrives now
    while (!listening_done) {
      pollfd p{signal_pipe[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      unsigned char sig = 0;
      if (read(signal_pipe[0], &sig, 1) != 1) continue;
      std::fprintf(stderr, "inference_server: %s, finishing in-flight requests\n", strsignal(sig));
      batcher.drain();  // no more batch windows: run what is queued now
      // stop() is a no-op until listen has started (and must be called once).
      while (!svr.is_running() && !listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!listening_done) svr.stop();
      return;
    }
  });

  std::string devs;
  for (const auto& r : replicas) devs += (devs.empty() ? "" : ",") + r.device.name();
  std::printf("listening on http://%s:%d devices=%s batching=%s window_us=%lld max_batch=%lld\n", opt.host.c_str(),
              port, devs.c_str(), opt.batching ? "on" : "off", static_cast<long long>(opt.batch.window.count()),
              static_cast<long long>(opt.batch.max_batch));
  std::fflush(stdout);

  // Returns after stop(), once the pool's threads, and with them every
  // request being handled, have finished.
  bool ok = svr.listen_after_bind();
  listening_done = true;
  signal_thread.join();
  batcher.stop();
  std::printf("stopped: listen %s\n", ok ? "ended" : "failed");
  std::fflush(stdout);
  return ok ? 0 : 1;
}
