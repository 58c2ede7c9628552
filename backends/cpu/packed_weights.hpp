// SPDX-License-Identifier: Apache-2.0
#pragma once

// Weights a kernel has packed into its own layout, kept between calls.
//
// The direct convolution transposes each block of 32 output channels' weights
// into a k-major panel on every call: for ResNet's 512-channel layers that is
// 2.4 million floats a layer, a sixth of the layer's time on one core with
// the weights in cache. A model's weights are the same tensor call after
// call, so a packing is kept from a weight block's second use on (a weight
// made afresh for each call never is), as ONNX Runtime prepacks its
// initializers.
//
// Why the packing stays right: an entry holds its source block, so the block
// can neither be freed and handed to another tensor nor be written in place
// (a kernel writes an input's block only when nothing else shares it,
// `reusable()`). An entry whose block nobody else holds any more (its tensor
// was dropped) is dropped at the next lookup, `memory()` or trim, which is
// when the block returns to the device's pool.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/aligned_scratch.hpp"
#include "switchyard/messages/bytes.hpp"

namespace switchyard::backends::cpu {

class PackedWeights {
 public:
  /// Keeps at most `limit` bytes of packings (0: none). Full, it keeps no
  /// more until packings are dropped: evicting one to keep another would,
  /// for a model whose weights exceed the limit, pack into fresh memory
  /// (page faults) on every call, which costs more than packing per call.
  explicit PackedWeights(uint64_t limit) : limit_(limit) {}

  /// The packing of `source` under `layout` (a value naming the kernel's
  /// packing and the geometry it depends on), `floats` long, or null when it
  /// is not kept: the first use of a block only marks it seen, and a
  /// packing that would pass the limit is not kept. `pack(out)` fills a new
  /// packing.
  template <class Pack>
  const float* find(const Bytes& source, uint64_t layout, size_t floats, Pack&& pack) {
    drop_unused();
    for (auto& e : kept_)
      if (e.source.data() == source.data() && e.source.size() == source.size() && e.layout == layout &&
          e.floats == floats)
        return e.packed.data.get();
    if (!seen_before(source, layout)) return nullptr;
    const uint64_t bytes = floats * sizeof(float);
    if (bytes > limit_ - bytes_) return nullptr;
    Entry& e = kept_.emplace_back();
    e.source = source;
    e.layout = layout;
    e.floats = floats;
    pack(e.packed.get(floats));
    bytes_ += bytes;
    return e.packed.data.get();
  }

  /// Bytes of the packings kept, after dropping those of dropped tensors.
  [[nodiscard]] uint64_t bytes() {
    drop_unused();
    return bytes_;
  }
  /// Drops every packing (and the hold on its source).
  void clear();

 private:
  struct Entry {
    Bytes source;
    uint64_t layout = 0;
    size_t floats = 0;
    AlignedScratch packed;
  };
  /// A block seen once (not held: a different tensor at the same address
  /// later only makes the packing start a call early).
  struct Seen {
    const std::byte* data = nullptr;
    size_t size = 0;
    uint64_t layout = 0;
  };

  void drop_unused();
  /// Whether the block was seen before; remembers it otherwise.
  bool seen_before(const Bytes& source, uint64_t layout);

  std::vector<Entry> kept_;
  std::vector<Seen> seen_;  // a ring of the last kSeen blocks
  size_t next_seen_ = 0;
  uint64_t limit_;
  uint64_t bytes_ = 0;
};

}  // namespace switchyard::backends::cpu
