// SPDX-License-Identifier: Apache-2.0
#include "actors/fusion.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>

#include "switchyard/messages/id_slots.hpp"
#include "switchyard/messages/op_rules.hpp"

namespace switchyard::actors {
namespace {

/// A tensor the chain mentions, as far as the scan has gone.
// (Trivial, every field given where one is made: a scan's table of them is
// left unwritten until used.)
struct Mention {
  const TensorIr* tensor;  // as first mentioned (the ops outlive the scan)
  bool produced;           // an output of an op of the chain (else an external input)
  bool consumed;           // used for the last time: no later op may mention it
  uint8_t first_at;        // position in the chain of the op that first mentions it
  uint8_t last_use_at;     // position of the op that uses it for the last time (read_write), or no_position
  static constexpr uint8_t no_position = 255;
};
static_assert(max_chain_ops < Mention::no_position);

class Scan {
 public:
  explicit Scan(const Shape& shape) : shape_(shape) {}

  /// Adds `op`, the chain's op at `position`, if it can follow the ops
  /// before it; false (changing nothing) otherwise.
  bool add(OperationIr& op, size_t position) {
    const auto at = static_cast<uint8_t>(position);
    // The op's tensors, gathered once: each visit of the op variant cost
    // more than the checks made on what it yields.
    const TensorIr* out = nullptr;
    size_t outputs = 0;
    op.each_output([&](const TensorIr& t) {
      out = &t;
      ++outputs;
    });
    if (outputs != 1 || out->shape != shape_ || find(out->id) != nullptr) return false;
    std::array<TensorIr*, max_op_inputs> in{};
    size_t n = 0;
    op.each_input([&](TensorIr& t) {
      if (n < in.size()) in[n] = &t;
      ++n;
    });
    if (n > in.size()) return false;
    const std::span<TensorIr* const> inputs(in.data(), n);
    size_t fresh_inputs = 0;
    for (const TensorIr* t : inputs) {
      const Mention* m = find(t->id);
      if (m == nullptr)
        ++fresh_inputs;
      else if (m->consumed || (m->produced && (t->shape != m->tensor->shape || t->dtype != m->tensor->dtype)))
        return false;  // an intermediate as produced (unfused, anything else fails the op)
    }
    if (externals_ + fresh_inputs > max_inputs) return false;
    // Liveness after the op: intermediates it consumes die (each once, even
    // if it names one twice), its output lives.
    size_t live = live_ + 1;
    for (const TensorIr* t : inputs) {
      Mention* m = find(t->id);
      if (m != nullptr && m->produced && t->status == TensorStatus::read_write && !m->consumed) {
        m->consumed = true;
        --live;
      }
    }
    if (live > max_chain_live) {
      for (const TensorIr* t : inputs)
        if (Mention* m = find(t->id); m != nullptr && m->produced) m->consumed = false;  // none was before
      return false;
    }
    for (const TensorIr* t : inputs) {
      Mention* m = find(t->id);
      if (m == nullptr) {
        m = &remember({t, false, false, at, Mention::no_position});
        ++externals_;
      }
      if (t->status == TensorStatus::read_write) {
        m->consumed = true;
        m->last_use_at = std::min(m->last_use_at, at);
      }
    }
    remember({out, true, false, at, Mention::no_position});
    live_ = live;
    return true;
  }

  /// Whether the ops so far form a chain: only the last op's output lives.
  [[nodiscard]] bool closed() const noexcept { return live_ == 1; }

  /// Whether `id` is no output of the ops so far (an input from outside).
  [[nodiscard]] bool external(TensorId id) const {
    const Mention* m = find(id);
    return m == nullptr || !m->produced;
  }

  /// The inputs of the chain's first `size` ops: what they read that none
  /// of them produces, in order of first mention, read_write if one of them
  /// uses it for the last time (a later op's last use does not count).
  [[nodiscard]] std::vector<TensorIr> inputs(size_t size) const {
    std::vector<TensorIr> out;
    out.reserve(externals_);
    for (const auto& m : std::span(mentions_.data(), mentions_used_)) {
      if (m.produced || m.first_at >= size) continue;
      out.push_back(*m.tensor);
      if (m.last_use_at < size) out.back().status = TensorStatus::read_write;
    }
    return out;
  }

 private:
  static constexpr size_t max_inputs = 16;
  static constexpr size_t max_op_inputs = 8;  // more than any fusible op or head has

