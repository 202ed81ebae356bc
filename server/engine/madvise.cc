// SPDX-License-Identifier: Apache-2.0
// madvise(2) (mm/madvise.c, Linux 6.18): madvise_behavior_valid and the range checks
// of do_madvise (madvise_should_skip), then madvise_walk_vmas over the VMAs of the
// range with madvise_vma_behavior's per-VMA checks, or madvise_populate; and the
// lazyfree reclaim of MADV_FREE pages (mm/vmscan.c shrink_folio_list).
#include "madvise.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "engine/stats.h"
#include "filemap.h"
#include "memory.h"
#include "mm.h"
#include "mmap_lock.h"
#include "mmu_gather.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

namespace {

/// madvise_behavior_valid() for this machine's kernel configuration: CONFIG_KSM and
/// CONFIG_TRANSPARENT_HUGEPAGE on (MERGEABLE/UNMERGEABLE, HUGEPAGE/NOHUGEPAGE,
/// COLLAPSE accepted), CONFIG_MEMORY_FAILURE off (HWPOISON and SOFT_OFFLINE EINVAL,
/// whatever the caller's capabilities).
bool MadviseBehaviorValid(int b) {
  switch (b) {
    case MADV_DOFORK: case MADV_DONTFORK: case MADV_NORMAL: case MADV_SEQUENTIAL:
    case MADV_RANDOM: case MADV_REMOVE: case MADV_WILLNEED: case MADV_DONTNEED:
    case MADV_DONTNEED_LOCKED: case MADV_FREE: case MADV_COLD: case MADV_PAGEOUT:
    case MADV_POPULATE_READ: case MADV_POPULATE_WRITE: case MADV_MERGEABLE:
    case MADV_UNMERGEABLE: case MADV_HUGEPAGE: case MADV_NOHUGEPAGE: case MADV_COLLAPSE:
    case MADV_DONTDUMP: case MADV_DODUMP: case MADV_WIPEONFORK: case MADV_KEEPONFORK:
    case MADV_GUARD_INSTALL: case MADV_GUARD_REMOVE:
      return true;
    default:
      return false;
  }
}

/// madvise_need_mmap_write(): the advices that change vm_flags take mmap_lock for
/// write. The guard advices do too here (Linux: read, racing faults by pte_same; the
/// engine's faults re-check only "not present" before installing).
bool NeedMmapWrite(int b) {
  switch (b) {
    case MADV_REMOVE: case MADV_WILLNEED: case MADV_DONTNEED: case MADV_DONTNEED_LOCKED:
    case MADV_COLD: case MADV_PAGEOUT: case MADV_FREE: case MADV_POPULATE_READ:
    case MADV_POPULATE_WRITE: case MADV_COLLAPSE:
      return false;
    default:
      return true;
  }
}

/// What a walk leaves for after mmap_lock is dropped (the advices that drop it in
/// Linux: REMOVE's vfs_fallocate, WILLNEED's vfs_fadvise; COLLAPSE's faults here).
struct Deferred {
  enum Kind { kPunch, kReadahead, kCollapse } kind;
  std::shared_ptr<OpenFile> file;
  uint64_t first = 0, last = 0;  // pages of the file (kPunch, kReadahead)
  uint64_t start = 0, end = 0;   // addresses (kCollapse)
  bool write = false;
};

/// A walk over [start, end) with the lock held; the per-VMA visit of one advice.
struct Walk {
  MmStruct& m;
  int advice;
  MmuGather* g;
  std::vector<Deferred> deferred;
};

/// can_madv_lru_vma(): COLD and PAGEOUT refuse locked and special VMAs.
bool CanMadvLru(const Vma* v) { return !(v->vm_flags & (VM_LOCKED | VM_PFNMAP | VM_HUGETLB)); }

/// madvise_free_pte_range(): marks the private anonymous frames of [s, e) lazily
/// freeable: not the zero page, and not a frame fork shares that another PTE still
/// maps (folio_maybe_mapped_shared: the other mapping may hold data written since).
void MadviseFreeRange(MmStruct& m, uint64_t s, uint64_t e) {
  void* zero = FrameAllocator::ZeroPage();
  m.pt.ForEachTable(s, e, [&](PageTable::PteTable& t, int i0, int i1, uint64_t) {
    SpinGuard l(t.ptl);
    for (int i = i0; i < i1; i++) {
      const uint64_t v = t.Get(i);
      if (!(v & kPtePresent) || (v & kPteFile) || PteFrame(v) == zero) continue;
      if ((v & kPteSharedAnon) && PageMapcount(PteFrame(v)) != 1) continue;
      t.Set(i, v | kPteLazyFree);
    }
  });
}

/// Whether page `index` of f (its frame `frame`) is mapped by a PTE other than the
/// one at `addr` of `self`: folio_mapcount() > 1, found through i_mmap (every space's
/// VMAs of the file) as folio_mapped() is in EvictCleanFolio.
bool MappedElsewhere(File* f, uint64_t index, void* frame, const Vma* self, uint64_t addr) {
  ReadGuard l(f->i_mmap_rwsem);
  for (const auto& [pgoff, v] : f->i_mmap) {
    if (pgoff > index) break;
    if (pgoff + v->pages() <= index) continue;
    const uint64_t a = v->vm_start + ((index - pgoff) << kPageShift);
    if (v == self && a == addr) continue;
    PageTable::PteTable* t = v->vm_mm->pt.Lookup(a, false);
    const uint64_t pte = t ? t->Get(PageTable::PteIndex(a)) : 0;
    if ((pte & kPtePresent) && PteFrame(pte) == frame) return true;
  }
  return false;
}

/// madvise_pageout() of a file VMA's range (madvise_cold_or_pageout_pte_range, then
/// reclaim_pages -> shrink_folio_list): a page-cache page mapped only here is
/// unmapped, and if clean and of a host file leaves the page cache (dirty ones wait
/// for writeback: only kswapd writes file pages; shmem has no swap to go to). A page
/// that another PTE also maps (another VMA, another space: folio_mapcount() != 1) is
/// left mapped and cached. Anonymous pages stay (no swap).
void PageoutFileRange(MmStruct& m, Vma* v, uint64_t s, uint64_t e) {
  struct Candidate {
    uint64_t addr, index;
    void* frame;
  };
  std::vector<Candidate> found;
  m.pt.ForEachTable(s, e, [&](PageTable::PteTable& t, int i0, int i1, uint64_t a0) {
    SpinGuard l(t.ptl);
    for (int i = i0; i < i1; i++) {
      const uint64_t pte = t.Get(i);
      if (!(pte & kPtePresent) || !(pte & kPteFile)) continue;
      const uint64_t a = a0 + static_cast<uint64_t>(i - i0) * kPageSize;
      found.push_back({a, v->vm_pgoff + ((a - v->vm_start) >> kPageShift), PteFrame(pte)});
    }
  });
  File* f = v->file();
  std::vector<uint64_t> indexes;
  int64_t n = 0;
  for (const Candidate& c : found) {
    if (MappedElsewhere(f, c.index, c.frame, v, c.addr)) continue;
    PageTable::PteTable* t = m.pt.Lookup(c.addr, false);
    if (!t) continue;
    SpinGuard l(t->ptl);
    const int i = PageTable::PteIndex(c.addr);
    const uint64_t pte = t->Get(i);
    if (!(pte & kPtePresent) || !(pte & kPteFile) || PteFrame(pte) != c.frame) continue;
    t->Clear(i);  // a page-cache page: no frame to free
    n++;
    indexes.push_back(c.index);
  }
  if (n) m.AddRss(f->shmem() ? MM_SHMEMPAGES : MM_FILEPAGES, -n);
  if (f->shmem()) return;
  for (uint64_t index : indexes) f->EvictCleanFolio(index);
}

/// madvise_guard_install() on [s, e) of v: zaps what is mapped there (the markers
/// already there stay) and puts a guard marker in every PTE. ENOMEM if a page table
/// cannot be allocated. mmap_lock and v held for write.
int GuardInstall(Walk& w, Vma* v, uint64_t s, uint64_t e) {
  ZapPteRange(w.m, v, s, e, w.g->pages);
  for (uint64_t a = s; a < e;) {
    PageTable::PteTable* t = w.m.pt.Lookup(a, true);
    if (!t) return ENOMEM;
    const uint64_t te = std::min(e, (a & ~(kPmdSize - 1)) + kPmdSize);
    SpinGuard l(t->ptl);
    for (; a < te; a += kPageSize) {
      const int i = PageTable::PteIndex(a);
      if (t->Get(i) == 0) t->Set(i, kPteGuardMarker);
    }
  }
  return 0;
}

/// madvise_guard_remove(): clears the guard markers of [s, e).
void GuardRemove(MmStruct& m, uint64_t s, uint64_t e) { ZapGuardMarkers(m, s, e); }

/// madvise_collapse()'s checks for [s, e) of v (mm/khugepaged.c): the VMA must hold a
/// PMD-aligned 2 MiB range that THP may use (anonymous here, not VM_NOHUGEPAGE), else
/// EINVAL; each whole 2 MiB block of the range must have a page mapped (SCAN_PMD_NULL /
/// SCAN_PMD_NONE: EINVAL); the blocks are then filled (the huge page, as faults of
/// every page: the engine maps 4 KiB pages only).
int CollapseCheck(Walk& w, Vma* v, uint64_t s, uint64_t e) {
  const uint64_t vs = (v->vm_start + kPmdSize - 1) & ~(kPmdSize - 1);
  if (!v->is_anonymous() || (v->vm_flags & (VM_NOHUGEPAGE | VM_SPECIAL)) || vs + kPmdSize > v->vm_end) return EINVAL;
  const uint64_t hs = (s + kPmdSize - 1) & ~(kPmdSize - 1), he = e & ~(kPmdSize - 1);
  void* zero = FrameAllocator::ZeroPage();
  for (uint64_t b = hs; b < he; b += kPmdSize) {
    bool any = false;
    w.m.pt.ForEachPresent(b, b + kPmdSize, [&](uint64_t, uint64_t pte) { any |= PteFrame(pte) != zero; });
    if (!any) return EINVAL;
  }
  if (hs < he) w.deferred.push_back({Deferred::kCollapse, nullptr, 0, 0, hs, he, (v->vm_flags & VM_WRITE) != 0});
  return 0;
}

/// madvise_vma_behavior(): the advice on [s, e), inside v. *vp is set to the VMA that
/// covers [s, e) afterwards (a flags change may split or merge).
int VisitVma(Walk& w, Vma** vp, uint64_t s, uint64_t e) ABSL_SHARED_LOCKS_REQUIRED(w.m.mmap_lock) {
  MmStruct& m = w.m;
  Vma* v = *vp;
  uint64_t nf = v->vm_flags;
  switch (w.advice) {
    case MADV_REMOVE: {  // madvise_remove
      if (v->vm_flags & VM_LOCKED) return EINVAL;
      if (!v->vm_file) return EINVAL;
      if ((v->vm_flags & (VM_SHARED | VM_MAYWRITE)) != (VM_SHARED | VM_MAYWRITE)) return EACCES;
      // vfs_fallocate -> shmem_fallocate: a hole punch in a memfd with a write seal is
      // EPERM, which ends the walk (the punches of the VMAs before it are done).
      if (v->file()->shmem() && (v->file()->seals.load(std::memory_order_acquire) & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
        return EPERM;
      const uint64_t first = v->vm_pgoff + ((s - v->vm_start) >> kPageShift);
      w.deferred.push_back({Deferred::kPunch, v->vm_file, first, first + ((e - s) >> kPageShift) - 1});
      return 0;
    }
    case MADV_WILLNEED: {  // madvise_willneed (CONFIG_SWAP: nothing to swap in)
      if (!v->vm_file || v->file()->shmem()) return 0;
      const uint64_t first = v->vm_pgoff + ((s - v->vm_start) >> kPageShift);
      w.deferred.push_back({Deferred::kReadahead, v->vm_file, first, first + ((e - s) >> kPageShift) - 1});
      return 0;
    }
    case MADV_COLD:  // madvise_cold: deactivation only (no LRU here)
      return CanMadvLru(v) ? 0 : EINVAL;
    case MADV_PAGEOUT:
      if (!CanMadvLru(v)) return EINVAL;
      if (v->vm_file) PageoutFileRange(m, v, s, e);
      return 0;
    case MADV_DONTNEED: case MADV_DONTNEED_LOCKED: case MADV_FREE: {  // madvise_dontneed_free
      uint64_t forbidden = VM_PFNMAP;
      if (w.advice != MADV_DONTNEED_LOCKED) forbidden |= VM_LOCKED;
      if (v->vm_flags & forbidden) return EINVAL;
      if (w.advice == MADV_FREE) {
        if (!v->is_anonymous()) return EINVAL;  // madvise_free_single_vma: anonymous only
        MadviseFreeRange(m, s, e);
      } else {
        ZapPteRange(m, v, s, e, w.g->pages);  // zap_page_range_single: guard markers stay
      }
      return 0;
    }
    case MADV_COLLAPSE:
      return CollapseCheck(w, v, s, e);
    case MADV_GUARD_INSTALL:  // is_valid_guard_vma(allow_locked = false)
      if (v->vm_flags & (VM_SPECIAL | VM_HUGETLB | VM_LOCKED)) return EINVAL;
      m.mmap_lock.AssertWriteHeld();  // NeedMmapWrite: the guard advices take it for write
      VmaStartWriteLocked(m, v);  // no fault runs in v meanwhile
      v->vm_flags |= VM_MAYBE_GUARD;  // the whole VMA, no split (vma_flag_set_atomic)
      // An anonymous VMA that gets page-table entries ought to have an anon_vma (fork
      // copies its tables only then): anon_vma_prepare(), as 6.18 does here.
      if (v->is_anonymous()) AnonVmaPrepareLocked(m, v);
      return GuardInstall(w, v, s, e);
    case MADV_GUARD_REMOVE:  // is_valid_guard_vma(allow_locked = true)
      if (v->vm_flags & (VM_SPECIAL | VM_HUGETLB)) return EINVAL;
      GuardRemove(m, s, e);
      return 0;
    // The advices below update vm_flags through madvise_update_vma().
    case MADV_NORMAL: nf &= ~(VM_RAND_READ | VM_SEQ_READ); break;
    case MADV_SEQUENTIAL: nf = (nf & ~VM_RAND_READ) | VM_SEQ_READ; break;
    case MADV_RANDOM: nf = (nf & ~VM_SEQ_READ) | VM_RAND_READ; break;
    case MADV_DONTFORK: nf |= VM_DONTCOPY; break;
    case MADV_DOFORK:
      if (nf & VM_IO) return EINVAL;
      nf &= ~VM_DONTCOPY;
      break;
    case MADV_WIPEONFORK:  // anonymous memory only
      if (v->vm_file || (nf & VM_SHARED)) return EINVAL;
      nf |= VM_WIPEONFORK;
      break;
    case MADV_KEEPONFORK:
      if (nf & VM_DROPPABLE) return EINVAL;
      nf &= ~VM_WIPEONFORK;
      break;
    case MADV_DONTDUMP: nf |= VM_DONTDUMP; break;
    case MADV_DODUMP:
      if ((nf & VM_SPECIAL) || (nf & VM_DROPPABLE)) return EINVAL;
      nf &= ~VM_DONTDUMP;
      break;
    case MADV_MERGEABLE:  // ksm_madvise: only on vma_ksm_compatible VMAs, else ignored
      if (!(nf & (VM_SHARED | VM_MAYSHARE | VM_PFNMAP | VM_IO | VM_DONTEXPAND | VM_HUGETLB | VM_MIXEDMAP |
                  VM_DROPPABLE)))
        nf |= VM_MERGEABLE;
      break;
    case MADV_UNMERGEABLE: nf &= ~VM_MERGEABLE; break;
    case MADV_HUGEPAGE: nf = (nf & ~VM_NOHUGEPAGE) | VM_HUGEPAGE; break;  // hugepage_madvise
    case MADV_NOHUGEPAGE: nf = (nf & ~VM_HUGEPAGE) | VM_NOHUGEPAGE; break;
    default: return EINVAL;
  }
  if (nf == v->vm_flags) return 0;
  m.mmap_lock.AssertWriteHeld();  // NeedMmapWrite: the flag advices take it for write
  int err = 0;
  Vma* r = VmaModifyFlagsLocked(m, v, s, e, nf, &err);
  // "madvise() returns EAGAIN if kernel resources, such as slab, are temporarily
  // unavailable": a split refused at max_map_count.
  if (!r) return err == ENOMEM ? EAGAIN : err;
  VmaStartWriteLocked(m, r);
  r->vm_flags = nf | (r->vm_flags & kVmSticky);  // vm_flags_reset; sticky flags stay
  *vp = r;
  return 0;
}

/// madvise_walk_vmas(): visits each VMA part of [start, end); a hole makes the answer
/// ENOMEM (unmapped_error) but the walk goes on; the first VMA error ends it.
int WalkVmas(Walk& w, uint64_t start, uint64_t end) ABSL_SHARED_LOCKS_REQUIRED(w.m.mmap_lock) {
  int unmapped_error = 0;
  uint64_t pos = start;
  Vma* v = FindVmaLocked(w.m, start);
  for (;;) {
    if (!v) return ENOMEM;
    if (pos < v->vm_start) {
      unmapped_error = ENOMEM;
      pos = v->vm_start;
      if (pos >= end) break;
    }
    uint64_t rend = std::min(v->vm_end, end);
    if (!CanMadviseModify(v, w.advice)) return EPERM;  // madvise_vma_behavior(): mseal
    if (int e = VisitVma(w, &v, pos, rend)) return e;
    if (v && rend < v->vm_end) rend = v->vm_end;
    if (rend >= end) break;
    v = FindVmaLocked(w.m, rend);
    pos = rend;
  }
  return unmapped_error;
}

/// madvise_populate() -> faultin_page_range() (mm/gup.c with FOLL_MADV_POPULATE): for
/// each VMA, check_vma_flags (EINVAL: VM_IO/VM_PFNMAP, a write to a VMA without
/// VM_WRITE, a read of one without VM_READ), then each page faulted in as an access
/// would; no VMA: ENOMEM; SIGSEGV/SIGBUS: EFAULT; OOM: ENOMEM. Pages before the
/// failure stay populated. No lock held.
int MadvisePopulate(MmStruct& m, uint64_t start, uint64_t end, bool write) {
  uint64_t a = start;
  while (a < end) {
    uint64_t vend;
    m.mmap_lock.LockRead();
    Vma* v = FindVmaLocked(m, a);
    int err = 0;
    if (!v || v->vm_start > a) err = ENOMEM;
    else if ((v->vm_flags & (VM_IO | VM_PFNMAP)) || (write && !(v->vm_flags & VM_WRITE)) ||
             (!write && !(v->vm_flags & VM_READ)))
      err = EINVAL;
    vend = v ? std::min(v->vm_end, end) : end;
    m.mmap_lock.UnlockRead();
    if (err) return err;
    for (; a < vend; a += kPageSize) {
      const FaultResult r = FaultInPage(m, a, write ? AccessType::kWrite : AccessType::kRead);
      switch (r.outcome) {
        case FaultOutcome::kSigsegv: case FaultOutcome::kSigbus: return EFAULT;
        case FaultOutcome::kOom: return ENOMEM;
        case FaultOutcome::kInterrupted: return EINTR;
        default: break;
      }
    }
  }
  return 0;
}

/// The work a walk deferred until mmap_lock was dropped. Returns the first error.
int RunDeferred(MmStruct& m, std::vector<Deferred>& ds) {
  int err = 0;
  for (Deferred& d : ds) {
    int e = 0;
    File* f = d.file ? d.file->file.get() : nullptr;
    switch (d.kind) {
      case Deferred::kPunch:  // vfs_fallocate(PUNCH_HOLE | KEEP_SIZE)
        e = f->PunchHole(d.first, d.last);
        break;
      case Deferred::kReadahead: {  // vfs_fadvise(POSIX_FADV_WILLNEED): below EOF
        const uint64_t last = std::min(d.last + 1, f->size_pages());
        for (uint64_t i = d.first; i < last; i++) {
          bool major = false;
          int rerr = 0;
          if (Folio* fo = f->GetLockedFolio(i, &major, &rerr)) fo->Unlock();
          else break;  // no frame or a read error: readahead is best effort
        }
        break;
      }
      case Deferred::kCollapse:
        for (uint64_t a = d.start; a < d.end && !e; a += kPageSize) {
          const FaultResult r = FaultInPage(m, a, d.write ? AccessType::kWrite : AccessType::kRead);
          if (r.outcome == FaultOutcome::kOom) e = ENOMEM;
          else if (r.failed()) e = EINVAL;
        }
        break;
    }
    if (e && !err) err = e;
  }
  return err;
}

}  // namespace

uint64_t ShrinkLazyFree(MmStruct& m) {
  auto* g = new MmuGather;
  uint64_t freed = 0;
  m.mmap_lock.LockRead();
  for (Vma* v = FindVmaLocked(m, 0); v; v = VmaNextLocked(m, v)) {
    if (!v->is_anonymous()) continue;
    m.pt.ForEachTable(v->vm_start, v->vm_end, [&](PageTable::PteTable& t, int i0, int i1, uint64_t) {
      int64_t n = 0;
      {
        SpinGuard l(t.ptl);
        for (int i = i0; i < i1; i++) {
          uint64_t pte = t.Get(i);
          if (!(pte & kPtePresent) || !(pte & kPteLazyFree)) continue;
          // Still clean: drop it, unless a store sets the dirty bit first (AccessPage).
          if (!t.pte[i].compare_exchange_strong(pte, 0, std::memory_order_seq_cst)) continue;
          // A frame fork shared (marked before the fork, both PTEs inherited the mark):
          // only this mapping goes; the last one frees it after a grace period (another
          // space's thread may be accessing it), as ZapPteRange.
          if (!(pte & kPteSharedAnon)) g->pages.push_back(PteFrame(pte));
          else if (PageRemoveAnonRmap(PteFrame(pte))) FreeFrameAfterGracePeriod(m.frames, PteFrame(pte));
          n++;
        }
      }
      if (n) m.AddRss(MM_ANONPAGES, -n);
      freed += static_cast<uint64_t>(n);
    });
  }
  m.mmap_lock.UnlockRead();
  FreeZappedPagesIfUnused(m, g->pages);
  MmuGather::Queue(g, m.frames, m.stats_slot);  // lockless accessors may still touch the frames
  return freed;
}

uint64_t AddressSpace::ReclaimLazyFree() {
  SpaceEntry entry(*mm_);
  return ShrinkLazyFree(*mm_);
}

SysResult AddressSpace::Madvise(uint64_t start, uint64_t len_in, int advice) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  auto done = [](int e) {
    CountOp(OpType::kMadvise, e);
    return e ? SysResult::Err(e) : SysResult::Ok();
  };
  // do_madvise -> madvise_should_skip
  if (!MadviseBehaviorValid(advice)) return done(EINVAL);
  if (start & (kPageSize - 1)) return done(EINVAL);
  const uint64_t len = PageAlign(len_in);
  if (len_in && !len) return done(EINVAL);
  const uint64_t end = start + len;
  if (end < start) return done(EINVAL);
  if (end == start) return done(0);
  if (advice == MADV_POPULATE_READ || advice == MADV_POPULATE_WRITE)
    return done(MadvisePopulate(m, start, end, advice == MADV_POPULATE_WRITE));

  Walk w{m, advice, new MmuGather, {}};
  int err;
  if (NeedMmapWrite(advice)) {
    err = RetryAfterReclaim(m, [&] {  // a split the budget refused
      w.deferred.clear();
      MmapWriteLock(m);
      w.m.mmap_lock.AssertHeld();  // w.m is m (the analysis does not see the alias)
      const int e = WalkVmas(w, start, end);
      MmapWriteUnlock(m);
      return e;
    });
  } else {
    m.mmap_lock.LockRead();
    w.m.mmap_lock.AssertHeld();  // w.m is m (the analysis does not see the alias)
    err = WalkVmas(w, start, end);
    m.mmap_lock.UnlockRead();
  }
  FreeZappedPagesIfUnused(m, w.g->pages);
  MmuGather::Queue(w.g, m.frames, m.stats_slot);  // else lockless accessors may still touch the frames
  // The advices that drop mmap_lock in Linux did their part under it; a failure there
  // is the answer unless the walk failed first.
  const int derr = RunDeferred(m, w.deferred);
  if (!err || err == ENOMEM) err = derr && !err ? derr : err;
  return done(err);
}

}  // namespace vmspace
