// SPDX-License-Identifier: Apache-2.0
#include "actors/runner.hpp"

#include <algorithm>
#include <atomic>
#include <boost/container/small_vector.hpp>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <caf/all.hpp>

#include "actors/fusion.hpp"
#include "actors/tensor_table.hpp"
#include "switchyard/messages/op_rules.hpp"
#include "switchyard/messages/spin_wait.hpp"

namespace switchyard::actors {
namespace {

using backends::BufferPtr;

struct Entry {
  enum class State : uint8_t { ready, pending, failed };
  Entry() = default;
  // An op's output, built in place: default-constructing the entry and then
  // assigning its TensorIr and owner cost ~40 instructions more per op.
  Entry(const TensorIr& t, uint32_t creator) : meta(t), owner(creator) {}
  // What few entries ever need, out of line: every op makes and destroys
  // an entry, and an empty caf::error and waiter list in each cost ~40
  // instructions per op (caf::error's constructor and destructor are calls
  // into libcaf).
  struct Rare {
    caf::error error;                                  // failed: why
    std::vector<std::function<void(Entry&)>> waiters;  // pending: called once it resolves
  };
  [[nodiscard]] Rare& rare_part() {
    if (!rare) rare = std::make_unique<Rare>();
    return *rare;
  }
  [[nodiscard]] bool has_waiters() const noexcept { return rare && !rare->waiters.empty(); }
  [[nodiscard]] const caf::error& error() const noexcept { return rare->error; }  // failed only

