// SPDX-License-Identifier: Apache-2.0
// MapleTree: Linux's maple tree (lib/maple_tree.c, include/linux/maple_tree.h, Linux
// 6.18) as the mm uses it: a B-tree of non-overlapping ranges [index, last] covering
// the whole 64-bit space, NULL ranges (gaps) included, with the largest gap of each
// subtree tracked in the interior nodes (MT_FLAGS_ALLOC_RANGE), readable under RCU
// while one writer (holding the owner's lock: mmap_lock for write) changes it
// (MT_FLAGS_USE_RCU), or updated in place without RCU readers.
//
// Nodes are 256 bytes and 256-byte aligned, laid out as the kernel's:
//  * leaves (maple_leaf_64 = maple_range_64): parent, 15 pivots, 16 slots; the slot
//    after the last used one holds the metadata (data end) when the node is not full;
//  * interior nodes (maple_arange_64): parent, 9 pivots, 10 slots (child pointers
//    tagged with the child's type), 10 gaps (each child's largest gap), metadata (data
//    end and the offset of the largest gap).
// Pivot i is the inclusive last index of slot i; the last used slot ends at the node's
// maximum (implied by the parent). A node other than the root holds at least
// mt_min_slots + 1 entries (7 in a leaf, 5 in an interior node); NULLs are never
// adjacent and no leaf but the rightmost ends in NULL, so every gap lies in one leaf.
//
// Writes (Store) follow mas_store_prealloc(): the walk picks the store type
// (mas_wr_store_type), the worst case of nodes that type can need is preallocated
// (mas_prealloc_calc, mas_preallocate), then the store runs and cannot fail:
//  * exact fit / slot store: a slot or pivot rewritten in place (rcu_assign_pointer);
//  * node store: one new leaf replaces the old one (RCU), or the old leaf is rewritten
//    in place (no RCU);
//  * append (no RCU only): the entry added after the node's last slot, in place;
//  * split: the leaf and each full ancestor are split in two (or the data pushed into
//    a sibling with room), up to the first ancestor that fits, which is replaced;
//  * rebalance (a leaf below its minimum) and spanning store (a range over more than
//    one leaf, or a NULL ending a leaf): the nodes are combined with a neighbour and
//    the path is rebuilt up to the root (mas_spanning_rebalance).
// In RCU mode every node that changes is replaced by a new one, published by one
// release store of the parent's slot (or the root) after the new node is complete;
// the replaced nodes are marked dead (parent pointing to themselves) and retired, to
// be freed after a grace period (TakeRetired, FreeNodes). A reader that finds it was
// in a dead node restarts from the root, as mtree_lookup_walk does.
//
// Walks under the owner's lock (Load, Find*, EmptyAreaRevEnd, a store's mas_wr_walk)
// keep the path to the leaf they end in per thread, as a kernel caller keeps its
// ma_state across the calls of one operation: the next walk whose index lies in that
// leaf starts there, until the tree's next store. A store walks in that path and
// changes it in place (as mas_store changes the caller's ma_state); one within one
// leaf leaves it valid. Pivots are found by a branchless search (writer side only).
//
// Not modelled: the single-entry root (an entry at index 0 stored in ma_root), dense
// and range_64 node types (the mm tree uses leaf_64 and arange_64 only), bulk mode.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <functional>
#include <string>
#include <vector>

#include "engine/memory_budget.h"
#include "engine/per_thread.h"
#include "sync/mutex.h"

