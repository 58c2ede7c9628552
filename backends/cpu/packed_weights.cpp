// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/packed_weights.hpp"

#include <algorithm>

namespace switchyard::backends::cpu {
namespace {

// Distinct weight blocks remembered as seen once: more than a model's
// layers (ResNet-50 has 53 convolutions), few enough to scan per call.
constexpr size_t kSeen = 256;

}  // namespace

void PackedWeights::clear() {
  kept_.clear();
  seen_.clear();
  next_seen_ = 0;
  bytes_ = 0;
}

void PackedWeights::drop_unused() {
  // use_count 1: this entry's copy is the block's last holder.
  const auto unused = [](const Entry& e) { return e.source.use_count() == 1; };
  for (const auto& e : kept_)
    if (unused(e)) bytes_ -= e.floats * sizeof(float);
  std::erase_if(kept_, unused);
}

bool PackedWeights::seen_before(const Bytes& source, uint64_t layout) {
  for (const auto& s : seen_)
    if (s.data == source.data() && s.size == source.size() && s.layout == layout) return true;
  const Seen s{source.data(), source.size(), layout};
  if (seen_.size() < kSeen) {
    seen_.push_back(s);
  } else {
    seen_[next_seen_] = s;
    next_seen_ = (next_seen_ + 1) % kSeen;
  }
  return false;
}

}  // namespace switchyard::backends::cpu
