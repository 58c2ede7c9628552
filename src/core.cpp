#include "core.hpp"

#include <random>

#include <caf/all.hpp>

#include "actors/router.hpp"
#include "actors/runner.hpp"
#include "backends/backend.hpp"

namespace switchyard::detail {

std::exception_ptr to_exception(const caf::error& err) {
  auto info = describe(err);
  return std::make_exception_ptr(Error(info.code, info.message));
}

void throw_error(const caf::error& err) {
  auto info = describe(err);
  throw Error(info.code, info.message);
}

TensorHandle::~TensorHandle() {
  if (core && !core->closed()) core->submit(device, DropOp{ir.id});
}

namespace {

struct DeviceRequest {
  std::string kind;
  int index = 0;  // -1: every device of the kind
};

DeviceRequest parse_device(const std::string& name) {
  auto colon = name.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == name.size())
    throw Error(Errc::unknown_device, "device name '" + name + "' is not of the form kind:index (e.g. cpu:0, cuda:*)");
  DeviceRequest r{name.substr(0, colon), 0};
  auto idx = name.substr(colon + 1);
  if (idx == "*") {
    r.index = -1;
    return r;
  }
  try {
    size_t used = 0;
    r.index = std::stoi(idx, &used);
    if (used != idx.size() || r.index < 0) throw std::invalid_argument(idx);
  } catch (const std::exception&) {
    throw Error(Errc::unknown_device, "device name '" + name + "' has an invalid index '" + idx + "'");
  }
  return r;
}

}  // namespace

Core::Core(RuntimeOptions options) : options_(std::move(options)) {
  std::random_device rd;
  // A random prefix keeps ids of different clients of one worker apart.
  next_id_ = (uint64_t{rd()} << 32 & 0x7FFFFFFF00000000ULL) | 1;
  register_message_types(config_);
  // Work sharing on few threads: blocking round trips from client threads
  // are ~7x faster than with the default work-stealing pool of >= 4
  // workers (measured; see docs/ARCHITECTURE.md). Runners are detached and
  // do not use these threads.
  auto hw = std::max(1u, std::thread::hardware_concurrency());
  config_.set("scheduler.policy", caf::atom("sharing"));
  config_.set("scheduler.max-threads", static_cast<size_t>(std::min(hw, 4u)));
  config_.set("logger.verbosity", caf::atom("quiet"));
  system_ = std::make_unique<caf::actor_system>(config_);
  router_ = actors::spawn_router(*system_);
}

void Core::start() {
  auto kinds = backends::backend_kinds();
  if (options_.extend_backends) options_.extend_backends(kinds);
  std::vector<std::pair<std::string, std::pair<const backends::BackendKind*, int>>> plan;
  for (const auto& name : options_.devices) {
    auto req = parse_device(name);
    auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.name == req.kind; });
    if (kind == kinds.end()) {
      std::string known;
      for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k.name;
      throw Error(Errc::unknown_device, "device '" + name + "': no backend '" + req.kind + "' in this build (have: " + known + ")");
    }
    int count = kind->device_count();
    if (req.index < 0) {
      if (count == 0) unavailable_.push_back(kind->name + ": " + kind->unavailable_reason());
      for (int i = 0; i < count; ++i) plan.push_back({kind->name + ":" + std::to_string(i), {&*kind, i}});
    } else if (req.index >= count) {
      throw Error(Errc::unknown_device, "device '" + name + "' does not exist: " + std::to_string(count) + " " +
                                            kind->name + " device(s)" +
                                            (count == 0 ? " (" + kind->unavailable_reason() + ")" : ""));
    } else {
      plan.push_back({name, {&*kind, req.index}});
    }
  }
  size_t cpu_devices = std::count_if(plan.begin(), plan.end(), [](const auto& p) { return p.second.first->name == "cpu"; });
  auto hw = std::max<size_t>(1, std::thread::hardware_concurrency());
  caf::scoped_actor self{*system_};
  for (auto& [name, where] : plan) {
    if (find(name)) throw Error(Errc::invalid_argument, "device '" + name + "' requested twice");
    backends::DeviceOptions opts;
    opts.threads = options_.cpu_threads != 0 ? options_.cpu_threads : std::max<size_t>(1, hw / std::max<size_t>(cpu_devices, 1));
    std::shared_ptr<backends::Backend> backend = where.first->create(where.second, opts);
    auto runner = actors::spawn_runner(*system_, name, std::move(backend));
    auto id = static_cast<DeviceId>(devices_.size());
    devices_.push_back(DeviceInfo{name, where.first->name});
    runners_.push_back(caf::actor_cast<caf::actor>(runner));
    queues_.push_back(std::make_unique<Queue>());
    self->request(router_, caf::infinite, attach_atom::value, id, name, runner)
        .receive([](done_atom) {}, [&](caf::error& e) { throw_error(e); });
  }
  flusher_ = std::thread([this] { flusher_loop(); });
}

Core::~Core() { close(); }

std::optional<DeviceId> Core::find(std::string_view name) const {
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i].name == name) return static_cast<DeviceId>(i);
  return std::nullopt;
}

