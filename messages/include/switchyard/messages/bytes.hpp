// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

// CAF-free (a public header uses it); its inspect overload is in inspect.hpp.

#include "switchyard/error.hpp"
#include "switchyard/messages/std_memory.hpp"

namespace switchyard {

namespace backends {
struct KernelAccess;
}

/// Host memory the system refused, as a std::bad_alloc that says how much
/// was asked for (an out_of_memory error then names the size).
class HostAllocationFailed : public std::bad_alloc {
 public:
  explicit HostAllocationFailed(uint64_t bytes) noexcept;
  /// Refused by a device's memory limit (DeviceOptions::memory_limit) with
  /// `in_use` bytes already held, not by the system.
  HostAllocationFailed(uint64_t bytes, uint64_t limit, uint64_t in_use) noexcept;
  [[nodiscard]] const char* what() const noexcept override { return what_; }
  [[nodiscard]] uint64_t bytes() const noexcept { return bytes_; }

 private:
  uint64_t bytes_;
  // Not a std::string: copying an exception must not throw.
  char what_[160];
};

/// Shared, 64-byte aligned host memory. Copies share the block: a read
/// result, the data a tensor was made from and the device's own buffer may
/// all be one block, so uploads, reads and host-to-host bridges never copy.
/// That sharing is never observable: the block is read-only through every
/// public accessor, and `mutable_data()` copies it first unless this Bytes
/// is its only holder (copy-on-write). So a read result is the caller's own
/// to change, and what a device was given never changes under it.
class Bytes {
 public:
  static constexpr size_t alignment = 64;

  Bytes() = default;

  /// Uninitialised block of `size` bytes.
  [[nodiscard]] static Bytes allocate(size_t size);
  /// Adopts memory with a custom release (such as a pool's free list).
  [[nodiscard]] static Bytes adopt(std::shared_ptr<std::byte> block, size_t size) {
    Bytes b;
    b.block_ = std::move(block);
    b.size_ = size;
    return b;
  }
  [[nodiscard]] static Bytes copy_of(const void* src, size_t size) {
    auto b = allocate(size);
    if (size > 0) std::memcpy(b.block_.get(), src, size);
    return b;
  }

  /// Bytes [offset, offset + size) of this block, sharing it: parts of a
  /// tensor crossing a connection are views, not copies. `offset` must keep
  /// the view aligned (a multiple of `alignment`), or the bytes are copied.
  [[nodiscard]] Bytes slice(size_t offset, size_t size) const {
    if (offset % alignment != 0) return copy_of(block_.get() + offset, size);
    Bytes b;
    b.block_ = std::shared_ptr<std::byte>(block_, block_.get() + offset);  // aliasing: owns the whole block
    b.size_ = size;
    return b;
  }

  [[nodiscard]] size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// Read-only view of the block.
  [[nodiscard]] const std::byte* data() const noexcept { return block_.get(); }
  /// Whether this is the block's only holder (so writing is unobservable).
  /// A holder on another thread (a device the block was bridged to or
  /// from) may just have let go, and use_count() is a relaxed load, which
  /// orders nothing: its last reads of the block and our writes would race.
  /// A copy released again does: its decrement (acquire and release) reads
  /// from that holder's release of its reference.
  [[nodiscard]] bool unique() const noexcept {
    if (block_.use_count() != 1) return false;
    { [[maybe_unused]] const auto synchronize = block_; }
    return true;
  }
  [[nodiscard]] long use_count() const noexcept { return block_.use_count(); }

  template <class T>
  [[nodiscard]] const T* as() const noexcept {
    return reinterpret_cast<const T*>(block_.get());
  }

  /// Writable block: copies it first when another holder shares it, so no
  /// other reader (a device, a future, another TensorData) sees the write.
  [[nodiscard]] std::byte* mutable_data() {
    if (block_ && !unique()) *this = copy_of(block_.get(), size_);
    return block_.get();
  }
  template <class T>
  [[nodiscard]] T* mutable_as() {
    return reinterpret_cast<T*>(mutable_data());
  }

  /// Writable block without the copy, for backend kernels only: they write
  /// fresh outputs and inputs the runtime proved unshared (`reusable()`), and
  /// may hold a second Bytes of the same block while they do.
  class KernelKey {
    friend struct backends::KernelAccess;
    KernelKey() = default;
  };
  [[nodiscard]] std::byte* kernel_data(KernelKey /*key*/) const noexcept { return block_.get(); }

 private:
  std::shared_ptr<std::byte> block_;
  size_t size_ = 0;
};

}  // namespace switchyard
