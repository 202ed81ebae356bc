// SPDX-License-Identifier: Apache-2.0
// MmuGather: the RCU-deferred free of what a write section retired (mm/mmu_gather.c
// tlb_remove_table_rcu, with MMU_GATHER_RCU_TABLE_FREE).
#include "mmu_gather.h"

#include <cstddef>
#include <vector>

#include "engine/per_thread.h"
#include "engine/stats.h"
#include "memory.h"
#include "mm.h"
#include "vma_index.h"

namespace vmspace {

void FreeGatherCallback(struct rcu_head* h) {
  RcuCallbackBegin(h);
  MmuGather::FreeNow(reinterpret_cast<MmuGather*>(reinterpret_cast<char*>(h) - offsetof(MmuGather, head)));
  RcuCallbackEnd();
}

void MmuGather::FreeNow(MmuGather* g) {
  StatsSlotScope slot_scope(g->stats_slot);
  g->frames->FreeBatch(g->pages, g->shard);
  PageTable::DeleteTables(g->tables);
  VmaIndex::DeleteRetired(g->nodes, &g->frames->budget(), g->shard);
  delete g;
}

bool MmuGather::Prepare(MmuGather* g, FrameAllocator& frames, int stats_slot) {
  if (g->empty()) {
    delete g;
    return false;
  }
  g->frames = &frames;
  g->stats_slot = stats_slot;
  g->shard = ThreadShard();
  return true;
}

void MmuGather::Queue(MmuGather* g, FrameAllocator& frames, int stats_slot) {
  if (Prepare(g, frames, stats_slot)) CallRcu(&g->head, &FreeGatherCallback);
}

// ---------------------------------------------------------------- a space's gathers

void FlushGatherIfFullLocked(MmStruct& mm) {
  MmuGather* g = mm.gather;  // (not created here: a space that retires nothing has none)
  if (g) {
    const size_t zapped = g->pages.size();
    if (FreeZappedPagesIfUnused(mm, g->pages)) g->freed_at_once += zapped;  // no grace period needed
  }
  if (g && (g->size() >= MmStruct::kDeferBatch || g->pages.size() + g->freed_at_once >= MmStruct::kDeferFrames)) {
    FlushGatherLocked(mm);
  } else if (mm.polled_head) {
    FreePolledGathersLocked(mm, ++mm.polled_skips >= MmStruct::kPollScanEvery);
  }
  g = mm.gather;
  if ((!g || g->empty()) && !mm.vma_cache.rcu_pending() && !mm.polled_head && !mm.vma_cache.rcu_waiting() &&
      mm.sole_nodes.empty() && mm.sole_vmas.empty())
    return;
  mm.deferred_any.store(true, std::memory_order_relaxed);
  // Charged memory waits: see FlushDeferredFrees (an idle space's polled list too).
  if ((g && (!g->pages.empty() || !g->tables.empty())) || mm.polled_head)
    mm.deferred_pending.store(true, std::memory_order_relaxed);
}

MmuGather& GatherLocked(MmStruct& mm) {
  if (!mm.gather) mm.gather = new MmuGather;
  return *mm.gather;
}

void FlushGatherLocked(MmStruct& mm) {
  MmuGather* g = mm.gather;
  mm.gather = nullptr;
  if (g && MmuGather::Prepare(g, mm.frames, mm.stats_slot)) {
    g->cookie = RcuStartPoll();
    g->head.next = nullptr;
    if (mm.polled_tail) mm.polled_tail->head.next = &g->head;
    else mm.polled_head = g;
    mm.polled_tail = g;
    if (++mm.polled_count > MmStruct::kMaxPolledGathers) QueuePolledGathersLocked(mm, MmStruct::kMaxPolledGathers);
  }
  if (mm.polled_head) FreePolledGathersLocked(mm, true);
  mm.vma_cache.FlushRcu();
}

void FreePolledGathersLocked(MmStruct& mm, bool scan) {
  if (scan) mm.polled_skips = 0;
  while (MmuGather* g = mm.polled_head) {
    if (!RcuPollState(g->cookie, scan)) return;
    scan = false;  // once is enough: the scan's result stands for the rest
    g = PopPolledLocked(mm);
    // The index nodes go back to this space's own node cache, not to the pool: a
    // churning space reuses them with no pool lock and no budget charge (the cache
    // trims what it cannot hold).
    if (!g->nodes.empty()) mm.idx->ReuseRetired(g->nodes);
    MmuGather::FreeNow(g);
    StatsSlotScope slot_scope(mm.stats_slot);
    CountEvent(Event::kRcuPolledGathers);
  }
}

void ReuseSoleLocked(MmStruct& mm, bool flush) {
  if (mm.sole_owner == RcuThreadId() && RcuQsCount() != mm.sole_qs) {
    // Past the only reader's quiescent state: the nodes back into the index's node
    // cache, the VMAs onto the VMA cache's free list (as a kNone space frees them).
    if (!mm.sole_nodes.empty() && !mm.idx->ReuseRetired(mm.sole_nodes)) VmaIndex::DeleteRetired(mm.sole_nodes, &mm.frames.budget());
    for (Vma* v : mm.sole_vmas) mm.vma_cache.Free(v);
    mm.sole_vmas.clear();
    StatsSlotScope slot_scope(mm.stats_slot);
    CountEvent(Event::kRcuSoleReuses);
    return;
  }
  if (mm.sole_owner == RcuThreadId() && !flush) return;  // still in the call that retired them
  // Another thread writes the space (a reclaim's flush, a second client), which cannot
  // see the owner's quiescent states, or a flush: a grace period from here.
  if (!mm.sole_nodes.empty()) {
    std::vector<void*>& n = GatherLocked(mm).nodes;
    n.insert(n.end(), mm.sole_nodes.begin(), mm.sole_nodes.end());
    mm.sole_nodes.clear();
  }
  for (Vma* v : mm.sole_vmas) mm.vma_cache.FreeRcu(v);
  mm.sole_vmas.clear();
}

bool SoleRcuReaderLocked(MmStruct& mm) {
  const uint64_t me = RcuThreadId();
  if (me == 0 || mm.rcu_sole.load(std::memory_order_relaxed) == MmStruct::kRcuShared) return false;
  // The unlinks before the read: an RMW (a locked instruction, as the barrier it replaces).
  return mm.rcu_sole.fetch_add(0, std::memory_order_seq_cst) == me;
}

void QueuePolledGathersLocked(MmStruct& mm, int keep) {
  while (mm.polled_count > keep) CallRcu(&PopPolledLocked(mm)->head, &FreeGatherCallback);
}

MmuGather* PopPolledLocked(MmStruct& mm) {
  MmuGather* g = mm.polled_head;
  mm.polled_head = reinterpret_cast<MmuGather*>(g->head.next);
  if (!mm.polled_head) mm.polled_tail = nullptr;
  mm.polled_count--;
  return g;
}

}  // namespace vmspace
