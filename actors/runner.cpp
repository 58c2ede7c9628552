// SPDX-License-Identifier: Apache-2.0
#include "actors/runner.hpp"

#include <deque>
#include <functional>
#include <new>
#include <unordered_map>

#include <caf/all.hpp>

#include "switchyard/messages/op_rules.hpp"

namespace switchyard::actors {
namespace {

using backends::BufferPtr;

struct Entry {
  enum class State : uint8_t { ready, pending, failed };
  TensorIr meta;
  State state = State::pending;
  BufferPtr buffer;
  caf::error error;
  uint32_t users = 0;     // deferred ops that read it
  bool released = false;  // the client holds no reference any more
  caf::node_id owner;     // node of the client that created it (freed when that node goes)
  std::vector<std::function<void(Entry&)>> waiters;
};

struct RunnerState {
  std::string name;
  caf::node_id sender;  // node of the message being handled: owner of what it creates
  std::shared_ptr<backends::Backend> backend;
  std::unordered_map<TensorId, Entry> table;
  std::deque<OperationIr> deferred;  // ops waiting on pending inputs, in order
  std::unordered_map<TensorId, caf::expected<TensorData>> early_imports;
  std::vector<caf::typed_response_promise<done_atom>> syncs;
  DeviceStats stats;
  uint64_t live_bytes = 0;
  std::shared_ptr<Tracer> tracer;  // null: tracing off
  uint32_t track = 0;
  std::shared_ptr<std::atomic<uint64_t>> batches_done;  // null: nobody counts
  std::chrono::milliseconds idle_trim_after{0};
  bool busy_since_idle_check = false;  // an op came in since the last idle timer
  bool idle_timer_armed = false;
};

using Self = runner_actor::stateful_pointer<RunnerState>;

std::string id_str(TensorId id) { return "tensor #" + std::to_string(id.value); }

caf::error on_device(const RunnerState& st, const caf::error& err) {
  auto info = describe(err);
  return make_error(info.code, st.name + ": " + info.message);
}

void erase_if_unused(RunnerState& st, std::unordered_map<TensorId, Entry>::iterator it) {
  auto& e = it->second;
  if (e.released && e.users == 0 && e.waiters.empty() && e.state != Entry::State::pending) {
    if (e.buffer) st.live_bytes -= e.buffer->size();
    st.table.erase(it);
  }
}

void release(RunnerState& st, TensorId id) {
  auto it = st.table.find(id);
  if (it == st.table.end()) return;  // never created here (e.g. its op was rejected)
  it->second.released = true;
  erase_if_unused(st, it);
}

void resolve(RunnerState& st, TensorId id, BufferPtr buffer, caf::error err) {
  auto it = st.table.find(id);
  if (it == st.table.end()) return;
  auto& e = it->second;
  if (err) {
    e.state = Entry::State::failed;
    e.error = std::move(err);
  } else {
    e.state = Entry::State::ready;
    e.buffer = std::move(buffer);
    st.live_bytes += e.buffer->size();
  }
  auto waiters = std::move(e.waiters);
  e.waiters.clear();
  for (auto& w : waiters) w(e);
  it = st.table.find(id);
  if (it != st.table.end()) erase_if_unused(st, it);
}

// Creates (or, for a deferred op, finds) the entries of an op's outputs.
bool declare_outputs(RunnerState& st, OperationIr& op, bool pending_exists) {
  bool ok = true;
  op.each_output([&](const TensorIr& t) {
    auto [it, inserted] = st.table.try_emplace(t.id);
    if (!inserted && !pending_exists) {
      ok = false;
      return;
    }
    it->second.meta = t;
    it->second.state = Entry::State::pending;
    it->second.owner = st.sender;
  });
  return ok;
}

void fail_outputs(RunnerState& st, OperationIr& op, const caf::error& err) {
  ++st.stats.ops_failed;
  op.each_output([&](const TensorIr& t) { resolve(st, t.id, nullptr, err); });
}

// Releases inputs the client marked as used for the last time.
void release_last_uses(RunnerState& st, OperationIr& op) {
  op.each_input([&](const TensorIr& t) {
    if (t.status == TensorStatus::read_write) release(st, t.id);
  });
}

// One slice per op: name, operand shapes and dtypes, output bytes.
void trace_op(RunnerState& st, OperationIr& op, Tracer::Clock::time_point begin, const caf::error& err) {
  auto end = Tracer::Clock::now();
  std::string ins, outs;
  size_t bytes = 0;
  op.each_input([&](const TensorIr& t) {
    ins += (ins.empty() ? "" : ", ") + t.shape.to_string() + " " + std::string(name_of(t.dtype)) +
           (t.status == TensorStatus::read_write ? " (last use)" : "");
  });
  op.each_output([&](const TensorIr& t) {
    outs += (outs.empty() ? "" : ", ") + t.shape.to_string() + " " + std::string(name_of(t.dtype));
    bytes += t.bytes();
  });
  std::string args = "\"inputs\":\"" + json_escape(ins) + "\",\"outputs\":\"" + json_escape(outs) +
                     "\",\"bytes\":" + std::to_string(bytes);
  if (err) args += ",\"error\":\"" + json_escape(describe(err).message) + "\"";
  st.tracer->slice(st.track, op.name(), begin, end, args);
}

void run(RunnerState& st, OperationIr& op) {
  std::array<BufferPtr, 4> small_in;
  std::vector<BufferPtr> many_in;
  size_t n_in = 0;
  op.each_input([&](const TensorIr&) { ++n_in; });
  std::span<BufferPtr> ins = n_in <= small_in.size()
                                 ? std::span<BufferPtr>(small_in.data(), n_in)
                                 : std::span<BufferPtr>((many_in.resize(n_in), many_in.data()), n_in);
  size_t i = 0;
  caf::error err;
  op.each_input([&](const TensorIr& t) {
    auto it = st.table.find(t.id);
    if (it == st.table.end()) {
      if (!err)
        err = make_error(Errc::unknown_tensor,
                         st.name + ": " + op.name() + ": input " + id_str(t.id) + " does not exist");
    } else if (it->second.state == Entry::State::failed) {
      if (!err) err = it->second.error;  // poison spreads unchanged
    } else if (it->second.meta.shape != t.shape || it->second.meta.dtype != t.dtype) {
      if (!err)
        err = make_error(Errc::protocol_error, st.name + ": " + op.name() + ": input " + id_str(t.id) + " is " +
                                                   it->second.meta.shape.to_string() + " " +
                                                   std::string(name_of(it->second.meta.dtype)) + ", op says " +
                                                   t.shape.to_string() + " " + std::string(name_of(t.dtype)));
    } else {
      ins[i] = it->second.buffer;
    }
    ++i;
  });
  // The table's references go first, so a last-use buffer can be reused.
  release_last_uses(st, op);
  if (err) {
    fail_outputs(st, op, err);
    return;
  }
  if (!st.backend->supports(op)) {
    fail_outputs(st, op,
                 make_error(Errc::unsupported, st.name + ": " + op.name() + " is not supported for these dtypes"));
    return;
  }
  std::array<BufferPtr, 1> outs;
  Tracer::Clock::time_point begin;
  if (st.tracer) begin = Tracer::Clock::now();
  try {
    err = st.backend->execute(op, ins, outs);
  } catch (const std::bad_alloc&) {
    err = make_error(Errc::out_of_memory, op.name() + ": out of host memory");
  } catch (const std::exception& ex) {
    err = make_error(Errc::kernel_failure, op.name() + ": " + ex.what());
  }
  if (!err && !outs[0]) err = make_error(Errc::kernel_failure, op.name() + ": backend produced no output");
  if (st.tracer) trace_op(st, op, begin, err);
  if (err) {
    fail_outputs(st, op, on_device(st, err));
    return;
  }
  ++st.stats.ops_executed;
  size_t o = 0;
  op.each_output([&](const TensorIr& t) { resolve(st, t.id, o++ == 0 ? std::move(outs[0]) : nullptr, {}); });
}

bool has_pending_input(RunnerState& st, OperationIr& op) {
  bool pending = false;
  op.each_input([&](const TensorIr& t) {
    auto it = st.table.find(t.id);
    pending = pending || (it != st.table.end() && it->second.state == Entry::State::pending);
  });
  return pending;
}

void complete_syncs(Self self) {
  auto& st = self->state;
  if (!st.deferred.empty() || st.syncs.empty()) return;
  auto err = st.backend->synchronize();
  for (auto& p : st.syncs) {
    if (err)
      p.deliver(on_device(st, err));
    else
      p.deliver(done_atom::value);
  }
  st.syncs.clear();
}

// Runs deferred ops whose inputs have all arrived, keeping their order.
void drain(Self self) {
  auto& st = self->state;
  for (auto it = st.deferred.begin(); it != st.deferred.end();) {
    if (has_pending_input(st, *it)) {
      ++it;
      continue;
    }
    OperationIr op = std::move(*it);
    it = st.deferred.erase(it);
    op.each_input([&](const TensorIr& t) {
      auto e = st.table.find(t.id);
      if (e != st.table.end()) {
        --e->second.users;
      }
    });
    run(st, op);
    op.each_input([&](const TensorIr& t) {
      auto e = st.table.find(t.id);
      if (e != st.table.end()) erase_if_unused(st, e);
    });
  }
  complete_syncs(self);
}

void submit_one(Self self, OperationIr& op) {
  auto& st = self->state;
  if (auto* drop = std::get_if<DropOp>(&op.op)) {
    release(st, drop->id);
    return;
  }
  if (auto* seed = std::get_if<SeedOp>(&op.op)) {
    st.backend->seed(seed->seed);
    return;
  }
  if (!declare_outputs(st, op, false)) {
    ++st.stats.ops_failed;
    release_last_uses(st, op);
    return;  // duplicate output id: a misbehaving client; the existing tensor stays intact
  }
  if (auto err = validate(op)) {
    release_last_uses(st, op);
    fail_outputs(st, op, on_device(st, err));
    return;
  }
  if (has_pending_input(st, op)) {
    op.each_input([&](const TensorIr& t) {
      auto it = st.table.find(t.id);
      if (it != st.table.end()) ++it->second.users;
    });
    st.deferred.push_back(std::move(op));
    return;
  }
  run(st, op);
}

// Calls `f(entry)` once the tensor is ready or failed (now, if it is).
template <class F>
void when_resolved(Self self, TensorId id, F f, const std::function<void(caf::error)>& missing) {
  auto& st = self->state;
  auto it = st.table.find(id);
  if (it == st.table.end()) {
    missing(make_error(Errc::unknown_tensor,
                       st.name + ": " + id_str(id) + " does not exist (dropped, or never created here)"));
    return;
  }
  if (it->second.state == Entry::State::pending) {
    it->second.waiters.emplace_back(std::move(f));
    return;
  }
  f(it->second);
}

void read_entry(Self self, Entry& e, std::function<void(caf::expected<TensorData>)> done) {
  if (e.state == Entry::State::failed) {
    done(e.error);
    return;
  }
  self->state.backend->to_data(e.meta, e.buffer, std::move(done));
}

void import(Self self, TensorId id, caf::expected<TensorData> data) {
  auto& st = self->state;
  auto it = st.table.find(id);
  if (it == st.table.end() || it->second.state != Entry::State::pending) {
    // The data overtook its expect message (different senders): keep it.
    st.early_imports.emplace(id, std::move(data));
    return;
  }
  const auto& meta = it->second.meta;
  if (!data) {
    resolve(st, id, nullptr, data.error());
  } else if (auto err = validate_data(*data, meta.shape, meta.dtype)) {
    resolve(st, id, nullptr,
            make_error(Errc::protocol_error, st.name + ": import of " + id_str(id) + ": " + describe(err).message));
  } else {
    st.stats.bytes_bridged_in += data->bytes.size();
    if (st.tracer) {
      auto now = Tracer::Clock::now();
      st.tracer->slice(st.track, "import", now, now + std::chrono::microseconds(1),
                       "\"bytes\":" + std::to_string(data->bytes.size()));
      st.tracer->flow_end(st.track, id.value, now);
    }
    auto buffer = st.backend->from_data(meta, std::move(*data));
    if (buffer)
      resolve(st, id, std::move(*buffer), {});
    else
      resolve(st, id, nullptr, on_device(st, buffer.error()));
  }
  drain(self);
}

runner_actor::behavior_type runner(Self self, std::string name, std::shared_ptr<backends::Backend> backend,
                                   RunnerHooks hooks) {
  self->state.name = std::move(name);
  self->state.tracer = std::move(hooks.tracer);
  self->state.track = hooks.track;
  self->state.batches_done = std::move(hooks.batches_done);
  self->state.idle_trim_after = hooks.idle_trim_after;
  if (self->state.tracer) self->state.tracer->name_track(hooks.track, self->state.name);
  self->state.backend = std::move(backend);
  self->state.stats.device = self->state.name;
  // The backend wakes us from its own threads; poll runs its completions here.
  self->state.backend->set_waker([handle = runner_actor{self}] { caf::anon_send(handle, poll_atom::value); });
  return {
      [self](submit_atom, std::vector<OperationIr>& ops) {
        self->state.sender = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
        for (auto& op : ops) {
          try {
            submit_one(self, op);
          } catch (const std::exception& ex) {
            // A runner must outlive any op: report and keep serving.
            fail_outputs(self->state, op, make_error(Errc::kernel_failure, self->state.name + ": " + ex.what()));
          }
        }
        complete_syncs(self);
        if (self->state.batches_done) self->state.batches_done->fetch_add(1, std::memory_order_release);
        auto& st = self->state;
        st.busy_since_idle_check = true;
        if (st.idle_trim_after.count() > 0 && !st.idle_timer_armed) {
          st.idle_timer_armed = true;
          self->delayed_send(self, st.idle_trim_after, idle_atom::value);
        }
      },
      [self](idle_atom) {
        // One timer at a time, re-armed while ops keep coming: an idle
        // period of at least idle_trim_after (and under twice that) trims.
        auto& st = self->state;
        if (st.busy_since_idle_check) {
          st.busy_since_idle_check = false;
          self->delayed_send(self, st.idle_trim_after, idle_atom::value);
          return;
        }
        st.idle_timer_armed = false;
        st.backend->trim();
      },
      [self](trim_atom) -> caf::result<done_atom> {
        // Ordered after every op received before it, like a sync.
        self->state.backend->trim();
        return done_atom::value;
      },
      [self](read_atom, TensorId id) -> caf::result<TensorData> {
        auto rp = self->make_response_promise<TensorData>();
        auto deliver = [rp](caf::expected<TensorData> r) mutable {
          if (r)
            rp.deliver(std::move(*r));
          else
            rp.deliver(std::move(r.error()));
        };
        when_resolved(
            self, id, [self, deliver](Entry& e) { read_entry(self, e, deliver); },
            [rp](caf::error err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
      [self](sync_atom) -> caf::result<done_atom> {
        auto rp = self->make_response_promise<done_atom>();
        self->state.syncs.push_back(rp);
        complete_syncs(self);
        return rp;
      },
      [self](stats_atom) {
        auto& st = self->state;
        DeviceStats s = st.stats;
        s.queue_depth = st.deferred.size();
        s.live_handles = st.table.size();
        s.live_bytes = st.live_bytes;
        s.cached_bytes = st.backend->memory().bytes_cached;
        return s;
      },
      [self](expect_atom, TensorIr& ir) {
        auto& st = self->state;
        auto [it, inserted] = st.table.try_emplace(ir.id);
        if (!inserted) return;  // duplicate id from a misbehaving client
        it->second.meta = ir;
        it->second.state = Entry::State::pending;
        it->second.owner = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
        if (auto early = st.early_imports.find(ir.id); early != st.early_imports.end()) {
          auto data = std::move(early->second);
          st.early_imports.erase(early);
          import(self, ir.id, std::move(data));
        }
      },
      [self](import_atom, TensorId id, TensorData& data) { import(self, id, std::move(data)); },
      [self](import_atom, TensorId id, caf::error& err) { import(self, id, std::move(err)); },
      [self](export_atom, TensorId id, caf::actor& target, TensorId dst) -> caf::result<done_atom> {
        auto rp = self->make_response_promise<done_atom>();
        // A failure goes back to the requester (the client's router), which
        // names the device as its client knows it and fails the import.
        auto send = [self, target, dst, rp](caf::expected<TensorData> r) mutable {
          if (!r) {
            rp.deliver(std::move(r.error()));
            return;
          }
          auto& st = self->state;
          st.stats.bytes_bridged_out += r->bytes.size();
          if (st.tracer) {
            auto now = Tracer::Clock::now();
            st.tracer->slice(st.track, "export", now, now + std::chrono::microseconds(1),
                             "\"bytes\":" + std::to_string(r->bytes.size()));
            st.tracer->flow_begin(st.track, dst.value, now);
          }
          self->send(caf::actor_cast<runner_actor>(target), import_atom::value, dst, std::move(*r));
          rp.deliver(done_atom::value);
        };
        when_resolved(
            self, id, [self, send](Entry& e) { read_entry(self, e, send); },
            [send](caf::error err) mutable { send(std::move(err)); });
        return rp;
      },
      [self](poll_atom) { self->state.backend->poll(); },
      [self](detach_atom, const caf::node_id& client) {
        // Only the worker itself may say a client is gone; a remote peer
        // could otherwise free another client's tensors.
        if (!self->current_sender() || self->current_sender()->node() != self->node()) return;
        auto& st = self->state;
        std::vector<TensorId> owned;
        for (auto& [id, e] : st.table)
          if (e.owner == client) owned.push_back(id);
        for (auto id : owned) release(st, id);
      },
  };
}

}  // namespace

runner_actor spawn_runner(caf::actor_system& sys, std::string device_name, std::shared_ptr<backends::Backend> backend,
                          RunnerHooks hooks) {
  return sys.spawn<caf::detached>(runner, std::move(device_name), std::move(backend), std::move(hooks));
}

}  // namespace switchyard::actors
