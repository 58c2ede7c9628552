// A Switchyard client in its own process, for tests that kill a client:
//   remote_client_process HOST PORT COUNT
// connects to the worker at HOST:PORT, makes COUNT tensors on its cpu:0,
// waits for them, prints "ready", and then holds them until it is killed.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <unistd.h>
#include <vector>

#include "switchyard/switchyard.hpp"

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s HOST PORT COUNT\n", argv[0]);
    return 2;
  }
  const std::string host = argv[1];
  const auto port = static_cast<uint16_t>(std::atoi(argv[2]));
  const int count = std::atoi(argv[3]);
  switchyard::RuntimeOptions options;
  options.devices = {"cpu:0"};
  options.cpu_threads = 1;
  switchyard::Runtime rt(options);
  rt.connect(host, port);
  auto device = rt.device(host + ":" + std::to_string(port) + "/cpu:0");
  std::vector<switchyard::Tensor> held;
  held.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) held.push_back(device.full({1024}, i));
  device.sync().get();
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();  // until killed: nothing is dropped, nothing is closed
} catch (const std::exception& e) {
  std::fprintf(stderr, "remote_client_process: %s\n", e.what());
  return 1;
}