namespace vmspace {

/// Store types, as enum store_type in lib/maple_tree.c (wr_invalid left out).
enum class MapleStoreType : uint8_t {
  kNewRoot,        // wr_new_root: [0, ULONG_MAX] replaced
  kStoreRoot,      // wr_store_root: the first entry of an empty tree
  kExactFit,       // wr_exact_fit: one slot rewritten in place
  kSpanningStore,  // wr_spanning_store: across leaves; path rebuilt to the root
  kSplitStore,     // wr_split_store: leaf overflow
  kRebalance,      // wr_rebalance: leaf underflow
  kAppend,         // wr_append: after the last slot, in place (no RCU only)
  kNodeStore,      // wr_node_store: one leaf replaced (RCU) or rewritten (no RCU)
  kSlotStore,      // wr_slot_store: a boundary moved in place
  kCount
};
const char* MapleStoreTypeName(MapleStoreType t);

/// What a tree's writes did (plain counters, written under the writer's lock).
struct MapleStats {
  uint64_t stores[static_cast<int>(MapleStoreType::kCount)] = {};
  uint64_t prealloc_nodes = 0;   // nodes preallocated (mas_preallocate's worst case)
  uint64_t used_nodes = 0;       // preallocated nodes the stores put into the tree
  uint64_t prealloc_short = 0;   // nodes a store needed beyond its preallocation (a bug if > 0)
  uint64_t retired_nodes = 0;    // nodes replaced or removed (RCU: freed after a grace period)
  uint64_t stores_total() const;
  void Add(const MapleStats& o);
};

/// Free tree nodes of all trees of the process, carved from 64 KiB slabs (a kmem_cache
/// that never shrinks), in kThreadShards shards (its per-CPU slabs): a thread takes from
/// its own shard, and a grace period's batch goes back to the shard of the thread that
/// retired it, so independent spaces on different threads share neither a lock nor
/// nodes. Writers take and return nodes in batches into a per-tree cache, so a shard's
/// mutex is off the per-store path.
template <size_t kSize, size_t kAlign>
class NodePool {
 public:
  static NodePool& Get() {
    static NodePool* p = new NodePool;  // never destroyed: RCU callbacks may run late
    return *p;
  }
  /// Moves n free nodes into out: the calling thread's shard first, then the other
  /// shards, carving a slab into its own shard only when all are short.
  void TakeBatch(std::vector<void*>& out, size_t n);
  /// Returns nodes (then cleared) to `shard` (-1: the calling thread's).
  void PutBatch(std::vector<void*>& nodes, int shard = -1);
  /// Bytes of slabs carved so far (heap the pool holds, free or in use).
  uint64_t slab_bytes() const { return slab_bytes_.load(std::memory_order_relaxed); }
  static constexpr size_t kSlabBytes = 64 * 1024;

