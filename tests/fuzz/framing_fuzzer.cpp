// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the worker's BASP framing guard (see framing_entry.hpp).
#include "framing_entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return switchyard::fuzz::check_framing(data, size);
}
