// SPDX-License-Identifier: Apache-2.0
// VmaCache: the VMAs of one space, allocated, duplicated and freed (mm/vma_init.c
// vm_area_alloc / vm_area_dup / vm_area_free and vm_area_cachep, Linux 6.15+), defined
// in vma_init.cc. vm_area_alloc and the rest take the MmStruct, which embeds the cache,
// so they are declared in vma.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "engine/memory_budget.h"
#include "mm_types.h"
#include "sync/rcu.h"

namespace vmspace {

/// vm_area_cachep for one space: the slab-like cache VMAs come from (vm_area_alloc)
/// and go back to (vm_area_free): a bounded free list the space's mmap_lock writers use
/// without atomics (the kernel's per-CPU slab), linked through the free VMAs themselves
/// (Vma::free_next). One per space, so independent spaces share neither a lock nor a
/// cache line on the mmap/munmap path. A free VMA is detached and empty
/// (Vma::ReleaseContents); the kRwsem form keeps its vma_lock with it (vma_lock_alloc
/// once per cached object, as a slab constructor would).
///
/// The kRwsem form's vm_area_free() is a call_rcu per VMA (vm_area_free_rcu_cb). Here
/// the VMAs freed by one space's writers are collected in an RcuBatch of up to kRcuBatch
/// VMAs: it may be reused after a grace period that began after every VMA of the batch
/// was detached, which is all the per-VMA callbacks guarantee (the kernel, too, queues
/// the callbacks of one CPU on one list and invokes them together after the grace
/// period that list waits for). As the kernel invokes a CPU's callbacks on that CPU
/// (rcu_core, in RCU_SOFTIRQ after the tick), a queued batch is polled by the space's
/// own writers, not run by the call_rcu worker: it asks for its grace period
/// (RcuStartPoll) once the RCU tick has moved on since it was queued (RcuTick: the
/// kernel's callbacks wait for the tick-driven grace-period machinery, so the VMAs come
/// back after about a tick, not after the microseconds a polled grace period takes
/// here), and once that grace period has ended it is uncharged and its VMAs are free.
/// The cache takes batches back from its FIFO (grace periods end in order) and splices
/// their VMAs onto the free list. A batch not yet full waits for more VMAs, or for
/// FlushRcu (FlushGatherLocked: with the space's deferred index nodes, at the
/// next full gather or a Reclaim). An idle space's waiting batches go to call_rcu
/// (HandToCallRcu, from MmStruct::FlushDeferredFrees), whose callback uncharges them.
/// Every call but the callbacks' needs mmap_lock for write (the caller's; not checked).
class VmaCache {
 public:
  /// Free VMAs kept for reuse; more are returned to the heap (at once without lockless
  /// readers, else after a grace period).
  static constexpr size_t kMaxFree = 1024;
  /// kRwsem: VMAs kept in flight (in queued batches: waiting for their grace period, or
  /// freed and not yet taken back) before the oldest freed ones are deleted. In steady
  /// churn about one grace period's worth of munmaps is in flight (sync/rcu.h: one
  /// grace period per kRcuGpIntervalUs, ~0.5-3 ms under load: about
  /// 1-3 k VMAs at 1 M munmaps/s; liburcu's call_rcu thread, which slept 10 ms between
  /// passes, kept ~12 k).
  static constexpr size_t kMaxInFlight = 8192;
  /// VMAs per call_rcu (RcuBatch) in the kRwsem form.
  static constexpr uint32_t kRcuBatch = 64;
  /// VMAs handed out are charged to `budget` (kVmas; null: none) until they are freed
  /// (kRwsem: until the grace period has ended).
  VmaCache(VmaForm form, MemoryBudget* budget) : form_(form), budget_(budget) {}
  /// Deletes the free VMAs, those of the batch not yet queued and those of the batches
  /// it polls (no reader of the space can be running); the VMAs of a batch handed to
  /// call_rcu and still waiting for its grace period are deleted by its callback.
  ~VmaCache();
  VmaCache(const VmaCache&) = delete;
  VmaCache& operator=(const VmaCache&) = delete;
  /// An empty detached VMA (with its vma_lock in the kRwsem form), charged to the
  /// budget: the most recently freed one, else one of the oldest batch whose grace
  /// period has ended, else a new one.
  Vma* Alloc();
  /// vm_area_free() of a detached VMA no lockless reader can reach any more (kNone), or
  /// (kRefcnt, SLAB_TYPESAFE_BY_RCU) one that readers may still touch but that is fine
  /// to reuse at once: uncharged, emptied and kept. Beyond kMaxFree, kNone deletes it
  /// and kRefcnt passes it to FreeRcu (its memory may go back to the heap only after a
  /// grace period).
  void Free(Vma* v);
  /// The kRwsem form's vm_area_free(): releases v's contents now (remove_vma's fput
  /// comes before vm_area_free) and adds v to the current RcuBatch, queued (FlushRcu)
  /// once it holds kRcuBatch VMAs. v stays charged until its grace period has ended.
  void FreeRcu(Vma* v);
  /// Queues the current batch (if it holds any VMA) to wait for its grace period, and
  /// polls the queued batches: those whose grace period has ended are uncharged.
  void FlushRcu();
  /// Hands every queued batch still waiting for its grace period to call_rcu (an idle
  /// space: no later write section may come to poll them).
  void HandToCallRcu();
  /// Whether a batch not yet queued holds VMAs (MmStruct sets deferred_any for it).
  bool rcu_pending() const { return pending_ != nullptr; }
  /// Whether a queued batch waits for a grace period this cache has not yet seen end
  /// (its VMAs still charged: MmStruct sets deferred_any for it, so a Reclaim hands it
  /// to call_rcu).
  bool rcu_waiting() const { return unready_ != nullptr; }
  /// Free VMAs ready for reuse now, and VMAs in batches (queued or not) (tests).
  size_t free_count() const { return nr_free_; }
  size_t in_flight() const;

