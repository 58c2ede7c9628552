// SPDX-License-Identifier: Apache-2.0
#include "core.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <tuple>
#include <utility>
#include <variant>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/router.hpp"
#include "actors/runner.hpp"
#include "actors/trace.hpp"
#include "backends/backend.hpp"
#include "backends/module_loader.hpp"
#include "bulk_lane_client.hpp"
#include "recorder.hpp"
#include "switchyard/messages/dtype_support.hpp"
#include "switchyard/messages/host_cpus.hpp"
#include "switchyard/messages/op_rules.hpp"
#include "switchyard/messages/tls_files.hpp"

namespace switchyard::detail {

std::exception_ptr to_exception(const caf::error& err) {
  auto info = describe(err);
  return std::make_exception_ptr(Error(info.code, info.message, info.tensor));
}

void throw_error(const caf::error& err) {
  auto info = describe(err);
  throw Error(info.code, info.message, info.tensor);
}

void throw_error_as(const char* op, const caf::error& err) {
  auto info = describe(err);
  const auto colon = info.message.find(": ");
  if (colon != std::string::npos && info.message.find(' ') > colon) info.message.replace(0, colon, op);
  throw Error(info.code, info.message, info.tensor);
}

namespace {
// Per thread by nature: it says what the calling thread is doing right now
// (running a reply handler), not anything about a runtime.
thread_local int runtime_handler_depth = 0;
}  // namespace

bool on_runtime_thread() noexcept { return runtime_handler_depth > 0; }

namespace {
// Shutdowns handed to a thread of their own (a Runtime destroyed inside a
// continuation) that have not finished. The one process-wide object of the
// library, and for one reason: CAF's statics die at exit, and a teardown
// still running then would use them. Created at the first such shutdown,
// i.e. after CAF's statics, so it is destroyed before them, and its
// destructor waits (bounded) for the teardowns still running.
class PendingShutdowns {
 public:
  static PendingShutdowns& instance() {
    static PendingShutdowns pending;
    return pending;
  }
  void begin() {
    std::lock_guard lock(mutex_);
    ++running_;
  }
  void end() {
    std::lock_guard lock(mutex_);
    if (--running_ == 0) idle_.notify_all();
  }
  ~PendingShutdowns() {
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, std::chrono::seconds(30), [&] { return running_ == 0; });
  }

 private:
  PendingShutdowns() = default;
  std::mutex mutex_;
  std::condition_variable idle_;
  int running_ = 0;
};
}  // namespace
RuntimeThreadScope::RuntimeThreadScope() noexcept { ++runtime_handler_depth; }
RuntimeThreadScope::~RuntimeThreadScope() { --runtime_handler_depth; }
ContinuationScope::ContinuationScope() noexcept { ++runtime_handler_depth; }
ContinuationScope::~ContinuationScope() { --runtime_handler_depth; }

TensorHandle::~TensorHandle() {
  // Queueing the drop allocates; if that fails (bad_alloc), the tensor stays
  // on its device until the runtime closes rather than the destructor
  // terminating the program.
  try {
    if (core && !core->closed()) core->drop(device, ir.id);
  } catch (...) {  // swallowed: see above
  }
}

namespace {

// CAF 0.17 gives every thread that spawns an actor or builds a scoped_actor
// (actor_system::spawn_impl calls CAF_SET_LOGGER_SYS) a thread-local strong
// reference to the system's logger, dropped only when the thread exits, and
// ~actor_system waits for the logger to die. A client thread that ever read a
// tensor would therefore hang a Runtime destroyed on another thread for as
// long as the client thread lives. Entry points that touch CAF from a client
// thread hold this guard, which gives the reference back when the call
// replaced the thread's logger: on a client thread (none before), and on
// another Runtime's thread (a continuation of runtime A calling runtime B:
// A's runner thread would keep B's logger, and ~Runtime(B) waited until
// A's thread ended). The thread is then left without one, which CAF built
// with its log level at quiet (Debian's) never reads; a thread of this
// runtime keeps its own.
class ThreadLoggerGuard {
 public:
  ThreadLoggerGuard() : before_(caf::logger::current_logger()) {}
  ThreadLoggerGuard(const ThreadLoggerGuard&) = delete;
  ThreadLoggerGuard& operator=(const ThreadLoggerGuard&) = delete;
  ~ThreadLoggerGuard() {
    if (static_cast<const void*>(caf::logger::current_logger()) != before_)
      caf::logger::set_current_actor_system(nullptr);
  }

 private:
  // Which logger the thread had: only compared, never used (it may be gone).
  const void* before_;
};

// Refused before anything starts: each of these used to be taken as given
// and misbehave later (max_batch 0 sent every op alone, a zero flush interval
// spun the flusher on a core, a negative deadline failed every read at once,
// an out-of-range log level passed every message).
void check_options(const RuntimeOptions& o) {
  auto refuse = [](const std::string& field, const std::string& value, const std::string& rule) {
    throw Error(Errc::invalid_argument, "RuntimeOptions::" + field + " is " + value + ": " + rule);
  };
  auto ms = [](auto d) { return std::to_string(d.count()) + " ms"; };
  if (o.cpu_threads > backends::max_cpu_threads)
    refuse("cpu_threads", std::to_string(o.cpu_threads),
           "at most " + std::to_string(backends::max_cpu_threads) + " kernel threads per cpu device");
  if (o.max_batch == 0) refuse("max_batch", "0", "at least 1 op per message");
  if (o.flush_interval.count() <= 0)
    refuse("flush_interval", std::to_string(o.flush_interval.count()) + " us", "must be positive");
  if (o.idle_trim_after.count() < 0) refuse("idle_trim_after", ms(o.idle_trim_after), "must be >= 0 (0: never)");
  if (o.remote_timeout.count() <= 0) refuse("remote_timeout", ms(o.remote_timeout), "must be positive");
  if (o.connect_timeout.count() <= 0) refuse("connect_timeout", ms(o.connect_timeout), "must be positive");
  if (o.shutdown_timeout.count() < 0) refuse("shutdown_timeout", ms(o.shutdown_timeout), "must be >= 0");
  if (static_cast<unsigned>(o.log_level) > static_cast<unsigned>(LogLevel::off))
    refuse("log_level", std::to_string(static_cast<unsigned>(o.log_level)), "not a LogLevel");
}

}  // namespace

Core::Core(RuntimeOptions options)
    : options_(std::move(options)),
      log_(options_.log_level, options_.log_sink),
      slots_(std::make_unique<Slot[]>(max_devices)) {
  check_options(options_);
  ThreadLoggerGuard logger_guard;
  std::random_device rd;
  // A random prefix keeps ids of different clients of one worker apart.
  next_id_ = (uint64_t{rd()} << 32 & 0x7FFFFFFF00000000ULL) | 1;
  register_message_types(config_);
  // Work sharing on few threads: blocking round trips from client threads
  // are ~7x faster than with the default work-stealing pool of >= 4
  // workers (measured; see docs/ARCHITECTURE.md). Runners are detached and
  // do not use these threads.
  auto hw = static_cast<unsigned>(available_cpus());
  config_.set("scheduler.policy", caf::atom("sharing"));
  config_.set("scheduler.max-threads", static_cast<size_t>(std::min(hw, 4u)));
  config_.set("logger.verbosity", caf::atom("quiet"));
  // Always loaded so `connect` works on any runtime; it costs one idle
  // multiplexer thread.
  config_.load<caf::io::middleman>();
  const auto& tls = options_.tls;
  if (tls.enabled()) {
    // CAF's TLS endpoint without a certificate terminated the process at
    // the first connect (an exception on its multiplexer thread), and
    // without a CA file it verifies no peer: all three or none.
    if (tls.cert.empty() || tls.key.empty() || tls.ca.empty()) {
      std::string missing;
      for (const auto& [field, value] : {std::pair{"cert", &tls.cert}, {"key", &tls.key}, {"ca", &tls.ca}})
        if (value->empty()) missing += std::string(missing.empty() ? "" : ", ") + field;
      throw Error(Errc::invalid_argument,
                  "RuntimeOptions::tls needs cert, key and ca together, or none (missing: " + missing + ")");
    }
    // CAF reads them at the first connect, where a file it cannot load only
    // shows as a handshake that never completes (connect_timeout later).
    if (auto why = check_tls_files({tls.cert, "RuntimeOptions::tls.cert"}, {tls.key, "RuntimeOptions::tls.key"},
                                   {tls.ca, "RuntimeOptions::tls.ca"});
        !why.empty())
      throw Error(Errc::invalid_argument, why);
    config_.load<caf::openssl::manager>();
    config_.openssl_certificate = tls.cert;
    config_.openssl_key = tls.key;
    config_.openssl_cafile = tls.ca;
  }
  system_ = std::make_unique<caf::actor_system>(config_);
  actors::RouterOptions ropts;
  ropts.remote_timeout = options_.remote_timeout;
  // The router outlives nothing of ours: close() stops it before slots_ go.
  ropts.on_lost = [this](DeviceId id, const std::string& why) { on_lost(id, why); };
  ropts.log = log_;
  router_ = actors::spawn_router(*system_, std::move(ropts));
}

