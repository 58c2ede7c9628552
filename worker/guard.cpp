// SPDX-License-Identifier: Apache-2.0
#include "worker/guard.hpp"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/acceptor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/openssl/session.hpp>
#include <caf/policy/tcp.hpp>

#include "switchyard/messages/protocol.hpp"

namespace switchyard::worker {

namespace net = caf::io::network;

// ---- leaving the event loop ----------------------------------------------------

namespace {

// CAF 0.17's multiplexer queues registrations until its loop next runs, and
// squashes an add and a del of one socket that meet there into nothing; it
// then never calls removed_from_loop(read), so the handler keeps its manager
// (its own servant: a reference cycle) and the socket stays open. It happens
// when a broker adds and drops a servant in one turn: a worker stopped right
// after it started listening leaked its listening socket (LeakSanitizer, about
// 1 stop in 60). A handler whose read registration has not reached the loop
// gets that call here instead. The caller's broker still holds the servant.
template <class Handler>
void leave_loop(Handler& handler) {
  const bool registered = (handler.eventbf() & net::input_mask) != 0;
  handler.passivate();
  if (!registered) handler.removed_from_loop(net::operation::read);
}

}  // namespace

// ---- ConnectionGuard --------------------------------------------------------

namespace {

size_t default_max_connections() {
  rlimit lim{};
  size_t fds = 1024;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) fds = lim.rlim_cur;
  // Headroom for the worker's own files, pipes, CAF's epoll and peer
  // connections it opens itself; never below a handful of clients.
  constexpr size_t reserve = 64;
  return std::max<size_t>(8, std::min<size_t>(fds > reserve ? fds - reserve : 8, 4096));
}

}  // namespace

ConnectionGuard::ConnectionGuard(GuardLimits limits, std::function<void(const std::string&)> warn)
    : limits_(limits), warn_(std::move(warn)) {
  if (limits_.max_connections == 0) limits_.max_connections = default_max_connections();
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  sweeper_ = std::thread([this] { sweep_loop(); });
}

ConnectionGuard::~ConnectionGuard() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  sweeper_.join();
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

GuardCounters ConnectionGuard::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

bool ConnectionGuard::admit(const std::string& peer) {
  std::lock_guard lock(mutex_);
  // The caps first: a connection they refuse takes no token, so a peer held
  // at its cap is counted (and logged) as that, not as over the rate once
  // its retries have emptied its bucket.
  if (counters_.open >= limits_.max_connections) {
    ++counters_.refused_total_limit;
    return false;
  }
  if (auto it = per_address_.find(peer);
      it != per_address_.end() && it->second >= limits_.max_connections_per_address) {
    ++counters_.refused_address_limit;
    return false;
  }
  if (const double rate = limits_.max_connect_rate_per_address; rate > 0) {
    const double burst = std::max(64.0, rate);
    const auto now = std::chrono::steady_clock::now();
    auto [it, fresh] = buckets_.try_emplace(peer, Bucket{burst, now});
    auto& b = it->second;
    b.tokens = std::min(burst, b.tokens + rate * std::chrono::duration<double>(now - b.last).count());
    b.last = now;
    if (b.tokens < 1) {
      ++counters_.refused_rate_limit;
      return false;
    }
    b.tokens -= 1;
  }
  return true;
}

void ConnectionGuard::opened(GuardedConnection* c, const std::string& peer, bool accepted) {
  std::lock_guard lock(mutex_);
  live_.insert(c);
  if (accepted) {
    ++per_address_[peer];
    ++counters_.accepted;
  }
  counters_.peak_open = std::max(counters_.peak_open, ++counters_.open);
}

void ConnectionGuard::closed(GuardedConnection* c, const std::string& peer, bool accepted) {
  std::lock_guard lock(mutex_);
  live_.erase(c);
  --counters_.open;
  if (accepted) {
    auto it = per_address_.find(peer);
    if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
  }
}

void ConnectionGuard::expire_all() {
  std::lock_guard lock(mutex_);
  for (auto* c : live_) c->expire();
}

