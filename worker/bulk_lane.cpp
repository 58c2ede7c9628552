// SPDX-License-Identifier: Apache-2.0
#include "worker/bulk_lane.hpp"

#include <array>
#include <boost/asio.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include <caf/all.hpp>

#include "switchyard/messages/bulk_frames.hpp"
#include "switchyard/messages/op_rules.hpp"
#include "switchyard/messages/protocol.hpp"

namespace switchyard::worker {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
// Bytes moved per socket operation, each under the stall timeout: a slow
// but moving peer is served, a silent one is cut within the timeout.
constexpr size_t piece_bytes = size_t{4} << 20;
}  // namespace

struct LaneConnection;

struct BulkLane::Impl {
  BulkLaneLimits limits;
  std::function<void(const std::string&)> warn;
  std::vector<BulkLane::Device> devices;

  // The registry: the entry (admit, revoke), runners (send) and the lane's
  // thread all look here.
  mutable std::mutex mutex;
  std::map<std::string, caf::node_id> tokens;
  std::map<caf::node_id, std::shared_ptr<LaneConnection>> connections;
  BulkLaneCounters counters;

  // The lane's thread only.
  size_t unadmitted = 0;

  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_backoff{io};
  std::thread thread;

  Impl(BulkLaneLimits l, std::function<void(const std::string&)> w) : limits(l), warn(std::move(w)) {}
  void accept();
  void count(uint64_t BulkLaneCounters::*field) {
    std::lock_guard lock(mutex);
    ++(counters.*field);
  }
};

// One client's connection; touched only on the lane's thread.
struct LaneConnection : std::enable_shared_from_this<LaneConnection> {
  struct Out {
    std::vector<uint8_t> header;
    Bytes body;
    size_t sent = 0;  // body bytes written
  };

  BulkLane::Impl& lane;
  tcp::socket socket;
  asio::steady_timer read_timer;
  asio::steady_timer write_timer;
  caf::node_id client;
  bool admitted = false;
  bool closed = false;
  std::array<uint8_t, bulk::hello_bytes> hello{};
  std::vector<uint8_t> head;
  bulk::UploadHeader upload;
  Bytes body;
  size_t got = 0;
  std::deque<Out> out;
  bool writing = false;

  LaneConnection(BulkLane::Impl& l, tcp::socket s)
      : lane(l), socket(std::move(s)), read_timer(lane.io), write_timer(lane.io) {}

  std::string peer() const {
    boost::system::error_code ec;
    auto ep = socket.remote_endpoint(ec);
    return ec ? std::string("a peer") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  void close(const std::string& why, uint64_t BulkLaneCounters::*counter) {
    if (closed) return;
    closed = true;
    if (counter != nullptr) lane.count(counter);
    // Refusals before a token are only counted: a flood would flood the log.
    if (!why.empty() && admitted && lane.warn) lane.warn("bulk lane: closing the connection of " + peer() + ": " + why);
    boost::system::error_code ec;
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    read_timer.cancel();
    write_timer.cancel();
    out.clear();
    body = {};
    if (admitted) {
      std::lock_guard lock(lane.mutex);
      if (auto it = lane.connections.find(client); it != lane.connections.end() && it->second.get() == this)
        lane.connections.erase(it);
    } else {
      --lane.unadmitted;
    }
  }

  // Closes the connection if `timer` runs out before the operation it
  // guards completes (which cancels it), counted under `counter`: a stall
  // after admission, a refusal before it (a token that never came).
  void arm(asio::steady_timer& timer, std::chrono::milliseconds limit, const char* what,
           uint64_t BulkLaneCounters::*counter = &BulkLaneCounters::closed_stall) {
    timer.expires_after(limit);
    timer.async_wait([self = shared_from_this(), what, counter](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted || self->closed) return;
      self->close(std::string(what) + " made no progress within its time limit", counter);
    });
  }

  void start() {
    boost::system::error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    arm(read_timer, lane.limits.handshake_timeout, "the handshake", &BulkLaneCounters::refused);
    asio::async_read(socket, asio::buffer(hello),
                     [self = shared_from_this()](const boost::system::error_code& e, size_t) { self->on_hello(e); });
  }

