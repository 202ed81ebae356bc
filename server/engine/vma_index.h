// VmaIndex: the ordered set of an address space's VMAs, behind one interface with two
// implementations chosen per space:
//
//  * RbtreeIndex ("rbtree", Linux <= 6.0): a balanced tree (std::map keyed by vm_start)
//    that is only valid under mmap_lock. Gap search walks VMAs from the top (Linux 6.0's
//    rbtree kept per-subtree gaps; this one does not, see README "Locking profiles").
//  * MapleIndex ("maple", Linux >= 6.1): a copy-on-write B+tree of ranges. Writers hold
//    mmap_lock for write and publish a new root with a release store, so a reader under
//    RCU (LookupRcu) sees either the old or the new tree, never a torn one. Replaced nodes
//    are retired and freed after an RCU grace period. Interior entries keep each child's
//    lowest start, highest end and largest inner gap, so get_unmapped_area descends only
//    into subtrees that can hold the request.
//
// Ranges are [vm_start, vm_end) in bytes, non-overlapping. All calls except LookupRcu
// require the owning space's mmap_lock (read for queries, write for changes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/vma.h"

namespace vmspace {

class VmaIndex {
 public:
  virtual ~VmaIndex() = default;
  virtual VmaIndexKind kind() const = 0;

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

  /// Frees retired nodes after a grace period (call at mmap_write_unlock). No-op for rbtree.
  virtual void FlushRetired() {}

  /// Bytes of memory used by the index itself (nodes), for the memory benchmarks.
  virtual uint64_t bytes() const = 0;

  static std::unique_ptr<VmaIndex> Create(VmaIndexKind kind);
};

}  // namespace vmspace
