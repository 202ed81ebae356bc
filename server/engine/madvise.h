// SPDX-License-Identifier: Apache-2.0
// madvise's helpers that other engine files call (madvise.cc; mm/madvise.c and the
// lazyfree part of mm/vmscan.c, Linux 6.18). AddressSpace::Madvise is the syscall.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// Memory pressure on MADV_FREE pages (shrink_folio_list's lazyfree case, mm/vmscan.c):
/// every private anonymous page of the space still marked kPteLazyFree (not written
/// since MADV_FREE) is unmapped and freed; a later read finds the zero page, a write a
/// new zeroed frame. Returns the pages freed. Takes mmap_lock for read and each PTE
/// lock; called by an access that found no frame (AccessPage) and by
/// AddressSpace::ReclaimLazyFree.
uint64_t ShrinkLazyFree(MmStruct& mm) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

}  // namespace vmspace