  void on_hello(const boost::system::error_code& ec) {
    if (closed) return;
    read_timer.cancel();
    if (ec) return close("", &BulkLaneCounters::refused);
    if (!std::equal(bulk::magic.begin(), bulk::magic.end(), hello.begin()))
      return close("not a bulk lane hello", &BulkLaneCounters::refused);
    const std::string token(reinterpret_cast<const char*>(hello.data()) + bulk::magic.size(), bulk::token_bytes);
    {
      std::lock_guard lock(lane.mutex);
      auto it = lane.tokens.find(token);
      if (it == lane.tokens.end()) {
        ++lane.counters.refused;
      } else if (lane.connections.contains(it->second)) {
        ++lane.counters.refused;
        it = lane.tokens.end();
      } else {
        client = it->second;
        lane.connections.emplace(client, shared_from_this());
        ++lane.counters.admitted;
        admitted = true;
        --lane.unadmitted;
      }
    }
    if (!admitted) return close("unknown token, or its connection is open already", nullptr);
    enqueue(Out{{bulk::admitted}, {}, 0});
    read_header();
  }

  void read_header() {
    head.resize(bulk::upload_fixed_bytes);
    // Between frames a connection may idle: no timer.
    asio::async_read(socket, asio::buffer(head),
                     [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                       if (self->closed) return;
                       if (ec) return self->close(ec == asio::error::eof ? "" : ec.message(), nullptr);
                       self->on_prefix();
                     });
  }

  void on_prefix() {
    auto prefix = bulk::decode_upload_prefix(head.data());
    if (!prefix) return close("not an upload frame", &BulkLaneCounters::closed_protocol);
    upload = prefix->header;
    if (prefix->rank == 0) return on_dims(0);
    head.resize(8 * prefix->rank);
    arm(read_timer, lane.limits.stall_timeout, "an upload's header");
    asio::async_read(socket, asio::buffer(head),
                     [self = shared_from_this(), rank = prefix->rank](const boost::system::error_code& ec, size_t) {
                       if (self->closed) return;
                       self->read_timer.cancel();
                       if (ec) return self->close(ec.message(), nullptr);
                       self->on_dims(rank);
                     });
  }

  void on_dims(size_t rank) {
    if (!bulk::decode_dims(head.data(), rank, upload.shape))
      return close("an upload with a negative extent", &BulkLaneCounters::closed_protocol);
    if (upload.device >= lane.devices.size())
      return close(
          "an upload for device index " + std::to_string(upload.device) + " of " + std::to_string(lane.devices.size()),
          &BulkLaneCounters::closed_protocol);
    if (auto err = check_shape(upload.shape, "bulk upload"))
      return close(describe(err).message, &BulkLaneCounters::closed_protocol);
    const auto numel = static_cast<unsigned __int128>(upload.shape.numel());
    if (numel * size_of(upload.dtype) != upload.bytes)
      return close("an upload of " + std::to_string(upload.bytes) + " bytes for shape " + upload.shape.to_string() +
                       " " + std::string(name_of(upload.dtype)),
                   &BulkLaneCounters::closed_protocol);
    try {
      // The device's pool where it has one: warm pages, not fresh ones the
      // kernel must fault in and zero for every transfer.
      const auto& device = lane.devices[upload.device];
      body = device.host_block ? device.host_block(upload.bytes) : Bytes::allocate(upload.bytes);
    } catch (const std::exception&) {
      return close("cannot allocate " + std::to_string(upload.bytes) + " bytes for an upload", nullptr);
    }
    got = 0;
    read_body();
  }

  void read_body() {
    if (got == body.size()) return deliver();
    const size_t n = std::min(piece_bytes, body.size() - got);
    arm(read_timer, lane.limits.stall_timeout, "an upload");
    asio::async_read(socket, asio::buffer(body.mutable_data() + got, n),
                     [self = shared_from_this()](const boost::system::error_code& ec, size_t k) {
                       if (self->closed) return;
                       self->read_timer.cancel();
                       if (ec) return self->close(ec.message(), nullptr);
                       self->got += k;
                       self->read_body();
                     });
  }

  void deliver() {
    caf::anon_send(caf::actor_cast<runner_actor>(lane.devices[upload.device].runner), import_atom::value,
                   BulkImport{upload.id, TensorData(std::move(upload.shape), upload.dtype, std::move(body)), client,
                              upload.bridge});
    lane.count(&BulkLaneCounters::uploads);
    auto ack = bulk::encode(bulk::ReplyHeader{bulk::FrameKind::upload_ack, upload.id.value, 0});
    enqueue(Out{{ack.begin(), ack.end()}, {}, 0});
    read_header();
  }

  void enqueue(Out o) {
    if (closed) return;
    out.push_back(std::move(o));
    if (!writing) write_next();
  }

  void pop() { out.pop_front(); }

