// SPDX-License-Identifier: Apache-2.0
// mremap(2) (mm/mremap.c, Linux 6.18; copy_vma from mm/vma.c): shrink in place, grow
// in place (vma_merge_extend), move (copy_vma + move_page_tables + unmap of the
// source), MREMAP_FIXED, MREMAP_DONTUNMAP and the old_len == 0 duplicate of a shared
// mapping, with the kernel's checks in its order (check_mremap_params, mremap_to,
// remap_is_valid, prep_move_vma). A move runs under mmap_lock write with the source
// VMA write-locked (vma_start_write) and the destination new or write-locked, so no
// fault runs in either range meanwhile; each PTE moves from one table to the other
// under both PTE locks, so a lockless access sees the old or the new mapping of the
// same frame.
//
// Not modelled: hugetlb,
// userfaultfd, uprobes, KSM, RLIMIT_AS, and the move of whole PMD/PUD tables (every
// PTE is moved one by one).
#include "mremap.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "engine/stats.h"
#include "filemap.h"
#include "memory.h"
#include "mlock.h"
#include "mm.h"
#include "mmap.h"
#include "mmap_lock.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

namespace {

constexpr uint64_t kMremapMaymove = 1, kMremapFixed = 2, kMremapDontunmap = 4;  // include/uapi/linux/mman.h

bool AnonCompatible(AnonVma* a, AnonVma* b) { return !a || !b || a == b; }
/// is_mergeable_vma(): same flags but the sticky ones (VM_IGNORE_MERGE), same struct
/// file.
bool Mergeable(const Vma* v, uint64_t flags, const OpenFile* file) {
  return ((v->vm_flags ^ flags) & ~kVmSticky) == 0 && v->vm_file.get() == file;
}

enum class RemapType { kNoResize, kShrink, kExpand };  // enum mremap_type

/// struct vma_remap_struct: one mremap, threaded through its steps.
struct VmaRemap {
  uint64_t addr, old_len, new_len;
  const uint64_t flags;
  uint64_t new_addr;
  Vma* vma = nullptr;
  uint64_t delta = 0;
  bool mlocked = false;
  uint64_t mlocked_flags = 0;  // the VM_LOCKED VMA's flags, for the populate
  RemapType type = RemapType::kNoResize;
  bool implies_new_addr() const { return flags & (kMremapFixed | kMremapDontunmap); }  // vrm_implies_new_addr
  bool overlaps() const {  // vrm_overlaps
    return addr + old_len > new_addr && new_addr + new_len > addr;
  }
};

/// check_mremap_params(): the checks before mmap_lock is taken, on the page-aligned
/// lengths (Linux 6.17+ checks the new range here, before the lookup).
int CheckMremapParams(MmStruct& m, const VmaRemap& r) {
  if (r.flags & ~(kMremapFixed | kMremapMaymove | kMremapDontunmap)) return EINVAL;
  if (r.addr & (kPageSize - 1)) return EINVAL;
  if (!r.new_len) return EINVAL;  // a zero new_len (old_len 0 is allowed)
  if (r.new_len > kTaskSize) return EINVAL;
  if (!r.implies_new_addr()) return 0;
  if (r.new_addr > kTaskSize - r.new_len) return EINVAL;
  if (r.new_addr & (kPageSize - 1)) return EINVAL;
  if (!(r.flags & kMremapMaymove)) return EINVAL;  // a fixed address implies a move
  if ((r.flags & kMremapDontunmap) && r.old_len != r.new_len) return EINVAL;
  if (r.overlaps()) return EINVAL;
  // Both ranges may be split in three before the move: stay 4 maps below the limit.
  if (m.map_count.load(std::memory_order_relaxed) + 2 + 3 >= m.opts.max_map_count) return ENOMEM;
  return 0;
}

/// do_vmi_munmap()'s argument check for the tail a shrink unmaps: EINVAL beyond
/// TASK_SIZE (a huge old_len).
int ShrinkRangeValid(const VmaRemap& r) {
  const uint64_t start = r.addr + r.new_len;
  if (start > kTaskSize || r.delta > kTaskSize - start) return EINVAL;
  return 0;
}

/// vma_lookup(): the VMA containing addr, or null.
Vma* VmaLookupLocked(MmStruct& m, uint64_t addr) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  Vma* v = FindVmaLocked(m, addr);
  return v && v->vm_start <= addr ? v : nullptr;
}

