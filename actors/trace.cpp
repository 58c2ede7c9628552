// SPDX-License-Identifier: Apache-2.0
#include "actors/trace.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace switchyard::actors {

std::string json_escape(std::string_view s) {
  // nlohmann's writer escapes what JSON requires and replaces bytes that are
  // not UTF-8 with U+FFFD: an error message from a user's backend or a
  // peer may carry any bytes, and one raw byte made the whole trace
  // unreadable to strict JSON readers.
  const auto quoted = nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

namespace {

// Track `track` as a trace thread id: 0 is the idle task to tools that read
// Linux traces, so tracks count from 1.
unsigned tid_of(uint32_t track) { return track + 1; }

}  // namespace

Tracer::Tracer(std::string path, Limits limits, Logger log)
    : path_(std::move(path)), limits_(limits), log_(std::move(log)), pid_(::getpid()) {
  // Not O_TRUNC: a second Runtime given the same path (SWITCHYARD_TRACE
  // applies to every Runtime of a process) truncated the first one's trace
  // under it. The lock says whether another tracer holds the file; only its
  // holder empties it.
  // O_NONBLOCK for the open alone: a FIFO without a reader blocked the
  // Runtime's constructor; now it fails (ENXIO) and tracing stays off.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot write trace file '" + path_ + "': " + std::strerror(errno));
  if (const int flags = ::fcntl(fd_, F_GETFL); flags >= 0) (void)::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd_);
    throw std::runtime_error("trace file '" + path_ +
                             "' is being written by another Runtime (of this process or another); give each "
                             "Runtime its own RuntimeOptions::trace_path");
  }
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && ::ftruncate(fd_, 0) != 0) {
    const int err = errno;
    ::close(fd_);
    throw std::runtime_error("cannot write trace file '" + path_ + "': " + std::strerror(err));
  }
  char head[160];
  std::snprintf(head, sizeof head,
                "[\n{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"switchyard %d\"}}", pid_,
                pid_);
  held_ = head;
  writer_ = std::thread([this] { write_loop(); });
}

Tracer::~Tracer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  writer_.join();
  ::close(fd_);
}

size_t Tracer::held_bytes() const {
  std::lock_guard lock(mutex_);
  return held_.size();
}

uint64_t Tracer::dropped_events() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

double Tracer::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - start_).count();
}

void Tracer::append(std::string_view event) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    const size_t before = held_.size();
    if (before + event.size() + 2 > limits_.max_held_bytes) {
      ++dropped_;
      return;
    }
    held_ += ",\n";
    held_ += event;
    wake = before < limits_.flush_bytes && held_.size() >= limits_.flush_bytes;
  }
  if (wake) wake_.notify_one();
}

void Tracer::write_loop() {
  std::string out;  // swapped with held_: two buffers, each kept at its capacity
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, limits_.flush_interval, [this] { return stopping_ || held_.size() >= limits_.flush_bytes; });
    const bool last = stopping_;
    out.swap(held_);
    lock.unlock();
    write_out(out);
    out.clear();
    if (last) break;
    lock.lock();
  }
  // Nothing appends now: the tracer is being destroyed, so no one holds it.
  if (dropped_ > 0) {
    char note[192];
    std::snprintf(note, sizeof note,
                  ",\n{\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"ts\":%.3f,\"name\":\"trace events dropped\","
                  "\"args\":{\"count\":%llu}}",
                  pid_, micros(Clock::now()), static_cast<unsigned long long>(dropped_));
    write_out(note);
    log_.log(LogLevel::warn, [&] {
      return "trace '" + path_ + "': " + std::to_string(dropped_) + " events dropped (the file could not keep up)";
    });
  }
  write_out("\n]\n");
}

void Tracer::write_out(std::string_view bytes) {
  while (!bytes.empty() && !write_failed_) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      write_failed_ = true;
      const std::string why = n < 0 ? std::strerror(errno) : "no progress";
      log_.log(LogLevel::warn,
               [&] { return "trace '" + path_ + "': write failed (" + why + "); the rest of the trace is lost"; });
      return;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void Tracer::name_track(uint32_t track, std::string_view name) {
  char head[96];
  std::snprintf(head, sizeof head, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":\"",
                pid_, tid_of(track));
  char order[128];
  std::snprintf(order, sizeof order,
                ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%u,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%u}}",
                pid_, tid_of(track), tid_of(track));
  append(head + json_escape(name) + "\"}}" + order);
}

void Tracer::slice(uint32_t track, std::string_view name, Clock::time_point begin, Clock::time_point end,
                   std::string_view args) {
  char head[128];
  std::snprintf(head, sizeof head, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"name\":\"", pid_,
                tid_of(track), micros(begin), micros(end) - micros(begin));
  append(head + json_escape(name) + "\",\"args\":{" + std::string(args) + "}}");
}

void Tracer::flow_begin(uint32_t track, uint64_t id, Clock::time_point at) {
  char e[176];
  std::snprintf(
      e, sizeof e,
      "{\"ph\":\"s\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"id\":\"0x%llx\",\"name\":\"bridge\",\"cat\":\"bridge\"}", pid_,
      tid_of(track), micros(at), static_cast<unsigned long long>(id));
  append(e);
}

void Tracer::flow_end(uint32_t track, uint64_t id, Clock::time_point at) {
  char e[192];
  std::snprintf(e, sizeof e,
                "{\"ph\":\"f\",\"bp\":\"e\",\"pid\":%d,\"tid\":%u,\"ts\":%.3f,\"id\":\"0x%llx\",\"name\":\"bridge\","
                "\"cat\":\"bridge\"}",
                pid_, tid_of(track), micros(at), static_cast<unsigned long long>(id));
  append(e);
}

}  // namespace switchyard::actors
