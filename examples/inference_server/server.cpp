// SPDX-License-Identifier: Apache-2.0
// An HTTP/1.1 inference server for an MLP, with dynamic batching over one
// replica per device (see batcher.hpp for the batching design).
//
//   make_model model.bin --layers 32,256,256,10
//   inference_server --model model.bin --devices cpu:0,cpu:1 --port 8080
//   curl -s localhost:8080/v1/infer -d '{"inputs": [[0.1, ...32 values]]}'
//
// Endpoints: POST /v1/infer ({"inputs": [[...], ...]} -> {"outputs": [[...], ...]}),
// GET /healthz, GET /metrics (Prometheus text). Bad input gets a 4xx with
// {"error": "..."}; a failed device batch gets 503 for its requests only
// (ONNX: a failed batch runs again request by request, and a request's own
// fault, an index out of range in its data, is 422; onnx_serving.hpp).
// SIGTERM/SIGINT: stop accepting, finish in-flight requests, exit 0.
//
// The HTTP protocol (framing, limits, deadlines, connection caps) is the
// business of http/server.hpp; this file holds the routes and the model.
#include "http/server.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <switchyard/switchyard.hpp>

#include "batcher.hpp"
#include "json_io.hpp"
#include "metrics.hpp"
#include "mlp_model.hpp"
#include "onnx_serving.hpp"
#include "replica_choice.hpp"
#include "tools/cli.hpp"

namespace sy = switchyard;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string model;
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::vector<std::string> devices = {"cpu:0"};
  serve::BatchOptions batch;
  bool batching = true;
  std::chrono::milliseconds request_timeout{30000};
  bool fault_injection = false;
  // A reply's JSON is ~20 bytes per value and its tree several times that:
  // a 1 MiB request for many rows of a wide output (token ids in, logits
  // out) asked for a 250 MB reply. 4M values: at most ~100 MB of JSON.
  int64_t max_reply_values = int64_t{1} << 22;
  http::Options http;  // host and port are copied in from the fields above
};