/// remap_is_valid().
int RemapIsValidLocked(MmStruct& m, const VmaRemap& r) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  const Vma* vma = r.vma;
  // old_len 0 "duplicates" a mapping: only meaningful for shared ones.
  if (!r.old_len && !(vma->vm_flags & (VM_SHARED | VM_MAYSHARE))) return EINVAL;
  if ((r.flags & kMremapDontunmap) && (vma->vm_flags & (VM_DONTEXPAND | VM_PFNMAP))) return EINVAL;
  if (r.old_len > vma->vm_end - r.addr) return EFAULT;  // across a VMA boundary
  if (r.new_len == r.old_len) return 0;
  const uint64_t pgoff = vma->vm_pgoff + ((r.addr - vma->vm_start) >> kPageShift);
  if (pgoff + (r.new_len >> kPageShift) < pgoff) return EINVAL;
  if (vma->vm_flags & (VM_DONTEXPAND | VM_PFNMAP)) return EFAULT;
  if (!MlockFutureOk(m, vma->vm_flags, r.delta)) return EAGAIN;  // past RLIMIT_MEMLOCK
  if (!MayExpandVmLocked(m, vma->vm_flags, r.delta >> kPageShift)) return ENOMEM;
  return 0;
}

/// vrm_set_new_addr(): get_unmapped_area() for the destination: MAP_FIXED with
/// MREMAP_FIXED, a hint with MREMAP_DONTUNMAP alone, else anywhere.
int SetNewAddrLocked(MmStruct& m, VmaRemap& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  const Vma* vma = r.vma;
  const uint64_t pgoff = vma->vm_pgoff + ((r.addr - vma->vm_start) >> kPageShift);
  int map_flags = MAP_PRIVATE;
  if (r.flags & kMremapFixed) map_flags |= MAP_FIXED;
  if (vma->vm_flags & VM_MAYSHARE) map_flags = (map_flags & ~MAP_PRIVATE) | MAP_SHARED;
  const File* f = vma->file();
  int err = 0;
  const uint64_t res = GetUnmappedAreaLocked(m, r.implies_new_addr() ? r.new_addr : 0, r.new_len, map_flags,
                                             f && !f->shmem(), pgoff << kPageShift, &err);
  if (err) return err;
  r.new_addr = res;
  return 0;
}

/// vrm_calc_charge(): the VM_ACCOUNT pages the operation adds (the whole new length
/// with MREMAP_DONTUNMAP, else the growth), against the overcommit limit.
bool CalcChargeLocked(MmStruct& m, const VmaRemap& r) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  if (!(r.vma->vm_flags & VM_ACCOUNT)) return true;
  const uint64_t charged = ((r.flags & kMremapDontunmap) ? r.new_len : r.delta) >> kPageShift;
  return charged <= m.commit_limit_pages;  // security_vm_enough_memory_mm (heuristic)
}

/// vrm_stat_account(): total_vm grows by `bytes`; a VM_LOCKED VMA marks the call.
void StatAccountLocked(MmStruct& m, VmaRemap& r, uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  m.total_vm.store(m.total_vm.load(std::memory_order_relaxed) + (bytes >> kPageShift), std::memory_order_relaxed);
  if (r.vma->vm_flags & VM_LOCKED) {
    m.locked_vm.store(m.locked_vm.load(std::memory_order_relaxed) + (bytes >> kPageShift), std::memory_order_relaxed);
    r.mlocked = true;
    r.mlocked_flags = r.vma->vm_flags;
  }
}