  TensorIr meta;
  State state = State::pending;
  BufferPtr buffer;
  uint32_t users = 0;     // deferred ops that read it
  bool released = false;  // the client holds no reference any more
  uint32_t owner = 0;     // number of the client node that created it (freed when that node goes)
  std::unique_ptr<Rare> rare;
};

// A read handed to the backend, answered once: by the backend's callback,
// by the failure it threw, or by the runner stopping first.
struct Reader {
  std::function<void(caf::expected<TensorData>)> done;
  std::string device;  // failures name it, as an op's do (a custom backend's message may not)
  std::atomic<bool> answered{false};
};

struct RunnerState {
  std::string name;
  // Client nodes that created tensors here, by number: an entry keeps the
  // number, as copying a caf::node_id is an atomic count each way per op.
  std::unordered_map<caf::node_id, uint32_t> owners;
  uint32_t next_owner = 1;
  // Client nodes detached lately, oldest first. What such a node still had
  // on the wire when it went arrives after its detach (BASP and the worker's
  // entry are different senders): creating entries for it would leave them
  // owned by a node nobody frees any more, so it is dropped. A node's
  // messages in flight arrive within moments of its going, hence bounded.
  std::deque<caf::node_id> detached_order;
  std::unordered_set<caf::node_id> detached;
  static constexpr size_t kDetachedKept = 1024;
  uint32_t sender = 0;  // number of the node of the message being handled: owner of what it creates
  std::shared_ptr<backends::Backend> backend;
  TensorTable<Entry> table{std::random_device{}() * 0x9E3779B97F4A7C15ULL ^ std::random_device{}()};
  std::deque<OperationIr> deferred;  // ops waiting on pending inputs, in order
  // Imports that overtook their expect (different senders), with the node
  // that sent them where known, so they go with it.
  struct EarlyImport {
    caf::expected<TensorData> data;
    caf::node_id owner;
    bool bridged = true;
    uint64_t bytes = 0;  // counted in staged_bytes
  };
  // Records of tensors and bytes of imports in transit that peers may make
  // this runner hold (RunnerHooks::max_records, max_staged_bytes; 0: none),
  // and the bytes staged now: parts received, early imports' data.
  uint64_t max_records = 0;
  uint64_t max_staged_bytes = 0;
  uint64_t staged_bytes = 0;
  // Reads, bridges and syncs waiting on a pending tensor or an import; as
  // many as max_records may wait (a peer's reads of a tensor whose data it
  // never sends would otherwise pile up for as long as it stays).
  uint64_t waiting_requests = 0;
  std::unordered_map<TensorId, EarlyImport> early_imports;
  // Imports arriving in parts: the tensor's block, taken from the device at
  // the first part (counted by its memory limit; of a block never filled
  // only the pages written are resident), and how much came; freed with the
  // sender's node.
  struct PartialImport {
    Shape shape;
    DType dtype = DType::f32;
    uint64_t total = 0;
    uint64_t received = 0;
    bool bridge = true;
    caf::node_id owner;
    Bytes block;  // the whole tensor's, from the device (Backend::host_block)
  };
  std::unordered_map<TensorId, PartialImport> partial_imports;
  // Reads served in parts: the data read at offset 0, kept until its last
  // part is served (once per reader) or the tensor goes.
  struct ReadSnapshot {
    TensorData data;
    uint32_t readers = 0;
  };
  std::unordered_map<TensorId, ReadSnapshot> read_snapshots;
  size_t transfer_chunk_bytes = 0;
  std::chrono::milliseconds transfer_timeout{120000};
  BulkSend bulk_send;                               // RunnerHooks::bulk_send
  BulkExport bulk_export;                           // RunnerHooks::bulk_export
  std::function<void(const std::string&)> on_stop;  // RunnerHooks::on_stop
  // Reads the backend has not answered yet (see read_entry), and how many
  // were left at the last pruning.
  std::vector<std::weak_ptr<Reader>> unanswered_reads;
  size_t unanswered_kept = 0;
  // Waiting syncs, answered once nothing is deferred and every import
  // expected before them has arrived or failed (a request's response
  // promise, or a local client's reply), with the import count at their
  // arrival.
  struct WaitingSync {
    std::function<void(const caf::error&)> done;
    uint64_t imports_before = 0;
  };
  std::vector<WaitingSync> syncs;
  // Imports expected and not yet arrived, by the order of their expect:
  // an upload's bytes (over a bulk lane) or a bridge's may come after a
  // later sync, which still waits for them.
  uint64_t imports_expected = 0;
  std::unordered_map<TensorId, uint64_t> awaited_imports;
  std::set<uint64_t> awaited_order;
  DeviceStats stats;
  uint64_t live_bytes = 0;
  std::shared_ptr<Tracer> tracer;  // null: tracing off
  uint32_t track = 0;
  std::shared_ptr<std::atomic<uint64_t>> batches_done;  // null: nobody counts
  bool fuse_elementwise = true;
  std::shared_ptr<const std::atomic<bool>> abandon;  // RunnerHooks::abandon
  Logger log;
  std::chrono::milliseconds idle_trim_after{0};
  bool busy_since_idle_check = false;  // an op came in since the last idle timer
  bool idle_timer_armed = false;
  SpinWait linger;  // see linger()
};

using Self = runner_actor::stateful_pointer<RunnerState>;

// After a message of a client in this process, before the runner parks:
// such a client usually sends its next message within microseconds (the
// read after a batch, the next request after a reply), and a parked
// runner costs it a cross-core wake-up (switchyard/messages/spin_wait.hpp).
void linger(Self self) {
  self->state.linger([self] { return !self->mailbox().empty(); });
}

// The number entries keep for client node `node` (0: none); nullopt for a
// node that was detached (its late messages create nothing).
std::optional<uint32_t> owner_number(RunnerState& st, const caf::node_id& node) {
  if (!node) return 0;
  if (auto known = st.owners.find(node); known != st.owners.end()) return known->second;
  if (st.detached.contains(node)) return std::nullopt;
  st.owners.emplace(node, st.next_owner);
  return st.next_owner++;
}

caf::node_id sender_node(Self self) { return self->current_sender() ? self->current_sender()->node() : caf::node_id{}; }

std::string id_str(TensorId id) { return "tensor #" + std::to_string(id.value); }

caf::error on_device(const RunnerState& st, const caf::error& err) {
  auto info = describe(err);
  return make_error(info.code, st.name + ": " + info.message, info.tensor);
}

// Room for `more` records under RunnerHooks::max_records: `full` at the
// limit (what would be made fails with out_of_memory, a record that says
// why), `none` past it by a sixteenth (nothing is recorded: a peer that
// ignores the failures cannot grow the table of failures either).
enum class Room : uint8_t { free, full, none };

uint64_t records(const RunnerState& st) {
  return st.table.size() + st.early_imports.size() + st.partial_imports.size();
}

Room record_room(const RunnerState& st, uint64_t more) {
  if (st.max_records == 0) return Room::free;
  const uint64_t wanted = records(st) + more;
  if (wanted <= st.max_records) return Room::free;
  return wanted <= st.max_records + st.max_records / 16 + 16 ? Room::full : Room::none;
}

caf::error records_full(const RunnerState& st, const std::string& what) {
  return make_error(Errc::out_of_memory, st.name + ": " + what + ": the device holds " + std::to_string(records(st)) +
                                             " tensors, its limit is " + std::to_string(st.max_records) +
                                             " (drop tensors to make room)");
}

caf::error staging_full(const RunnerState& st, const std::string& what, uint64_t bytes) {
  return make_error(Errc::out_of_memory, st.name + ": " + what + ": " + std::to_string(bytes) +
                                             " more bytes in transit would pass the device's limit of " +
                                             std::to_string(st.max_staged_bytes) + " (" +
                                             std::to_string(st.staged_bytes) + " held)");
}

caf::error requests_full(const RunnerState& st, const std::string& what) {
  return make_error(Errc::out_of_memory, st.name + ": " + what + ": " + std::to_string(st.waiting_requests) +
                                             " requests already wait on tensors not ready yet, the device's limit");
}

bool staging_fits(const RunnerState& st, uint64_t bytes) {
  return st.max_staged_bytes == 0 || (bytes <= st.max_staged_bytes && st.staged_bytes <= st.max_staged_bytes - bytes);
}

void erase_if_unused(RunnerState& st, TensorId id, Entry& e) {
  if (e.released && e.users == 0 && !e.has_waiters() && e.state != Entry::State::pending) {
    if (e.buffer) st.live_bytes -= e.buffer->size();
    st.table.erase(id);
  }
}

void release(RunnerState& st, TensorId id) {
  if (!st.read_snapshots.empty()) st.read_snapshots.erase(id);
  auto* e = st.table.find(id);
  if (e == nullptr) return;  // never created here (e.g. its op was rejected)
  e->released = true;
  erase_if_unused(st, id, *e);
}

// Calls the waiters of entry `e` (tensor `id`), just resolved, then
// erases it if nobody needs it any more.
void settle(RunnerState& st, TensorId id, Entry& e) {
  if (!st.awaited_imports.empty()) {
    if (auto it = st.awaited_imports.find(id); it != st.awaited_imports.end()) {
      st.awaited_order.erase(it->second);
      st.awaited_imports.erase(it);
    }
  }
  if (!e.has_waiters()) {  // the usual case: nothing can have moved the entry
    erase_if_unused(st, id, e);
    return;
  }
  auto waiters = std::move(e.rare->waiters);
  e.rare->waiters.clear();
  st.waiting_requests -= waiters.size();
  for (auto& w : waiters) w(e);
  if (auto* again = st.table.find(id)) erase_if_unused(st, id, *again);
}

// Tensor `id` is ready with `buffer`. Apart from the failing overload
// below, so an op that succeeds builds and destroys no caf::error.
void resolve(RunnerState& st, TensorId id, BufferPtr buffer) {
  auto* e = st.table.find(id);
  if (e == nullptr) return;
  e->state = Entry::State::ready;
  e->buffer = std::move(buffer);
  st.live_bytes += e->buffer->size();
  settle(st, id, *e);
}

void resolve(RunnerState& st, TensorId id, BufferPtr buffer, caf::error err) {
  if (!err) {
    resolve(st, id, std::move(buffer));
    return;
  }
  auto* e = st.table.find(id);
  if (e == nullptr) return;
  e->state = Entry::State::failed;
  e->rare_part().error = std::move(err);
  settle(st, id, *e);
}

// Creates the entries of an op's outputs, pending; false if one exists.
bool declare_outputs(RunnerState& st, OperationIr& op) {
  bool ok = true;
  op.each_output([&](const TensorIr& t) { ok = st.table.try_emplace(t.id, t, st.sender).second && ok; });
  return ok;
}

// An op's own failure carries its first output's id (Error::tensor()), so
// whoever reads a dependent result can tell where it began; a failure that
// spread from an input keeps the id it came with.
caf::error failed_at(OperationIr& op, const caf::error& err) {
  auto info = describe(err);
  if (info.tensor) return err;
  TensorId first;
  op.each_output([&](const TensorIr& t) {
    if (!first) first = t.id;
  });
  return make_error(info.code, std::move(info.message), first);
}

void fail_outputs(RunnerState& st, OperationIr& op, const caf::error& err) {
  ++st.stats.ops_failed;
  op.each_output([&](const TensorIr& t) { resolve(st, t.id, nullptr, err); });
}

// An op failed here (debug), or inherited the failure of an input (trace:
// one failure may spread to many ops, and it was logged where it began).
void log_op_failure(const RunnerState& st, OperationIr& op, const caf::error& err, bool spread = false) {
  st.log.log(spread ? LogLevel::trace : LogLevel::debug, [&] {
    std::string outs;
    op.each_output([&](const TensorIr& t) { outs += (outs.empty() ? "" : ", ") + id_str(t.id); });
    return st.name + ": op " + op.name() + " (" + outs + ") failed" + (spread ? " with its input" : "") + ": " +
           describe(err).message;
  });
}

// Releases inputs the client marked as used for the last time.
void release_last_uses(RunnerState& st, OperationIr& op) {
  op.each_input([&](const TensorIr& t) {
    if (t.status == TensorStatus::read_write) release(st, t.id);
  });
}

// One slice per op: name, operand shapes and dtypes, output bytes.
void trace_op(RunnerState& st, OperationIr& op, Tracer::Clock::time_point begin, Tracer::Clock::time_point end,
              const caf::error& err, std::string_view extra_args = {}) {
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
  args += extra_args;
  st.tracer->slice(st.track, op.name(), begin, end, args);
}

// Backends report DeviceError values (the public, CAF-free interface); here,
// at the runner, they become the caf::error the protocol carries, with the
// same code and message.
caf::error to_caf(const backends::DeviceError& err) {
  return err ? make_error(err.code(), err.message()) : caf::error{};
}

// The exception being handled as an error about `what`. A backend may be a
// user's (backend.hpp) and throw anything; whatever it is fails the call,
// never the runner.
backends::DeviceError current_exception_error(const std::string& what) {
  try {
    throw;
  } catch (const HostAllocationFailed& ex) {
    return {Errc::out_of_memory, what + ": " + ex.what()};
  } catch (const std::bad_alloc&) {
    return {Errc::out_of_memory, what + ": out of host memory"};
  } catch (const std::exception& ex) {
    return {Errc::kernel_failure, what + ": " + ex.what()};
  } catch (...) {
    return {Errc::kernel_failure, what + ": the backend threw an exception that is not a std::exception"};
  }
}

// A backend call, its exceptions turned into errors naming what() (called
// only then: naming every op up front cost ~100 instructions per op).
template <class Name, class F>
backends::DeviceError guarded_call(const Name& what, F&& call) {
  try {
    return call();
  } catch (...) {
    return current_exception_error(what());
  }
}

template <class Name, class F>
caf::error guarded(const Name& what, F&& call) {
  return to_caf(guarded_call(what, std::forward<F>(call)));
}

// Whether the table's entry holds what an op says its input is (a peer's op
// may name a tensor by the wrong shape or dtype).
bool matches(const Entry& e, const TensorIr& t) { return e.meta.shape == t.shape && e.meta.dtype == t.dtype; }

// Why an op cannot run with the inputs the table holds (its first bad
// input), or nothing; `poisoned`: the error is that input's own failure.
caf::error input_error(const RunnerState& st, OperationIr& op, bool& poisoned) {
  caf::error err;
  op.each_input([&](const TensorIr& t) {
    if (err) return;
    const auto* e = st.table.find(t.id);
    if (e == nullptr) {
      err =
          make_error(Errc::unknown_tensor, st.name + ": " + op.name() + ": input " + id_str(t.id) + " does not exist");
    } else if (e->state == Entry::State::failed) {
      err = e->error();  // poison spreads unchanged
      poisoned = true;
    } else if (!matches(*e, t)) {
      err = make_error(Errc::protocol_error, st.name + ": " + op.name() + ": input " + id_str(t.id) + " is " +
                                                 e->meta.shape.to_string() + " " + std::string(name_of(e->meta.dtype)) +
                                                 ", op says " + t.shape.to_string() + " " +
                                                 std::string(name_of(t.dtype)));
    }
  });
  return err;
}

void fail_op(RunnerState& st, OperationIr& op, const caf::error& err, bool spread = false) {
  log_op_failure(st, op, err, spread);
  fail_outputs(st, op, spread ? err : failed_at(op, err));
}

// Whether the runtime's shutdown stopped waiting (RunnerHooks::abandon).
bool abandoned(const RunnerState& st) { return st.abandon && st.abandon->load(std::memory_order_relaxed); }

// Runs one op whose inputs have all resolved. Builds no caf::error and
// allocates nothing of its own unless the op fails or has more than four
// inputs: this is the per-op path (docs/PERFORMANCE.md).
void run(RunnerState& st, OperationIr& op) {
  if (abandoned(st)) {
    release_last_uses(st, op);
    fail_op(st, op, make_error(Errc::runtime_closed, st.name + ": the runtime shut down before " + op.name() + " ran"));
    return;
  }
  std::array<BufferPtr, 4> small_in;
  std::unique_ptr<BufferPtr[]> many_in;
  size_t n_in = 0;
  bool usable = true;
  auto gather = [&](BufferPtr* into, size_t room) {
    n_in = 0;
    op.each_input([&](const TensorIr& t) {
      if (n_in < room) {
        const auto* e = st.table.find(t.id);
        if (e != nullptr && e->state != Entry::State::failed && matches(*e, t))
          into[n_in] = e->buffer;
        else
          usable = false;
      }
      ++n_in;
    });
  };
  // One pass for the usual op of up to four inputs, a second for more.
  gather(small_in.data(), small_in.size());
  if (n_in > small_in.size()) {
    many_in = std::make_unique<BufferPtr[]>(n_in);
    gather(many_in.get(), n_in);
  }
  std::span<BufferPtr> ins(many_in ? many_in.get() : small_in.data(), n_in);
  if (!usable) {
    bool poisoned = false;
    auto err = input_error(st, op, poisoned);
    release_last_uses(st, op);
    fail_op(st, op, err, poisoned);
    return;
  }
  // The table's references go first, so a last-use buffer can be reused.
  release_last_uses(st, op);
  if (!st.backend->supports(op)) {
    fail_op(st, op, make_error(Errc::unsupported, st.name + ": " + op.name() + " is not supported for these dtypes"));
    return;
  }
  std::array<BufferPtr, 1> outs;
  Tracer::Clock::time_point begin;
  if (st.tracer) begin = Tracer::Clock::now();
  auto failure = guarded_call([&] { return op.name(); }, [&] { return st.backend->execute(op, ins, outs); });
  if (!failure && !outs[0]) failure = {Errc::kernel_failure, op.name() + ": backend produced no output"};
  if (st.tracer) trace_op(st, op, begin, Tracer::Clock::now(), to_caf(failure));
  if (failure) {
    fail_op(st, op, on_device(st, to_caf(failure)));
    return;
  }
  ++st.stats.ops_executed;
  size_t o = 0;
  op.each_output([&](const TensorIr& t) { resolve(st, t.id, o++ == 0 ? std::move(outs[0]) : nullptr); });
}

bool has_pending_input(RunnerState& st, OperationIr& op) {
  bool pending = false;
  op.each_input([&](const TensorIr& t) {
    auto it = st.table.find(t.id);
    pending = pending || (it != nullptr && it->state == Entry::State::pending);
  });
  return pending;
}

void complete_syncs(Self self) {
  auto& st = self->state;
  if (!st.deferred.empty() || st.syncs.empty()) return;
  // Syncs come in order, so those whose imports have all arrived lead.
  const uint64_t oldest_awaited = st.awaited_order.empty() ? UINT64_MAX : *st.awaited_order.begin();
  size_t ready = 0;
  while (ready < st.syncs.size() && st.syncs[ready].imports_before <= oldest_awaited) ++ready;
  if (ready == 0) return;
  auto err = guarded([] { return std::string("synchronize"); }, [&] { return st.backend->synchronize(); });
  if (err) {
    err = on_device(st, err);
    st.log.log(LogLevel::debug, [&] { return describe(err).message; });
  }
  std::vector<RunnerState::WaitingSync> done;
  if (ready == st.syncs.size()) {  // the usual case: all of them, no copy
    done = std::move(st.syncs);
    st.syncs.clear();
  } else {
    done.assign(std::make_move_iterator(st.syncs.begin()),
                std::make_move_iterator(st.syncs.begin() + static_cast<ptrdiff_t>(ready)));
    st.syncs.erase(st.syncs.begin(), st.syncs.begin() + static_cast<ptrdiff_t>(ready));
  }
  st.waiting_requests -= done.size();
  for (auto& sync : done) sync.done(err);
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
      if (e != nullptr) {
        --e->users;
      }
    });
    run(st, op);
    op.each_input([&](const TensorIr& t) {
      auto e = st.table.find(t.id);
      if (e != nullptr) erase_if_unused(st, t.id, *e);
    });
  }
  complete_syncs(self);
}

