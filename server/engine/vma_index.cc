#include "vma_index.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <new>

#include "sync/mutex.h"
#include "sync/rcu.h"

namespace vmspace {

const char* VmaIndexKindName(VmaIndexKind k) {
  return k == VmaIndexKind::kRbtree ? "rbtree" : "maple";
}

namespace {

// ===================================================================== maple
// Copy-on-write B+tree. Node layout (one struct for both kinds, 528 bytes): up to
// kFanout entries. A leaf entry is a VMA's range and pointer; an interior entry is a
// child with its subtree's lowest start (lo), highest end (hi) and largest gap between
// two consecutive ranges inside it (gap). Fan-out 16 like the maple tree's range64
// leaves; interior nodes carry the gap array that maple_arange_64 nodes carry.
// Nodes are immutable once published: a write copies the path from the root to the
// leaf it changes and publishes the new root; the old path is retired.
constexpr int kFanout = 16;

struct MNode {
  bool leaf = true;
  uint8_t n = 0;
  uint64_t gen = 0;       // write section that created it: mutable in place while current
  uint64_t lo[kFanout];   // leaf: vm_start; interior: subtree lowest start
  uint64_t hi[kFanout];   // leaf: vm_end; interior: subtree highest end
  uint64_t gap[kFanout];  // interior only: largest inner gap of the child
  void* p[kFanout];       // leaf: Vma*; interior: MNode*

