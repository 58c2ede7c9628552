// SPDX-License-Identifier: Apache-2.0
#pragma once

// Shared by the serve tests: the server binary as a child process, an HTTP
// client, the model file and the plain-loop check of the model's outputs.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <random>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "mlp_model.hpp"

extern char** environ;

namespace serve_test {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Rows = std::vector<std::vector<float>>;

constexpr uint32_t kIn = 16;
constexpr uint32_t kOut = 8;

/// The model file, written once per test run by the example's make_model.
/// Removed at exit, so a thousand runs leave no thousand folders in /tmp.
struct ModelDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("switchyard_serve_test_" + std::to_string(getpid()));
  ModelDir() { std::filesystem::create_directories(path); }
  ~ModelDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ModelDir(const ModelDir&) = delete;
  ModelDir& operator=(const ModelDir&) = delete;
};

inline const std::string& model_path() {
  static const ModelDir dir;
  static const std::string path = [] {
    std::string p = (dir.path / "mlp.bin").string();
    std::string cmd = std::string("'") + SERVE_MAKE_MODEL_BIN + "' '" + p + "' --layers 16,32,24,8 --seed 7 >/dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make_model failed: " + cmd);
    return p;
  }();
  return path;
}

inline const mlp::Model& model() {
  static const mlp::Model m = mlp::load(model_path());
  return m;
}

/// The server binary as a child process; killed if the test ends early.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra) {
    std::vector<std::string> args = {SERVE_SERVER_BIN, "--model", model_path(), "--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
    if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
    port_ = wait_for_port();
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] pid_t pid() const { return pid_; }

  /// SIGTERM, then waits (at most 30 s) for the exit; the exit code, or -1
  /// if it died from a signal or did not exit in time.
  int terminate() {
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + 30s;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }

 private:
  // Reads the server's stdout until its "listening on" line (at most 30 s).
  int wait_for_port() {
    const std::string marker = "listening on http://127.0.0.1:";
    std::string text;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;  // exited
      text.append(buf, static_cast<size_t>(n));
      auto at = text.find(marker);
      if (at != std::string::npos && text.find('\n', at) != std::string::npos)
        return std::stoi(text.substr(at + marker.size()));
    }
    throw std::runtime_error("server did not report its port; output: " + text);
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int port_ = 0;
};

inline httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(10);
  c.set_read_timeout(30);
  return c;
}

inline Rows random_rows(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-2, 2);
  Rows rows(n, std::vector<float>(kIn));
  for (auto& r : rows)
    for (auto& v : r) v = dist(rng);
  return rows;
}

inline std::string body_of(const Rows& rows) { return json{{"inputs", rows}}.dump(); }

/// Checks an /v1/infer reply body against the plain-loop MLP.
inline void check_outputs(const std::string& body, const Rows& rows) {
  json j = json::parse(body);
  REQUIRE(j.contains("outputs"));
  const json& out = j["outputs"];
  REQUIRE(out.size() == rows.size());
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  auto want = mlp::forward_reference(model(), flat, rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    REQUIRE(out[r].size() == kOut);
    for (size_t c = 0; c < kOut; ++c) {
      double got = out[r][c].get<double>();
      double w = want[r * kOut + c];
      CHECK(std::abs(got - w) <= 1e-4 + 1e-4 * std::abs(w));
    }
  }
}

/// Value of an unlabelled (or fully labelled) metric line `name value`.
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  throw std::runtime_error("metric " + name + " missing from:\n" + text);
}

inline std::string get_metrics(int port) {
  auto c = client(port);
  auto res = c.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  return res->body;
}

struct Reply {
  int status = -1;
  std::string body;
};

inline Reply post(int port, const std::string& body, httplib::Headers headers = {}) {
  auto c = client(port);
  auto res = c.Post("/v1/infer", headers, body, "application/json");
  if (!res) return {};
  return {res->status, res->body};
}

/// A 4xx reply whose JSON error mentions `needle`.
inline void check_rejected(const Reply& r, int status, const std::string& needle) {
  INFO("body: " << r.body);
  CHECK(r.status == status);
  json j = json::parse(r.body);
  REQUIRE(j.contains("error"));
  CHECK_THAT(j["error"].get<std::string>(), Catch::Matchers::Contains(needle));
}

}  // namespace serve_test
