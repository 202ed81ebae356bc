// SPDX-License-Identifier: Apache-2.0
// anon_vma: the object private anonymous pages belong to (mm/rmap.c, Linux 6.18). Only
// its identity matters here (merging); there is no fork, so every chain is singular.
// Also page_mkclean_one for file pages (the file rmap walk itself is in filemap.cc).
#include <atomic>

#include "mm.h"
#include "rmap.h"
#include "vma.h"

namespace vmspace {

namespace {

/// anon_vma_compatible(): a and b adjacent and mergeable but for access flags.
bool AnonVmaCompatible(const Vma* a, const Vma* b) {
  return a->vm_end == b->vm_start && a->vm_file == b->vm_file &&
         !((a->vm_flags ^ b->vm_flags) & ~VM_ACCESS_FLAGS) &&
         b->vm_pgoff == a->vm_pgoff + ((b->vm_start - a->vm_start) >> kPageShift);
}
}  // namespace

AnonVma* FindMergeableAnonVmaLocked(MmStruct& mm, Vma* v) {
  Vma* next = VmaNextFromLocked(mm, v->vm_end);
  if (next && next->vm_start == v->vm_end && AnonVmaCompatible(v, next) && next->anon())
    return next->anon();
  Vma* prev = VmaPrevLocked(mm, v->vm_start);
  if (prev && AnonVmaCompatible(prev, v) && prev->anon()) return prev->anon();
  return nullptr;
}

void PageMkcleanOne(MmStruct& mm, Vma* v, uint64_t addr) {
  PageTable::PteTable* t = mm.pt.Lookup(addr, false);
  if (!t) return;
  const int i = PageTable::PteIndex(addr);
  SpinGuard l(t->ptl);
  const uint64_t pte = t->Get(i);
  if ((pte & kPtePresent) && (pte & kPteFile) && (pte & kPteWrite)) t->Set(i, pte & ~kPteWrite);
  (void)v;
}

void AnonVmaPrepareLocked(MmStruct& mm, Vma* v) {
  if (v->anon()) return;
  MutexLock l(mm.anon_vma_lock);
  if (v->anon()) return;
  if (AnonVma* a = FindMergeableAnonVmaLocked(mm, v)) {
    v->anon_vma.store(GetAnonVma(a), std::memory_order_release);
  } else {
    a = new AnonVma{mm.next_anon_vma_id++};
    v->anon_vma.store(a, std::memory_order_release);  // takes the initial reference
  }
}

}  // namespace vmspace
