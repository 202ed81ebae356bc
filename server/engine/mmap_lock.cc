// mmap_lock write sections: mmap_write_lock / mmap_write_unlock and what the end of a
// section publishes and retires (include/linux/mmap_lock.h; vma_end_write_all).
#include "mm.h"
#include "vma.h"

namespace vmspace {

void MmStruct::MmapWriteLock() {
  mmap_lock.LockWrite();
  // Before this section's stores take nodes: the owner's nodes from its earlier calls,
  // still hot, are the first the stores reuse.
  if (!sole_nodes.empty() || !sole_vmas.empty()) ReuseSoleLocked(false);
}

void MmStruct::EndWriteSectionLocked() {
  idx->Commit();
  // Through a vector of this space's, so that the gather (and its node vector, reserved
  // once at kDeferBatch: growing it by doubling for every batch cost malloc_consolidate)
  // exists only while it holds something: an index without RCU readers frees its nodes
  // at once, and its gather holds only munmap's page tables and frames.
  if (!sole_nodes.empty() || !sole_vmas.empty()) ReuseSoleLocked(false);
  idx->TakeRetired(retired_nodes);
  if (retired_nodes.empty()) {
    // nothing retired (or an index that frees its nodes at once)
  } else if (SoleRcuReaderLocked()) {
    // Only this thread has ever entered the space: no other thread can hold these
    // nodes, and this one holds none past its next quiescent state (the end of this
    // call); a later write section takes them back (ReuseSoleLocked).
    sole_nodes.insert(sole_nodes.end(), retired_nodes.begin(), retired_nodes.end());
    retired_nodes.clear();
    sole_owner = RcuThreadId();
    sole_qs = RcuQsCount();
  } else {
    std::vector<void*>& n = GatherLocked().nodes;
    if (n.capacity() == 0) n.reserve(kDeferBatch);
    n.insert(n.end(), retired_nodes.begin(), retired_nodes.end());
    retired_nodes.clear();
    if (retired_nodes.capacity() > 256) std::vector<void*>().swap(retired_nodes);  // after a large unmap
  }
  // vma_end_write_all(): only mmap_lock writers write it, so no atomic increment; the
  // release (smp_store_release in Linux) orders the section's VMA changes before it.
  mm_lock_seq.store(mm_lock_seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void MmStruct::MmapWriteUnlock() {
  EndWriteSectionLocked();
  ReleaseRetiredVmasLocked(*this);
  FlushGatherIfFullLocked();
  mmap_lock.UnlockWrite();
}

}  // namespace vmspace
