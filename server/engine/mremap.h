// SPDX-License-Identifier: Apache-2.0
// mremap(2) (mm/mremap.c, Linux 6.18), defined in mremap.cc: the syscall is
// AddressSpace::Mremap; these are the steps of a move that other code may reuse.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// copy_vma() (mm/vma.c): a VMA for [addr, addr+len) with *vmap's flags, file and
/// anon_vma at file offset `pgoff` (pages), merged into an adjacent compatible VMA if
/// possible (vma_merge_new_range), else a new one (vm_area_dup, vma_link). A private
/// anonymous VMA that never faulted (no anon_vma) takes pgoff = addr >> 12 instead, to
/// merge more; one that did keeps its pgoff, so its pages keep their linear_page_index
/// and it merges only with VMAs of the same anon_vma and contiguous pgoff. If the
/// source merged into the result (only possible for that never-faulted case), *vmap
/// becomes the result. The destination range must be free. The result is
/// write-locked. Returns it (never null: no allocation fails here).
Vma* CopyVmaLocked(MmStruct& mm, Vma** vmap, uint64_t addr, uint64_t len, uint64_t pgoff)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// move_page_tables() (mm/mremap.c): moves the PTEs of [old_addr, old_addr+len) of
/// `old_vma` to new_addr (PageTable::MovePtes) under the rmap locks (take_rmap_locks:
/// the file's i_mmap_rwsem for write; the engine's anon_vma has no lock), so a truncate
/// walking i_mmap finds each page in the old or in the new VMA, never in neither.
/// Both VMAs must be write-locked. Returns the bytes moved (short only if a page table
/// could not be allocated).
uint64_t MovePageTablesLocked(MmStruct& mm, Vma* old_vma, uint64_t old_addr, uint64_t new_addr, uint64_t len)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
