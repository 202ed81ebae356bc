// FrameAllocator: real 4 KiB page frames for all address spaces of a process, with a
// daemon-wide limit (Linux's page allocator and a memory cgroup limit in one).
//
// Frames are carved from 2 MiB chunks obtained from the host with mmap and recycled
// through free lists. The allocator is split into shards (a thread always uses the same
// shard), each with its own lock, free list and a budget of frames reserved from the
// global limit in batches of kBatch; so the fault path touches the shared limit
// counter once per kBatch allocations (Linux's per-CPU page lists and batched
// vmstat updates). Frames freed are kept for reuse, not returned to the host.
// Page-table pages are charged against the same limit (ChargeTable), as a memory
// cgroup charges page tables (__GFP_ACCOUNT): a client cannot grow the daemon past the
// limit by touching one byte per 2 MiB.
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

namespace vmspace {

class FrameAllocator {
 public:
  /// `limit_bytes`: the most frame memory (frames plus charged page-table pages) that
  /// may be in use at once; 0 = unlimited.
  /// The limit is exact up to the budgets held by shards (at most
  /// kShards * 2 * kBatch frames may be refused early when the limit is nearly reached).
  explicit FrameAllocator(uint64_t limit_bytes = 0);
  /// Waits for deferred frees (rcu_barrier), then returns the chunks to the host.
  ~FrameAllocator();
  FrameAllocator(const FrameAllocator&) = delete;
  FrameAllocator& operator=(const FrameAllocator&) = delete;

  /// A zero-filled 4 KiB frame (4 KiB aligned), or nullptr if the limit would be
  /// exceeded (the caller turns that into VM_FAULT_OOM / RESOURCE_EXHAUSTED).
  void* Alloc();
  /// Returns a frame obtained from Alloc(). Never pass the zero page.
  void Free(void* frame);
  /// Free() of every frame of `frames` (then cleared) into `shard` (a ThreadShard()
  /// of engine/per_thread.h, the shard a thread always uses), under one lock
  /// acquisition: a deferred batch freed by the RCU callback thread goes back to the
  /// shard of the thread that unmapped it, which reuses the frames while they are still
  /// in its caches (Linux frees a batch to the freeing CPU's per-CPU page list).
  void FreeBatch(std::vector<void*>& frames, int shard);

  /// Charges one page-table page (4 KiB) against the limit without handing out a frame
  /// (the table itself is a C++ object); false if the limit would be exceeded.
  bool ChargeTable();
  /// Gives back one ChargeTable() charge.
  void UnchargeTable();

  /// Something that holds frees back for a while (a space's pending mmu_gather).
  class DeferredFrees {
   public:
    /// Hands what is held to call_rcu now. Called with no engine lock held; may take
    /// the holder's own locks (a space's mmap_lock for write).
    virtual void FlushDeferredFrees() = 0;

   protected:
    ~DeferredFrees() = default;
  };
  /// Registers / unregisters a holder of deferred frees (a space, for its lifetime).
  void AddDeferredFrees(DeferredFrees* d);
  void RemoveDeferredFrees(DeferredFrees* d);
  /// Flushes every registered holder (the daemon calls it periodically, so an idle
  /// space does not keep its last batch charged). Caller holds no engine lock.
  void FlushDeferredFrees();
  /// FlushDeferredFrees() then rcu_barrier(): when it returns, every frame freed before
  /// the call is back in the allocator. For a failed Alloc/ChargeTable before it is
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
  /// Host memory held in chunks, in bytes.
  uint64_t host_bytes() const;
  uint64_t limit_bytes() const;

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
