// SPDX-License-Identifier: Apache-2.0
// Checks the TSan build's method, not Switchyard: TSan must stay silent on a
// correct CAF hand-off and must report a real race. Against an uninstrumented
// libcaf the first fails (TSan cannot see the mailbox's atomics and reports
// the hand-off), which is why scripts/test --sanitize=thread builds CAF with
// TSan (scripts/build-tsan-deps). Built and run only in TSan builds.
//   tsan_canary handoff   data written before a send, read by the receiver
//   tsan_canary race      the same, plus a plain int written by the actor and
//                         read by the main thread with nothing ordering them
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <caf/all.hpp>

namespace {
int unordered = 0;  // the race case's victim
}

int main(int argc, char** argv) {
  const bool race = argc > 1 && std::strcmp(argv[1], "race") == 0;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<int> payload;
  std::atomic<long> sum{0};
  auto receiver = sys.spawn([&](caf::event_based_actor* self) -> caf::behavior {
    return {[&, self](int go) {
      long s = 0;
      for (int x : payload) s += static_cast<long>(x) * go;  // reads what main wrote before the send
      if (race) unordered = 1;
      sum.store(s, std::memory_order_relaxed);  // relaxed: orders nothing for TSan
      self->quit();
    }};
  });
  // Written after the spawn, so only the message can order it before the read.
  payload.assign(1000, 7);
  caf::anon_send(receiver, 1);
  while (sum.load(std::memory_order_relaxed) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (race) std::printf("unordered = %d\n", unordered);
  std::printf("sum = %ld\n", sum.load());
  return sum.load() == 7000 ? 0 : 1;
}
