// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/bytes.hpp"

#include <new>

namespace switchyard {

Bytes Bytes::allocate(size_t size) {
  // Round up so vector kernels may read whole cache lines at the tail.
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  auto* raw =
      static_cast<std::byte*>(::operator new[](rounded == 0 ? alignment : rounded, std::align_val_t{alignment}));
  Bytes b;
  b.block_ = std::shared_ptr<std::byte>(raw, [](std::byte* p) { ::operator delete[](p, std::align_val_t{alignment}); });
  b.size_ = size;
  return b;
}

}  // namespace switchyard
