// SPDX-License-Identifier: Apache-2.0
// The maple tree (lib/maple_tree.c, Linux 6.18): see maple_tree.h. Function comments
// name the kernel function each part follows.
#include "maple_tree.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "fmt/format.h"

namespace vmspace {

namespace {
thread_local int64_t tls_linked_bytes = 0;
}  // namespace

// ======================================================================= node caches

NodeCache::~NodeCache() {
  if (!free_.empty()) PutBack(free_);
}

void NodeCache::PutBack(std::vector<void*>& nodes) {
  if (budget_) budget_->Uncharge(MemKind::kIndexNodes, nodes.size() * node_size_);
  put_(nodes);
}

void NodeCache::Refill(size_t n) {
  constexpr size_t kSpare = 32;  // one pool batch covers the next few stores
  const size_t take = n - free_.size() + kSpare;
  take_(free_, take);
  if (budget_) budget_->Charge(MemKind::kIndexNodes, take * node_size_);
}

void* NodeCache::Alloc() {
  Reserve(1);
  return Pop();
}

void NodeCache::TrimTo(size_t n) {
  if (free_.size() <= n) return;
  std::vector<void*> give(free_.begin() + static_cast<ptrdiff_t>(n), free_.end());
  free_.resize(n);
  PutBack(give);
}

void NodeCache::Free(void* n) {
  Push(n);
  Trim();
}

int64_t NodeCache::ThreadLinkedBytes() { return tls_linked_bytes; }
void NodeCache::CountLinked(int64_t nodes) { tls_linked_bytes += nodes * static_cast<int64_t>(node_size_); }

// ======================================================================= layout

const char* MapleStoreTypeName(MapleStoreType t) {
  switch (t) {
    case MapleStoreType::kNewRoot: return "new_root";
    case MapleStoreType::kStoreRoot: return "store_root";
    case MapleStoreType::kExactFit: return "exact_fit";
    case MapleStoreType::kSpanningStore: return "spanning_store";
    case MapleStoreType::kSplitStore: return "split_store";
    case MapleStoreType::kRebalance: return "rebalance";
    case MapleStoreType::kAppend: return "append";
    case MapleStoreType::kNodeStore: return "node_store";
    case MapleStoreType::kSlotStore: return "slot_store";
    case MapleStoreType::kCount: break;
  }
  return "?";
}

uint64_t MapleStats::stores_total() const {
  uint64_t s = 0;
  for (uint64_t n : stores) s += n;
  return s;
}

void MapleStats::Add(const MapleStats& o) {
  for (int i = 0; i < static_cast<int>(MapleStoreType::kCount); i++) stores[i] += o.stores[i];
  prealloc_nodes += o.prealloc_nodes;
  used_nodes += o.used_nodes;
  prealloc_short += o.prealloc_short;
  retired_nodes += o.retired_nodes;
}

namespace {
struct Totals {
  Mutex mu{LockRank::kNodePool};
  MapleStats sum ABSL_GUARDED_BY(mu);
};
Totals& DestroyedTrees() {
  static Totals* t = new Totals;
  return *t;
}
}  // namespace

MapleStats MapleTree::DestroyedTotals() {
  Totals& t = DestroyedTrees();
  MutexLock l(t.mu);
  return t.sum;
}

namespace {
constexpr uint64_t kMax = ~0ull;
// enum maple_type values, kept in bits 3-6 of a tagged node pointer (mt_mk_node).
constexpr uintptr_t kLeafType = 1;    // maple_leaf_64
constexpr uintptr_t kArangeType = 3;  // maple_arange_64
constexpr uintptr_t kNodeMask = 0xff;
constexpr uintptr_t kParentRange64 = 0x6;  // MAPLE_PARENT_RANGE64
constexpr uintptr_t kParentRoot = 0x1;     // MA_ROOT_PARENT

// Word offsets in a node after the parent pointer (struct maple_range_64 / arange_64).
constexpr int kLeafSlotBase = 15;    // pivot[15] then slot[16]; meta overlays slot[15]
constexpr int kLeafMeta = 30;
constexpr int kAPivots = 9, kASlotBase = 9, kAGapBase = 19, kAMeta = 29;

constexpr int Pivots(bool leaf) { return leaf ? MapleTree::kRangeSlots - 1 : kAPivots; }
constexpr int Slots(bool leaf) { return leaf ? MapleTree::kRangeSlots : MapleTree::kArangeSlots; }
// mt_min_slots[]: a non-root node's data end is at least this.
constexpr int MinSlots(bool leaf) { return leaf ? MapleTree::kRangeSlots / 2 - 2 : MapleTree::kArangeSlots / 2 - 1; }

constexpr auto kRlx = std::memory_order_relaxed;
constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
}  // namespace

struct MapleTree::Node {
  std::atomic<uintptr_t> parent;  // parent | slot << 3 | type; tree | 1 for the root; self when dead
  std::atomic<uint64_t> w[31];

  std::atomic<uint64_t>& piv(int i) { return w[i]; }
  std::atomic<uint64_t>& slot(bool leaf, int i) { return w[(leaf ? kLeafSlotBase : kASlotBase) + i]; }
  std::atomic<uint64_t>& gap(int i) { return w[kAGapBase + i]; }
  uint64_t Piv(int i) const { return w[i].load(kRlx); }
  uintptr_t Slot(bool leaf, int i) const { return w[(leaf ? kLeafSlotBase : kASlotBase) + i].load(kRlx); }
  uint64_t Gap(int i) const { return w[kAGapBase + i].load(kRlx); }
  int MetaEnd(bool leaf) const { return static_cast<int>(w[leaf ? kLeafMeta : kAMeta].load(kRlx) & 0xff); }
  int MetaGap() const { return static_cast<int>((w[kAMeta].load(kRlx) >> 8) & 0xff); }
  void SetMeta(bool leaf, int end, int gap_off) {
    if (leaf) {
      if (end < Slots(true) - 1) w[kLeafMeta].store(static_cast<uint64_t>(end), kRlx);  // mas_leaf_set_meta
    } else {
      w[kAMeta].store(static_cast<uint64_t>(end) | static_cast<uint64_t>(gap_off) << 8, kRlx);
    }
  }
  /// ma_data_end(): the offset of the last used slot.
  int DataEnd(bool leaf, uint64_t max) const {
    if (!leaf) return MetaEnd(false);
    const uint64_t p = Piv(Pivots(true) - 1);
    if (!p) return MetaEnd(true);
    return p == max ? Pivots(true) - 1 : Pivots(true);
  }
  bool Dead() const { return (parent.load(kAcq) & ~kNodeMask) == reinterpret_cast<uintptr_t>(this); }
};
static_assert(sizeof(MapleTree::Node) == MapleTree::kNodeSize, "maple nodes are 256 bytes");

namespace {
using Node = MapleTree::Node;
inline Node* ToNode(uintptr_t e) { return reinterpret_cast<Node*>(e & ~kNodeMask); }
inline bool IsLeaf(uintptr_t e) { return ((e >> 3) & 0xf) == kLeafType; }
inline uintptr_t Tag(Node* n, bool leaf) { return reinterpret_cast<uintptr_t>(n) | (leaf ? kLeafType : kArangeType) << 3; }
inline uintptr_t ParentVal(Node* p, int slot) { return reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(slot) << 3 | kParentRange64; }
// Size of [first, last] as a gap (2^64 saturates).
inline uint64_t GapSize(uint64_t first, uint64_t last) { return (first == 0 && last == kMax) ? kMax : last - first + 1; }

/// mas_leaf_max_gap(): the largest NULL range of a leaf covering [min, max].
/// Without a branch on the slots (NULLs alternate with entries unpredictably).
uint64_t LeafMaxGap(const Node* n, uint64_t min, uint64_t max) {
  const int end = n->DataEnd(true, max);
  uint64_t g = 0, start = min;
  for (int i = 0; i <= end; i++) {
    const uint64_t hi = i < end ? n->Piv(i) : max;
    const uint64_t size = n->Slot(true, i) ? 0 : GapSize(start, hi);
    g = size > g ? size : g;
    start = hi + 1;
  }
  return g;
}
/// mas_max_gap(): a node's largest gap (an arange node's meta gap offset).
uint64_t MaxGap(uintptr_t e, uint64_t min, uint64_t max) {
  const Node* n = ToNode(e);
  return IsLeaf(e) ? LeafMaxGap(n, min, max) : n->Gap(n->MetaGap());
}

/// How many of pivots [0, end) of n are below index (pivots ascend, so this is the
/// offset of the slot holding index): a branchless binary search over the node's
/// pivots, those at or past end counting as above every index (four probes, no branch
/// to mispredict; the words past a node's pivots are read but never counted).
template <int kPivots>
int CountBelow(const Node* n, int end, uint64_t index) {
  static_assert(kPivots <= 15, "four probes cover 15 pivots");
  int o = 0;
#pragma GCC unroll 4
  for (int step = 8; step > 0; step >>= 1) {
    const int m = o + step - 1;
    o += step & -(static_cast<int>(m < end) & static_cast<int>(n->Piv(m) < index));
  }
  return o;
}
}  // namespace

/// A node on a walk (the ma_state's node, offset, end, min and max at one level).
/// Trivial: walks keep arrays of them, filled as they descend.
struct MapleTree::Pos {
  uintptr_t enode;
  Node* n;
  bool leaf;
  int off, end;
  uint64_t min, max;

