// SPDX-License-Identifier: Apache-2.0
// mincore(2) (mm/mincore.c, Linux 6.18): the residency of each page of a range.
#include <algorithm>
#include <cerrno>

#include "filemap.h"
#include "mm.h"
#include "vma.h"

namespace vmspace {

namespace {

/// mincore_page(): 1 if the file's page `index` is in the page cache and uptodate.
uint8_t MincorePage(File* f, uint64_t index) {
  RcuReadGuard g;
  const Folio* fo = f->pages.Load(index);
  return fo && fo->uptodate.load(std::memory_order_acquire) ? 1 : 0;
}

}  // namespace

SysResult AddressSpace::Mincore(uint64_t start, uint64_t len, std::vector<uint8_t>* vec) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  vec->clear();
  if (start & (kPageSize - 1)) return SysResult::Err(EINVAL);
  // access_ok(start, len): the range must lie in user space.
  if (start + len < start || start + len > kTaskSize) return SysResult::Err(ENOMEM);
  const uint64_t pages = (len >> kPageShift) + ((len & (kPageSize - 1)) != 0);
  vec->reserve(pages);
  uint64_t a = start;
  const uint64_t end = start + pages * kPageSize;
  m.mmap_lock.LockRead();
  int err = 0;
  while (a < end) {
    // do_mincore(): vma_lookup; the kernel copies each VMA's part out before the next.
    Vma* v = FindVmaLocked(m, a);
    if (!v || v->vm_start > a) {
      err = ENOMEM;
      break;
    }
    const uint64_t vend = std::min(v->vm_end, end);
    File* f = v->file();
    for (; a < vend; a += kPageSize) {  // mincore_pte_range
      PageTable::PteTable* t = m.pt.Lookup(a, false);
      const uint64_t pte = t ? t->Get(PageTable::PteIndex(a)) : 0;
      if (pte & kPtePresent) vec->push_back(1);  // the zero page included
      else if (f) vec->push_back(MincorePage(f, v->vm_pgoff + ((a - v->vm_start) >> kPageShift)));
      else vec->push_back(0);  // pte_none or a guard marker: no page
    }
  }
  m.mmap_lock.UnlockRead();
  return err ? SysResult::Err(err) : SysResult::Ok();
}

}  // namespace vmspace
