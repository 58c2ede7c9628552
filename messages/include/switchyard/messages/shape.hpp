// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace switchyard {

/// The extents of a Shape: a vector of int64_t that keeps up to
/// `inline_capacity` values in place and only beyond that on the heap.
/// Shapes are copied into every op, handle and check on the request path;
/// as `std::vector` each copy was an allocation and a free on another
/// thread (a third of an op's cost; libtorch keeps sizes inline the same
/// way). The interface is the part of `std::vector`'s that shapes use, and
/// a Dims converts to and from `std::vector<int64_t>`.
class Dims {
 public:
  static constexpr size_t inline_capacity = 6;
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Dims() noexcept = default;
  Dims(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  explicit Dims(size_t count, int64_t value = 0) { assign(count, value); }
  template <class It, class = decltype(*std::declval<It&>()), class = decltype(++std::declval<It&>())>
  Dims(It first, It last) {
    assign(first, last);
  }
  // Implicit both ways: code written against `std::vector<int64_t> dims`
  // keeps compiling (each conversion copies).
  Dims(const std::vector<int64_t>& values);  // NOLINT(google-explicit-constructor)
  operator std::vector<int64_t>() const;     // NOLINT(google-explicit-constructor)
  [[nodiscard]] std::vector<int64_t> to_vector() const;

  Dims(const Dims& other) : size_(other.size_), inline_(other.inline_) {
    if (other.capacity_ != inline_capacity) {
      size_ = 0;
      assign(other.begin(), other.end());
    }
  }
  Dims(Dims&& other) noexcept { take(other); }
  Dims& operator=(const Dims& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  Dims& operator=(Dims&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  Dims& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~Dims() = default;

  [[nodiscard]] size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] int64_t* data() noexcept { return capacity_ > inline_capacity ? heap_.data() : inline_.v; }
  [[nodiscard]] const int64_t* data() const noexcept { return capacity_ > inline_capacity ? heap_.data() : inline_.v; }
  [[nodiscard]] iterator begin() noexcept { return data(); }
  [[nodiscard]] iterator end() noexcept { return data() + size_; }
  [[nodiscard]] const_iterator begin() const noexcept { return data(); }
  [[nodiscard]] const_iterator end() const noexcept { return data() + size_; }
  [[nodiscard]] const_iterator cbegin() const noexcept { return data(); }
  [[nodiscard]] const_iterator cend() const noexcept { return data() + size_; }
  // Templates, so that std::reverse_iterator and the C++20 iterator
  // concepts it checks are instantiated only where they are used: as plain
  // members they were 3% of what the public headers cost every consumer's
  // translation unit (docs/PERFORMANCE.md).
  template <class It = iterator>
  [[nodiscard]] std::reverse_iterator<It> rbegin() noexcept {
    return std::reverse_iterator<It>(end());
  }
  template <class It = iterator>
  [[nodiscard]] std::reverse_iterator<It> rend() noexcept {
    return std::reverse_iterator<It>(begin());
  }
  template <class It = const_iterator>
  [[nodiscard]] std::reverse_iterator<It> rbegin() const noexcept {
    return std::reverse_iterator<It>(end());
  }
  template <class It = const_iterator>
  [[nodiscard]] std::reverse_iterator<It> rend() const noexcept {
    return std::reverse_iterator<It>(begin());
  }
  [[nodiscard]] int64_t& operator[](size_t i) noexcept { return data()[i]; }
  [[nodiscard]] int64_t operator[](size_t i) const noexcept { return data()[i]; }
  [[nodiscard]] int64_t& front() noexcept { return data()[0]; }
  [[nodiscard]] int64_t front() const noexcept { return data()[0]; }
  [[nodiscard]] int64_t& back() noexcept { return data()[size_ - 1]; }
  [[nodiscard]] int64_t back() const noexcept { return data()[size_ - 1]; }

  void clear() noexcept { size_ = 0; }
  void reserve(size_t n) {
    if (n > capacity_) grow(n);
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t v) {
    if (size_ == capacity_) grow(size_t{capacity_} * 2);
    data()[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() noexcept { --size_; }
  void assign(size_t count, int64_t value) {
    clear();
    resize(count, value);
  }
  template <class It>
  void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  void assign(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  iterator insert(const_iterator pos, int64_t v) { return insert(pos, size_t{1}, v); }
  iterator insert(const_iterator pos, size_t count, int64_t v) {
    const size_t at = static_cast<size_t>(pos - data());
    reserve(size_ + count);
    for (size_t i = size_; i-- > at;) data()[i + count] = data()[i];
    for (size_t i = 0; i < count; ++i) data()[at + i] = v;
    size_ += static_cast<uint32_t>(count);
    return data() + at;
  }
  template <class It, class = decltype(*std::declval<It&>()), class = decltype(++std::declval<It&>())>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data());
    Dims tail(data() + at, data() + size_);  // `first` may point into this
    Dims head_and_new(data(), data() + at);
    for (; first != last; ++first) head_and_new.push_back(static_cast<int64_t>(*first));
    for (auto v : tail) head_and_new.push_back(v);
    *this = std::move(head_and_new);
    return data() + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) noexcept { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) noexcept {
    const size_t at = static_cast<size_t>(first - data());
    const size_t gone = static_cast<size_t>(last - first);
    for (size_t i = at; i + gone < size_; ++i) data()[i] = data()[i + gone];
    size_ -= static_cast<uint32_t>(gone);
    return data() + at;
  }
  void swap(Dims& other) noexcept {
    Dims tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const Dims& a, const Dims& b) noexcept {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i)
      if (a.data()[i] != b.data()[i]) return false;
    return true;
  }
  friend bool operator==(const Dims& a, const std::vector<int64_t>& b) noexcept {
    if (a.size_ != b.size()) return false;
    for (size_t i = 0; i < a.size_; ++i)
      if (a.data()[i] != b[i]) return false;
    return true;
  }

 private:
  // The whole inline block at a fixed size, as one struct copy: a loop up
  // to size_ cost more in branches (and GCC made it a call to memcpy) than
  // the few extra stores. Unused values are always initialised, so copying
  // them is defined.
  void copy_inline(const Dims& other) noexcept { inline_ = other.inline_; }
  // Copies are what the request path does most (op, handle, runner table):
  // the usual case, inline into inline, is one block copy.
  void copy_from(const Dims& other) {
    if (other.capacity_ == inline_capacity && capacity_ == inline_capacity) {
      copy_inline(other);
      size_ = other.size_;
      return;
    }
    assign(other.begin(), other.end());
  }
  // Moves leave `other` empty, with its inline storage.
  void take(Dims& other) noexcept {
    if (other.capacity_ == inline_capacity) {
      // A spill block of ours stays allocated, unused while capacity_ is inline.
      copy_inline(other);
    } else {
      heap_ = std::move(other.heap_);
      other.heap_.clear();
    }
    capacity_ = other.capacity_;
    size_ = other.size_;
    other.size_ = 0;
    other.capacity_ = inline_capacity;
  }
  // Out of line (messages/src/basics.cpp): rare, and its vector code is
  // instantiated once in the library instead of in every consumer.
  void grow(size_t n);

  // The spill storage, used once more than inline_capacity values were held
  // (capacity_ then says how many it has room for); a vector rather than an
  // owning pointer, which GCC's -Wmaybe-uninitialized misreads inside
  // std::optional.
  std::vector<int64_t> heap_;
  uint32_t size_ = 0;
  uint32_t capacity_ = inline_capacity;
  struct Inline {
    int64_t v[inline_capacity] = {};
  };
  Inline inline_;
};

/// Extents of a tensor, outermost first. A rank-0 shape is a scalar with one
/// element; an extent of 0 makes an empty tensor.
struct Shape {
  Dims dims;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(const std::vector<int64_t>& d) : dims(d) {}
  explicit Shape(Dims d) noexcept : dims(std::move(d)) {}

  [[nodiscard]] size_t rank() const noexcept { return dims.size(); }
  [[nodiscard]] int64_t operator[](size_t i) const { return dims[i]; }
  /// Number of elements (1 for rank 0).
  /// Wraps (no UB) for hostile shapes whose product overflows; validate()
  /// rejects those before any backend sees them.
  [[nodiscard]] int64_t numel() const noexcept {
    uint64_t n = 1;
    for (auto d : dims) n *= static_cast<uint64_t>(d);
    return static_cast<int64_t>(n);
  }
  /// Row-major strides in elements.
  [[nodiscard]] std::vector<int64_t> strides() const;
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const Shape&, const Shape&) = default;
};

/// NumPy broadcasting of two shapes; nullopt where they are incompatible.
[[nodiscard]] std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

/// Strides that read a tensor of shape `from` as if it had the broadcast
/// shape `to` (0 on broadcast axes). Precondition: `from` broadcasts to `to`.
[[nodiscard]] std::vector<int64_t> broadcast_strides(const Shape& from, const Shape& to);

/// Resolves a possibly negative axis against `rank`; nullopt if out of range.
[[nodiscard]] std::optional<int64_t> normalize_axis(int64_t axis, size_t rank) noexcept;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Shape& x) {
  return f(x.dims);
}

}  // namespace switchyard