  void write_next() {
    if (closed || out.empty()) {
      writing = false;
      return;
    }
    writing = true;
    auto& o = out.front();
    auto done = [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
      if (self->closed) return;
      self->write_timer.cancel();
      if (ec) return self->close(ec.message(), nullptr);
      self->write_next();
    };
    arm(write_timer, lane.limits.stall_timeout, "a read's transfer");
    if (!o.header.empty()) {
      // The header with the first piece of the body, in one write.
      const size_t n = std::min(piece_bytes, o.body.size());
      std::array<asio::const_buffer, 2> buffers{asio::buffer(o.header), asio::buffer(o.body.data(), n)};
      o.sent = n;
      o.header.clear();
      if (o.sent == o.body.size()) {
        asio::async_write(socket, buffers,
                          [self = shared_from_this(), done](const boost::system::error_code& ec, size_t k) mutable {
                            if (!self->closed && !ec) self->pop();
                            done(ec, k);
                          });
      } else {
        asio::async_write(socket, buffers, done);
      }
      return;
    }
    const size_t n = std::min(piece_bytes, o.body.size() - o.sent);
    const auto* from = o.body.data() + o.sent;
    o.sent += n;
    const bool last = o.sent == o.body.size();
    asio::async_write(socket, asio::buffer(from, n),
                      [self = shared_from_this(), done, last](const boost::system::error_code& ec, size_t k) mutable {
                        if (!self->closed && !ec && last) self->pop();
                        done(ec, k);
                      });
  }
};

void BulkLane::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors, most likely: try again shortly, not in a spin.
      accept_backoff.expires_after(std::chrono::milliseconds(100));
      accept_backoff.async_wait([this](const boost::system::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    if (unadmitted >= limits.max_unadmitted) {
      count(&BulkLaneCounters::refused);
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      ++unadmitted;
      std::make_shared<LaneConnection>(*this, std::move(socket))->start();
    }
    accept();
  });
}

BulkLane::BulkLane(BulkLaneLimits limits, std::function<void(const std::string&)> log_warn)
    : impl_(std::make_shared<Impl>(limits, std::move(log_warn))) {}

BulkLane::~BulkLane() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Connections hold sockets of the io_context: gone before it is.
  std::lock_guard lock(impl_->mutex);
  impl_->connections.clear();
  impl_->tokens.clear();
}

uint16_t BulkLane::listen(const std::string& address, uint16_t port, std::vector<Device> devices) {
  impl_->devices = std::move(devices);
  try {
    tcp::endpoint endpoint(asio::ip::make_address(address), port);
    impl_->acceptor.open(endpoint.protocol());
    impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(endpoint);
    impl_->acceptor.listen();
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("bulk lane: cannot listen on " + address + ":" + std::to_string(port) + ": " +
                             e.code().message());
  }
  const auto bound = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
  return bound;
}

std::string BulkLane::admit(const caf::node_id& client) {
  std::lock_guard lock(impl_->mutex);
  for (const auto& [token, node] : impl_->tokens)
    if (node == client) return token;
  std::random_device rd;
  std::string token(bulk::token_bytes, '\0');
  for (size_t i = 0; i < token.size(); i += 4) {
    const auto r = rd();
    for (size_t j = 0; j < 4 && i + j < token.size(); ++j) token[i + j] = static_cast<char>(r >> (8 * j));
  }
  impl_->tokens.emplace(token, client);
  return token;
}

void BulkLane::revoke(const caf::node_id& client) {
  std::shared_ptr<LaneConnection> connection;
  {
    std::lock_guard lock(impl_->mutex);
    std::erase_if(impl_->tokens, [&](const auto& kv) { return kv.second == client; });
    if (auto it = impl_->connections.find(client); it != impl_->connections.end()) connection = it->second;
  }
  if (connection) asio::post(impl_->io, [connection] { connection->close("", nullptr); });
}

bool BulkLane::send(const caf::node_id& client, uint64_t ticket, TensorData data) {
  std::shared_ptr<LaneConnection> connection;
  {
    std::lock_guard lock(impl_->mutex);
    auto it = impl_->connections.find(client);
    if (it == impl_->connections.end()) return false;
    connection = it->second;
    ++impl_->counters.reads;
  }
  auto header = bulk::encode(bulk::ReplyHeader{bulk::FrameKind::read_data, ticket, data.bytes.size()});
  asio::post(impl_->io, [connection, header, bytes = std::move(data.bytes)]() mutable {
    connection->enqueue(LaneConnection::Out{{header.begin(), header.end()}, std::move(bytes), 0});
  });
  return true;
}

BulkLaneCounters BulkLane::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

}  // namespace switchyard::worker
