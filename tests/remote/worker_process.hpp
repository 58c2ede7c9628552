// SPDX-License-Identifier: Apache-2.0
#pragma once

// Starts switchyard-worker (and other helper) child processes for tests and
// stops them (SIGTERM, then SIGKILL) when they go out of scope. Everything is
// bounded in time.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "switchyard/runtime.hpp"

extern char** environ;

namespace switchyard::testing {

/// A child process whose stdout the test reads line by line; stopped
/// (SIGTERM, then SIGKILL) when it goes out of scope.
class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> argv_strings) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<char*> argv;
    for (auto& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    out_ = out[0];
    if (rc != 0) throw std::runtime_error("cannot start " + argv_strings[0]);
  }
  ~ChildProcess() {
    stop(SIGTERM);
    if (out_ >= 0) close(out_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }

  /// Sends `sig` and reaps the process (SIGKILL after 10 s); returns the
  /// exit status as waitpid reports it, or -1 if already stopped.
  int stop(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      usleep(10000);
    }
    pid_ = -1;
    return status;
  }

  /// What the child writes until it closes its stdout (it exits), a whole
  /// line containing `stop_at` arrives, or `limit` passes. Read as bytes,
  /// not lines: a line written in pieces arrives whole.
  std::string read_until_exit(std::chrono::milliseconds limit, const std::string& stop_at = {}) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(out_, buffer, sizeof buffer);
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
      if (!stop_at.empty()) {
        const auto at = out.find(stop_at);
        if (at != std::string::npos && out.find('\n', at) != std::string::npos) break;
      }
    }
    return out;
  }

  /// The next line of the child's stdout, or what arrived of it by `limit`.
  std::string read_line(std::chrono::milliseconds limit) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(out_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

/// A client with one cpu device on one kernel thread and the deadlines the
/// remote tests use: connect within 10 s, every remote request within 30 s.
inline RuntimeOptions remote_client_options() {
  RuntimeOptions o;
  o.devices = {"cpu:0"};
  o.cpu_threads = 1;
  o.connect_timeout = std::chrono::seconds(10);
  o.remote_timeout = std::chrono::seconds(30);
  return o;
}

class WorkerProcess : public ChildProcess {
 public:
  /// Runs the worker with `args` and waits (up to 20 s) for its
  /// "listening on HOST:PORT" line; throws if it exits or stays silent.
  /// With `with_log`, its log (stderr) comes on the same stream, read
  /// past here with read_line or read_until_exit.
  explicit WorkerProcess(std::vector<std::string> args, bool with_log = false)
      : ChildProcess(command(std::move(args), with_log)) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::string line;
    do {
      line =
          read_line(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    } while (with_log && !line.empty() && !line.starts_with("listening on ") &&
             std::chrono::steady_clock::now() < deadline);
    auto pos = line.find("listening on ");
    auto colon = line.rfind(':');
    if (pos == std::string::npos || colon == std::string::npos) {
      stop(SIGKILL);
      throw std::runtime_error("worker did not report its address (got '" + line + "')");
    }
    host_ = line.substr(pos + 13, colon - pos - 13);
    port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
  }

  /// How a worker started with its log ended (stop_logged).
  struct Exit {
    bool clean = false;  ///< exited 0
    std::string log;     ///< what it printed from the stop on
    long counted = -1;   ///< the number after the counter's name in the log, -1 if absent
  };
  /// Stops the worker (SIGTERM) and reads its log to the end, for the
  /// number its exit log gives after `counter` (e.g. "paused (queued bytes) ").
  Exit stop_logged(const std::string& counter) {
    Exit e;
    const int status = stop(SIGTERM);
    e.clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    e.log = read_until_exit(std::chrono::seconds(5));
    if (const auto at = e.log.find(counter); at != std::string::npos)
      e.counted = std::atol(e.log.c_str() + at + counter.size());
    return e;
  }

  [[nodiscard]] const std::string& host() const { return host_; }
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  static std::vector<std::string> command(std::vector<std::string> args, bool with_log) {
    args.insert(args.begin(), SWITCHYARD_WORKER_PATH);
    if (!with_log) return args;
    std::string line = "exec";
    for (const auto& a : args) line += " '" + a + "'";  // the tests' arguments hold no quote
    return {"/bin/sh", "-c", line + " 2>&1"};
  }

  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace switchyard::testing