void ConnectionGuard::count_framing_close() {
  std::lock_guard lock(mutex_);
  ++counters_.closed_framing;
}

void ConnectionGuard::count_output_close() {
  std::lock_guard lock(mutex_);
  ++counters_.closed_output;
}

void ConnectionGuard::count_pause() {
  std::lock_guard lock(mutex_);
  ++counters_.paused_queued;
}

void ConnectionGuard::set_runners(const std::vector<caf::actor>& runners) {
  for (const auto& r : runners) runners_.emplace(r.id(), caf::actor_cast<caf::weak_actor_ptr>(r));
}

caf::actor ConnectionGuard::runner(caf::actor_id id) const {
  auto it = runners_.find(id);
  return it == runners_.end() ? caf::actor{} : caf::actor_cast<caf::actor>(it->second.lock());
}

void ConnectionGuard::shed_one(int listen_fd) {
  std::lock_guard lock(mutex_);
  ++counters_.shed_no_fds;
  if (reserve_fd_ >= 0) {
    ::close(reserve_fd_);
    reserve_fd_ = -1;
  }
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) ::close(fd);
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void ConnectionGuard::sweep_loop() {
  // A coarse clock is enough: the deadline is seconds, the sweep costs a
  // walk over at most max_connections entries.
  const auto period =
      std::clamp(limits_.handshake_timeout / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  std::unique_lock lock(mutex_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    auto now = std::chrono::steady_clock::now();
    // Buckets that have refilled say nothing: dropping them keeps the map
    // as small as the set of addresses that connected lately.
    const double rate = limits_.max_connect_rate_per_address;
    const double burst = std::max(64.0, rate);
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      if (it->second.tokens + rate * std::chrono::duration<double>(now - it->second.last).count() >= burst)
        it = buckets_.erase(it);
      else
        ++it;
    }
    // Bytes a quiet connection queued below half its bound would stay in
    // the worker's total, and hold other connections back, until it next
    // sent something: covered by barriers once a sweep.
    const bool queued = queued_total_->load(std::memory_order_relaxed) > 0;
    for (auto* c : live_) {
      if (queued) c->cover_queued();
      if (!c->handshake_done() && now - c->opened_at() > limits_.handshake_timeout) {
        c->expire();
        ++counters_.closed_handshake_timeout;
      } else if (auto last = c->payload_progress(); last && now - *last > limits_.payload_stall_timeout) {
        c->expire();
        ++counters_.closed_payload_stall;
      }
    }
  }
}

// ---- transport policies -------------------------------------------------------

namespace {

// caf::openssl's stream policy is internal to its library; this one calls the
// same public session API.
struct TlsPolicy {
  explicit TlsPolicy(caf::openssl::session_ptr session) : session_(std::move(session)) {}
  net::rw_state read_some(size_t& result, net::native_socket fd, void* buf, size_t len) {
    return session_->read_some(result, fd, buf, len);
  }
  net::rw_state write_some(size_t& result, net::native_socket fd, const void* buf, size_t len) {
    return session_->write_some(result, fd, buf, len);
  }
  bool must_read_more(net::native_socket fd, size_t threshold) { return session_->must_read_more(fd, threshold); }

 private:
  caf::openssl::session_ptr session_;
};

// Accepts with accept4 and sheds a connection when out of descriptors,
// instead of returning with the listening socket still readable (what
// caf::policy::tcp does, which makes the level-triggered loop spin).
struct GuardedAcceptPolicy {
  explicit GuardedAcceptPolicy(ConnectionGuard* guard) : guard_(guard) {}
  bool try_accept(net::native_socket& result, net::native_socket fd) {
    result = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (result >= 0) return true;
    const int err = errno;
    result = net::invalid_native_socket;
    if (err == EMFILE || err == ENFILE) guard_->shed_one(fd);
    // EAGAIN (another wakeup took it), ECONNABORTED, ...: nothing to do now.
    return true;
  }