 private:
  /// One batch of freed VMAs of the kRwsem form: VMAs (first..last through free_next),
  /// their charged bytes and budget, and the state the cache (and, once handed to
  /// call_rcu, the callback) keeps.
  struct RcuBatch {
    struct rcu_head head {};
    /// kPolled while the cache polls its grace period, kDone once it has ended
    /// (uncharged). Handed to call_rcu: kPending until the callback has run (kDone);
    /// kOrphan once the cache is gone (the callback then deletes the VMAs and the batch).
    std::atomic<uint8_t> state{kPolled};
    static constexpr uint8_t kPending = 0, kDone = 1, kOrphan = 2, kPolled = 3;
    uint64_t tick = 0;    // kPolled: RcuTick() when queued
    uint64_t cookie = 0;  // kPolled: RcuStartPoll() once asked for (0: not yet)
    uint32_t n = 0;
    Vma* first = nullptr;
    Vma* last = nullptr;
    MemoryBudget* budget = nullptr;
    uint64_t bytes = 0;
    RcuBatch* next = nullptr;  // the cache's FIFO
  };
  /// Asks for one grace period (RcuStartPoll), shared by every queued batch that has
  /// no cookie yet and was queued before the current RCU tick.
  void AskGracePeriods();
  /// Whether b's grace period has ended (a kPolled batch is then uncharged and marked
  /// kDone); `scan` (RcuPollState) is cleared once a scan has been used.
  bool Ready(RcuBatch* b, bool* scan);
  /// Splices done batches at the head of the FIFO onto the free list (up to kMaxFree).
  void TakeBackFreed();
  /// Pops the head batch of the FIFO (done), returning its VMAs (first..last).
  RcuBatch* PopDone();
  /// The callback: uncharges, marks done (or deletes, if orphaned).
  static void RcuBatchDone(struct rcu_head* h);
  /// Deletes the VMAs first..last (chained through free_next).
  static void DeleteChain(Vma* first);
  /// Charges v (new or reused) to budget_.
  Vma* Charged(Vma* v);
  const VmaForm form_;
  MemoryBudget* const budget_;
  Vma* free_ = nullptr;  // LIFO through Vma::free_next
  size_t nr_free_ = 0;
  RcuBatch* pending_ = nullptr;  // being filled, not yet queued
  RcuBatch* fifo_head_ = nullptr;  // queued batches, oldest first
  RcuBatch* fifo_tail_ = nullptr;
  RcuBatch* unready_ = nullptr;  // the oldest queued batch not yet seen done (or null)
  RcuBatch* unasked_ = nullptr;  // the oldest queued batch without a cookie (or null)
  size_t nr_in_flight_ = 0;      // VMAs in queued batches
  RcuBatch* spare_ = nullptr;    // a taken-back batch kept for the next one
};

}  // namespace vmspace
