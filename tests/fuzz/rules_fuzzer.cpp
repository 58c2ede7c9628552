// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the shape/broadcast/validation rules (see fuzz_entry.hpp).
#include "fuzz_entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return switchyard::fuzz::check_rules(data, size);
}