 private:
  struct alignas(kDestructiveInterferenceBytes) Shard {
    Mutex mu{LockRank::kNodePool};
    std::vector<void*> free ABSL_GUARDED_BY(mu);
  };
  std::array<Shard, kThreadShards> shards_;
  std::atomic<uint64_t> slab_bytes_{0};
};

template <size_t kSize, size_t kAlign>
inline void NodePool<kSize, kAlign>::TakeBatch(std::vector<void*>& out, size_t n) {
  const size_t own = static_cast<size_t>(ThreadShard());
  size_t need = n;
  // This thread's shard first, then the others (nodes freed by one thread are taken by
  // another: without this, each shard would carve slabs while others hold free nodes),
  // and a new slab only when every shard is short. One shard lock at a time.
  for (size_t i = 0; i < shards_.size() && need > 0; i++) {
    Shard& s = shards_[(own + i) % shards_.size()];
    MutexLock l(s.mu);
    const size_t k = std::min(need, s.free.size());
    out.insert(out.end(), s.free.end() - static_cast<ptrdiff_t>(k), s.free.end());
    s.free.resize(s.free.size() - k);
    need -= k;
  }
  if (need == 0) return;
  Shard& s = shards_[own];
  MutexLock l(s.mu);
  while (s.free.size() < need) {  // carve a new slab
    char* slab = static_cast<char*>(std::aligned_alloc(kAlign, kSlabBytes));
    if (!slab) throw std::bad_alloc();
    for (size_t off = 0; off + kSize <= kSlabBytes; off += kSize) s.free.push_back(slab + off);
    slab_bytes_.fetch_add(kSlabBytes, std::memory_order_relaxed);
  }
  out.insert(out.end(), s.free.end() - static_cast<ptrdiff_t>(need), s.free.end());
  s.free.resize(s.free.size() - need);
}

template <size_t kSize, size_t kAlign>
inline void NodePool<kSize, kAlign>::PutBatch(std::vector<void*>& nodes, int shard) {
  Shard& s = shards_[static_cast<size_t>(shard < 0 ? ThreadShard() : shard)];
  MutexLock l(s.mu);
  s.free.insert(s.free.end(), nodes.begin(), nodes.end());
  nodes.clear();
}

/// A tree's node cache plus the thread's count of nodes linked into trees. With a
/// budget, every node it takes from the pool is charged (kIndexNodes) until it goes
/// back to the pool (here, or by MapleTree::FreeNodes for nodes retired under RCU).
class NodeCache {
 public:
  using Take = void (*)(std::vector<void*>&, size_t);
  using Put = void (*)(std::vector<void*>&);
  NodeCache(Take take, Put put, size_t node_size, MemoryBudget* budget = nullptr)
      : take_(take), put_(put), node_size_(node_size), budget_(budget) {}
  ~NodeCache();
  /// A node from the cache, refilled from the pool when empty.
  void* Alloc();
  /// A node back into the cache; past 128 free nodes, the cache gives some back (Trim).
  void Free(void* n);
  /// Makes at least n nodes free in the cache (refilled from the pool in one batch,
  /// with some to spare, when short): mas_preallocate()'s kmem_cache_alloc_bulk. The
  /// next n Pop()s cannot fail, whatever Push()es come between.
  void Reserve(size_t n) {
    if (free_.size() < n) Refill(n);
  }
  /// The cache's top node (the cache must hold one: after Reserve).
  void* Pop() {
    void* n = free_.back();
    free_.pop_back();
    return n;
  }
  /// A node onto the cache's top, without Trim.
  void Push(void* n) { free_.push_back(n); }
  /// Gives free nodes back to the pool down to kKeep when the cache holds more than
  /// kHigh (kmem_cache_free_bulk's side: one batch under the pool shard's lock).
  void Trim() {
    if (free_.size() > kHigh) TrimTo(kKeep);
  }
  /// Gives free nodes back to the pool down to n (none if it holds n or fewer).
  void TrimTo(size_t n);
  /// Bytes of tree nodes the calling thread has linked into trees minus those it
  /// unlinked (all node types; exact per thread, no shared counter).
  static int64_t ThreadLinkedBytes();
  void CountLinked(int64_t nodes);
  static constexpr size_t kHigh = 128, kKeep = 64;  // Trim's marks

 private:
  void Refill(size_t n);                            // Reserve(n) when short
  void PutBack(std::vector<void*>& nodes);          // put_ and uncharge

  Take take_;
  Put put_;
  size_t node_size_;
  MemoryBudget* budget_;
  std::vector<void*> free_;
};

class MapleTree {
 public:
  static constexpr size_t kNodeSize = 256;
  static constexpr int kRangeSlots = 16;   // MAPLE_RANGE64_SLOTS
  static constexpr int kArangeSlots = 10;  // MAPLE_ARANGE64_SLOTS
  static constexpr int kMaxHeight = 31;    // MAPLE_HEIGHT_MAX
  // Implementation types (maple_tree.cc): a node (maple_range_64 / maple_arange_64), a
  // node on a walk (ma_state), and the combined data of a multi-node store
  // (maple_big_node).
  struct Node;
  struct Pos;
  struct Big;
  using Pool = NodePool<kNodeSize, kNodeSize>;

