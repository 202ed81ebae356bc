// SPDX-License-Identifier: Apache-2.0
// mprotect(2) (mm/mprotect.c do_mprotect_pkey, mprotect_fixup, change_protection;
// Linux 6.18).
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "engine/stats.h"
#include "filemap.h"
#include "mm.h"
#include "mmap.h"
#include "mlock.h"
#include "mmap_lock.h"
#include "mprotect.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

void ChangeProtectionLocked(MmStruct& mm, Vma* v, uint64_t start, uint64_t end) {
  VmaAssertWriteLocked(mm, v);
  void* zero = FrameAllocator::ZeroPage();
  mm.pt.ForEachTable(start, end, [&](PageTable::PteTable& t, int i0, int i1, uint64_t) {
    SpinGuard l(t.ptl);  // change_pte_range: the table's PTE lock for the whole run
    for (int i = i0; i < i1; i++) {
      const uint64_t cur = t.Get(i);
      if (!(cur & kPtePresent)) continue;
      void* f = PteFrame(cur);
      // Page-cache pages stay read-only in private VMAs (COW) and in shared ones until
      // a write fault dirties them (writenotify), except shmem (no dirty tracking).
      const bool file = cur & kPteFile;
      const bool ro = file ? !((v->vm_flags & VM_SHARED) && (v->file()->shmem() || (cur & kPteWrite)))
                           : f == zero || ((cur & kPteSharedAnon) && !(cur & kPteWrite));  // COW stays
      // MADV_FREE's lazyfree state belongs to the folio (clean + lazyfree): it stays.
      t.Set(i, MakePte(f, PteBitsFor(*v, ro) | (cur & (kPteFile | kPteSharedAnon | kPteLazyFree))));
    }
  });
}

namespace {

// do_mprotect_pkey's part under mmap_lock (held for write by the caller): 0 or an errno.
// `populate` gets the ranges of private VM_LOCKED VMAs made writable, which
// mprotect_fixup populates (populate_vma_page_range: COW broken while locked); the
// engine faults them in after mmap_lock is dropped (its faults take their own locks).
int MprotectLocked(MmStruct& m, uint64_t start, uint64_t end, int prot, int grows,
                   std::vector<std::pair<uint64_t, uint64_t>>* populate) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  Vma* vma = FindVmaIntersectionLocked(m, start, end);
  if (!vma) return ENOMEM;
  if (grows & PROT_GROWSDOWN) {
    if (vma->vm_start >= end) return ENOMEM;
    start = vma->vm_start;
    if (!(vma->vm_flags & VM_GROWSDOWN)) return EINVAL;
  } else {
    if (vma->vm_start > start) return ENOMEM;
    if (grows & PROT_GROWSUP) return EINVAL;  // no VM_GROWSUP on x86
  }
  uint64_t nstart = start;
  uint64_t tmp = vma->vm_start;
  int error = 0;
  while (vma && vma->vm_start < end) {
    if (vma->vm_start != tmp) {
      error = ENOMEM;
      break;
    }
    uint64_t newflags = CalcVmProtBits(prot) | (vma->vm_flags & ~VM_ACCESS_FLAGS);
    if ((newflags & ~(newflags >> 4)) & VM_ACCESS_FLAGS) {  // VM_MAY% shifted onto VM_%
      error = EACCES;
      break;
    }
    tmp = std::min(vma->vm_end, end);
    // mprotect_fixup
    if (!CanModifyVma(vma)) {
      error = EPERM;
      break;
    }
    uint64_t oldflags = vma->vm_flags;
    uint64_t nrpages = (tmp - nstart) >> kPageShift;
    Vma* cur = vma;
    if (newflags != oldflags) {
      if (newflags & VM_WRITE) {
        if (!(oldflags & (VM_ACCOUNT | VM_WRITE | VM_SHARED | VM_NORESERVE))) {
          if (nrpages > m.commit_limit_pages) {
            error = ENOMEM;
            break;
          }
          newflags |= VM_ACCOUNT;
        }
      } else if ((oldflags & VM_ACCOUNT) && vma->is_anonymous() && !vma->anon()) {
        newflags &= ~VM_ACCOUNT;
      }
      int e = 0;
      Vma* r = VmaModifyFlagsLocked(m, vma, nstart, tmp, newflags, &e);
      if (!r) {
        error = e;
        break;
      }
      VmaStartWriteLocked(m, r);
      r->vm_flags = newflags | (r->vm_flags & kVmSticky);  // vm_flags_reset; sticky flags stay
      ChangeProtectionLocked(m, r, nstart, tmp);
      if ((oldflags & (VM_WRITE | VM_SHARED | VM_LOCKED)) == VM_LOCKED && (newflags & VM_WRITE)) {
        // populate_vma_page_range runs here in the kernel, before the next VMA's
        // mprotect_fixup: its write faults have prepared this VMA's anon_vma when the
        // next piece tries to merge into it (VM_LOCKONFAULT faults nothing in).
        if (!(r->vm_flags & VM_LOCKONFAULT)) AnonVmaPrepareLocked(m, r);
        populate->emplace_back(nstart, tmp);
      }
      cur = r;
    }
    tmp = cur->vm_end;  // vma_iter_end(): the end of the VMA just handled
    nstart = tmp;
    vma = VmaNextLocked(m, cur);
  }
  if (!error && tmp < end) error = ENOMEM;
  return error;
}

}  // namespace

SysResult AddressSpace::Mprotect(uint64_t start, uint64_t len, int prot) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  auto done = [](int e) {
    CountOp(OpType::kMprotect, e);
    return e ? SysResult::Err(e) : SysResult::Ok();
  };
  // do_mprotect_pkey (mm/mprotect.c)
  const int grows = prot & (PROT_GROWSDOWN | PROT_GROWSUP);
  prot &= ~(PROT_GROWSDOWN | PROT_GROWSUP);
  if (grows == (PROT_GROWSDOWN | PROT_GROWSUP)) return done(EINVAL);
  if (start & (kPageSize - 1)) return done(EINVAL);
  if (!len) return done(0);
  len = PageAlign(len);
  uint64_t end = start + len;
  if (len == 0 || end <= start) return done(ENOMEM);
  if (prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | PROT_SEM)) return done(EINVAL);

  std::vector<std::pair<uint64_t, uint64_t>> populate;
  const int error = RetryAfterReclaim(m, [&] {  // a split the budget refused
    populate.clear();
    MmapWriteLock(m);
    const int e = MprotectLocked(m, start, end, prot, grows, &populate);
    MmapWriteUnlock(m);
    return e;
  });
  for (const auto& [s, e] : populate) MmPopulate(m, s, e - s, /*ignore_errors=*/true);
  return done(error);
}

}  // namespace vmspace
