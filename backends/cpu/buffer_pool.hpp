// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "switchyard/messages/bytes.hpp"

namespace switchyard::backends::cpu {

/// Recycles freed buffers of one device by size class (powers of two from
/// 4 KiB). Fresh allocations of large tensors otherwise pay for page faults
/// on every op (PyTorch's allocating `a + b` on 16M floats reaches a third
/// of the copy bandwidth for that reason). Buffers return here when their
/// last reference drops, possibly on a client thread, hence the mutex.
class BufferPool {
 public:
  /// Keeps at most `cache_limit` bytes of freed blocks (0: none); refuses
  /// an allocation that would take the blocks in use past `memory_limit`
  /// (0: none) with HostAllocationFailed. Blocks under 4 KiB are malloc's,
  /// counted (under a limit) at their size rounded up to 64 bytes.
  explicit BufferPool(uint64_t cache_limit, uint64_t memory_limit = 0);
  ~BufferPool();

  /// Uninitialised bytes from the pool.
  [[nodiscard]] Bytes allocate(size_t size);

  [[nodiscard]] uint64_t bytes_cached() const;
  [[nodiscard]] uint64_t bytes_in_use() const;
  /// Returns every cached block to the system.
  void trim();

 private:
  [[nodiscard]] Bytes allocate_counted(size_t size);

  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace switchyard::backends::cpu
