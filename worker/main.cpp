// SPDX-License-Identifier: Apache-2.0
// switchyard-worker: serves this machine's devices to remote Switchyard
// clients over CAF's network layer (caf::io, caf::openssl for TLS).
//
//   switchyard-worker --devices=cpu:0 --port=0
//   -> "listening on 127.0.0.1:PORT"; clients: Runtime::connect(host, port)
//
// Stops on SIGINT/SIGTERM: closes its port and every connection, stops its
// runners, exits 0 (within a few seconds, clients connected or not).
//
// Every connection goes through the guarded transport of worker/guard.hpp
// (message size, output, handshake deadline and connection limits).

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <thread>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/runner.hpp"
#include "backends/backend.hpp"
#include "switchyard/messages/host_cpus.hpp"
#include "switchyard/messages/logger.hpp"
#include "switchyard/messages/protocol.hpp"
#include "tools/cli.hpp"
#include "worker/bulk_lane.hpp"
#include "worker/entry.hpp"
#include "worker/guard.hpp"
#include "worker/listen_checks.hpp"

namespace {
// Written by the signal handler only (async-signal-safe write).
int stop_pipe[2] = {-1, -1};
}  // namespace

namespace {

using namespace switchyard;

// What the command line sets (parsed by CLI11 in main; the defaults are
// those of the help text).
struct WorkerOptions {
  std::string devices = "cpu:0";
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string cert;
  std::string key;
  std::string ca;
  bool insecure_listen_any = false;
  size_t threads = 0;
  bool cuda_allow_tf32 = false;
  bool no_fuse_elementwise = false;
  size_t max_message_bytes = worker::FramingLimits{}.max_message_bytes;
  std::string log_level = "info";
  size_t max_output_bytes = worker::GuardLimits{}.max_output_bytes;
  size_t max_queued_bytes = worker::GuardLimits{}.max_queued_bytes;
  size_t max_queued_bytes_total = worker::GuardLimits{}.max_queued_bytes_total;
  // 0 on the command line: none; unset: default_device_bytes().
  std::optional<uint64_t> max_device_bytes;
  // Unset: derived from the device bytes (device_peer_bounds()).
  std::optional<uint64_t> max_device_tensors;
  std::optional<uint64_t> max_staged_bytes;
  size_t transfer_chunk_bytes = 0;
  size_t max_connections = 0;
  size_t max_connections_per_address = worker::GuardLimits{}.max_connections_per_address;
  size_t handshake_timeout_ms = static_cast<size_t>(worker::GuardLimits{}.handshake_timeout.count());
  size_t payload_stall_timeout_ms = static_cast<size_t>(worker::GuardLimits{}.payload_stall_timeout.count());
  size_t max_connect_rate_per_address = static_cast<size_t>(worker::GuardLimits{}.max_connect_rate_per_address);
  bool no_bulk_lane = false;
  uint16_t bulk_port = 0;
  size_t bulk_stall_timeout_ms = static_cast<size_t>(worker::BulkLaneLimits{}.stall_timeout.count());
};

// The library has no "critical": at that threshold none of its messages show.
LogLevel library_level(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return LogLevel::trace;
    case spdlog::level::debug:
      return LogLevel::debug;
    case spdlog::level::info:
      return LogLevel::info;
    case spdlog::level::warn:
      return LogLevel::warn;
    case spdlog::level::err:
      return LogLevel::error;
    default:
      return LogLevel::off;
  }
}

/// One line on stderr in one write: stderr is unbuffered, and a line sent
/// piece by piece can reach a reader (a supervisor, a test) split in two.
void report_error(const std::string& message) {
  const std::string line = "switchyard-worker: " + message + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
}

spdlog::level::level_enum spdlog_level(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      break;
  }
  return spdlog::level::off;
}

