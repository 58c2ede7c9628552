// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/buffer_pool.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <new>
#include <sys/mman.h>

namespace switchyard::backends::cpu {

namespace {
constexpr size_t min_class_bytes = 4096;
constexpr size_t num_classes = 40;
// Blocks from here up are mapped and unmapped directly: freed memory then
// leaves the process for certain, where malloc may keep a freed block of
// up to 32 MiB in its heap (its mmap threshold grows as blocks are freed).
constexpr size_t map_min_bytes = size_t{256} << 10;
constexpr size_t huge_advice_bytes = size_t{4} << 20;

std::byte* obtain(size_t class_bytes) {
  if (class_bytes < map_min_bytes)
    return static_cast<std::byte*>(::operator new[](class_bytes, std::align_val_t{Bytes::alignment}));
  void* p = ::mmap(nullptr, class_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // As Bytes::allocate's large blocks: transparent huge pages where THP is
  // in madvise mode (512 times fewer faults on a block's first use; the
  // kernel places mappings this large on huge-page boundaries).
  if (class_bytes >= huge_advice_bytes) (void)::madvise(p, class_bytes, MADV_HUGEPAGE);
  return static_cast<std::byte*>(p);
}

void release(std::byte* p, size_t class_bytes) {
  if (class_bytes < map_min_bytes)
    ::operator delete[](p, std::align_val_t{Bytes::alignment});
  else
    ::munmap(p, class_bytes);
}
}  // namespace

struct BufferPool::State {
  mutable std::mutex mutex;
  std::array<std::vector<std::byte*>, num_classes> free_lists;
  uint64_t cached = 0;
  uint64_t in_use = 0;
  uint64_t limit = 0;
  uint64_t memory_limit = 0;

  ~State() {
    for (size_t cls = 0; cls < num_classes; ++cls)
      for (auto* p : free_lists[cls]) release(p, min_class_bytes << cls);
  }
};

BufferPool::BufferPool(uint64_t cache_limit, uint64_t memory_limit) : state_(std::make_shared<State>()) {
  state_->limit = cache_limit;
  state_->memory_limit = memory_limit;
}

BufferPool::~BufferPool() = default;

Bytes BufferPool::allocate(size_t size) {
  // Small buffers come straight from malloc, which has its own fast bins.
  if (size < min_class_bytes) return state_->memory_limit == 0 ? Bytes::allocate(size) : allocate_counted(size);
  size_t cls = std::bit_width(size - 1) - std::bit_width(min_class_bytes - 1);
  size_t class_bytes = min_class_bytes << cls;
  if (cls >= num_classes) throw HostAllocationFailed(size);  // 4 PiB and up: no machine has it
  std::byte* raw = nullptr;
  {
    std::lock_guard lock(state_->mutex);
    if (const uint64_t cap = state_->memory_limit; cap != 0 && state_->in_use + class_bytes > cap)
      throw HostAllocationFailed(size, cap, state_->in_use);
    auto& list = state_->free_lists[cls];
    if (!list.empty()) {
      raw = list.back();
      list.pop_back();
      state_->cached -= class_bytes;
    }
    state_->in_use += class_bytes;
  }
  if (raw == nullptr) {
    try {
      raw = obtain(class_bytes);
    } catch (const std::bad_alloc&) {
      std::lock_guard lock(state_->mutex);
      state_->in_use -= class_bytes;
      throw HostAllocationFailed(size);
    }
  }
  // The deleter holds the state alive, so buffers may outlive the pool.
  std::weak_ptr<State> weak = state_;
  std::shared_ptr<std::byte> block(raw, [weak, cls, class_bytes](std::byte* p) {
    if (auto s = weak.lock()) {
      std::lock_guard lock(s->mutex);
      s->in_use -= class_bytes;
      if (s->cached + class_bytes <= s->limit) {
        s->free_lists[cls].push_back(p);
        s->cached += class_bytes;
        return;
      }
    }
    release(p, class_bytes);
  });
  return Bytes::adopt(std::move(block), size);
}

// A small buffer under a memory limit: still malloc's, but counted at its
// size in cache lines, so that a peer's millions of tiny tensors cannot
// hold memory the limit does not see (session 34: 1M `full({1})` took a
// worker to 480 MiB, its limit seeing none of it).
Bytes BufferPool::allocate_counted(size_t size) {
  constexpr size_t line = Bytes::alignment;
  const size_t rounded = std::max(line, (size + line - 1) / line * line);
  {
    std::lock_guard lock(state_->mutex);
    if (state_->in_use + rounded > state_->memory_limit)
      throw HostAllocationFailed(size, state_->memory_limit, state_->in_use);
    state_->in_use += rounded;
  }
  std::weak_ptr<State> weak = state_;
  auto uncount = [weak, rounded] {
    if (auto s = weak.lock()) {
      std::lock_guard lock(s->mutex);
      s->in_use -= rounded;
    }
  };
  std::byte* raw = nullptr;
  try {
    raw = static_cast<std::byte*>(::operator new[](rounded, std::align_val_t{line}));
  } catch (const std::bad_alloc&) {
    uncount();
    throw HostAllocationFailed(size);
  }
  std::shared_ptr<std::byte> block(raw, [uncount](std::byte* p) {
    uncount();
    ::operator delete[](p, std::align_val_t{line});
  });
  return Bytes::adopt(std::move(block), size);
}

uint64_t BufferPool::bytes_cached() const {
  std::lock_guard lock(state_->mutex);
  return state_->cached;
}

uint64_t BufferPool::bytes_in_use() const {
  std::lock_guard lock(state_->mutex);
  return state_->in_use;
}

void BufferPool::trim() {
  std::array<std::vector<std::byte*>, num_classes> freed;
  {
    std::lock_guard lock(state_->mutex);
    freed.swap(state_->free_lists);
    state_->cached = 0;
  }
  // Unmapping outside the lock: a drop on another thread never waits for it.
  for (size_t cls = 0; cls < num_classes; ++cls)
    for (auto* p : freed[cls]) release(p, min_class_bytes << cls);
}

}  // namespace switchyard::backends::cpu
