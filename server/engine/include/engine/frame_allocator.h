// SPDX-License-Identifier: Apache-2.0
// FrameAllocator: real 4 KiB page frames for all address spaces of a process, with a
// daemon-wide limit (Linux's page allocator and a memory cgroup limit in one).
//
// Frames are carved from 2 MiB chunks obtained from the host with mmap and recycled
// through free lists. The allocator is split into shards (a thread always uses the same
// shard), each with its own lock, free list and a budget of frames reserved from the
// global limit in batches of kBatch; so the fault path touches the shared limit
// counter once per kBatch allocations (Linux's per-CPU page lists and batched
// vmstat updates). Frames freed are kept for reuse up to a watermark (the frame
// cache, SetCacheBytes); frames freed beyond it are given back to the host in batches
// with madvise(MADV_DONTNEED) (the chunk stays mapped; a frame given back reads as
// zero and is handed out again, without a clear, before a new chunk is mapped), as Linux's page
// allocator frees pages above the pcp high mark back to the buddy lists.
// Page-table pages are charged against the same limit (ChargeTable), as a memory
// cgroup charges page tables (__GFP_ACCOUNT): a client cannot grow the daemon past the
// limit by touching one byte per 2 MiB. That limit (--max-frame-bytes) is a sub-limit:
// every frame and table page is also charged to the allocator's MemoryBudget
// (--max-memory-bytes, memory_budget.h), which the rest of the engine and the service
// charge too (VMAs, index nodes, buffers); an allocation fails if either refuses.
//
// Frees may be deferred (a space's mmu_gather waits for a batch, then an RCU grace
// period): Reclaim() drains them, so a caller that got nullptr can wait for the memory
// already freed before it answers ENOMEM, as Linux reclaims before it fails.
//
// Debug builds (-DVMSPACE_LOCKDEP=ON) also keep each frame's state and abort on a
// double free or on freeing a frame that was never allocated (Linux's bad_page()).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/memory_budget.h"

namespace vmspace {

class FrameAllocator {
 public:
  /// `limit_bytes`: the most frame memory (frames plus charged page-table pages) that
  /// may be in use at once; 0 = unlimited.
  /// The limit is exact up to the budgets held by shards (at most
  /// kShards * 2 * kBatch frames may be refused early when the limit is nearly reached).
  /// `memory_limit_bytes`: the limit of budget() (0 = unlimited).
  explicit FrameAllocator(uint64_t limit_bytes = 0, uint64_t memory_limit_bytes = 0);
  /// Waits for deferred frees (rcu_barrier), then returns the chunks to the host.
  ~FrameAllocator();
  FrameAllocator(const FrameAllocator&) = delete;
  FrameAllocator& operator=(const FrameAllocator&) = delete;

  /// A zero-filled 4 KiB frame (4 KiB aligned; a reused frame is cleared here, one
  /// from a new chunk or given back to the host is zero already), or nullptr if the limit would be
  /// exceeded (the caller turns that into VM_FAULT_OOM / RESOURCE_EXHAUSTED). Charged
  /// to budget() as `kind` (kFrames, or kPageCache for a page-cache folio).
  void* Alloc(MemKind kind = MemKind::kFrames);
  /// Returns a frame obtained from Alloc(kind), uncharging it. Never pass the zero page.
  void Free(void* frame, MemKind kind = MemKind::kFrames);
  /// Free(frame, MemKind::kFrames) of every frame of `frames` (then cleared) into `shard` (a ThreadShard()
  /// of engine/per_thread.h, the shard a thread always uses), under one lock
  /// acquisition: a deferred batch freed by the RCU callback thread goes back to the
  /// shard of the thread that unmapped it, which reuses the frames while they are still
  /// in its caches (Linux frees a batch to the freeing CPU's per-CPU page list).
  void FreeBatch(std::vector<void*>& frames, int shard);