// The options, on the conventions of tools/cli.hpp.
void add_options(CLI::App& app, WorkerOptions& o) {
  using cli::integer_in;
  constexpr size_t most = std::numeric_limits<size_t>::max();
  app.add_option("--devices", o.devices, "comma-separated devices to serve, e.g. cpu:0,cpu:1 (kind:index or kind:*)")
      ->capture_default_str();
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "TCP port; 0 picks a free one")
      ->check(integer_in<uint16_t>(0, 65535))
      ->capture_default_str();
  app.add_option("--cert", o.cert, "TLS: this worker's certificate (PEM)");
  app.add_option("--key", o.key, "TLS: the certificate's private key (PEM)");
  app.add_option("--ca,--tls-ca", o.ca, "TLS: CA file (PEM); peers must present a certificate it signed");
  app.add_flag("--insecure-listen-any", o.insecure_listen_any, "allow a non-loopback --host without TLS");
  app.add_option("--log-level", o.log_level, "stderr log: trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "kernel threads per CPU device (0: the usable CPUs split among them)")
      ->check(integer_in<size_t>(0, backends::max_cpu_threads))
      ->capture_default_str();
  app.add_flag("--cuda-allow-tf32", o.cuda_allow_tf32,
               "f32 matmul on cuda devices may use TF32 tensor cores (off: f32-exact, as RuntimeOptions)");
  app.add_flag("--no-fuse-elementwise", o.no_fuse_elementwise,
               "run element-wise chains op by op (RuntimeOptions::fuse_elementwise = false; results are the same)");
  app.add_option("--max-message-bytes", o.max_message_bytes,
                 "largest message a peer may send after its handshake, in bytes (BASP sizes are 32-bit)")
      ->check(integer_in<size_t>(1, UINT32_MAX))
      ->capture_default_str();
  app.add_option("--transfer-chunk-bytes", o.transfer_chunk_bytes,
                 "largest part of a tensor this worker sends to another node in one message (0, the default: 16 "
                 "MiB or half of --max-message-bytes, whichever is smaller); keep it below the peers' "
                 "--max-message-bytes")
      ->check(integer_in<size_t>(0, most));
  app.add_option("--max-output-bytes", o.max_output_bytes,
                 "output queued toward one peer before it is disconnected, in bytes")
      ->check(integer_in<size_t>(1, most))
      ->capture_default_str();
  app.add_option("--max-queued-bytes", o.max_queued_bytes,
                 "bytes of messages (as received) one connection may have queued for the devices; past it the "
                 "connection is not read until the devices have taken them (0: no limit, and none for all "
                 "connections either)")
      ->check(integer_in<size_t>(0, most))
      ->capture_default_str();
  app.add_option("--max-queued-bytes-total", o.max_queued_bytes_total,
                 "the same for all connections together: past it, a connection that sends the devices one more "
                 "message is not read until they have taken its own (0: no limit)")
      ->check(integer_in<size_t>(0, most))
      ->capture_default_str();
  app.add_option("--max-device-bytes", o.max_device_bytes,
                 "tensor bytes each cpu device holds at most, all clients together; an op past it fails with "
                 "out_of_memory (0: no limit; default: 3/4 of physical memory, or of the cgroup's memory limit when "
                 "lower, shared among the cpu devices)")
      ->check(integer_in<uint64_t>(0, uint64_t{1} << 50));
  app.add_option("--max-device-tensors", o.max_device_tensors,
                 "tensors each device holds at most, all clients together (views, failed results and imports in "
                 "transit included); past it ops fail with out_of_memory (0: no limit; default: --max-device-bytes / "
                 "4096)")
      ->check(integer_in<uint64_t>(0, uint64_t{1} << 40));
  app.add_option("--max-staged-bytes", o.max_staged_bytes,
                 "bytes of uploads and bridges in transit each device holds at most (parts received before the last, "
                 "data before its announcement); past it that tensor fails with out_of_memory (0: no limit; default: "
                 "--max-device-bytes)")
      ->check(integer_in<uint64_t>(0, uint64_t{1} << 50));
  app.add_option("--max-connections", o.max_connections,
                 "connections held at once (0: open-file limit less 64, at most 4096)")
      ->check(integer_in<size_t>(0, most))
      ->capture_default_str();
  app.add_option("--max-connections-per-address", o.max_connections_per_address,
                 "connections held at once from one peer address")
      ->check(integer_in<size_t>(1, most))
      ->capture_default_str();
  app.add_option("--max-connect-rate-per-address", o.max_connect_rate_per_address,
                 "new connections per second from one peer address, burst max(64, rate) (0: no limit)")
      ->check(integer_in<size_t>(0, most))
      ->capture_default_str();
  app.add_flag("--no-bulk-lane", o.no_bulk_lane,
               "send tensor bytes over BASP only (the bulk lane is off with TLS in any case)");
  app.add_option("--bulk-port", o.bulk_port, "TCP port of the bulk lane; 0 picks a free one")
      ->check(integer_in<uint16_t>(0, 65535))
      ->capture_default_str();
  app.add_option("--bulk-stall-timeout-ms", o.bulk_stall_timeout_ms,
                 "a bulk lane transfer that moves no byte for this long closes its connection")
      ->check(integer_in<size_t>(1, most))
      ->capture_default_str();
  app.add_option("--handshake-timeout-ms", o.handshake_timeout_ms,
                 "time a new connection has to complete its handshake")
      ->check(integer_in<size_t>(1, most))
      ->capture_default_str();
  app.add_option("--payload-stall-timeout-ms", o.payload_stall_timeout_ms,
                 "a message over 1 MiB is read in pieces of at most 1 MiB; a connection whose message in progress "
                 "receives no byte for this long is closed")
      ->check(integer_in<size_t>(1, most))
      ->capture_default_str();
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= list.size();) {
    auto comma = std::min(list.find(',', pos), list.size());
    if (comma > pos) out.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// "kind:index" / "kind:*" -> backends to create; errors name the bad entry.
// 3/4 of the memory the process may use (physical, capped by its cgroup's
// limit) shared among `cpu_devices` (0, no limit, where the system does not
// say).
uint64_t default_device_bytes(size_t cpu_devices) { return available_memory() / 4 * 3 / cpu_devices; }

struct WorkerDevices {
  std::vector<std::pair<std::string, std::unique_ptr<backends::Backend>>> backends;
  uint64_t device_bytes = 0;  // --max-device-bytes, resolved
};

// What a device's runner may hold for peers beside its buffers. A tensor's
// record costs ~0.5 KiB however small the tensor (a view, a failed result:
// 1M of them took a worker to 480 MiB), so by default one per 4 KiB of the
// device budget: records then add at most an eighth to it. Uploads in
// transit sit in the device's memory (counted there on cpu devices); the
// staging cap bounds them on the others too, and lets an operator keep
// them to less.
void device_peer_bounds(const WorkerOptions& cfg, uint64_t device_bytes, actors::RunnerHooks& hooks) {
  hooks.max_records = cfg.max_device_tensors.value_or(device_bytes / 4096);
  hooks.max_staged_bytes = cfg.max_staged_bytes.value_or(device_bytes);
}

caf::expected<WorkerDevices> make_backends(const WorkerOptions& cfg) {
  std::vector<std::pair<std::string, std::unique_ptr<backends::Backend>>> out;
  auto kinds = backends::backend_kinds();
  auto names = split(cfg.devices);
  if (names.empty()) return make_error(Errc::invalid_argument, "--devices names no device");
  std::vector<backends::PlannedDevice> plan;
  std::vector<std::string> unavailable;
  try {
    plan = backends::plan_devices(kinds, names, unavailable);
  } catch (const Error& e) {
    return make_error(e.code(), e.what());
  }
  for (const auto& why : unavailable) spdlog::warn("{}", why);
  auto hw = static_cast<unsigned>(available_cpus());
  backends::DeviceOptions opts;
  opts.threads = cfg.threads != 0 ? cfg.threads : std::max<size_t>(1, hw / names.size());
  opts.allow_tf32 = cfg.cuda_allow_tf32;
  // Ops of any client allocate here: without a cap, a peer's `full` of
  // 1 GiB, three times, took the worker's RSS to 3 GiB (session 33's audit).
  size_t cpu_devices = 0;
  for (const auto& planned : plan) cpu_devices += planned.kind->name == "cpu" ? 1 : 0;
  const uint64_t device_bytes = cfg.max_device_bytes.value_or(default_device_bytes(std::max<size_t>(cpu_devices, 1)));
  for (const auto& [name, kind, index] : plan) {
    opts.memory_limit = kind->name == "cpu" ? device_bytes : 0;
    auto backend = kind->create(index, opts);
    if (!backend) return make_error(Errc::unknown_device, "device '" + name + "': its backend could not be created");
    out.emplace_back(name, std::move(backend));
  }
  return WorkerDevices{std::move(out), device_bytes};
}

void log_counters(const worker::GuardCounters& c) {
  spdlog::info(
      "connections accepted {}, peak open {}, refused (total limit) {}, refused (per-address limit) {}, refused (rate "
      "limit) {}, shed (no descriptors) {}, closed (framing) {}, closed (output) {}, closed (handshake timeout) {}, "
      "closed (payload stall) {}, paused (queued bytes) {}",
      c.accepted, c.peak_open, c.refused_total_limit, c.refused_address_limit, c.refused_rate_limit, c.shed_no_fds,
      c.closed_framing, c.closed_output, c.closed_handshake_timeout, c.closed_payload_stall, c.paused_queued);
}

void log_lane_counters(const worker::BulkLaneCounters& c) {
  spdlog::info(
      "bulk lane: connections admitted {}, refused {}, closed (protocol) {}, closed (stall) {}, uploads {}, reads {}",
      c.admitted, c.refused, c.closed_protocol, c.closed_stall, c.uploads, c.reads);
}

// The last step of a stop is CAF's own teardown (~actor_system), which waits
// for every detached actor's object to be destroyed. The ordered stop below
// leaves no reference behind (see the BASP note in run()); should a CAF
// path we do not know of still keep one, the worker exits after a bound
// instead of hanging.
class TeardownWatchdog {
 public:
  TeardownWatchdog() = default;
  TeardownWatchdog(const TeardownWatchdog&) = delete;
  TeardownWatchdog& operator=(const TeardownWatchdog&) = delete;
  ~TeardownWatchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void arm(std::chrono::milliseconds limit, int rc) {
    thread_ = std::thread([this, limit, rc] {
      std::unique_lock lock(mutex_);
      if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
      report_error("CAF teardown still waiting after " + std::to_string(limit.count()) +
                   " ms (a detached actor thread in await_detached_threads); exiting without it");
      // Also on the status stream, where scripts and tests read the stop.
      std::cout << "teardown cut short after " << limit.count() << " ms" << std::endl;
      std::cout.flush();
      std::cerr.flush();
      std::_Exit(rc);
    });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Waits (up to `limit`) for `count` down messages of actors `self` monitors.
bool await_downs(caf::scoped_actor& self, size_t count, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  while (count > 0 && !timed_out) {
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (remaining.count() <= 0) break;
    self->receive([&](caf::down_msg&) { --count; }, caf::after(remaining) >> [&] { timed_out = true; });
  }
  return count == 0;
}

int run(caf::actor_system_config& sys_cfg, const WorkerOptions& cfg, const Logger& library_log,
        const std::string& bind_address) {
  auto backends = make_backends(cfg);
  if (!backends) {
    report_error(describe(backends.error()).message);
    return 2;
  }
  worker::GuardLimits limits;
  limits.framing.max_message_bytes = cfg.max_message_bytes;
  limits.max_output_bytes = cfg.max_output_bytes;
  limits.max_queued_bytes = cfg.max_queued_bytes;
  limits.max_queued_bytes_total = cfg.max_queued_bytes_total;
  limits.max_connections = cfg.max_connections;
  limits.max_connections_per_address = cfg.max_connections_per_address;
  limits.handshake_timeout = std::chrono::milliseconds(cfg.handshake_timeout_ms);
  limits.payload_stall_timeout = std::chrono::milliseconds(cfg.payload_stall_timeout_ms);
  limits.max_connect_rate_per_address = static_cast<double>(cfg.max_connect_rate_per_address);
  auto guard =
      std::make_shared<worker::ConnectionGuard>(limits, [](const std::string& line) { spdlog::warn("{}", line); });
  int rc = 0;
  {
    // Declared before the system, so it outlives the system's destructor.
    TeardownWatchdog watchdog;
    caf::actor_system sys{sys_cfg};
    const bool tls = !cfg.cert.empty();
    // Raw bytes on a second port: not under TLS, where they would travel in
    // the clear beside an encrypted BASP connection.
    std::shared_ptr<worker::BulkLane> lane;
    if (!tls && !cfg.no_bulk_lane) {
      worker::BulkLaneLimits lane_limits;
      lane_limits.handshake_timeout = std::chrono::milliseconds(cfg.handshake_timeout_ms);
      lane_limits.stall_timeout = std::chrono::milliseconds(cfg.bulk_stall_timeout_ms);
      lane = std::make_shared<worker::BulkLane>(lane_limits, [](const std::string& line) { spdlog::warn("{}", line); });
    }
    std::vector<worker::LocalDevice> devices;
    std::vector<caf::actor> actors;
    std::vector<worker::BulkLane::Device> lane_devices;
    for (auto& [name, backend] : backends->backends) {
      std::shared_ptr<backends::Backend> shared = std::move(backend);
      lane_devices.push_back({{}, [shared](size_t size) { return shared->host_block(size); }});
      actors::RunnerHooks hooks;
      hooks.transfer_chunk_bytes = cfg.transfer_chunk_bytes;
      hooks.fuse_elementwise = !cfg.no_fuse_elementwise;
      hooks.log = library_log;
      device_peer_bounds(cfg, backends->device_bytes, hooks);
      if (lane)
        hooks.bulk_send = [weak = std::weak_ptr(lane)](const caf::node_id& client, uint64_t ticket, TensorData data) {
          auto l = weak.lock();
          return l && l->send(client, ticket, std::move(data));
        };
      devices.push_back({name, name.substr(0, name.find(':')),
                         caf::actor_cast<caf::actor>(actors::spawn_runner(sys, name, std::move(shared), hooks))});
      actors.push_back(devices.back().runner);
      lane_devices.back().runner = devices.back().runner;
    }
    worker::EntryLane entry_lane;
    if (lane) {
      try {
        entry_lane = {lane, lane->listen(bind_address, cfg.bulk_port, std::move(lane_devices))};
        spdlog::info("bulk lane listening on {}:{}", bind_address, entry_lane.port);
      } catch (const std::exception& e) {
        report_error(e.what());
        for (const auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
        return 1;
      }
    }
    // Before any connection: what each one may queue for them is bounded.
    guard->set_runners(actors);
    // Listens and connects to peer workers: every connection is guarded.
    auto connector = worker::spawn_guarded_middleman(sys, guard, tls);
    worker::EntryLog log;
    log.info = [](const std::string& line) { spdlog::info("{}", line); };
    log.warn = [](const std::string& line) { spdlog::warn("{}", line); };
    auto stopping = std::make_shared<std::atomic<bool>>(false);
    log.stopping = stopping;
    auto entry = worker::spawn_entry(sys, devices, connector, std::move(log), std::move(entry_lane));
    actors.push_back(entry);
    devices.clear();
    caf::scoped_actor self{sys};
    // Monitored now, before any peer can reach them: see the stop below.
    for (const auto& a : actors) self->monitor(a);
    caf::expected<uint16_t> port{caf::sec::cannot_open_port};
    self->request(connector, caf::infinite, caf::publish_atom::value, cfg.port,
                  caf::actor_cast<caf::strong_actor_ptr>(entry), std::set<std::string>{}, bind_address, true)
        .receive([&](uint16_t p) { port = p; }, [&](caf::error& e) { port = std::move(e); });
    if (!port) {
      report_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": " + sys.render(port.error()));
      rc = 1;
    } else {
      std::string names;
      for (const auto& [name, backend] : backends->backends) names += (names.empty() ? "" : ",") + name;
      // The first line is for scripts and tests: "listening on HOST:PORT",
      // HOST being the numeric address actually bound.
      std::cout << "listening on " << bind_address << ":" << *port << std::endl;
      std::cout << "devices " << names << (tls ? " tls" : "") << std::endl;
      int sig = 0;
      while (::read(stop_pipe[0], &sig, sizeof sig) != static_cast<ssize_t>(sizeof sig) && errno == EINTR) {
      }
      std::cout << "stopping on signal " << sig << std::endl;
      // No new connections, then none of the old ones: their nodes go down
      // and nothing from a client reaches a runner while it stops.
      self->send(connector, caf::close_atom::value, *port);
      stopping->store(true);
      guard->expire_all();
    }
    if (lane) log_lane_counters(lane->counters());
    // The lane's thread sends to runners: it stops first.
    lane.reset();
    // Runners and entry first, while the middleman still runs. A runner a
    // client ever referenced is monitored by CAF's BASP broker, and its down
    // message, queued in the broker's mailbox, holds a reference to the
    // runner; a broker stopped before reading it keeps that reference, and
    // ~actor_system then waits forever for the detached runner's object
    // (seen about once in 100 SIGTERM runs). CAF sends down messages newest
    // monitor first, and ours are the oldest, so when all of ours have
    // arrived the broker's are queued; a request through the broker then
    // returns only after it has read them. Only then the connector, then
    // the system.
    for (const auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    if (!await_downs(self, actors.size(), std::chrono::seconds(3))) spdlog::warn("runners did not stop within 3 s");
    self->request(sys.middleman().actor_handle(), std::chrono::seconds(2), caf::get_atom::value, sys.node())
        .receive([](const caf::node_id&, const std::string&, uint16_t) {}, [](caf::error&) {});
    actors.clear();
    entry = nullptr;
    self->monitor(connector);
    self->send_exit(connector, caf::exit_reason::kill);
    if (!await_downs(self, 1, std::chrono::seconds(3))) spdlog::warn("connection manager did not stop within 3 s");
    connector = nullptr;
    log_counters(guard->counters());
    watchdog.arm(std::chrono::seconds(2), rc);
  }
  return rc;
}

}  // namespace

// NOLINTNEXTLINE(bugprone-exception-escape): bad input is answered; only resource exhaustion is left to throw
int main(int argc, char** argv) {
  // A self-pipe, not sigwait: OpenBLAS starts its threads before main, so
  // a blocked-signal mask cannot cover them and SIGTERM could land on one
  // of them and kill the process by default action.
  if (::pipe(stop_pipe) != 0) return 1;
  struct sigaction action {};
  action.sa_handler = [](int sig) { (void)!::write(stop_pipe[1], &sig, sizeof sig); };
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  WorkerOptions cfg;
  CLI::App app{"switchyard-worker " SWITCHYARD_VERSION
               ": serves this machine's devices to remote Switchyard clients. Reads no configuration file.",
               "switchyard-worker"};
  switchyard::cli::apply_conventions(app);
  add_options(app, cfg);
  if (auto exit_code = switchyard::cli::parse(app, argc, argv)) return *exit_code;
  // Log lines go to stderr (stdout carries the lines scripts parse).
  const auto level = spdlog::level::from_str(cfg.log_level);
  {
    auto logger = spdlog::stderr_logger_mt("switchyard-worker");
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l switchyard-worker: %v");
    logger->set_level(level);
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(std::move(logger));
  }
  // The library's messages (the runners': failed ops, failed bridges) go to
  // the same log at their own level.
  const Logger library_log(library_level(level),
                           [](LogLevel l, std::string_view message) { spdlog::log(spdlog_level(l), "{}", message); });
  const bool tls = !cfg.cert.empty() || !cfg.key.empty() || !cfg.ca.empty();
  if (tls && (cfg.cert.empty() || cfg.key.empty() || cfg.ca.empty())) {
    // Half a TLS setup would lift the loopback-only rule while no client
    // could connect (without --ca the worker verifies no peer).
    std::string missing;
    for (const auto& [option, value] : {std::pair{"--cert", &cfg.cert}, {"--key", &cfg.key}, {"--ca", &cfg.ca}})
      if (value->empty()) missing += std::string(missing.empty() ? "" : ", ") + option;
    report_error("TLS needs --cert, --key and --ca together (missing: " + missing + ")");
    return 2;
  }
  if (tls) {
    // Checked now, not on the first connection: a worker that says it
    // listens with TLS must be able to.
    if (auto err = worker::check_tls_files(cfg.cert, cfg.key, cfg.ca); !err.empty()) {
      report_error(err);
      return 2;
    }
  }
  if (cfg.transfer_chunk_bytes == 0)
    cfg.transfer_chunk_bytes = std::min<size_t>(size_t{16} << 20, std::max<size_t>(1, cfg.max_message_bytes / 2));
  // The loopback check looks at what the name resolves to, and the worker
  // then binds that numeric address, so DNS cannot change it in between.
  auto resolved = worker::resolve_listen_host(cfg.host);
  if (!resolved.error.empty()) {
    report_error("--host: " + resolved.error);
    return 2;
  }
  if (!tls && !cfg.insecure_listen_any) {
    for (const auto& a : resolved.addresses) {
      if (!worker::is_loopback_address(a)) {
        report_error("refusing to listen on " + cfg.host + " (" + a +
                     ", not a loopback address) without TLS: give --cert/--key/--ca, or --insecure-listen-any");
        return 2;
      }
    }
  }
  // CAF's configuration is set here only: CAF's own parser (and with it the
  // caf-application.ini it would read from the working directory) is never
  // run, so no file can switch the worker to TLS or change its limits.
  caf::actor_system_config sys_cfg;
  register_message_types(sys_cfg);
  auto hw = static_cast<unsigned>(available_cpus());
  sys_cfg.set("scheduler.policy", caf::atom("sharing"));
  sys_cfg.set("scheduler.max-threads", static_cast<size_t>(std::min(hw, 4u)));
  sys_cfg.set("logger.verbosity", caf::atom("quiet"));
  sys_cfg.load<caf::io::middleman>();
  if (tls) {
    sys_cfg.load<caf::openssl::manager>();
    sys_cfg.openssl_certificate = cfg.cert;
    sys_cfg.openssl_key = cfg.key;
    sys_cfg.openssl_cafile = cfg.ca;
  }
  return run(sys_cfg, cfg, library_log, resolved.addresses.front());
}
