// SPDX-License-Identifier: Apache-2.0
#include "server.hpp"

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// The first transfer coding of a Transfer-Encoding value list that is not
// "chunked" (case-insensitive, parameters ignored), or empty if there is
// none. Beast decodes chunked only; a body under any other coding would
// reach the handler still encoded.
std::string_view unsupported_coding(std::string_view list) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    item = item.substr(0, item.find(';'));
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty() && !iequals(item, "chunked")) return item;
  }
  return {};
}

// After an error reply the peer may still be sending (a body we refused):
// closing with unread bytes makes the kernel send RST, which can destroy the
// reply before the peer reads it. So half-close and read a bounded amount
// for a bounded time first.
constexpr std::chrono::milliseconds kLingerTime{2000};
constexpr size_t kLingerBytes = 1 << 20;
// Reads of a new request's first bytes; the buffer never holds more than a
// header plus one read beyond it.
constexpr size_t kReadChunk = size_t{16} * 1024;

}  // namespace

std::string_view Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

std::string_view Request::path() const {
  std::string_view t = target;
  return t.substr(0, t.find('?'));
}

struct StatsCounters {
  std::atomic<int64_t> open{0};
  std::atomic<uint64_t> accepted{0}, requests{0}, idle_timeouts{0}, header_timeouts{0}, body_timeouts{0},
      write_timeouts{0}, bad_requests{0}, too_large{0}, body_memory_refusals{0}, accept_pauses{0}, accept_errors{0},
      address_refusals{0};
};

class Session;

namespace detail {
struct ServerCore {
  ServerCore(Options o, Handler h, ErrorFormatter e)
      : opts(std::move(o)), handler(std::move(h)), errors(std::move(e)), acceptor(asio::make_strand(ioc)) {}

  void do_accept();
  void on_accept(error_code ec, tcp::socket socket);
  void session_closed(const asio::ip::address& peer);
  void stop();

  Options opts;
  Handler handler;
  ErrorFormatter errors;
  asio::io_context ioc;
  tcp::acceptor acceptor;  // on its own strand: accept state is touched only there
  std::optional<asio::steady_timer> accept_retry;
  bool accept_paused = false;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> body_bytes_reserved{0};  // see Options::max_body_memory
  StatsCounters stats;

  std::mutex sessions_mu;
  std::list<std::weak_ptr<Session>> sessions;
  // Open connections by peer address (max_connections_per_address). Taken
  // on the acceptor's strand, released by sessions on any thread.
  std::mutex per_address_mu;
  std::map<asio::ip::address, size_t> per_address;
};
}  // namespace detail

namespace detail {

/// A request's reply slot (see Responder). Holds the session and a work
/// guard, so the event loop keeps running while a handler is busy.
struct ReplySlot {
  ReplySlot(std::shared_ptr<Session> s, asio::any_io_executor ex, asio::io_context& ioc)
      : session(std::move(s)), executor(std::move(ex)), work(ioc.get_executor()) {}
  ~ReplySlot();
  void answer(Response r);