  uint64_t Lo() const { return lo[0]; }
  uint64_t Hi() const { return hi[n - 1]; }
  /// Largest gap between consecutive ranges inside this node's subtree.
  uint64_t InnerGap() const {
    uint64_t g = 0;
    for (int i = 0; i < n; i++) {
      if (!leaf && gap[i] > g) g = gap[i];
      if (i + 1 < n && lo[i + 1] - hi[i] > g) g = lo[i + 1] - hi[i];
    }
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

// Free nodes, shared by all indexes of the process. Writers take nodes in batches into
// a small per-index cache; nodes freed after a grace period come back here a batch at a
// time. Keeps malloc (and cross-thread free) off the mmap/munmap path.
class NodePool {
 public:
  static NodePool& Get() {
    static NodePool* p = new NodePool;  // never destroyed: RCU callbacks may run late
    return *p;
  }
  void TakeBatch(std::vector<MNode*>& out, size_t n) {
    {
      MutexLock l(mu_);
      while (n && !free_.empty()) {
        out.push_back(free_.back());
        free_.pop_back();
        n--;
      }
    }
    while (n--) out.push_back(static_cast<MNode*>(::operator new(sizeof(MNode))));
  }
  void PutBatch(std::vector<void*>& nodes) {
    {
      MutexLock l(mu_);
      while (!nodes.empty() && free_.size() < kMaxFree) {
        free_.push_back(static_cast<MNode*>(nodes.back()));
        nodes.pop_back();
      }
    }
    for (void* n : nodes) ::operator delete(n);  // beyond the bound: back to malloc
    nodes.clear();
  }
  void PutBatch(std::vector<MNode*>& nodes) {
    std::vector<void*> v(nodes.begin(), nodes.end());
    nodes.clear();
    PutBatch(v);
  }
  /// Free nodes kept for reuse at most (about 1.7 MB); the rest go back to malloc.
  static constexpr size_t kMaxFree = 4096;

 private:
  Mutex mu_{LockRank::kNodePool};
  std::vector<MNode*> free_ ABSL_GUARDED_BY(mu_);
};

class BTreeIndex final : public VmaIndex {
 public:
  explicit BTreeIndex(bool rcu) : rcu_(rcu) {}
  ~BTreeIndex() override {
    // No readers remain when a space is destroyed.
    Destroy(wroot_);
    cache_.insert(cache_.end(), retired_.begin(), retired_.end());
    NodePool::Get().PutBatch(cache_);
  }

  Vma* LookupRcu(uint64_t addr) const override {
    if (!rcu_) return nullptr;
    const MNode* n = root_.load(std::memory_order_acquire);
    if (!n) return nullptr;
    while (!n->leaf) {
      int i = 0;
      while (i + 1 < n->n && n->hi[i] <= addr) i++;
      n = n->child(i);
    }
    for (int i = 0; i < n->n; i++)
      if (n->lo[i] <= addr && addr < n->hi[i]) return static_cast<Vma*>(n->p[i]);
    return nullptr;
  }

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
      Publish(leaf);
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
    Publish(nroot);
  }

  /// A range update never changes the order of the (non-overlapping) entries, so the
  /// entry is rewritten where it is, and the path above it re-summarised.
  void Update(Vma* v, uint64_t old_start, uint64_t old_end) override {
    if (!wroot_) return;
    Publish(UpdateRec(wroot_, old_start, v));
  }

  void Erase(Vma* v, uint64_t start, uint64_t end) override {
    MNode* root = wroot_;
    if (!root) return;
    MNode* nroot = EraseRec(root, start);
    // Collapse interior roots with a single child (the tree only shrinks at the top).
    while (nroot && !nroot->leaf && nroot->n == 1) {
      MNode* c = nroot->child(0);
      Retire(nroot);
      nroot = c;
    }
    Publish(nroot);
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

  /// Publishes the writer's tree to lockless readers (rcu_assign_pointer) and starts a
  /// new write section: nodes created from now on are copies again.
  void Commit() override {
    if (rcu_) root_.store(wroot_, std::memory_order_release);
    gen_++;
  }

  void TakeRetired(std::vector<void*>& out) override {
    out.insert(out.end(), retired_.begin(), retired_.end());
    retired_.clear();
  }

 private:
  MNode* Alloc() {
    if (cache_.empty()) NodePool::Get().TakeBatch(cache_, 32);
    MNode* n = cache_.back();
    cache_.pop_back();
    return n;
  }
  void Free(MNode* n) {
    cache_.push_back(n);
    if (cache_.size() > 128) {
      std::vector<MNode*> give(cache_.end() - 64, cache_.end());
      cache_.resize(cache_.size() - 64);
      NodePool::Get().PutBatch(give);
    }
  }
  MNode* NewNode(bool leaf) {
    MNode* n = new (Alloc()) MNode;
    n->leaf = leaf;
    n->gen = gen_;
    return n;
  }
  /// The node to modify: n itself if this write section created it (readers cannot
  /// see it yet) or the index is not RCU-readable; else a copy, and n is retired.
  MNode* Mutable(MNode* n) {
    if (!rcu_ || n->gen == gen_) return n;
    MNode* c = new (Alloc()) MNode(*n);
    c->gen = gen_;
    Retire(n);
    return c;
  }
  void Retire(MNode* n) {
    if (rcu_) retired_.push_back(n);
    else Free(n);
  }
  /// The writer's new root; readers see it at Commit().
  void Publish(MNode* root) { wroot_ = root; }
  void Destroy(MNode* n) {
    if (!n) return;
    if (!n->leaf)
      for (int i = 0; i < n->n; i++) Destroy(n->child(i));
    cache_.push_back(n);
  }

  // Insert v under n; returns the copy of n; *split receives a new right sibling if the
  // copy overflowed.
  MNode* InsertRec(MNode* n, Vma* v, MNode** split) {
    *split = nullptr;
    MNode* c = Mutable(n);
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

  // Removes the entry starting at `start`; returns the copy of n, or null if it
  // became empty.
  MNode* EraseRec(MNode* n, uint64_t start) {
    MNode* c = Mutable(n);
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
          MNode* m = Mutable(left);
          for (int k = 0; k < right->n; k++)
            InsertAt(m, m->n, right->lo[k], right->hi[k], right->gap[k], right->p[k]);
          Retire(right);
          c->SetChild(l, m);
          RemoveAt(c, r);
        }
      }
    }
    if (c->n == 0) {
      Retire(c);
      return nullptr;
    }
    return c;
  }

  MNode* UpdateRec(MNode* n, uint64_t old_start, Vma* v) {
    MNode* c = Mutable(n);
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

  const bool rcu_;                   // "maple": copy-on-write + RCU publication
  std::atomic<MNode*> root_{nullptr};  // published root: what LookupRcu readers see
  MNode* wroot_ = nullptr;           // guarded by mmap_lock: the writer's current tree
  uint64_t gen_ = 1;                 // guarded by mmap_lock write: current write section
  std::vector<MNode*> retired_;      // guarded by mmap_lock write
  std::vector<MNode*> cache_;        // guarded by mmap_lock write: free nodes
};
static_assert(sizeof(MNode) == 528, "update the node size in vma_index.h");

}  // namespace

void VmaIndex::DeleteRetired(std::vector<void*>& nodes) {
  if (!nodes.empty()) NodePool::Get().PutBatch(nodes);
}

std::unique_ptr<VmaIndex> VmaIndex::Create(VmaIndexKind kind) {
  return std::make_unique<BTreeIndex>(kind == VmaIndexKind::kMaple);
}

}  // namespace vmspace
