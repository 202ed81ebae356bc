// SPDX-License-Identifier: Apache-2.0
// mlock2(2), munlock(2), mlockall(2), munlockall(2) (mm/mlock.c do_mlock,
// apply_vma_lock_flags, apply_mlockall_flags, mlock_fixup; Linux 6.18) and
// __mm_populate (mm/gup.c populate_vma_page_range).
//
// What the engine keeps of locking is the VMA side: VM_LOCKED / VM_LOCKONFAULT, the
// splits and merges, mm->locked_vm against RLIMIT_MEMLOCK, mm->def_flags for
// MCL_FUTURE, and the populate. Locked pages need no per-folio mlock state here: the
// engine has no reclaim that could take them, and MADV_DONTNEED refuses VM_LOCKED VMAs
// (EINVAL) as Linux does.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "memory.h"
#include "mlock.h"
#include "mm.h"
#include "mmap_lock.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

bool CanDoMlock(const MmStruct& mm) {
  return mm.rlimit_memlock.load(std::memory_order_relaxed) != 0 || mm.cap_ipc_lock.load(std::memory_order_relaxed);
}

namespace {

/// rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT.
uint64_t LockLimitPages(const MmStruct& mm) { return mm.rlimit_memlock.load(std::memory_order_relaxed) >> kPageShift; }

/// populate_vma_page_range() for [start, end) of a VMA with flags `vm_flags`: 0 or an
/// errno (see MmPopulate).
int PopulateVmaPageRange(MmStruct& m, uint64_t vm_flags, uint64_t start, uint64_t end) ABSL_LOCKS_EXCLUDED(m.mmap_lock) {
  // "Rightly or wrongly, the VM_LOCKONFAULT case has never used faultin_page()".
  if (vm_flags & VM_LOCKONFAULT) return 0;
  if (!(vm_flags & VM_ACCESS_FLAGS)) return EFAULT;
  // Write faults break COW in private writable mappings; shared ones are only read
  // (not dirtied for nothing); FOLL_FORCE reads the others.
  const AccessType a = (vm_flags & (VM_WRITE | VM_SHARED)) == VM_WRITE ? AccessType::kWrite : AccessType::kRead;
  for (uint64_t p = start; p < end; p += kPageSize) {
    if (p != start && StopAtTable(p - kPageSize, p)) return EINTR;  // fatal_signal_pending
    RcuQuiescentState();  // cond_resched() in __get_user_pages
    const FaultResult r = FaultInPage(m, p, a);
    if (r.outcome == FaultOutcome::kOom) return ENOMEM;
    if (r.outcome == FaultOutcome::kInterrupted) return EINTR;
    if (r.failed()) return EFAULT;
  }
  return 0;
}

/// count_mm_mlocked_page_nr(): pages of [start, start + len) already in VM_LOCKED VMAs.
uint64_t CountMmMlockedPageNrLocked(MmStruct& m, uint64_t start, uint64_t len) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  const uint64_t end = ~0ull - len < start ? ~0ull : start + len;
  uint64_t count = 0;
  for (Vma* v = FindVmaLocked(m, start); v && v->vm_start < end; v = VmaNextLocked(m, v)) {
    if (!(v->vm_flags & VM_LOCKED)) continue;
    if (start > v->vm_start) count -= start - v->vm_start;
    if (end < v->vm_end) {
      count += end - v->vm_start;
      break;
    }
    count += v->vm_end - v->vm_start;
  }
  return count >> kPageShift;
}

/// mlock_fixup(): gives [start, end) of `vma` the flags `newflags` (merging or
/// splitting), accounts locked_vm. VM_SPECIAL / VM_DROPPABLE VMAs and VMAs that
/// already have the flags are left as they are. *out: the VMA that now covers the
/// range (or `vma`). Returns 0 or ENOMEM (a split refused).
int MlockFixupLocked(MmStruct& m, Vma* vma, uint64_t start, uint64_t end, uint64_t newflags, Vma** out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  const uint64_t oldflags = vma->vm_flags;
  *out = vma;
  if (newflags == oldflags || !VmaSupportsMlock(vma)) return 0;
  int err = 0;
  Vma* r = VmaModifyFlagsLocked(m, vma, start, end, newflags, &err);
  if (!r) return err;
  *out = r;
  const uint64_t pages = (end - start) >> kPageShift;
  uint64_t locked = m.locked_vm.load(std::memory_order_relaxed);
  if (!(newflags & VM_LOCKED)) locked -= pages;
  else if (!(oldflags & VM_LOCKED)) locked += pages;
  m.locked_vm.store(locked, std::memory_order_relaxed);
  VmaStartWriteLocked(m, r);
  r->vm_flags = newflags | (r->vm_flags & kVmSticky);  // vm_flags_reset (mlock_vma_pages_range)
  return 0;
}