// `local`: from a client of this process (LocalBatch, or the ops a local
// read or sync carries), checked at the call already.
void submit_one(Self self, OperationIr& op, bool local) {
  auto& st = self->state;
  if (auto* drop = std::get_if<DropOp>(&op.op)) {
    release(st, drop->id);
    return;
  }
  if (auto* seed = std::get_if<SeedOp>(&op.op)) {
    st.backend->seed(seed->seed);
    return;
  }
  Room room = Room::free;
  if (st.max_records != 0) {
    uint64_t outputs = 0;
    op.each_output([&](const TensorIr&) { ++outputs; });
    room = record_room(st, outputs);
    if (room == Room::none) {
      ++st.stats.ops_failed;
      st.log.log(LogLevel::debug, [&] { return describe(records_full(st, "op " + op.name() + " refused")).message; });
      release_last_uses(st, op);
      return;
    }
  }
  if (!declare_outputs(st, op)) {
    ++st.stats.ops_failed;
    st.log.log(LogLevel::debug,
               [&] { return st.name + ": op " + op.name() + " refused: it names an output id that exists"; });
    release_last_uses(st, op);
    return;  // duplicate output id: a misbehaving client; the existing tensor stays intact
  }
  if (room == Room::full) {
    release_last_uses(st, op);
    fail_op(st, op, records_full(st, op.name()));
    return;
  }
  if (auto err = local ? validate_local(op) : validate(op)) {
    release_last_uses(st, op);
    err = on_device(st, err);
    log_op_failure(st, op, err);
    fail_outputs(st, op, failed_at(op, err));
    return;
  }
  if (has_pending_input(st, op)) {
    op.each_input([&](const TensorIr& t) {
      auto it = st.table.find(t.id);
      if (it != nullptr) ++it->users;
    });
    st.deferred.push_back(std::move(op));
    return;
  }
  run(st, op);
}

