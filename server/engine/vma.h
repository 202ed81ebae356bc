// SPDX-License-Identifier: Apache-2.0
// The VMA operations of mm/vma.c (mm/vma.h, Linux 6.18), defined in vma.cc: lookups
// (find_vma & co.), link/unlink (also into a file's i_mmap), set range, split, merge
// and unmap. Every change needs mmap_lock for write and write-locks each VMA it changes
// (vma_start_write).
//
// Also declared here, defined in vma_init.cc: vm_area_alloc / vm_area_dup /
// vm_area_free of the space's VMAs (mm/vma_init.c). They take the MmStruct, whose
// VmaCache (vma_init.h) mm.h embeds, so vma_init.h cannot declare them itself.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// Test-only: called by VmaLinkNewLocked between the VMA-tree insert and the i_mmap
/// insert of a new file VMA (arguments: the space, the VMA's start), on the mmap
/// thread, which holds mmap_lock for write (and, with i_mmap_scope wide, the file's
/// i_mmap_rwsem for write). Null in production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_mmap_region_test_hook{nullptr};

/// find_vma(): the first VMA with vm_end > addr, or null.
inline Vma* FindVmaLocked(MmStruct& mm, uint64_t addr) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) { return mm.idx->FindVma(addr); }

/// find_vma_intersection(): the first VMA overlapping [start, end), or null.
inline Vma* FindVmaIntersectionLocked(MmStruct& mm, uint64_t start, uint64_t end) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) {
  Vma* v = FindVmaLocked(mm, start);
  return v && v->vm_start < end ? v : nullptr;
}

/// vma_next(): the VMA after v, or null.
inline Vma* VmaNextLocked(MmStruct& mm, const Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) { return mm.idx->NextFrom(v->vm_end); }

/// vma_prev() at addr: the last VMA that starts below addr, or null.
inline Vma* VmaPrevLocked(MmStruct& mm, uint64_t addr) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) { return mm.idx->PrevOf(addr); }

/// The first VMA that starts at or above addr, or null.
inline Vma* VmaNextFromLocked(MmStruct& mm, uint64_t addr) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) { return mm.idx->NextFrom(addr); }

/// vma_is_sealed() (mm/vma.h, Linux 6.18): v has VM_SEALED (mseal).
inline bool VmaIsSealed(const Vma* v) { return v->vm_flags & VM_SEALED; }
/// can_modify_vma() (mm/vma.h): false for a sealed VMA, whose range, flags and place
/// munmap, mprotect, mremap and MAP_FIXED must leave alone (they answer EPERM).
inline bool CanModifyVma(const Vma* v) { return !VmaIsSealed(v); }
/// can_madvise_modify() (mm/madvise.c, Linux 6.17+): false if `behavior` discards data
/// (MADV_DONTNEED, MADV_DONTNEED_LOCKED, MADV_FREE, MADV_REMOVE, MADV_DONTFORK,
/// MADV_WIPEONFORK, MADV_GUARD_INSTALL) of a sealed private anonymous VMA the process
/// cannot write (madvise then answers EPERM for that VMA). Defined in mseal.cc.
bool CanMadviseModify(const Vma* v, int behavior);

