// SPDX-License-Identifier: Apache-2.0
// MmuGather: what a write section retires, freed after an RCU grace period
// (include/asm-generic/tlb.h struct mmu_gather, mm/mmu_gather.c), and a space's
// gathers: the current one, the polled list, and the sole reader's reuse; defined in
// mmu_gather.cc.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/frame_allocator.h"
#include "mm.h"
#include "page_table.h"
#include "sync/rcu.h"

namespace vmspace {

/// What a write section retires, freed after an RCU grace period: lockless accessors
/// (the TLB-hit path) and RCU lookups may still use it (Linux's mmu_gather with
/// MMU_GATHER_RCU_TABLE_FREE, plus maple-node freeing by call_rcu). Detached VMAs go
/// their profile's own way (ReleaseRetiredVmasLocked).
struct MmuGather {
  struct rcu_head head;  // call_rcu's, or the link of MmStruct's polled list
  uint64_t cookie = 0;   // on MmStruct's polled list: its grace period (RcuStartPoll)
  FrameAllocator* frames = nullptr;
  int stats_slot = 0;        // the space's profile slot: frees are counted there
  int shard = 0;             // the queueing thread's ThreadShard(): frames and nodes go back there
  std::vector<void*> pages;  // private anonymous frames
  /// Frames the zaps of this gather freed at once (FreeZappedPagesIfUnused):
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

/// Whether the calling thread is the only one that has entered the space, read with an
/// RMW (see NoteRcuReader), so what it unlinked before is unreachable to any thread
/// whose mark comes after. Once shared, a plain load answers (shared is for good).
bool SoleRcuReaderLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// sole_nodes back into the index's node cache and sole_vmas onto the VMA cache's
/// free list if the calling thread is their owner and has passed a quiescent state
/// since it retired them (counted as Event::kRcuSoleReuses); else, from another
/// thread or with `flush`, into the gather and the VMA cache's RCU batch (a grace
/// period from now); else (the owner, still in that call) nothing.
void ReuseSoleLocked(MmStruct& mm, bool flush) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Frees the gather's frames at once if no thread can be using them
/// (FreeZappedPagesIfUnused), then hands it to call_rcu once it holds kDeferBatch
/// objects or its zaps took kDeferFrames frames (else it keeps collecting across
/// write sections; deferred_any is set while it or vma_cache's batch holds anything).
void FlushGatherIfFullLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// This write section's gather, created on first use.
MmuGather& GatherLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Hands the gather on now (if any) to the polled list, frees the polled gathers whose
/// grace period ended, and queues vma_cache's batch of freed VMAs, polling the
/// queued ones (VmaCache::FlushRcu).
void FlushGatherLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Frees the polled gathers whose grace period has ended, oldest first; `scan`: may
/// scan the threads (RcuPollState) once.
void FreePolledGathersLocked(MmStruct& mm, bool scan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Hands the polled list's oldest gather (keep > 0: all but the newest `keep`) to
/// call_rcu.
void QueuePolledGathersLocked(MmStruct& mm, int keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Unlinks and returns the polled list's oldest gather (the list must not be empty).
MmuGather* PopPolledLocked(MmStruct& mm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