// Runs ops[first, ...) as one fused chain when the fusion pass finds one
// there (actors/fusion.hpp); returns how many ops it ran (0: none). The
// chain's intermediates never enter the table: nobody but the chain can
// name them. Each op still counts, and traces, as run.
size_t run_chain(RunnerState& st, std::span<OperationIr> ops, size_t first, bool local) {
  auto find = [&st](TensorId id) { return st.table.find(id); };
  ChainContext ctx{*st.backend,
                   [&](const TensorIr& t) {
                     auto it = find(t.id);
                     return it != nullptr && it->state == Entry::State::ready && matches(*it, t);
                   },
                   [&](TensorId id) { return find(id) == nullptr; }, local};
  // Near the record limit every op goes alone, through submit_one's check.
  if (st.max_records != 0 && records(st) + 1 >= st.max_records) return 0;
  auto chain = find_chain(ops, first, ctx);
  if (!chain) return 0;
  auto chain_ops = ops.subspan(first, chain->size);
  // (In place for the usual few inputs: a chain per batch of a model.)
  boost::container::small_vector<BufferPtr, 8> ins;
  for (const auto& t : chain->inputs) ins.push_back(find(t.id)->buffer);
  // The table's references go first, so a last-use buffer can be reused.
  for (auto& op : chain_ops) release_last_uses(st, op);
  declare_outputs(st, chain_ops.back());
  BufferPtr out;
  const auto begin = st.tracer ? Tracer::Clock::now() : Tracer::Clock::time_point{};
  auto err = guarded(
      [&] { return chain_ops.back().name() + " (fused chain of " + std::to_string(chain_ops.size()) + " ops)"; },
      [&] {
        return st.backend->execute_fused(chain_ops, chain->inputs, std::span<BufferPtr>(ins.data(), ins.size()), out);
      });
  if (!err && !out) err = make_error(Errc::kernel_failure, "fused chain: backend produced no output");
  if (st.tracer) {
    // The chain's time, shared evenly: one slice per op, as unfused.
    const auto step = (Tracer::Clock::now() - begin) / static_cast<int64_t>(chain_ops.size());
    for (size_t k = 0; k < chain_ops.size(); ++k)
      trace_op(st, chain_ops[k], begin + step * static_cast<int64_t>(k), begin + step * static_cast<int64_t>(k + 1),
               err, ",\"fused\":\"" + std::to_string(k + 1) + " of " + std::to_string(chain_ops.size()) + "\"");
  }
  if (err) {
    // Named by the chain's one output: its intermediates exist nowhere.
    err = failed_at(chain_ops.back(), on_device(st, err));
    log_op_failure(st, chain_ops.back(), err);
    for (auto& op : chain_ops) fail_outputs(st, op, err);  // counts each; only the last output exists
    return chain_ops.size();
  }
  st.stats.ops_executed += chain_ops.size();
  st.stats.ops_fused += chain_ops.size();
  chain_ops.back().each_output([&](const TensorIr& t) { resolve(st, t.id, std::move(out)); });
  return chain_ops.size();
}

// Calls `f(entry)` once the tensor is ready or failed (now, if it is).
template <class F>
void when_resolved(Self self, TensorId id, F f, const std::function<void(caf::error)>& missing) {
  auto& st = self->state;
  auto it = st.table.find(id);
  if (it == nullptr) {
    missing(make_error(Errc::unknown_tensor,
                       st.name + ": " + id_str(id) + " does not exist (dropped, or never created here)"));
    return;
  }
  if (it->state == Entry::State::pending) {
    if (st.max_records != 0 && st.waiting_requests >= st.max_records) {
      missing(requests_full(st, "a request for " + id_str(id)));
      return;
    }
    it->rare_part().waiters.emplace_back(std::move(f));
    ++st.waiting_requests;
    return;
  }
  f(*it);
}

// (`done` by value, moved along: each copy of a reply's std::function was
// an allocation on the runner's thread, five per read.)
void read_entry(Self self, Entry& e, std::function<void(caf::expected<TensorData>)> done) {
  if (e.state == Entry::State::failed) {
    done(e.error());
    return;
  }
  // A backend that throws here may or may not have called back yet; the
  // reader is answered once either way. The callback may come on another
  // thread, so what it needs is shared, not the runner's: one block, whose
  // pointer is all the callback holds (small enough not to allocate).
  auto reader = std::make_shared<Reader>();
  reader->done = std::move(done);
  reader->device = self->state.name;
  try {
    self->state.backend->to_data(e.meta, e.buffer, [reader](backends::Expected<TensorData> r) {
      if (reader->answered.exchange(true)) return;
      if (r) {
        reader->done(std::move(*r));
        return;
      }
      const auto info = describe(to_caf(r.error()));
      reader->done(make_error(info.code, reader->device + ": " + info.message, info.tensor));
    });
  } catch (...) {
    if (!reader->answered.exchange(true)) reader->done(on_device(self->state, to_caf(current_exception_error("read"))));
  }
  // Answered later (a device that copies asynchronously): kept in view, so
  // that if the runner stops first the read fails instead of waiting on a
  // callback that may never come. Pruned as the list doubles.
  if (!reader->answered.load()) {
    auto& later = self->state.unanswered_reads;
    if (later.size() >= 2 * self->state.unanswered_kept + 16) {
      std::erase_if(later, [](const std::weak_ptr<Reader>& w) {
        auto r = w.lock();
        return !r || r->answered.load();
      });
      self->state.unanswered_kept = later.size();
    }
    later.push_back(reader);
  }
}

