// SPDX-License-Identifier: Apache-2.0
#include "bulk_lane_client.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "core.hpp"
#include "switchyard/messages/bulk_frames.hpp"
#include "switchyard/messages/error.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::detail {
namespace {

// Blocking I/O of exactly `n` bytes; false on EOF or error (errno kept).
bool send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const auto k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    // MSG_WAITALL: one wake-up per call, not one per segment that arrived.
    const auto k = ::recv(fd, p, n, MSG_WAITALL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = ECONNRESET;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void set_timeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// A TCP connection to host:port within `timeout`, or -1 with `why`.
int connect_within(const std::string& host, uint16_t port, std::chrono::milliseconds timeout, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    why = std::string("cannot resolve ") + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  why = "no address of " + host;
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        if (rc == 0) errno = ETIMEDOUT;
        rc = -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  return -1;
}

}  // namespace

std::shared_ptr<BulkLaneClient> BulkLaneClient::open(const std::string& host, uint16_t port, const std::string& token,
                                                     std::chrono::milliseconds timeout, std::string name,
                                                     uint64_t cache_limit, std::chrono::milliseconds idle_trim_after,
                                                     std::string& why) {
  if (token.size() != bulk::token_bytes) {
    why = "the worker sent a malformed lane token";
    return nullptr;
  }
  const int fd = connect_within(host, port, timeout, why);
  if (fd < 0) return nullptr;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // The handshake under the deadline; afterwards the reader idles freely
  // between frames (a hung worker is bounded by remote_timeout instead).
  set_timeouts(fd, std::max(timeout, std::chrono::milliseconds(1)));
  std::array<uint8_t, bulk::hello_bytes> hello{};
  std::memcpy(hello.data(), bulk::magic.data(), bulk::magic.size());
  std::memcpy(hello.data() + bulk::magic.size(), token.data(), bulk::token_bytes);
  uint8_t answer = 0;
  if (!send_all(fd, hello.data(), hello.size()) || !recv_all(fd, &answer, 1) || answer != bulk::admitted) {
    why = answer == 0 ? std::string("no admission: ") + std::strerror(errno) : "the worker refused the lane";
    ::close(fd);
    return nullptr;
  }
  set_timeouts(fd, std::chrono::milliseconds(0));
  std::shared_ptr<BulkLaneClient> lane(new BulkLaneClient(fd, std::move(name), cache_limit, idle_trim_after));
  lane->writer_ = std::thread([l = lane.get()] { l->write_loop(); });
  lane->reader_ = std::thread([l = lane.get()] { l->read_loop(); });
  return lane;
}

BulkLaneClient::BulkLaneClient(int fd, std::string name, uint64_t cache_limit,
                               std::chrono::milliseconds idle_trim_after)
    : fd_(fd), name_(std::move(name)), pool_(cache_limit), idle_trim_after_(idle_trim_after) {}

BulkLaneClient::~BulkLaneClient() {
  close();
  ::close(fd_);
}

void BulkLaneClient::close() {
  fail("", true);
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void BulkLaneClient::fail(const std::string& why, bool closing) {
  std::deque<Upload> resend;
  std::map<uint64_t, PendingRead> reads;
  {
    std::lock_guard lock(mutex_);
    if (failed_) {
      wake_.notify_all();
      return;
    }
    failed_ = true;
    alive_.store(false, std::memory_order_release);
    // Unacknowledged first: they were written before anything queued.
    for (auto& [id, u] : unacked_) resend.push_back(std::move(u));
    for (auto& u : queued_) resend.push_back(std::move(u));
    unacked_.clear();
    queued_.clear();
    reads.swap(reads_);
  }
  wake_.notify_all();
  ::shutdown(fd_, SHUT_RDWR);
  RuntimeThreadScope scope;
  const auto err = closing ? make_error(Errc::runtime_closed, "the runtime shut down before the reply")
                           : make_error(Errc::device_lost, "bulk lane to worker " + name_ + " broke: " + why);
  for (auto& [ticket, r] : reads) r.done(err);
  if (closing) return;
  for (auto& u : resend) u.resend(std::move(u.data));
}

bool BulkLaneClient::upload(uint32_t device, TensorId id, const TensorData& data, bool bridge, Resend resend) {
  Upload u{bulk::encode(bulk::UploadHeader{device, id, data.dtype, data.shape, data.bytes.size(), bridge}), data,
           std::move(resend)};
  {
    std::lock_guard lock(mutex_);
    if (failed_) return false;
    queued_.push_back(std::move(u));
  }
  wake_.notify_one();
  return true;
}

uint64_t BulkLaneClient::expect_read(uint64_t bytes, ReadDone done) {
  std::lock_guard lock(mutex_);
  if (failed_) return 0;
  const auto ticket = next_ticket_++;
  reads_.emplace(ticket, PendingRead{bytes, std::move(done)});
  return ticket;
}

void BulkLaneClient::cancel_read(uint64_t ticket) {
  std::lock_guard lock(mutex_);
  reads_.erase(ticket);
}

void BulkLaneClient::write_loop() {
  for (;;) {
    std::vector<uint8_t> header;
    Bytes body;
    uint64_t id = 0;
    {
      std::unique_lock lock(mutex_);
      // Idle, the read pool's blocks go back to the system (as a cpu
      // device's cache does, RuntimeOptions::idle_trim_after).
      for (uint64_t seen = reads_done_.load(); !failed_ && queued_.empty();) {
        if (idle_trim_after_.count() == 0 || pool_.bytes_cached() == 0) {
          wake_.wait_for(lock, std::chrono::seconds(1));
          seen = reads_done_.load();
        } else if (!wake_.wait_for(lock, idle_trim_after_, [&] { return failed_ || !queued_.empty(); })) {
          if (reads_done_.load() == seen) pool_.trim();
          seen = reads_done_.load();
        }
      }
      if (failed_) return;
      auto& u = queued_.front();
      header = u.header;
      body = u.data.bytes;
      id = bulk::detail::get<uint64_t>(u.header.data() + 5);  // the header's tensor id
      // Kept until acknowledged, so a broken lane can send it again.
      unacked_.emplace(id, std::move(u));
      queued_.pop_front();
    }
    if (!send_all(fd_, header.data(), header.size()) || (!body.empty() && !send_all(fd_, body.data(), body.size()))) {
      fail(std::string("writing an upload: ") + std::strerror(errno), false);
      return;
    }
  }
}

void BulkLaneClient::read_loop() {
  std::array<uint8_t, bulk::reply_header_bytes> head{};
  std::vector<uint8_t> discard;
  for (;;) {
    if (!recv_all(fd_, head.data(), head.size())) return fail(std::strerror(errno), false);
    auto h = bulk::decode_reply(head.data());
    if (!h) return fail("a frame that is neither a read nor an acknowledgement", false);
    if (h->kind == bulk::FrameKind::upload_ack) {
      Upload acked;
      {
        std::lock_guard lock(mutex_);
        auto it = unacked_.find(h->number);
        if (it == unacked_.end()) return fail("an acknowledgement of no upload", false);
        acked = std::move(it->second);  // freed outside the lock
        unacked_.erase(it);
      }
      continue;
    }
    bool known = false;
    bool issued = false;
    {
      std::lock_guard lock(mutex_);
      auto it = reads_.find(h->number);
      issued = h->number > 0 && h->number < next_ticket_;
      if (it != reads_.end()) {
        if (it->second.bytes != h->bytes) return fail("a read of another size than asked", false);
        known = true;
      }
    }
    if (!issued) return fail("bytes for a read never asked", false);
    if (!known) {
      // A read whose request failed meanwhile (its deadline): drop its bytes.
      discard.resize(std::min<uint64_t>(h->bytes, uint64_t{1} << 20));
      for (uint64_t left = h->bytes; left > 0;) {
        const auto n = std::min<uint64_t>(left, discard.size());
        if (!recv_all(fd_, discard.data(), n)) return fail(std::strerror(errno), false);
        left -= n;
      }
      continue;
    }
    Bytes bytes;
    try {
      bytes = pool_.allocate(h->bytes);
    } catch (const std::exception& e) {
      return fail(std::string("cannot allocate a read: ") + e.what(), false);
    }
    if (h->bytes > 0 && !recv_all(fd_, bytes.mutable_data(), h->bytes)) return fail(std::strerror(errno), false);
    ReadDone done;
    {
      std::lock_guard lock(mutex_);
      if (auto it = reads_.find(h->number); it != reads_.end()) {
        done = std::move(it->second.done);
        reads_.erase(it);
      }
    }
    reads_done_.fetch_add(1);
    if (done) {
      RuntimeThreadScope scope;
      done(std::move(bytes));
    }
  }
}

}  // namespace switchyard::detail
