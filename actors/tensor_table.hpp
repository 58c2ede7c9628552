// SPDX-License-Identifier: Apache-2.0
#pragma once

/// \file
/// The runner's table of tensors by id: an open-addressing index (linear
/// probing, backward-shift deletion) over values allocated one by one.
///
/// Every op makes one entry and drops one, so the table is on the per-op
/// path: `std::unordered_map` cost ~300 instructions per tiny op in node
/// handling, bucket arithmetic and its iterator layers (callgrind,
/// docs/PERFORMANCE.md). Values stay where they were made until erased
/// (a waiter may add entries while it holds one), hence one allocation per
/// value, served from a free list of spare blocks that keeps at most
/// `max_spare` of them, so a table that once grew large gives its memory
/// back. Ids come from peers too: the hash is keyed by a per-table salt, so
/// a peer cannot choose ids that all land in one probe run. One thread only
/// (the runner's).

#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "switchyard/messages/tensor_id.hpp"

namespace switchyard::actors {

template <class Value>
class TensorTable {
 public:
  static constexpr size_t max_spare = 4096;

  explicit TensorTable(uint64_t salt = 0) : salt_(salt), index_(min_capacity), shift_(shift_for(min_capacity)) {}
  TensorTable(const TensorTable&) = delete;
  TensorTable& operator=(const TensorTable&) = delete;
  ~TensorTable() {
    for (auto& s : index_)
      if (s.node != nullptr) destroy(s.node);
    while (spare_ != nullptr) ::operator delete(std::exchange(spare_, spare_->next));
  }

  /// The value of `id`, or null.
  [[nodiscard]] Value* find(TensorId id) noexcept {
    for (size_t i = home(id);; i = next(i)) {
      Node* n = index_[i].node;
      if (n == nullptr) return nullptr;
      if (index_[i].id == id.value) return &n->value;
    }
  }
  [[nodiscard]] const Value* find(TensorId id) const noexcept { return const_cast<TensorTable*>(this)->find(id); }

  /// The value of `id`, made from `args` if there is none; second: whether
  /// it was made.
  template <class... Args>
  std::pair<Value*, bool> try_emplace(TensorId id, Args&&... args) {
    size_t i = home(id);
    for (; index_[i].node != nullptr; i = next(i))
      if (index_[i].id == id.value) return {&index_[i].node->value, false};
    Node* n = make(std::forward<Args>(args)...);
    index_[i] = Slot{id.value, n};
    if (++size_ * 2 > index_.size()) rehash(index_.size() * 2);
    return {&n->value, true};
  }

  /// Destroys the value of `id`, if there is one.
  void erase(TensorId id) noexcept {
    size_t i = home(id);
    for (;; i = next(i)) {
      if (index_[i].node == nullptr) return;
      if (index_[i].id == id.value) break;
    }
    destroy(index_[i].node);
    // Backward shift: later members of the probe run move up into the gap
    // when the gap lies on their way from their home slot.
    for (size_t j = next(i);; j = next(j)) {
      if (index_[j].node == nullptr) break;
      const size_t h = home(TensorId{index_[j].id});
      if (((j - h) & mask()) >= ((j - i) & mask())) {
        index_[i] = index_[j];
        i = j;
      }
    }
    index_[i] = Slot{};
    --size_;
    // A table that shrank to an eighth of its index gives the index back.
    if (index_.size() > min_capacity && size_ * 8 < index_.size()) {
      try {
        rehash(index_.size() / 2);
      } catch (const std::bad_alloc&) {  // keeps the larger index, as good
      }
    }
  }

  [[nodiscard]] size_t size() const noexcept { return size_; }

  /// Calls `f(id, value)` for every entry; `f` must not add or erase any.
  template <class F>
  void for_each(F&& f) {
    for (auto& s : index_)
      if (s.node != nullptr) f(TensorId{s.id}, s.node->value);
  }

 private:
  static constexpr size_t min_capacity = 16;  // a power of two

  struct Node {
    template <class... Args>
    explicit Node(Args&&... args) : value(std::forward<Args>(args)...) {}
    Value value;
  };
  struct Spare {
    Spare* next;
  };
  struct Slot {
    uint64_t id = 0;
    Node* node = nullptr;  // null: empty
  };

  static unsigned shift_for(size_t capacity) noexcept {
    return 64U - static_cast<unsigned>(std::countr_zero(capacity));
  }
  [[nodiscard]] size_t mask() const noexcept { return index_.size() - 1; }
  [[nodiscard]] size_t next(size_t i) const noexcept { return (i + 1) & mask(); }
  // Fibonacci hashing of the salted id: the product's top bits, a few
  // instructions; sequential ids spread, and without the salt no id lands
  // predictably.
  [[nodiscard]] size_t home(TensorId id) const noexcept {
    return static_cast<size_t>(((id.value ^ salt_) * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  template <class... Args>
  Node* make(Args&&... args) {
    void* block = spare_ != nullptr ? static_cast<void*>(std::exchange(spare_, spare_->next)) : nullptr;
    if (block != nullptr)
      --spare_count_;
    else
      block = ::operator new(sizeof(Node));
    try {
      // The block is this table's: index_ (or the free list) owns what it holds.
      return new (block) Node(std::forward<Args>(args)...);  // NOLINT(cppcoreguidelines-owning-memory)
    } catch (...) {
      give(block);
      throw;
    }
  }
  void destroy(Node* n) noexcept {
    n->~Node();
    give(n);
  }
  void give(void* block) noexcept {
    if (spare_count_ == max_spare) {
      ::operator delete(block);
      return;
    }
    spare_ = new (block) Spare{spare_};  // NOLINT(cppcoreguidelines-owning-memory): a link in the free list
    ++spare_count_;
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old(capacity);
    old.swap(index_);
    shift_ = shift_for(capacity);
    for (const auto& s : old) {
      if (s.node == nullptr) continue;
      size_t i = home(TensorId{s.id});
      while (index_[i].node != nullptr) i = next(i);
      index_[i] = s;
    }
  }

  static_assert(sizeof(Node) >= sizeof(Spare) && alignof(Node) <= alignof(std::max_align_t));

  uint64_t salt_;
  std::vector<Slot> index_;  // size: a power of two, at most half full
  unsigned shift_;           // 64 - log2(index_.size())
  size_t size_ = 0;
  Spare* spare_ = nullptr;
  size_t spare_count_ = 0;
};

}  // namespace switchyard::actors
