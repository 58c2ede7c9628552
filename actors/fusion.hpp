// SPDX-License-Identifier: Apache-2.0
#pragma once

// The runner's fusion pass: finds, in a batch of ops, runs of adjacent
// element-wise ops that can execute as one pass over memory
// (Backend::execute_fused), such as relu(x * 2 + 1), which arrives as
// [mul(x, 2) -> t1, add(t1 last use, 1) -> t2, relu(t2 last use) -> t3].
//
// A chain may also start with an op the backend accepts as a head
// (Backend::fusible_head): a convolution, which then applies the element-wise
// ops after it (a residual add, a relu) as it stores its result.
//
// A chain qualifies when the backend accepts each op (Backend::fusible),
// every op has the chain's output shape, every intermediate is read only by
// later ops of the chain and for the last time (read_write) by one of them,
// so nobody else can ever see it, and every op would succeed unfused up to
// its kernel: it passes validation, its external inputs are ready (not
// pending, not failed) and its output id is unused. So running the chain
// fused changes nothing a client can observe but the time it takes; the
// ops that do not qualify run one by one, as before.

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "backends/backend.hpp"

namespace switchyard::actors {

/// What the planner asks the runner about tensors outside the batch.
struct ChainContext {
  backends::Backend& backend;
  /// Whether input `t` exists on the device, is ready (neither pending nor
  /// failed) and has the shape and dtype `t` names.
  std::function<bool(const TensorIr&)> ready;
  /// Whether no tensor with this id exists on the device.
  std::function<bool(TensorId)> unused;
  /// The ops came from a client in the runner's own process: validate_local
  /// instead of validate (op_rules.hpp).
  bool local = false;
};

/// A chain found in a batch: ops[first, first + size).
struct FusedChain {
  size_t size = 0;
  /// The chain's inputs that no op of it produces, each id once, in order
  /// of first mention; read_write if any mention is (its last use).
  std::vector<TensorIr> inputs;
};

/// Longest ops the planner looks at, and most intermediates alive at once:
/// bounds the planning work per op of a batch that does not fuse, and the
/// scratch memory of a chain.
inline constexpr size_t max_chain_ops = 64;
inline constexpr size_t max_chain_live = 4;

/// The longest chain of at least two ops starting at ops[first], or nothing.
[[nodiscard]] std::optional<FusedChain> find_chain(std::span<OperationIr> ops, size_t first, const ChainContext& ctx);

}  // namespace switchyard::actors