/// move_vma() with prep_move_vma(), copy_vma_and_data(), dontunmap_complete() and
/// unmap_source_vma(). Returns 0 (r.new_addr is the result) or an errno.
int MoveVmaLocked(MmStruct& m, VmaRemap& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  // prep_move_vma(): avoid failing later in the munmap, which may split in three.
  if (m.map_count.load(std::memory_order_relaxed) + 3 >= m.opts.max_map_count) return ENOMEM;
  if (!MayAddVmaLocked(m)) return ENOMEM;  // the memory budget's room for the VMAs
  if (!CalcChargeLocked(m, r)) return ENOMEM;
  Vma* vma = r.vma;
  VmaStartWriteLocked(m, vma);  // no racing faults
  const uint64_t new_pgoff = vma->vm_pgoff + ((r.addr - vma->vm_start) >> kPageShift);
  Vma* new_vma = CopyVmaLocked(m, &vma, r.new_addr, r.new_len, new_pgoff);
  r.vma = vma;
  const uint64_t moved = MovePageTablesLocked(m, vma, r.addr, r.new_addr, r.old_len);
  int err = 0;
  if (moved < r.old_len) {
    // Move back what moved (the tables are there) and unmap the new range instead.
    MovePageTablesLocked(m, new_vma, r.new_addr, r.addr, moved);
    r.vma = new_vma;
    r.old_len = r.new_len;
    r.addr = r.new_addr;
    err = ENOMEM;
  }
  StatAccountLocked(m, r, r.new_len);
  if (!err && (r.flags & kMremapDontunmap)) {
    // dontunmap_complete(): the source stays mapped, empty and no longer locked; it
    // keeps VM_ACCOUNT (the charge covered the whole new length; seen on 6.18). If it
    // moved whole, its anon_vma is no longer needed.
    Vma* old = r.vma;
    const uint64_t old_start = old->vm_start, old_end = old->vm_end;
    VmaStartWriteLocked(m, old);
    if (old->vm_flags & VM_LOCKED)  // its pages are counted at the destination now
      m.locked_vm.store(m.locked_vm.load(std::memory_order_relaxed) - old->pages(), std::memory_order_relaxed);
    old->vm_flags &= ~VM_LOCKED_MASK;
    if (new_vma != old && r.addr == old_start && r.addr + r.old_len == old_end && old->anon())
      old->set_anon(nullptr);  // unlink_anon_vmas()
  } else if (r.old_len) {
    // unmap_source_vma(): do_vmi_munmap() of the source. A split refused at the limit
    // leaves it mapped, as the kernel ("just get accounts right").
    UnmapRangeLocked(m, r.addr, r.addr + r.old_len, /*free_tables=*/true, nullptr);
  }
  r.vma = nullptr;
  return err;
}

/// mremap_to(): MREMAP_FIXED and/or MREMAP_DONTUNMAP.
int MremapToLocked(MmStruct& m, VmaRemap& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  {
    // check_prep_vma() (Linux 6.17+) comes before anything is unmapped: the source range
    // must lie in its VMA (a shrink may cross boundaries only in the part it unmaps, so
    // the new length is what must fit), and the rest of remap_is_valid.
    VmaRemap pre = r;
    if (pre.type == RemapType::kShrink) {
      pre.old_len = pre.new_len;
      pre.delta = 0;
    }
    if (int e = RemapIsValidLocked(m, pre)) return e;
  }
  if (r.flags & kMremapFixed) {
    // do_munmap() of the destination (which may have held part of the source's VMA).
    if (int e = UnmapRangeLocked(m, r.new_addr, r.new_addr + r.new_len, /*free_tables=*/true, nullptr)) return e;
    r.vma = VmaLookupLocked(m, r.addr);
    if (!r.vma) return EFAULT;
  }
  if (r.type == RemapType::kShrink) {  // shrink_vma() without dropping the lock
    if (int e = ShrinkRangeValid(r)) return e;
    if (int e = UnmapRangeLocked(m, r.addr + r.new_len, r.addr + r.old_len, /*free_tables=*/true, nullptr)) return e;
    r.vma = VmaLookupLocked(m, r.addr);
    if (!r.vma) return EFAULT;
    r.old_len = r.new_len;
  }
  if (int e = RemapIsValidLocked(m, r)) return e;
  if ((r.flags & kMremapDontunmap) && !MayExpandVmLocked(m, r.vma->vm_flags, r.old_len >> kPageShift)) return ENOMEM;
  if (int e = SetNewAddrLocked(m, r)) return e;
  return MoveVmaLocked(m, r);
}