void Core::on_lost(DeviceId id, const std::string& why) {
  if (id >= max_devices) return;
  auto& s = slots_[id];
  if (s.losing.exchange(true, std::memory_order_acq_rel)) return;
  s.lost_reason = why;
  s.lost.store(true, std::memory_order_release);
  // Every device is "lost" as the runtime shuts down: not news then.
  log_.log(closed() ? LogLevel::debug : LogLevel::warn, [&] { return why; });
}

void Core::note_unavailable(std::string why) {
  log_.log(LogLevel::info, [&] { return "unavailable: " + why; });
  unavailable_.push_back(std::move(why));
}

void Core::throw_unknown_device(DeviceId id) {
  throw Error(Errc::unknown_device, "device #" + std::to_string(id) + " does not exist");
}

void Core::check_usable(DeviceId id) const {
  if (auto why = lost(id)) throw Error(Errc::device_lost, *why);
}

DTypeSupport Core::dtype_support(DeviceId id, DType t) const {
  const auto& info = slot(id).info;
  if (info.custom_support.empty()) return switchyard::dtype_support(info.kind, t);
  for (size_t i = 0; i < std::size(all_dtypes); ++i)
    if (all_dtypes[i] == t) return info.custom_support[i];
  return {};
}

void Core::check_dtype(DeviceId id, DType t, std::string_view what, bool arithmetic, bool matmul) const {
  // Every backend of the library runs the original six dtypes fully; only
  // the narrow ones differ, so the common case costs one comparison. A
  // custom backend says for itself.
  const auto& info = slot(id).info;
  if (!is_half(t) && t != DType::i8 && t != DType::i16 && info.custom_support.empty()) return;
  const auto support = dtype_support(id, t);
  const char* missing = !support.storage                    ? "storage"
                        : arithmetic && !support.arithmetic ? "arithmetic"
                        : matmul && !support.matmul         ? "matrix products"
                                                            : nullptr;
  if (missing == nullptr) return;
  throw Error(Errc::unsupported, info.name + ": " + std::string(what) + ": " + std::string(name_of(t)) +
                                     " is not supported on this device (" + missing + "; " + support.how + ")");
}

void Core::check_dtypes(DeviceId id, OperationIr& op) const {
  const bool custom = !slot(id).info.custom_support.empty();
  std::visit(
      [&](auto& o) {
        using Op = std::decay_t<decltype(o)>;
        auto check = [&](const TensorIr& t) {
          if (!custom && !is_half(t.dtype) && t.dtype != DType::i8 && t.dtype != DType::i16) return;
          check_dtype(id, t.dtype, op.name(), computes_v<Op>, multiplies_v<Op>);
        };
        o.each_input(check);
        o.each_output([&](const TensorIr& t) {
          // An output's element count is checked here, for every op, at the
          // call: a broadcast of [2^32, 1] and [1, 2^32] wrapped to 0
          // elements, and the kernel wrote past its 0-byte result.
          if constexpr (!keeps_shape_v<Op>)
            if (auto err = check_shape(t.shape, "output"))
              throw Error(Errc::shape_mismatch, op.name() + ": " + describe(err).message);
          check(t);
        });
      },
      op.op);
}

DeviceId Core::add_device(std::string name, std::string kind, caf::actor runner, bool local,
                          std::vector<DTypeSupport> custom_support, std::shared_ptr<BulkLaneClient> lane,
                          uint32_t remote_index) {
  ThreadLoggerGuard logger_guard;
  auto id = static_cast<DeviceId>(count_.load(std::memory_order_relaxed));
  if (id >= max_devices)
    throw Error(Errc::invalid_argument, "too many devices: a runtime holds at most " + std::to_string(max_devices));
  // Attach before publishing: a thread that finds the device may submit at
  // once, and the router must know the id by then.
  caf::scoped_actor self{*system_};
  self->request(router_, caf::infinite, attach_atom::value, id, name, caf::actor_cast<runner_actor>(runner))
      .receive([](done_atom) {}, [&](caf::error& e) { throw_error(e); });
  auto& s = slots_[id];
  s.info = DeviceInfo{std::move(name), std::move(kind), std::move(custom_support)};
  s.runner = std::move(runner);
  s.local = local;
  s.lane = std::move(lane);
  s.remote_index = remote_index;
  count_.store(id + 1, std::memory_order_release);
  return id;
}

void Core::start() {
  ThreadLoggerGuard logger_guard;
  auto kinds = backends::backend_kinds(options_.backend_module_path);
  if (options_.extend_backends) {
    backends::call_kind_entry(Errc::invalid_argument, "RuntimeOptions::extend_backends",
                              [&] { options_.extend_backends(kinds); });
    // A kind the extension got wrong is refused here, with what is wrong,
    // rather than ignored (a second "cpu") or crashing when first used.
    for (size_t i = 0; i < kinds.size(); ++i) {
      const auto& k = kinds[i];
      auto refuse = [&](const std::string& why) {
        throw Error(Errc::invalid_argument, "extend_backends: backend kind '" + k.name + "': " + why);
      };
      if (!backends::valid_kind_name(k.name)) refuse("a name is lower-case letters, digits and '_'");
      if (!k.device_count || !k.create) refuse("device_count and create must be set");
      for (size_t j = 0; j < i; ++j)
        if (kinds[j].name == k.name) refuse("named twice (to replace a kind, change its entry)");
    }
  }
  std::vector<std::string> unavailable;
  const auto plan = backends::plan_devices(kinds, options_.devices, unavailable);
  for (auto& why : unavailable) note_unavailable(std::move(why));
  size_t cpu_devices = std::count_if(plan.begin(), plan.end(), [](const auto& p) { return p.kind->name == "cpu"; });
  // CPUs this process may use (affinity mask, cgroup quota), not the machine's.
  auto hw = available_cpus();
  std::string trace_path = options_.trace_path;
  if (const char* env = std::getenv("SWITCHYARD_TRACE"); trace_path.empty() && env != nullptr) trace_path = env;
  if (!trace_path.empty()) {
    try {
      tracer_ = std::make_shared<actors::Tracer>(trace_path, actors::Tracer::Limits{}, log_);
    } catch (const std::runtime_error& e) {
      // A diagnostic aid must not stop the runtime: it runs on untraced.
      log_.log(LogLevel::warn, [&] { return std::string(e.what()) + "; tracing is off"; });
    }
  }
  {
    std::lock_guard add_lock(add_mutex_);
    for (const auto& [name, kind, index] : plan) {
      if (find(name)) throw Error(Errc::invalid_argument, "device '" + name + "' requested twice");
      backends::DeviceOptions opts;
      opts.threads =
          options_.cpu_threads != 0 ? options_.cpu_threads : std::max<size_t>(1, hw / std::max<size_t>(cpu_devices, 1));
      if (kind->name == "cpu") opts.memory_limit = options_.cpu_memory_limit;
      if (kind->name == "cuda") {
        opts.memory_limit = options_.cuda_memory_limit;
        opts.allow_tf32 = options_.cuda_allow_tf32;
      }
      opts.cache_limit = options_.cpu_cache_limit;
      std::shared_ptr<backends::Backend> backend = backends::call_kind_entry(
          Errc::unknown_device, "device '" + name + "': backend kind '" + kind->name + "': create",
          [&] { return kind->create(index, opts); });
      // A user's BackendKind may get this wrong; say so instead of crashing.
      if (!backend)
        throw Error(Errc::unknown_device, "device '" + name + "': backend kind '" + kind->name +
                                              "' created no backend (create returned null)");
      auto id = static_cast<DeviceId>(count_.load(std::memory_order_relaxed));
      if (id >= max_devices)
        throw Error(Errc::invalid_argument, "too many devices: a runtime holds at most " + std::to_string(max_devices));
      // The library's table knows its own kinds; a custom backend is asked,
      // once, which dtypes it holds (which ops it runs, supports(op) says).
      std::vector<DTypeSupport> custom_support;
      // (Every kind of the library's table holds f32; one it does not know holds nothing there.)
      if (const auto& k = kind->name; !switchyard::dtype_support(k, DType::f32).storage) {
        for (DType t : all_dtypes) {
          const bool holds = backend->supports(t);
          custom_support.push_back(
              {holds, holds, holds && !is_bool(t),
               holds ? "as backend kind '" + k + "' implements it (ops it does not run fail as unsupported)"
                     : "backend kind '" + k + "' does not hold it"});
        }
      }
      auto runner = actors::spawn_runner(
          *system_, name, std::move(backend),
          actors::RunnerHooks{tracer_, id, slots_[id].queue.batches_done, options_.idle_trim_after,
                              options_.transfer_chunk_bytes, options_.remote_timeout, options_.fuse_elementwise, log_,
                              abandon_, nullptr,
                              // Runners stop before this core goes (shut_down).
                              [this](const caf::actor_addr& target, TensorId dst, const TensorData& data) {
                                return bulk_export(target, dst, data);
                              },
                              // In the words the router would use, before
                              // the runner's unanswered requests fail.
                              [this, id, device = name](const std::string& why) {
                                std::string message = "device " + device;
                                message += " lost: runner stopped: ";
                                message += why;
                                on_lost(id, message);
                              }});
      add_device(name, kind->name, caf::actor_cast<caf::actor>(runner), true, std::move(custom_support));
      // (The name by init-capture: clang before 16 cannot capture a
      // structured binding, which keeps clang-tidy from parsing the file.)
      log_.log(LogLevel::info, [threads = opts.threads, cpu = kind->name == "cpu", &device = name] {
        return "device " + device + " started" +
               (cpu ? " (" + std::to_string(threads) + (threads == 1 ? " kernel thread)" : " kernel threads)") : "");
      });
    }
  }
  flusher_ = std::thread([this] { flusher_loop(); });
  auto connect_entry = [this](const std::string& w) {
    auto colon = w.rfind(':');
    int port = -1;
    if (colon != std::string::npos && colon > 0) {
      try {
        size_t used = 0;
        port = std::stoi(w.substr(colon + 1), &used);
        if (used != w.size() - colon - 1) port = -1;
      } catch (const std::exception&) {
        port = -1;
      }
    }
    if (port <= 0 || port > 65535)
      throw Error(Errc::invalid_argument, "worker address '" + w + "' is not of the form host:port");
    (void)connect(w.substr(0, colon), static_cast<uint16_t>(port));
  };
  // Workers the program names itself must be there: a failure throws.
  for (const auto& w : options_.workers) connect_entry(w);
  // SWITCHYARD_WORKERS comes from the environment, which the program does
  // not control: a bad or unreachable entry is reported by unavailable()
  // and the runtime starts without it, instead of the constructor throwing.
  if (const char* env = std::getenv("SWITCHYARD_WORKERS")) {
    std::string list = env;
    for (size_t pos = 0; pos <= list.size();) {
      auto comma = std::min(list.find(',', pos), list.size());
      std::string w = list.substr(pos, comma - pos);
      // Entries may be spaced ("a:1, b:2"), as lists in the environment often are.
      if (const auto first = w.find_first_not_of(" \t"); first != std::string::npos) {
        w = w.substr(first, w.find_last_not_of(" \t") - first + 1);
        try {
          connect_entry(w);
        } catch (const Error& e) {
          std::string why = "SWITCHYARD_WORKERS entry '" + w + "': " + e.what();
          log_.log(LogLevel::warn, [&] { return "left out " + why; });
          unavailable_.push_back(std::move(why));
        }
      }
      pos = comma + 1;
    }
  }
}

