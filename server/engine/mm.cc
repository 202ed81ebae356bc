// SPDX-License-Identifier: Apache-2.0
// The address space's lifetime (kernel/fork.c mm_alloc, mm/mmap.c exit_mmap), the
// idle space's flush of its deferred frees, and the first-reader mark of rcu_sole.
// Write sections are in mmap_lock.cc, the gathers in mmu_gather.cc.
#include "memory.h"
#include "mm.h"
#include "mmap_lock.h"
#include "mmu_gather.h"
#include "vma.h"

#include <sys/sysinfo.h>

#include <atomic>

#include "engine/memcontrol.h"
#include "engine/per_thread.h"
#include "engine/stats.h"
#include "sync/rcu.h"

namespace vmspace {

MmStruct::MmStruct(FrameAllocator& f, const SpaceOptions& o)
    : frames(f),
      opts(o),
      stats_slot(o.profile.stats_slot()),
      vma_form(o.profile.vma_lock == VmaLockMode::kOff        ? VmaForm::kNone
               : o.profile.vma_lock_form == VmaLockForm::kRwsem ? VmaForm::kRwsem
                                                                : VmaForm::kRefcnt),
      memcg(ActiveMemcg() ? ActiveMemcg()->shared_from_this() : nullptr),
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
  start_brk = brk = o.start_brk;  // nothing else can reach the space yet
  rlimit_memlock.store(o.rlimit_memlock, std::memory_order_relaxed);
  cap_ipc_lock.store(o.cap_ipc_lock, std::memory_order_relaxed);
  frames.AddDeferredFrees(this);
}

MmStruct::~MmStruct() {
  // exit_mmap(): no other call may be running on the space, so nothing can be reading
  // the page tables or VMAs locklessly: everything is freed at once.
  frames.RemoveDeferredFrees(this);  // first: a Reclaim may be flushing this space
  StatsSlotScope slot_scope(stats_slot);
  MmapWriteLock(*this);
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
  sealed_vmas.store(0, std::memory_order_relaxed);
  if (gather && MmuGather::Prepare(gather, frames, stats_slot)) MmuGather::FreeNow(gather);
  gather = nullptr;
  while (polled_head) MmuGather::FreeNow(PopPolledLocked(*this));
  std::vector<void*> nodes;
  idx->Commit();
  idx->TakeRetired(nodes);
  nodes.insert(nodes.end(), sole_nodes.begin(), sole_nodes.end());
  sole_nodes.clear();
  VmaIndex::DeleteRetired(nodes, &frames.budget());
  mmap_lock.UnlockWrite();
}

void MmStruct::FlushDeferredFrees(bool all) {
  bool pending = deferred_pending.exchange(false, std::memory_order_relaxed);
  if (all) pending = deferred_any.exchange(false, std::memory_order_relaxed) || pending;
  if (!pending) return;
  StatsSlotScope slot_scope(stats_slot);
  MmapWriteLock(*this);
  if (!sole_nodes.empty() || !sole_vmas.empty()) ReuseSoleLocked(*this, true);
  FlushGatherLocked(*this);
  QueuePolledGathersLocked(*this, 0);  // no later write section may come to poll them
  vma_cache.HandToCallRcu();    // nor the VMA batches
  idx->TrimNodeCache();         // nor store to take the cached nodes
  mmap_lock.UnlockWrite();
}

void MmStruct::NoteRcuReaderSlow(uint64_t me) {
  uint64_t cur = 0;
  if (rcu_sole.compare_exchange_strong(cur, me, std::memory_order_seq_cst) || cur == me || cur == kRcuShared) return;
  // A second reader: shared for good. An RMW, not a store, so that it reads from a
  // writer's check if that came first (see NoteRcuReader).
  rcu_sole.exchange(kRcuShared, std::memory_order_seq_cst);
}

// ====================================================================== AddressSpace

AddressSpace::AddressSpace(FrameAllocator& frames, const SpaceOptions& opts)
    : mm_(std::make_unique<MmStruct>(frames, opts)) {
  RcuThread();
}

AddressSpace::~AddressSpace() { RcuThread(); }

const SpaceOptions& AddressSpace::options() const { return mm_->opts; }

}  // namespace vmspace