  /// Charges one page-table page (4 KiB) against the limit and budget() (kPageTables)
  /// without handing out a frame (the table itself is a C++ object); false if either
  /// limit would be exceeded.
  bool ChargeTable();
  /// Gives back one ChargeTable() charge.
  void UnchargeTable();

  /// Something that holds frees back for a while (a space's pending mmu_gather).
  class DeferredFrees {
   public:
    /// Hands what is held to call_rcu now: with `all` everything held (Reclaim), else
    /// only if it holds frames or page tables (the periodic flush). Called with no
    /// engine lock held; may take the holder's own locks (a space's mmap_lock for write).
    virtual void FlushDeferredFrees(bool all) = 0;

   protected:
    ~DeferredFrees() = default;
  };
  /// Registers / unregisters a holder of deferred frees (a space, for its lifetime).
  void AddDeferredFrees(DeferredFrees* d);
  void RemoveDeferredFrees(DeferredFrees* d);
  /// Flushes every registered holder (the daemon calls it periodically, so an idle
  /// space does not keep its last batch charged). Caller holds no engine lock.
  void FlushDeferredFrees();
  /// Every holder's FlushDeferredFrees(all = true), then rcu_barrier(): when it returns,
  /// every frame, table, VMA and index node freed before the call is back in the
  /// allocator and uncharged. For a failed Alloc/ChargeTable before it is
  /// reported (the fault path calls it once it has dropped its locks). Slow (a grace
  /// period); caller holds no engine lock and is not in an RCU read-side section.
  void Reclaim();

  /// The shared read-only zero page (ZERO_PAGE(0)): mapped for anonymous read faults.
  static void* ZeroPage();

  /// Frames in use (allocated and not freed): signed, so that a double free shows as a
  /// negative count instead of hiding behind zero.
  int64_t in_use_frames() const;
  /// in_use_frames() in bytes (0 if negative).
  uint64_t in_use_bytes() const;
  /// Page-table pages charged (ChargeTable minus UnchargeTable), in bytes.
  uint64_t table_bytes() const;
  /// Host memory the allocator may hold resident: bytes of its chunks less the frames
  /// given back to the host (ReturnedBytes) and not handed out since.
  uint64_t host_bytes() const;
  uint64_t limit_bytes() const;
  /// The daemon's memory budget: frames and table pages are charged to it here; VMAs,
  /// index nodes and service buffers by their allocators. Outlives every RCU callback
  /// (the destructor waits for them).
  MemoryBudget& budget() const;

  /// Sets the frame cache watermark: free frames kept resident for reuse (per-shard
  /// lists plus the global free list), bytes; frees beyond it are given back to the
  /// host. ~0 (the default) keeps every freed frame, 0 keeps none beyond the shards'
  /// own lists. Cheap on the fast path: a Free checks the cache only when its shard's
  /// list spills to the global list (every kBatch frees), and the madvise runs then on
  /// the freeing thread (usually the RCU callback thread) with no allocator lock held.
  void SetCacheBytes(uint64_t bytes);
  /// The watermark set by SetCacheBytes, bytes.
  uint64_t cache_limit_bytes() const;
  /// Free frames held resident for reuse (shard lists plus the global free list), bytes.
  uint64_t cache_bytes() const;
  /// Bytes of frames given back to the host since construction (a counter).
  uint64_t returned_bytes() const;
  /// Brings the cache down to the watermark now: if it is above, empties every shard's
  /// list into the global list, then gives back what exceeds the watermark. The daemon calls it
  /// periodically, so frames freed by threads that went idle are given back too.
  /// Takes each shard lock in turn; caller holds no allocator lock.
  void TrimCache();

  static constexpr int kShards = 16;
  static constexpr uint64_t kBatch = 32;
  /// Free frames a shard keeps before it gives kBatch of them to the other shards
  /// (pcp->high; 2 MiB: a deferred batch fits without spilling).
  static constexpr uint64_t kShardHigh = 512;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vmspace
