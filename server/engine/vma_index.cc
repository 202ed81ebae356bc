// SPDX-License-Identifier: Apache-2.0
#include "vma_index.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <new>

#include "engine/retained_memory.h"
#include "fmt/format.h"

namespace vmspace {

const char* VmaIndexKindName(VmaIndexKind k) {
  return k == VmaIndexKind::kRbtree ? "rbtree" : "maple";
}

namespace {

// ===================================================================== rbtree
// B+tree of ranges changed in place (the "rbtree" index). Node layout (one struct for
// both kinds, 520 bytes): up to kFanout entries. A leaf entry is a VMA's range and
// pointer; an interior entry is a child with its subtree's lowest start (lo), highest
// end (hi) and largest gap between two consecutive ranges inside it (gap).
constexpr int kFanout = 16;

struct MNode {
  bool leaf = true;
  uint8_t n = 0;
  uint64_t lo[kFanout];   // leaf: vm_start; interior: subtree lowest start
  uint64_t hi[kFanout];   // leaf: vm_end; interior: subtree highest end
  uint64_t gap[kFanout];  // interior only: largest inner gap of the child
  void* p[kFanout];       // leaf: Vma*; interior: MNode*

  uint64_t Lo() const { return lo[0]; }
  uint64_t Hi() const { return hi[n - 1]; }
  /// Largest gap between consecutive ranges inside this node's subtree (two branchless
  /// max loops: recomputed for each node on the path of every change).
  uint64_t InnerGap() const {
    uint64_t g = 0;
    for (int i = 0; i + 1 < n; i++) g = std::max(g, lo[i + 1] - hi[i]);
    if (!leaf)
      for (int i = 0; i < n; i++) g = std::max(g, gap[i]);
    return g;
  }
  MNode* child(int i) const { return static_cast<MNode*>(p[i]); }
  void SetChild(int i, MNode* c) {
    p[i] = c;
    lo[i] = c->Lo();
    hi[i] = c->Hi();
    gap[i] = c->InnerGap();
  }
};
static_assert(sizeof(MNode) == 520, "update the node size in vma_index.h");
using BTreePool = NodePool<sizeof(MNode), alignof(MNode)>;

class BTreeIndex final : public VmaIndex {
 public:
  explicit BTreeIndex(MemoryBudget* budget)
      : cache_([](std::vector<void*>& out, size_t n) { BTreePool::Get().TakeBatch(out, n); },
               [](std::vector<void*>& v) { BTreePool::Get().PutBatch(v); }, sizeof(MNode), budget) {}
  ~BTreeIndex() override { Destroy(wroot_); }

  Vma* FindVma(uint64_t addr) const override { return FirstEndAbove(wroot_, addr); }
  Vma* NextFrom(uint64_t addr) const override { return FirstStartAtLeast(wroot_, addr); }
  Vma* PrevOf(uint64_t addr) const override { return LastStartBelow(wroot_, addr); }
  void ForEach(const std::function<void(Vma*)>& fn) const override { Walk(wroot_, fn); }

  void Insert(Vma* v) override {
    MNode* root = wroot_;
    if (!root) {
      MNode* leaf = NewNode(true);
      leaf->n = 1;
      leaf->lo[0] = v->vm_start;
      leaf->hi[0] = v->vm_end;
      leaf->p[0] = v;
      wroot_ = leaf;
      return;
    }
    MNode* split = nullptr;
    MNode* nroot = InsertRec(root, v, &split);
    if (split) {
      MNode* top = NewNode(false);
      top->n = 2;
      top->SetChild(0, nroot);
      top->SetChild(1, split);
      nroot = top;
    }
    wroot_ = nroot;
  }

  /// A range update never changes the order of the (non-overlapping) entries, so the
  /// entry is rewritten where it is, and the path above it re-summarised.
  void Update(Vma* v, uint64_t old_start, uint64_t old_end) override {
    if (!wroot_) return;
    UpdateRec(wroot_, old_start, v);
  }

  void Erase(Vma* v, uint64_t start, uint64_t end) override {
    MNode* root = wroot_;
    if (!root) return;
    MNode* nroot = EraseRec(root, start);
    // Collapse interior roots with a single child (the tree only shrinks at the top).
    while (nroot && !nroot->leaf && nroot->n == 1) {
      MNode* c = nroot->child(0);
      Free(nroot);
      nroot = c;
    }
    wroot_ = nroot;
  }