void Core::flush_locked(DeviceId device, Queue& q) {
  if (q.ops.empty()) return;
  std::vector<OperationIr> batch;
  batch.reserve(std::min<size_t>(options_.max_batch, 64));
  batch.swap(q.ops);
  caf::anon_send(router_, submit_atom::value, device, std::move(batch));
}

void Core::submit(DeviceId device, OperationIr op) {
  auto& q = *queues_.at(device);
  bool arm = false;
  {
    std::lock_guard lock(q.mutex);
    if (closed()) return;
    q.ops.push_back(std::move(op));
    if (q.ops.size() >= options_.max_batch)
      flush_locked(device, q);
    else
      arm = q.ops.size() == 1;
  }
  if (arm) {
    std::lock_guard lock(flusher_mutex_);
    if (!flusher_armed_) {
      flusher_armed_ = true;
      flusher_wake_.notify_one();
    }
  }
}

void Core::flush(DeviceId device) {
  auto& q = *queues_.at(device);
  std::lock_guard lock(q.mutex);
  flush_locked(device, q);
}

void Core::flush_all() {
  for (DeviceId d = 0; d < queues_.size(); ++d) flush(d);
}

void Core::flusher_loop() {
  std::unique_lock lock(flusher_mutex_);
  for (;;) {
    flusher_wake_.wait(lock, [&] { return flusher_stop_ || flusher_armed_; });
    if (flusher_stop_) return;
    // Let the batch fill for one interval, then send whatever is queued.
    flusher_wake_.wait_for(lock, options_.flush_interval, [&] { return flusher_stop_; });
    flusher_armed_ = false;
    lock.unlock();
    flush_all();
    lock.lock();
  }
}

Tensor Core::emit(DeviceId device, const TensorIr& ir, OperationIr op) {
  submit(device, std::move(op));
  TensorIr meta{ir.id, ir.shape, ir.dtype, TensorStatus::read_only};
  return Tensor(std::make_shared<TensorHandle>(shared_from_this(), device, std::move(meta)));
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
  system_->spawn([promise, convert, weak, box, xs...](caf::event_based_actor* self, router_actor router) mutable {
    self->request(router, caf::infinite, xs...)
        .then(
              [promise, convert, box](Reply& r) mutable {
                box->reset();  // queue the drop before the caller sees the value
                convert(promise, r);
              },
              [promise, weak, box](caf::error& e) mutable {
                box->reset();
                auto core = weak.lock();
                if (core && core->closed() && describe(e).code == Errc::device_lost)
                  promise.set_error(std::make_exception_ptr(Error(Errc::runtime_closed, "the runtime shut down before the reply")));
                else
                  promise.set_error(to_exception(e));
              });
  }, router_);
  return fut;
}

Future<TensorData> Core::read(DeviceId device, TensorId id, std::shared_ptr<const void> keep) {
  flush(device);
  return ask<TensorData, TensorData>(std::move(keep),
                                     [](Promise<TensorData>& p, TensorData& d) { p.set_value(std::move(d)); },
                                     read_atom::value, device, id);
}

Future<void> Core::sync(DeviceId device) {
  flush(device);
  return ask<done_atom, void>(nullptr, [](Promise<void>& p, done_atom) { p.set_value(); }, sync_atom::value, device);
}

Future<DeviceStats> Core::stats(DeviceId device) {
  flush(device);
  return ask<DeviceStats, DeviceStats>(nullptr, [](Promise<DeviceStats>& p, DeviceStats& s) { p.set_value(std::move(s)); },
                                       stats_atom::value, device);
}

void Core::bridge(DeviceId src, TensorId src_id, DeviceId dst, const TensorIr& dst_ir) {
  // Both queues go out first: the export must follow the ops producing the
  // source, and the expect must precede ops on the result.
  auto& qs = *queues_.at(src);
  auto& qd = *queues_.at(dst);
  std::scoped_lock lock(qs.mutex, qd.mutex);
  if (closed()) return;
  flush_locked(src, qs);
  if (dst != src) flush_locked(dst, qd);
  caf::anon_send(router_, bridge_atom::value, src, src_id, dst, dst_ir);
}

void Core::close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  // Send what is queued (submit refuses new work now that closed_ is set).
  for (DeviceId d = 0; d < queues_.size(); ++d) {
    std::lock_guard lock(queues_[d]->mutex);
    flush_locked(d, *queues_[d]);
  }
  {
    std::lock_guard lock(flusher_mutex_);
    flusher_stop_ = true;
  }
  flusher_wake_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  if (!system_) return;
  {
    // Let in-flight work finish (bounded), so outstanding reads complete.
    caf::scoped_actor self{*system_};
    for (DeviceId d = 0; d < devices_.size(); ++d)
      self->request(router_, std::chrono::seconds(10), sync_atom::value, d)
          .receive([](done_atom) {}, [](caf::error&) {});
  }
  for (auto& r : runners_) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
  runners_.clear();
  router_ = nullptr;
  system_.reset();
}

}  // namespace switchyard::detail
