// SPDX-License-Identifier: Apache-2.0
// VmaIndex: the ordered set of an address space's VMAs, behind one interface with two
// implementations chosen per space:
//
//  * "rbtree" (Linux <= 6.0): an augmented search tree updated in place, only valid
//    under mmap_lock, with per-subtree gap information (Linux 6.0's rbtree kept
//    rb_subtree_gap for get_unmapped_area). Implemented as a B+tree of ranges (fan-out
//    16, 520-byte nodes: per entry the range, the child's largest inner gap and a
//    pointer), changed in place, nothing freed after a grace period. On erase a child
//    with fewer than 4 entries is merged into a sibling when both fit in one node.
//  * "maple" (Linux >= 6.1): the maple tree (maple_tree.h: lib/maple_tree.c, Linux
//    6.18), in RCU mode (MT_FLAGS_USE_RCU, as the mm tree is since 6.3 / 6.1.25):
//    each VMA is the entry of the range [vm_start, vm_end - 1], gaps are NULL ranges,
//    256-byte nodes (16-slot leaves, 10-slot interior nodes with gaps). Every change
//    is one or more maple stores, each picking the kernel's store type, preallocating
//    its worst case, and publishing each replaced node with one release store, so a
//    reader under RCU (LookupRcu) sees a consistent tree at every step; replaced nodes
//    are retired and freed after an RCU grace period (TakeRetired, DeleteRetired).
//
// The maple index issues the stores the kernel issues for the same change: a store of
// NULL that the next change overwrites is not made (Update shrinking a VMA, then Insert
// of the VMA split from it: one store of the new VMA over its part, as __split_vma
// does; the shrink of `middle` then the expansion of its neighbour: one store, as
// commit_merge does), and NULL stores of neighbouring ranges with no VMA between are
// made as one (munmap clears its whole range at once). Such a store is deferred until
// the next change, query, or Commit(); in the meantime lockless readers still find
// the VMA over its old range (it is write-locked, so they fall back to mmap_lock).
//
// Ranges are [vm_start, vm_end) in bytes, non-overlapping. All calls except LookupRcu
// require the owning space's mmap_lock (read for queries, write for changes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "maple_tree.h"
#include "mm_types.h"
#include "engine/per_thread.h"

namespace vmspace {

/// An index's nodes and write statistics.
struct VmaIndexStats {
  uint64_t nodes = 0;       // nodes in the tree
  uint64_t node_bytes = 0;  // bytes of one node
  int height = 0;           // levels
  MapleStats maple;         // "maple" only: store types, preallocation, retired nodes
};

/// A space's VMA index. Cache-line aligned: the tree's root and writer state are
/// written on every mmap/munmap, so no other space's (or thread's) data may share
/// their lines (the kernel embeds the maple tree in mm_struct, whose slab cache is
/// SLAB_HWCACHE_ALIGN: kernel/fork.c proc_caches_init, Linux 6.18).
class alignas(kDestructiveInterferenceBytes) VmaIndex {
 public:
  virtual ~VmaIndex() = default;

  /// find_vma(): the first VMA with vm_end > addr, or null.
  virtual Vma* FindVma(uint64_t addr) const = 0;
  /// The first VMA with vm_start >= addr, or null.
  virtual Vma* NextFrom(uint64_t addr) const = 0;
  /// The last VMA with vm_start < addr, or null.
  virtual Vma* PrevOf(uint64_t addr) const = 0;
  /// Calls fn for every VMA in address order.
  virtual void ForEach(const std::function<void(Vma*)>& fn) const = 0;

  /// Adds v with its current range (which must be free). Caller holds mmap_lock write.
  virtual void Insert(Vma* v) = 0;
  /// Removes the entry [start, end) that maps v. Caller holds mmap_lock write.
  virtual void Erase(Vma* v, uint64_t start, uint64_t end) = 0;
  /// v's range changed from [old_start, old_end) to its current fields (the new part
  /// must be free). Caller holds mmap_lock write.
  virtual void Update(Vma* v, uint64_t old_start, uint64_t old_end) = 0;