  void Set(uintptr_t e, uint64_t lo, uint64_t hi) {
    enode = e;
    n = ToNode(e);
    leaf = IsLeaf(e);
    min = lo;
    max = hi;
    end = n->DataEnd(leaf, hi);
  }
  /// The offset of the slot holding index (mas_wr_walk_descend's pivot scan): the
  /// number of pivots below index among [0, end), counted without a branch per pivot.
  /// Writer side only (relaxed loads: the caller is the only writer).
  int Offset(uint64_t index) const {
    return leaf ? CountBelow<Pivots(true)>(n, end, index) : CountBelow<Pivots(false)>(n, end, index);
  }
  uint64_t SlotMax(int i) const { return i < end ? n->Piv(i) : max; }
  uint64_t SlotMin(int i) const { return i ? n->Piv(i - 1) + 1 : min; }
  uintptr_t Slot(int i) const { return n->Slot(leaf, i); }
  /// Moves to child `off` (mas_descend).
  void Descend(Pos& child) const { child.Set(Slot(off), SlotMin(off), SlotMax(off)); }
};

/// struct maple_big_node: the data of up to two nodes plus the change, before it is
/// cut into nodes. Entry i covers [pivot[i-1] + 1 (min for 0), pivot[i]].
struct MapleTree::Big {
  static constexpr int kCap = 2 * kRangeSlots + 4;
  uint64_t pivot[kCap];
  uintptr_t slot[kCap];
  uint64_t gap[kCap];
  int n = 0;
  uint64_t min = 0;