  uint64_t HighestGapEnd(uint64_t length, uint64_t low, uint64_t high) const override {
    const MNode* root = wroot_;
    if (!root) {
      return (high > low && high - low >= length) ? high : ~0ull;
    }
    // The gap above everything, then inside, then below everything.
    uint64_t r = Clip(root->Hi(), ~0ull, length, low, high);
    if (r != ~0ull) return r;
    r = GapRec(root, length, low, high);
    if (r != ~0ull) return r;
    return Clip(0, root->Lo(), length, low, high);
  }

  std::string Check() const override {
    if (!wroot_) return nodes_ ? "nodes counted in an empty tree" : "";
    std::string err;
    uint64_t count = 0, prev_end = 0;
    int leaf_depth = -1;
    std::function<void(const MNode*, int)> check = [&](const MNode* n, int depth) {
      count++;
      if (n->n == 0 || n->n > kFanout - 1) err = "node fill " + std::to_string(n->n);
      for (int i = 0; i < n->n && err.empty(); i++) {
        if (n->lo[i] >= n->hi[i] || n->lo[i] < prev_end) err = "ranges out of order";
        if (n->leaf) {
          prev_end = n->hi[i];
          if (leaf_depth < 0) leaf_depth = depth;
          if (leaf_depth != depth) err = "leaves at different depths";
          continue;
        }
        const MNode* c = n->child(i);
        if (c->Lo() != n->lo[i] || c->Hi() != n->hi[i] || c->InnerGap() != n->gap[i]) err = "stale summary";
        else check(c, depth + 1);
      }
    };
    check(wroot_, 0);
    if (err.empty() && count != nodes_) err = "node count";
    return err;
  }

  VmaIndexStats Stats() const override {
    VmaIndexStats s;
    s.nodes = nodes_;
    s.node_bytes = sizeof(MNode);
    for (const MNode* n = wroot_; n; n = n->leaf ? nullptr : n->child(0)) s.height++;
    return s;
  }

 private:
  MNode* NewNode(bool leaf) {
    MNode* n = new (cache_.Alloc()) MNode;
    n->leaf = leaf;
    nodes_++;
    cache_.CountLinked(1);
    return n;
  }
  void Free(MNode* n) {
    nodes_--;
    cache_.CountLinked(-1);
    cache_.Free(n);
  }
  void Destroy(MNode* n) {
    if (!n) return;
    if (!n->leaf)
      for (int i = 0; i < n->n; i++) Destroy(n->child(i));
    Free(n);
  }

  // Insert v under n; returns n; *split receives a new right sibling if n overflowed.
  MNode* InsertRec(MNode* n, Vma* v, MNode** split) {
    *split = nullptr;
    MNode* c = n;
    if (c->leaf) {
      int pos = 0;
      while (pos < c->n && c->lo[pos] < v->vm_start) pos++;
      InsertAt(c, pos, v->vm_start, v->vm_end, 0, v);
    } else {
      int i = 0;
      while (i + 1 < c->n && c->lo[i + 1] <= v->vm_start) i++;
      MNode* sib = nullptr;
      MNode* nc = InsertRec(c->child(i), v, &sib);
      c->SetChild(i, nc);
      if (sib) InsertAt(c, i + 1, sib->Lo(), sib->Hi(), sib->InnerGap(), sib);
    }
    if (c->n > kFanout - 1) {  // keep one slot free: split at fan-out
      MNode* r = NewNode(c->leaf);
      int half = c->n / 2;
      r->n = static_cast<uint8_t>(c->n - half);
      for (int k = 0; k < r->n; k++) {
        r->lo[k] = c->lo[half + k];
        r->hi[k] = c->hi[half + k];
        r->gap[k] = c->gap[half + k];
        r->p[k] = c->p[half + k];
      }
      c->n = static_cast<uint8_t>(half);
      *split = r;
    }
    return c;
  }

