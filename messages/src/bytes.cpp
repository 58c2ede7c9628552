// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/bytes.hpp"

#include <cstdio>
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

namespace {
struct Scaled {
  double value;
  const char* unit;
};
Scaled scaled(uint64_t bytes) {
  Scaled s{static_cast<double>(bytes) / 1024, "KiB"};
  for (const char* next : {"MiB", "GiB", "TiB", "PiB"}) {
    if (s.value < 1024) break;
    s.value /= 1024;
    s.unit = next;
  }
  return s;
}
}  // namespace

HostAllocationFailed::HostAllocationFailed(uint64_t bytes) noexcept : bytes_(bytes), what_{} {
  const Scaled s = scaled(bytes);
  (void)std::snprintf(what_, sizeof what_, "out of host memory allocating %llu bytes (%.1f %s)",
                      static_cast<unsigned long long>(bytes), s.value, s.unit);
}

HostAllocationFailed::HostAllocationFailed(uint64_t bytes, uint64_t limit, uint64_t in_use) noexcept
    : bytes_(bytes), what_{} {
  const Scaled b = scaled(bytes), l = scaled(limit), u = scaled(in_use);
  (void)std::snprintf(what_, sizeof what_,
                      "allocating %llu bytes (%.1f %s) would pass the device's memory limit of %.1f %s "
                      "(%.1f %s in use)",
                      static_cast<unsigned long long>(bytes), b.value, b.unit, l.value, l.unit, u.value, u.unit);
}

Bytes Bytes::allocate(size_t size) {
  // Round up so vector kernels may read whole cache lines at the tail.
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  // Not rounded up to whole huge pages: a tail short of 2 MiB stays in
  // small pages, so a block just over a boundary costs no extra memory.
  const bool huge = rounded >= huge_threshold;
  const std::align_val_t align{huge ? huge_page : alignment};
  std::byte* raw = nullptr;
  try {
    raw = static_cast<std::byte*>(::operator new[](rounded == 0 ? alignment : rounded, align));
  } catch (const std::bad_alloc&) {
    throw HostAllocationFailed(size);
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (huge) (void)::madvise(raw, rounded, MADV_HUGEPAGE);
#endif
  Bytes b;
  b.block_ = std::shared_ptr<std::byte>(raw, [align](std::byte* p) { ::operator delete[](p, align); });
  b.size_ = size;
  return b;
}

}  // namespace switchyard
