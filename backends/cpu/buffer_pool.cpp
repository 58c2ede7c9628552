#include "backends/cpu/buffer_pool.hpp"

#include <array>
#include <bit>
#include <new>

namespace switchyard::backends::cpu {

namespace {
constexpr size_t min_class_bytes = 4096;
constexpr size_t num_classes = 40;

void release(std::byte* p) { ::operator delete[](p, std::align_val_t{Bytes::alignment}); }
}  // namespace

struct BufferPool::State {
  mutable std::mutex mutex;
  std::array<std::vector<std::byte*>, num_classes> free_lists;
  uint64_t cached = 0;
  uint64_t in_use = 0;
  uint64_t limit = 0;

  ~State() {
    for (auto& list : free_lists)
      for (auto* p : list) release(p);
  }
};

BufferPool::BufferPool(uint64_t cache_limit) : state_(std::make_shared<State>()) { state_->limit = cache_limit; }

BufferPool::~BufferPool() = default;

Bytes BufferPool::allocate(size_t size) {
  // Small buffers come straight from malloc, which has its own fast bins.
  if (size < min_class_bytes) return Bytes::allocate(size);
  size_t cls = std::bit_width(size - 1) - std::bit_width(min_class_bytes - 1);
  size_t class_bytes = min_class_bytes << cls;
  if (cls >= num_classes) return Bytes::allocate(size);
  std::byte* raw = nullptr;
  {
    std::lock_guard lock(state_->mutex);
    auto& list = state_->free_lists[cls];
    if (!list.empty()) {
      raw = list.back();
      list.pop_back();
      state_->cached -= class_bytes;
    }
    state_->in_use += class_bytes;
  }
  if (raw == nullptr) raw = static_cast<std::byte*>(::operator new[](class_bytes, std::align_val_t{Bytes::alignment}));
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
    release(p);
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
  std::lock_guard lock(state_->mutex);
  for (auto& list : state_->free_lists) {
    for (auto* p : list) release(p);
    list.clear();
  }
  state_->cached = 0;
}

}  // namespace switchyard::backends::cpu
