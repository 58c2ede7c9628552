// switchyard-worker: serves this machine's devices to remote Switchyard
// clients over CAF's network layer (caf::io, caf::openssl for TLS).
//
//   switchyard-worker --devices=cpu:0 --port=0
//   -> "listening on 127.0.0.1:PORT"; clients: Runtime::connect(host, port)
//
// Stops on SIGINT/SIGTERM: unpublishes, stops its runners, exits 0.

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/runner.hpp"
#include "backends/backend.hpp"
#include "switchyard/messages/protocol.hpp"
#include "worker/entry.hpp"

namespace {
// Written by the signal handler only (async-signal-safe write).
int stop_pipe[2] = {-1, -1};
}  // namespace

namespace {

using namespace switchyard;

struct WorkerConfig : caf::actor_system_config {
  std::string devices = "cpu:0";
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string cert;
  std::string key;
  std::string ca;
  bool insecure_listen_any = false;
  size_t threads = 0;

  WorkerConfig() {
    opt_group{custom_options_, "global"}
        .add(devices, "devices", "comma-separated devices to serve, e.g. cpu:0,cpu:1 (kind:index or kind:*)")
        .add(host, "host", "address to listen on (default 127.0.0.1)")
        .add(port, "port", "TCP port; 0 picks a free one")
        .add(cert, "cert", "TLS: this worker's certificate (PEM)")
        .add(key, "key", "TLS: the certificate's private key (PEM)")
        .add(ca, "tls-ca", "TLS: CA file; peers must present a certificate it signed (alias --ca)")
        .add(insecure_listen_any, "insecure-listen-any", "allow a non-loopback --host without TLS")
        .add(threads, "threads", "kernel threads per CPU device (0: split the cores)");
  }
};

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

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
caf::expected<std::vector<std::pair<std::string, std::unique_ptr<backends::Backend>>>> make_backends(
    const WorkerConfig& cfg) {
  std::vector<std::pair<std::string, std::unique_ptr<backends::Backend>>> out;
  auto kinds = backends::backend_kinds();
  auto names = split(cfg.devices);
  if (names.empty()) return make_error(Errc::invalid_argument, "--devices names no device");
  auto hw = std::max(1u, std::thread::hardware_concurrency());
  backends::DeviceOptions opts;
  opts.threads = cfg.threads != 0 ? cfg.threads : std::max<size_t>(1, hw / names.size());
  for (const auto& name : names) {
    auto colon = name.find(':');
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) {
      return colon != std::string::npos && k.name == name.substr(0, colon);
    });
    if (kind == kinds.end()) return make_error(Errc::unknown_device, "device '" + name + "': unknown kind");
    auto idx = name.substr(colon + 1);
    int count = kind->device_count();
    std::vector<int> indices;
    if (idx == "*") {
      for (int i = 0; i < count; ++i) indices.push_back(i);
    } else {
      int i = -1;
      try {
        size_t used = 0;
        i = std::stoi(idx, &used);
        if (used != idx.size()) i = -1;
      } catch (const std::exception&) {
      }
      if (i < 0 || i >= count)
        return make_error(Errc::unknown_device, "device '" + name + "' does not exist (" + std::to_string(count) + " " +
                                                    kind->name + " device(s))");
      indices.push_back(i);
    }
    for (int i : indices) {
      auto full = kind->name + ":" + std::to_string(i);
      for (const auto& [n, b] : out)
        if (n == full) return make_error(Errc::invalid_argument, "device '" + full + "' requested twice");
      out.emplace_back(full, kind->create(i, opts));
    }
  }
  return out;
}