std::vector<DeviceId> Core::connect(const std::string& host, uint16_t port) {
  try {
    return connect_worker(host, port);
  } catch (const Error& e) {
    log_.log(LogLevel::debug, [&] { return std::string(e.what()); });
    throw;
  }
}

namespace {

// A request from a client thread whose reply it waits for, as a scoped
// actor's receive would, but giving up once `closing()` says so: a blocking
// receive waited out the whole connect_timeout for a silent peer, holding
// up the Runtime's destructor that long. The request goes from a helper
// actor, which outlives a caller that gave up only until it is told to
// exit; the reply lands in a state both share.
template <class... Reply>
struct AwaitedReply {
  std::mutex mutex;
  std::condition_variable arrived;
  std::optional<std::tuple<Reply...>> reply;
  std::optional<caf::error> error;
};

/// The reply, or the request's error, or nullopt where `closing()` turned
/// true first (checked every few milliseconds).
template <class... Reply, class Dest, class Closing, class... Args>
std::optional<std::variant<std::tuple<Reply...>, caf::error>> await_reply(caf::actor_system& system, const Dest& dest,
                                                                          std::chrono::milliseconds timeout,
                                                                          Closing&& closing, Args... args) {
  auto state = std::make_shared<AwaitedReply<Reply...>>();
  // dest travels as a spawn argument: CAF 0.17 calls an argument-less
  // function actor through a null std::tuple<> pointer (UBSan: reference
  // binding to null), which the other spawns here avoid the same way.
  auto helper = system.spawn(
      [state, timeout, args...](caf::event_based_actor* self, const Dest& dest) {
        self->request(dest, timeout, args...)
            .then(
                [state](Reply&... reply) {
                  std::lock_guard lock(state->mutex);
                  state->reply.emplace(std::move(reply)...);
                  state->arrived.notify_all();
                },
                [state](caf::error& e) {
                  std::lock_guard lock(state->mutex);
                  state->error = std::move(e);
                  state->arrived.notify_all();
                });
      },
      dest);
  std::unique_lock lock(state->mutex);
  while (!state->reply && !state->error) {
    if (closing()) {
      lock.unlock();
      caf::anon_send_exit(helper, caf::exit_reason::user_shutdown);
      return std::nullopt;
    }
    state->arrived.wait_for(lock, std::chrono::milliseconds(20));
  }
  if (state->error) return std::variant<std::tuple<Reply...>, caf::error>(std::move(*state->error));
  return std::variant<std::tuple<Reply...>, caf::error>(std::move(*state->reply));
}

}  // namespace

std::vector<DeviceId> Core::connect_worker(const std::string& host, uint16_t port) {
  ThreadLoggerGuard logger_guard;
  if (closed()) throw Error(Errc::runtime_closed, "the runtime is shut down");
  const std::string address = host + ":" + std::to_string(port);
  if (on_runtime_thread())
    throw Error(Errc::invalid_argument,
                "connect to " + address + ": not from a continuation (the handshake would block a runtime thread)");
  std::lock_guard add_lock(add_mutex_);
  for (const auto& w : workers_)
    if (w.host == host && w.port == port &&
        std::none_of(w.devices.begin(), w.devices.end(), [&](DeviceId d) { return lost(d); }))
      throw Error(Errc::invalid_argument, "already connected to worker " + address);
  // Not remote_actor(): it waits for CAF's handshake without a deadline, so
  // a port that accepts and stays silent would hang this call forever. The
  // same request to the middleman actor, with one deadline for the connect
  // and the hello together.
  const auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
  };
  caf::scoped_actor self{*system_};
  auto connector =
      options_.tls.enabled() ? system_->openssl_manager().actor_handle() : system_->middleman().actor_handle();
  std::optional<caf::actor> entry;
  std::optional<caf::error> failure;
  caf::node_id node;
  const auto closing = [this] { return closed(); };
  auto shut_during = [&](const char* step) {
    return Error(Errc::runtime_closed, "connect to " + address + ": the runtime shut down during the " + step);
  };
  {
    auto got = await_reply<caf::node_id, caf::strong_actor_ptr, std::set<std::string>>(
        *system_, connector, left(), closing, caf::connect_atom::value, host, port);
    if (!got) throw shut_during("handshake");
    if (auto* e = std::get_if<caf::error>(&*got)) {
      failure = std::move(*e);
    } else {
      auto& [peer, ptr, ifs] = std::get<0>(*got);
      node = peer;
      if (!ptr)
        failure = caf::make_error(caf::sec::no_actor_published_at_port, "no worker published at this port");
      else if (!ifs.empty())
        failure = caf::make_error(caf::sec::unexpected_actor_messaging_interface, "not a switchyard-worker");
      else
        entry = caf::actor_cast<caf::actor>(std::move(ptr));
    }
  }
  if (failure) {
    if (*failure == caf::sec::request_timeout)
      throw Error(Errc::worker_unreachable, "cannot connect to worker " + address + ": no handshake within " +
                                                std::to_string(options_.connect_timeout.count()) +
                                                " ms (RuntimeOptions::connect_timeout)");
    throw Error(Errc::worker_unreachable, "cannot connect to worker " + address + ": " + system_->render(*failure));
  }
  // The same worker under another name (localhost for 127.0.0.1, another
  // interface): its process is the node the handshake reached.
  for (const auto& w : workers_)
    if (node && w.node == node && std::none_of(w.devices.begin(), w.devices.end(), [&](DeviceId d) { return lost(d); }))
      throw Error(Errc::invalid_argument,
                  "already connected to worker " + address + " (as " + w.host + ":" + std::to_string(w.port) + ")");
  const auto handshake_took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - (deadline - options_.connect_timeout));
  std::vector<std::string> names, kinds;
  std::vector<caf::actor> runners;
  uint16_t lane_port = 0;
  std::string lane_token;
  {
    auto got = await_reply<uint32_t, std::vector<std::string>, std::vector<std::string>, std::vector<caf::actor>,
                           uint16_t, std::string>(*system_, *entry, left(), closing, hello_atom::value,
                                                  protocol_version, caf::actor_cast<caf::actor>(router_));
    if (!got) throw shut_during("hello");
    if (auto* e = std::get_if<caf::error>(&*got)) {
      failure = std::move(*e);
    } else {
      auto& reply = std::get<0>(*got);
      names = std::move(std::get<1>(reply));
      kinds = std::move(std::get<2>(reply));
      runners = std::move(std::get<3>(reply));
      lane_port = std::get<4>(reply);
      lane_token = std::move(std::get<5>(reply));
    }
  }
  if (failure) {
    if (*failure == caf::sec::request_timeout)
      throw Error(Errc::worker_unreachable, "cannot connect to worker " + address + ": no answer to hello within " +
                                                std::to_string(options_.connect_timeout.count()) +
                                                " ms (RuntimeOptions::connect_timeout; the TCP and BASP handshake "
                                                "took " +
                                                std::to_string(handshake_took.count()) + " ms of it)");
    auto info = describe(*failure);
    throw Error(info.code == Errc::device_lost ? Errc::worker_unreachable : info.code,
                "worker " + address + " refused the connection: " + info.message);
  }
  if (names.size() != kinds.size() || names.size() != runners.size() ||
      std::any_of(runners.begin(), runners.end(), [](const caf::actor& a) { return !a; }))
    throw Error(Errc::protocol_error, "worker " + address + " sent a malformed device list");
  // Direct routes between workers, so bridges never pass through us.
  for (const auto& w : workers_) {
    if (std::all_of(w.devices.begin(), w.devices.end(), [&](DeviceId d) { return lost(d) != nullptr; })) continue;
    self->request(w.entry, std::chrono::seconds(10), peer_atom::value, host, port)
        .receive([](done_atom) {}, [](caf::error&) { /* bridges then relay via this client: slower, still correct */ });
  }
  // All of the worker's devices or none: a connect that fails leaves no
  // half of them registered.
  if (device_count() + names.size() > max_devices)
    throw Error(Errc::invalid_argument, "connect to " + address + ": its " + std::to_string(names.size()) +
                                            " devices would pass the " + std::to_string(max_devices) +
                                            " device slots a runtime has (" + std::to_string(device_count()) +
                                            " used, lost devices included)");
  Worker worker{host, port, *entry, {}, node, nullptr};
  if (lane_port != 0 && options_.bulk_lane_min_bytes > 0 && !options_.tls.enabled()) {
    std::string why;
    worker.lane = BulkLaneClient::open(host, lane_port, lane_token, left(), address, options_.cpu_cache_limit,
                                       options_.idle_trim_after, why);
    if (!worker.lane)
      log_.log(LogLevel::warn, [&] {
        return "worker " + address + ": no bulk lane (port " + std::to_string(lane_port) + ": " + why +
               "); tensors travel over the worker connection";
      });
  }
  for (size_t i = 0; i < names.size(); ++i)
    worker.devices.push_back(add_device(address + "/" + names[i], kinds[i], std::move(runners[i]), false, {},
                                        worker.lane, static_cast<uint32_t>(i)));
  auto ids = worker.devices;
  log_.log(LogLevel::info, [&] {
    // Every earlier connection to this address was lost (a live one refuses above).
    const bool again = std::any_of(workers_.begin(), workers_.end(),
                                   [&](const Worker& w) { return w.host == host && w.port == port; });
    std::string devices;
    for (const auto& n : names) devices += (devices.empty() ? "" : ", ") + n;
    return std::string(again ? "reconnected" : "connected") + " to worker " + address + " (" +
           std::to_string(handshake_took.count()) + " ms" + (options_.tls.enabled() ? ", TLS" : "") + "): devices " +
           devices;
  });
  workers_.push_back(std::move(worker));
  return ids;
}