  /// The end of the highest gap in [low, high) at least `length` long (the gap is
  /// clipped to [low, high)), or ~0 if none (mas_empty_area_rev).
  virtual uint64_t HighestGapEnd(uint64_t length, uint64_t low, uint64_t high) const = 0;

  /// RCU-safe lookup: the VMA whose stored range contains addr, or null. Caller is in an
  /// RCU read-side section; the VMA must then be locked and re-checked. Only "maple"
  /// supports it (returns null otherwise). Each store is visible as soon as it is made
  /// (as in Linux), not at Commit: during a write section a reader may find a VMA the
  /// section changes (it is write-locked: vma_start_read fails), or no VMA where one is
  /// being replaced (the caller falls back to mmap_lock).
  virtual Vma* LookupRcu(uint64_t addr) const { return nullptr; }

  /// Ends a write section: makes a store the index deferred (see above). Call at
  /// mmap_write_unlock, before the VMA write locks are released (mm_lock_seq advanced).
  virtual void Commit() {}
  /// Moves the nodes retired by changes so far into `out`; the caller frees them with
  /// DeleteRetired after an RCU grace period. Nothing for rbtree.
  virtual void TakeRetired(std::vector<void*>& out) {}
  /// Takes nodes of this index's TakeRetired whose grace period has ended back into its
  /// own node cache (MapleTree::ReuseNodes; they stay charged) and returns true; false
  /// (nothing taken) for an index that retires none: the caller uses DeleteRetired.
  /// Needs the index's writer lock (mmap_lock for write).
  virtual bool ReuseRetired(std::vector<void*>& nodes) { return false; }
  /// Gives the index's cached free nodes beyond a few back to the node pool (an idle
  /// space's flush). Needs the writer lock.
  virtual void TrimNodeCache() {}
  /// Returns retired nodes to the node pool's `shard` (the ThreadShard() of the thread
  /// that retired them; -1: the calling thread's), uncharging them from the index's
  /// budget (see Create).
  static void DeleteRetired(std::vector<void*>& nodes, MemoryBudget* budget = nullptr, int shard = -1);

  /// The index's invariants (mt_validate for maple; order, ranges and gaps for
  /// rbtree): "" or the first one broken. Caller holds mmap_lock.
  virtual std::string Check() const = 0;
  virtual VmaIndexStats Stats() const = 0;
  /// The maple tree behind a "maple" index (tests set its step hook), else null.
  virtual MapleTree* maple_tree() { return nullptr; }

  /// Bytes of index nodes the calling thread has linked into trees minus those it
  /// unlinked (all spaces; per thread, so no counter is shared between spaces).
  static int64_t ThreadNodeBytes() { return NodeCache::ThreadLinkedBytes(); }
  /// Bytes the node pools hold from the heap (slabs: nodes in use and free).
  static uint64_t PoolSlabBytes();

  /// With a budget, the nodes the index holds are charged to it (kIndexNodes) until
  /// they go back to the node pool (DeleteRetired with the same budget for retired ones).
  static std::unique_ptr<VmaIndex> Create(VmaIndexKind kind, MemoryBudget* budget = nullptr);
  /// The maple index with or without RCU mode (without: nodes rewritten in place and
  /// freed at once, appends in place, LookupRcu returns null; the mm tree of Linux
  /// 6.1.0 - 6.1.24 and 6.2, before commit 3dd4432549415 "mm: enable maple tree RCU
  /// mode by default"). Create(kMaple) is CreateMaple(true).
  /// prealloc_worst: 6.1 - 6.4's worst-case preallocation before every store
  /// (MapleTree::MapleTree).
  static std::unique_ptr<VmaIndex> CreateMaple(bool in_rcu, MemoryBudget* budget = nullptr,
                                               bool prealloc_worst = false);
};

}  // namespace vmspace
