// SPDX-License-Identifier: Apache-2.0
// VMA tree changes: link, unlink, set range, split, merge and unmap (mm/vma.c, Linux
// 6.18). Every function here needs mmap_lock for write and write-locks each VMA it
// changes (vma_start_write); the page tables are only touched by the unmap at the end,
// which munmap runs with mmap_lock downgraded to read (DoVmiMunmapUnlock).
#include <utility>

#include "absl/container/inlined_vector.h"
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

constexpr uint64_t kUserPgtablesCeiling = 1ull << 48;

bool AnonCompatible(AnonVma* a, AnonVma* b) { return !a || !b || a == b; }

/// vma_had_uncowed_parents() (mm/vma.c, Linux 6.18; the list_is_singular() test of
/// "mmap: avoid merging cloned VMAs", 3.3): an anon_vma and more than one AVC.
bool HadUncowedParents(const Vma* v) {
  return v && v->anon() && v->anon_vma_chain && v->anon_vma_chain->same_vma != nullptr;
}

/// is_mergeable_vma(): same flags but VM_IGNORE_MERGE (the sticky flags; no
/// VM_SOFTDIRTY here), same struct file.
bool Mergeable(const Vma* v, uint64_t flags, const OpenFile* file) {
  return ((v->vm_flags ^ flags) & ~kVmSticky) == 0 && v->vm_file.get() == file;
}

/// The merged VMA keeps the sticky flags of every VMA the merge joins (vma_expand /
/// vma_merge_existing_range: vm_flags_set(target, sticky_flags)).
void KeepSticky(Vma* target, const Vma* joined) { target->vm_flags |= joined->vm_flags & kVmSticky; }

// i_mmap updates (vma_prepare() .. vma_complete()): under the File's i_mmap_rwsem for
// write, unless this write section already holds it across a change of several VMAs
// (MmStruct::i_mmap_held). To the analysis IMmapLock acquires f->i_mmap_rwsem and
// IMmapUnlock releases it (their bodies cannot show "held by me or by my caller"), so
// the i_mmap writes between them are checked.
void IMmapLock(MmStruct& m, File* f) ABSL_EXCLUSIVE_LOCK_FUNCTION(f->i_mmap_rwsem) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (f && f != m.i_mmap_held) f->i_mmap_rwsem.LockWrite();
}
void IMmapUnlock(MmStruct& m, File* f) ABSL_UNLOCK_FUNCTION(f->i_mmap_rwsem) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (f && f != m.i_mmap_held) f->i_mmap_rwsem.UnlockWrite();
}
void IMmapErase(File* f, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->i_mmap_rwsem) { f->i_mmap.erase({v->vm_pgoff, v}); }
void IMmapInsert(File* f, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(f->i_mmap_rwsem) { f->i_mmap.emplace(v->vm_pgoff, v); }
/// vma_is_shared_maywrite(): a VMA that counts in its file's i_mmap_writable.
bool SharedMaywrite(const Vma* v) { return (v->vm_flags & (VM_SHARED | VM_MAYWRITE)) == (VM_SHARED | VM_MAYWRITE); }

/// Holds middle's File's i_mmap_rwsem for write across a change that shrinks one VMA
/// and grows its neighbour over the pages it gave up (rmap walkers must never see
/// those pages in neither). The VMAs involved are write-locked first (rmap.c order).
class IMmapSection {
 public:
  IMmapSection(MmStruct& m, Vma* middle, Vma* other) ABSL_NO_THREAD_SAFETY_ANALYSIS : m_(m), f_(middle->file()) {
    if (!f_) return;
    VmaStartWriteLocked(m_, middle);
    VmaStartWriteLocked(m_, other);
    IMmapLock(m_, f_);
    m_.i_mmap_held = f_;
  }
  ~IMmapSection() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!f_) return;
    m_.i_mmap_held = nullptr;
    IMmapUnlock(m_, f_);
  }

 private:
  MmStruct& m_;
  File* const f_;
};

}  // namespace