Core::~Core() {
  // A destructor must not throw: what close() could not finish (bad_alloc,
  // a thread that would not start) is logged instead.
  try {
    close();
  } catch (const std::exception& e) {
    log_.log(LogLevel::error, [&] { return std::string("shutdown failed: ") + e.what(); });
  } catch (...) {
    log_.log(LogLevel::error, [] { return std::string("shutdown failed"); });
  }
}

std::optional<DeviceId> Core::find(std::string_view name) const {
  // Newest first: a reconnected worker's devices reuse the lost ones' names.
  for (size_t i = device_count(); i-- > 0;)
    if (slots_[i].info.name == name && !lost(static_cast<DeviceId>(i))) return static_cast<DeviceId>(i);
  return std::nullopt;
}

namespace {

// Last-use detection: an input whose next mention in the batch is its own
// drop is used for the last time, so it is marked read_write (the backend
// may write the output into its buffer, and the runner frees it after the
// op) and the drop leaves the batch. Catches temporaries (`(x * 2 + 1)`)
// and rebinding (`x = x + y`) alike, with no API change: the client only
// knows a tensor is dead once its handle is gone, and that drop is almost
// always queued right behind its last use. Measured in docs/ARCHITECTURE.md.
// Only ops[0, end) are looked at: `end` is one past the last drop, and an op
// after it has no drop of its inputs to find.
template <class Table>
void mark_last_uses(std::vector<OperationIr>& ops, size_t end, Table& next_use) {
  constexpr uint32_t used = 0;  // else: index of the drop + 1
  size_t keys = 0;
  for (size_t i = 0; i < end; ++i) ops[i].each_input([&](const TensorIr&) { ++keys; });
  next_use.reset(keys + end);
  bool removed = false;
  bool inserted = false;
  for (size_t i = end; i-- > 0;) {
    if (auto* drop = std::get_if<DropOp>(&ops[i].op)) {
      next_use.find_or_insert(drop->id, 0, inserted) = static_cast<uint32_t>(i + 1);
      continue;
    }
    ops[i].each_input([&](TensorIr& t) {
      uint32_t& next = next_use.find_or_insert(t.id, used, inserted);
      if (!inserted && next != used) {
        t.status = TensorStatus::read_write;
        std::get<DropOp>(ops[next - 1].op).id = TensorId{};  // 0: never a valid id
        removed = true;
      }
      next = used;
    });
  }
  if (removed)
    std::erase_if(ops, [](const OperationIr& op) {
      const auto* drop = std::get_if<DropOp>(&op.op);
      return drop != nullptr && !drop->id;
    });
}

}  // namespace

void Core::LastUseTable::reset(size_t keys) {
  size_t capacity = 16;
  while (capacity < 2 * keys) capacity *= 2;  // load factor at most 1/2
  if (slots_.size() < capacity) slots_.resize(capacity);
  // Only the part this batch uses: after one large batch, clearing the
  // whole array for each one-op batch of a round trip showed in profiles.
  std::fill_n(slots_.begin(), capacity, IdSlot<uint32_t>{});
  used_ = capacity;
}

uint32_t& Core::LastUseTable::find_or_insert(TensorId id, uint32_t fresh, bool& inserted) {
  auto& slot = probe_id(std::span(slots_.data(), used_), id);
  inserted = slot.key == 0;
  if (inserted) slot = {id.value, fresh};
  return slot.value;
}

bool Core::mark_last_use_locked(Queue& q, TensorId id) {
  if (q.ops.empty()) return false;
  bool marked = false;
  q.ops.back().each_input([&](TensorIr& t) {
    if (!marked && t.id == id) {
      t.status = TensorStatus::read_write;
      marked = true;
    }
  });
  return marked;
}

std::vector<OperationIr> Core::take_batch_locked(Queue& q) {
  if (q.has_late_drops.load(std::memory_order_acquire)) {
    std::lock_guard lock(q.late_drops_mutex);
    for (auto id : q.late_drops) q.ops.emplace_back(DropOp{id});
    if (!q.late_drops.empty()) q.drops_end = q.ops.size();
    q.late_drops.clear();
    q.has_late_drops.store(false, std::memory_order_relaxed);
  }
  q.send_before_next = false;
  if (q.ops.empty()) return {};
  q.upload_bytes = 0;
  // As many as were queued, drops included: sized by what is left after the
  // last-use pass removed drops, the next batch grew (reallocated and moved
  // every op) once as the queue filled again.
  const size_t queued = q.ops.size();
  if (options_.reuse_last_use && q.drops_end > 0) mark_last_uses(q.ops, q.drops_end, q.next_use);
  q.drops_end = 0;
  std::vector<OperationIr> batch;
  // The next batch starts as large as this one: growing it op by op cost
  // reallocations and page faults on the submitting thread, and reserving
  // max_batch each time (~78 KB) made every one-op round trip allocate a
  // block that the runner's thread frees and glibc then gives back to the
  // system (madvise, page faults; both profiled).
  batch.reserve(std::clamp<size_t>(queued, 8, options_.max_batch));
  batch.swap(q.ops);
  q.batches_sent.fetch_add(1, std::memory_order_release);
  return batch;
}

