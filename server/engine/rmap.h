// SPDX-License-Identifier: Apache-2.0
// anon_vma preparation and page_mkclean_one (mm/rmap.c, include/linux/rmap.h; Linux
// 6.18), defined in rmap.cc. The file rmap walk itself is in filemap.cc.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// find_mergeable_anon_vma(): an adjacent VMA's anon_vma if the two could merge.
AnonVma* FindMergeableAnonVmaLocked(MmStruct& mm, Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// anon_vma_prepare(): gives v an anon_vma (reused from a neighbour or new). Takes
/// anon_vma_lock.
void AnonVmaPrepareLocked(MmStruct& mm, Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) ABSL_LOCKS_EXCLUDED(mm.anon_vma_lock);

/// page_mkclean_one(): write-protects the PTE at addr of shared file VMA v if it maps
/// a page-cache page writable. Caller holds v's File's i_mmap_rwsem (v is linked, so
/// its page tables stay); takes the PTE lock.
void PageMkcleanOne(MmStruct& mm, Vma* v, uint64_t addr);

}  // namespace vmspace