  /// in_rcu: MT_FLAGS_USE_RCU (nodes replaced, freed after a grace period; LoadRcu is
  /// allowed); otherwise nodes are rewritten in place and freed at once. With a
  /// budget, the nodes the tree holds are charged to it (NodeCache).
  /// prealloc_worst: mas_preallocate() as Linux 6.1 - 6.4, the worst case of any store
  /// (1 + height * 3 nodes) before every store, instead of the store type's own worst
  /// case (mas_prealloc_calc(), 6.5+).
  explicit MapleTree(bool in_rcu, MemoryBudget* budget = nullptr, bool prealloc_worst = false);
  /// Frees every node at once (no reader may remain).
  ~MapleTree();
  MapleTree(const MapleTree&) = delete;
  MapleTree& operator=(const MapleTree&) = delete;

  // ---- writer (the owner's lock held for write)
  /// mas_store_prealloc(): [index, last] (inclusive, index <= last) maps to entry
  /// (NULL clears). Preallocates the store type's worst case first.
  void Store(uint64_t index, uint64_t last, void* entry);
  /// Moves the nodes retired so far into out (free them with FreeNodes after a grace
  /// period). Empty in no-RCU mode (nodes are freed at once).
  void TakeRetired(std::vector<void*>& out);
  /// Takes back nodes of this tree's TakeRetired whose grace period has ended into its
  /// node cache (they stay charged), as a CPU's slab takes back its own objects after
  /// the RCU callback (kmem_cache_free_bulk to the per-CPU slab): a churning space
  /// reuses its own nodes without a trip through the process-wide pool. Then trims the
  /// cache (past 128 free nodes, down to 64). Writer's lock.
  void ReuseNodes(std::vector<void*>& nodes);
  /// Gives the cache's free nodes beyond 64 back to the pool (an idle space's flush).
  /// Writer's lock.
  void TrimNodeCache();
  /// Returns retired nodes to the pool's `shard` (-1: the calling thread's; see
  /// NodePool), uncharging them from `budget` (the budget of the tree they came from,
  /// or null for a tree without one).
  static void FreeNodes(std::vector<void*>& nodes, MemoryBudget* budget = nullptr, int shard = -1);

  // ---- readers under the owner's lock (read or write)
  /// The entry at index (NULL in a gap); its range in *first, *last if non-null.
  void* Load(uint64_t index, uint64_t* first = nullptr, uint64_t* last = nullptr) const;
  /// mas_find(): the first non-NULL entry whose range ends at or above index.
  void* Find(uint64_t index, uint64_t* first, uint64_t* last) const { return FindFrom(index, true, 0, first, last); }
  /// The first non-NULL entry whose range starts at or above index (mas_find() from
  /// index, past an entry that starts below it): one walk.
  void* FindStart(uint64_t index, uint64_t* first, uint64_t* last) const {
    return FindFrom(index, true, index, first, last);
  }
  /// mas_find_rev(): the last non-NULL entry whose range starts at or below index.
  void* FindRev(uint64_t index, uint64_t* first, uint64_t* last) const { return FindFrom(index, false, 0, first, last); }
  /// Every range in order, gaps included (entry NULL).
  void ForEachRange(const std::function<void(uint64_t first, uint64_t last, void* entry)>& fn) const;
  /// mas_empty_area_rev(): the exclusive end of the highest gap that holds `length`
  /// indexes inside [low, high) (the gap clipped to it), or ~0 if none. A gap up to
  /// ULONG_MAX counts as ending at ~0. Descends only into subtrees whose gap fits.
  uint64_t EmptyAreaRevEnd(uint64_t length, uint64_t low, uint64_t high) const;
  /// mt_validate(): "" or the first broken invariant (pivots, limits, parents, gaps,
  /// NULL placement, fill, heights, node count).
  std::string Validate() const;

  // ---- RCU reader (in a read-side section; RCU mode only)
  /// mtree_load() under RCU: the entry whose range holds index, from a consistent
  /// tree (some state between two of the writer's steps).
  void* LoadRcu(uint64_t index) const;