bool Core::send_locked(DeviceId device, Queue& q, bool last) {
  // After close() sent the queues for the last time, nothing more goes out:
  // shut_down() is about to let go of the runners (late drops may still
  // arrive, and a flush would otherwise read a runner handle it resets).
  if (closed() && !last) return false;
  auto batch = take_batch_locked(q);
  if (batch.empty()) return false;
  // Sent under the lock, so batches of one device leave in queue order. A
  // local runner takes them straight from us: the router would only
  // forward them, one scheduler hop per batch.
  if (slots_[device].local) {
    caf::anon_send(caf::actor_cast<runner_actor>(slots_[device].runner), submit_atom::value,
                   LocalBatch{std::move(batch)});
  } else if (batch.size() <= detail::max_wire_ops) {
    caf::anon_send(router_, submit_atom::value, device, std::move(batch));
  } else {
    // A worker refuses longer batches (a bound on what one message makes
    // it allocate); max_batch above it, or many late drops, split here.
    for (size_t first = 0; first < batch.size(); first += detail::max_wire_ops) {
      const auto last = batch.begin() + static_cast<ptrdiff_t>(std::min(batch.size(), first + detail::max_wire_ops));
      caf::anon_send(router_, submit_atom::value, device,
                     std::vector<OperationIr>(std::make_move_iterator(batch.begin() + static_cast<ptrdiff_t>(first)),
                                              std::make_move_iterator(last)));
    }
  }
  return true;
}

// Backpressure: a client that submits faster than its device runs would
// otherwise grow the runner's mailbox without bound (1M tiny ops grew the
// resident set by ~28 MiB before this; see docs/ARCHITECTURE.md). A client
// thread waits here, holding no lock, while too many of the device's batches
// are in flight. Runtime threads (continuations, drops from them) never wait:
// the batches they would wait for travel through those same threads. Gives
// up after a second without progress, so a stuck or lost device cannot hang
// a client (its failure then surfaces through futures as before).
void Core::wait_for_room(DeviceId device, Queue& q) {
  constexpr uint64_t max_in_flight = 16;
  // Only local runners count the batches they take in; a remote device's
  // flow is bounded by its connection instead.
  if (!slots_[device].local || on_runtime_thread()) return;
  auto in_flight = [&](uint64_t done) { return q.batches_sent.load(std::memory_order_acquire) - done; };
  auto done = q.batches_done->load(std::memory_order_acquire);
  if (in_flight(done) < max_in_flight) return;
  auto last_progress = std::chrono::steady_clock::now();
  for (int spins = 0; in_flight(done) >= max_in_flight; ++spins) {
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    auto now_done = q.batches_done->load(std::memory_order_acquire);
    auto now = std::chrono::steady_clock::now();
    if (now_done != done) {
      done = now_done;
      last_progress = now;
    } else if (now - last_progress > std::chrono::seconds(1) || closed() || lost(device)) {
      return;
    }
  }
}

namespace {
// A client's upload (or bridge) as parts of at most `chunk` bytes (0: one
// part), after its expect.
void send_parts(const router_actor& router, DeviceId device, TensorId id, const TensorData& data, size_t chunk,
                bool bridge = false) {
  const auto& bytes = data.bytes;
  const size_t step = chunk > 0 ? chunk : std::max<size_t>(bytes.size(), 1);
  for (size_t offset = 0; offset < bytes.size(); offset += step) {
    const size_t n = std::min(step, bytes.size() - offset);
    caf::anon_send(router, import_atom::value, device,
                   DataPart{id, data.shape, data.dtype, bytes.size(), offset, bytes.slice(offset, n), bridge});
  }
}
}  // namespace

void Core::submit(DeviceId device, OperationIr&& op) {
  if (const auto* drop = std::get_if<DropOp>(&op.op)) {
    this->drop(device, drop->id);
    return;
  }
  if (auto* recorder = thread_recorder) recorder->op(this, device, op);
  auto& q = slot(device).queue;
  bool arm = false;
  bool sent = false;
  // What crosses a worker connection stays below transfer_chunk_bytes per
  // message: a large upload goes in parts, and a batch is sent before its
  // uploads would grow past the chunk.
  const size_t chunk = slots_[device].local ? 0 : options_.transfer_chunk_bytes;
  const auto* upload = std::get_if<FromDataOp>(&op.op);
  const size_t upload_bytes = upload != nullptr ? upload->data.bytes.size() : 0;
  const bool heavy = slots_[device].local && starts_early(op);
  const bool elementwise = std::holds_alternative<UnaryOp>(op.op) || std::holds_alternative<BinaryOp>(op.op) ||
                           std::holds_alternative<ScalarOp>(op.op) || std::holds_alternative<CastOp>(op.op) ||
                           std::holds_alternative<WhereOp>(op.op);
  {
    std::lock_guard lock(q.mutex);
    if (closed()) return;
    if (auto* lane = upload != nullptr ? lane_for(device, upload_bytes) : nullptr) {
      // Ops queued before it go first, then the expect (in queue order, so
      // ops after it wait for the data); the bytes take the lane.
      send_locked(device, q);
      caf::anon_send(router_, expect_atom::value, device, upload->out);
      auto resend = [router = router_, device, id = upload->out.id, chunk](const TensorData& data) {
        send_parts(router, device, id, data, chunk);
      };
      if (!lane->upload(slots_[device].remote_index, upload->out.id, upload->data, false, resend)) resend(upload->data);
      sent = true;
      queued_locked(device, q, sent, arm);
    } else {
      if (chunk > 0 && upload_bytes > 0 && q.upload_bytes + upload_bytes > chunk) sent = send_locked(device, q);
      if (chunk > 0 && upload_bytes > chunk) {
        send_in_parts(device, std::get<FromDataOp>(op.op), chunk);
        sent = true;
      } else {
        // A heavy op for an idle local runner goes early, with what is
        // queued before it: the runner computes while this client builds
        // the rest of its graph (the encoder's ONNX layer spends ~70 us per
        // call on its ops), instead of waiting for the read. Not at once:
        // the element-wise ops right after it (a convolution's add and
        // relu) must join its batch to be fused into its store, so the
        // batch goes when the first other op comes. Idle: the runner has
        // run every batch sent (batches_done counts batches run to their end).
        if (q.send_before_next && !elementwise) {
          sent = send_locked(device, q);
          q.send_before_next = false;
        }
        if (heavy && q.batches_sent.load(std::memory_order_relaxed) == q.batches_done->load(std::memory_order_acquire))
          q.send_before_next = true;
        q.upload_bytes += upload_bytes;
        q.ops.push_back(std::move(op));
      }
      queued_locked(device, q, sent, arm);
    }
  }
  after_queued(device, q, sent, arm);
}

namespace {

// Multiply-adds from which an op is worth sending to an idle runner at once
// (some microseconds of work on one core). Measured against 2^22 for
// products and convolutions (session 28): the MLP at batch 64, whose
// 2^20 product then waited for its read, gained little, and a 4-layer
// encoder of d_model 128 (its feed-forward products 2^20) lost 10-30% per
// call, its client no longer building the next layers while the device
// computed.
constexpr int64_t early_start_macs = int64_t{1} << 20;

}  // namespace

bool Core::starts_early(const OperationIr& op) {
  // outputs * per_output >= early_start_macs, without overflowing on a
  // huge (or hostile) shape.
  const auto at_least = [](int64_t outputs, int64_t per_output) {
    return outputs > 0 && per_output > 0 && outputs >= (early_start_macs + per_output - 1) / per_output;
  };
  if (const auto* m = std::get_if<MatmulOp>(&op.op)) {
    const auto& a = m->lhs.shape;
    const int64_t k = a.rank() < 2 ? 1 : a.dims[m->transpose_lhs ? a.rank() - 2 : a.rank() - 1];
    return at_least(m->out.numel(), k);
  }
  if (const auto* c = std::get_if<ConvOp>(&op.op)) {
    const int64_t out_channels = c->out.shape.rank() > 1 ? std::max<int64_t>(c->out.shape.dims[1], 1) : 1;
    return at_least(c->out.numel(), c->weight.numel() / out_channels);
  }
  if (const auto* t = std::get_if<AttentionOp>(&op.op)) {
    const auto& k = t->k.shape;
    return at_least(t->q.numel(), k.rank() >= 2 ? 2 * k.dims[k.rank() - 2] : 1);
  }
  return false;
}

void Core::queued_locked(DeviceId device, Queue& q, bool& sent, bool& arm) {
  if (q.ops.size() >= options_.max_batch)
    sent = send_locked(device, q);
  else
    arm = q.ops.size() == 1;
}

void Core::after_queued(DeviceId device, Queue& q, bool sent, bool arm) {
  if (sent) wait_for_room(device, q);
  if (arm) arm_flusher();
}

