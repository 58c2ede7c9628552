// SPDX-License-Identifier: Apache-2.0
#pragma once

// The client side of a Runtime: the actor system, the per-device op queues
// that batch submissions, and the request helpers behind futures.

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "queue_mutex.hpp"
#include "switchyard/messages/dtype_support.hpp"
#include "switchyard/messages/id_slots.hpp"
#include "switchyard/messages/logger.hpp"
#include "switchyard/messages/protocol.hpp"
#include "switchyard/runtime.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::actors {
class Tracer;
}

namespace switchyard::detail {

class BulkLaneClient;

/// Client-side state of one tensor; the last reference sends its drop.
struct TensorHandle {
  std::shared_ptr<Core> core;
  DeviceId device;
  TensorIr ir;
  // By rvalue, as Core::emit takes it: each TensorIr passed on by value was
  // one more move of its shape (~30 instructions).
  TensorHandle(std::shared_ptr<Core> c, DeviceId d, TensorIr&& t) : core(std::move(c)), device(d), ir(std::move(t)) {}
  ~TensorHandle();
  TensorHandle(const TensorHandle&) = delete;
  TensorHandle& operator=(const TensorHandle&) = delete;
};

struct DeviceInfo {
  std::string name;
  std::string kind;
  // For a kind the library does not know (a custom backend), per dtype (as
  // all_dtypes), what its backend said it holds; empty: the library's table.
  std::vector<DTypeSupport> custom_support;
};

/// Marks the calling thread as running a runtime reply handler (and the
/// continuations it completes) for the scope's lifetime; see
/// on_runtime_thread(). Such code never waits for room in a device queue,
/// and a Runtime destroyed there shuts down on a thread of its own.
class RuntimeThreadScope {
 public:
  RuntimeThreadScope() noexcept;
  ~RuntimeThreadScope();
  RuntimeThreadScope(const RuntimeThreadScope&) = delete;
  RuntimeThreadScope& operator=(const RuntimeThreadScope&) = delete;
};

/// Converts a caf::error into the exception futures rethrow.
[[nodiscard]] std::exception_ptr to_exception(const caf::error& err);
/// Throws Error for a failed rule check at the call site.
[[noreturn]] void throw_error(const caf::error& err);
/// throw_error, with the message's leading op name ("argsort: ...") replaced
/// by `op`: for a call that reaches the op rules under another op's name.
[[noreturn]] void throw_error_as(const char* op, const caf::error& err);

class Core : public std::enable_shared_from_this<Core> {
 public:
  explicit Core(RuntimeOptions options);
  ~Core();

  /// Starts the devices; separate from the constructor because runners
  /// need shared_from_this for nothing, but devices() does.
  void start();
  /// Completes outstanding work, fails what cannot complete, stops actors.
  /// On a runtime thread (a continuation) it returns at once and the
  /// shutdown finishes on a thread of its own: the actor system's teardown
  /// waits for every runtime thread, the calling one included.
  void close();

  [[nodiscard]] TensorId new_id() noexcept { return TensorId{next_id_.fetch_add(1, std::memory_order_relaxed)}; }
  /// `n` consecutive ids; returns the first (a replay's tensors, in order).
  [[nodiscard]] TensorId new_ids(size_t n) noexcept {
    return TensorId{next_id_.fetch_add(n, std::memory_order_relaxed)};
  }
  /// Most devices one runtime ever holds (ids are never reused, so lost and
  /// reconnected devices count too). The table has this many slots from the
  /// start, so it grows by publishing a count: readers never see it move.
  static constexpr size_t max_devices = 1024;

  [[nodiscard]] const DeviceInfo& info(DeviceId id) const { return slot(id).info; }
  /// Devices ever added (lost ones included; see `lost`).
  [[nodiscard]] size_t device_count() const noexcept { return count_.load(std::memory_order_acquire); }
  /// Why the device was lost, or nullptr while it is attached.
  [[nodiscard]] const std::string* lost(DeviceId id) const {
    auto& s = slot(id);
    return s.lost.load(std::memory_order_acquire) ? &s.lost_reason : nullptr;
  }
  /// Connects to a switchyard-worker and adds its devices as
  /// "host:port/<name>"; returns their ids. Throws Error on failure.
  std::vector<DeviceId> connect(const std::string& host, uint16_t port);
  [[nodiscard]] const std::vector<std::string>& unavailable() const noexcept { return unavailable_; }
  [[nodiscard]] std::optional<DeviceId> find(std::string_view name) const;

  /// Queues an op for a device (sent with the next batch).
  /// (By rvalue: an op record moved is ~80 instructions, and it used to be
  /// moved once per call layer.)
  void submit(DeviceId device, OperationIr&& op);
  /// Queues the drop of tensor `id` (what submit does with a DropOp,
  /// without building one when the drop marks a last use instead).
  void drop(DeviceId device, TensorId id);
  /// Sends the device's queued ops; a client thread then waits while too
  /// many of its batches are in flight (`wait`), never holding the queue.
  void flush(DeviceId device, bool wait = true);
  void flush_all();