/// apply_vma_lock_flags(): sets `flags` (0, VM_LOCKED, VM_LOCKED|VM_LOCKONFAULT) in
/// place of the lock bits of every VMA of [start, start + len). 0, EINVAL (wraps) or
/// ENOMEM (a hole; the VMAs before it keep their new flags).
int ApplyVmaLockFlagsLocked(MmStruct& m, uint64_t start, uint64_t len, uint64_t flags)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  const uint64_t end = start + len;
  if (end < start) return EINVAL;
  if (end == start) return 0;
  Vma* vma = FindVmaLocked(m, start);  // vma_iter_load(): the VMA holding start
  if (!vma || vma->vm_start > start) return ENOMEM;
  uint64_t nstart = start, tmp = vma->vm_start;
  while (vma && vma->vm_start < end) {
    if (vma->vm_start != tmp) return ENOMEM;
    const uint64_t newflags = (vma->vm_flags & ~VM_LOCKED_MASK) | flags;
    tmp = std::min(vma->vm_end, end);
    Vma* cur = nullptr;
    if (int e = MlockFixupLocked(m, vma, nstart, tmp, newflags, &cur)) return e;
    tmp = cur->vm_end;  // vma_iter_end()
    nstart = tmp;
    vma = VmaNextLocked(m, cur);
  }
  return tmp < end ? ENOMEM : 0;
}

/// apply_mlockall_flags(): def_flags for MCL_FUTURE, then every VMA's lock bits for
/// MCL_CURRENT (or cleared: munlockall). Errors of single VMAs are ignored.
void ApplyMlockallFlagsLocked(MmStruct& m, int flags) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  m.def_flags &= ~VM_LOCKED_MASK;
  if (flags & MCL_FUTURE) {
    m.def_flags |= VM_LOCKED;
    if (flags & MCL_ONFAULT) m.def_flags |= VM_LOCKONFAULT;
    if (!(flags & MCL_CURRENT)) return;
  }
  uint64_t to_add = 0;
  if (flags & MCL_CURRENT) {
    to_add |= VM_LOCKED;
    if (flags & MCL_ONFAULT) to_add |= VM_LOCKONFAULT;
  }
  for (Vma* v = FindVmaLocked(m, 0); v;) {
    Vma* cur = v;
    MlockFixupLocked(m, v, v->vm_start, v->vm_end, (v->vm_flags & ~VM_LOCKED_MASK) | to_add, &cur);
    v = VmaNextLocked(m, cur);
  }
}

}  // namespace

bool MlockFutureOk(const MmStruct& mm, uint64_t vm_flags, uint64_t bytes) {
  if (!(vm_flags & VM_LOCKED) || mm.cap_ipc_lock.load(std::memory_order_relaxed)) return true;
  const uint64_t locked = (bytes >> kPageShift) + mm.locked_vm.load(std::memory_order_relaxed);
  return locked <= LockLimitPages(mm);
}

int MmPopulate(MmStruct& m, uint64_t start, uint64_t len, bool ignore_errors) {
  const uint64_t end = start + len;
  uint64_t nstart = start;
  while (nstart < end) {
    uint64_t vs, ve, fl;
    {
      ReadGuard l(m.mmap_lock);
      Vma* v = FindVmaIntersectionLocked(m, nstart, end);
      if (!v) break;
      vs = v->vm_start;
      ve = v->vm_end;
      fl = v->vm_flags;
    }
    const uint64_t nend = std::min(end, ve);
    if (nstart < vs) nstart = vs;
    if (!(fl & (VM_IO | VM_PFNMAP))) {
      // The faults take their own locks: a VMA changed meanwhile is faulted as it is
      // then (Linux's GUP may drop mmap_lock between pages too).
      const int e = PopulateVmaPageRange(m, fl, nstart, nend);
      if (e && !ignore_errors) return e;
      if (e == EINTR) return e;
    }
    nstart = nend;
  }
  return 0;
}