  static void InsertAt(MNode* c, int pos, uint64_t lo, uint64_t hi, uint64_t gap, void* p) {
    for (int k = c->n; k > pos; k--) {
      c->lo[k] = c->lo[k - 1];
      c->hi[k] = c->hi[k - 1];
      c->gap[k] = c->gap[k - 1];
      c->p[k] = c->p[k - 1];
    }
    c->lo[pos] = lo;
    c->hi[pos] = hi;
    c->gap[pos] = gap;
    c->p[pos] = p;
    c->n++;
  }
  static void RemoveAt(MNode* c, int pos) {
    for (int k = pos; k + 1 < c->n; k++) {
      c->lo[k] = c->lo[k + 1];
      c->hi[k] = c->hi[k + 1];
      c->gap[k] = c->gap[k + 1];
      c->p[k] = c->p[k + 1];
    }
    c->n--;
  }

  // Removes the entry starting at `start`; returns n, or null if it became empty.
  MNode* EraseRec(MNode* n, uint64_t start) {
    MNode* c = n;
    if (c->leaf) {
      for (int k = 0; k < c->n; k++)
        if (c->lo[k] == start) {
          RemoveAt(c, k);
          break;
        }
    } else {
      int i = 0;
      while (i + 1 < c->n && c->lo[i + 1] <= start) i++;
      MNode* nc = EraseRec(c->child(i), start);
      if (nc) c->SetChild(i, nc);
      else RemoveAt(c, i);
      // Merge an underfull child into a neighbour when both fit in one node, so long
      // mmap/munmap churn does not leave a tree of near-empty nodes.
      if (nc && nc->n < kFanout / 4 && c->n > 1) {
        int j = i + 1 < c->n ? i + 1 : i - 1;  // sibling
        int l = std::min(i, j), r = std::max(i, j);
        MNode* left = c->child(l);
        MNode* right = c->child(r);
        if (left->n + right->n <= kFanout - 1) {
          MNode* m = left;
          for (int k = 0; k < right->n; k++)
            InsertAt(m, m->n, right->lo[k], right->hi[k], right->gap[k], right->p[k]);
          Free(right);
          c->SetChild(l, m);
          RemoveAt(c, r);
        }
      }
    }
    if (c->n == 0) {
      Free(c);
      return nullptr;
    }
    return c;
  }

  MNode* UpdateRec(MNode* n, uint64_t old_start, Vma* v) {
    MNode* c = n;
    if (c->leaf) {
      for (int k = 0; k < c->n; k++)
        if (c->lo[k] == old_start) {
          c->lo[k] = v->vm_start;
          c->hi[k] = v->vm_end;
          break;
        }
    } else {
      int i = 0;
      while (i + 1 < c->n && c->lo[i + 1] <= old_start) i++;
      c->SetChild(i, UpdateRec(c->child(i), old_start, v));
    }
    return c;
  }

  static Vma* FirstEndAbove(const MNode* n, uint64_t addr) {
    if (!n) return nullptr;
    for (int i = 0; i < n->n; i++) {
      if (n->hi[i] <= addr) continue;
      if (n->leaf) return static_cast<Vma*>(n->p[i]);
      if (Vma* v = FirstEndAbove(n->child(i), addr)) return v;
    }
    return nullptr;
  }
  static Vma* FirstStartAtLeast(const MNode* n, uint64_t addr) {
    if (!n) return nullptr;
    for (int i = 0; i < n->n; i++) {
      if (n->hi[i] <= addr) continue;  // everything in it starts below addr
      if (n->leaf) {
        if (n->lo[i] >= addr) return static_cast<Vma*>(n->p[i]);
        continue;
      }
      if (Vma* v = FirstStartAtLeast(n->child(i), addr)) return v;
    }
    return nullptr;
  }
  static Vma* LastStartBelow(const MNode* n, uint64_t addr) {
    if (!n) return nullptr;
    for (int i = n->n - 1; i >= 0; i--) {
      if (n->lo[i] >= addr) continue;
      if (n->leaf) return static_cast<Vma*>(n->p[i]);
      if (Vma* v = LastStartBelow(n->child(i), addr)) return v;
    }
    return nullptr;
  }
  static void Walk(const MNode* n, const std::function<void(Vma*)>& fn) {
    if (!n) return;
    for (int i = 0; i < n->n; i++) {
      if (n->leaf) fn(static_cast<Vma*>(n->p[i]));
      else Walk(n->child(i), fn);
    }
  }

