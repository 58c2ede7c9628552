// SPDX-License-Identifier: Apache-2.0
#include "actors/fusion.hpp"

#include <algorithm>
#include <array>

#include "switchyard/messages/op_rules.hpp"

namespace switchyard::actors {
namespace {

/// A tensor the chain mentions, as far as the scan has gone.
struct Mention {
  const TensorIr* tensor = nullptr;  // as first mentioned (the ops outlive the scan)
  bool produced = false;             // an output of an op of the chain (else an external input)
  bool consumed = false;             // used for the last time: no later op may mention it
  bool read_write = false;           // some mention is a last use
};

class Scan {
 public:
  explicit Scan(const Shape& shape) : shape_(shape) { mentions_.reserve(max_chain_ops + max_inputs); }

  /// Adds `op` to the chain if it can follow the ops before it; false
  /// (changing nothing) otherwise.
  bool add(OperationIr& op) {
    size_t outputs = 0;
    bool ok = true;
    op.each_output([&](const TensorIr& t) { ok = ok && ++outputs == 1 && t.shape == shape_ && find(t.id) == nullptr; });
    if (!ok || outputs != 1) return false;
    size_t fresh_inputs = 0;
    op.each_input([&](const TensorIr& t) {
      const Mention* m = find(t.id);
      if (m == nullptr)
        ++fresh_inputs;
      else  // an intermediate as produced (unfused, anything else fails the op)
        ok = ok && !m->consumed && (!m->produced || (t.shape == m->tensor->shape && t.dtype == m->tensor->dtype));
    });
    if (!ok || externals_ + fresh_inputs > max_inputs) return false;
    // Liveness after the op: intermediates it consumes die (each once, even
    // if it names one twice), its output lives.
    size_t live = live_ + 1;
    op.each_input([&](const TensorIr& t) {
      Mention* m = find(t.id);
      if (m != nullptr && m->produced && t.status == TensorStatus::read_write && !m->consumed) {
        m->consumed = true;
        --live;
      }
    });
    if (live > max_chain_live) {
      op.each_input([&](const TensorIr& t) {
        if (Mention* m = find(t.id); m != nullptr && m->produced) m->consumed = false;  // none was before
      });
      return false;
    }
    op.each_input([&](const TensorIr& t) {
      Mention* m = find(t.id);
      if (m == nullptr) {
        m = &remember({&t, false, false, false});
        ++externals_;
      }
      if (t.status == TensorStatus::read_write) {
        m->consumed = true;
        m->read_write = true;
      }
    });
    op.each_output([&](const TensorIr& t) { remember({&t, true, false, false}); });
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

  [[nodiscard]] std::vector<TensorIr> inputs() const {
    std::vector<TensorIr> out;
    out.reserve(externals_);
    for (const auto& m : mentions_) {
      if (m.produced) continue;
      out.push_back(*m.tensor);
      if (m.read_write) out.back().status = TensorStatus::read_write;
    }
    return out;
  }

 private:
  static constexpr size_t max_inputs = 16;

  // Mentions by id: open addressing in a fixed table, so a scan costs the
  // same per op however long the chain grows (a linear search made the
  // planning of 64-op chains of tiny adds cost more than it saved).
  static constexpr size_t table_size = 256;  // > 3 x (max_chain_ops + max_inputs)
  [[nodiscard]] static size_t slot_of(TensorId id) { return (id.value * 0x9E3779B97F4A7C15ull) >> 56; }

  [[nodiscard]] const Mention* find(TensorId id) const {
    for (size_t i = slot_of(id);; i = (i + 1) % table_size) {
      if (keys_[i] == 0) return nullptr;  // id 0 is never valid: validation refuses it
      if (keys_[i] == id.value) return &mentions_[index_[i]];
    }
  }

  Mention& remember(const Mention& m) {
    size_t i = slot_of(m.tensor->id);
    while (keys_[i] != 0) i = (i + 1) % table_size;
    keys_[i] = m.tensor->id.value;
    index_[i] = static_cast<uint8_t>(mentions_.size());
    mentions_.push_back(m);
    return mentions_.back();
  }
  [[nodiscard]] Mention* find(TensorId id) { return const_cast<Mention*>(static_cast<const Scan&>(*this).find(id)); }

  const Shape& shape_;
  std::vector<Mention> mentions_;
  std::array<uint64_t, table_size> keys_{};  // 0: free
  std::array<uint8_t, table_size> index_{};  // into mentions_
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

// Length of the longest chain among ops[first, first + limit) whose ops
// all pass `admit` (0 when there is none).
template <class Admit>
size_t longest_chain(std::span<OperationIr> ops, size_t first, size_t limit, const Shape& shape, Admit admit) {
  Scan scan(shape);
  size_t longest = 0;
  for (size_t k = first; k < first + limit; ++k) {
    if (!admit(ops[k], scan) || !scan.add(ops[k])) break;
    if (scan.closed()) longest = k - first + 1;
  }
  return longest;
}

}  // namespace

std::optional<FusedChain> find_chain(std::span<OperationIr> ops, size_t first, const ChainContext& ctx) {
  if (first + 1 >= ops.size()) return std::nullopt;
  // A head (a convolution that applies what follows as it stores its sums)
  // only in the first place.
  const bool head = ctx.backend.fusible_head(ops[first]);
  if (!head && !ctx.backend.fusible(ops[first])) return std::nullopt;
  const auto accepted = [&](const OperationIr& op) { return (head && &op == &ops[first]) || ctx.backend.fusible(op); };
  Shape shape;
  ops[first].each_output([&](const TensorIr& t) { shape = t.shape; });
  // The structure first: cheap, and what usually rules a chain out. Then
  // what the device knows, op by op over that prefix, cutting the chain
  // before an op that would fail or wait: that op then runs alone and fails
  // or waits as it would have anyway.
  size_t size = longest_chain(ops, first, std::min(ops.size() - first, max_chain_ops), shape,
                              [&](OperationIr& op, const Scan&) { return accepted(op); });
  if (size >= 2)
    size = longest_chain(ops, first, size, shape,
                         [&](OperationIr& op, const Scan& scan) { return would_run(op, scan, ctx); });
  if (size < 2) return std::nullopt;
  // The inputs as the chain was cut: a later op's last use of an input
  // must not make it read_write here.
  Scan chain(shape);
  for (size_t k = first; k < first + size; ++k) chain.add(ops[k]);
  return FusedChain{size, chain.inputs()};
}

}  // namespace switchyard::actors