// The runner stops (its backend failed): reads the backend has yet to
// answer fail with the reason.
void fail_unanswered_reads(RunnerState& st, const caf::error& err) {
  for (auto& w : st.unanswered_reads)
    if (auto r = w.lock(); r && !r->answered.exchange(true)) r->done(err);
  st.unanswered_reads.clear();
}

// Reads tensor `id` once it is ready or failed, answering `done` with its
// contents or its error.
void read_when_resolved(Self self, TensorId id, std::function<void(caf::expected<TensorData>)> done) {
  if (auto* e = self->state.table.find(id); e != nullptr && e->state != Entry::State::pending) {
    read_entry(self, *e, std::move(done));  // the usual case: no closure to store
    return;
  }
  when_resolved(
      self, id, [self, done](Entry& e) { read_entry(self, e, done); },
      [done](caf::error err) { done(std::move(err)); });
}

void import(Self self, TensorId id, caf::expected<TensorData> data, bool bridged = true,
            const caf::node_id& owner = {}) {
  auto& st = self->state;
  auto it = st.table.find(id);
  if (it == nullptr) {
    // The data overtook its expect message (different senders): keep it,
    // within the peer bounds (what stays over them is why it failed).
    if (st.early_imports.contains(id)) return;
    const Room room = record_room(st, 1);
    if (room == Room::none) {
      st.log.log(LogLevel::debug,
                 [&] { return describe(records_full(st, "import of " + id_str(id) + " dropped")).message; });
      return;
    }
    uint64_t bytes = data ? data->bytes.size() : 0;
    if (room == Room::full) {
      data = records_full(st, "import of " + id_str(id));
      bytes = 0;
    } else if (!staging_fits(st, bytes)) {
      data = staging_full(st, "import of " + id_str(id), bytes);
      bytes = 0;
    }
    st.early_imports.try_emplace(id, RunnerState::EarlyImport{std::move(data), owner, bridged, bytes});
    st.staged_bytes += bytes;
    return;
  }
  if (it->state != Entry::State::pending) {
    // A second copy (a bulk lane's upload resent over BASP after the lane
    // broke, its first copy having arrived): the tensor has its data.
    st.log.log(LogLevel::debug, [&] { return st.name + ": a second import of " + id_str(id) + " ignored"; });
    return;
  }
  const auto& meta = it->meta;
  if (!data) {
    resolve(st, id, nullptr, data.error());
  } else if (auto err = validate_data(*data, meta.shape, meta.dtype)) {
    resolve(st, id, nullptr,
            make_error(Errc::protocol_error, st.name + ": import of " + id_str(id) + ": " + describe(err).message));
  } else if (!st.backend->supports(meta.dtype)) {
    resolve(st, id, nullptr,
            make_error(Errc::unsupported, st.name + ": import of " + id_str(id) + ": " +
                                              std::string(name_of(meta.dtype)) + " is not supported on this device"));
  } else {
    if (bridged) st.stats.bytes_bridged_in += data->bytes.size();
    if (st.tracer) {
      auto now = Tracer::Clock::now();
      st.tracer->slice(st.track, "import", now, now + std::chrono::microseconds(1),
                       "\"bytes\":" + std::to_string(data->bytes.size()));
      st.tracer->flow_end(st.track, id.value, now);
    }
    backends::Expected<BufferPtr> buffer = backends::DeviceError{};
    try {
      buffer = st.backend->from_data(meta, std::move(*data));
    } catch (...) {
      buffer = current_exception_error("import of " + id_str(id));
    }
    if (buffer && *buffer == nullptr)  // a user's backend (backend.hpp) may return an empty pointer
      buffer = backends::DeviceError(Errc::kernel_failure,
                                     "import of " + id_str(id) + ": the backend's from_data returned no buffer");
    if (buffer)
      resolve(st, id, std::move(*buffer));
    else
      resolve(st, id, nullptr, on_device(st, to_caf(buffer.error())));
  }
  drain(self);
}

// One part of an import: kept until the whole tensor arrived, then imported
// as if it had come in one message. Parts of one tensor come from one sender
// in order; anything else is a protocol error that fails the import.
void import_part(Self self, DataPart part) {
  auto& st = self->state;
  const auto id = part.id;
  auto unstage = [&] {
    if (auto it = st.partial_imports.find(id); it != st.partial_imports.end()) {
      st.staged_bytes -= it->second.received;
      st.partial_imports.erase(it);
    }
  };
  auto fail_with = [&](caf::error err) {
    const bool bridge = part.bridge;
    unstage();
    import(self, id, std::move(err), bridge);
  };
  auto fail = [&](const std::string& why) {
    fail_with(make_error(Errc::protocol_error, st.name + ": import of " + id_str(id) + " in parts: " + why));
  };
  if (auto sender = sender_node(self); sender && st.detached.contains(sender)) return;  // a detached client's late part
  if (!st.partial_imports.contains(id)) {
    const Room room = record_room(st, 1);
    if (room == Room::none) {
      st.log.log(LogLevel::debug,
                 [&] { return describe(records_full(st, "part of " + id_str(id) + " dropped")).message; });
      return;
    }
    if (room == Room::full) return fail_with(records_full(st, "import of " + id_str(id)));
  }
  auto [it, fresh] = st.partial_imports.try_emplace(id);
  auto& p = it->second;
  if (fresh) {
    p.shape = part.shape;
    p.dtype = part.dtype;
    p.total = part.total;
    p.bridge = part.bridge;
    p.owner = sender_node(self);
    // What the first part announces is checked before it sizes anything.
    if (!is_valid(p.dtype)) return fail("an unknown dtype");
    if (auto err = check_shape(p.shape, "part's")) return fail(describe(err).message);
    if (const uint64_t want = static_cast<uint64_t>(p.shape.numel()) * size_of(p.dtype); p.total != want)
      return fail("announces " + std::to_string(p.total) + " bytes for " + p.shape.to_string() + " " +
                  std::string(name_of(p.dtype)) + ", which holds " + std::to_string(want));
  } else if (part.total != p.total || part.dtype != p.dtype || part.shape != p.shape) {
    return fail("a part names another shape, dtype or size than the first");
  }
  if (part.offset != p.received)
    return fail("part at byte " + std::to_string(part.offset) + ", expected byte " + std::to_string(p.received));
  if (part.bytes.size() > p.total - p.received)
    return fail("parts exceed the announced " + std::to_string(p.total) + " bytes");
  if (part.bytes.empty() && p.total > 0) return fail("an empty part");
  if (!staging_fits(st, part.bytes.size()))
    return fail_with(staging_full(st, "import of " + id_str(id) + " in parts", part.bytes.size()));
  if (fresh) {
    // The tensor's block at its first part (checked above to start it),
    // from the device: its memory limit (DeviceOptions::memory_limit)
    // counts an upload in transit as it counts what ops make, and refuses
    // one announced past it at once. Parts are copied in as they come, so
    // the tensor is whole at its last part with no join; of a block
    // announced and never filled only the pages written are resident.
    try {
      p.block = st.backend->host_block(p.total);
    } catch (...) {
      return fail_with(on_device(st, to_caf(current_exception_error("import of " + id_str(id)))));
    }
  }
  if (!part.bytes.empty()) std::memcpy(p.block.mutable_data() + p.received, part.bytes.data(), part.bytes.size());
  p.received += part.bytes.size();
  st.staged_bytes += part.bytes.size();
  if (p.received < p.total) return;
  auto whole = std::move(p);
  st.staged_bytes -= whole.received;
  st.partial_imports.erase(it);
  TensorData data;
  data.shape = std::move(whole.shape);
  data.dtype = whole.dtype;
  data.bytes = std::move(whole.block);
  canonicalize_bools(data);
  import(self, id, std::move(data), whole.bridge);
}

