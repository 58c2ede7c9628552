// SPDX-License-Identifier: Apache-2.0
// A program outside the Switchyard tree: it sees only the installed (or
// subproject) headers and library. Exit 0 when a small computation on cpu:0
// gives the expected values.
#include <cstdio>
#include <vector>

#include <switchyard/switchyard.hpp>

int main() {
  namespace sy = switchyard;
  sy::RuntimeOptions options;
  options.devices = {"cpu:0"};
  sy::Runtime rt(options);
  auto x = rt.cpu().tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto y = (x.matmul(x) + 1).sum();  // [[7,10],[15,22]] + 1 -> 58
  const float got = y.item<float>();
  if (got != 58.0f) {
    std::fprintf(stderr, "consumer: expected 58, got %g\n", got);
    return 1;
  }
  std::printf("consumer: ok (58)\n");
  return 0;
}