 private:
  ConnectionGuard* guard_;
};

// ---- the scribe -----------------------------------------------------------------

// ---- queued bytes (GuardLimits::max_queued_bytes) -----------------------------

/// What reaches a scribe from other threads (a runner's barrier, the
/// guard's sweep), always posted to the scribe's multiplexer thread and
/// called there while the scribe lives.
class IngressGate {
 public:
  virtual ~IngressGate() = default;
  /// The barrier sent to `runner` when `bytes` of this connection were
  /// counted there has been taken from its mailbox.
  virtual void barrier_passed(caf::actor_id runner, size_t bytes) = 0;
  /// The connection was expired: read it again, so its end is seen.
  virtual void resume_expired() = 0;
  /// Reading was resumed: read what is already there.
  virtual void read_after_resume() = 0;
  /// GuardedConnection::cover_queued, on the multiplexer's thread.
  virtual void cover_now() = 0;
};

/// The way to a scribe from other threads: cleared under the mutex when the
/// scribe goes. A live gate means a live scribe, and with it its
/// multiplexer.
struct IngressLink {
  std::mutex mutex;
  IngressGate* gate = nullptr;
  net::default_multiplexer* mpx = nullptr;
  /// Bytes of barriers that passed and whose report has not run on the
  /// multiplexer's thread yet: a thread busy reading runs its posted work
  /// only between reads, so the scribe counts these as taken at once.
  std::atomic<size_t> passed{0};
};

/// Runs f(gate) on the multiplexer's thread if the scribe still lives then.
/// f runs without the mutex (it may post again): a scribe handed to its
/// broker is released only on that thread, so it cannot go meanwhile.
template <class F>
void post_to_gate(const std::shared_ptr<IngressLink>& link, F f) {
  std::lock_guard lock(link->mutex);
  if (link->gate == nullptr) return;
  link->mpx->post([weak = std::weak_ptr(link), f = std::move(f)] {
    auto l = weak.lock();
    if (!l) return;
    IngressGate* gate = nullptr;
    {
      std::lock_guard lock(l->mutex);
      gate = l->gate;
    }
    if (gate != nullptr) f(*gate);
  });
}

/// One barrier: passes when the runner answers it, or when its message is
/// destroyed unanswered (the runner stopped), so a connection never waits on
/// a runner that is gone. Its bytes leave the worker's total when it passes,
/// also after its connection has gone (their messages may still wait).
class IngressBarrier {
 public:
  IngressBarrier(std::weak_ptr<IngressLink> link, std::shared_ptr<std::atomic<size_t>> total, caf::actor_id runner,
                 size_t bytes)
      : link_(std::move(link)), total_(std::move(total)), runner_(runner), bytes_(bytes) {}
  ~IngressBarrier() { pass(); }
  IngressBarrier(const IngressBarrier&) = delete;
  IngressBarrier& operator=(const IngressBarrier&) = delete;

  void pass() {
    if (passed_.exchange(true)) return;
    total_->fetch_sub(bytes_, std::memory_order_relaxed);
    if (auto link = link_.lock()) {
      link->passed.fetch_add(bytes_, std::memory_order_relaxed);
      post_to_gate(link, [runner = runner_, bytes = bytes_](IngressGate& g) { g.barrier_passed(runner, bytes); });
    }
  }

 private:
  std::weak_ptr<IngressLink> link_;
  std::shared_ptr<std::atomic<size_t>> total_;
  caf::actor_id runner_;
  size_t bytes_;
  std::atomic<bool> passed_{false};
};

/// CAF's stream with reading paused and resumed by its scribe. Pausing is
/// consume() returning false, after which the stream removes its read
/// registration; the multiplexer applies that later, and until it has, the
/// stream still holds its reader, so a resume asked for before then is done
/// when the removal arrives (a registration added now would be removed by
/// it).
template <class Policy>
class PausableStream final : public net::stream_impl<Policy> {
 public:
  using net::stream_impl<Policy>::stream_impl;

