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
#include <memory>
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
  auto payload = std::make_shared<std::vector<int>>(1000, 7);  // written here, before the send
  std::atomic<long> sum{0};
  auto receiver = sys.spawn([&](caf::event_based_actor* self) -> caf::behavior {
    return {[&, self](int64_t address) {
      const auto* values = reinterpret_cast<const std::vector<int>*>(address);
      long s = 0;
      for (int x : *values) s += x;
      if (race) unordered = 1;
      sum.store(s, std::memory_order_relaxed);  // relaxed: orders nothing for TSan
      self->quit();
    }};
  });
  caf::anon_send(receiver, reinterpret_cast<int64_t>(payload.get()));
  while (sum.load(std::memory_order_relaxed) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (race) std::printf("unordered = %d\n", unordered);
  std::printf("sum = %ld\n", sum.load());
  return sum.load() == 7000 ? 0 : 1;
}