void Core::drop(DeviceId device, TensorId id) {
  if (auto* recorder = thread_recorder) recorder->drop(this, device, id);
  auto& q = slot(device).queue;
  if (on_runtime_thread()) {
    // A drop from a reply (the runner's own thread, for a local device) or
    // a continuation: it must not contend for the queue's lock with client
    // threads, which hold it across sends; a client preempted there would
    // stall the runner. Ops that use the tensor were queued before this
    // drop, so the drop may wait at the end of the next batch.
    {
      std::lock_guard lock(q.late_drops_mutex);
      if (closed()) return;
      q.late_drops.push_back(id);
    }
    q.has_late_drops.store(true, std::memory_order_release);
    arm_flusher();
    return;
  }
  bool arm = false;
  bool sent = false;
  {
    std::lock_guard lock(q.mutex);
    if (closed()) return;
    // Usually the op just queued was the tensor's last use (`x = x + 1`
    // drops the old x right after reading it): marked now, the drop is
    // never queued, and a batch without drops skips the last-use pass,
    // which with the drops' removal cost ~300 instructions per op.
    if (options_.reuse_last_use && mark_last_use_locked(q, id)) return;
    q.ops.emplace_back(DropOp{id});
    q.drops_end = q.ops.size();
    queued_locked(device, q, sent, arm);
  }
  after_queued(device, q, sent, arm);
}

// The flusher is woken only from its parked state: a client doing op + read
// round trips flushes itself, and waking the flusher for each would cost two
// context switches per round trip.
void Core::arm_flusher() {
  if (!flush_pending_.exchange(true) && flusher_parked_.load()) {
    std::lock_guard lock(flusher_mutex_);
    flusher_wake_.notify_one();
  }
}

void Core::flush(DeviceId device, bool wait) {
  auto& q = slot(device).queue;
  bool sent = false;
  {
    std::lock_guard lock(q.mutex);
    sent = send_locked(device, q);
  }
  if (sent && wait) wait_for_room(device, q);
}

void Core::flush_all() {
  for (DeviceId d = 0; d < device_count(); ++d) flush(d, false);
}

// Sends what waited a flush interval in any queue. While ops keep coming it
// ticks once per interval, so submitting never has to wake it; after
// `idle_ticks` intervals without a new op it parks until the next one.
// (Parking and submitting form a Dekker pair on flusher_parked_ and
// flush_pending_, both sequentially consistent: either the submitter sees
// the flusher parked and wakes it, or the flusher sees the op and stays.)
//
// Two idle ticks, not more: a client that reads its results flushes itself,
// and a flusher ticking on through a long forward pass preempts the
// device's kernel threads on every tick (50 idle ticks were ~50 wake-ups
// per ResNet-18 call, 5-10% of its time on two cores).
void Core::flusher_loop() {
  constexpr int idle_ticks = 2;
  int idle = 0;
  std::unique_lock lock(flusher_mutex_);
  for (;;) {
    flusher_wake_.wait_for(lock, options_.flush_interval, [&] { return flusher_stop_; });
    if (flusher_stop_) return;
    if (flush_pending_.exchange(false)) {
      idle = 0;
      lock.unlock();
      flush_all();
      lock.lock();
      continue;
    }
    if (++idle < idle_ticks) continue;
    flusher_parked_.store(true);
    flusher_wake_.wait(lock, [&] { return flusher_stop_ || flush_pending_.load(); });
    flusher_parked_.store(false);
    idle = 0;
    if (flusher_stop_) return;
  }
}

// Under the device's queue lock, after the queue was sent: the expect and
// the parts leave in queue order, so ops queued later find the tensor
// pending on the runner and wait for its last part.
void Core::send_in_parts(DeviceId device, const FromDataOp& upload, size_t chunk) {
  caf::anon_send(router_, expect_atom::value, device, upload.out);
  send_parts(router_, device, upload.out.id, upload.data, chunk);
}

Tensor Core::adopt(DeviceId device, TensorIr&& ir) {
  ir.status = TensorStatus::read_only;
  return Tensor(std::make_shared<TensorHandle>(shared_from_this(), device, std::move(ir)));
}

void Core::mark_recorded_last_uses(std::vector<OperationIr>& ops) {
  if (!options_.reuse_last_use) return;
  size_t end = 0;
  for (size_t i = 0; i < ops.size(); ++i)
    if (std::holds_alternative<DropOp>(ops[i].op)) end = i + 1;
  LastUseTable table;
  mark_last_uses(ops, end, table);
}

void Core::submit_recorded(DeviceId device, std::vector<OperationIr>&& ops, bool send_now) {
  // A remote device (uploads go in parts or over the lane) and a runtime
  // thread (drops wait for the next batch there) take the usual way.
  if (!slot(device).local || on_runtime_thread()) {
    for (auto& op : ops) {
      if (const auto* d = std::get_if<DropOp>(&op.op))
        drop(device, d->id);
      else
        submit(device, std::move(op));
    }
    return;
  }
  // A replay inside another recording's body is part of that recording
  // (the usual way above passes the hooks in submit and drop).
  if (auto* recorder = thread_recorder) {
    for (const auto& op : ops) {
      if (const auto* d = std::get_if<DropOp>(&op.op))
        recorder->drop(this, device, d->id);
      else
        recorder->op(this, device, op);
    }
  }
  auto& q = slots_[device].queue;
  bool sent = false;
  bool arm = false;
  {
    std::lock_guard lock(q.mutex);
    if (closed()) return;
    const bool was_empty = q.ops.empty();
    if (was_empty && ops.size() <= options_.max_batch) {
      q.ops.swap(ops);
    } else {
      q.ops.reserve(std::min(q.ops.size() + ops.size(), options_.max_batch));
      for (auto& op : ops) {
        q.ops.push_back(std::move(op));
        if (q.ops.size() >= options_.max_batch) sent = send_locked(device, q) || sent;
      }
    }
    // Heavy work: the device may start on all of it now. Light work waits
    // for the read that follows (one message for both: sending it now cost
    // the MLP at batch 1 a second wake-up of the runner, +7%).
    if (send_now)
      sent = send_locked(device, q) || sent;
    else
      arm = was_empty && !q.ops.empty();
  }
  after_queued(device, q, sent, arm);
}

Tensor Core::emit(DeviceId device, TensorIr&& ir, OperationIr&& op) {
  check_usable(device);
  check_dtypes(device, op);
  submit(device, std::move(op));
  return adopt(device, std::move(ir));
}

namespace {
// What a failed request's future holds: a device lost because the runtime
// is closing reads as the runtime's shutdown.
std::exception_ptr reply_failure(const std::weak_ptr<Core>& weak, const caf::error& e) {
  auto core = weak.lock();
  if (core && core->closed() && describe(e).code == Errc::device_lost)
    return std::make_exception_ptr(Error(Errc::runtime_closed, "the runtime shut down before the reply"));
  return to_exception(e);
}
}  // namespace

namespace {
// What every copy of a local reply shares (one allocation however often the
// runner copies the reply): the caller's `keep`, emptied by the copy that
// runs, and the promise. If no copy ever runs (the runner stopped with the
// request in its mailbox, a backend having failed in poll or trim), the last
// copy to go fails the future as the device's loss instead of as a broken
// promise; after a copy ran, the future is complete and that is a no-op.
template <class Value>
struct LocalReplyState {
  std::shared_ptr<const void> keep;
  Promise<Value> promise;
  std::weak_ptr<Core> core;
  DeviceId device = 0;
  /// The runner called back (every call completes the promise): the
  /// destructor then builds no device_lost error, which cost an Error, its
  /// message and an exception_ptr on the runner's thread for every read.
  bool answered = false;
  LocalReplyState(std::shared_ptr<const void> k, Promise<Value> p, std::weak_ptr<Core> c, DeviceId d)
      : keep(std::move(k)), promise(std::move(p)), core(std::move(c)), device(d) {}
  LocalReplyState(const LocalReplyState&) = delete;
  LocalReplyState& operator=(const LocalReplyState&) = delete;
  ~LocalReplyState() {
    if (answered) return;
    try {
      auto c = core.lock();
      if (!c || c->closed()) return;  // the broken promise says runtime_closed, as it should
      const std::string* why = c->lost(device);
      promise.set_error(std::make_exception_ptr(Error(
          Errc::device_lost,
          why != nullptr ? *why : "device " + c->info(device).name + " lost: its runner stopped before answering")));
    } catch (...) {  // NOLINT(bugprone-empty-catch): no memory for the message; the broken promise still fails it
    }
  }
};
}  // namespace

template <class Reply, class Value, class Convert>
LocalReply<Reply> Core::local_reply(DeviceId device, Promise<Value> promise, std::shared_ptr<const void> keep,
                                    Convert convert) {
  // Runs on the runner's thread, where nothing may throw out of it.
  auto state = std::make_shared<LocalReplyState<Value>>(std::move(keep), std::move(promise), weak_from_this(), device);
  return LocalReply<Reply>{[state, convert](caf::expected<Reply> r) mutable {
    RuntimeThreadScope scope;
    auto& promise = state->promise;
    state->answered = true;
    try {
      state->keep.reset();  // queue the drop before the caller sees the value
      if (r)
        convert(promise, *r);
      else
        promise.set_error(reply_failure(state->core, r.error()));
    } catch (...) {
      promise.set_error(std::current_exception());
    }
  }};
}

