// SPDX-License-Identifier: Apache-2.0
#pragma once

// Open addressing keyed by TensorId, for the hot paths that look ids up once
// or twice per op: marking last uses in a client's batch (src/core.cpp),
// planning a fused chain in the runner (actors/fusion.cpp) and building its
// register program (backends/cpu/fused.cpp). Node-based maps cost an
// allocation per id and linear searches grew with the chain: both showed in
// profiles. Each user keeps its own sizing policy (reused across batches,
// fixed and bounded, grown at half full); the probe is defined here once.

#include <bit>
#include <cstddef>
#include <cstdint>

#include "switchyard/messages/tensor_id.hpp"

namespace switchyard {

/// A slot of an id-keyed table. Key 0 marks it empty: 0 is never a valid
/// TensorId (validation refuses it), so it can never be looked up.
template <class V>
struct IdSlot {
  uint64_t key = 0;
  V value{};
};

/// The slot holding `id` in `slots` (an array, vector or span of IdSlot),
/// or the empty slot where it belongs (`key == 0`; the caller fills it in).
/// `slots` has a power-of-two size of at least 2 and at least one empty
/// slot, so the probe ends. Ids are sequential per client: Fibonacci hashing
/// (the product's high bits) spreads neighbours over the table, where the
/// low bits of `id` alone would fill runs.
template <class Slots>
[[nodiscard]] auto& probe_id(Slots&& slots, TensorId id) noexcept {
  auto* data = slots.data();
  const size_t mask = slots.size() - 1;
  const int shift = 64 - std::countr_zero(static_cast<size_t>(slots.size()));
  for (size_t i = static_cast<size_t>((id.value * 0x9E3779B97F4A7C15ULL) >> shift);; i = (i + 1) & mask) {
    if (data[i].key == id.value || data[i].key == 0) return data[i];
  }
}

/// The value of `id` in `slots`, or nullptr when they do not hold it.
template <class Slots>
[[nodiscard]] auto* find_id(Slots&& slots, TensorId id) noexcept {
  auto& slot = probe_id(slots, id);
  return slot.key == 0 ? nullptr : &slot.value;
}

}  // namespace switchyard