/// vma_expandable(): [vm_end, vm_end + delta) is free and the whole VMA would fit
/// (get_unmapped_area with MAP_FIXED).
bool VmaExpandableLocked(MmStruct& m, const Vma* vma, uint64_t delta) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  const uint64_t end = vma->vm_end + delta;
  if (end < vma->vm_end) return false;
  if (FindVmaIntersectionLocked(m, vma->vm_end, end)) return false;
  int err = 0;
  GetUnmappedAreaLocked(m, vma->vm_start, end - vma->vm_start, MAP_FIXED | MAP_PRIVATE, false, 0, &err);
  return err == 0;
}

/// expand_vma(): in place if [addr, addr+old_len) ends the VMA and the space above is
/// free (expand_vma_in_place: vma_merge_extend, which also merges with the next VMA
/// when it becomes adjacent and compatible), else a move if MREMAP_MAYMOVE allows.
int ExpandVmaLocked(MmStruct& m, VmaRemap& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  if (int e = RemapIsValidLocked(m, r)) return e;
  Vma* vma = r.vma;
  if (vma->vm_end - r.addr == r.old_len && VmaExpandableLocked(m, vma, r.delta)) {
    if (!CalcChargeLocked(m, r)) return ENOMEM;
    const uint64_t end = vma->vm_end;
    // VMG_VMA_STATE: the range brings the VMA's own anon_vma, so a VMA a fork made
    // (its parents' anon_vmas still in its chain) grows too (is_mergeable_anon_vma's
    // third case).
    Vma* v = VmaMergeNewRangeLocked(m, end, end + r.delta, vma->vm_flags, vma->vm_pgoff + vma->pages(),
                                    vma->vm_file.get(), FindVmaLocked(m, end), vma->anon());
    if (!v) return ENOMEM;  // VM_SPECIAL: vma_merge_new_range refuses
    r.vma = v;
    StatAccountLocked(m, r, r.delta);
    r.new_addr = r.addr;
    return 0;
  }
  if (!(r.flags & kMremapMaymove)) return ENOMEM;
  if (int e = SetNewAddrLocked(m, r)) return e;
  return MoveVmaLocked(m, r);
}

/// remap_move() (Linux 6.17+, "mm/mremap: permit mremap() move of multiple VMAs"): a
/// MREMAP_FIXED move without a resize moves every VMA of [addr, addr+old_len), each
/// split as needed, keeping the gaps between them (no gap at the start: EFAULT), each
/// through check_prep_vma and mremap_to. Returns 0 with r.new_addr the first VMA's new
/// address, or the first error (the VMAs moved before it stay moved).
int RemapMoveLocked(MmStruct& m, VmaRemap& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  const uint64_t start = r.addr, end = r.addr + r.old_len;
  uint64_t target = r.new_addr, last_end = 0, result = 0;
  bool seen = false;
  // `pos`: where the part of the range not yet moved begins (with MREMAP_DONTUNMAP the
  // moved parts stay mapped, so the walk goes on from there, not from the next VMA).
  for (uint64_t pos = start; pos < end;) {
    Vma* v = FindVmaLocked(m, pos);
    if (!v || v->vm_start >= end) break;
    const uint64_t addr = std::max(v->vm_start, pos);
    const uint64_t len = std::min(end, v->vm_end) - addr;
    if (!seen && start < v->vm_start) return EFAULT;  // no gap at the start of the range
    const uint64_t offset = seen ? addr - last_end : 0;
    last_end = addr + len;
    // vma_multi_allowed(): every VMA the engine has (no uffd, hugetlb or special
    // vm_ops) may move with others.
    VmaRemap one = r;
    one.vma = v;
    one.addr = addr;
    one.new_addr = target + offset;
    one.old_len = one.new_len = len;
    one.delta = 0;
    one.type = RemapType::kNoResize;
    if (!CanModifyVma(v)) return EPERM;  // check_prep_vma(): mseal'd
    if (int e = MremapToLocked(m, one)) return e;
    if (!seen) result = one.new_addr;
    r.mlocked |= one.mlocked;
    seen = true;
    target = one.new_addr + len;
    pos = addr + len;
  }
  if (!seen) return EFAULT;  // no VMA in the range
  r.new_addr = result;
  return 0;
}