// A request to a runner of this process: the queued ops travel in the same
// message (the runner takes them in first), and the runner answers through
// a LocalReply on its own thread. One message and two threads per round
// trip; a flush and a request were two messages.
template <class Reply, class Value, class Convert, class... Ts>
Future<Value> Core::ask_local(DeviceId device, std::shared_ptr<const void> keep, Convert convert, Ts... xs) {
  Promise<Value> promise;
  auto fut = promise.future();
  auto& q = slot(device).queue;
  bool sent = false;
  {
    std::lock_guard lock(q.mutex);
    if (closed()) {
      promise.set_error(std::make_exception_ptr(Error(Errc::runtime_closed, "the runtime is shut down")));
      return fut;
    }
    auto batch = take_batch_locked(q);
    // A request counts as a batch in flight even without ops (the runner
    // counts it taken in likewise): a million fire-and-forget reads filled
    // the runner's mailbox (623 MB) where ops would have waited for room.
    if (batch.empty()) q.batches_sent.fetch_add(1, std::memory_order_release);
    sent = true;
    caf::anon_send(caf::actor_cast<runner_actor>(slots_[device].runner), xs..., std::move(batch),
                   local_reply<Reply>(device, std::move(promise), std::move(keep), std::move(convert)));
  }
  if (sent) wait_for_room(device, q);
  return fut;
}

template <class Reply, class Value, class Convert, class... Ts>
Future<Value> Core::ask(std::shared_ptr<const void> keep, Convert convert, Ts... xs) {
  Promise<Value> promise;
  auto fut = promise.future();
  if (closed()) {
    promise.set_error(std::make_exception_ptr(Error(Errc::runtime_closed, "the runtime is shut down")));
    return fut;
  }
  auto weak = weak_from_this();
  // The router travels as an argument, not a capture: CAF 0.17 spawning a
  // function actor without arguments dereferences a null shared_ptr (UBSan).
  // One box shared by both handlers, emptied by whichever runs.
  auto box = std::make_shared<std::shared_ptr<const void>>(std::move(keep));
  ThreadLoggerGuard logger_guard;
  system_->spawn(
      [promise, convert, weak, box, xs...](caf::event_based_actor* self, const router_actor& router) mutable {
        self->request(router, caf::infinite, xs...)
            .then(
                [promise, convert, box](Reply& r) mutable {
                  RuntimeThreadScope scope;
                  box->reset();  // queue the drop before the caller sees the value
                  convert(promise, r);
                },
                [promise, weak, box](caf::error& e) mutable {
                  RuntimeThreadScope scope;
                  box->reset();
                  promise.set_error(reply_failure(weak, e));
                });
      },
      router_);
  return fut;
}

BulkLaneClient* Core::lane_for(DeviceId device, size_t bytes) const {
  const auto& s = slots_[device];
  if (s.local || !s.lane || options_.bulk_lane_min_bytes == 0 || bytes < options_.bulk_lane_min_bytes ||
      !s.lane->alive())
    return nullptr;
  return s.lane.get();
}

bool Core::bulk_export(const caf::actor_addr& target, TensorId dst, const TensorData& data) const {
  for (DeviceId d = 0; d < device_count(); ++d) {
    const auto& s = slots_[d];
    if (s.local || !s.runner || caf::actor_cast<caf::actor_addr>(s.runner) != target) continue;
    auto* lane = lane_for(d, data.bytes.size());
    if (lane == nullptr) return false;
    // The bridge's expect went to the device before the export (Core::bridge).
    auto resend = [router = router_, d, dst, chunk = options_.transfer_chunk_bytes](const TensorData& bytes) {
      send_parts(router, d, dst, bytes, chunk, true);
    };
    return lane->upload(s.remote_index, dst, data, true, std::move(resend));
  }
  return false;
}

// A read whose bytes come on the device's bulk lane: the request goes over
// BASP as usual and is answered once the bytes left the worker (or with
// why they could not); the lane's reader completes the future.
Future<TensorData> Core::read_on_lane(DeviceId device, const TensorIr& ir, std::shared_ptr<const void> keep) {
  struct Transfer {
    Promise<TensorData> promise;
    std::shared_ptr<const void> keep;
    std::atomic<bool> settled{false};
  };
  auto t = std::make_shared<Transfer>();
  auto fut = t->promise.future();
  t->keep = std::move(keep);
  auto lane = slots_[device].lane;
  const auto ticket =
      lane->expect_read(ir.bytes(), [t, shape = ir.shape, dtype = ir.dtype,
                                     where = slots_[device].info.name + ": read of tensor #" +
                                             std::to_string(ir.id.value) + ": "](caf::expected<Bytes> bytes) mutable {
        if (t->settled.exchange(true)) return;
        t->keep.reset();
        if (!bytes) {
          // The lane names its worker; the reader wants the device too.
          auto info = describe(bytes.error());
          t->promise.set_error(std::make_exception_ptr(Error(info.code, where + info.message, info.tensor)));
          return;
        }
        TensorData data(std::move(shape), dtype, std::move(*bytes));
        canonicalize_bools(data);
        t->promise.set_value(std::move(data));
      });
  if (ticket == 0) {
    // The lane broke just now: over BASP after all.
    auto keep_again = std::move(t->keep);
    return options_.transfer_chunk_bytes > 0 && ir.bytes() > options_.transfer_chunk_bytes
               ? read_in_parts(device, ir, std::move(keep_again))
               : read(device, ir, std::move(keep_again));
  }
  ThreadLoggerGuard logger_guard;
  system_->spawn(
      [t, lane, ticket, weak = weak_from_this(), device, id = ir.id](caf::event_based_actor* self,
                                                                     const router_actor& router) {
        self->request(router, caf::infinite, read_atom::value, device, id, BulkTicket{ticket})
            .then([](done_atom) {},
                  [t, lane, ticket, weak](caf::error& e) {
                    lane->cancel_read(ticket);
                    if (t->settled.exchange(true)) return;
                    RuntimeThreadScope scope;
                    t->keep.reset();
                    t->promise.set_error(reply_failure(weak, e));
                  });
      },
      router_);
  return fut;
}

Future<TensorData> Core::read(DeviceId device, const TensorIr& ir, std::shared_ptr<const void> keep) {
  if (auto* recorder = thread_recorder)
    recorder->refuse("it read tensor " + std::to_string(ir.id.value) + " to the host (its value may steer it)");
  if (!slots_[device].local) flush(device);
  if (lane_for(device, ir.bytes()) != nullptr && !closed()) return read_on_lane(device, ir, std::move(keep));
  if (!slots_[device].local && options_.transfer_chunk_bytes > 0 && ir.bytes() > options_.transfer_chunk_bytes)
    return read_in_parts(device, ir, std::move(keep));
  // Init-captures: a plain capture of the const reference `ir` would be a
  // const member, copied (allocating) whenever the closure is moved.
  auto check = [device = info(device).name, ir = ir](Promise<TensorData>& p, TensorData& d) {
    if (auto err = validate_data(d, ir.shape, ir.dtype))
      p.set_error(to_exception(make_error(Errc::protocol_error, "read of tensor " + std::to_string(ir.id.value) +
                                                                    " from " + device + ": " + describe(err).message)));
    else
      p.set_value(std::move(d));
  };
  if (slots_[device].local)
    return ask_local<TensorData, TensorData>(device, std::move(keep), std::move(check), read_atom::value, ir.id);
  return ask<TensorData, TensorData>(std::move(keep), std::move(check), read_atom::value, device, ir.id);
}

namespace {
// Enough to overlap encoding on the worker with decoding here; each costs
// one part of memory while in flight.
constexpr int read_parts_in_flight = 3;
}  // namespace