  void removed_from_loop(net::operation op) override {
    if (op == net::operation::read) {
      if (resume_at_removal_ && !closing_) {
        resume_at_removal_ = false;
        net::event_handler::activate();  // the reader stays set
        on_resumed_();
        return;
      }
      reading_ = false;
    }
    net::stream_impl<Policy>::removed_from_loop(op);
  }

  void started() { reading_ = true; }
  void paused() { pausing_ = true; }

  /// Reads again (now, or when the pause's removal arrives); calls
  /// `on_resumed` once it does.
  void resume_reading(net::stream_manager* reader, std::function<void()> on_resumed) {
    if (closing_ || !pausing_) return;
    pausing_ = false;
    on_resumed_ = std::move(on_resumed);
    if (reading_) {
      resume_at_removal_ = true;
      return;
    }
    reading_ = true;
    this->activate(reader);
    on_resumed_();
  }

  /// The stream holds its reader and is registered (or about to be) for
  /// reads.
  [[nodiscard]] bool reading() const { return reading_ && !pausing_ && !resume_at_removal_ && !closing_; }
  /// The connection is ending: a pending resume must not register it again.
  void closing() { closing_ = true; }

 private:
  bool reading_ = false;
  bool pausing_ = false;
  bool resume_at_removal_ = false;
  bool closing_ = false;
  std::function<void()> on_resumed_;
};

template <class Policy>
class GuardedScribe final : public caf::io::scribe, public GuardedConnection, public IngressGate {
 public:
  template <class... Ts>
  GuardedScribe(net::default_multiplexer& mpx, net::native_socket fd, std::shared_ptr<ConnectionGuard> guard,
                std::string peer, bool accepted, bool tls, Ts&&... policy_args)
      : caf::io::scribe(caf::io::connection_handle::from_int(guard->next_connection_id())),
        stream_(mpx, fd, std::forward<Ts>(policy_args)...),
        guard_(std::move(guard)),
        framing_(guard_->limits().framing, accepted),
        peer_(std::move(peer)),
        accepted_(accepted),
        tls_(tls),
        fd_(fd),
        opened_at_(std::chrono::steady_clock::now()),
        link_(std::make_shared<IngressLink>()) {
    link_->gate = this;
    link_->mpx = &mpx;
    guard_->opened(this, peer_, accepted_);
  }
  ~GuardedScribe() override {
    {
      std::lock_guard lock(link_->mutex);
      link_->gate = nullptr;
    }
    // What no barrier covers yet leaves the worker's total when the runner
    // has taken it, not now: a peer reconnecting could queue on otherwise.
    for (auto& [runner, bytes] : queued_)
      if (bytes > covered_[runner]) send_barrier(runner, bytes - covered_[runner], {});
    guard_->closed(this, peer_, accepted_);
  }

  void configure_read(caf::io::receive_policy::config config) override {
    // The broker asks for the next unit; the framing already saw the header
    // that announced it. A size it did not announce is refused, and the
    // stream then reads one byte at most, so nothing large is allocated.
    const bool exact = config.first == caf::io::receive_policy_flag::exactly;
    if (!exact || !framing_.allow_read(config.second)) {
      refuse_from_broker();
      config = caf::io::receive_policy::at_most(1);
    } else if (config.second > piece_bytes) {
      // CAF's stream would allocate (and zero) the whole payload now, for a
      // header of 32 bytes: a peer declaring 256 MiB and going silent held
      // that for as long as it stayed connected. Pieces instead, each read
      // taking what has arrived (at most), so the socket drains as before.
      assembly_want_ = config.second;
      mark_progress();
      config = caf::io::receive_policy::at_most(piece_bytes);
    }
    stream_.configure_read(config);
    if (!launched_) launch();
  }