  std::shared_ptr<Session> session;
  asio::any_io_executor executor;  // the session's strand
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::atomic<bool> done{false};
  std::mutex deadline_mu;                        // answer() may run on any thread, on_deadline() on the strand
  std::shared_ptr<asio::steady_timer> deadline;  // waited on and cancelled only on the strand
};

}  // namespace detail

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(detail::ServerCore& srv, tcp::socket socket, asio::ip::address peer)
      : srv_(srv), peer_(std::move(peer)), stream_(std::move(socket)), buffer_(limit()) {}

  ~Session() {
    release_body();
    {
      std::lock_guard lock(srv_.sessions_mu);
      srv_.sessions.erase(self_in_registry_);
    }
    srv_.session_closed(peer_);
  }

  void start() {
    {
      std::lock_guard lock(srv_.sessions_mu);
      self_in_registry_ = srv_.sessions.insert(srv_.sessions.end(), weak_from_this());
    }
    error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }

  /// On the strand: server shutdown. Connections between requests close now;
  /// one with a request in progress closes after its reply. A request has
  /// begun once its first bytes came, read or still in the socket: its
  /// sender did nothing wrong, and closing a socket with unread bytes
  /// resets it, so such a request is read (within its header deadline) and
  /// answered too.
  void on_stop() {
    if (state_ != State::idle) return;
    error_code ec;
    if (stream_.socket().available(ec) == 0 || ec) close();
  }

  /// On the strand: the handler's reply.
  void reply(Response r) {
    if (state_ != State::handling) return;  // closed meanwhile
    write(std::move(r), keep_alive_ && !srv_.stopping);
  }

  [[nodiscard]] asio::any_io_executor executor() { return stream_.get_executor(); }
  [[nodiscard]] Response error_response(int status, const std::string& message) const {
    return srv_.errors(status, message);
  }

 private:
  enum class State { idle, header, body, handling, writing, closing };

  size_t limit() const { return srv_.opts.max_header_bytes + kReadChunk; }

  void read_request() {
    if (srv_.stopping) return close();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(srv_.opts.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(srv_.opts.max_body_bytes);
    if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
    // Idle: wait for the first byte under the keep-alive deadline; the header
    // deadline starts when it comes.
    state_ = State::idle;
    stream_.expires_after(srv_.opts.idle_timeout);
    stream_.async_read_some(buffer_.prepare(kReadChunk),
                            [self = shared_from_this()](error_code ec, size_t n) { self->on_first_bytes(ec, n); });
  }

  void on_first_bytes(error_code ec, size_t n) {
    if (ec) {
      if (ec == beast::error::timeout) ++srv_.stats.idle_timeouts;
      return close();
    }
    buffer_.commit(n);
    read_header();
  }

  void read_header() {
    state_ = State::header;
    header_bytes_ = 0;
    stream_.expires_after(srv_.opts.header_timeout);
    read_header_part();
  }

  // Beast's header_limit bounds the request line and the fields each, and
  // each only within what one parse sees: fields arriving a packet at a
  // time were accepted to twice the limit and more. The parser's own count
  // of what it consumed holds the whole header to --max-header-bytes.
  void read_header_part() {
    bhttp::async_read_some(stream_, buffer_, *parser_,
                           [self = shared_from_this()](error_code ec, size_t n) { self->on_header_part(ec, n); });
  }

  void on_header_part(error_code ec, size_t consumed) {
    header_bytes_ += consumed;
    if (!ec && header_bytes_ > srv_.opts.max_header_bytes) ec = bhttp::error::header_limit;
    if (!ec && !parser_->is_header_done()) return read_header_part();
    on_header(ec);
  }

  void on_header(error_code ec) {
    if (ec) return on_read_error(ec, "header");
    auto& msg = parser_->get();
    version_ = msg.version();
    keep_alive_ = msg.keep_alive();
    for (auto [it, end] = msg.equal_range(bhttp::field::transfer_encoding); it != end; ++it) {
      if (const auto coding = unsupported_coding(it->value()); !coding.empty()) {
        ++srv_.stats.bad_requests;
        return fail(501, "Transfer-Encoding '" + std::string(coding) + "' is not implemented (only chunked is)");
      }
    }
    const bool has_length = parser_->content_length().has_value() || parser_->chunked();
    const auto method = msg.method();
    if (!has_length && (method == bhttp::verb::post || method == bhttp::verb::put || method == bhttp::verb::patch)) {
      ++srv_.stats.bad_requests;
      return fail(411, "a " + std::string(msg.method_string()) +
                           " request needs a Content-Length or a chunked Transfer-Encoding");
    }
    if (parser_->is_done()) return dispatch();
    // Bodies of all connections together stay under max_body_memory: room for
    // this one (its declared length, or the limit if chunked) is reserved
    // before a byte of it is read, and refused with 503 if there is none.
    const size_t want =
        parser_->chunked()
            ? srv_.opts.max_body_bytes
            : static_cast<size_t>(std::min<uint64_t>(*parser_->content_length(), srv_.opts.max_body_bytes));
    if (!reserve_body(want)) {
      ++srv_.stats.body_memory_refusals;
      return fail(503, "the server holds too many request bodies at once (--max-body-memory-bytes); retry later");
    }
    if (iequals(msg[bhttp::field::expect], "100-continue")) {
      // The client waits for this before sending its body (curl does for
      // bodies over 1 KiB). The body limit was already checked on the header.
      state_ = State::writing;
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_after(srv_.opts.write_timeout);
      asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](error_code ec, size_t) {
                          if (ec) {
                            if (ec == beast::error::timeout) ++self->srv_.stats.write_timeouts;
                            return self->close();
                          }
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    state_ = State::body;
    stream_.expires_after(srv_.opts.body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (ec) return on_read_error(ec, "body");
    dispatch();
  }

  void on_read_error(error_code ec, const char* phase) {
    if (ec == asio::error::operation_aborted || state_ == State::closing) return close();
    const bool in_body = std::string_view(phase) == "body";
    if (ec == beast::error::timeout) {
      // tcp_stream has already closed the socket at the deadline, so there
      // is no way (and no point) to tell the peer.
      ++(in_body ? srv_.stats.body_timeouts : srv_.stats.header_timeouts);
      return close();
    }
    // The peer went away mid-request: nobody to answer.
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::broken_pipe)
      return close();
    if (ec == bhttp::error::body_limit) {
      ++srv_.stats.too_large;
      return fail(413, "request body too large (limit " + std::to_string(srv_.opts.max_body_bytes) +
                           " bytes, set by --max-body-bytes)");
    }
    if (ec == bhttp::error::header_limit || ec == beast::http::error::buffer_overflow) {
      ++srv_.stats.bad_requests;
      return fail(431, "request header too large (limit " + std::to_string(srv_.opts.max_header_bytes) + " bytes)");
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) {
      ++srv_.stats.bad_requests;
      return fail(400, std::string("malformed request ") + phase + ": " + ec.message());
    }
    close();  // a socket error
  }

  void dispatch() {
    state_ = State::handling;
    ++srv_.stats.requests;
    stream_.expires_never();  // the handler's time is the application's business
    auto msg = parser_->release();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    auto slot = std::make_shared<detail::ReplySlot>(shared_from_this(), stream_.get_executor(), srv_.ioc);
    Responder responder(slot);
    slot.reset();
    try {
      srv_.handler(std::move(req), responder);
    } catch (const std::exception& e) {
      responder(srv_.errors(500, std::string("internal error: ") + e.what()));
    } catch (...) {
      responder(srv_.errors(500, "internal error"));
    }
    release_body();  // the handler has had the body (a handler that keeps it copies it)
  }

  bool reserve_body(size_t n) {
    auto& total = srv_.body_bytes_reserved;
    size_t cur = total.load();
    do {
      if (cur + n > srv_.opts.max_body_memory) return false;
    } while (!total.compare_exchange_weak(cur, cur + n));
    reserved_ = n;
    return true;
  }

  void release_body() {
    if (reserved_ == 0) return;
    srv_.body_bytes_reserved -= reserved_;
    reserved_ = 0;
  }

  void write(Response r, bool keep_alive) {
    state_ = State::writing;
    out_.emplace();
    out_->version(version_);
    out_->result(static_cast<unsigned>(r.status));
    out_->set(bhttp::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) out_->set(k, v);
    out_->body() = std::move(r.body);
    out_->keep_alive(keep_alive);
    out_->prepare_payload();
    stream_.expires_after(srv_.opts.write_timeout);
    bhttp::async_write(stream_, *out_, [self = shared_from_this(), keep_alive](error_code ec, size_t) {
      self->out_.reset();
      if (ec) {
        if (ec == beast::error::timeout) ++self->srv_.stats.write_timeouts;
        return self->close();
      }
      if (!keep_alive) return self->linger();
      self->read_request();
    });
  }

  /// An error the layer answers itself: reply, then close (the stream's
  /// framing can no longer be trusted).
  void fail(int status, const std::string& message) {
    keep_alive_ = false;
    release_body();
    parser_.reset();  // with the partial body in it
    Response r = srv_.errors(status, message);
    write(std::move(r), false);
  }

  void linger() {
    state_ = State::closing;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    stream_.expires_after(kLingerTime);
    discard_more();
  }

  void discard_more() {
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code ec, size_t n) {
      self->discarded_ += n;
      if (ec || self->discarded_ >= kLingerBytes) return self->close();
      self->discard_more();
    });
  }

  void close() {
    state_ = State::closing;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  detail::ServerCore& srv_;
  asio::ip::address peer_;  // counted in srv_.per_address while this session lives
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<bhttp::response<bhttp::string_body>> out_;
  State state_ = State::idle;
  size_t header_bytes_ = 0;  // of the request being read, as the parser consumed them
  unsigned version_ = 11;
  bool keep_alive_ = true;
  std::array<char, 4096> discard_{};
  size_t discarded_ = 0;
  size_t reserved_ = 0;  // of ServerCore::body_bytes_reserved, for the body being read
  std::list<std::weak_ptr<Session>>::iterator self_in_registry_;
};

