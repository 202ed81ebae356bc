// SPDX-License-Identifier: Apache-2.0
// mseal(2) (mm/mseal.c do_mseal, range_contains_unmapped, mseal_apply; Linux 6.18),
// and madvise's rule for sealed VMAs (mm/madvise.c can_madvise_modify, is_discard).
// The other checks of a sealed VMA are can_modify_vma() (vma.h) in munmap and MAP_FIXED
// (vma.cc GatherMunmapVmasLocked), mprotect (mprotect.cc) and mremap.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "mm.h"
#include "mmap_lock.h"
#include "vma.h"
#include "vma_lock.h"

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace vmspace {

bool CanMadviseModify(const Vma* v, int behavior) {
  if (!VmaIsSealed(v)) return true;
  switch (behavior) {  // is_discard()
    case MADV_FREE:
    case MADV_DONTNEED:
    case MADV_DONTNEED_LOCKED:
    case MADV_REMOVE:
    case MADV_DONTFORK:
    case MADV_WIPEONFORK:
    case MADV_GUARD_INSTALL:
      break;
    default:
      return true;
  }
  // File mappings, shared or private, are allowed; so is memory the process could
  // write anyway.
  if (!v->is_anonymous()) return true;
  return v->vm_flags & VM_WRITE;
}

namespace {

/// range_contains_unmapped(): a hole anywhere in [start, end).
bool RangeContainsUnmappedLocked(MmStruct& m, uint64_t start, uint64_t end) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  uint64_t prev_end = start;
  for (Vma* v = FindVmaLocked(m, start); v && v->vm_start < end; v = VmaNextLocked(m, v)) {
    if (v->vm_start > prev_end) return true;
    prev_end = v->vm_end;
  }
  return prev_end < end;
}

/// mseal_apply(): VM_SEALED on every VMA part of [start, end) (no holes), splitting and
/// merging as vma_modify_flags does. 0 or ENOMEM (a split refused at max_map_count:
/// the VMAs before stay sealed).
int MsealApplyLocked(MmStruct& m, uint64_t start, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  for (Vma* v = FindVmaLocked(m, start); v && v->vm_start < end;) {
    const uint64_t cs = std::max(v->vm_start, start), ce = std::min(v->vm_end, end);
    if (!VmaIsSealed(v)) {
      int err = 0;
      Vma* r = VmaModifyFlagsLocked(m, v, cs, ce, v->vm_flags | VM_SEALED, &err);
      if (!r) return err;
      VmaStartWriteLocked(m, r);
      if (!(r->vm_flags & VM_SEALED))  // not merged into a sealed neighbour: one more
        m.sealed_vmas.store(m.sealed_vmas.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      r->vm_flags |= VM_SEALED;
      m.sealed_vm.store(m.sealed_vm.load(std::memory_order_relaxed) + ((ce - cs) >> kPageShift),
                        std::memory_order_relaxed);
      v = r;
    }
    v = VmaNextLocked(m, v);
  }
  return 0;
}

}  // namespace

SysResult AddressSpace::Mseal(uint64_t start, uint64_t len_in, uint64_t flags) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  if (flags) return SysResult::Err(EINVAL);
  if (start & (kPageSize - 1)) return SysResult::Err(EINVAL);
  const uint64_t len = PageAlign(len_in);
  if (len_in && !len) return SysResult::Err(EINVAL);  // rounded up from near 2^64
  const uint64_t end = start + len;
  if (end < start) return SysResult::Err(EINVAL);
  if (end == start) return SysResult::Ok();
  const int err = RetryAfterReclaim(m, [&] {
    MmapWriteLock(m);
    const int e = RangeContainsUnmappedLocked(m, start, end) ? ENOMEM : MsealApplyLocked(m, start, end);
    MmapWriteUnlock(m);
    return e;
  });
  return err ? SysResult::Err(err) : SysResult::Ok();
}

}  // namespace vmspace