  bool consume(caf::execution_unit* ctx, const void* buf, size_t n) override {
    if (assembly_want_ == 0 || expired_.load()) return deliver(ctx, buf, n);
    if (assembly_.capacity() < assembly_.size() + n)
      assembly_.reserve(std::min(assembly_want_, std::max(2 * assembly_.capacity(), assembly_.size() + n)));
    const auto* bytes = static_cast<const char*>(buf);
    assembly_.insert(assembly_.end(), bytes, bytes + n);
    mark_progress();
    if (assembly_.size() < assembly_want_) {
      stream_.configure_read(
          caf::io::receive_policy::at_most(std::min(piece_bytes, assembly_want_ - assembly_.size())));
      return true;
    }
    assembly_want_ = 0;
    progress_ns_.store(0);
    // caf::io::scribe::consume hands the broker rd_buf(), whatever `buf`
    // says: the payload goes there for the call, the stream's own piece
    // buffer comes back after it. The assembly keeps its capacity for the
    // next message, as CAF's own read buffer did: fresh pages for every
    // message made BASP uploads 15x slower (a page fault costs ~16 us on
    // this VM, and the socket was not read meanwhile).
    stream_.rd_buf().swap(assembly_);
    const bool ok = deliver(ctx, stream_.rd_buf().data(), stream_.rd_buf().size());
    stream_.rd_buf().swap(assembly_);
    assembly_.clear();
    return ok;
  }

  std::optional<std::chrono::steady_clock::time_point> payload_progress() const override {
    const int64_t ns = progress_ns_.load();
    if (ns == 0) return std::nullopt;
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
  }

 private:
  static constexpr size_t piece_bytes = size_t{1} << 20;

  void mark_progress() {
    progress_ns_.store(std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
               .count()));
  }

  // One unit as the broker asked for it (a header, or a whole payload).
  bool deliver(caf::execution_unit* ctx, const void* buf, size_t n) {
    if (expired_.load() || !framing_.on_unit(buf, n)) {
      if (!expired_.load()) {
        guard_->count_framing_close();
        // Refusals before the handshake are counted, not logged (a flood
        // would flood the log); one of a peer that completed it is news.
        if (framing_.handshake_done()) guard_->warn("closing connection from " + peer_ + ": " + framing_.error());
      }
      close_now(ctx);
      return false;
    }
    if (framing_.handshake_done() && !handshake_done_.exchange(true) && accepted_) {
      // This unit was the client handshake's payload: its node id.
      caf::binary_deserializer source{ctx, static_cast<const char*>(buf), n};
      if (source(peer_node_)) peer_node_ = caf::node_id{};
    }
    const caf::actor_id to = framing_.delivered_to();
    if (!caf::io::scribe::consume(ctx, buf, n)) return false;
    return count_queued(to, n);
  }

  // The broker has put a message for actor `to` into its mailbox before
  // consume returns, or handed it to one of CAF's BASP workers, which
  // deserialize a message each off this thread (when none is free, the
  // broker does it here): a barrier may pass before those few messages
  // are in, so the bound is loose by a message per BASP worker. Every
  // byte counted is later covered
  // by one barrier, which the runner answers once it has taken everything
  // queued before it: then those bytes are no longer counted, here and in
  // the worker's total. Barriers go from half the bound on; past the bound,
  // or past the worker's total, reading stops until this connection's
  // barriers are back.
  bool count_queued(caf::actor_id to, size_t n) {
    const auto& limits = guard_->limits();
    if (to == 0 || limits.max_queued_bytes == 0 || !guard_->is_runner(to)) return true;
    queued_[to] += n;
    queued_total_ += n;
    const size_t total = guard_->queued_total()->fetch_add(n, std::memory_order_relaxed) + n;
    const bool over_total = limits.max_queued_bytes_total != 0 && total > limits.max_queued_bytes_total;
    if (queued_total_ < limits.max_queued_bytes / 2 && !over_total) return true;
    send_barriers();
    // A message alone does not stop reading, whatever its size: an upload's
    // parts (16 MiB by default) would each wait for the runner to take the
    // one before, where the next part's transfer and the runner's copy of
    // the last overlap. So what waits is at most the bound plus a message.
    const size_t waiting = queued_total_ - std::min(queued_total_, link_->passed.load(std::memory_order_relaxed));
    if ((waiting <= limits.max_queued_bytes && !over_total) || waiting <= n) return true;
    paused_ = true;
    stream_.paused();
    guard_->count_pause();
    return false;  // the stream stops reading
  }