namespace detail {

void ReplySlot::answer(Response r) {
  std::shared_ptr<asio::steady_timer> timer;
  {
    std::lock_guard lock(deadline_mu);
    if (done.exchange(true)) return;
    timer = deadline;
  }
  asio::post(executor, [s = session, t = std::move(timer), r = std::move(r)]() mutable {
    if (t) t->cancel();
    s->reply(std::move(r));
  });
  work.reset();  // the posted reply keeps the loop running from here
}

ReplySlot::~ReplySlot() {
  if (!done) answer(session->error_response(500, "internal error: the handler dropped the request unanswered"));
}

}  // namespace detail

void Responder::operator()(Response r) const { slot_->answer(std::move(r)); }

bool Responder::answered() const { return slot_->done; }

void Responder::on_deadline(std::chrono::milliseconds limit, std::function<void()> on_expiry) const {
  // Called on the strand (inside the handler), so the timer is created and
  // waited on there; the lock orders it with an answer() from another
  // thread, which then cancels it (on the strand).
  std::lock_guard lock(slot_->deadline_mu);
  if (slot_->done || slot_->deadline) return;
  slot_->deadline = std::make_shared<asio::steady_timer>(slot_->executor, limit);
  std::weak_ptr<detail::ReplySlot> weak = slot_;
  slot_->deadline->async_wait([weak, f = std::move(on_expiry)](error_code ec) {
    if (ec) return;
    auto slot = weak.lock();  // gone: answered and released meanwhile
    if (slot && !slot->done) f();
  });
}