  /// For tests: fn(ctx) runs after every store lockless readers can see (a node
  /// published, a slot or pivot rewritten in place), so a test can check the tree a
  /// reader would find at each step. fn may read the tree only under RCU (LoadRcu):
  /// the store runs in this thread's walk path, which Load/Find*/EmptyAreaRevEnd reuse.
  using StepHook = void (*)(void* ctx);
  void SetStepHook(StepHook fn, void* ctx) {
    step_hook_ = fn;
    step_ctx_ = ctx;
  }

  const MapleStats& stats() const { return stats_; }
  /// The stats of every tree destroyed so far in the process, summed (for benchmarks:
  /// added once per tree, when it is destroyed).
  static MapleStats DestroyedTotals();
  bool in_rcu() const { return rcu_; }
  int height() const { return height_; }
  uint64_t nodes() const { return nodes_; }

 private:
  struct Write;
  struct Made;

  void* FindFrom(uint64_t index, bool forward, uint64_t min_first, uint64_t* first, uint64_t* last) const;
  Pos* Walk(uint64_t index, int* depth) const;
  [[gnu::noinline]] Pos* WalkFromRoot(uint64_t index, int* depth) const;
  MapleStoreType Classify(Write& w);
  int PreallocCalc(MapleStoreType t) const;
  Node* NewNode();
  void Retire(Node* n);
  void RetireTree(uintptr_t enode);
  void RetireReplaced(uintptr_t old_top);
  uintptr_t Publish(Pos* path, int depth, uintptr_t new_enode);
  void Adopt(uintptr_t enode);
  void UpdateGap(Pos* path, int d);
  void UpdateGap(Pos* path, int d, uint64_t gap);
  uintptr_t MakeNode(bool leaf, const Big& b, int from, int to, uint64_t* gap);
  template <class Copy, class Put>
  static void LeafEntries(const Write& w, Copy&& copy, Put&& put);
  void BuildLeafBig(const Write& w, Big& b) const;
  static uint64_t FillLeaf(Node* dst, const Write& w);
  void StoreRootExpand(Write& w);
  void NewRoot(Write& w);
  void ExactFit(Write& w);
  void SlotStore(Write& w);
  void Append(Write& w);
  void NodeStore(Write& w);
  void Split(Write& w);
  bool PushData(Pos* path, int d, const Big& b, bool left, Made& made);
  void Finish(Pos* path, int d, uintptr_t new_top, uint64_t gap, Made& made);
  void Rebalance(Write& w);
  void SpanningStore(Write& w);
  void SpanningRebalance(Big& b, Pos* lpath, Pos* rpath);
  bool PullNeighbour(Big& b, Pos* lpath, Pos* rpath, int d) const;

  const bool rcu_;
  const bool prealloc_worst_;
  const uint64_t id_;               // unique in the process (names the tree in walk caches)
  uint64_t gen_ = 0;                // guarded by the writer: stores begun (walk cache validity)
  std::atomic<uintptr_t> root_{0};  // tagged node pointer (what readers start from)
  int height_ = 0;                  // guarded by the writer: levels
  uint64_t nodes_ = 0;              // guarded by the writer: nodes in the tree
  MapleStats stats_;                // guarded by the writer
  std::vector<void*> retired_;      // guarded by the writer
  NodeCache cache_;                 // guarded by the writer
  MemoryBudget* const budget_;      // what cache_ charges (FreeNodes uncharges)
  // guarded by the writer: how many of the nodes on cache_'s top are this store's
  // preallocation (mas_preallocate's mas->alloc, set aside by cache_.Reserve; nodes
  // freed during a store without RCU go on top and are used first, as mas_push_node).
  int prealloc_left_ = 0;
  StepHook step_hook_ = nullptr;
  void* step_ctx_ = nullptr;
  void Step() {
    if (step_hook_) step_hook_(step_ctx_);
  }
};

}  // namespace vmspace