  // A barrier to each runner for the bytes no barrier covers yet (one
  // round at a time).
  void send_barriers() {
    if (barriers_out_ > 0) return;
    for (auto& [runner, bytes] : queued_) {
      const size_t uncovered = bytes - covered_[runner];
      if (uncovered == 0) continue;
      covered_[runner] = bytes;
      ++barriers_out_;
      send_barrier(runner, uncovered, link_);
    }
  }

  void send_barrier(caf::actor_id runner, size_t bytes, std::weak_ptr<IngressLink> link) {
    // A runner that is gone passes its barrier at once (the barrier's
    // destructor), as does one that stops before taking it.
    auto barrier = std::make_shared<IngressBarrier>(std::move(link), guard_->queued_total(), runner, bytes);
    if (auto to = guard_->runner(runner))
      caf::anon_send(caf::actor_cast<runner_actor>(to), ingress_atom::value,
                     LocalReply<done_atom>{[barrier](const caf::expected<done_atom>&) { barrier->pass(); }});
  }

  void resume() {
    paused_ = false;
    stream_.resume_reading(this, [link = link_] { post_to_gate(link, [](IngressGate& g) { g.read_after_resume(); }); });
  }

 public:
  // IngressGate, on the multiplexer's thread.
  void barrier_passed(caf::actor_id runner, size_t bytes) override {
    queued_[runner] -= bytes;
    covered_[runner] -= bytes;
    queued_total_ -= bytes;
    link_->passed.fetch_sub(bytes, std::memory_order_relaxed);
    if (barriers_out_ == 0 || --barriers_out_ > 0) return;
    const auto& limits = guard_->limits();
    const bool over_total = limits.max_queued_bytes_total != 0 &&
                            guard_->queued_total()->load(std::memory_order_relaxed) > limits.max_queued_bytes_total;
    // With nothing of its own queued a connection reads on whatever the
    // total: the others' barriers bring that down.
    if (paused_ && queued_total_ <= limits.max_queued_bytes && (!over_total || queued_total_ == 0)) {
      resume();
      return;
    }
    if (paused_ || queued_total_ >= limits.max_queued_bytes / 2) send_barriers();
  }
  void resume_expired() override {
    if (paused_) resume();
  }
  void cover_now() override {
    if (queued_total_ > 0) send_barriers();
  }
  // What TLS decrypted before the pause is not on the socket any more, so
  // no event would announce it.
  void read_after_resume() override {
    if (stream_.reading()) stream_.handle_event(net::operation::read);
  }