SysResult AddressSpace::Mlock(uint64_t start, uint64_t len, int flags) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  // SYSCALL_DEFINE3(mlock2)
  if (flags & ~MLOCK_ONFAULT) return SysResult::Err(EINVAL);
  const uint64_t vm_flags = VM_LOCKED | ((flags & MLOCK_ONFAULT) ? uint64_t{VM_LOCKONFAULT} : 0);
  // do_mlock()
  if (!CanDoMlock(m)) return SysResult::Err(EPERM);
  len = PageAlign(len + (start & (kPageSize - 1)));
  start &= kPageMask;
  const uint64_t lock_limit = LockLimitPages(m);
  const int err = RetryAfterReclaim(m, [&] {  // a split the budget refused
    MmapWriteLock(m);
    uint64_t locked = (len >> kPageShift) + m.locked_vm.load(std::memory_order_relaxed);
    const bool cap = m.cap_ipc_lock.load(std::memory_order_relaxed);
    // Pages of the range already locked are not counted twice.
    if (locked > lock_limit && !cap) locked -= CountMmMlockedPageNrLocked(m, start, len);
    const int e = locked <= lock_limit || cap ? ApplyVmaLockFlagsLocked(m, start, len, vm_flags) : ENOMEM;
    MmapWriteUnlock(m);
    return e;
  });
  if (err) return SysResult::Err(err);
  // __mlock_posix_error_return(): EFAULT is ENOMEM, ENOMEM is EAGAIN.
  switch (MmPopulate(m, start, len, /*ignore_errors=*/false)) {
    case 0: return SysResult::Ok();
    case EFAULT: return SysResult::Err(ENOMEM);
    case ENOMEM: return SysResult::Err(EAGAIN);
    default: return SysResult::Err(EINTR);
  }
}

SysResult AddressSpace::Munlock(uint64_t start, uint64_t len) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  len = PageAlign(len + (start & (kPageSize - 1)));
  start &= kPageMask;
  const int err = RetryAfterReclaim(m, [&] {
    MmapWriteLock(m);
    const int e = ApplyVmaLockFlagsLocked(m, start, len, 0);
    MmapWriteUnlock(m);
    return e;
  });
  return err ? SysResult::Err(err) : SysResult::Ok();
}

SysResult AddressSpace::Mlockall(int flags) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  if (!flags || (flags & ~(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)) || flags == MCL_ONFAULT)
    return SysResult::Err(EINVAL);
  if (!CanDoMlock(m)) return SysResult::Err(EPERM);
  const uint64_t lock_limit = LockLimitPages(m);
  int err = ENOMEM;
  MmapWriteLock(m);
  if (!(flags & MCL_CURRENT) || m.total_vm.load(std::memory_order_relaxed) <= lock_limit ||
      m.cap_ipc_lock.load(std::memory_order_relaxed)) {
    ApplyMlockallFlagsLocked(m, flags);
    err = 0;
  }
  MmapWriteUnlock(m);
  if (!err && (flags & MCL_CURRENT)) MmPopulate(m, 0, kTaskSize, /*ignore_errors=*/true);  // mm_populate
  return err ? SysResult::Err(err) : SysResult::Ok();
}

SysResult AddressSpace::Munlockall() {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  MmapWriteLock(m);
  ApplyMlockallFlagsLocked(m, 0);
  MmapWriteUnlock(m);
  return SysResult::Ok();
}

void AddressSpace::SetRlimitMemlock(uint64_t bytes) { mm_->rlimit_memlock.store(bytes, std::memory_order_relaxed); }

void AddressSpace::SetCapIpcLock(bool cap) { mm_->cap_ipc_lock.store(cap, std::memory_order_relaxed); }

}  // namespace vmspace
