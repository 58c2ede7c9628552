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

 private:
  Bytes bytes_;
};

/// The host bytes behind a buffer of a host backend (nullptr otherwise).
[[nodiscard]] inline const Bytes* host_bytes(const BufferPtr& b) {
  auto* h = dynamic_cast<HostBuffer*>(b.get());
  return h ? &h->bytes() : nullptr;
}

/// Whether an input may be overwritten in place: the client marked it last
/// use, and nobody else (a reader, another handle) shares the block.
[[nodiscard]] inline bool reusable(const TensorIr& ir, const BufferPtr& b) {
  if (ir.status != TensorStatus::read_write || b.use_count() != 1) return false;
  auto* bytes = host_bytes(b);
  return bytes && bytes->unique();
}

}  // namespace switchyard::backends