// --- accept loop ---------------------------------------------------------

void detail::ServerCore::do_accept() {
  if (stopping) return;
  if (static_cast<size_t>(stats.open.load()) >= opts.max_connections) {
    // New connections wait in the kernel's backlog until one closes.
    accept_paused = true;
    ++stats.accept_pauses;
    return;
  }
  acceptor.async_accept(asio::make_strand(ioc),
                        [this](error_code ec, tcp::socket socket) { on_accept(ec, std::move(socket)); });
}

void detail::ServerCore::on_accept(error_code ec, tcp::socket socket) {
  if (ec == asio::error::operation_aborted || stopping) return;
  if (ec) {
    ++stats.accept_errors;
    // Out of file descriptors (or memory): the pending connection stays in
    // the backlog and accept would fail again at once. Retry after a pause
    // instead of spinning.
    if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
        ec.value() == ENFILE) {
      accept_retry.emplace(acceptor.get_executor(), std::chrono::milliseconds(100));
      accept_retry->async_wait([this](error_code e) {
        if (!e) do_accept();
      });
      return;
    }
    return do_accept();  // that one connection failed (e.g. reset before accept)
  }
  error_code peer_ec;
  asio::ip::address peer = socket.remote_endpoint(peer_ec).address();  // unspecified if it is gone already
  if (const size_t limit = opts.max_connections_per_address; limit > 0) {
    std::lock_guard lock(per_address_mu);
    size_t& held = per_address[peer];
    if (held >= limit) {
      ++stats.address_refusals;
      error_code ignored;
      socket.close(ignored);
      return do_accept();
    }
    ++held;
  }
  ++stats.accepted;
  ++stats.open;
  std::make_shared<Session>(*this, std::move(socket), std::move(peer))->start();
  do_accept();
}