int run(WorkerConfig& cfg) {
  auto backends = make_backends(cfg);
  if (!backends) {
    std::cerr << "switchyard-worker: " << describe(backends.error()).message << "\n";
    return 2;
  }
  caf::actor_system sys{cfg};
  std::vector<worker::LocalDevice> devices;
  for (auto& [name, backend] : *backends) {
    std::shared_ptr<backends::Backend> shared = std::move(backend);
    devices.push_back({name, name.substr(0, name.find(':')),
                       caf::actor_cast<caf::actor>(actors::spawn_runner(sys, name, std::move(shared)))});
  }
  const bool tls = !cfg.cert.empty();
  auto connector = tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
  auto entry = worker::spawn_entry(sys, devices, connector);
  auto port = tls ? caf::openssl::publish(entry, cfg.port, cfg.host.c_str(), true)
                  : sys.middleman().publish(entry, cfg.port, cfg.host.c_str(), true);
  int rc = 0;
  if (!port) {
    std::cerr << "switchyard-worker: cannot listen on " << cfg.host << ":" << cfg.port << ": "
              << sys.render(port.error()) << "\n";
    rc = 1;
  } else {
    std::string names;
    for (const auto& d : devices) names += (names.empty() ? "" : ",") + d.name;
    // The first line is for scripts and tests: "listening on HOST:PORT".
    std::cout << "listening on " << cfg.host << ":" << *port << std::endl;
    std::cout << "devices " << names << (tls ? " tls" : "") << std::endl;
    int sig = 0;
    while (::read(stop_pipe[0], &sig, sizeof sig) != static_cast<ssize_t>(sizeof sig) && errno == EINTR) {
    }
    std::cout << "stopping on signal " << sig << std::endl;
    // caf::openssl's unpublish does not compile in 0.17.6; the TLS doorman
    // closes with the system.
    if (!tls) sys.middleman().unpublish(entry, *port);
  }
  caf::anon_send_exit(entry, caf::exit_reason::user_shutdown);
  for (auto& d : devices) caf::anon_send_exit(d.runner, caf::exit_reason::user_shutdown);
  return rc;
}

}  // namespace

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

  // CAF 0.17's parser reserves every argument starting with "--ca" (its
  // "--caf#" prefix is compared on 4 characters), so --ca is renamed here.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--ca=", 0) == 0) {
      args[i] = "--tls-ca=" + args[i].substr(5);
    } else if (args[i] == "--ca" && i + 1 < args.size()) {
      args[i] = "--tls-ca=" + args[i + 1];
      args.erase(args.begin() + static_cast<long>(i) + 1);
    }
  }
  std::vector<char*> fixed;
  for (auto& a : args) fixed.push_back(a.data());
  fixed.push_back(nullptr);
  WorkerConfig cfg;
  register_message_types(cfg);
  if (auto err = cfg.parse(static_cast<int>(args.size()), fixed.data())) {
    std::cerr << "switchyard-worker: " << caf::to_string(err) << "\n";
    return 2;
  }
  if (cfg.cli_helptext_printed) return 0;
  if (!cfg.remainder.empty()) {
    std::cerr << "switchyard-worker: unknown argument '" << cfg.remainder.front() << "' (see --help)\n";
    return 2;
  }
  const bool tls = !cfg.cert.empty() || !cfg.key.empty() || !cfg.ca.empty();
  if (tls && (cfg.cert.empty() || cfg.key.empty())) {
    std::cerr << "switchyard-worker: TLS needs both --cert and --key\n";
    return 2;
  }
  if (!tls && !is_loopback(cfg.host) && !cfg.insecure_listen_any) {
    std::cerr << "switchyard-worker: refusing to listen on " << cfg.host
              << " without TLS: give --cert/--key/--ca, or --insecure-listen-any\n";
    return 2;
  }
  auto hw = std::max(1u, std::thread::hardware_concurrency());
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", static_cast<size_t>(std::min(hw, 4u)));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.load<caf::io::middleman>();
  if (tls) {
    cfg.load<caf::openssl::manager>();
    cfg.openssl_certificate = cfg.cert;
    cfg.openssl_key = cfg.key;
    cfg.openssl_cafile = cfg.ca;
  }
  return run(cfg);
}