  void Add(uint64_t p, uintptr_t s, uint64_t g = 0) {
    if (n == kCap) std::abort();  // more than three nodes' worth: a bug in the caller
    pivot[n] = p;
    slot[n] = s;
    gap[n] = g;
    n++;
  }
  /// mas_mab_cp(): slots [from, to] of a node.
  void AddNode(const Pos& p, int from, int to) {
    for (int i = from; i <= to; i++) Add(p.SlotMax(i), p.Slot(i), p.leaf ? 0 : p.n->Gap(i));
  }
  void Append(const Big& b) {
    for (int i = 0; i < b.n; i++) Add(b.pivot[i], b.slot[i], b.gap[i]);
  }
  uint64_t First(int i) const { return i ? pivot[i - 1] + 1 : min; }
};

/// struct ma_wr_state + ma_state for one store.
struct MapleTree::Write {
  uint64_t index, last;
  void* entry;
  Pos* path = nullptr;    // root to leaf for index: this thread's cached walk (Classify;
                          // rpath for a new root)
  Pos rpath[kMaxHeight];  // spanning store / rebalance: root to leaf for last + 1
  int depth = 0;          // levels walked (the leaf is path[depth - 1])
  int off = 0, off_end = 0, ro = 0;
  uint64_t r_min = 0, r_max = 0, end_piv = 0;
  uintptr_t content = 0;
  int new_end = 0;
  MapleStoreType type;
  Pos& leaf() { return path[depth - 1]; }
  const Pos& leaf() const { return path[depth - 1]; }
};

// ======================================================================= lifetime

namespace {
std::atomic<uint64_t> next_tree_id{1};
}  // namespace

MapleTree::MapleTree(bool in_rcu, MemoryBudget* budget, bool prealloc_worst)
    : rcu_(in_rcu),
      prealloc_worst_(prealloc_worst),
      id_(next_tree_id.fetch_add(1, kRlx)),
      cache_([](std::vector<void*>& out, size_t n) { Pool::Get().TakeBatch(out, n); },
             [](std::vector<void*>& v) { Pool::Get().PutBatch(v); }, kNodeSize, budget),
      budget_(budget) {}

MapleTree::~MapleTree() {
  {
    Totals& t = DestroyedTrees();
    MutexLock l(t.mu);
    t.sum.Add(stats_);
  }
  std::vector<void*> all;
  std::vector<uintptr_t> stack;
  if (uintptr_t r = root_.load(kRlx)) stack.push_back(r);
  while (!stack.empty()) {
    uintptr_t e = stack.back();
    stack.pop_back();
    Node* n = ToNode(e);
    if (!IsLeaf(e))
      for (int i = 0; i <= n->MetaEnd(false); i++) stack.push_back(n->Slot(false, i));
    all.push_back(n);
  }
  cache_.CountLinked(-static_cast<int64_t>(all.size()));
  all.insert(all.end(), retired_.begin(), retired_.end());
  FreeNodes(all, budget_);
}

void MapleTree::TakeRetired(std::vector<void*>& out) {
  out.insert(out.end(), retired_.begin(), retired_.end());
  retired_.clear();
}

void MapleTree::ReuseNodes(std::vector<void*>& nodes) {
  for (void* n : nodes) cache_.Push(n);
  nodes.clear();
  cache_.Trim();
}

void MapleTree::TrimNodeCache() { cache_.TrimTo(NodeCache::kKeep); }

void MapleTree::FreeNodes(std::vector<void*>& nodes, MemoryBudget* budget, int shard) {
  if (nodes.empty()) return;
  if (budget) budget->Uncharge(MemKind::kIndexNodes, nodes.size() * kNodeSize);
  Pool::Get().PutBatch(nodes, shard);
}

MapleTree::Node* MapleTree::NewNode() {
  if (prealloc_left_ > 0) {
    prealloc_left_--;
    stats_.used_nodes++;
  } else {
    cache_.Reserve(1);
    stats_.prealloc_short++;
  }
  Node* n = static_cast<Node*>(cache_.Pop());
  // mas_pop_node() zeroes the node; here its builder writes every other word. The
  // parent is cleared at once: a recycled node's is its dead mark, and a lockless
  // reader may reach a new child before Adopt sets it.
  n->parent.store(0, kRlx);
  nodes_++;
  cache_.CountLinked(1);
  return n;
}

/// mte_set_node_dead() + ma_free_rcu() (or mas_push_node() without RCU).
void MapleTree::Retire(Node* n) {
  n->parent.store(reinterpret_cast<uintptr_t>(n), kRel);
  nodes_--;
  stats_.retired_nodes++;
  cache_.CountLinked(-1);
  if (rcu_) retired_.push_back(n);
  else cache_.Push(n);  // mas_push_node(): reusable by this store; Store trims after it
}

/// mt_destroy_walk(): retires a whole subtree.
void MapleTree::RetireTree(uintptr_t e) {
  Node* n = ToNode(e);
  if (!IsLeaf(e))
    for (int i = 0; i <= n->MetaEnd(false); i++) RetireTree(n->Slot(false, i));
  Retire(n);
}

/// mas_topiary_replace()'s second half: every node under old_top whose parent pointer
/// still names its old parent was replaced or dropped (the kept children were adopted
/// by new nodes); mark them dead and retire them.
void MapleTree::RetireReplaced(uintptr_t old_top) {
  uintptr_t stack[2 * kMaxHeight * kArangeSlots];
  int sp = 0;
  stack[sp++] = old_top;
  while (sp) {
    const uintptr_t e = stack[--sp];
    Node* x = ToNode(e);
    if (!IsLeaf(e)) {
      for (int i = 0; i <= x->MetaEnd(false); i++) {
        const uintptr_t c = x->Slot(false, i);
        if ((ToNode(c)->parent.load(kRlx) & ~kNodeMask) == reinterpret_cast<uintptr_t>(x)) stack[sp++] = c;
      }
    }
    Retire(x);
  }
}

// ======================================================================= write walk

namespace {
/// The write-side walk (mas_wr_walk_index): path[0..depth) from the root to the leaf
/// holding index, each with the offset taken. Returns the depth.
int WalkTo(uintptr_t root, uint64_t index, MapleTree::Pos* path) {
  uint64_t min = 0, max = kMax;
  uintptr_t e = root;
  for (int d = 0;; d++) {
    MapleTree::Pos& p = path[d];
    p.Set(e, min, max);
    p.off = p.Offset(index);
    if (p.leaf) return d + 1;
    min = p.SlotMin(p.off);
    max = p.SlotMax(p.off);
    e = p.Slot(p.off);
  }
}

/// The last leaf this thread walked to, with its path (the ma_state a kernel caller
/// keeps across mas_walk / mas_find / mas_store calls of one operation): valid while
/// the tree (id) has begun no store since (gen). Per thread, so readers under a shared
/// mmap_lock never write a shared field; the tree's gen only changes under the
/// writer's lock, which excludes them.
struct WalkCache {
  uint64_t tree = 0;  // MapleTree::id_; 0: empty
  uint64_t gen = 0;
  int depth = 0;
  MapleTree::Pos path[MapleTree::kMaxHeight];
};
constinit thread_local WalkCache tls_walk{};
}  // namespace

/// mas_walk(): the path (*depth levels) to the leaf holding index, each level's
/// offset taken: this thread's cached path, moved there. When index lies in the leaf
/// this thread last walked to and the tree has not changed since, only the leaf's
/// offset is found (mas_walk on an active ma_state whose node covers index). The
/// caller may move the path to another leaf of the tree (it stays the cached one);
/// the next walk on this thread overwrites it.
inline MapleTree::Pos* MapleTree::Walk(uint64_t index, int* depth) const {
  WalkCache& c = tls_walk;
  if (c.tree == id_ && c.gen == gen_) {
    Pos& L = c.path[c.depth - 1];
    if (index >= L.min && index <= L.max) {
      L.off = L.Offset(index);
      *depth = c.depth;
      return c.path;
    }
  }
  return WalkFromRoot(index, depth);
}

/// Walk() when the cached path does not hold index: from the root (out of line, so
/// the cached case inlines into the walk's callers).
MapleTree::Pos* MapleTree::WalkFromRoot(uint64_t index, int* depth) const {
  WalkCache& c = tls_walk;
  c.tree = id_;
  c.gen = gen_;
  c.depth = WalkTo(root_.load(kRlx), index, c.path);
  *depth = c.depth;
  return c.path;
}

void MapleTree::Store(uint64_t index, uint64_t last, void* entry) {
  Write w;
  w.index = index;
  w.last = last;
  w.entry = entry;
  const MapleStoreType t = Classify(w);  // w.path: this thread's cached walk, used in place
  gen_++;  // cached walks end here (those of this store were taken before it)
  w.type = t;
  // mas_preallocate(): the store type's worst case, so the store itself cannot fail.
  // The nodes are set aside on the cache's top in one step (kmem_cache_alloc_bulk).
  const int request = PreallocCalc(t);
  cache_.Reserve(static_cast<size_t>(request));
  prealloc_left_ = request;
  stats_.prealloc_nodes += static_cast<uint64_t>(request);
  stats_.stores[static_cast<int>(t)]++;
  switch (t) {
    case MapleStoreType::kStoreRoot: StoreRootExpand(w); break;
    case MapleStoreType::kNewRoot: NewRoot(w); break;
    case MapleStoreType::kExactFit: ExactFit(w); break;
    case MapleStoreType::kSlotStore: SlotStore(w); break;
    case MapleStoreType::kAppend: Append(w); break;
    case MapleStoreType::kNodeStore: NodeStore(w); break;
    case MapleStoreType::kSplitStore: Split(w); break;
    case MapleStoreType::kRebalance: Rebalance(w); break;
    case MapleStoreType::kSpanningStore: SpanningStore(w); break;
    case MapleStoreType::kCount: break;
  }
  // A store within one leaf leaves its path valid (the leaf replaced or rewritten in
  // place, nothing above it but gaps changed): the thread's cached walk, which the
  // store ran in, stays valid for the tree as it is now; the next walk into this leaf
  // reuses it. Other stores leave it stale (gen_ moved on).
  if (t == MapleStoreType::kExactFit || t == MapleStoreType::kSlotStore || t == MapleStoreType::kAppend ||
      t == MapleStoreType::kNodeStore)
    tls_walk.gen = gen_;
  // mas_destroy(): the unused preallocations stay in the cache (kmem_cache_free_bulk),
  // which gives nodes back to the pool past its high mark.
  prealloc_left_ = 0;
  cache_.Trim();
}

/// mas_prealloc_calc(); with prealloc_worst_, Linux 6.1's mas_preallocate():
/// mas_node_count(mas, 1 + mas_mt_height(mas) * 3) whatever the store.
int MapleTree::PreallocCalc(MapleStoreType t) const {
  if (prealloc_worst_) return 1 + height_ * 3;
  switch (t) {
    case MapleStoreType::kNewRoot: return 1;
    case MapleStoreType::kStoreRoot: return 1;
    case MapleStoreType::kSpanningStore: return height_ * 3 + 1;
    case MapleStoreType::kSplitStore: return height_ * 2 + 1;
    case MapleStoreType::kRebalance: return height_ * 2 - 1;
    case MapleStoreType::kNodeStore: return rcu_ ? 1 : 0;
    default: return 0;
  }
}

/// mas_wr_walk() + mas_wr_store_type(), with mas_wr_extend_null() and
/// mas_extend_spanning_null() for NULL stores.
MapleStoreType MapleTree::Classify(Write& w) {
  const uintptr_t root = root_.load(kRlx);
  if (!root || (w.index == 0 && w.last == kMax)) {
    // No walk: the new root is built in w.rpath (the thread's cached walk, maybe of
    // another tree, is left as it is).
    w.path = w.rpath;
    return root ? MapleStoreType::kNewRoot : MapleStoreType::kStoreRoot;
  }
  w.path = Walk(w.index, &w.depth);
  Pos& L = w.leaf();
  w.off = L.off;
  w.r_min = L.SlotMin(w.off);
  w.r_max = L.SlotMax(w.off);
  w.content = L.Slot(w.off);
  // mas_is_span_wr(): past the leaf, or a NULL that would end a leaf that is not the
  // rightmost one.
  if (w.last > L.max || (w.last == L.max && !w.entry && w.last != kMax)) {
    // Not through the walk cache: it holds w.path (and last + 1 lies in another leaf).
    WalkTo(root, w.last == kMax ? kMax : w.last + 1, w.rpath);
    Pos& R = w.rpath[w.depth - 1];
    w.ro = R.off;
    if (!w.entry) {
      if (!w.content) w.index = w.r_min;
      if (w.index == w.r_min && w.off > 0 && !L.Slot(w.off - 1)) {
        w.off--;
        w.index = w.r_min = L.SlotMin(w.off);
      }
      if (!R.Slot(w.ro)) {
        w.last = R.SlotMax(w.ro);
        w.ro++;
      }
    }
    if (w.index == 0 && w.last == kMax) return MapleStoreType::kNewRoot;
    return MapleStoreType::kSpanningStore;
  }
  // mas_wr_end_piv()
  int oe = L.Offset(w.last);
  w.end_piv = L.SlotMax(oe);
  if (!w.entry) {  // mas_wr_extend_null()
    if (!L.Slot(oe)) {
      w.last = w.end_piv;
    } else if (w.last == w.end_piv && L.end != oe && !L.Slot(oe + 1)) {
      oe++;
      w.last = w.end_piv = L.SlotMax(oe);
    }
    if (!w.content) {
      w.index = w.r_min;
    } else if (w.index == w.r_min && w.off > 0 && !L.Slot(w.off - 1)) {
      w.off--;
      w.r_min = w.index = L.SlotMin(w.off);
      w.r_max = L.SlotMax(w.off);
    }
  }
  w.off_end = oe;
  w.ro = oe;
  if (w.r_min == w.index && w.r_max == w.last) return MapleStoreType::kExactFit;
  if (w.index == 0 && w.last == kMax) return MapleStoreType::kNewRoot;
  // mas_wr_new_end()
  w.new_end = L.end + 2 - (oe - w.off) - (w.r_min == w.index) - (w.end_piv == w.last);
  if (w.new_end < MinSlots(true))
    return w.depth > 1 ? MapleStoreType::kRebalance : MapleStoreType::kNodeStore;
  if (w.new_end >= Slots(true)) return MapleStoreType::kSplitStore;
  if (!rcu_ && w.off == L.end) return MapleStoreType::kAppend;
  if (w.new_end == L.end && (!rcu_ || oe - w.off == 1)) return MapleStoreType::kSlotStore;
  return MapleStoreType::kNodeStore;
}

/// mas_store_b_node()'s order: the leaf's entries before the store, the part of the
/// first overwritten range below index, the entry, then the entries of the leaf (the
/// right leaf of a spanning store) after last: copy(pos, from, to) for the kept
/// entries [from, to] of a node (none if from > to), put(pivot, slot) for the others.
template <class Copy, class Put>
void MapleTree::LeafEntries(const Write& w, Copy&& copy, Put&& put) {
  const Pos& L = w.leaf();
  const Pos& R = w.type == MapleStoreType::kSpanningStore ? w.rpath[w.depth - 1] : L;
  copy(L, 0, w.off - 1);
  if (w.r_min < w.index) put(w.index - 1, w.content);
  put(w.last, reinterpret_cast<uintptr_t>(w.entry));
  if (w.last == kMax) return;
  // Only the first range from ro can end at last (extended over by a NULL store).
  const int i = w.ro + (w.ro <= R.end && R.SlotMax(w.ro) <= w.last);
  copy(R, i, R.end);
}

/// mas_store_b_node(), and for a spanning store the copy of the right leaf after last.
void MapleTree::BuildLeafBig(const Write& w, Big& b) const {
  b.n = 0;
  b.min = w.leaf().min;
  LeafEntries(
      w, [&b](const Pos& p, int from, int to) { b.AddNode(p, from, to); },
      [&b](uint64_t piv, uintptr_t slot) { b.Add(piv, slot); });
}

namespace {
/// A new leaf written entry by entry, every word of it (mas_wr_node_store's copy,
/// mas_root_expand): each entry's pivot (the 16th entry, the last, has none) and slot,
/// the leaf's largest gap found on the way (mas_leaf_max_gap of it).
struct LeafFill {
  Node* dst;
  uint64_t start;  // the next entry's first index (the leaf's min at first)
  int j = 0;       // entries written
  uint64_t gap = 0;
  void Put(uint64_t piv, uintptr_t slot) {
    if (j < Pivots(true)) dst->piv(j).store(piv, kRlx);
    dst->slot(true, j++).store(slot, kRlx);
    const uint64_t size = slot ? 0 : GapSize(start, piv);
    gap = size > gap ? size : gap;
    start = piv + 1;
  }
  /// Zeroes the words left unused, sets the metadata; returns the largest gap.
  uint64_t Finish() {
    for (int i = j; i < Pivots(true); i++) {
      dst->piv(i).store(0, kRlx);
      dst->slot(true, i).store(0, kRlx);
    }
    dst->SetMeta(true, j - 1, 0);
    return gap;
  }
};
}  // namespace

/// mas_wr_node_store()'s copy: the leaf with the store (new_end < 16 entries), written
/// straight into dst (another node: the new leaf, or a copy to write back), every
/// word of it. Only the leaf's last entry can be the 16th, which has no pivot.
/// Returns the new leaf's largest gap (mas_leaf_max_gap of it, found on the way).
uint64_t MapleTree::FillLeaf(Node* dst, const Write& w) {
  LeafFill f{dst, w.leaf().min};
  LeafEntries(
      w,
      [&f](const Pos& p, int from, int to) {
        const Node* n = p.n;
        // Entries with a pivot of their own (below the node's max, so never the whole
        // 2^64 range) and never the new leaf's last: no pivot check, no GapSize.
        const int inner = std::min(to, p.end - 1);
        for (int i = from; i <= inner; i++, f.j++) {
          const uint64_t piv = n->Piv(i);
          const uintptr_t slot = n->Slot(true, i);
          f.dst->piv(f.j).store(piv, kRlx);
          f.dst->slot(true, f.j).store(slot, kRlx);
          const uint64_t size = (piv - f.start + 1) & (0 - static_cast<uint64_t>(slot == 0));
          f.gap = size > f.gap ? size : f.gap;
          f.start = piv + 1;
        }
        if (to == p.end && from <= to) f.Put(p.max, n->Slot(true, to));
      },
      [&f](uint64_t piv, uintptr_t slot) { f.Put(piv, slot); });
  return f.Finish();
}

// ======================================================================= node building

/// mab_mas_cp(): a new node from entries [from, to] of b; its largest gap in *gap.
uintptr_t MapleTree::MakeNode(bool leaf, const Big& b, int from, int to, uint64_t* gap) {
  Node* n = NewNode();
  if (leaf) {
    LeafFill f{n, b.First(from)};
    for (int i = from; i <= to; i++) f.Put(b.pivot[i], b.slot[i]);
    *gap = f.Finish();
    return Tag(n, true);
  }
  const int count = to - from + 1;
  int gap_off = 0;
  uint64_t max_gap = 0;
  for (int j = 0; j < count; j++) {
    const int i = from + j;
    if (j < kAPivots) n->piv(j).store(b.pivot[i], kRlx);
    n->slot(false, j).store(b.slot[i], kRlx);
    n->gap(j).store(b.gap[i], kRlx);
    if (b.gap[i] > max_gap) {
      max_gap = b.gap[i];
      gap_off = j;
    }
  }
  // The words left unused are zeroed.
  for (int j = count; j < kAPivots; j++) n->piv(j).store(0, kRlx);
  for (int j = count; j < kArangeSlots; j++) {
    n->slot(false, j).store(0, kRlx);
    n->gap(j).store(0, kRlx);
  }
  n->SetMeta(false, count - 1, gap_off);
  *gap = max_gap;
  return Tag(n, false);
}

/// Sets the parent pointer of every child of an interior node (mas_adopt_children).
void MapleTree::Adopt(uintptr_t e) {
  if (IsLeaf(e)) return;
  Node* n = ToNode(e);
  for (int i = 0; i <= n->MetaEnd(false); i++) ToNode(n->Slot(false, i))->parent.store(ParentVal(n, i), kRlx);
}

/// mas_put_in_tree(): the new node goes where path[d] was, with one release store
/// (rcu_assign_pointer) of the parent's slot or the root.
uintptr_t MapleTree::Publish(Pos* path, int d, uintptr_t ne) {
  const uintptr_t old = path[d].enode;
  Node* nn = ToNode(ne);
  if (d == 0) {
    nn->parent.store(reinterpret_cast<uintptr_t>(this) | kParentRoot, kRlx);
    root_.store(ne, kRel);
  } else {
    Pos& p = path[d - 1];
    nn->parent.store(ParentVal(p.n, p.off), kRlx);
    p.n->slot(false, p.off).store(ne, kRel);
  }
  Step();
  path[d].Set(ne, path[d].min, path[d].max);
  return old;
}

/// mas_update_gap() / mas_parent_gap(): the gap of path[d] into its ancestors, in place.
void MapleTree::UpdateGap(Pos* path, int d) {
  if (d > 0) UpdateGap(path, d, MaxGap(path[d].enode, path[d].min, path[d].max));
}

/// The same, given path[d]'s largest gap g. As mas_parent_gap(): a parent's other
/// gaps are rescanned only when the child that held its largest gap shrank.
void MapleTree::UpdateGap(Pos* path, int d, uint64_t g) {
  for (int k = d; k > 0; k--) {
    Pos& p = path[k - 1];
    Node* n = p.n;
    if (n->Gap(p.off) == g) return;
    const int meta = n->MetaGap();
    const uint64_t old_max = n->Gap(meta);
    n->gap(p.off).store(g, kRlx);
    if (g > old_max) {  // this child holds the parent's largest gap now
      n->SetMeta(false, p.end, p.off);
      continue;
    }
    if (meta != p.off) return;  // the largest gap is another child's, unchanged
    int off = 0;
    uint64_t best = 0;
    for (int i = 0; i <= p.end; i++)
      if (n->Gap(i) > best) {
        best = n->Gap(i);
        off = i;
      }
    n->SetMeta(false, p.end, off);
    if (best == old_max) return;
    g = best;
  }
}

// ======================================================================= store types

/// mas_store_root() -> mas_root_expand(): the first entry of an empty tree.
void MapleTree::StoreRootExpand(Write& w) {
  if (!w.entry) return;
  Node* n = NewNode();
  LeafFill f{n, 0};
  if (w.index) f.Put(w.index - 1, 0);
  f.Put(w.last, reinterpret_cast<uintptr_t>(w.entry));
  if (w.last != kMax) f.Put(kMax, 0);
  f.Finish();
  w.path[0] = Pos{};
  w.path[0].max = kMax;
  Publish(w.path, 0, Tag(n, true));
  height_ = 1;
}

/// mas_new_root(): [0, ULONG_MAX] is one entry (or nothing).
void MapleTree::NewRoot(Write& w) {
  const uintptr_t old = root_.load(kRlx);
  if (w.entry) {
    Node* n = NewNode();
    LeafFill f{n, 0};
    f.Put(kMax, reinterpret_cast<uintptr_t>(w.entry));
    f.Finish();
    w.path[0] = Pos{};
    w.path[0].max = kMax;
    Publish(w.path, 0, Tag(n, true));
    height_ = 1;
  } else {
    root_.store(0, kRel);
    Step();
    height_ = 0;
  }
  if (old) RetireTree(old);
}

/// wr_exact_fit: one slot rewritten (rcu_assign_pointer).
void MapleTree::ExactFit(Write& w) {
  Pos& L = w.leaf();
  L.n->slot(true, w.off).store(reinterpret_cast<uintptr_t>(w.entry), kRel);
  Step();
  if (!w.entry == !w.content || w.depth == 1) return;
  // The leaf's largest gap from its parent's record of it, not a rescan of the leaf: a
  // NULL stored exactly over an entry has non-NULL neighbours (mas_wr_extend_null
  // would have widened it), so it is a new gap of its own; an entry stored exactly
  // over a NULL removes that gap, and only if it was the largest can the largest
  // change.
  const Pos& p = w.path[w.depth - 2];
  const uint64_t old = p.n->Gap(p.off), size = GapSize(w.r_min, w.r_max);
  if (!w.entry) {
    if (size > old) UpdateGap(w.path, w.depth - 1, size);
  } else if (size == old) {
    UpdateGap(w.path, w.depth - 1);
  }
}

/// mas_wr_slot_store(): the store overlaps two slots (three without RCU) and adds no
/// boundary: the entry goes into one of them and a pivot moves. The slot is written
/// before the pivot, both with release stores, so a reader that sees the new pivot
/// sees the new slot.
void MapleTree::SlotStore(Write& w) {
  Pos& L = w.leaf();
  const int o = w.off;
  const uintptr_t e = reinterpret_cast<uintptr_t>(w.entry);
  bool gap = !L.Slot(o) || !L.Slot(o + 1);
  if (w.off_end - o == 1) {
    if (w.index == w.r_min) {  // the whole first range and part of the next
      L.n->slot(true, o).store(e, kRel);
      Step();
      L.n->piv(o).store(w.last, kRel);
    } else {  // part of the first range and the whole next one
      L.n->slot(true, o + 1).store(e, kRel);
      Step();
      L.n->piv(o).store(w.index - 1, kRel);
    }
    Step();
  } else {  // no RCU: part of both neighbours, the whole middle range
    gap = gap || !L.Slot(o + 2);
    L.n->slot(true, o + 1).store(e, kRlx);
    L.n->piv(o).store(w.index - 1, kRlx);
    L.n->piv(o + 1).store(w.last, kRlx);
  }
  if (!w.entry || gap) UpdateGap(w.path, w.depth - 1);
}

/// mas_wr_append() (no RCU): after the node's last slot, in place.
void MapleTree::Append(Write& w) {
  Pos& L = w.leaf();
  Node* n = L.n;
  const int end = L.end, new_end = w.new_end;
  const uintptr_t e = reinterpret_cast<uintptr_t>(w.entry);
  if (new_end < Pivots(true)) {
    n->piv(new_end).store(L.SlotMax(end), kRlx);
    n->SetMeta(true, new_end, 0);
  }
  if (new_end == end + 1) {
    if (w.last == w.r_max) {  // the end of the last range
      n->slot(true, new_end).store(e, kRlx);
      n->piv(end).store(w.index - 1, kRlx);
    } else {  // the start of the last range
      n->slot(true, new_end).store(w.content, kRlx);
      n->piv(end).store(w.last, kRlx);
      n->slot(true, end).store(e, kRlx);
    }
  } else {  // inside the last range
    n->slot(true, new_end).store(w.content, kRlx);
    n->piv(end + 1).store(w.last, kRlx);
    n->slot(true, end + 1).store(e, kRlx);
    n->piv(end).store(w.index - 1, kRlx);
  }
  L.end = new_end;
  if (!w.content || !w.entry) UpdateGap(w.path, w.depth - 1);
}

/// mas_wr_node_store(): the leaf rebuilt with the change: a new leaf replaces it
/// (RCU), or it is rewritten in place.
void MapleTree::NodeStore(Write& w) {
  Pos& L = w.leaf();
  const int d = w.depth - 1;
  uint64_t gap;
  if (rcu_) {
    Node* n = NewNode();
    gap = FillLeaf(n, w);
    Retire(ToNode(Publish(w.path, d, Tag(n, true))));
  } else {  // built aside (the kernel's on-stack node), then copied over the leaf
    Node tmp;
    gap = FillLeaf(&tmp, w);
    for (int i = 0; i <= kLeafMeta; i++) L.n->w[i].store(tmp.w[i].load(kRlx), kRlx);
    L.Set(L.enode, L.min, L.max);
  }
  UpdateGap(w.path, d, gap);
}

// ======================================================================= big-node stores

/// The new interior nodes of one store, whose children get their parent pointers once
/// the new subtree is in place.
struct MapleTree::Made {
  uintptr_t e[3 * kMaxHeight + 4];
  int n = 0;
  void Push(uintptr_t x) {
    if (!IsLeaf(x)) e[n++] = x;
  }
};

namespace {
using Big = MapleTree::Big;
/// mab_no_null_split(): a node may not end in NULL (gaps stay inside one leaf).
int NoNullSplit(const Big& b, int split, bool leaf) {
  if (!b.slot[split]) {
    if (split < Slots(leaf) - 1 && (b.n - 1 - split) > MinSlots(leaf)) split++;
    else split--;
  }
  return split;
}
/// mab_calc_split(): where to cut b into two nodes; *mid > 0 when three are needed
/// (mab_middle_node). The kernel's shift of the cut for ranges narrower than a node
/// (dense indexes) is left out: VMA boundaries are pages apart.
int CalcSplit(const Big& b, bool leaf, int* mid) {
  const int b_end = b.n - 1, slots = Slots(leaf);
  int split = b_end / 2;
  *mid = 0;
  if (b_end >= 2 * slots || (!b.slot[split] && b_end >= 2 * slots - 1)) {
    split = b_end / 3;
    *mid = split * 2;
  }
  split = NoNullSplit(b, split, leaf);
  if (*mid) *mid = NoNullSplit(b, *mid, leaf);
  return split;
}
}  // namespace

/// mas_wmb_replace(): new_top (whose largest gap is gap) replaces path[d] (one release
/// store), the new interior nodes adopt their children, the replaced nodes are
/// retired, the gap goes up.
void MapleTree::Finish(Pos* path, int d, uintptr_t top, uint64_t gap, Made& made) {
  made.Push(top);
  const uintptr_t old = Publish(path, d, top);
  for (int i = 0; i < made.n; i++) Adopt(made.e[i]);
  RetireReplaced(old);
  UpdateGap(path, d, gap);
}

/// mas_split(): split the leaf, then each ancestor that overflows, upwards until one
/// has room (it is replaced) or the root splits (a new root); stop early if the data
/// can be pushed into a sibling (mas_push_data).
void MapleTree::Split(Write& w) {
  Big b;
  BuildLeafBig(w, b);
  Made made;
  for (int d = w.depth - 1;; d--) {
    const Pos& cur = w.path[d];
    const bool leaf = cur.leaf;
    uint64_t g, lg, rg;
    if (b.n <= Slots(leaf)) {  // mas_split_final_node()
      const uintptr_t top = MakeNode(leaf, b, 0, b.n - 1, &g);
      Finish(w.path, d, top, g, made);
      return;
    }
    if (d > 0 && (PushData(w.path, d, b, true, made) || PushData(w.path, d, b, false, made))) return;
    int mid;
    const int split = CalcSplit(b, leaf, &mid);
    const uintptr_t l = MakeNode(leaf, b, 0, split, &lg), r = MakeNode(leaf, b, split + 1, b.n - 1, &rg);
    made.Push(l);
    made.Push(r);
    Big nb;
    nb.min = d ? w.path[d - 1].min : 0;
    if (d) nb.AddNode(w.path[d - 1], 0, w.path[d - 1].off - 1);
    nb.Add(b.pivot[split], l, lg);
    nb.Add(cur.max, r, rg);
    if (d == 0) {
      height_++;
      const uintptr_t top = MakeNode(false, nb, 0, nb.n - 1, &g);
      Finish(w.path, 0, top, g, made);
      return;
    }
    nb.AddNode(w.path[d - 1], w.path[d - 1].off + 1, w.path[d - 1].end);
    b = nb;
  }
}

/// mas_push_data(): instead of splitting path[d], move data into its left (or right)
/// sibling if the two fit in two nodes with room to spare; the two new nodes and a new
/// parent replace the old three.
bool MapleTree::PushData(Pos* path, int d, const Big& b, bool left, Made& made) {
  const Pos& cur = path[d];
  const Pos& p = path[d - 1];
  const bool leaf = cur.leaf;
  const int slots = Slots(leaf);
  int so;
  if (left) {
    if (p.off == 0) return false;
    so = p.off - 1;
  } else {
    if (p.off >= p.end) return false;
    so = p.off + 1;
  }
  Pos s;
  s.Set(p.Slot(so), p.SlotMin(so), p.SlotMax(so));
  const int slot_total = (b.n - 1) + s.end;
  const int space = 2 * slots - 2 - (leaf ? 1 : 0) - (cur.max == kMax ? 1 : 0);
  if (slot_total >= space) return false;
  Big c;
  if (left) {
    c.min = s.min;
    c.AddNode(s, 0, s.end);
    c.Append(b);
  } else {
    c.min = b.min;
    c.Append(b);
    c.AddNode(s, 0, s.end);
  }
  const int split = NoNullSplit(c, left ? slots - 2 : c.n - slots, leaf);
  uint64_t lg, rg, g;
  const uintptr_t l = MakeNode(leaf, c, 0, split, &lg), r = MakeNode(leaf, c, split + 1, c.n - 1, &rg);
  made.Push(l);
  made.Push(r);
  const int first = left ? so : p.off;
  Big pb;
  pb.min = p.min;
  pb.AddNode(p, 0, first - 1);
  pb.Add(c.pivot[split], l, lg);
  pb.Add(c.pivot[c.n - 1], r, rg);
  pb.AddNode(p, first + 2, p.end);
  const uintptr_t top = MakeNode(false, pb, 0, pb.n - 1, &g);
  Finish(path, d - 1, top, g, made);
  return true;
}

/// mas_rebalance(): a leaf below its minimum is combined with its next sibling (or the
/// previous one if it is the last child), then mas_spanning_rebalance().
void MapleTree::Rebalance(Write& w) {
  Big b;
  BuildLeafBig(w, b);
  const int d = w.depth - 1;
  Pos* lp = w.path;
  Pos* rp = w.rpath;
  for (int i = 0; i < w.depth; i++) rp[i] = lp[i];
  if (lp[d - 1].off < lp[d - 1].end) {
    rp[d - 1].off++;
    rp[d - 1].Descend(rp[d]);
    rp[d].off = 0;
    b.AddNode(rp[d], 0, rp[d].end);
  } else {
    lp[d - 1].off--;
    lp[d - 1].Descend(lp[d]);
    lp[d].off = lp[d].end;
    Big nb;
    nb.min = lp[d].min;
    nb.AddNode(lp[d], 0, lp[d].end);
    nb.Append(b);
    b = nb;
  }
  SpanningRebalance(b, lp, rp);
}

/// mas_wr_spanning_store(): the left leaf up to index, the entry and the right leaf
/// after last, combined and rebalanced up to the root.
void MapleTree::SpanningStore(Write& w) {
  Big b;
  BuildLeafBig(w, b);
  SpanningRebalance(b, w.path, w.rpath);
}

/// mast_spanning_rebalance(): b (the data of level d from lp[d] to rp[d]) is too small
/// for a node: add the nearest neighbour at that level, right first, checking each
/// level upwards. Moves lp or rp to it.
bool MapleTree::PullNeighbour(Big& b, Pos* lp, Pos* rp, int d) const {
  for (int a = d - 1; a >= 0; a--) {
    if (rp[a].off < rp[a].end) {
      rp[a].off++;
      for (int l = a; l < d; l++) {
        rp[l].Descend(rp[l + 1]);
        rp[l + 1].off = 0;
      }
      b.AddNode(rp[d], 0, rp[d].end);
      return true;
    }
    if (lp[a].off > 0) {
      lp[a].off--;
      for (int l = a; l < d; l++) {
        lp[l].Descend(lp[l + 1]);
        lp[l + 1].off = lp[l + 1].end;
      }
      Big nb;
      nb.min = lp[d].min;
      nb.AddNode(lp[d], 0, lp[d].end);
      nb.Append(b);
      b = nb;
      return true;
    }
  }
  return false;
}

/// mas_spanning_rebalance(): from the leaves to the root, cut b into one to three new
/// nodes, then build the parent level from the left parent's slots before them, the
/// new nodes and the right parent's slots after them (whatever lay between is inside
/// the store and dropped); pull in a neighbour where a level is too small. A new node
/// covering everything becomes the root (the tree shrinks); a root that splits gets a
/// new root above (the tree grows).
void MapleTree::SpanningRebalance(Big& b, Pos* lp, Pos* rp) {
  const int h = height_;
  int d = h - 1;
  Made made;
  if ((lp[d].min != 0 || rp[d].max != kMax) && b.n <= MinSlots(true)) PullNeighbour(b, lp, rp, d);
  for (;;) {
    const bool leaf = d == h - 1;
    if (!leaf && b.n == 1) {  // the root kept one child: that child is the root
      height_ = h - d - 1;
      Finish(lp, 0, b.slot[0], 0, made);  // the root: no gap recorded above it
      return;
    }
    uintptr_t nodes[3];
    uint64_t gaps[3];
    int cut[3], k = 1;
    if (b.n <= Slots(leaf)) {
      cut[0] = b.n - 1;
    } else {
      int mid;
      cut[0] = CalcSplit(b, leaf, &mid);
      if (mid) cut[k++] = mid;
      cut[k++] = b.n - 1;
    }
    for (int i = 0, from = 0; i < k; from = cut[i++] + 1) {
      nodes[i] = MakeNode(leaf, b, from, cut[i], &gaps[i]);
      made.Push(nodes[i]);
    }
    if (k == 1 && lp[d].min == 0 && rp[d].max == kMax) {  // covers everything
      height_ = h - d;
      Finish(lp, 0, nodes[0], gaps[0], made);
      return;
    }
    Big nb;
    nb.min = d ? lp[d - 1].min : 0;
    if (d) nb.AddNode(lp[d - 1], 0, lp[d - 1].off - 1);
    for (int i = 0; i < k; i++) nb.Add(b.pivot[cut[i]], nodes[i], gaps[i]);
    if (d == 0) {  // the root split
      height_ = h + 1;
      uint64_t g;
      const uintptr_t top = MakeNode(false, nb, 0, nb.n - 1, &g);
      Finish(lp, 0, top, g, made);
      return;
    }
    nb.AddNode(rp[d - 1], rp[d - 1].off + 1, rp[d - 1].end);
    b = nb;
    d--;
    if (b.n > MinSlots(false)) continue;               // mast_sufficient()
    if (lp[d].min == 0 && rp[d].max == kMax) continue;  // the root level
    PullNeighbour(b, lp, rp, d);
  }
}

// ======================================================================= readers

namespace {
using Pos = MapleTree::Pos;
uint64_t Clip(uint64_t gs, uint64_t ge, uint64_t length, uint64_t low, uint64_t high) {
  gs = std::max(gs, low);
  ge = std::min(ge, high);
  return (ge > gs && ge - gs >= length) ? ge : kMax;
}
/// mas_rev_awalk(): the highest fitting gap under e (path[0] is e's level, filled
/// with the node and, on success, the offset taken down to the gap's slot).
uint64_t RevGap(uintptr_t e, uint64_t min, uint64_t max, uint64_t length, uint64_t low, uint64_t high, Pos* path) {
  Pos& p = *path;
  p.Set(e, min, max);
  const Node* n = p.n;
  // Slots from the last down, each slot's max the one above's min - 1 (one pivot read
  // per slot).
  uint64_t hi = max;
  for (int i = p.end; i >= 0; i--) {
    const uint64_t lo = i ? n->Piv(i - 1) + 1 : min;
    if (lo < high) {
      if (hi < low) return kMax;
      uint64_t r = kMax;
      if (p.leaf) {
        if (!n->Slot(true, i)) r = Clip(lo, hi == kMax ? kMax : hi + 1, length, low, high);
      } else if (n->Gap(i) >= length) {
        p.off = i;
        r = RevGap(n->Slot(false, i), lo, hi, length, low, high, path + 1);
      }
      if (r != kMax) {
        p.off = i;
        return r;
      }
    }
    hi = lo - 1;
  }
  return kMax;
}
void Ranges(uintptr_t e, uint64_t min, uint64_t max,
            const std::function<void(uint64_t, uint64_t, void*)>& fn) {
  const Node* n = ToNode(e);
  const bool leaf = IsLeaf(e);
  const int end = n->DataEnd(leaf, max);
  for (int i = 0; i <= end; i++) {
    const uint64_t lo = i ? n->Piv(i - 1) + 1 : min, hi = i < end ? n->Piv(i) : max;
    if (leaf) fn(lo, hi, reinterpret_cast<void*>(n->Slot(true, i)));
    else Ranges(n->Slot(false, i), lo, hi, fn);
  }
}
}  // namespace

void* MapleTree::Load(uint64_t index, uint64_t* first, uint64_t* last) const {
  const uintptr_t r = root_.load(kRlx);
  if (!r) return nullptr;
  int depth;
  const Pos* path = Walk(index, &depth);
  const Pos& L = path[depth - 1];
  if (first) *first = L.SlotMin(L.off);
  if (last) *last = L.SlotMax(L.off);
  return reinterpret_cast<void*>(L.Slot(L.off));
}

/// mas_find() / mas_find_rev(): from the slot holding index, the first non-NULL entry
/// forwards (or backwards), moving to the next (previous) leaf as mas_next_node()
/// (mas_prev_node()) does.
void* MapleTree::FindFrom(uint64_t index, bool forward, uint64_t min_first, uint64_t* first, uint64_t* last) const {
  const uintptr_t r = root_.load(kRlx);
  if (!r) return nullptr;
  int depth;
  Pos* path = Walk(index, &depth);  // moved along to the leaf where the search ends
  const int d = depth - 1;
  const int step = forward ? 1 : -1;
  // Only the slot holding index can start below it.
  if (path[d].SlotMin(path[d].off) < min_first) path[d].off++;
  for (;;) {
    const Pos& L = path[d];
    for (int i = L.off; forward ? i <= L.end : i >= 0; i += step)
      if (uintptr_t s = L.Slot(i)) {
        *first = L.SlotMin(i);
        *last = L.SlotMax(i);
        return reinterpret_cast<void*>(s);
      }
    int a = d - 1;
    while (a >= 0 && path[a].off == (forward ? path[a].end : 0)) a--;
    if (a < 0) return nullptr;
    path[a].off += step;
    for (int l = a; l < d; l++) {
      path[l].Descend(path[l + 1]);
      path[l + 1].off = forward ? 0 : path[l + 1].end;
    }
  }
}

void MapleTree::ForEachRange(const std::function<void(uint64_t, uint64_t, void*)>& fn) const {
  if (const uintptr_t r = root_.load(kRlx)) Ranges(r, 0, kMax, fn);
  else fn(0, kMax, nullptr);
}

uint64_t MapleTree::EmptyAreaRevEnd(uint64_t length, uint64_t low, uint64_t high) const {
  const uintptr_t r = root_.load(kRlx);
  if (!r) return Clip(0, kMax, length, low, high);
  // mas_empty_area_rev() leaves the ma_state at the gap: the search fills this
  // thread's cached path, valid if it found one (the caller's next walks are there).
  WalkCache& c = tls_walk;
  c.tree = 0;
  const uint64_t end = RevGap(r, 0, kMax, length, low, high, c.path);
  if (end != kMax) {
    c.tree = id_;
    c.gen = gen_;
    c.depth = height_;
  }
  return end;
}

/// mtree_load() -> mtree_lookup_walk(): pivots and slots read with acquire loads (the
/// writer's release stores publish them); a node found dead after its slot was read
/// sends the walk back to the root.
void* MapleTree::LoadRcu(uint64_t index) const {
retry:
  uintptr_t e = root_.load(kAcq);
  if (!e) return nullptr;
  for (;;) {
    Node* n = ToNode(e);
    const bool leaf = IsLeaf(e);
    const int npiv = Pivots(leaf);
    int off = 0;
    while (off < npiv && n->piv(off).load(kAcq) < index) off++;
    const uintptr_t next = n->slot(leaf, off).load(kAcq);
    if (n->Dead()) goto retry;
    if (leaf) return reinterpret_cast<void*>(next);
    e = next;
  }
}

// ======================================================================= validation

std::string MapleTree::Validate() const {
  const uintptr_t r = root_.load(kRlx);
  if (!r) return (height_ || nodes_) ? fmt::format("empty tree with height {} and {} nodes", height_, nodes_) : "";
  if (ToNode(r)->parent.load(kRlx) != (reinterpret_cast<uintptr_t>(this) | kParentRoot)) return "root parent";
  std::string err;
  uint64_t count = 0;
  bool prev_null = false;  // the last slot seen (leaves in order) was NULL
  std::function<void(uintptr_t, uint64_t, uint64_t, int)> check = [&](uintptr_t e, uint64_t min, uint64_t max, int depth) {
    if (!err.empty()) return;
    count++;
    const Node* n = ToNode(e);
    const bool leaf = IsLeaf(e);
    const int end = n->DataEnd(leaf, max), npiv = Pivots(leaf);
    auto fail = [&](const std::string& what) {
      if (err.empty()) err = fmt::format("{} node [{:#x}, {:#x}] depth {}: {}", leaf ? "leaf" : "arange", min, max, depth, what);
    };
    if (n->Dead()) return fail("dead node in the tree");
    if (leaf != (depth == height_ - 1)) return fail(fmt::format("leaf at depth {} of height {}", depth, height_));
    if (end >= Slots(leaf)) return fail("end past the slots");
    // mt_validate(): a node other than the rightmost at its level holds at least
    // mt_min_slots + 1 entries.
    if (max != kMax && end < MinSlots(leaf)) return fail(fmt::format("end {} below minimum {}", end, MinSlots(leaf)));
    if (!leaf && n->MetaEnd(false) != end) return fail("meta end");
    if (leaf && end < Slots(true) - 1 && n->MetaEnd(true) != end) return fail("leaf meta end");
    uint64_t lo = min;
    for (int i = 0; i <= end; i++) {
      const uint64_t hi = i < end ? n->Piv(i) : max;
      if (hi < lo || hi > max || (i < end && hi == max)) return fail(fmt::format("pivot {} = {:#x} out of order", i, hi));
      if (leaf) {
        const bool null = !n->Slot(true, i);
        if (null && prev_null) return fail(fmt::format("adjacent NULLs at slot {}", i));
        if (null && i == end && max != kMax) return fail("leaf ends in NULL");
        prev_null = null;
      } else {
        const uintptr_t c = n->Slot(false, i);
        if (!c) return fail(fmt::format("NULL child {}", i));
        if (ToNode(c)->parent.load(kRlx) != ParentVal(ToNode(e), i)) return fail(fmt::format("child {} parent pointer", i));
        if (n->Gap(i) != MaxGap(c, lo, hi))
          return fail(fmt::format("gap {} is {:#x}, child's largest gap {:#x}", i, n->Gap(i), MaxGap(c, lo, hi)));
        check(c, lo, hi, depth + 1);
      }
      lo = hi + 1;
    }
    if (end < npiv && n->Piv(end) != max) return fail("pivot at end is not the maximum");
    for (int i = end + 1; i < npiv; i++)
      if (n->Piv(i)) return fail(fmt::format("unused pivot {} set", i));
    for (int i = end + 1; i < Slots(leaf) - (leaf ? 1 : 0); i++)
      if (n->Slot(leaf, i)) return fail(fmt::format("unused slot {} set", i));
    if (!leaf) {
      uint64_t best = 0;
      for (int i = 0; i <= end; i++) best = std::max(best, n->Gap(i));
      if (n->Gap(n->MetaGap()) != best || n->MetaGap() > end) return fail("meta gap offset");
    }
  };
  check(r, 0, kMax, 0);
  if (err.empty() && count != nodes_) err = fmt::format("{} nodes reachable, {} counted", count, nodes_);
  return err;
}

}  // namespace vmspace
