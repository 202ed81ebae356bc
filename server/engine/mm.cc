// The address space's lifetime, mmap_lock write sections and deferred frees
// (kernel/fork.c mm_alloc/exit_mmap, include/linux/mmap_lock.h, mm/mmu_gather.c).
#include "memory.h"
#include "mm.h"
#include "vma.h"

#include <sys/sysinfo.h>

#include <atomic>

#include "engine/per_thread.h"
#include "engine/stats.h"
#include "sync/rcu.h"

namespace vmspace {

const char* SharedFaultCompletionName(SharedFaultCompletion c) {
  return c == SharedFaultCompletion::kRetry ? "retry" : "completed";
}

const char* IMmapScopeName(IMmapScope s) { return s == IMmapScope::kWide ? "wide" : "narrow"; }

bool ParseIMmapScope(const std::string& s, IMmapScope* out) {
  if (s == "wide") *out = IMmapScope::kWide;
  else if (s == "narrow") *out = IMmapScope::kNarrow;
  else return false;
  return true;
}

bool ParseSharedFaultCompletion(const std::string& s, SharedFaultCompletion* out) {
  if (s == "retry") *out = SharedFaultCompletion::kRetry;
  else if (s == "completed") *out = SharedFaultCompletion::kCompleted;
  else return false;
  return true;
}


MmStruct::MmStruct(FrameAllocator& f, const SpaceOptions& o)
    : frames(f),
      opts(o),
      stats_slot(o.profile.stats_slot()),
      vma_form(o.profile.vma_lock == VmaLockMode::kOff        ? VmaForm::kNone
               : o.profile.vma_lock_form == VmaLockForm::kRwsem ? VmaForm::kRwsem
                                                                : VmaForm::kRefcnt),
      idx(o.profile.index == VmaIndexKind::kMaple ? VmaIndex::CreateMaple(o.profile.maple_rcu, &f.budget(), o.profile.maple_prealloc_worst)
                                                  : VmaIndex::Create(o.profile.index, &f.budget())),
      mt_detach(o.profile.index == VmaIndexKind::kMaple ? std::make_unique<MapleTree>(false, &f.budget()) : nullptr) {
  uint64_t limit = o.overcommit_limit_bytes;
  if (limit == 0) {
    struct sysinfo si;
    if (sysinfo(&si) == 0)
      limit = (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
    else
      limit = ~0ull;
  }
  commit_limit_pages = limit >> kPageShift;
  frames.AddDeferredFrees(this);
}

MmStruct::~MmStruct() {
  // exit_mmap(): no other call may be running on the space, so nothing can be reading
  // the page tables or VMAs locklessly: everything is freed at once.
  frames.RemoveDeferredFrees(this);  // first: a Reclaim may be flushing this space
  StatsSlotScope slot_scope(stats_slot);
  MmapWriteLock();
  std::vector<Vma*> all;
  std::vector<void*> pages;
  for (Vma* v = FindVmaLocked(*this, 0); v; v = VmaNextLocked(*this, v)) {
    ZapRangeLocked(*this, v, v->vm_start, v->vm_end, pages);
    VmaUnlinkFileLocked(*this, v);
    all.push_back(v);
  }
  for (void* p : pages) frames.Free(p);
  for (Vma* v : all) {
    idx->Erase(v, v->vm_start, v->vm_end);
    VmaFree(*this, v);
  }
  for (Vma* v : retired_vmas) VmaFree(*this, v);
  retired_vmas.clear();
  for (Vma* v : sole_vmas) VmaFree(*this, v);
  sole_vmas.clear();
  map_count.store(0, std::memory_order_relaxed);
  total_vm.store(0, std::memory_order_relaxed);
  if (gather && MmuGather::Prepare(gather, frames, stats_slot)) MmuGather::FreeNow(gather);
  gather = nullptr;
  while (polled_head) MmuGather::FreeNow(PopPolledLocked());
  std::vector<void*> nodes;
  idx->Commit();
  idx->TakeRetired(nodes);
  nodes.insert(nodes.end(), sole_nodes.begin(), sole_nodes.end());
  sole_nodes.clear();
  VmaIndex::DeleteRetired(nodes, &frames.budget());
  mmap_lock.UnlockWrite();
}

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

void MmStruct::FlushDeferredFrees(bool all) {
  bool pending = deferred_pending.exchange(false, std::memory_order_relaxed);
  if (all) pending = deferred_any.exchange(false, std::memory_order_relaxed) || pending;
  if (!pending) return;
  StatsSlotScope slot_scope(stats_slot);
  MmapWriteLock();
  if (!sole_nodes.empty() || !sole_vmas.empty()) ReuseSoleLocked(true);
  FlushGatherLocked();
  QueuePolledGathersLocked(0);  // no later write section may come to poll them
  vma_cache.HandToCallRcu();    // nor the VMA batches
  idx->TrimNodeCache();         // nor store to take the cached nodes
  mmap_lock.UnlockWrite();
}

void MmStruct::MmapWriteUnlock() {
  EndWriteSectionLocked();
  ReleaseRetiredVmasLocked(*this);
  FlushGatherIfFullLocked();
  mmap_lock.UnlockWrite();
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

void MmStruct::NoteRcuReaderSlow(uint64_t me) {
  uint64_t cur = 0;
  if (rcu_sole.compare_exchange_strong(cur, me, std::memory_order_seq_cst) || cur == me || cur == kRcuShared) return;
  // A second reader: shared for good. An RMW, not a store, so that it reads from a
  // writer's check if that came first (see NoteRcuReader).
  rcu_sole.exchange(kRcuShared, std::memory_order_seq_cst);
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

// ====================================================================== AddressSpace

AddressSpace::AddressSpace(FrameAllocator& frames, const SpaceOptions& opts)
    : mm_(std::make_unique<MmStruct>(frames, opts)) {
  RcuThread();
}

AddressSpace::~AddressSpace() { RcuThread(); }

const SpaceOptions& AddressSpace::options() const { return mm_->opts; }

}  // namespace vmspace