/// do_mremap() under mmap_lock write. Returns 0 with r.new_addr the result, or an
/// errno. A shrink in place (mremap_at's shrink_vma with drop_lock) is left to the
/// caller: *shrink is set and nothing is changed.
int DoMremapLocked(MmStruct& m, VmaRemap& r, bool* shrink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  if ((r.flags & kMremapFixed) && r.old_len == r.new_len) return RemapMoveLocked(m, r);  // vrm_move_only()
  r.vma = VmaLookupLocked(m, r.addr);
  if (!r.vma) return EFAULT;
  if (!CanModifyVma(r.vma)) return EPERM;  // check_prep_vma(): mseal'd
  r.type = r.delta == 0 ? RemapType::kNoResize : r.old_len > r.new_len ? RemapType::kShrink : RemapType::kExpand;
  if (r.implies_new_addr()) return MremapToLocked(m, r);
  r.new_addr = r.addr;
  switch (r.type) {
    case RemapType::kNoResize: return 0;
    case RemapType::kShrink:
      if (int e = ShrinkRangeValid(r)) return e;
      *shrink = true;
      return 0;
    case RemapType::kExpand: return ExpandVmaLocked(m, r);
  }
  return EINVAL;
}

}  // namespace

Vma* CopyVmaLocked(MmStruct& mm, Vma** vmap, uint64_t addr, uint64_t len, uint64_t pgoff) {
  Vma* vma = *vmap;
  const uint64_t vma_start = vma->vm_start;
  const uint64_t end = addr + len;
  // A private anonymous VMA that never faulted has no pages whose index must stay:
  // take the destination's pgoff, to merge as a new mapping there would.
  if (vma->is_anonymous() && !vma->anon()) pgoff = addr >> kPageShift;
  const uint64_t flags = vma->vm_flags;
  const OpenFile* file = vma->vm_file.get();
  AnonVma* anon = vma->anon();
  // vma_merge_new_range() of [addr, end) carrying vma's anon_vma.
  Vma* merged = nullptr;
  if (!(flags & VM_SPECIAL)) {
    Vma* prev = VmaPrevLocked(mm, addr);
    if (prev && prev->vm_end != addr) prev = nullptr;
    Vma* next = FindVmaLocked(mm, addr);
    if (next && next->vm_start != end) next = nullptr;
    const uint64_t pages = len >> kPageShift;
    const bool left = prev && Mergeable(prev, flags, file) && IsMergeableAnonVma(prev, nullptr, anon, vma) &&
                      prev->vm_pgoff + prev->pages() == pgoff;
    bool right = next && Mergeable(next, flags, file) && IsMergeableAnonVma(next, nullptr, anon, vma) &&
                 next->vm_pgoff == pgoff + pages;
    if (left && right && !AnonCompatible(prev->anon(), next->anon())) right = false;
    if (left && right) {
      const uint64_t next_end = next->vm_end;
      VmaStartWriteLocked(mm, prev);
      // prev takes next's (or the moved VMA's) anon_vma and its whole chain if it has none.
      if (!prev->anon()) DupAnonVma(prev, next->anon() ? next : vma);
      prev->vm_flags |= (flags | next->vm_flags) & kVmSticky;  // the merged VMA keeps them
      VmaRemoveLocked(mm, next);
      VmaSetRangeLocked(mm, prev, prev->vm_start, next_end);
      VmaUnlinkFileLocked(mm, next);  // prev covers its pages now
      merged = prev;
    } else if (left) {
      VmaStartWriteLocked(mm, prev);
      DupAnonVma(prev, vma);  // the moved VMA's anon_vma and chain, if prev has none
      prev->vm_flags |= flags & kVmSticky;
      VmaSetRangeLocked(mm, prev, prev->vm_start, end);
      merged = prev;
    } else if (right) {
      VmaStartWriteLocked(mm, next);
      DupAnonVma(next, vma);
      next->vm_flags |= flags & kVmSticky;
      VmaSetRangeLocked(mm, next, addr, next->vm_end);  // vm_pgoff follows vm_start down
      merged = next;
    }
  }
  if (merged) {
    // The source merged into the result: only a never-faulted anonymous VMA can.
    if (vma_start >= merged->vm_start && vma_start < merged->vm_end) *vmap = merged;
    return merged;
  }
  Vma* n = VmaDupLocked(mm, *vma);  // vm_area_dup + anon_vma_clone (the same anon_vma) + get_file
  n->vm_start = addr;
  n->vm_end = end;
  n->vm_pgoff = pgoff;
  VmaLinkNewLocked(mm, n);  // vma_link: tree and i_mmap, write-locked
  return n;
}

