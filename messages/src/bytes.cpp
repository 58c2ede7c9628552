// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/bytes.hpp"

#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace switchyard {

namespace {

// Large blocks are placed on 2 MiB boundaries and offered to the kernel as
// transparent huge pages: a fresh 256 MiB block is 65,536 page faults in
// 4 KiB pages, and on this project's VMs the faults, not the copies, were
// most of what a remote transfer cost (docs/PERFORMANCE.md, item 5). With
// huge pages it is 128. Where THP is off the advice is ignored.
constexpr size_t huge_page = size_t{2} << 20;
constexpr size_t huge_threshold = size_t{4} << 20;

}  // namespace

Bytes Bytes::allocate(size_t size) {
  // Round up so vector kernels may read whole cache lines at the tail.
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  // Not rounded up to whole huge pages: a tail short of 2 MiB stays in
  // small pages, so a block just over a boundary costs no extra memory.
  const bool huge = rounded >= huge_threshold;
  const std::align_val_t align{huge ? huge_page : alignment};
  auto* raw = static_cast<std::byte*>(::operator new[](rounded == 0 ? alignment : rounded, align));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (huge) (void)::madvise(raw, rounded, MADV_HUGEPAGE);
#endif
  Bytes b;
  b.block_ = std::shared_ptr<std::byte>(raw, [align](std::byte* p) { ::operator delete[](p, align); });
  b.size_ = size;
  return b;
}

}  // namespace switchyard