// A read too large for one message: parts of transfer_chunk_bytes, copied
// into one block. The part at byte 0 goes first (the runner takes its
// snapshot then); later parts are asked `read_parts_in_flight` at a time,
// so the worker encodes one part while this process decodes another.
// Runs on a helper actor like `ask`; no thread waits.
Future<TensorData> Core::read_in_parts(DeviceId device, const TensorIr& ir, std::shared_ptr<const void> keep) {
  Promise<TensorData> promise;
  auto fut = promise.future();
  if (closed()) {
    promise.set_error(std::make_exception_ptr(Error(Errc::runtime_closed, "the runtime is shut down")));
    return fut;
  }
  struct Transfer {
    Promise<TensorData> promise;
    std::shared_ptr<const void> keep;
    TensorData data;
    uint64_t asked = 0;     // bytes asked for so far
    uint64_t received = 0;  // bytes arrived so far
    bool failed = false;
  };
  auto t = std::make_shared<Transfer>();
  t->promise = std::move(promise);
  t->keep = std::move(keep);
  t->data.shape = ir.shape;
  t->data.dtype = ir.dtype;
  t->data.bytes = Bytes::allocate(ir.bytes());
  const uint64_t chunk = options_.transfer_chunk_bytes;
  const std::string name = info(device).name;
  auto weak = weak_from_this();
  ThreadLoggerGuard logger_guard;
  system_->spawn(
      // Init-captures for the const `name` and `ir`: moved, not copied, with
      // the closure.
      [t, chunk, name = name, weak, device, ir = ir](caf::event_based_actor* self, const router_actor& router) {
        auto fail = [t, weak](const caf::error& e) {
          if (std::exchange(t->failed, true)) return;
          RuntimeThreadScope scope;
          t->keep.reset();
          t->promise.set_error(reply_failure(weak, e));
        };
        auto ask = std::make_shared<std::function<void()>>();
        *ask = [self, router, t, chunk, name, device, ir, fail, ask] {
          const uint64_t total = t->data.bytes.size();
          const uint64_t offset = t->asked;
          const uint64_t size = std::min(chunk, total - offset);
          t->asked += size;
          self->request(router, caf::infinite, read_atom::value, device, ir.id, offset, chunk)
              .then(
                  [t, name, ir, fail, ask, offset, total, size](DataPart& part) {
                    if (t->failed) return;
                    // A worker is not trusted to send what was asked.
                    if (part.total != total || part.offset != offset || part.dtype != ir.dtype ||
                        part.shape != ir.shape || part.bytes.size() != size) {
                      *ask = nullptr;
                      fail(make_error(Errc::protocol_error, "read of tensor " + std::to_string(ir.id.value) + " from " +
                                                                name + ": a part does not continue the tensor"));
                      return;
                    }
                    std::memcpy(t->data.bytes.mutable_data() + offset, part.bytes.data(), part.bytes.size());
                    t->received += part.bytes.size();
                    if (t->received < total) {
                      // After the first part, keep the window full.
                      const int more = offset == 0 ? read_parts_in_flight : 1;
                      for (int i = 0; i < more && t->asked < total; ++i) (*ask)();
                      return;
                    }
                    *ask = nullptr;  // breaks the cycle through its own capture
                    RuntimeThreadScope scope;
                    t->keep.reset();
                    canonicalize_bools(t->data);
                    t->promise.set_value(std::move(t->data));
                  },
                  [fail, ask](caf::error& e) {
                    *ask = nullptr;
                    fail(e);
                  });
        };
        (*ask)();
      },
      router_);
  return fut;
}

Future<void> Core::sync(DeviceId device) {
  auto done = [](Promise<void>& p, done_atom) { p.set_value(); };
  if (slots_[device].local) return ask_local<done_atom, void>(device, nullptr, done, sync_atom::value);
  flush(device);
  return ask<done_atom, void>(nullptr, done, sync_atom::value, device);
}

Future<DeviceStats> Core::stats(DeviceId device) {
  flush(device);
  return ask<DeviceStats, DeviceStats>(
      nullptr, [](Promise<DeviceStats>& p, DeviceStats& s) { p.set_value(std::move(s)); }, stats_atom::value, device);
}

Future<void> Core::trim(DeviceId device) {
  flush(device);
  return ask<done_atom, void>(
      nullptr, [](Promise<void>& p, done_atom) { p.set_value(); }, trim_atom::value, device);
}

void Core::bridge(DeviceId src, TensorId src_id, DeviceId dst, const TensorIr& dst_ir) {
  if (auto* recorder = thread_recorder)
    recorder->refuse("it moved tensor " + std::to_string(src_id.value) + " to " + info(dst).name);
  // Both queues go out first: the export must follow the ops producing the
  // source, and the expect must precede ops on the result.
  check_usable(src);
  check_usable(dst);
  check_dtype(dst, dst_ir.dtype, "to", false, false);
  auto& qs = slot(src).queue;
  auto& qd = slot(dst).queue;
  {
    std::scoped_lock lock(qs.mutex, qd.mutex);
    if (closed()) return;
    send_locked(src, qs);
    if (dst != src) send_locked(dst, qd);
    // Local runners take their batches from us directly, not through the
    // router, so what must be ordered with those batches goes the same
    // way: the expect before ops on the result, and the export before the
    // drop of the source that may follow in the next batch.
    if (!slots_[src].local) {
      if (slots_[dst].local)
        caf::anon_send(caf::actor_cast<runner_actor>(slots_[dst].runner), expect_atom::value, dst_ir);
      caf::anon_send(router_, bridge_atom::value, src, src_id, dst, dst_ir);
    } else {
      const auto& target = slots_[dst].runner;
      if (slots_[dst].local)
        caf::anon_send(caf::actor_cast<runner_actor>(target), expect_atom::value, dst_ir);
      else
        caf::anon_send(router_, expect_atom::value, dst, dst_ir);
      // The runner names its device as we do; its failure fails the import
      // (marked as ours for a worker's runner, actors::client_named).
      LocalReply<done_atom> failed{[target, id = dst_ir.id, remote = !slots_[dst].local](caf::expected<done_atom> r) {
        if (!r)
          caf::anon_send(caf::actor_cast<runner_actor>(target), import_atom::value, id,
                         remote ? actors::client_named(r.error()) : r.error());
      }};
      caf::anon_send(caf::actor_cast<runner_actor>(slots_[src].runner), export_atom::value, src_id, target, dst_ir.id,
                     std::move(failed));
    }
  }
  wait_for_room(src, qs);
  if (dst != src) wait_for_room(dst, qd);
}

void Core::close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  ThreadLoggerGuard logger_guard;
  // Send what is queued (submit refuses new work now that closed_ is set).
  for (DeviceId d = 0; d < device_count(); ++d) {
    std::lock_guard lock(slots_[d].queue.mutex);
    send_locked(d, slots_[d].queue, true);
  }
  if (on_runtime_thread()) {
    // ~actor_system below waits for every scheduler thread, this one too:
    // finish on a thread of our own, which keeps the core alive until done.
    if (auto self = weak_from_this().lock()) {
      auto& pending = PendingShutdowns::instance();
      pending.begin();
      std::thread([self = std::move(self), &pending]() mutable {
        self->shut_down();
        self.reset();
        pending.end();
      }).detach();
      return;
    }
  }
  shut_down();
}

void Core::shut_down() {
  ThreadLoggerGuard logger_guard;
  {
    std::lock_guard lock(flusher_mutex_);
    flusher_stop_ = true;
  }
  flusher_wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  if (!system_) return;
  {
    // Let queued work finish, so outstanding reads complete: up to
    // options_.shutdown_timeout for all devices together. Then local runners fail
    // what they have not run yet with runtime_closed (a kernel running
    // finishes), so a deep backlog cannot hold the destructor up; remote
    // devices' futures fail as their connections close.
    caf::scoped_actor self{*system_};
    const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
    for (DeviceId d = 0; d < device_count(); ++d) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!lost(d) && left.count() > 0)
        self->request(router_, left, sync_atom::value, d).receive([](done_atom) {}, [](caf::error&) {});
    }
    abandon_->store(true, std::memory_order_relaxed);
    // Each worker hears that we leave (bounded): it frees our tensors now
    // and logs a clean disconnect, where a connection closing before CAF
    // sent our router's down message would read as a lost client.
    std::vector<caf::actor> entries;
    {
      std::lock_guard lock(add_mutex_);
      for (const auto& w : workers_)
        if (w.entry && std::any_of(w.devices.begin(), w.devices.end(), [&](DeviceId d) { return !lost(d); }))
          entries.push_back(w.entry);
    }
    for (const auto& entry : entries)
      self->request(entry, std::chrono::seconds(1), bye_atom::value, caf::actor_cast<caf::actor>(router_))
          .receive([](done_atom) {}, [](caf::error&) {});
    // Reads still waiting on a lane fail as closed; its threads end.
    std::vector<std::shared_ptr<BulkLaneClient>> lanes;
    {
      std::lock_guard lock(add_mutex_);
      for (const auto& w : workers_)
        if (w.lane) lanes.push_back(w.lane);
    }
    for (const auto& lane : lanes) lane->close();
    // Our runners are detached actors, and ~actor_system waits for each
    // one's object to be destroyed. A worker that ever saw a runner (as a
    // bridge's target or a message's sender) made CAF's BASP broker monitor
    // it; the runner's down message then sits in the broker's mailbox,
    // holding a reference to the runner, and a broker stopped before it
    // reads that message keeps the reference forever: ~actor_system hung
    // (about 1 run in 30 of a bridge test on two loaded cores). So the
    // runners stop while the broker runs: the router answers once it has
    // seen every local runner's down message, which CAF sends after the
    // broker's (newest monitor first; the router's is the oldest), and a
    // request through the broker's mailbox then returns only after the
    // broker has read everything queued before it.
    self->request(router_, std::chrono::seconds(10), stop_atom::value).receive([](done_atom) {}, [](caf::error&) {});
    self->request(system_->middleman().actor_handle(), std::chrono::seconds(2), caf::get_atom::value, system_->node())
        .receive([](const caf::node_id&, const std::string&, uint16_t) {}, [](caf::error&) {});
  }
  for (DeviceId d = 0; d < device_count(); ++d) slots_[d].runner = nullptr;
  {
    std::lock_guard lock(add_mutex_);
    workers_.clear();
  }
  caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
  router_ = nullptr;
  system_.reset();
  tracer_.reset();  // every runner has stopped: this writes the rest and closes the trace
}

}  // namespace switchyard::detail
