// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: every message type decoded from bytes (see fuzz_entry.hpp).
#include "fuzz_entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return switchyard::fuzz::decode_one(data, size);
}