  // The end of gap [gs, ge) clipped to [low, high) if it holds length, else ~0.
  static uint64_t Clip(uint64_t gs, uint64_t ge, uint64_t length, uint64_t low, uint64_t high) {
    if (gs < low) gs = low;
    if (ge > high) ge = high;
    return (ge > gs && ge - gs >= length) ? ge : ~0ull;
  }

  // Highest gap strictly inside n's subtree (between two of its ranges).
  static uint64_t GapRec(const MNode* n, uint64_t length, uint64_t low, uint64_t high) {
    for (int i = n->n - 1; i >= 0; i--) {
      if (n->lo[i] >= high) continue;  // the entry and every gap above it lie above high
      // gap between entry i-1 and entry i
      if (i + 1 < n->n) {
        uint64_t r = Clip(n->hi[i], n->lo[i + 1], length, low, high);
        if (r != ~0ull) return r;
      }
      if (!n->leaf && n->gap[i] >= length && n->lo[i] < high && n->hi[i] > low) {
        uint64_t r = GapRec(n->child(i), length, low, high);
        if (r != ~0ull) return r;
      }
      if (n->hi[i] <= low) return ~0ull;  // everything further left is below low
    }
    return ~0ull;
  }

  MNode* wroot_ = nullptr;  // guarded by mmap_lock
  uint64_t nodes_ = 0;      // guarded by mmap_lock
  NodeCache cache_;         // guarded by mmap_lock write: free nodes
};

// ===================================================================== maple
class MapleIndex final : public VmaIndex {
 public:
  MapleIndex(bool rcu, MemoryBudget* budget, bool prealloc_worst) : mt_(rcu, budget, prealloc_worst) {}

  Vma* FindVma(uint64_t addr) const override {
    Settle();
    uint64_t first, last;
    return static_cast<Vma*>(mt_.Find(addr, &first, &last));
  }
  Vma* NextFrom(uint64_t addr) const override {
    Settle();
    uint64_t first, last;
    return static_cast<Vma*>(mt_.FindStart(addr, &first, &last));
  }
  Vma* PrevOf(uint64_t addr) const override {
    Settle();
    uint64_t first, last;
    return addr ? static_cast<Vma*>(mt_.FindRev(addr - 1, &first, &last)) : nullptr;
  }
  void ForEach(const std::function<void(Vma*)>& fn) const override {
    Settle();
    mt_.ForEachRange([&](uint64_t, uint64_t, void* e) {
      if (e) fn(static_cast<Vma*>(e));
    });
  }

  /// vma_iter_store(): v over [vm_start, vm_end - 1].
  void Insert(Vma* v) override { StoreOver(v->vm_start, v->vm_end - 1, v); }
  /// vma_iter_clear(): NULL over [start, end - 1] (deferred, see vma_index.h).
  void Erase(Vma*, uint64_t start, uint64_t end) override { Clear(start, end - 1); }
  /// vma_shrink() clears what v lost; vma_expand() stores v over its whole new range.
  void Update(Vma* v, uint64_t os, uint64_t oe) override {
    const uint64_t ns = v->vm_start, ne = v->vm_end;
    if (ne <= os || ns >= oe) {
      Clear(os, oe - 1);
    } else {
      if (ns > os) Clear(os, ns - 1);
      if (ne < oe) Clear(ne, oe - 1);
    }
    if (ns < os || ne > oe || ne <= os || ns >= oe) StoreOver(ns, ne - 1, v);
  }

  uint64_t HighestGapEnd(uint64_t length, uint64_t low, uint64_t high) const override {
    Settle();
    return mt_.EmptyAreaRevEnd(length, low, high);
  }

  Vma* LookupRcu(uint64_t addr) const override {
    return mt_.in_rcu() ? static_cast<Vma*>(mt_.LoadRcu(addr)) : nullptr;
  }
  void Commit() override { Flush(); }
  void TakeRetired(std::vector<void*>& out) override {
    Flush();
    mt_.TakeRetired(out);
  }
  bool ReuseRetired(std::vector<void*>& nodes) override {
    mt_.ReuseNodes(nodes);
    return true;
  }
  void TrimNodeCache() override { mt_.TrimNodeCache(); }

