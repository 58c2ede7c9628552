// SPDX-License-Identifier: Apache-2.0
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "ops_common.hpp"

int main(int argc, char* argv[]) {
  const int result = Catch::Session().run(argc, argv);
  sytest::close_runtime();
  return result;
}
