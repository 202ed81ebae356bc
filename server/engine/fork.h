// SPDX-License-Identifier: Apache-2.0
// fork's copy of an address space (dup_mmap: kernel/fork.c until Linux 6.15, mm/mmap.c
// since "mm: move dup_mmap() to mm", Lorenzo Stoakes, 2025; copy_page_range and
// copy_present_pte: mm/memory.c; Linux 6.18), defined in fork.cc. The public call is
// AddressSpace::DupMmap.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// Test-only: called by DupMmapLocked after copy_page_range of each VMA (arguments: the
/// parent space, the VMA's start), on the forking thread, which holds both spaces'
/// mmap_lock for write and, with fork_vma_lock on, the parent VMA's write lock. Null in
/// production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_dup_mmap_test_hook{nullptr};

/// Test-only: called by CopyPageRangeLocked for each PTE table, after it read the
/// parent's entries and before it installs the child's (arguments: the parent space, the
/// table's first address), with both tables' PTE locks held. Null in production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_copy_pte_range_test_hook{nullptr};

/// copy_page_range(): copies the PTEs of parent VMA src into child VMA dst (same range)
/// if vma_needs_copy() (src has an anon_vma, or is VM_PFNMAP/VM_MIXEDMAP/VM_MAYBE_GUARD:
/// VM_COPY_ON_FORK); else the child faults its pages in again (file and shared
/// mappings). Guard markers (MADV_GUARD_INSTALL) are copied as they are
/// (copy_nonpresent_pte's copy_pte_marker). copy_present_pte: a
/// private anonymous frame becomes shared (kPteSharedAnon in both PTEs, its map count
/// raised: PageDupAnonRmap) and, in a COW mapping (private, may write), write-protected
/// in both; page-cache pages and the zero page are mapped as they are. Per table, as
/// copy_pte_range, the child's PTE lock is held and the parent's taken nested for both
/// the read and the install: the child's file VMAs are in i_mmap already, so a truncate
/// or hole punch zapping both sees each page-cache PTE in the parent before the copy,
/// or in the child after it (never a copy of a PTE it cleared in the parent, installed
/// after it walked the child, mapping a page it then frees). Returns 0, or ENOMEM when a child page
/// table is refused (the frame limit). Caller holds both spaces' mmap_lock for write.
int CopyPageRangeLocked(MmStruct& dst_mm, Vma* dst, MmStruct& src_mm, Vma* src)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(dst_mm.mmap_lock, src_mm.mmap_lock);

/// dup_mmap(): fills the new, empty space `mm` with oldmm's VMAs: VM_DONTCOPY ones left
/// out, VM_LOCKED cleared, each child VMA chained to the parent's anon_vmas with one of
/// its own (anon_vma_fork; none for VM_WIPEONFORK, whose child VMA starts empty), file
/// VMAs linked into their File's i_mmap, page tables copied (CopyPageRangeLocked).
/// With the profile's fork_vma_lock each parent VMA is write-locked before it is copied
/// (vma_start_write), so no fault under the VMA lock runs on it until the end; before it
/// unlocks, it waits until no parent thread is still accessing a frame through a PTE it
/// write-protected (flush_tlb_mm). Returns 0 or ENOMEM (budget or frame limit, or a
/// VM_ACCOUNT VMA of more pages than oldmm's commit_limit_pages: the caller destroys
/// the partly built child). Takes oldmm's mmap_lock for write, then
/// mm's (nested); caller holds no engine lock.
int DupMmap(MmStruct& mm, MmStruct& oldmm) ABSL_LOCKS_EXCLUDED(mm.mmap_lock, oldmm.mmap_lock);

}  // namespace vmspace