// Parses the command line into `o` (CLI11, the conventions of tools/cli.hpp).
// Returns the exit code when the program should stop now: 0 after --help or
// --version, 2 for bad input (the option named).
std::optional<int> parse_args(int argc, char** argv, Options& o) {
  CLI::App app{"inference_server " SWITCHYARD_VERSION
               ": HTTP/1.1 inference for an MLP (make_model's format) or an ONNX model (--model x.onnx), "
               "with dynamic batching over one replica per device.",
               "inference_server"};
  switchyard::cli::apply_conventions(app);
  using switchyard::cli::integer_in;
  std::string devices = "cpu:0";
  int64_t window_us = o.batch.window.count();
  int64_t idle_ms = o.http.idle_timeout.count(), header_ms = o.http.header_timeout.count(),
          body_ms = o.http.body_timeout.count(), write_ms = o.http.write_timeout.count(),
          request_ms = o.request_timeout.count();
  bool no_batching = false;
  const auto ms_range = integer_in<int64_t>(1, 3'600'000);
  app.add_option("--model", o.model, "(required) model file: make_model's MLP format, or ONNX when it ends in .onnx");
  app.add_option("--host", o.host, "listen address, an IP address")->capture_default_str();
  app.add_option("--port", o.port, "port; 0 picks a free one")
      ->check(integer_in<uint16_t>(0, 65535))
      ->capture_default_str();
  app.add_option("--devices", devices, "comma-separated devices, one replica each (cuda:* for every GPU)")
      ->capture_default_str();
  app.add_option("--batch-window-us", window_us, "how long a batch stays open after its first request")
      ->check(integer_in<int64_t>(0, 60'000'000))
      ->capture_default_str();
  app.add_option("--max-batch", o.batch.max_batch, "rows per batch")
      ->check(integer_in<int64_t>(1, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-inflight", o.batch.max_inflight, "batches in flight per replica before batches are held open")
      ->check(integer_in<int64_t>(1, 1024))
      ->capture_default_str();
  app.add_flag("--no-batching", no_batching, "one request per batch (batch window 0)");
  app.add_option("--max-body-bytes", o.http.max_body_bytes, "largest request body, chunked or not")
      ->check(integer_in<size_t>(16, size_t{1} << 32))
      ->capture_default_str();
  app.add_option("--max-header-bytes", o.http.max_header_bytes, "largest request header")
      ->check(integer_in<size_t>(256, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-body-memory-bytes", o.http.max_body_memory, "request bodies held at once, all connections")
      ->check(integer_in<size_t>(16, size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--http-threads", o.http.threads, "event-loop threads serving every connection")
      ->check(integer_in<size_t>(1, 256))
      ->capture_default_str();
  app.add_option("--max-connections", o.http.max_connections,
                 "open connections at most; more wait in the listen backlog")
      ->check(integer_in<size_t>(1, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-connections-per-address", o.http.max_connections_per_address,
                 "open connections from one peer address at most (0: no limit); more are closed at accept")
      ->check(integer_in<size_t>(0, size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-reply-values", o.max_reply_values,
                 "values (tensor elements) one reply may hold; a request whose outputs hold more gets 413")
      ->check(integer_in<int64_t>(1, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--listen-backlog", o.http.backlog, "connections the kernel queues before they are accepted")
      ->check(integer_in<int>(1, 65535))
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", idle_ms, "close a keep-alive connection silent this long")
      ->check(ms_range)
      ->capture_default_str();
  app.add_option("--header-timeout-ms", header_ms, "a request header must be complete this long after its first byte")
      ->check(ms_range)
      ->capture_default_str();
  app.add_option("--body-timeout-ms", body_ms, "a request body must be complete this long after its header")
      ->check(ms_range)
      ->capture_default_str();
  app.add_option("--write-timeout-ms", write_ms, "drop a peer that does not take its reply within this")
      ->check(ms_range)
      ->capture_default_str();
  app.add_option("--request-timeout-ms", request_ms, "give up on a request after this long with 504")
      ->check(ms_range)
      ->capture_default_str();
  app.add_flag("--fault-injection", o.fault_injection,
               "honour the test header 'X-Inject-Fault: 1' (fails that request's batch on the device)");
  if (auto exit_code = switchyard::cli::parse(app, argc, argv)) return exit_code;
  if (o.model.empty()) return switchyard::cli::usage_error(app, "--model is required");
  o.devices.clear();
  std::stringstream ss(devices);
  for (std::string d; std::getline(ss, d, ',');)
    if (!d.empty()) o.devices.push_back(d);
  if (o.devices.empty()) return switchyard::cli::usage_error(app, "--devices names no device");
  in6_addr any_address{};
  if (inet_pton(AF_INET, o.host.c_str(), &any_address) != 1 && inet_pton(AF_INET6, o.host.c_str(), &any_address) != 1)
    return switchyard::cli::usage_error(app, "--host: '" + o.host + "' is not an IP address");
  o.batch.window = std::chrono::microseconds(window_us);
  o.http.idle_timeout = std::chrono::milliseconds(idle_ms);
  o.http.header_timeout = std::chrono::milliseconds(header_ms);
  o.http.body_timeout = std::chrono::milliseconds(body_ms);
  o.http.write_timeout = std::chrono::milliseconds(write_ms);
  o.request_timeout = std::chrono::milliseconds(request_ms);
  o.batch.give_up_after = o.request_timeout;
  o.batching = !no_batching;
  if (!o.batching) {
    o.batch.window = std::chrono::microseconds(0);
    o.batch.max_batch = 1;
  }
  o.http.host = o.host;
  o.http.port = o.port;
  return std::nullopt;
}

// The signal handler's only way to reach the server: the write end of the
// signal pipe (a signal handler can use nothing but globals).
std::atomic<int> signal_write_fd{-1};

extern "C" void on_stop_signal(int sig) {
  int fd = signal_write_fd.load();
  auto c = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!write(fd, &c, 1);
}

/// Runs blocking work (the /metrics handler waits up to 2 s for device
/// stats) off the event-loop threads, one task at a time; a full queue is
/// refused instead of growing.
class BlockingWorker {
 public:
  explicit BlockingWorker(size_t max_queued) : max_queued_(max_queued), thread_([this] { loop(); }) {}
  ~BlockingWorker() { stop(); }
  BlockingWorker(const BlockingWorker&) = delete;
  BlockingWorker& operator=(const BlockingWorker&) = delete;

  /// False (and `task` dropped) when the queue is full or stopped.
  bool post(std::function<void()> task) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ || queue_.size() >= max_queued_) return false;
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return true;
  }
  /// Runs what is queued, then ends the thread.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Whether a model run's failure is the request's own (422): what its data
/// asks of the graph, refused at the call or by an op on the device. The
/// other codes (kernel_failure, out_of_memory, device_lost, runtime_closed,
/// ...) are the device's or the runtime's (503).
bool request_fault(sy::Errc code) {
  switch (code) {
    case sy::Errc::index_out_of_range:
    case sy::Errc::invalid_argument:
    case sy::Errc::shape_mismatch:
    case sy::Errc::dtype_mismatch:
    case sy::Errc::unsupported:
      return true;
    default:
      return false;
  }
}

http::Response json_reply(int status, std::string body) { return {status, "application/json", std::move(body), {}}; }

http::Response error_reply(int status, const std::string& message) {
  return json_reply(status, serve::error_body(message));
}

/// Fits --max-connections into the process's open file limit (raised to
/// its hard maximum first), keeping some descriptors for the runtime.
void fit_connections_to_fd_limit(http::Options& o) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  constexpr rlim_t kReserve = 128;  // CAF, OpenBLAS, the model file, the signal pipe, stdio
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur <= kReserve) return;
  auto room = static_cast<size_t>(lim.rlim_cur - kReserve);
  if (o.max_connections > room) {
    std::fprintf(stderr, "inference_server: note: --max-connections lowered from %zu to %zu (open file limit %llu)\n",
                 o.max_connections, room, static_cast<unsigned long long>(lim.rlim_cur));
    o.max_connections = room;
  }
}

}  // namespace

// NOLINTNEXTLINE(bugprone-exception-escape): start-up errors are caught; only bad_alloc or thread errors are left
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
  // Blocked here, so in every thread main starts (event loop, CAF, the
  // batcher); only the signal thread unblocks them. A handler run on a thread
  // blocked in a system call was deferred under TSan until that call
  // returned.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Options opt;
  if (auto exit_code = parse_args(argc, argv, opt)) return *exit_code;
  fit_connections_to_fd_limit(opt.http);
  // A .onnx file is served through the ONNX loader; anything else is the
  // MLP format of mlp_model.hpp.
  const bool onnx_model = opt.model.size() > 5 && opt.model.ends_with(".onnx");
  mlp::Model model;
  try {
    if (!onnx_model) model = mlp::load(opt.model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inference_server: %s\n", e.what());
    return 1;
  }

  std::optional<sy::Runtime> rt;
  std::vector<serve::Replica> replicas;
  std::vector<sy::onnx::Model> onnx_models;
  try {
    rt.emplace(sy::RuntimeOptions{.devices = opt.devices});
  } catch (const sy::Error& e) {
    // A device --devices names wrongly is a usage error, as for the worker.
    std::fprintf(stderr, "inference_server: --devices: %s\n", e.what());
    return e.code() == sy::Errc::unknown_device || e.code() == sy::Errc::invalid_argument ? 2 : 1;
  }
  try {
    for (const auto& why : rt->unavailable()) std::fprintf(stderr, "inference_server: note: %s\n", why.c_str());
    for (const auto& d : rt->devices())
      if (onnx_model)
        onnx_models.push_back(sy::onnx::Model::load(opt.model, d));
      else
        replicas.push_back(serve::place(model, d));
  } catch (const sy::Error& e) {
    std::fprintf(stderr, "inference_server: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inference_server: cannot start devices: %s\n", e.what());
    return 1;
  }
  if (replicas.empty() && onnx_models.empty()) {
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
  for (const auto& m : onnx_models) {
    try {
      m.device().sync().get();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "inference_server: placing the model on %s failed: %s\n", m.device().name().c_str(),
                   e.what());
      return 1;
    }
  }
  std::optional<serve::Batcher> mlp_batcher;
  std::optional<serve::OnnxBatcher> onnx_batcher;
  if (onnx_model) {
    // Runs the batch-invariance probe (check_batching) when batching is on.
    onnx_batcher.emplace(onnx_models, opt.batch);
    if (!onnx_batcher->batching_off().empty())
      std::fprintf(stderr, "inference_server: batching off: %s\n", onnx_batcher->batching_off().c_str());
  } else {
    mlp_batcher.emplace(model, replicas, opt.batch);
  }
  const bool batching = onnx_batcher ? onnx_batcher->batching() : opt.batching;
  // What /metrics, shutdown and the start-up line need, whichever model.
  auto batch_devices = [&] {
    std::vector<sy::Device> out;
    if (onnx_batcher) return onnx_batcher->devices();
    for (const auto& r : mlp_batcher->replicas()) out.push_back(r.device);
    return out;
  };
  auto batch_in_flight = [&] { return onnx_batcher ? onnx_batcher->in_flight() : mlp_batcher->in_flight(); };
  auto batch_dispatched = [&] { return onnx_batcher ? onnx_batcher->dispatched() : mlp_batcher->dispatched(); };
  auto& batch_rows_hist = onnx_batcher ? onnx_batcher->batch_rows() : mlp_batcher->batch_rows();
  auto batch_drain = [&] { onnx_batcher ? onnx_batcher->drain() : mlp_batcher->drain(); };
  auto batch_stop = [&] { onnx_batcher ? onnx_batcher->stop() : mlp_batcher->stop(); };

  serve::Histogram latency({0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10});
  serve::LabeledCounter requests;
  std::atomic<int64_t> in_flight{0};
  const uint32_t in_width = onnx_model ? 0 : model.input_width();
  const uint32_t out_width = onnx_model ? 0 : model.output_width();
  BlockingWorker blocking(64);
  std::atomic<http::Server*> server_ptr{nullptr};

  auto healthz = [&]() {
    json j{{"status", "ok"}};
    j["batching"] = batching;
    if (onnx_batcher) {
      j["model"] = json::parse(serve::onnx_signature_json(onnx_batcher->model()));
      if (!onnx_batcher->batching_off().empty()) j["batching_off"] = onnx_batcher->batching_off();
    } else {
      j["input_width"] = in_width;
      j["output_width"] = out_width;
    }
    json devs = json::array();
    json lost = json::array();
    for (const auto& d : batch_devices()) {
      devs.push_back(d.name());
      if (d.lost()) lost.push_back(d.name());
    }
    j["devices"] = devs;
    j["lost_devices"] = lost;  // retired replicas: they take no more requests
    return json_reply(200, j.dump());
  };

  // Answers on the event-loop thread (bad input), on the thread that
  // completes the batch's future, or on the strand when the request timeout
  // fires first: whichever comes first counts.
  auto infer = [&](const http::Request& req, const http::Responder& respond) {
    ++in_flight;
    const auto t0 = Clock::now();
    auto once = std::make_shared<std::atomic<bool>>(false);
    auto reply = [&requests, &latency, &in_flight, t0, once, respond](int status, std::string body) {
      if (once->exchange(true)) return;
      requests.add(std::to_string(status));
      latency.observe(std::chrono::duration<double>(Clock::now() - t0).count());
      --in_flight;
      respond(json_reply(status, std::move(body)));
    };
    if (onnx_batcher) {
      serve::OnnxParsed p = serve::parse_onnx_inputs(req.body, onnx_batcher->model().inputs());
      if (!p.error.empty()) return reply(400, serve::error_body(p.error));
      auto fut = onnx_batcher->submit(std::move(p.inputs), p.rows);
      respond.on_deadline(opt.request_timeout,
                          [reply] { reply(504, serve::error_body("timed out waiting for the model")); });
      fut.on_complete([fut, reply, max_reply_values = opt.max_reply_values](const std::exception_ptr& e) {
        try {
          if (!e) {
            const auto& outputs = fut.get();
            int64_t values = 0;
            for (const auto& [name, d] : outputs) values += d.numel();
            if (values > max_reply_values)
              return reply(413, serve::error_body("the reply would hold " + std::to_string(values) +
                                                  " values, more than --max-reply-values (" +
                                                  std::to_string(max_reply_values) + "): send fewer rows"));
            return reply(200, serve::onnx_outputs_body(outputs));
          }
          std::rethrow_exception(e);
        } catch (const sy::Error& err) {
          // The request ran alone (a failed batch is run again request by
          // request), so its error is its own. The request's fault, which a
          // retry would repeat, is 422, whether the loader refused it at the
          // call (a sequence longer than a positional table, an empty axis
          // its reshapes cannot take) or an op failed on its data on the
          // device (an index out of range in an input the model reads as
          // indices). Everything else is the server's: 503.
          reply(request_fault(err.code()) ? 422 : 503, serve::error_body(err.what()));
        } catch (const serve::QueueTimeout& err) {
          reply(504, serve::error_body(err.what()));
        } catch (const std::exception& err) {
          reply(500, serve::error_body(std::string("internal error: ") + err.what()));
        }
      });
      return;
    }
    serve::Parsed p = serve::parse_inputs(req.body, in_width);
    if (!p.error.empty()) return reply(400, serve::error_body(p.error));
    bool fault = opt.fault_injection && req.header("X-Inject-Fault") == "1";
    const int64_t n = p.n;
    auto fut = mlp_batcher->submit(std::move(p.rows), n, fault);
    respond.on_deadline(opt.request_timeout,
                        [reply] { reply(504, serve::error_body("timed out waiting for the model")); });
    fut.on_complete([fut, reply, n, out_width](std::exception_ptr e) mutable {
      if (!e) {
        try {
          serve::OutputsBody out = serve::outputs_body(fut.get(), n, out_width);
          // Non-finite outputs cannot be JSON numbers: say so instead of
          // writing `inf` (which no JSON parser accepts).
          if (!out.error.empty()) return reply(422, serve::error_body(out.error));
          return reply(200, std::move(out.body));
        } catch (...) {
          e = std::current_exception();
        }
      }
      try {
        std::rethrow_exception(e);
      } catch (const sy::Error& err) {
        reply(503, serve::error_body(std::string("device failure: ") + err.what()));
      } catch (const serve::QueueTimeout& err) {
        reply(504, serve::error_body(err.what()));
      } catch (const std::exception& err) {
        reply(500, serve::error_body(std::string("internal error: ") + err.what()));
      } catch (...) {
        reply(500, serve::error_body("internal error"));
      }
    });
  };

  auto metrics = [&]() {
    std::ostringstream out;
    const auto reps = batch_devices();
    std::vector<sy::Future<sy::DeviceStats>> stats;
    stats.reserve(reps.size());
    for (const auto& d : reps) stats.push_back(d.stats());
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
        if (got[i]) out << name << "{device=\"" << reps[i].name() << "\"} " << field(*got[i]) << '\n';
    };
    out << "# HELP switchyard_device_up 1 if the device answered its stats request\n"
           "# TYPE switchyard_device_up gauge\n";
    for (size_t i = 0; i < reps.size(); ++i)
      out << "switchyard_device_up{device=\"" << reps[i].name() << "\"} " << (got[i] ? 1 : 0) << '\n';
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
    auto inflight = batch_in_flight();
    auto dispatched = batch_dispatched();
    out << "# HELP serve_batches_in_flight Batches running on each replica\n# TYPE serve_batches_in_flight gauge\n";
    for (size_t i = 0; i < reps.size(); ++i)
      out << "serve_batches_in_flight{device=\"" << reps[i].name() << "\"} " << inflight[i] << '\n';
    out << "# HELP serve_batches_total Batches dispatched to each replica\n# TYPE serve_batches_total counter\n";
    for (size_t i = 0; i < reps.size(); ++i)
      out << "serve_batches_total{device=\"" << reps[i].name() << "\"} " << dispatched[i] << '\n';
    out << "# HELP serve_requests_in_flight Inference requests being handled\n# TYPE serve_requests_in_flight gauge\n"
        << "serve_requests_in_flight " << in_flight.load() << '\n';
    requests.render(out, "serve_requests_total", "code", "Inference requests answered, by HTTP status");
    latency.render(out, "serve_request_duration_seconds", "Inference request latency from body received to reply");
    batch_rows_hist.render(out, "serve_batch_rows", "Rows per dispatched batch");
    if (http::Server* server = server_ptr.load()) {
      http::Stats h = server->stats();
      out << "# HELP serve_http_connections_open Connections open now\n# TYPE serve_http_connections_open gauge\n"
          << "serve_http_connections_open " << h.open << '\n'
          << "# HELP serve_http_connections_accepted_total Connections accepted\n"
          << "# TYPE serve_http_connections_accepted_total counter\n"
          << "serve_http_connections_accepted_total " << h.accepted << '\n'
          << "# HELP serve_http_requests_total Well-formed requests handed to the routes\n"
          << "# TYPE serve_http_requests_total counter\n"
          << "serve_http_requests_total " << h.requests << '\n'
          << "# HELP serve_http_dropped_total Connections closed by the server, by reason\n"
          << "# TYPE serve_http_dropped_total counter\n";
      auto dropped = [&](const char* reason, uint64_t n) {
        out << "serve_http_dropped_total{reason=\"" << reason << "\"} " << n << '\n';
      };
      dropped("idle_timeout", h.idle_timeouts);
      dropped("header_timeout", h.header_timeouts);
      dropped("body_timeout", h.body_timeouts);
      dropped("write_timeout", h.write_timeouts);
      dropped("bad_request", h.bad_requests);
      dropped("too_large", h.too_large);
      dropped("body_memory", h.body_memory_refusals);
      out << "# HELP serve_http_accept_pauses_total Times --max-connections paused accepting\n"
          << "# TYPE serve_http_accept_pauses_total counter\n"
          << "serve_http_accept_pauses_total " << h.accept_pauses << '\n'
          << "# HELP serve_http_accept_errors_total Failed accepts (e.g. out of file descriptors)\n"
          << "# TYPE serve_http_accept_errors_total counter\n"
          << "serve_http_accept_errors_total " << h.accept_errors << '\n'
          << "# HELP serve_http_address_refusals_total Connections closed at accept by --max-connections-per-address\n"
          << "# TYPE serve_http_address_refusals_total counter\n"
          << "serve_http_address_refusals_total " << h.address_refusals << '\n';
    }
    return http::Response{200, "text/plain; version=0.0.4", out.str(), {}};
  };

  auto routes = [&](http::Request req, http::Responder respond) {
    const std::string_view path = req.path();
    auto only = [&](const char* method) {
      if (req.method == method) return true;
      http::Response r = error_reply(405, std::string(path) + " takes " + method + ", not " + req.method);
      r.headers.emplace_back("Allow", method);
      respond(std::move(r));
      return false;
    };
    if (path == "/v1/infer") {
      if (only("POST")) infer(req, respond);
    } else if (path == "/healthz") {
      if (only("GET")) respond(healthz());
    } else if (path == "/metrics") {
      if (!only("GET")) return;
      if (!blocking.post([respond, &metrics] { respond(metrics()); }))
        respond(error_reply(503, "too many /metrics requests queued; retry later"));
    } else {
      // The target is the peer's raw bytes: error_body() replaces what is
      // not UTF-8, so /%FF or a raw 0xFF byte gets this 404, never a throw.
      respond(error_reply(404, "no such endpoint: " + req.method + " " + req.target +
                                   " (try POST /v1/infer, GET /healthz, GET /metrics)"));
    }
  };

  std::optional<http::Server> server;
  try {
    server.emplace(opt.http, routes, error_reply);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inference_server: %s\n", e.what());
    return 1;
  }
  server_ptr = &*server;

  std::atomic<bool> serving_done{false};
  std::thread signal_thread([&] {
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);  // a signal pending since start-up arrives now
    while (!serving_done) {
      pollfd p{signal_pipe[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      unsigned char sig = 0;
      if (read(signal_pipe[0], &sig, 1) != 1) continue;
      std::fprintf(stderr, "inference_server: %s, finishing in-flight requests\n", strsignal(sig));
      batch_drain();  // no more batch windows: run what is queued now
      server->stop();
      return;
    }
  });

  std::string devs;
  for (const auto& d : batch_devices()) devs += (devs.empty() ? "" : ",") + d.name();
  std::printf("listening on http://%s:%d devices=%s batching=%s window_us=%lld max_batch=%lld\n", opt.host.c_str(),
              server->port(), devs.c_str(), batching ? "on" : "off", static_cast<long long>(opt.batch.window.count()),
              static_cast<long long>(opt.batch.max_batch));
  std::fflush(stdout);

  // Returns after stop(), once every request in progress has been answered.
  server->run();
  serving_done = true;
  signal_thread.join();
  blocking.stop();
  batch_stop();
  server_ptr = nullptr;
  std::printf("stopped: listen ended\n");
  std::fflush(stdout);
  return 0;
}