void VmaLinkFileLocked(MmStruct& mm, Vma* v) {
  File* f = v->file();
  if (!f) return;
  VMSPACE_LOCK_ASSERT(v->vm_mm == &mm, "a file VMA is linked with its vm_mm set");
  IMmapLock(mm, f);
  if (SharedMaywrite(v)) f->i_mmap_writable.fetch_add(1, std::memory_order_acq_rel);  // mapping_allow_writable
  IMmapInsert(f, v);
  IMmapUnlock(mm, f);
}

namespace {
/// vma_iter_store() of mmap_region's new VMA: visible to lockless lookups from here
/// (then the test hook, g_mmap_region_test_hook, with v write-locked by an older
/// section so that a lockless fault may take it).
void VmaStoreVisibleLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock) {
  VmaInsertLocked(mm, v);
  if (auto hook = g_mmap_region_test_hook.load(std::memory_order_acquire)) {
    v->vm_lock_seq.store(mm.mm_lock_seq.load(std::memory_order_relaxed) - 1, std::memory_order_seq_cst);
    hook(&mm, v->vm_start);
  }
}
}  // namespace

void VmaLinkNewLocked(MmStruct& mm, Vma* v) {
  File* f = v->file();
  if (!f) {
    VmaInsertLocked(mm, v);
    return;
  }
  v->vm_mm = &mm;
  if (mm.opts.i_mmap_scope == IMmapScope::kNarrow) {
    f->unlinked_visible.fetch_add(1, std::memory_order_seq_cst);
    VmaStoreVisibleLocked(mm, v);
    VmaLinkFileLocked(mm, v);  // the lock for the file side only
    f->unlinked_visible.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  IMmapLock(mm, f);  // i_mmap_lock_write(vma->vm_file->f_mapping) across both inserts
  VmaStoreVisibleLocked(mm, v);
  if (SharedMaywrite(v)) f->i_mmap_writable.fetch_add(1, std::memory_order_acq_rel);
  IMmapInsert(f, v);
  IMmapUnlock(mm, f);
}

void VmaUnlinkFileLocked(MmStruct& mm, Vma* v) {
  File* f = v->file();
  if (!f) return;
  IMmapLock(mm, f);
  if (SharedMaywrite(v)) f->MappingUnmapWritable();  // __remove_shared_vm_struct
  IMmapErase(f, v);
  IMmapUnlock(mm, f);
}

bool ReclaimAfterRefusal(MmStruct& mm, uint64_t failcnt_before) {
  if (mm.frames.budget().failcnt() == failcnt_before) return false;
  mm.frames.Reclaim();
  return true;
}

bool MayAddVmaLocked(MmStruct& mm, bool over) {
  const uint64_t n = mm.map_count.load(std::memory_order_relaxed);
  if (over ? n > mm.opts.max_map_count : n >= mm.opts.max_map_count) return false;
  return mm.frames.budget().HasRoom(MmStruct::kVmaChangeBytes);
}

void VmaInsertLocked(MmStruct& mm, Vma* v) {
  // Set at creation for VMAs of this file (rmap walkers read it once linked); split
  // parts inherit it.
  if (!v->vm_mm) v->vm_mm = &mm;
  VmaInitLocked(mm, v);
  mm.idx->Insert(v);
  mm.map_count.store(mm.map_count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (v->vm_flags & VM_SEALED)
    mm.sealed_vmas.store(mm.sealed_vmas.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void VmaRemoveLocked(MmStruct& mm, Vma* v) {
  VmaStartWriteLocked(mm, v);
  mm.idx->Erase(v, v->vm_start, v->vm_end);
  VmaMarkDetachedLocked(mm, v);
  mm.map_count.store(mm.map_count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  if (v->vm_flags & VM_SEALED)
    mm.sealed_vmas.store(mm.sealed_vmas.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  mm.retired_vmas.push_back(v);
}

void VmaSetRangeLocked(MmStruct& mm, Vma* v, uint64_t start, uint64_t end) {
  VmaStartWriteLocked(mm, v);
  const uint64_t os = v->vm_start, oe = v->vm_end;
  // vma_prepare() .. vma_complete(): the i_mmap key changes under i_mmap_rwsem write.
  File* f = v->file();
  IMmapLock(mm, f);
  if (f) IMmapErase(f, v);
  if (start != os) v->vm_pgoff = v->vm_pgoff + (start >> kPageShift) - (os >> kPageShift);
  v->vm_start = start;
  v->vm_end = end;
  if (f) IMmapInsert(f, v);
  IMmapUnlock(mm, f);
  mm.idx->Update(v, os, oe);
}

Vma* SplitVmaLocked(MmStruct& mm, Vma* v, uint64_t addr, bool new_below) {
  VmaStartWriteLocked(mm, v);
  Vma* n = VmaDupLocked(mm, *v);
  // The new part joins i_mmap before v shrinks: rmap walkers always see the whole range.
  if (new_below) {
    n->vm_end = addr;
    VmaLinkFileLocked(mm, n);
    VmaSetRangeLocked(mm, v, addr, v->vm_end);
  } else {
    n->vm_start = addr;
    n->vm_pgoff = v->vm_pgoff + ((addr - v->vm_start) >> kPageShift);
    VmaLinkFileLocked(mm, n);
    VmaSetRangeLocked(mm, v, v->vm_start, addr);
  }
  VmaInsertLocked(mm, n);
  return n;
}

bool IsMergeableAnonVma(const Vma* tgt, const Vma* src, AnonVma* src_anon, const Vma* copied_from) {
  AnonVma* tgt_anon = tgt->anon();
  if (!tgt_anon && src_anon) return !HadUncowedParents(src) && !HadUncowedParents(copied_from);  // dup_anon_vma into tgt
  if (tgt_anon && !src_anon) return !HadUncowedParents(tgt);  // the range takes tgt's
  return tgt_anon == src_anon;
}

Vma* VmaMergeNewRangeLocked(MmStruct& mm, uint64_t start, uint64_t end, uint64_t flags, uint64_t pgoff,
                            const OpenFile* file, Vma* next, AnonVma* anon) {
  if (flags & VM_SPECIAL) return nullptr;
  Vma* prev = VmaPrevLocked(mm, start);
  if (prev && prev->vm_end != start) prev = nullptr;
  if (next && next->vm_start != end) next = nullptr;
  const uint64_t pages = (end - start) >> kPageShift;
  bool left = prev && Mergeable(prev, flags, file) && prev->vm_pgoff + prev->pages() == pgoff &&
              IsMergeableAnonVma(prev, nullptr, anon);
  bool right = next && Mergeable(next, flags, file) && next->vm_pgoff == pgoff + pages &&
               IsMergeableAnonVma(next, nullptr, anon);
  if (left && right && !AnonCompatible(prev->anon(), next->anon())) right = false;
  if (left && right) {
    const uint64_t next_end = next->vm_end;
    VmaStartWriteLocked(mm, prev);
    DupAnonVma(prev, next);  // prev takes next's anon_vma and chain if it has none
    KeepSticky(prev, next);
    VmaRemoveLocked(mm, next);
    VmaSetRangeLocked(mm, prev, prev->vm_start, next_end);
    VmaUnlinkFileLocked(mm, next);  // prev covers its pages now
    return prev;
  }
  if (left) {
    VmaSetRangeLocked(mm, prev, prev->vm_start, end);
    return prev;
  }
  if (right) {
    VmaSetRangeLocked(mm, next, start, next->vm_end);  // moves vm_pgoff down by the new pages
    return next;
  }
  return nullptr;
}

Vma* VmaModifyFlagsLocked(MmStruct& mm, Vma* middle, uint64_t start, uint64_t end, uint64_t newflags,
                          int* err) {
  *err = 0;
  const bool left_side = start == middle->vm_start;
  const bool right_side = end == middle->vm_end;
  const OpenFile* file = middle->vm_file.get();
  const uint64_t pgoff = middle->vm_pgoff + ((start - middle->vm_start) >> kPageShift);
  const uint64_t pages = (end - start) >> kPageShift;
  AnonVma* anon = middle->anon();
  if (!(newflags & VM_SPECIAL) && (left_side || right_side)) {
    Vma* prev = left_side ? VmaPrevLocked(mm, start) : nullptr;
    if (prev && prev->vm_end != start) prev = nullptr;
    Vma* next = right_side ? VmaNextFromLocked(mm, end) : nullptr;
    if (next && next->vm_start != end) next = nullptr;
    const bool merge_left = prev && Mergeable(prev, newflags, file) &&
                            IsMergeableAnonVma(prev, middle, anon) &&
                            prev->vm_pgoff + prev->pages() == pgoff;
    bool merge_right = next && Mergeable(next, newflags, file) &&
                       IsMergeableAnonVma(next, middle, anon) && next->vm_pgoff == pgoff + pages;
    if (merge_left && merge_right && !AnonCompatible(prev->anon(), next->anon()))
      merge_right = false;
    const bool delete_middle = left_side && right_side;
    if (merge_left && merge_right) {
      // prev extends over middle and next; both removed.
      VmaStartWriteLocked(mm, prev);
      DupAnonVma(prev, next->anon() ? next : middle);
      KeepSticky(prev, middle);
      KeepSticky(prev, next);
      const uint64_t next_end = next->vm_end;
      VmaRemoveLocked(mm, middle);
      VmaRemoveLocked(mm, next);
      VmaSetRangeLocked(mm, prev, prev->vm_start, next_end);
      VmaUnlinkFileLocked(mm, middle);  // prev covers their pages now
      VmaUnlinkFileLocked(mm, next);
      return prev;
    }
    if (merge_left) {
      IMmapSection section(mm, middle, prev);
      VmaStartWriteLocked(mm, prev);
      DupAnonVma(prev, middle);
      KeepSticky(prev, middle);
      if (delete_middle) VmaRemoveLocked(mm, middle);
      else VmaSetRangeLocked(mm, middle, end, middle->vm_end);
      VmaSetRangeLocked(mm, prev, prev->vm_start, end);
      if (delete_middle) VmaUnlinkFileLocked(mm, middle);
      return prev;
    }
    if (merge_right) {
      IMmapSection section(mm, middle, next);
      VmaStartWriteLocked(mm, next);
      DupAnonVma(next, middle);
      KeepSticky(next, middle);
      if (delete_middle) VmaRemoveLocked(mm, middle);
      else VmaSetRangeLocked(mm, middle, middle->vm_start, start);
      VmaSetRangeLocked(mm, next, start, next->vm_end);
      if (delete_middle) VmaUnlinkFileLocked(mm, middle);
      return next;
    }
  }
  // No merge: split_vma() at the range boundaries.
  if (middle->vm_start < start) {
    if (!MayAddVmaLocked(mm)) {
      *err = ENOMEM;
      return nullptr;
    }
    SplitVmaLocked(mm, middle, start, true);
  }
  if (middle->vm_end > end) {
    if (!MayAddVmaLocked(mm)) {
      *err = ENOMEM;
      return nullptr;
    }
    SplitVmaLocked(mm, middle, end, false);
  }
  return middle;
}

namespace {

// __mt_destroy(mas_detach->tree): mt_detach emptied (its nodes go back to its cache).
// The analysis is off: after mmap_write_downgrade the munmap still owns mt_detach (see
// MmStruct::mt_detach), which the compiler cannot know once the capability is shared.
void DestroyDetached(MmStruct& m) ABSL_NO_THREAD_SAFETY_ANALYSIS { m.mt_detach->Store(0, ~0ull, nullptr); }

// What vms_gather_munmap_vmas() collects (struct vma_munmap_struct). The VMAs are also
// in m.mt_detach in the maple profiles, and the teardown takes them from there.
struct VmaMunmap {
  // Detached, in address order. Inline for the common munmap of one to four VMAs: no
  // heap allocation per munmap (the kernel keeps them in mas_detach alone).
  absl::InlinedVector<Vma*, 4> vmas;
  uint64_t start = 0, end = 0;      // their span
  uint64_t floor = 0, ceiling = 0;  // free_pgtables() bounds: prev's end, next's start
};

// vms_gather_munmap_vmas() and the tree half of vms_complete_munmap_vmas(): splits at
// the boundaries, write-locks, accounts and detaches every VMA in [start, end). After
// it no lookup (mmap_lock, RCU or VMA lock) can find them. Returns 0 or ENOMEM.
int GatherMunmapVmasLocked(MmStruct& m, uint64_t start, uint64_t end, uint64_t* nr_accounted,
                           VmaMunmap* vms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  Vma* v = FindVmaIntersectionLocked(m, start, end);
  if (!v) return 0;
  // As the kernel's vma_iterator, no lookup is repeated for a VMA at hand: a split's
  // new part is the neighbour it borders (vms->prev below start, vms->next above end),
  // and the step past the last VMA collected is vms->next.
  Vma* prev = nullptr;
  bool prev_known = false;
  if (start > v->vm_start) {
    if (end < v->vm_end && !MayAddVmaLocked(m)) return ENOMEM;
    if (!CanModifyVma(v)) return EPERM;  // "don't bother splitting the VMA if we can't unmap it"
    prev = SplitVmaLocked(m, v, start, true);  // v is now [start, ...), prev below it
    prev_known = true;
  }
  // Collect, splitting the last one if it extends past end. A sealed VMA on the way
  // ends it with EPERM: nothing is removed, the split at start stays (as Linux's
  // reattach_vmas after modify_vma_failed).
  Vma* next = nullptr;
  for (Vma* w = v;;) {
    if (!CanModifyVma(w)) {
      if (m.mt_detach) DestroyDetached(m);
      return EPERM;
    }
    if (w->vm_end > end) next = SplitVmaLocked(m, w, end, false);
    VmaStartWriteLocked(m, w);
    vms->vmas.push_back(w);
    if (m.mt_detach) m.mt_detach->Store(w->vm_start, w->vm_end - 1, w);  // mas_store_gfp(mas_detach, vma)
    if (next) break;  // the upper part of the split: past end
    next = VmaNextLocked(m, w);
    if (!next || next->vm_start >= end) break;
    w = std::exchange(next, nullptr);
  }
  vms->start = vms->vmas.front()->vm_start;
  vms->end = vms->vmas.back()->vm_end;
  if (!prev_known) prev = VmaPrevLocked(m, vms->start);
  vms->floor = prev ? prev->vm_end : 0;
  vms->ceiling = next ? next->vm_start : kUserPgtablesCeiling;
  for (Vma* w : vms->vmas) {
    if (nr_accounted && (w->vm_flags & VM_ACCOUNT)) *nr_accounted += w->pages();
    m.total_vm.store(m.total_vm.load(std::memory_order_relaxed) - w->pages(), std::memory_order_relaxed);
    if (w->vm_flags & VM_LOCKED)  // vms->locked_vm, taken off mm->locked_vm at completion
      m.locked_vm.store(m.locked_vm.load(std::memory_order_relaxed) - w->pages(), std::memory_order_relaxed);
    VmaRemoveLocked(m, w);  // detach first: no new lockless reader can find it
  }
  return 0;
}

// vms_clear_ptes(): unmap_vmas() + free_pgtables() of the detached VMAs, into `g`.
// Needs only mmap_lock read: no VMA covers [floor, ceiling) any more, so no fault can
// map a page there or install a table that FreePgtables frees (LOCKING.md).
// The detached VMAs come from mt_detach (unmap_vmas() walks mas_detach) where there is
// one, which is emptied at the end (__mt_destroy in vms_complete_munmap_vmas).
void ClearPtesLocked(MmStruct& m, const VmaMunmap& vms, bool free_tables, MmuGather& g)
    ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  auto clear = [&](Vma* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // m.mmap_lock held, as above
    ZapRangeLocked(m, w, w->vm_start, w->vm_end, g.pages);
    VmaUnlinkFileLocked(m, w);  // unlink_file_vma_batch: PTEs gone, before the tables go
  };
  if (MapleTree* t = m.mt_detach.get()) {
    // unmap_vmas(): the first VMA is vms->vma, the others mas_find()s of mas_detach.
    uint64_t first, last = vms.vmas.front()->vm_end - 1;
    for (void* e = vms.vmas.front(); e; e = last == ~0ull ? nullptr : t->Find(last + 1, &first, &last))
      clear(static_cast<Vma*>(e));
  } else {
    for (Vma* w : vms.vmas) clear(w);
  }
  if (free_tables) m.pt.FreePgtables(vms.start, vms.end, vms.floor, vms.ceiling, g.tables);
  if (m.mt_detach) DestroyDetached(m);
}

// mmap_write_downgrade(): what MmapWriteUnlock does before it unlocks (publish the
// index, retire its replaced nodes, vma_end_write_all), then downgrade_write().
void MmapWriteDowngrade(MmStruct& m) ABSL_UNLOCK_FUNCTION(m.mmap_lock) ABSL_SHARED_LOCK_FUNCTION(m.mmap_lock) {
  EndWriteSectionLocked(m);
  m.mmap_lock.DowngradeWrite();
}

// MmapWriteUnlock's release of the detached VMAs and batching of the gather, after the
// downgraded teardown. The analysis is off here: after mmap_write_downgrade the munmap
// still owns mm->gather, retired_vmas and vma_cache (only mmap_lock writers touch them,
// and none can run before this thread's up_read), which the compiler cannot know once
// the capability is shared.
void FlushGatherDowngraded(MmStruct& m) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  ReleaseRetiredVmasLocked(m);
  FlushGatherIfFullLocked(m);
}

}  // namespace

int UnmapRangeLocked(MmStruct& mm, uint64_t start, uint64_t end, bool free_tables, uint64_t* nr_accounted) {
  VmaMunmap vms;
  if (int e = GatherMunmapVmasLocked(mm, start, end, nr_accounted, &vms)) return e;
  if (!vms.vmas.empty()) ClearPtesLocked(mm, vms, free_tables, GatherLocked(mm));
  return 0;
}

// do_vmi_munmap() with `unlock` (declared in mm.h): the tree changes under mmap_lock
// write, then, as vms_complete_munmap_vmas(), mmap_write_downgrade() before the zap and
// free_pgtables(), and mmap_read_unlock() after.
int DoVmiMunmapUnlock(MmStruct& m, uint64_t start, uint64_t end) ABSL_UNLOCK_FUNCTION(m.mmap_lock) {
  VmaMunmap vms;
  const int err = GatherMunmapVmasLocked(m, start, end, nullptr, &vms);
  if (err || vms.vmas.empty()) {
    MmapWriteUnlock(m);
    return err;
  }
  MmuGather& g = GatherLocked(m);
  MmapWriteDowngrade(m);
  ClearPtesLocked(m, vms, /*free_tables=*/true, g);
  FlushGatherDowngraded(m);
  m.mmap_lock.UnlockRead();
  return 0;
}

}  // namespace vmspace
