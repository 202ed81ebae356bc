// SPDX-License-Identifier: Apache-2.0
// The anonymous reverse map (mm/rmap.c, include/linux/rmap.h; Linux 6.18), defined in
// rmap.cc: anon_vma_prepare, anon_vma_clone, anon_vma_fork, unlink_anon_vmas and the
// anonymous rmap walk (rmap_walk_anon); the metadata of anonymous frames that fork
// shares (PageMeta: the map count, the anon_vma and index of Linux's struct page); and
// page_mkclean_one for file pages (the file rmap walk itself is in filemap.cc).
//
// Frame metadata. Linux keeps a struct page for every frame (vmemmap); the engine's
// FrameAllocator hands out raw 4 KiB frames, and a private anonymous frame mapped by
// one PTE needs none: its anon_vma is its VMA's, its index its address's, its map
// count 1. Only when fork shares a frame (copy_present_pte) does it get a PageMeta,
// found by frame address in a sharded table, and every PTE mapping it carries the
// software bit kPteSharedAnon; it keeps both until the last mapping goes. So the fault
// path of a space that never forked does no more work than before (a write fault on a
// read-only PTE tests one more bit), and a zap tests the bit of each PTE it clears:
// only PTEs with the bit look the table up, drop the count, and free the frame at zero
// (after an RCU grace period: another space's thread may still be accessing it).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// find_mergeable_anon_vma(): an adjacent VMA's anon_vma if the two could merge and the
/// neighbour's chain is singular (reusable_anon_vma).
AnonVma* FindMergeableAnonVmaLocked(MmStruct& mm, Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// anon_vma_prepare(): gives v an anon_vma (reused from a neighbour or new) and the AVC
/// linking them. Takes the anon_vma's root lock, then anon_vma_lock (as
/// __anon_vma_prepare takes anon_vma_lock_write, then mm->page_table_lock).
void AnonVmaPrepareLocked(MmStruct& mm, Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) ABSL_LOCKS_EXCLUDED(mm.anon_vma_lock);

/// anon_vma_clone(): chains dst (new, detached, no chain) to every anon_vma src is
/// chained to. dst->anon_vma is src's (vm_area_dup copied it: a split), or null
/// (anon_vma_fork's call), in which case an anon_vma of the chain that no VMA uses as
/// its own and that has fewer than two children becomes dst's (6.18's reuse rule; a
/// root never qualifies: it counts itself as a child). Takes the root's lock. Caller
/// holds mmap_lock for write of dst's space.
void AnonVmaClone(Vma* dst, const Vma* src);

/// anon_vma_fork(): gives the child VMA `vma` (a copy of pvma, anon_vma null) pvma's
/// chain and an anon_vma of its own: a reused one (AnonVmaClone) or a new one whose
/// parent is pvma's and whose root is the tree's. No-op if pvma has no anon_vma.
/// `child` is vma's space (its id counter names the new anon_vma). Caller holds both
/// spaces' mmap_lock for write.
void AnonVmaFork(MmStruct& child, Vma* vma, const Vma* pvma) ABSL_LOCKS_EXCLUDED(child.anon_vma_lock);

/// dup_anon_vma(): if src has an anon_vma and dst none, dst gets src's anon_vma and
/// chain (a merge that lets dst cover src's pages). Caller holds mmap_lock for write and
/// dst's VMA write lock.
void DupAnonVma(Vma* dst, const Vma* src);

/// unlink_anon_vmas(): removes v's AVCs from their anon_vmas (an anon_vma left with
/// none drops its parent's child count and its list's reference) and clears
/// v->anon_vma. Takes the root's lock. Caller holds mmap_lock (v is being freed).
void UnlinkAnonVmas(Vma* v);

/// Per-frame metadata of a private anonymous frame that fork shared (struct page's
/// _mapcount, mapping (the anon_vma) and index). Created by copy_present_pte with
/// mapcount 2, destroyed when the count reaches 0. Holds a reference on anon_vma.
struct PageMeta {
  std::atomic<int32_t> mapcount{0};
  AnonVma* anon_vma = nullptr;  // folio_anon_vma(): the anon_vma the page was faulted under
  uint64_t index = 0;           // page->index: the page's offset in pages (vm_pgoff units)
};

/// The metadata of `frame`, or null. The caller maps the frame (its PTE carries
/// kPteSharedAnon, under a lock that keeps the PTE), which keeps the metadata alive.
PageMeta* PageMetaOf(void* frame);

/// folio_try_dup_anon_rmap_pte() (copy_present_pte): one more PTE maps `frame`. Without
/// metadata yet (the PTE lacked kPteSharedAnon) it is created with mapcount 2 (the
/// existing mapping and the new one), naming anon_vma a and page index `index`.
/// Caller holds the source PTE's lock.
void PageDupAnonRmap(void* frame, bool has_meta, AnonVma* a, uint64_t index);

/// folio_remove_rmap_pte() for a frame whose PTE carried kPteSharedAnon: drops one
/// mapping; returns true if it was the last (the metadata is gone and the caller frees
/// the frame with FreeFrameAfterGracePeriod).
bool PageRemoveAnonRmap(void* frame);

/// folio_mapcount(): the number of PTEs mapping a frame with metadata.
int32_t PageMapcount(void* frame);

/// Frees a private anonymous frame after an RCU grace period (call_rcu): for frames
/// other spaces mapped, whose threads' accesses (which run under RCU) may still use it.
void FreeFrameAfterGracePeriod(FrameAllocator& frames, void* frame);

/// Frame metadata entries existing now (for tests: 0 when no shared frame is mapped).
uint64_t PageMetaCount();

/// rmap_walk_anon(): calls fn(vma, address) for every VMA chained to anon_vma `a` whose
/// range covers page `index` (with `only`, only VMAs of that space). Holds a's root lock
/// for the walk and reads each VMA's range, which its space changes under its mmap_lock
/// without the anon_vma lock (unlike Linux's vma_prepare): the caller holds the
/// mmap_lock of every space whose VMAs it reads (`only`: that space's), or knows them
/// quiet.
void RmapWalkAnon(AnonVma* a, uint64_t index, const std::function<void(Vma*, uint64_t)>& fn,
                  const MmStruct* only = nullptr);

/// Whether v is chained to anon_vma a (one of v's AVCs names it). Takes a's root lock.
bool VmaChainedTo(const Vma* v, AnonVma* a);

/// page_mkclean_one(): write-protects the PTE at addr of shared file VMA v if it maps
/// a page-cache page writable. Caller holds v's File's i_mmap_rwsem (v is linked, so
/// its page tables stay); takes the PTE lock.
void PageMkcleanOne(MmStruct& mm, Vma* v, uint64_t addr);

}  // namespace vmspace
