// VmaIndex: the ordered set of an address space's VMAs, behind one interface with two
// implementations chosen per space:
//
//  * "rbtree" (Linux <= 6.0): an augmented search tree updated in place, only valid
//    under mmap_lock, with per-subtree gap information (Linux 6.0's rbtree kept
//    rb_subtree_gap for get_unmapped_area). Implemented by the same B+tree code as
//    "maple" with copy-on-write and RCU publication switched off: O(log n) lookups and
//    gap search, in-place updates, nothing freed after a grace period.
//  * "maple" (Linux >= 6.1): the same B+tree of ranges, copy-on-write and RCU-readable.
//    Writers hold mmap_lock for write; the first change of a node in a write section
//    copies it (later changes in the same section modify the copy), and Commit() (at
//    mmap_write_unlock) publishes the new root with a release store, so a reader under
//    RCU (LookupRcu) sees the tree as of the last commit, never a torn one. Replaced
//    nodes are retired and freed after an RCU grace period.
//  Node layout: fan-out 16 (the maple tree's leaf fan-out); a node is 528 bytes
//  (sizeof(MNode) in vma_index.cc): per entry the range (leaf) or the child's lowest
//  start and highest end, the child's largest inner gap (interior; like
//  maple_arange_64's gap array), and a pointer. Interior gaps let get_unmapped_area
//  descend only into subtrees that can hold the request. On erase, a child with fewer
//  than fan-out/4 entries is merged into a sibling when both fit in one node, emptied
//  nodes are removed, and a one-child root collapses.
//
// Ranges are [vm_start, vm_end) in bytes, non-overlapping. All calls except LookupRcu
// require the owning space's mmap_lock (read for queries, write for changes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "vma.h"

namespace vmspace {

class VmaIndex {
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
  /// v's range changed from [old_start, old_end) to its current fields.
  virtual void Update(Vma* v, uint64_t old_start, uint64_t old_end) {
    Erase(v, old_start, old_end);
    Insert(v);
  }

  /// The end of the highest gap in [low, high) at least `length` long (the gap is
  /// clipped to [low, high)), or ~0 if none (mas_empty_area_rev).
  virtual uint64_t HighestGapEnd(uint64_t length, uint64_t low, uint64_t high) const = 0;

  /// RCU-safe lookup: the VMA whose stored range contains addr, or null. Caller is in an
  /// RCU read-side section; the VMA must then be locked and re-checked. Only "maple"
  /// supports it (returns null otherwise).
  virtual Vma* LookupRcu(uint64_t addr) const { return nullptr; }

  /// Ends a write section: publishes the tree to RCU readers. Call at mmap_write_unlock,
  /// before the VMA write locks are released (mm_lock_seq advanced).
  virtual void Commit() {}
  /// Moves the nodes retired by changes so far into `out`; the caller frees them with
  /// DeleteRetired after an RCU grace period. Nothing for rbtree.
  virtual void TakeRetired(std::vector<void*>& out) {}
  static void DeleteRetired(std::vector<void*>& nodes);

  static std::unique_ptr<VmaIndex> Create(VmaIndexKind kind);
};

}  // namespace vmspace
