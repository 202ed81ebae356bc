// SPDX-License-Identifier: Apache-2.0
// mmap_lock write sections (include/linux/mmap_lock.h mmap_write_lock /
// mmap_write_unlock, with what the end of a section publishes and retires), defined in
// mmap_lock.cc. Read sections take MmStruct::mmap_lock directly.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// mmap_write_lock(); then the index nodes and VMAs of sole_nodes / sole_vmas the
/// caller may reuse go back to the space's caches (ReuseSoleLocked), before the
/// section's stores and allocations.
void MmapWriteLock(MmStruct& mm) ABSL_EXCLUSIVE_LOCK_FUNCTION(mm.mmap_lock);

/// mmap_write_unlock(): publishes the index to RCU readers, queues what the section
/// retired (in batches), advances mm_lock_seq (releasing the section's VMA write
/// locks), then releases mmap_lock.
void MmapWriteUnlock(MmStruct& mm) ABSL_UNLOCK_FUNCTION(mm.mmap_lock);

/// The end of a write section short of the unlock, shared by MmapWriteUnlock and
/// mmap_write_downgrade: publishes the index to RCU readers, moves its retired nodes
/// into the gather, and advances mm_lock_seq (vma_end_write_all).
void EndWriteSectionLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
