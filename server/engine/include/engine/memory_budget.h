// SPDX-License-Identifier: Apache-2.0
// MemoryBudget: one limit over everything a client can make the daemon allocate, by
// kind, as a memory cgroup charges user pages, page tables and slab objects
// (mm/memcontrol.c: try_charge_memcg, memcg_stock_pcp; include/linux/page_counter.h).
//
// Every allocation a client can cause is charged where it is made and uncharged where
// it is freed (for objects freed after an RCU grace period: in the callback), so that
// with no space left and after rcu_barrier every kind reads 0:
//   frames       private (anonymous, COW) page frames         FrameAllocator::Alloc
//   page_tables  page-table pages, 4 KiB each                  FrameAllocator::ChargeTable
//   vmas         Vma objects and their separate per-VMA locks  VmaAllocLocked
//   index_nodes  maple / rbtree nodes held by a space's index  NodeCache
//   page_cache   page-cache frames of files and shmem          File::AddLockedFolio
//   buffers      service request/response data of a call      rpc::VmSpaceService
//
// Charging is cheap on the hot path: per-kind usage lives in per-thread cells (summed
// on read), and the limit is reserved from one shared atomic in batches of
// kBatchBytes kept as a cell's stock (memcg's per-CPU stock). A charge that does not fit
// first drains every cell's stock, so the limit is exact when it is nearly reached.
// No lock is taken.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include "engine/per_thread.h"

namespace vmspace {

/// What a charge is for (the `kind` label of vmspace_memory_bytes).
enum class MemKind : uint8_t { kFrames, kPageTables, kVmas, kIndexNodes, kPageCache, kBuffers };
inline constexpr int kMemKinds = 6;
/// "frames", "page_tables", "vmas", "index_nodes", "page_cache", "buffers".
const char* MemKindName(MemKind k);

class MemoryBudget {
 public:
  /// `limit_bytes`: the most that may be charged at once over all kinds; 0 = no limit
  /// (usage is still counted).
  explicit MemoryBudget(uint64_t limit_bytes = 0);
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  /// Charges `bytes` of kind k; false (nothing charged, failcnt() + 1) if the limit
  /// would be exceeded. The caller answers ENOMEM (or VM_FAULT_OOM).
  bool TryCharge(MemKind k, uint64_t bytes);
  /// Charges `bytes` even beyond the limit (__GFP_NOFAIL): for objects allocated in the
  /// middle of a change that cannot fail (a VMA split, index nodes); the change's entry
  /// point checks HasRoom() first, so the excess is bounded by one change.
  void Charge(MemKind k, uint64_t bytes);
  /// Gives back a charge of the same kind.
  void Uncharge(MemKind k, uint64_t bytes);
  /// Whether `bytes` more would fit under the limit now (draining stocks to decide);
  /// a no counts as a failure (failcnt() + 1).
  bool HasRoom(uint64_t bytes);

  /// Bytes of kind k charged now (signed: an uncharge without charge shows negative).
  int64_t usage(MemKind k) const;
  /// Bytes charged now over all kinds (0 if negative).
  uint64_t usage() const;
  uint64_t limit_bytes() const { return limit_; }
  /// Charges refused so far (page_counter's failcnt): lets a caller that got ENOMEM
  /// tell a budget failure from another one and reclaim before it answers.
  uint64_t failcnt() const { return failcnt_.load(std::memory_order_relaxed); }

  /// Limit bytes a cell reserves at once (MEMCG_CHARGE_BATCH, 64 pages).
  static constexpr uint64_t kBatchBytes = 64 * 4096;
  static constexpr int kCells = 16;

 private:
  struct alignas(kDestructiveInterferenceBytes) Cell {
    std::array<std::atomic<int64_t>, kMemKinds> bytes{};
    std::atomic<uint64_t> stock{0};  // limit reserved by this cell, not yet charged
  };
  Cell& MyCell();
  bool Reserve(Cell& c, uint64_t bytes);  // takes bytes of the limit (stock first)
  void Unreserve(Cell& c, uint64_t bytes);
  bool TakeGlobal(uint64_t bytes);
  void DrainStocks();

  const uint64_t limit_;
  std::atomic<uint64_t> reserved_{0};  // stocks + charges against limit_
  std::atomic<uint64_t> failcnt_{0};
  std::array<Cell, kCells> cells_;
};

/// A charge of one kind that follows a buffer's size and is given back when it ends
/// (a service call's request/response data). Not thread-safe.
class ScopedCharge {
 public:
  ScopedCharge(MemoryBudget* b, MemKind k) : b_(b), k_(k) {}
  ~ScopedCharge() { Resize(0); }
  ScopedCharge(const ScopedCharge&) = delete;
  ScopedCharge& operator=(const ScopedCharge&) = delete;
  /// Makes the charge `bytes` (growing with TryCharge, or with Charge if `force`);
  /// false, and the charge left as it was, if the budget refuses.
  bool Resize(uint64_t bytes, bool force = false);
  uint64_t bytes() const { return bytes_; }

 private:
  MemoryBudget* b_;
  MemKind k_;
  uint64_t bytes_ = 0;
};

}  // namespace vmspace