  std::string Check() const override {
    Settle();
    std::string err = mt_.Validate();
    mt_.ForEachRange([&](uint64_t first, uint64_t last, void* e) {
      const Vma* v = static_cast<const Vma*>(e);
      if (err.empty() && v && (v->vm_start != first || v->vm_end - 1 != last))
        err = fmt::format("entry [{:#x}, {:#x}] maps VMA [{:#x}, {:#x})", first, last, v->vm_start, v->vm_end);
    });
    return err;
  }
  MapleTree* maple_tree() override { return &mt_; }
  VmaIndexStats Stats() const override {
    VmaIndexStats s;
    s.nodes = mt_.nodes();
    s.node_bytes = MapleTree::kNodeSize;
    s.height = mt_.height();
    s.maple = mt_.stats();
    return s;
  }

 private:
  /// A store of v over [first, last]. A deferred clear is dropped where the store
  /// overwrites it; what it covers beyond the store is cleared after the store, so an
  /// address in both the old and the new range is never seen empty (as MAP_FIXED over
  /// a mapping: the new VMA overwrites the old ones in one store).
  void StoreOver(uint64_t first, uint64_t last, Vma* v) {
    const bool pending = pending_;
    pending_ = false;
    mt_.Store(first, last, v);
    if (!pending) return;
    if (pend_last_ < first || pend_first_ > last) {  // disjoint
      mt_.Store(pend_first_, pend_last_, nullptr);
      return;
    }
    if (pend_first_ < first) mt_.Store(pend_first_, first - 1, nullptr);
    if (pend_last_ > last) mt_.Store(last + 1, pend_last_, nullptr);
  }
  /// Defers a NULL store, merging it with a deferred one when no VMA lies between.
  void Clear(uint64_t first, uint64_t last) {
    if (pending_) {
      if (first > pend_last_ && Empty(pend_last_ + 1, first - 1)) {
        pend_last_ = last;
        return;
      }
      if (last < pend_first_ && Empty(last + 1, pend_first_ - 1)) {
        pend_first_ = first;
        return;
      }
      Flush();
    }
    pending_ = true;
    pend_first_ = first;
    pend_last_ = last;
  }
  bool Empty(uint64_t first, uint64_t last) const {
    if (first > last) return true;
    uint64_t f, l;
    return !mt_.Find(first, &f, &l) || f > last;
  }
  void Flush() {
    if (!pending_) return;
    pending_ = false;
    mt_.Store(pend_first_, pend_last_, nullptr);
  }
  /// Queries see the deferred store made. Under mmap_lock read nothing is deferred
  /// (Commit ran at the last write unlock), so this only writes under mmap_lock write.
  void Settle() const { const_cast<MapleIndex*>(this)->Flush(); }

  MapleTree mt_;               // guarded by mmap_lock (LookupRcu: RCU)
  bool pending_ = false;       // guarded by mmap_lock write: a deferred NULL store
  uint64_t pend_first_ = 0, pend_last_ = 0;
};

}  // namespace

void VmaIndex::DeleteRetired(std::vector<void*>& nodes, MemoryBudget* budget, int shard) {
  MapleTree::FreeNodes(nodes, budget, shard);
}

uint64_t VmaIndex::PoolSlabBytes() {
  return MapleTree::Pool::Get().slab_bytes() + BTreePool::Get().slab_bytes();
}

std::unique_ptr<VmaIndex> VmaIndex::Create(VmaIndexKind kind, MemoryBudget* budget) {
  if (kind == VmaIndexKind::kRbtree) return std::make_unique<BTreeIndex>(budget);
  return CreateMaple(true, budget);
}

std::unique_ptr<VmaIndex> VmaIndex::CreateMaple(bool in_rcu, MemoryBudget* budget, bool prealloc_worst) {
  return std::make_unique<MapleIndex>(in_rcu, budget, prealloc_worst);
}

}  // namespace vmspace

namespace vmspace {

uint64_t IndexNodePoolBytes() { return VmaIndex::PoolSlabBytes(); }

}  // namespace vmspace
