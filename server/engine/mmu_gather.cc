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

void MmStruct::FlushGatherIfFullLocked() {
  MmuGather* g = gather;  // (not created here: a space that retires nothing has none)
  if (g) {
    const size_t zapped = g->pages.size();
    if (FreeZappedPagesIfUnused(*this, g->pages)) g->freed_at_once += zapped;  // no grace period needed
  }
  if (g && (g->size() >= kDeferBatch || g->pages.size() + g->freed_at_once >= kDeferFrames)) {
    FlushGatherLocked();
  } else if (polled_head) {
    FreePolledGathersLocked(++polled_skips >= kPollScanEvery);
  }
  g = gather;
  if ((!g || g->empty()) && !vma_cache.rcu_pending() && !polled_head && !vma_cache.rcu_waiting() &&
      sole_nodes.empty() && sole_vmas.empty())
    return;
  deferred_any.store(true, std::memory_order_relaxed);
  // Charged memory waits: see FlushDeferredFrees (an idle space's polled list too).
  if ((g && (!g->pages.empty() || !g->tables.empty())) || polled_head)
    deferred_pending.store(true, std::memory_order_relaxed);
}

MmuGather& MmStruct::GatherLocked() {
  if (!gather) gather = new MmuGather;
  return *gather;
}

void MmStruct::FlushGatherLocked() {
  MmuGather* g = gather;
  gather = nullptr;
  if (g && MmuGather::Prepare(g, frames, stats_slot)) {
    g->cookie = RcuStartPoll();
    g->head.next = nullptr;
    if (polled_tail) polled_tail->head.next = &g->head;
    else polled_head = g;
    polled_tail = g;
    if (++polled_count > kMaxPolledGathers) QueuePolledGathersLocked(kMaxPolledGathers);
  }
  if (polled_head) FreePolledGathersLocked(true);
  vma_cache.FlushRcu();
}

void MmStruct::FreePolledGathersLocked(bool scan) {
  if (scan) polled_skips = 0;
  while (MmuGather* g = polled_head) {
    if (!RcuPollState(g->cookie, scan)) return;
    scan = false;  // once is enough: the scan's result stands for the rest
    g = PopPolledLocked();
    // The index nodes go back to this space's own node cache, not to the pool: a
    // churning space reuses them with no pool lock and no budget charge (the cache
    // trims what it cannot hold).
    if (!g->nodes.empty()) idx->ReuseRetired(g->nodes);
    MmuGather::FreeNow(g);
    StatsSlotScope slot_scope(stats_slot);
    CountEvent(Event::kRcuPolledGathers);
  }
}

void MmStruct::ReuseSoleLocked(bool flush) {
  if (sole_owner == RcuThreadId() && RcuQsCount() != sole_qs) {
    // Past the only reader's quiescent state: the nodes back into the index's node
    // cache, the VMAs onto the VMA cache's free list (as a kNone space frees them).
    if (!sole_nodes.empty() && !idx->ReuseRetired(sole_nodes)) VmaIndex::DeleteRetired(sole_nodes, &frames.budget());
    for (Vma* v : sole_vmas) vma_cache.Free(v);
    sole_vmas.clear();
    StatsSlotScope slot_scope(stats_slot);
    CountEvent(Event::kRcuSoleReuses);
    return;
  }
  if (sole_owner == RcuThreadId() && !flush) return;  // still in the call that retired them
  // Another thread writes the space (a reclaim's flush, a second client), which cannot
  // see the owner's quiescent states, or a flush: a grace period from here.
  if (!sole_nodes.empty()) {
    std::vector<void*>& n = GatherLocked().nodes;
    n.insert(n.end(), sole_nodes.begin(), sole_nodes.end());
    sole_nodes.clear();
  }
  for (Vma* v : sole_vmas) vma_cache.FreeRcu(v);
  sole_vmas.clear();
}

bool MmStruct::SoleRcuReaderLocked() {
  const uint64_t me = RcuThreadId();
  if (me == 0 || rcu_sole.load(std::memory_order_relaxed) == kRcuShared) return false;
  // The unlinks before the read: an RMW (a locked instruction, as the barrier it replaces).
  return rcu_sole.fetch_add(0, std::memory_order_seq_cst) == me;
}

void MmStruct::QueuePolledGathersLocked(int keep) {
  while (polled_count > keep) CallRcu(&PopPolledLocked()->head, &FreeGatherCallback);
}

MmuGather* MmStruct::PopPolledLocked() {
  MmuGather* g = polled_head;
  polled_head = reinterpret_cast<MmuGather*>(g->head.next);
  if (!polled_head) polled_tail = nullptr;
  polled_count--;
  return g;
}

}  // namespace vmspace
