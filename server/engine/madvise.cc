// SPDX-License-Identifier: Apache-2.0
// madvise(2), MADV_DONTNEED (mm/madvise.c madvise_dontneed_single_vma -> zap_page_range_single;
// Linux 6.18).
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "engine/stats.h"
#include "memory.h"
#include "mm.h"
#include "mmu_gather.h"
#include "vma.h"

namespace vmspace {

SysResult AddressSpace::Madvise(uint64_t start, uint64_t len_in, int advice) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  // do_madvise (mm/madvise.c)
  auto done = [](int e) {
    CountOp(OpType::kMadvise, e);
    return e ? SysResult::Err(e) : SysResult::Ok();
  };
  if (start & (kPageSize - 1)) return done(EINVAL);
  if (advice != MADV_DONTNEED) return done(EINVAL);
  uint64_t len = PageAlign(len_in);
  if (len_in && !len) return done(EINVAL);
  uint64_t end = start + len;
  if (end < start) return done(EINVAL);
  if (end == start) return done(0);
  int err = 0;
  auto* g = new MmuGather;
  uint64_t pos = start;
  m.mmap_lock.LockRead();
  for (Vma* v = FindVmaLocked(m, start); v && v->vm_start < end; v = VmaNextLocked(m, v)) {
    if (v->vm_start > pos) err = ENOMEM;  // a hole: remember, go on
    if (!CanMadviseModify(v, advice)) {  // madvise_vma_behavior(): mseal
      err = EPERM;
      break;
    }
    if (v->vm_flags & (VM_LOCKED | VM_PFNMAP)) {
      err = EINVAL;
      break;
    }
    uint64_t s = std::max(v->vm_start, start), e = std::min(v->vm_end, end);
    ZapRangeLocked(m, v, s, e, g->pages);
    pos = v->vm_end;
  }
  if (!err && pos < end) err = ENOMEM;
  m.mmap_lock.UnlockRead();
  FreeZappedPagesIfUnused(m, g->pages);
  MmuGather::Queue(g, m.frames, m.stats_slot);  // else lockless accessors may still touch the frames
  return done(err);
}

}  // namespace vmspace