// Bytes [offset, offset + max) of `d` as a part of tensor `id`.
DataPart part_of(TensorId id, const TensorData& d, uint64_t offset, uint64_t max) {
  DataPart part{id, d.shape, d.dtype, d.bytes.size(), offset, {}, true};
  const auto n = std::min<uint64_t>(max, d.bytes.size() - offset);
  part.bytes = (offset == 0 && n == d.bytes.size()) ? d.bytes : d.bytes.slice(offset, n);
  return part;
}

// Sends `data` to a runner on another node as import `dst` in parts, a few
// in flight at a time: each part is acknowledged, so what is queued toward
// the peer stays a few parts however large the tensor.
struct OutgoingParts {
  runner_actor target;
  TensorId dst;
  TensorData data;
  uint64_t next = 0;
  int in_flight = 0;
  std::function<void(const caf::error&)> done;  // called once, then emptied

  void finish(const caf::error& err) {
    if (!done) return;
    auto d = std::move(done);
    done = nullptr;
    d(err);
  }
};

void pump_parts(Self self, const std::shared_ptr<OutgoingParts>& out) {
  // Two: one part on the wire while the next is encoded. CAF's write
  // buffer for the connection only ever grows (by doubling, in fresh
  // pages), and with the whole tensor queued at once it grew to twice the
  // tensor; now it stays near two parts.
  constexpr int window = 2;
  const auto chunk = self->state.transfer_chunk_bytes;
  const auto total = out->data.bytes.size();
  while (out->in_flight < window && out->next < total && out->done) {
    auto part = part_of(out->dst, out->data, out->next, chunk);
    out->next += part.bytes.size();
    ++out->in_flight;
    self->request(out->target, self->state.transfer_timeout, import_atom::value, std::move(part))
        .then(
            [self, out](done_atom) {
              --out->in_flight;
              if (out->next >= out->data.bytes.size() && out->in_flight == 0) {
                out->finish({});
                return;
              }
              pump_parts(self, out);
            },
            [self, out](caf::error& e) {
              --out->in_flight;
              auto err = make_error(Errc::device_lost, self->state.name + ": sending tensor #" +
                                                           std::to_string(out->dst.value) +
                                                           " in parts failed: " + describe(e).message);
              if (out->done) self->state.log.log(LogLevel::warn, [&] { return describe(err).message; });
              out->finish(err);
            });
  }
}

// Client node `client` is gone: everything it created here goes. Its
// deferred ops fail (nobody can read their outputs any more) and so does
// every entry of it still pending, which can only be an import that its
// sender will never finish; otherwise both would wait for ever, holding
// their inputs. Then its entries are released as if it had dropped them.
void detach_client(Self self, const caf::node_id& client) {
  auto& st = self->state;
  if (st.detached.insert(client).second) {
    st.detached_order.push_back(client);
    if (st.detached_order.size() > RunnerState::kDetachedKept) {
      st.detached.erase(st.detached_order.front());
      st.detached_order.pop_front();
    }
  }
  std::erase_if(st.partial_imports, [&](const auto& kv) {
    if (kv.second.owner != client) return false;
    st.staged_bytes -= kv.second.received;
    return true;
  });
  std::erase_if(st.early_imports, [&](const auto& kv) {
    if (kv.second.owner != client) return false;
    st.staged_bytes -= kv.second.bytes;
    return true;
  });
  auto known = st.owners.find(client);
  if (known == st.owners.end()) return;
  const uint32_t number = known->second;
  st.owners.erase(known);
  const auto gone = make_error(Errc::device_lost, st.name + ": its client went away");
  auto theirs = [&](OperationIr& op) {
    bool owned = false;
    op.each_output([&](const TensorIr& t) {
      const auto* e = st.table.find(t.id);
      owned = owned || (e != nullptr && e->owner == number);
    });
    return owned;
  };
  std::vector<TensorId> inputs;
  for (auto it = st.deferred.begin(); it != st.deferred.end();) {
    if (!theirs(*it)) {
      ++it;
      continue;
    }
    OperationIr op = std::move(*it);
    it = st.deferred.erase(it);
    op.each_input([&](const TensorIr& t) {
      if (auto* e = st.table.find(t.id)) {
        --e->users;
        inputs.push_back(t.id);
      }
    });
    op.each_output([&](const TensorIr& t) { resolve(st, t.id, nullptr, gone); });
  }
  std::vector<TensorId> owned;
  st.table.for_each([&](TensorId id, const Entry& e) {
    if (e.owner == number) owned.push_back(id);
  });
  for (auto id : owned) {
    if (auto* e = st.table.find(id); e != nullptr && e->state == Entry::State::pending) resolve(st, id, nullptr, gone);
    release(st, id);
  }
  for (auto id : inputs)
    if (auto* e = st.table.find(id)) erase_if_unused(st, id, *e);
  // Others' syncs may have waited on the ops that went.
  complete_syncs(self);
}

// A batch of ops from a client, in order. Counted as one batch taken in
// (the client's backpressure), whether it came alone or with a request.
// `local`: from a client in this process (see submit_one).
void take_in(Self self, std::vector<OperationIr>& ops, bool local) {
  auto& st = self->state;
  auto owner = owner_number(st, sender_node(self));
  if (!owner) {
    st.log.log(LogLevel::debug,
               [&] { return st.name + ": " + std::to_string(ops.size()) + " ops of a detached client dropped"; });
    return;
  }
  st.sender = *owner;
  for (size_t i = 0; i < ops.size();) {
    size_t ran = 0;
    try {
      if (st.fuse_elementwise && !abandoned(st)) ran = run_chain(st, ops, i, local);
      if (ran == 0) {
        submit_one(self, ops[i], local);
        ran = 1;
      }
    } catch (...) {
      // A runner must outlive any op: report and keep serving.
      auto err = on_device(st, to_caf(current_exception_error(ops[i].name())));
      log_op_failure(st, ops[i], err);
      fail_outputs(st, ops[i], failed_at(ops[i], err));
      ran = std::max<size_t>(ran, 1);
    }
    i += ran;
  }
  complete_syncs(self);
  if (st.batches_done) st.batches_done->fetch_add(1, std::memory_order_release);
  st.busy_since_idle_check = true;
  if (st.idle_trim_after.count() > 0 && !st.idle_timer_armed) {
    st.idle_timer_armed = true;
    self->delayed_send(self, st.idle_trim_after, idle_atom::value);
  }
}

