// MmuGather: the RCU-deferred free of what a write section retired (mm/mmu_gather.c
// tlb_remove_table_rcu, with MMU_GATHER_RCU_TABLE_FREE).
#include "mmu_gather.h"

#include <cstddef>

#include "engine/per_thread.h"
#include "engine/stats.h"
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

}  // namespace vmspace