uint64_t MovePageTablesLocked(MmStruct& mm, Vma* old_vma, uint64_t old_addr, uint64_t new_addr, uint64_t len) {
  if (!len) return 0;
  VmaAssertWriteLocked(mm, old_vma);
  File* f = old_vma->file();
  // take_rmap_locks(): i_mmap_rwsem for write (the anon_vma has no lock in the engine).
  struct RmapLocks {
    File* f;
    explicit RmapLocks(File* file) ABSL_NO_THREAD_SAFETY_ANALYSIS : f(file) {
      if (f) f->i_mmap_rwsem.LockWrite();
    }
    ~RmapLocks() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (f) f->i_mmap_rwsem.UnlockWrite();
    }
  } rmap(f);
  return mm.pt.MovePtes(old_addr, new_addr, len);
}

SysResult AddressSpace::Mremap(uint64_t old_addr, uint64_t old_len, uint64_t new_len, uint64_t flags,
                               uint64_t new_addr) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  VmaRemap r{.addr = old_addr, .old_len = PageAlign(old_len), .new_len = PageAlign(new_len), .flags = flags,
             .new_addr = new_addr};
  if (int e = CheckMremapParams(m, r)) {
    CountOp(OpType::kMremap, e);
    return SysResult::Err(e);
  }
  r.delta = r.old_len > r.new_len ? r.old_len - r.new_len : r.new_len - r.old_len;
  bool shrink = false;
  MmapWriteLock(m);
  int err = DoMremapLocked(m, r, &shrink);
  if (shrink) {
    // shrink_vma() with drop_lock: do_vmi_munmap() of the tail, unlocking.
    err = DoVmiMunmapUnlock(m, r.addr + r.new_len, r.addr + r.old_len);
  } else {
    MmapWriteUnlock(m);
  }
  CountOp(OpType::kMremap, err);
  if (err) return SysResult::Err(err);
  // A VM_LOCKED mapping that grew: mm_populate() of the new part, without the lock.
  if (r.mlocked && r.new_len > r.old_len) {
    const bool write = (r.mlocked_flags & (VM_WRITE | VM_SHARED)) == VM_WRITE;  // populate_vma_page_range
    for (uint64_t p = r.new_addr + r.old_len; p < r.new_addr + r.new_len; p += kPageSize)
      if (FaultInPage(m, p, write ? AccessType::kWrite : AccessType::kRead).failed()) break;
  }
  return SysResult::Ok(r.new_addr);
}

}  // namespace vmspace
