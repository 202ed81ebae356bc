// SPDX-License-Identifier: Apache-2.0
// mmap_lock write sections: mmap_write_lock / mmap_write_unlock and what the end of a
// section publishes and retires (include/linux/mmap_lock.h; vma_end_write_all).
#include "mm.h"
#include "mmap_lock.h"
#include "mmu_gather.h"
#include "vma.h"

namespace vmspace {

void MmapWriteLock(MmStruct& mm) {
  mm.mmap_lock.LockWrite();
  // Before this section's stores take nodes: the owner's nodes from its earlier calls,
  // still hot, are the first the stores reuse.
  if (!mm.sole_nodes.empty() || !mm.sole_vmas.empty()) ReuseSoleLocked(mm, false);
}

void EndWriteSectionLocked(MmStruct& mm) {
  mm.idx->Commit();
  // Through a vector of this space's, so that the gather (and its node vector, reserved
  // once at kDeferBatch: growing it by doubling for every batch cost malloc_consolidate)
  // exists only while it holds something: an index without RCU readers frees its nodes
  // at once, and its gather holds only munmap's page tables and frames.
  if (!mm.sole_nodes.empty() || !mm.sole_vmas.empty()) ReuseSoleLocked(mm, false);
  mm.idx->TakeRetired(mm.retired_nodes);
  if (mm.retired_nodes.empty()) {
    // nothing retired (or an index that frees its nodes at once)
  } else if (SoleRcuReaderLocked(mm)) {
    // Only this thread has ever entered the space: no other thread can hold these
    // nodes, and this one holds none past its next quiescent state (the end of this
    // call); a later write section takes them back (ReuseSoleLocked).
    mm.sole_nodes.insert(mm.sole_nodes.end(), mm.retired_nodes.begin(), mm.retired_nodes.end());
    mm.retired_nodes.clear();
    mm.sole_owner = RcuThreadId();
    mm.sole_qs = RcuQsCount();
  } else {
    std::vector<void*>& n = GatherLocked(mm).nodes;
    if (n.capacity() == 0) n.reserve(MmStruct::kDeferBatch);
    n.insert(n.end(), mm.retired_nodes.begin(), mm.retired_nodes.end());
    mm.retired_nodes.clear();
    if (mm.retired_nodes.capacity() > 256) std::vector<void*>().swap(mm.retired_nodes);  // after a large unmap
  }
  // vma_end_write_all(): only mmap_lock writers write it, so no atomic increment; the
  // release (smp_store_release in Linux) orders the section's VMA changes before it.
  mm.mm_lock_seq.store(mm.mm_lock_seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void MmapWriteUnlock(MmStruct& mm) {
  EndWriteSectionLocked(mm);
  ReleaseRetiredVmasLocked(mm);
  FlushGatherIfFullLocked(mm);
  mm.mmap_lock.UnlockWrite();
}

}  // namespace vmspace