// The ops that came with a local client's request (read, sync), taken in
// first; the request counts as one batch taken in either way, as the client
// counted it sent (Core::ask_local).
void take_in_request(Self self, std::vector<OperationIr>& ops) {
  if (!ops.empty())
    take_in(self, ops, true);
  else if (self->state.batches_done)
    self->state.batches_done->fetch_add(1, std::memory_order_release);
}

// Bridge, source side: sends tensor `id`, once resolved, to `target` as its
// import `dst`; `done` hears when it left, or why it could not.
void export_tensor(Self self, TensorId id, runner_actor target, TensorId dst,
                   std::function<void(const caf::error&)> done) {
  auto send = [self, id, target = std::move(target), dst, done = std::move(done)](caf::expected<TensorData> r) {
    if (!r) {
      // The source's own failure, logged where it happened.
      self->state.log.log(LogLevel::trace, [&] {
        return self->state.name + ": bridge of " + id_str(id) + " to tensor #" + std::to_string(dst.value) +
               " failed: " + describe(r.error()).message;
      });
      done(r.error());
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
    if (target.node() != self->node() && st.bulk_export &&
        st.bulk_export(caf::actor_cast<caf::actor_addr>(target), dst, *r)) {
      done({});
      return;
    }
    if (st.transfer_chunk_bytes > 0 && target.node() != self->node() && r->bytes.size() > st.transfer_chunk_bytes) {
      pump_parts(self, std::make_shared<OutgoingParts>(OutgoingParts{target, dst, std::move(*r), 0, 0, done}));
      return;
    }
    self->send(target, import_atom::value, dst, std::move(*r));
    done({});
  };
  when_resolved(
      self, id, [self, send](Entry& e) { read_entry(self, e, send); },
      [send](caf::error err) { send(std::move(err)); });
}

runner_actor::behavior_type runner(Self self, std::string name, std::shared_ptr<backends::Backend> backend,
                                   RunnerHooks hooks) {
  self->state.name = std::move(name);
  self->state.tracer = std::move(hooks.tracer);
  self->state.track = hooks.track;
  self->state.batches_done = std::move(hooks.batches_done);
  self->state.fuse_elementwise = hooks.fuse_elementwise;
  self->state.log = std::move(hooks.log);
  self->state.idle_trim_after = hooks.idle_trim_after;
  self->state.transfer_chunk_bytes = hooks.transfer_chunk_bytes;
  self->state.transfer_timeout = hooks.transfer_timeout;
  self->state.bulk_send = std::move(hooks.bulk_send);
  self->state.bulk_export = std::move(hooks.bulk_export);
  self->state.abandon = std::move(hooks.abandon);
  self->state.on_stop = std::move(hooks.on_stop);
  self->state.max_records = hooks.max_records;
  self->state.max_staged_bytes = hooks.max_staged_bytes;
  if (self->state.tracer) self->state.tracer->name_track(hooks.track, self->state.name);
  self->state.backend = std::move(backend);
  self->state.stats.device = self->state.name;
  // Backend calls that can fail an op are guarded where they are made. An
  // exception from any other (a user's backend throwing in poll or trim)
  // ends the runner, and with it the device, with that reason logged, not
  // CAF's report on stdout.
  self->set_exception_handler([self](std::exception_ptr& thrown) -> caf::error {
    auto& st = self->state;
    caf::error err;
    try {
      std::rethrow_exception(thrown);
    } catch (...) {
      err = make_error(Errc::device_lost, st.name + ": stopped: " + current_exception_error("backend").message());
    }
    st.log.log(LogLevel::error, [&] { return describe(err).message; });
    if (st.on_stop) st.on_stop(describe(err).message);
    fail_unanswered_reads(st, err);
    return err;
  });
  // Stopped from outside (the runtime's shutdown, a worker's client gone):
  // reads the backend never answered fail rather than wait for ever, also
  // where the backend keeps their callbacks beyond its own life.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    if (!msg.reason) return;  // as CAF's default handler: a normal exit is ignored
    fail_unanswered_reads(
        self->state, make_error(Errc::runtime_closed, self->state.name + ": the device stopped before the read was "
                                                                         "answered"));
    self->quit(msg.reason);
  });
  // The backend wakes us from its own threads; poll runs its completions here.
  // A weak handle: a backend may keep its waker past the runner (a copy in
  // one of its threads), and a strong one kept the runner, and so the
  // actor system's teardown, waiting for ever.
  self->state.backend->set_waker([weak = caf::actor_cast<caf::weak_actor_ptr>(self->ctrl())] {
    if (auto strong = weak.lock()) caf::anon_send(caf::actor_cast<runner_actor>(std::move(strong)), poll_atom::value);
  });
  return {
      [self](submit_atom, std::vector<OperationIr>& ops) { take_in(self, ops, false); },
      [self](submit_atom, LocalBatch& batch) {
        take_in(self, batch.ops, true);
        linger(self);
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
        read_when_resolved(self, id, [rp](caf::expected<TensorData> r) mutable {
          if (r)
            rp.deliver(std::move(*r));
          else
            rp.deliver(std::move(r.error()));
        });
        return rp;
      },
      [self](read_atom, TensorId id, std::vector<OperationIr>& ops, LocalReply<TensorData>& reply) {
        take_in_request(self, ops);
        read_when_resolved(self, id, std::move(reply.deliver));
        linger(self);
      },
      [self](read_atom, TensorId id, uint64_t offset, uint64_t max_bytes) -> caf::result<DataPart> {
        auto& st = self->state;
        if (max_bytes == 0) return make_error(Errc::invalid_argument, st.name + ": a read of 0 bytes per part");
        if (offset > 0) {
          // Later parts come from the snapshot the part at offset 0 took.
          auto snap = st.read_snapshots.find(id);
          if (snap == st.read_snapshots.end())
            return make_error(Errc::invalid_argument, st.name + ": part of " + id_str(id) + " at byte " +
                                                          std::to_string(offset) +
                                                          " without a read in progress (its part at byte 0 first)");
          if (offset >= snap->second.data.bytes.size())
            return make_error(Errc::invalid_argument, st.name + ": part of " + id_str(id) + " at byte " +
                                                          std::to_string(offset) + " past its end");
          auto part = part_of(id, snap->second.data, offset, max_bytes);
          if (offset + part.bytes.size() >= snap->second.data.bytes.size() && --snap->second.readers == 0)
            st.read_snapshots.erase(snap);
          return part;
        }
        auto rp = self->make_response_promise<DataPart>();
        when_resolved(
            self, id,
            [self, rp, id, max_bytes](Entry& e) mutable {
              read_entry(self, e, [self, rp, id, max_bytes](caf::expected<TensorData> r) mutable {
                if (!r) {
                  rp.deliver(std::move(r.error()));
                  return;
                }
                if (r->bytes.size() > max_bytes) {
                  auto& snap = self->state.read_snapshots[id];
                  if (snap.readers++ == 0) snap.data = *r;
                }
                rp.deliver(part_of(id, *r, 0, max_bytes));
              });
            },
            [rp](caf::error err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
      [self](read_atom, TensorId id, BulkTicket ticket) -> caf::result<done_atom> {
        auto& st = self->state;
        if (!st.bulk_send)
          return make_error(Errc::unsupported, st.name + ": read of " + id_str(id) + " on a bulk lane: none here");
        auto client = sender_node(self);
        auto rp = self->make_response_promise<done_atom>();
        read_when_resolved(self, id, [self, rp, client, ticket, id](caf::expected<TensorData> r) mutable {
          if (!r) {
            rp.deliver(std::move(r.error()));
            return;
          }
          if (!self->state.bulk_send(client, ticket.number, std::move(*r))) {
            rp.deliver(make_error(Errc::device_lost, self->state.name + ": read of " + id_str(id) +
                                                         ": the client's bulk lane connection is gone"));
            return;
          }
          rp.deliver(done_atom::value);
        });
        return rp;
      },
      [self](sync_atom) -> caf::result<done_atom> {
        auto& st = self->state;
        if (st.max_records != 0 && st.waiting_requests >= st.max_records) return requests_full(st, "sync");
        auto rp = self->make_response_promise<done_atom>();
        ++st.waiting_requests;
        self->state.syncs.push_back({[rp](const caf::error& err) mutable {
                                       if (err)
                                         rp.deliver(err);
                                       else
                                         rp.deliver(done_atom::value);
                                     },
                                     self->state.imports_expected});
        complete_syncs(self);
        return rp;
      },
      [self](sync_atom, std::vector<OperationIr>& ops, LocalReply<done_atom>& reply) {
        take_in_request(self, ops);
        ++self->state.waiting_requests;
        self->state.syncs.push_back({[deliver = std::move(reply.deliver)](const caf::error& err) {
                                       if (err)
                                         deliver(err);
                                       else
                                         deliver(done_atom::value);
                                     },
                                     self->state.imports_expected});
        complete_syncs(self);
        linger(self);
      },
      [self](stats_atom) {
        auto& st = self->state;
        DeviceStats s = st.stats;
        s.queue_depth = st.deferred.size();
        s.live_handles = st.table.size();
        s.live_bytes = st.live_bytes;
        s.cached_bytes = st.backend->memory().bytes_cached;
        s.bytes_staged = st.staged_bytes;
        return s;
      },
      [self](expect_atom, TensorIr& ir) {
        auto& st = self->state;
        auto owner = owner_number(st, sender_node(self));
        if (!owner) return;  // a detached client's late message
        // (An early import of it already holds the record it moves into.)
        const Room room = st.early_imports.contains(ir.id) ? Room::free : record_room(st, 1);
        if (room == Room::none) {
          st.log.log(LogLevel::debug,
                     [&] { return describe(records_full(st, "upload of " + id_str(ir.id) + " refused")).message; });
          return;
        }
        auto [it, inserted] = st.table.try_emplace(ir.id, ir, *owner);
        if (!inserted) return;  // duplicate id from a misbehaving client
        if (room == Room::full) {
          // Failed now: its data, when it comes, is a second import (ignored).
          resolve(st, ir.id, nullptr, records_full(st, "upload of " + id_str(ir.id)));
          return;
        }
        const uint64_t order = st.imports_expected++;
        st.awaited_imports.emplace(ir.id, order);
        st.awaited_order.insert(order);
        if (auto early = st.early_imports.find(ir.id); early != st.early_imports.end()) {
          auto data = std::move(early->second.data);
          const bool bridged = early->second.bridged;
          st.staged_bytes -= early->second.bytes;
          st.early_imports.erase(early);
          import(self, ir.id, std::move(data), bridged);
        }
      },
      [self](import_atom, TensorId id, TensorData& data) {
        // From another node, the bytes are the decoder's: into the
        // device's memory, so its limit counts them as it counts uploads
        // in parts and ops' outputs (a peer's whole imports of up to a
        // message each were held uncounted). A bridge from this process
        // already lies in its device's memory.
        auto sender = sender_node(self);
        if (!sender || sender == self->node() || data.bytes.empty()) {
          import(self, id, std::move(data));
          return;
        }
        auto& st = self->state;
        try {
          Bytes counted = st.backend->host_block(data.bytes.size());
          std::memcpy(counted.mutable_data(), data.bytes.data(), data.bytes.size());
          data.bytes = std::move(counted);
        } catch (...) {
          import(self, id, on_device(st, to_caf(current_exception_error("import of " + id_str(id)))));
          return;
        }
        import(self, id, std::move(data));
      },
      [self](import_atom, TensorId id, caf::error& err) { import(self, id, std::move(err)); },
      [self](import_atom, DataPart& part) -> done_atom {
        import_part(self, std::move(part));
        return done_atom::value;
      },
      [self](import_atom, BulkImport& in) {
        auto& st = self->state;
        // Only this worker's own lane sends these (anonymously): the type is
        // not registered, so no peer's message can decode as one.
        if (in.owner && st.detached.contains(in.owner)) return;  // its client went while it travelled
        canonicalize_bools(in.data);
        import(self, in.id, std::move(in.data), in.bridge, in.owner);
      },
      [self](export_atom, TensorId id, caf::actor& target, TensorId dst) -> caf::result<done_atom> {
        // A failure goes back to the requester (the client's router), which
        // names the device as its client knows it and fails the import.
        auto rp = self->make_response_promise<done_atom>();
        export_tensor(self, id, caf::actor_cast<runner_actor>(target), dst, [rp](const caf::error& err) mutable {
          if (err)
            rp.deliver(err);
          else
            rp.deliver(done_atom::value);
        });
        return rp;
      },
      [self](export_atom, TensorId id, caf::actor& target, TensorId dst, LocalReply<done_atom>& reply) {
        export_tensor(self, id, caf::actor_cast<runner_actor>(target), dst,
                      [deliver = std::move(reply.deliver)](const caf::error& err) {
                        if (err)
                          deliver(err);
                        else
                          deliver(done_atom::value);
                      });
      },
      [self](poll_atom) { self->state.backend->poll(); },
      [](ingress_atom, LocalReply<done_atom>& reply) { reply.deliver(done_atom::value); },
      [self](detach_atom, const caf::node_id& client) {
        // Only the worker itself may say a client is gone; a remote peer
        // could otherwise free another client's tensors.
        if (!self->current_sender() || self->current_sender()->node() != self->node()) return;
        detach_client(self, client);
      },
  };
}

}  // namespace

runner_actor spawn_runner(caf::actor_system& sys, std::string device_name, std::shared_ptr<backends::Backend> backend,
                          RunnerHooks hooks) {
  return sys.spawn<caf::detached>(runner, std::move(device_name), std::move(backend), std::move(hooks));
}

}  // namespace switchyard::actors
