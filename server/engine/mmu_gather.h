// MmuGather: what a write section retires, freed after an RCU grace period
// (include/asm-generic/tlb.h struct mmu_gather, mm/mmu_gather.c).
#pragma once

#include <cstddef>
#include <vector>

#include "engine/frame_allocator.h"
#include "page_table.h"
#include "sync/rcu.h"

namespace vmspace {

/// What a write section retires, freed after an RCU grace period: lockless accessors
/// (the TLB-hit path) and RCU lookups may still use it (Linux's mmu_gather with
/// MMU_GATHER_RCU_TABLE_FREE, plus maple-node freeing by call_rcu). Detached VMAs go
/// their profile's own way (MmStruct::ReleaseRetiredVmasLocked).
struct MmuGather {
  struct rcu_head head;  // call_rcu's, or the link of MmStruct's polled list
  uint64_t cookie = 0;   // on MmStruct's polled list: its grace period (RcuStartPoll)
  FrameAllocator* frames = nullptr;
  int stats_slot = 0;        // the space's profile slot: frees are counted there
  int shard = 0;             // the queueing thread's ThreadShard(): frames and nodes go back there
  std::vector<void*> pages;  // private anonymous frames
  /// Frames the zaps of this gather freed at once (MmStruct::FreeZappedPagesIfUnused):
  /// they count toward kDeferFrames, so the rest is handed on at the same pace.
  size_t freed_at_once = 0;
  PageTable::TableGather tables;
  std::vector<void*> nodes;  // retired VMA-index nodes
  bool empty() const { return pages.empty() && tables.empty() && nodes.empty(); }
  size_t size() const { return pages.size() + tables.dirs.size() + tables.ptes.size() + nodes.size(); }
  /// Hands g to call_rcu (deleted in the callback), or deletes it if empty. The frees
  /// are counted in the statistics of `stats_slot` (the callback thread has none).
  static void Queue(MmuGather* g, FrameAllocator& frames, int stats_slot);
  /// Sets g's frames, stats_slot and shard (the calling thread's): false if g is empty
  /// (then deleted).
  static bool Prepare(MmuGather* g, FrameAllocator& frames, int stats_slot);
  /// Frees everything now (the callback; also used when no reader can exist).
  static void FreeNow(MmuGather* g);
};

/// The call_rcu callback of a gather (tlb_remove_table_rcu): MmuGather::FreeNow of the
/// gather whose `head` h is.
void FreeGatherCallback(struct rcu_head* h);

}  // namespace vmspace
