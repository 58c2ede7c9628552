// SPDX-License-Identifier: Apache-2.0
// A Switchyard client in its own process, for tests that kill a client:
//   remote_client_process HOST PORT COUNT [hold|busy]
// connects to the worker at HOST:PORT, makes COUNT tensors on its cpu:0,
// waits for them, prints "ready", and then
//   hold (default): holds them until it is killed;
//   busy: keeps ops and reads in flight on the worker until the worker goes
//         away (exit 0 once its device is lost) or it is killed;
//   stall: asks for 64 reads of a 4 MiB tensor, then stops itself (SIGSTOP)
//          so the replies pile up on the worker, as for a client that stops
//          reading;
//   upload: starts sending a 64 MiB tensor to the worker in 256 KiB parts,
//           with ops on it queued behind, prints "uploading" and holds, so
//           that it can be killed in the middle of the transfer;
//   flood: submits 300,000 products of 128 x 128 matrices (cheap to send,
//          ~40 us each to run), prints "flooded" and holds without reading,
//          as a peer that sends ops faster than the device runs them.
// A mode ending in "-lane" sends its large tensors on the worker's bulk
// lane; otherwise every byte goes over BASP.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <unistd.h>
#include <vector>

#include "switchyard/switchyard.hpp"

int main(int argc, char** argv) try {
  std::string mode = argc == 5 ? argv[4] : "hold";
  // "-lane": the same over the worker's bulk lane.
  const bool lane = mode.ends_with("-lane");
  if (lane) mode.resize(mode.size() - 5);
  if ((argc != 4 && argc != 5) ||
      (mode != "hold" && mode != "busy" && mode != "stall" && mode != "upload" && mode != "flood")) {
    std::fprintf(stderr, "usage: %s HOST PORT COUNT [hold|busy|stall|upload|flood][-lane]\n", argv[0]);
    return 2;
  }
  const std::string host = argv[1];
  const auto port = static_cast<uint16_t>(std::atoi(argv[2]));
  const int count = std::atoi(argv[3]);
  switchyard::RuntimeOptions options;
  options.devices = {"cpu:0"};
  options.cpu_threads = 1;
  if (mode == "upload") options.transfer_chunk_bytes = size_t{256} << 10;
  // These modes test BASP's bounds; the bulk lane's have their own.
  if (!lane) options.bulk_lane_min_bytes = 0;
  switchyard::Runtime rt(options);
  rt.connect(host, port);
  auto device = rt.device(host + ":" + std::to_string(port) + "/cpu:0");
  std::vector<switchyard::Tensor> held;
  held.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) held.push_back(device.full({1024}, i));
  device.sync().get();
  std::printf("ready\n");
  std::fflush(stdout);
  if (mode == "upload") {
    auto local = rt.device("cpu:0").ones({16 << 20});
    auto there = local.to(device);
    auto total = (there * 2).sum();
    held.push_back(there);
    held.push_back(total);
    std::printf("uploading\n");
    std::fflush(stdout);
  }
  if (mode == "flood") {
    auto x = device.ones({128, 128});
    for (int i = 0; i < 300000; ++i) (void)x.matmul(x);
    std::printf("flooded\n");
    std::fflush(stdout);
  }
  if (mode == "stall") {
    auto big = device.ones({1 << 20});
    device.sync().get();
    std::vector<switchyard::Future<switchyard::TensorData>> reads;
    for (int i = 0; i < 64; ++i) reads.push_back(big.read());
    usleep(20000);  // the requests leave; most replies are still on the worker
    raise(SIGSTOP);
    for (;;) pause();
  }
  if (mode == "busy") {
    // Several reads and a chain of ops always outstanding, so a worker
    // stopped now has client work queued in its runner and on the wire.
    try {
      auto x = device.ones({64, 64});
      for (;;) {
        std::vector<switchyard::Future<switchyard::TensorData>> reads;
        for (int i = 0; i < 8; ++i) {
          x = (x.matmul(x) * 0.015625).sum({1}).reshape({64, 1}) * device.ones({1, 64});
          reads.push_back(x.read());
        }
        for (auto& r : reads) r.get();
      }
    } catch (const std::exception&) {
      return 0;  // the worker went away: expected in this mode
    }
  }
  for (;;) pause();  // until killed: nothing is dropped, nothing is closed
} catch (const std::exception& e) {
  std::fprintf(stderr, "remote_client_process: %s\n", e.what());
  return 1;
}
