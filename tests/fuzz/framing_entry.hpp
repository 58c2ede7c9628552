// SPDX-License-Identifier: Apache-2.0
#pragma once

// Fuzz entry for the worker's BASP framing guard (worker/framing.hpp): the
// bytes a peer sends, cut into the units the guard allows, must never make
// it allow a read above its bounds. Shared by the libFuzzer target and the
// corpus replay test (tests/remote/framing_test.cpp).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace switchyard::fuzz {

/// data[0] picks the side (bit 0: accepted or outgoing connection) and small
/// limits (bits 1-3); the rest is the byte stream the peer sends. Aborts
/// when an invariant breaks.
int check_framing(const uint8_t* data, size_t size);

struct FramingSeed {
  std::string name;
  std::vector<uint8_t> bytes;
};
/// Seed inputs (tests/fuzz/corpus/framing/).
[[nodiscard]] std::vector<FramingSeed> framing_seeds();

}  // namespace switchyard::fuzz