  // Mentions by id: open addressing in a fixed table, so a scan costs the
  // same per op however long the chain grows (a linear search made the
  // planning of 64-op chains of tiny adds cost more than it saved).
  static constexpr size_t table_size = 256;  // > 3 x (max_chain_ops + max_inputs)

  [[nodiscard]] const Mention* find(TensorId id) const {
    const uint8_t* index = find_id(index_, id);
    return index == nullptr ? nullptr : &mentions_[*index];
  }

  // (add() admits at most max_inputs externals and one output per op.)
  Mention& remember(const Mention& m) {
    probe_id(index_, m.tensor->id) = {m.tensor->id.value, static_cast<uint8_t>(mentions_used_)};
    mentions_[mentions_used_] = m;
    return mentions_[mentions_used_++];
  }
  [[nodiscard]] Mention* find(TensorId id) { return const_cast<Mention*>(static_cast<const Scan&>(*this).find(id)); }

  const Shape& shape_;
  // In place, not a vector: a scan per chain head of every batch, and the
  // vector's block was the runner's largest allocation per op.
  std::array<Mention, max_chain_ops + max_inputs> mentions_;  // NOLINT(cppcoreguidelines-pro-type-member-init): [0, mentions_used_) written first
  size_t mentions_used_ = 0;
  std::array<IdSlot<uint8_t>, table_size> index_{};  // into mentions_
  size_t externals_ = 0;
  size_t live_ = 0;  // intermediates not yet consumed, the last output included
};

// Whether `op` would run unfused without failing or waiting before its
// kernel (its output id unused, its inputs ready, its rules met).
bool would_run(OperationIr& op, const Scan& scan, const ChainContext& ctx) {
  bool ok = true;
  op.each_input([&](const TensorIr& t) { ok = ok && (!scan.external(t.id) || ctx.ready(t)); });
  op.each_output([&](const TensorIr& t) { ok = ok && ctx.unused(t.id); });
  return ok && !(ctx.local ? validate_local(op) : validate(op)) && ctx.backend.supports(op);
}

// The backend's answer to a question about fusing `op`; one that throws (a
// user's backend, backend.hpp) says no, and the op runs alone, where a
// failure of its own fails only it.
template <class Ask>
bool backend_says_yes(Ask&& ask) noexcept {
  try {
    return ask();
  } catch (...) {
    return false;
  }
}

}  // namespace

std::optional<FusedChain> find_chain(std::span<OperationIr> ops, size_t first, const ChainContext& ctx) {
  if (first + 1 >= ops.size()) return std::nullopt;
  // A head (a convolution or matmul that applies what follows as it stores
  // its sums) only in the first place.
  const bool head = backend_says_yes([&] { return ctx.backend.fusible_head(ops[first]); });
  if (!head && !backend_says_yes([&] { return ctx.backend.fusible(ops[first]); })) return std::nullopt;
  Shape shape;
  ops[first].each_output([&](const TensorIr& t) { shape = t.shape; });
  // The structure first: cheap, and what usually rules a chain out. One
  // scan, whose state then also answers which inputs come from outside.
  Scan scan(shape);
  uint64_t closed = 0;  // bit k: ops[first, first + k] form a chain
  static_assert(max_chain_ops <= 64);
  const size_t limit = std::min(ops.size() - first, max_chain_ops);
  for (size_t k = 0; k < limit; ++k) {
    auto& op = ops[first + k];
    if ((k > 0 && !backend_says_yes([&] { return ctx.backend.fusible(op); })) || !scan.add(op, k)) break;
    if (scan.closed()) closed |= uint64_t{1} << k;
  }
  // Length of the longest chain among the first `n` ops (0 if none).
  const auto longest = [&](size_t n) -> size_t {
    const uint64_t ends = n >= 64 ? closed : closed & ((uint64_t{1} << n) - 1);
    return ends == 0 ? 0 : static_cast<size_t>(64 - std::countl_zero(ends));
  };
  size_t size = longest(limit);
  // Then what the device knows, op by op over that prefix, cutting the chain
  // before an op that would fail or wait: that op then runs alone and fails
  // or waits as it would have anyway. (An op's inputs from outside are the
  // same in the scan's final state: an output id is fresh, so no earlier op
  // can mention it.)
  for (size_t k = 0; k < size && size >= 2; ++k)
    if (!would_run(ops[first + k], scan, ctx)) size = longest(k);
  if (size < 2) return std::nullopt;
  return FusedChain{size, scan.inputs(size)};
}

}  // namespace switchyard::actors