 public:
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }

  void graceful_shutdown() override {
    stream_.closing();
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }

  void flush() override {
    // A peer that does not drain its replies: drop what is queued and
    // disconnect it; its node then goes down and the worker frees its
    // tensors as for any client that leaves.
    if (stream_.wr_buf().size() > guard_->limits().max_output_bytes) {
      std::vector<char>().swap(stream_.wr_buf());
      if (!expired_.exchange(true)) {
        guard_->count_output_close();
        guard_->warn("closing connection from " + peer_ + ": more than " +
                     std::to_string(guard_->limits().max_output_bytes) +
                     " bytes of output queued (--max-output-bytes)");
      }
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
    stream_.flush(this);
  }

  std::string addr() const override {
    auto x = net::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string{};
  }
  uint16_t port() const override {
    auto x = net::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override {
    stream_.closing();
    leave_loop(stream_);
  }

  // GuardedConnection
  void cover_queued() override {
    post_to_gate(link_, [](IngressGate& g) { g.cover_now(); });
  }
  void expire() override {
    expired_.store(true);
    ::shutdown(fd_, SHUT_RDWR);
    // A paused connection is not read, so the event loop would not see the
    // end (any thread may expire a connection).
    post_to_gate(link_, [](IngressGate& g) { g.resume_expired(); });
  }
  bool handshake_done() const override { return handshake_done_.load(); }
  std::chrono::steady_clock::time_point opened_at() const override { return opened_at_; }

 private:
  void launch() {
    launched_ = true;
    stream_.start(this);
    stream_.started();
    // TLS: schedules the first write so SSL_accept/SSL_connect can progress
    // before any data is queued (as caf::openssl's own scribe does).
    if (tls_) stream_.force_empty_write(this);
  }

  // Refused while the broker is running (inside its own handler): the socket
  // is shut down, the event loop then reports the end of the connection.
  void refuse_from_broker() {
    if (!expired_.exchange(true)) guard_->count_framing_close();
    ::shutdown(fd_, SHUT_RDWR);
  }

  // Refused while the stream delivers data: report the connection as failed
  // now, exactly as the stream does for a read error.
  void close_now(caf::execution_unit* ctx) {
    expired_.store(true);
    ::shutdown(fd_, SHUT_RDWR);
    io_failure(ctx, net::operation::read);
  }

  // Every path that ends a connection (peer hung up, read or write error,
  // the broker closing it, the broker's own shutdown) detaches the scribe
  // from the broker here, on the broker's thread.
  void detach_from(caf::io::abstract_broker* broker) override {
    stream_.closing();
    forget_spawn_server(broker);
    caf::io::scribe::detach_from(broker);
  }

 private:
  // CAF 0.17's BASP broker spawns a helper actor for every node that
  // completes a handshake (for remote spawn, which the worker never offers)
  // and keeps its handle in `spawn_servers` until the broker itself stops:
  // each node that ever connected costs an actor forever, so a handshake
  // flood grows the worker without bound. When a node's last connection
  // ends, its helper goes too.
  //
  // The helper is looked up before the routing table, and that order is what
  // keeps the broker's own stop safe: its on_exit() clears spawn_servers and
  // then destroys `instance` (routing table included) by hand, and only
  // then does its cleanup close every connection through here. Reading the
  // table first crashed the worker on SIGTERM (SIGSEGV in lookup_direct,
  // about once in 300 stops with busy clients on a loaded machine).
  void forget_spawn_server(caf::io::abstract_broker* broker) {
    if (!accepted_ || peer_node_ == caf::node_id{}) return;
    auto* basp = dynamic_cast<caf::io::basp_broker*>(broker);
    if (basp == nullptr) return;
    auto it = basp->spawn_servers.find(peer_node_);
    if (it == basp->spawn_servers.end()) return;
    if (auto route = basp->instance.tbl().lookup_direct(peer_node_); route && *route != hdl()) return;
    caf::anon_send_exit(it->second, caf::exit_reason::kill);
    basp->spawn_servers.erase(it);
  }

  bool launched_ = false;
  PausableStream<Policy> stream_;
  std::shared_ptr<ConnectionGuard> guard_;
  BaspFraming framing_;
  std::string peer_;
  bool accepted_;
  bool tls_;
  net::native_socket fd_;
  std::chrono::steady_clock::time_point opened_at_;
  std::atomic<bool> handshake_done_{false};
  std::atomic<bool> expired_{false};
  caf::node_id peer_node_;
  // A payload arriving in pieces (configure_read): its size, the bytes so
  // far, and when the last piece came (0: none in progress; read by the
  // guard's sweep thread).
  size_t assembly_want_ = 0;
  std::vector<char> assembly_;
  std::atomic<int64_t> progress_ns_{0};
  // Queued bytes: per runner, those not known to be taken yet, and the
  // barriers not back yet (multiplexer's thread only; queued_total_ is
  // this connection's, guard_->queued_total() the worker's).
  std::map<caf::actor_id, size_t> queued_;
  std::map<caf::actor_id, size_t> covered_;  // of queued_, what barriers on their way cover
  size_t queued_total_ = 0;
  size_t barriers_out_ = 0;
  bool paused_ = false;
  std::shared_ptr<IngressLink> link_;
};

caf::io::scribe_ptr make_scribe(net::default_multiplexer& mpx, caf::actor_system& sys, net::native_socket fd,
                                const std::shared_ptr<ConnectionGuard>& guard, std::string peer, bool accepted,
                                bool tls) {
  net::nonblocking(fd, true);
  net::keepalive(fd, true);
  if (!tls) return caf::make_counted<GuardedScribe<caf::policy::tcp>>(mpx, fd, guard, std::move(peer), accepted, false);
  auto session = caf::openssl::make_session(sys, fd, accepted);
  if (!session) return nullptr;
  return caf::make_counted<GuardedScribe<TlsPolicy>>(mpx, fd, guard, std::move(peer), accepted, true,
                                                     std::move(session));
}

// ---- the doorman ----------------------------------------------------------------

class GuardedDoorman final : public caf::io::doorman {
 public:
  GuardedDoorman(net::default_multiplexer& mpx, net::native_socket fd, std::shared_ptr<ConnectionGuard> guard, bool tls)
      : caf::io::doorman(net::accept_hdl_from_socket(fd)),
        acceptor_(mpx, fd, guard.get()),
        guard_(std::move(guard)),
        tls_(tls) {}

  bool new_connection() override {
    if (detached()) return false;
    auto& mpx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    auto peer = net::remote_addr_of_fd(fd);
    if (!peer || !guard_->admit(*peer)) {
      // Closed at once: a refused peer holds nothing here.
      net::close_socket(fd);
      return false;
    }
    auto scribe = make_scribe(mpx, parent()->system(), fd, guard_, *peer, true, tls_);
    if (!scribe) {
      net::close_socket(fd);
      return false;
    }
    auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return caf::io::doorman::new_connection(&mpx, hdl);
  }
  void graceful_shutdown() override {
    acceptor_.graceful_shutdown();
    detach(&acceptor_.backend(), false);
  }
  void launch() override { acceptor_.start(this); }
  std::string addr() const override {
    auto x = net::local_addr_of_fd(acceptor_.fd());
    return x ? *x : std::string{};
  }
  uint16_t port() const override {
    auto x = net::local_port_of_fd(acceptor_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { acceptor_.activate(this); }
  void remove_from_loop() override { leave_loop(acceptor_); }

 private:
  net::acceptor_impl<GuardedAcceptPolicy> acceptor_;
  std::shared_ptr<ConnectionGuard> guard_;
  bool tls_;
};

// ---- the middleman actor ------------------------------------------------------------

class GuardedMiddleman final : public caf::io::middleman_actor_impl {
 public:
  GuardedMiddleman(caf::actor_config& cfg, caf::actor broker, std::shared_ptr<ConnectionGuard> guard, bool tls)
      : caf::io::middleman_actor_impl(cfg, std::move(broker)), guard_(std::move(guard)), tls_(tls) {}

  const char* name() const override { return "switchyard.worker.guarded_middleman"; }

 protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host, uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd) return std::move(fd.error());
    auto scribe = make_scribe(mpx(), system(), *fd, guard_, host, false, tls_);
    if (!scribe) {
      net::close_socket(*fd);
      return caf::make_error(caf::sec::cannot_connect_to_node, "TLS session setup failed", host, port);
    }
    return scribe;
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr, bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd) return std::move(fd.error());
    return caf::make_counted<GuardedDoorman>(mpx(), *fd, guard_, tls_);
  }

 private:
  net::default_multiplexer& mpx() { return static_cast<net::default_multiplexer&>(system().middleman().backend()); }

  std::shared_ptr<ConnectionGuard> guard_;
  bool tls_;
};

}  // namespace

caf::io::middleman_actor spawn_guarded_middleman(caf::actor_system& sys, std::shared_ptr<ConnectionGuard> guard,
                                                 bool tls) {
  auto broker = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  // Detached like CAF's own middleman actors: connect() blocks in a TCP
  // connect, which must not hold a scheduler thread.
  return sys.spawn<GuardedMiddleman, caf::detached + caf::hidden>(std::move(broker), std::move(guard), tls);
}

}  // namespace switchyard::worker