void detail::ServerCore::session_closed(const asio::ip::address& peer) {
  if (opts.max_connections_per_address > 0) {
    std::lock_guard lock(per_address_mu);
    if (auto it = per_address.find(peer); it != per_address.end() && --it->second == 0) per_address.erase(it);
  }
  --stats.open;
  asio::post(acceptor.get_executor(), [this] {
    if (accept_paused && !stopping && static_cast<size_t>(stats.open.load()) < opts.max_connections) {
      accept_paused = false;
      do_accept();
    }
  });
}

void detail::ServerCore::stop() {
  asio::post(acceptor.get_executor(), [this] {
    if (stopping.exchange(true)) return;
    error_code ec;
    acceptor.close(ec);
    if (accept_retry) accept_retry->cancel();
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard lock(sessions_mu);
      for (auto& w : sessions)
        if (auto s = w.lock()) live.push_back(std::move(s));
    }
    for (auto& s : live) asio::post(s->executor(), [s] { s->on_stop(); });
  });
}

// --- Server ----------------------------------------------------------------

Server::Server(Options opts, Handler handler, ErrorFormatter errors)
    : impl_(std::make_unique<detail::ServerCore>(std::move(opts), std::move(handler), std::move(errors))) {
  auto& o = impl_->opts;
  if (!impl_->errors)
    impl_->errors = [](int status, const std::string& message) {
      return Response{status, "text/plain", message + "\n", {}};
    };
  if (o.threads < 1) o.threads = 1;
  if (o.max_connections < 1) o.max_connections = 1;
  error_code ec;
  auto address = asio::ip::make_address(o.host, ec);
  if (ec) throw std::runtime_error("cannot listen on '" + o.host + "': not an IP address (" + ec.message() + ")");
  tcp::endpoint endpoint(address, o.port);
  auto& a = impl_->acceptor;
  // The worker's wording for a port in use (README, "Scaling out"), with
  // the step that failed.
  auto check = [&](const char* step) {
    if (ec)
      throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) + " (" + step +
                               "): " + ec.message());
  };
  a.open(endpoint.protocol(), ec);
  check("socket");
  a.set_option(asio::socket_base::reuse_address(true), ec);
  check("SO_REUSEADDR");
  a.bind(endpoint, ec);
  check("bind");
  a.listen(o.backlog, ec);
  check("listen");
}

Server::~Server() = default;

uint16_t Server::port() const {
  error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void Server::run() {
  asio::post(impl_->acceptor.get_executor(), [this] { impl_->do_accept(); });
  auto loop = [this] {
    // A handler that throws through Asio ends run(): report it and go on
    // serving the other connections.
    for (;;) {
      try {
        impl_->ioc.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "http: event loop: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < impl_->opts.threads; ++i) threads.emplace_back(loop);
  loop();
  for (auto& t : threads) t.join();
}

void Server::stop() { impl_->stop(); }

Stats Server::stats() const {
  const auto& c = impl_->stats;
  Stats s;
  s.open = c.open;
  s.accepted = c.accepted;
  s.requests = c.requests;
  s.idle_timeouts = c.idle_timeouts;
  s.header_timeouts = c.header_timeouts;
  s.body_timeouts = c.body_timeouts;
  s.write_timeouts = c.write_timeouts;
  s.bad_requests = c.bad_requests;
  s.too_large = c.too_large;
  s.body_memory_refusals = c.body_memory_refusals;
  s.accept_pauses = c.accept_pauses;
  s.accept_errors = c.accept_errors;
  s.address_refusals = c.address_refusals;
  return s;
}

}  // namespace http