  /// Queues a replayed recording's ops (recording.cpp): their checks ran
  /// when recorded and their last uses are marked, so a local device takes
  /// them under one lock. With `send_now` (some op starts_early) the batch
  /// goes at once, else it waits, as light ops do, for the read or the
  /// flusher that carries it.
  void submit_recorded(DeviceId device, std::vector<OperationIr>&& ops, bool send_now);
  /// Whether an op is heavy enough to be sent to an idle runner at once
  /// (some microseconds of work on one core).
  [[nodiscard]] static bool starts_early(const OperationIr& op);
  /// Marks the last uses of a recording's ops once (what each batch's
  /// last-use pass would find), dropping the drops they replace.
  void mark_recorded_last_uses(std::vector<OperationIr>& ops);
  /// The handle of a tensor that ops already queued will make.
  [[nodiscard]] Tensor adopt(DeviceId device, TensorIr&& ir);
  /// Throws Error(device_lost) for a device that was lost.
  void check_usable(DeviceId id) const;

  /// A new tensor `ir` on `device` produced by `op` (already holding ir);
  /// `ir` becomes the tensor's handle.
  [[nodiscard]] Tensor emit(DeviceId device, TensorIr&& ir, OperationIr&& op);

  /// `keep` (the reading tensor's handle) stays alive until the reply, so
  /// the tensor's drop cannot overtake the read. The reply must match `ir`'s
  /// shape and dtype and carry exactly their bytes, else the read fails with
  /// protocol_error: a remote worker is not trusted to send what was asked.
  [[nodiscard]] Future<TensorData> read(DeviceId device, const TensorIr& ir,
                                        std::shared_ptr<const void> keep = nullptr);
  [[nodiscard]] Future<void> sync(DeviceId device);
  [[nodiscard]] Future<DeviceStats> stats(DeviceId device);
  [[nodiscard]] Future<void> trim(DeviceId device);
  void bridge(DeviceId src, TensorId src_id, DeviceId dst, const TensorIr& dst_ir);

  /// What device `id` does with dtype `t` (Device::dtype_support).
  [[nodiscard]] DTypeSupport dtype_support(DeviceId id, DType t) const;
  [[nodiscard]] caf::actor_system& system() { return *system_; }
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

 private:
  /// TensorId -> uint32_t for one batch: open addressing in one reused
  /// array, so marking last uses allocates nothing per op (a node-based map
  /// cost an allocation and a free per tensor, profiled).
  class LastUseTable {
   public:
    /// Empties the table, sized for at most `keys` distinct ids.
    void reset(size_t keys);
    /// The value of `id`, inserted as `fresh` when absent; `inserted` says which.
    uint32_t& find_or_insert(TensorId id, uint32_t fresh, bool& inserted);

   private:
    std::vector<IdSlot<uint32_t>> slots_;
    size_t used_ = 0;  // slots in use by the current batch (a power of two)
  };
  struct Queue {
    QueueMutex mutex;
    std::vector<OperationIr> ops;
    // Scratch of mark_last_uses, kept to avoid allocations per batch.
    LastUseTable next_use;
    // Upload bytes in `ops` (remote devices cap a batch by them).
    size_t upload_bytes = 0;
    // One past the last drop in `ops` (0: none). No op after it can be a
    // last use, so the last-use pass starts there, and without any drop
    // it does not run.
    size_t drops_end = 0;
    // A heavy op for an idle runner is queued: the next op that is not
    // element-wise sends the queue first (Core::submit).
    bool send_before_next = false;
    // Flow control: batches sent (written under `mutex`, read by waiters
    // without it), and batches the runner has taken in.
    std::atomic<uint64_t> batches_sent{0};
    std::shared_ptr<std::atomic<uint64_t>> batches_done = std::make_shared<std::atomic<uint64_t>>(0);
    // Drops from runtime threads, appended to the next batch. Their own
    // lock is held only to push or take, never across a send.
    std::mutex late_drops_mutex;
    std::vector<TensorId> late_drops;
    std::atomic<bool> has_late_drops{false};
  };
  // Written once before `count_` publishes it, except `lost*` (router thread).
  struct Slot {
    DeviceInfo info;
    Queue queue;
    caf::actor runner;
    bool local = false;
    // A remote device's worker lane (null: none) and its index there.
    std::shared_ptr<BulkLaneClient> lane;
    uint32_t remote_index = 0;
    std::string lost_reason;
    std::atomic<bool> lost{false};
    // Who writes lost_reason: the router (a runner went down) or the runner
    // itself (its backend failed), whichever comes first.
    std::atomic<bool> losing{false};
  };
  struct Worker {
    std::string host;
    uint16_t port = 0;
    caf::actor entry;
    std::vector<DeviceId> devices;
    caf::node_id node;  // the worker process, however its address was spelled
    std::shared_ptr<BulkLaneClient> lane;
  };