/// vma_link(): adds a new (detached, unlocked, from VmaAllocLocked) v to the tree,
/// write-locked.
void VmaInsertLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Write-locks, unlinks and detaches v; it is released at the section's end
/// (ReleaseRetiredVmasLocked).
void VmaRemoveLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// vma_set_range() + the tree update: v's range becomes [start, end) (vm_pgoff moves
/// with vm_start). Write-locks v.
void VmaSetRangeLocked(MmStruct& mm, Vma* v, uint64_t start, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// __split_vma(): splits v at addr. With new_below the new VMA is the lower part
/// [vm_start, addr) and v keeps [addr, vm_end); else the new VMA is the upper part.
/// Returns the new VMA. No map_count check (callers check, as split_vma does).
Vma* SplitVmaLocked(MmStruct& mm, Vma* v, uint64_t addr, bool new_below) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// is_mergeable_anon_vma() (mm/vma.c, Linux 6.18): may the range of `src` (null for a
/// new range; `copied_from` the VMA an mremap moves), which brings `src_anon`, merge
/// into its neighbour `tgt`? Not when it would join the anon_vma of a VMA that a fork
/// made and that still has its parents' anon_vmas in its chain
/// (vma_had_uncowed_parents: more than one anon_vma_chain), else when at most one of
/// the two has an anon_vma, or both the same. Needs mmap_lock (read or write).
bool IsMergeableAnonVma(const Vma* tgt, const Vma* src, AnonVma* src_anon, const Vma* copied_from = nullptr);

/// VM_STICKY (include/linux/mm.h): flags that a merge ignores (VM_IGNORE_MERGE) and
/// that the merged VMA keeps when any of the VMAs it joins has them.
constexpr uint64_t kVmSticky = VM_MAYBE_GUARD;

/// vma_merge_new_range(): merges the new range [start, end) (free) with flags, pgoff
/// and the anon_vma `anon` (vmg->anon_vma: null for a new mapping, the VMA's own for
/// mremap's vma_merge_extend) into prev and/or next if compatible. `next` is
/// find_vma(start), which the caller has already looked up (__mmap_region's vma_find:
/// the first VMA above the range, or null). Returns the VMA that now covers the range,
/// or null if no merge was possible.
Vma* VmaMergeNewRangeLocked(MmStruct& mm, uint64_t start, uint64_t end, uint64_t flags, uint64_t pgoff,
                            const OpenFile* file, Vma* next, AnonVma* anon = nullptr)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// The same, looking next up.
inline Vma* VmaMergeNewRangeLocked(MmStruct& mm, uint64_t start, uint64_t end, uint64_t flags, uint64_t pgoff,
                                   const OpenFile* file = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock) {
  return VmaMergeNewRangeLocked(mm, start, end, flags, pgoff, file, FindVmaLocked(mm, start));
}

/// vma_modify_flags() -> vma_merge_existing_range() / split_vma(): gives [start, end)
/// (inside `middle`) the flags `newflags` by merging with prev/next or splitting.
/// Returns the VMA covering [start, end), or null with *err = ENOMEM (split at
/// max_map_count; an earlier split of this call stays, as in Linux). Does not set
/// the flags itself, but a merge leaves the sticky flags (kVmSticky) of every VMA it
/// joins on the result: callers set `newflags | (result->vm_flags & kVmSticky)`
/// (vma_modify_flags' residual flags).
Vma* VmaModifyFlagsLocked(MmStruct& mm, Vma* middle, uint64_t start, uint64_t end, uint64_t newflags, int* err)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// vms_gather_munmap_vmas() + vms_complete_munmap_vmas(): removes [start, end).
/// Returns 0 or ENOMEM (middle split at map_count >= max). `nr_accounted` (if set)
/// gets the VM_ACCOUNT pages removed. With free_tables, page tables no longer
/// covered by any VMA are freed (munmap); MAP_FIXED replacement keeps them.
int UnmapRangeLocked(MmStruct& mm, uint64_t start, uint64_t end, bool free_tables, uint64_t* nr_accounted)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// do_vmi_munmap() with `unlock` (vma.cc): removes [start, end) under mmap_lock write,
/// downgrades it to read for the page-table teardown (vms_complete_munmap_vmas), and
/// releases it in every case. Returns 0 or ENOMEM (a middle split at max_map_count:
/// nothing removed). Caller holds mmap_lock for write.
int DoVmiMunmapUnlock(MmStruct& m, uint64_t start, uint64_t end) ABSL_UNLOCK_FUNCTION(m.mmap_lock);

/// vma_link_file() / __vma_link_file(): adds file VMA v to its File's i_mmap (no-op
/// for anonymous VMAs). Before v can install a PTE: v is new and write-locked.
void VmaLinkFileLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// __mmap_region's link of a new VMA v (vma_iter_store + vma_link_file): into the
/// VMA tree and, for a file VMA, its File's i_mmap, with i_mmap_rwsem held for write
/// across both (opts.i_mmap_scope wide) or only around the i_mmap insert (narrow).
/// With the test hook set (g_mmap_region_test_hook), v is published not
/// write-locked, so a fault can reach it at once (Linux 6.4-rc before "mm: lock newly
/// mapped VMA which can be modified after it becomes visible"), and the hook runs
/// between the two inserts.
void VmaLinkNewLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// unlink_file_vma(): removes v from its File's i_mmap, once its PTEs are zapped or
/// covered by a VMA that took its place (a merge). Takes i_mmap_rwsem for write.
void VmaUnlinkFileLocked(MmStruct& mm, Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// max_map_count's check (`map_count >= max_map_count`, or `>` with `over`) joined by
/// the budget's HasRoom(kVmaChangeBytes): true if a change may add a VMA.
bool MayAddVmaLocked(MmStruct& mm, bool over = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// For a call that failed with ENOMEM: if the budget refused a charge since it read
/// `failcnt_before` (MemoryBudget::failcnt), waits for the frees already queued
/// (FrameAllocator::Reclaim: VMAs and nodes freed after a grace period) and returns
/// true, so the caller tries once more, as the kernel reclaims before it fails.
/// Caller holds no engine lock.
bool ReclaimAfterRefusal(MmStruct& mm, uint64_t failcnt_before) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

/// Runs `op` (a syscall's mmap_lock part, taking and dropping the lock itself; returns
/// 0 or an errno) and, if it failed with ENOMEM after a budget refusal, once more
/// after ReclaimAfterRefusal. Used by mmap, munmap and mprotect (the calls that add VMAs).
template <typename Op>
int RetryAfterReclaim(MmStruct& mm, Op&& op) ABSL_LOCKS_EXCLUDED(mm.mmap_lock) {
  const uint64_t refused = mm.frames.budget().failcnt();
  int e = op();
  if (e == ENOMEM && ReclaimAfterRefusal(mm, refused)) e = op();
  return e;
}

// ---------------------------------------------------------------- vma_init.cc

/// vm_area_alloc(): an empty detached VMA: kRefcnt reuses one from vma_cache if it has
/// any; kRwsem allocates its vma_lock with it.
Vma* VmaAllocLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// vm_area_dup(): a detached copy of o (Vma::InitFrom) from VmaAllocLocked.
Vma* VmaDupLocked(MmStruct& mm, const Vma& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// vm_area_free() of the VMAs detached this section (retired_vmas), once nothing of
/// the section uses them (after munmap's page-table teardown): kNone deletes them
/// (no lockless reader exists), kRwsem hands each to its own call_rcu (freed with its
/// vma_lock after a grace period), kRefcnt empties each into vma_cache at once.
/// (munmap calls it after mmap_write_downgrade, still the only user of both lists.)
void ReleaseRetiredVmasLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Deletes a VMA that is still charged (live or retired at exit_mmap) with its
/// vm_lock, uncharging it (kVmas); VMAs freed through vma_cache are uncharged there.
void VmaFree(MmStruct& mm, Vma* v);

}  // namespace vmspace
