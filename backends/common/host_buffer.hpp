// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "backends/backend.hpp"

namespace switchyard::backends {

/// Storage of the host backends (cpu, reference): shared immutable bytes,
/// so a bridge between two host devices, or a read, hands over the block
/// without copying.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(Bytes b) : bytes_(std::move(b)) {}
  [[nodiscard]] size_t size() const noexcept override { return bytes_.size(); }
  [[nodiscard]] const Bytes& bytes() const noexcept { return bytes_; }
  [[nodiscard]] const Bytes* host() const noexcept override { return &bytes_; }

 private:
  Bytes bytes_;
};

/// Kernels' write access to the bytes of an output: a fresh block, or an
/// input `reusable()` proved unshared. Everyone else writes through
/// Bytes::mutable_data(), which copies a shared block first.
struct KernelAccess {
  [[nodiscard]] static std::byte* data(const Bytes& b) noexcept { return b.kernel_data({}); }
};
template <class T>
[[nodiscard]] T* writable(const Bytes& b) noexcept {
  return reinterpret_cast<T*>(KernelAccess::data(b));
}
[[nodiscard]] inline std::byte* writable_data(const Bytes& b) noexcept { return KernelAccess::data(b); }

/// The host bytes behind a buffer of a host backend (nullptr otherwise).
[[nodiscard]] inline const Bytes* host_bytes(const BufferPtr& b) { return b ? b->host() : nullptr; }

/// Whether an input may be overwritten in place: the client marked it last
/// use, and nobody else (a reader, another handle) shares the block.
[[nodiscard]] inline bool reusable(const TensorIr& ir, const BufferPtr& b) {
  if (ir.status != TensorStatus::read_write || b.use_count() != 1) return false;
  auto* bytes = host_bytes(b);
  return bytes && bytes->unique();
}

}  // namespace switchyard::backends

namespace switchyard::backends {

/// The storage half of every host backend (cpu, reference): buffers are
/// HostBuffers sharing the bytes of the TensorData they came from or go to,
/// so uploads, reads and host-to-host bridges never copy.
class HostBackend : public Backend {
 public:
  [[nodiscard]] bool supports(DType) const noexcept override { return true; }

  Expected<BufferPtr> from_data(const TensorIr&, TensorData data) override {
    return BufferPtr{std::make_shared<HostBuffer>(std::move(data.bytes))};
  }

  void to_data(const TensorIr& t, const BufferPtr& buffer, ReadCallback done) override {
    const Bytes* bytes = host_bytes(buffer);
    if (bytes == nullptr) {
      done(DeviceError(Errc::invalid_tensor, std::string(kind()) + ": buffer of another backend"));
      return;
    }
    done(TensorData(t.shape, t.dtype, *bytes));
  }
};

}  // namespace switchyard::backends