  [[nodiscard]] Slot& slot(DeviceId id) const {
    if (id >= device_count()) [[unlikely]]
      throw_unknown_device(id);
    return slots_[id];
  }
  // Out of line, so slot() inlines on the per-op path.
  [[noreturn]] static void throw_unknown_device(DeviceId id);
  // Throws Errc::unsupported, naming device, op and dtype, when device `id`
  // cannot hold `t` or, where asked, compute or multiply with it.
  void check_dtype(DeviceId id, DType t, std::string_view what, bool arithmetic, bool matmul) const;
  // check_dtype for every operand, and every output's shape in bounds.
  void check_dtypes(DeviceId id, OperationIr& op) const;
  // Attaches a runner under the next id and publishes it; add_mutex_ held.
  DeviceId add_device(std::string name, std::string kind, caf::actor runner, bool local,
                      std::vector<DTypeSupport> custom_support = {}, std::shared_ptr<BulkLaneClient> lane = nullptr,
                      uint32_t remote_index = 0);
  // The lane a transfer of `bytes` to or from `device` takes; null: BASP.
  [[nodiscard]] BulkLaneClient* lane_for(DeviceId device, size_t bytes) const;
  // A local runner's bridge into a remote device, onto its lane if it has
  // one (actors::RunnerHooks::bulk_export).
  bool bulk_export(const caf::actor_addr& target, TensorId dst, const TensorData& data) const;
  Future<TensorData> read_on_lane(DeviceId device, const TensorIr& ir, std::shared_ptr<const void> keep);
  void on_lost(DeviceId id, const std::string& why);
  std::vector<DeviceId> connect_worker(const std::string& host, uint16_t port);
  // A device kind that starts none: listed by unavailable() and logged.
  void note_unavailable(std::string why);

  // Whether the queue's last op reads tensor `id`, which is being dropped:
  // that op is then its last use, marked as mark_last_uses would mark it.
  bool mark_last_use_locked(Queue& q, TensorId id);
  // After an op or a drop joined `q` (under its lock): a full queue is sent
  // (`sent`), the first op of a batch arms the flusher (`arm`).
  void queued_locked(DeviceId device, Queue& q, bool& sent, bool& arm);
  // Once the lock is released: a client that sent waits for room (never
  // holding the queue), and an armed flusher is woken.
  void after_queued(DeviceId device, Queue& q, bool sent, bool arm);
  // The queued ops as one batch (marked for last uses, counted as sent),
  // leaving the queue empty; empty when nothing was queued.
  std::vector<OperationIr> take_batch_locked(Queue& q);
  // Sends the queued ops as one batch; true when one was sent. Never waits:
  // the queue lock is held, and a drop on a runtime thread may need it.
  bool send_locked(DeviceId device, Queue& q, bool last = false);
  // Backpressure, after a send and outside the lock, on client threads only.
  void wait_for_room(DeviceId device, Queue& q);
  void shut_down();
  void arm_flusher();
  void flusher_loop();
  // The reply a local runner calls on its own thread to complete `promise`.
  template <class Reply, class Value, class Convert>
  LocalReply<Reply> local_reply(DeviceId device, Promise<Value> promise, std::shared_ptr<const void> keep,
                                Convert convert);
  template <class Reply, class Value, class Convert, class... Ts>
  Future<Value> ask_local(DeviceId device, std::shared_ptr<const void> keep, Convert convert, Ts... xs);
  template <class Reply, class Value, class Convert, class... Ts>
  Future<Value> ask(std::shared_ptr<const void> keep, Convert convert, Ts... xs);
  void send_in_parts(DeviceId device, const FromDataOp& upload, size_t chunk);
  Future<TensorData> read_in_parts(DeviceId device, const TensorIr& ir, std::shared_ptr<const void> keep);

  RuntimeOptions options_;
  Logger log_;  // from options_: every part of this runtime logs through it
  caf::actor_system_config config_;
  std::unique_ptr<caf::actor_system> system_;
  router_actor router_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<size_t> count_{0};
  std::mutex add_mutex_;  // serialises adding devices; guards workers_
  std::vector<Worker> workers_;
  std::vector<std::string> unavailable_;
  std::shared_ptr<actors::Tracer> tracer_;  // null unless tracing
  std::atomic<uint64_t> next_id_;
  std::atomic<bool> closed_{false};
  // Set once shut_down() stops waiting for queued work: local runners then
  // fail what they have not run (actors::RunnerHooks::abandon).
  std::shared_ptr<std::atomic<bool>> abandon_ = std::make_shared<std::atomic<bool>>(false);

  std::mutex flusher_mutex_;
  std::condition_variable flusher_wake_;
  bool flusher_stop_ = false;
  std::atomic<bool> flush_pending_{false};  // a queue got its first op since the last tick
  std::atomic<bool> flusher_parked_{false};
  std::thread flusher_;
};

}  // namespace switchyard::detail
