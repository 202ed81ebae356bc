// SPDX-License-Identifier: Apache-2.0
// The VMA indexes against independent models:
//  * MapleTree against a std::map of ranges (gaps included), in RCU and no-RCU mode,
//    with the tree's invariants (mt_validate: pivots, limits, gaps, parents, NULL
//    placement, node fill) checked after every store, and every store type reached;
//  * one test per store type: the type the kernel's rules pick, what it costs in
//    nodes, and the result;
//  * the walk cache: a store on another thread, or another tree, ends a thread's
//    cached walk; FindStart;
//  * RCU readers: after every step of every store a lookup finds the value from
//    before or after the store; readers racing the writer;
//  * each VmaIndex kind ("rbtree", "maple", maple without RCU) against a std::map of
//    VMAs: a seeded random sequence of Insert/Erase/Update/splits with write sections
//    (Commit), every query (FindVma, NextFrom, PrevOf, HighestGapEnd, ForEach order,
//    LookupRcu) compared; LookupRcu in reader threads while a writer replaces, moves
//    and erases ranges around a stable set of probe addresses, freeing retired nodes
//    after grace periods as the engine does;
//  * the maple index issuing the kernel's stores for splits, munmap and merges;
//  * whole address spaces with each index giving identical answers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "maple_tree.h"
#include "sync/rcu.h"
#include "vma_index.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr uint64_t kMax = ~0ull;
using T = MapleStoreType;

void* E(uint64_t id) { return reinterpret_cast<void*>(id << 4 | 8); }

/// The model: ranges [first, last] -> entry covering all 64-bit indexes; adjacent
/// NULL ranges are merged (as the tree keeps them), entries are not.
class RangeModel {
 public:
  RangeModel() { m_[0] = {kMax, nullptr}; }
  void Store(uint64_t first, uint64_t last, void* e) {
    Cut(first);
    if (last != kMax) Cut(last + 1);
    m_.erase(m_.lower_bound(first), last == kMax ? m_.end() : m_.lower_bound(last + 1));
    m_[first] = {last, e};
    if (!e) {  // merge with NULL neighbours
      auto it = m_.find(first);
      if (it != m_.begin() && !std::prev(it)->second.second) {
        auto p = std::prev(it);
        p->second.first = it->second.first;
        m_.erase(it);
        it = p;
      }
      auto n = std::next(it);
      if (n != m_.end() && !n->second.second) {
        it->second.first = n->second.first;
        m_.erase(n);
      }
    }
  }
  void* Load(uint64_t i) const { return std::prev(m_.upper_bound(i))->second.second; }
  std::string Dump() const {
    std::string s;
    for (auto& [f, v] : m_) s += Range(f, v.first, v.second);
    return s;
  }
  static std::string Range(uint64_t f, uint64_t l, void* e) {
    return std::to_string(f) + "-" + std::to_string(l) + ":" + std::to_string(reinterpret_cast<uintptr_t>(e)) + " ";
  }
  const std::map<uint64_t, std::pair<uint64_t, void*>>& ranges() const { return m_; }

 private:
  void Cut(uint64_t at) {
    auto it = std::prev(m_.upper_bound(at));
    if (it->first == at) return;
    auto [last, e] = it->second;
    it->second.first = at - 1;
    m_[at] = {last, e};
  }
  std::map<uint64_t, std::pair<uint64_t, void*>> m_;
};

/// The same store on the tree and the model.
void Both(MapleTree& t, RangeModel& m, uint64_t first, uint64_t last, void* e) {
  t.Store(first, last, e);
  m.Store(first, last, e);
}

std::string Dump(const MapleTree& t) {
  std::string s;
  t.ForEachRange([&](uint64_t f, uint64_t l, void* e) { s += RangeModel::Range(f, l, e); });
  return s;
}

uint64_t Count(const MapleTree& t, T type) { return t.stats().stores[static_cast<int>(type)]; }

struct RandomCase {
  bool rcu;
  uint64_t span;  // indexes used: small ones exercise dense-range split rules
};

class MapleRandom : public ::testing::TestWithParam<RandomCase> {};

TEST_P(MapleRandom, MatchesModelAndKeepsInvariants) {
  const RandomCase c = GetParam();
  MapleTree t(c.rcu);
  RangeModel m;
  std::mt19937_64 rng(c.span * 31 + c.rcu);
  const int steps = getenv("VMSPACE_INDEX_STEPS") ? atoi(getenv("VMSPACE_INDEX_STEPS")) : 20000;
  std::vector<void*> retired;
  int max_height = 0;
  for (int i = 0; i < steps; i++) {
    // Phases that grow and shrink the tree, with mostly short ranges (VMA-like).
    const bool grow = (i / 2500) % 2 == 0;
    uint64_t first = rng() % c.span;
    const uint64_t len = rng() % 8 == 0 ? 1 + rng() % (c.span / 8) : 1 + rng() % 4;
    uint64_t last = std::min(c.span - 1, first + len - 1);
    if (rng() % 300 == 0) last = kMax;  // through the end of the index space
    if (rng() % 300 == 0) first = 0;
    void* e = (rng() % 10 < (grow ? 7u : 3u)) ? E(1 + rng() % 1000) : nullptr;
    Both(t, m, first, last, e);
    ASSERT_EQ(t.Validate(), "") << "step " << i << " store [" << first << ", " << last << "]";
    for (int k = 0; k < 4; k++) {
      const uint64_t x = rng() % c.span;
      ASSERT_EQ(t.Load(x), m.Load(x)) << "step " << i << " index " << x;
      if (c.rcu) {
        ASSERT_EQ(t.LoadRcu(x), m.Load(x)) << "step " << i << " index " << x;
      }
    }
    if (i % 64 == 0) {
      ASSERT_EQ(Dump(t), m.Dump()) << "step " << i;
    }
    max_height = std::max(max_height, t.height());
    t.TakeRetired(retired);
  }
  ASSERT_EQ(Dump(t), m.Dump());
  if (getenv("VMSPACE_INDEX_VERBOSE")) {
    for (int k = 0; k < static_cast<int>(T::kCount); k++)
      printf("%s=%lu ", MapleStoreTypeName(static_cast<T>(k)), static_cast<unsigned long>(t.stats().stores[k]));
    printf("\nheight=%d nodes=%lu prealloc=%lu used=%lu retired=%lu\n", t.height(),
           static_cast<unsigned long>(t.nodes()), static_cast<unsigned long>(t.stats().prealloc_nodes),
           static_cast<unsigned long>(t.stats().used_nodes), static_cast<unsigned long>(t.stats().retired_nodes));
  }
  EXPECT_EQ(t.stats().prealloc_short, 0u) << "a store needed more nodes than mas_prealloc_calc allows";
  EXPECT_GE(max_height, 3);
  // Every store type the mode allows happened.
  for (T type : {T::kStoreRoot, T::kExactFit, T::kSpanningStore, T::kSplitStore, T::kRebalance, T::kNodeStore,
                 T::kSlotStore})
    EXPECT_GT(Count(t, type), 0u) << MapleStoreTypeName(type);
  if (c.rcu) {
    EXPECT_EQ(Count(t, T::kAppend), 0u);  // unsafe for RCU readers
    EXPECT_EQ(t.stats().retired_nodes, retired.size());
  } else {
    EXPECT_GT(Count(t, T::kAppend), 0u);
    EXPECT_TRUE(retired.empty());  // freed at once
  }
  MapleTree::FreeNodes(retired);
}

INSTANTIATE_TEST_SUITE_P(Modes, MapleRandom,
                         ::testing::Values(RandomCase{true, 5000}, RandomCase{false, 5000}, RandomCase{true, 300},
                                           RandomCase{false, 300}, RandomCase{true, 1ull << 40}),
                         [](const ::testing::TestParamInfo<RandomCase>& i) {
                           return std::string(i.param.rcu ? "rcu" : "norcu") + "_span" + std::to_string(i.param.span);
                         });

// ---------------------------------------------------------------- store types

/// A tree of `n` entries [10k, 10k + 4] (gaps between), inserted in order.
void Fill(MapleTree& t, RangeModel& m, int n, uint64_t base = 1000) {
  for (int k = 0; k < n; k++) {
    Both(t, m, base + 10 * k, base + 10 * k + 4, E(k + 1));
  }
}

struct Delta {
  MapleStats before;
  std::vector<void*> retired;
  const MapleTree& t;
  explicit Delta(const MapleTree& tree) : before(tree.stats()), t(tree) {}
  uint64_t stores(T type) const { return Count(t, type) - before.stores[static_cast<int>(type)]; }
  uint64_t total() const { return t.stats().stores_total() - before.stores_total(); }
  uint64_t prealloc() const { return t.stats().prealloc_nodes - before.prealloc_nodes; }
  uint64_t used() const { return t.stats().used_nodes - before.used_nodes; }
  uint64_t retired_nodes() const { return t.stats().retired_nodes - before.retired_nodes; }
};

#define EXPECT_ONE_STORE(d, type)        \
  do {                                   \
    EXPECT_EQ((d).total(), 1u);          \
    EXPECT_EQ((d).stores(type), 1u) << MapleStoreTypeName(type); \
  } while (0)

TEST(MapleStore, FirstEntryExpandsTheRoot) {
  MapleTree t(true);
  Delta d(t);
  t.Store(100, 199, E(1));
  EXPECT_ONE_STORE(d, T::kStoreRoot);
  EXPECT_EQ(d.prealloc(), 1u);
  EXPECT_EQ(t.height(), 1);
  EXPECT_EQ(Dump(t), "0-99:0 100-199:" + std::to_string(reinterpret_cast<uintptr_t>(E(1))) + " 200-" +
                         std::to_string(kMax) + ":0 ");
}

TEST(MapleStore, Linux61PreallocatesTheWorstCaseBeforeEveryStore) {
  // prealloc_worst (Linux 6.1 - 6.4): every store sets aside 1 + 3 x height nodes, of
  // which it uses what its store type needs (as mas_prealloc_calc's tree does for the
  // same stores), and never needs more; the rest go back to the cache.
  for (bool rcu : {true, false}) {
    MapleTree worst(rcu, nullptr, true), calc(rcu);
    std::mt19937_64 rng(3);
    std::vector<void*> retired;
    uint64_t expect_prealloc = 0;
    for (int i = 0; i < 4000; i++) {
      const uint64_t first = rng() % 30000, last = first + (rng() % 8 == 0 ? rng() % 2000 : rng() % 40);
      void* e = rng() % 3 ? E(1 + rng() % 1000) : nullptr;
      expect_prealloc += 1 + 3 * static_cast<uint64_t>(worst.height());
      worst.Store(first, last, e);
      calc.Store(first, last, e);
      worst.TakeRetired(retired);
      calc.TakeRetired(retired);
    }
    const MapleStats &w = worst.stats(), &c = calc.stats();
    EXPECT_EQ(w.prealloc_nodes, expect_prealloc) << "rcu " << rcu;
    EXPECT_GT(w.prealloc_nodes, 3 * c.prealloc_nodes) << "rcu " << rcu;
    for (int k = 0; k < static_cast<int>(T::kCount); k++)
      EXPECT_EQ(w.stores[k], c.stores[k]) << MapleStoreTypeName(static_cast<T>(k));
    EXPECT_EQ(w.used_nodes, c.used_nodes) << "rcu " << rcu;
    EXPECT_EQ(w.retired_nodes, c.retired_nodes) << "rcu " << rcu;
    EXPECT_EQ(w.prealloc_short, 0u);
    EXPECT_EQ(c.prealloc_short, 0u);
    EXPECT_GE(worst.height(), 3);
    EXPECT_EQ(worst.nodes(), calc.nodes());
    EXPECT_EQ(worst.Validate(), "");
    MapleTree::FreeNodes(retired);
  }
}

/// One store on a tree of `fill` entries [1000 + 10k, 1000 + 10k + 4] (after an
/// optional earlier store): the store type the kernel's rules pick and its node cost.
struct OneStore {
  const char* name;
  bool rcu;
  int fill;
  uint64_t first, last;  // the store; entry E(id), or NULL if id == 0
  uint64_t id;
  T type;
  uint64_t prealloc, used, retired;
  uint64_t before_first = 0, before_last = 0, before_id = 0;  // an earlier store, if before_last
};
void PrintTo(const OneStore& c, std::ostream* os) { *os << c.name; }

class MapleOneStore : public ::testing::TestWithParam<OneStore> {};

TEST_P(MapleOneStore, PicksTheKernelsStoreType) {
  const OneStore c = GetParam();
  MapleTree t(c.rcu);
  RangeModel m;
  Fill(t, m, c.fill);
  if (c.before_last) Both(t, m, c.before_first, c.before_last, c.before_id ? E(c.before_id) : nullptr);
  const int height = t.height();
  Delta d(t);
  Both(t, m, c.first, c.last, c.id ? E(c.id) : nullptr);
  EXPECT_EQ(d.total(), 1u);
  EXPECT_EQ(d.stores(c.type), 1u) << "got another type than " << MapleStoreTypeName(c.type);
  EXPECT_EQ(d.prealloc(), c.prealloc);
  EXPECT_EQ(d.used(), c.used);
  EXPECT_EQ(d.retired_nodes(), c.retired);
  EXPECT_EQ(Dump(t), m.Dump());
  EXPECT_EQ(t.Validate(), "");
  if (c.type == T::kSplitStore) {
    EXPECT_EQ(t.height(), height + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, MapleOneStore,
    ::testing::Values(
        // exactly entry 3's range: the slot rewritten in place
        OneStore{"exact_fit", true, 5, 1020, 1024, 99, T::kExactFit, 0, 0, 0},
        // vma_expand of [1020, 1024] to [1020, 1027]: the entry keeps its slot, one
        // pivot moves into the gap after it, no new boundary
        OneStore{"slot_store_end", true, 5, 1020, 1027, 3, T::kSlotStore, 0, 0, 0},
        OneStore{"slot_store_end_norcu", false, 5, 1020, 1027, 3, T::kSlotStore, 0, 0, 0},
        // the start moving down into the gap below: the other slot-store case
        OneStore{"slot_store_start", true, 5, 1017, 1024, 3, T::kSlotStore, 0, 0, 0},
        // shrinking the end back: a NULL over the tail joins the gap after it
        OneStore{"slot_store_shrink", true, 5, 1025, 1027, 0, T::kSlotStore, 0, 0, 0, 1020, 1027, 3},
        // a range inside a gap adds two boundaries: with RCU a new leaf replaces the
        // old one (one node preallocated, used and retired); without, in place
        OneStore{"node_store", true, 4, 1006, 1007, 50, T::kNodeStore, 1, 1, 1},
        OneStore{"node_store_norcu", false, 4, 1006, 1007, 50, T::kNodeStore, 0, 0, 0},
        // two boundaries at the end of the node: appended in place without RCU; with
        // RCU a node store (readers may have cached the node's end)
        OneStore{"append_norcu", false, 3, 2000, 2009, 7, T::kAppend, 0, 0, 0},
        OneStore{"append_rcu_is_node_store", true, 3, 2000, 2009, 7, T::kNodeStore, 1, 1, 1},
        // 7 entries + 7 gaps + the leading gap = 15 slots; two more overflow the root
        // leaf: two leaves and a new root (height 1: 2 * 1 + 1 preallocated)
        OneStore{"split_store", true, 7, 1006, 1007, 50, T::kSplitStore, 3, 3, 1}),
    [](const ::testing::TestParamInfo<OneStore>& i) { return std::string(i.param.name); });

TEST(MapleStore, SplitPushesIntoASiblingWithRoom) {
  // Two leaves after the root split; entries appended at the right fill the right
  // leaf until it overflows. Its left sibling has room, so the split pushes data
  // into it (mas_push_data): still two leaves, both replaced, and a new root.
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 8);
  ASSERT_EQ(t.height(), 2);
  ASSERT_EQ(t.nodes(), 3u);
  bool split = false;
  for (int k = 8; k < 20 && !split; k++) {
    Delta d(t);
    Both(t, m, 1000 + 10 * k, 1000 + 10 * k + 4, E(k + 1));
    if (d.stores(T::kSplitStore)) {
      split = true;
      EXPECT_EQ(t.nodes(), 3u);  // no third leaf
      EXPECT_EQ(d.used(), 3u);   // two leaves and their parent replaced
      EXPECT_EQ(d.retired_nodes(), 3u);
    }
  }
  EXPECT_TRUE(split);
  EXPECT_EQ(Dump(t), m.Dump());
  EXPECT_EQ(t.Validate(), "");
}

TEST(MapleStore, StoreAcrossLeavesIsASpanningStore) {
  for (bool rcu : {true, false}) {
    MapleTree t(rcu);
    RangeModel m;
    Fill(t, m, 60);  // several leaves, height 3
    ASSERT_GE(t.height(), 2);
    const int h = t.height();
    Delta d(t);
    Both(t, m, 1105, 1403, E(500));  // over ~30 entries: several leaves
    EXPECT_ONE_STORE(d, T::kSpanningStore);
    EXPECT_EQ(d.prealloc(), static_cast<uint64_t>(h * 3 + 1));
    EXPECT_LE(d.used(), d.prealloc());
    EXPECT_EQ(Dump(t), m.Dump());
    EXPECT_EQ(t.Validate(), "");
    // Clearing exactly that entry again (its neighbours are entries): an exact fit.
    Delta d2(t);
    Both(t, m, 1105, 1403, nullptr);
    EXPECT_ONE_STORE(d2, T::kExactFit);
    EXPECT_EQ(Dump(t), m.Dump());
    EXPECT_EQ(t.Validate(), "");
  }
}

TEST(MapleStore, NullEndingALeafIsASpanningStore) {
  // Removing the last entry of a leaf that is not the rightmost would leave it ending
  // in NULL: the gap must move into the next leaf (mas_is_span_wr), so that erase is a
  // spanning store; erasing any other entry stays inside its leaf.
  int spanning = 0;
  for (int k = 0; k < 30; k++) {
    MapleTree t(true);
    RangeModel m;
    Fill(t, m, 30);
    ASSERT_EQ(t.height(), 2);
    Delta d(t);
    Both(t, m, 1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
    ASSERT_EQ(Dump(t), m.Dump());
    ASSERT_EQ(t.Validate(), "");
    EXPECT_EQ(d.total(), 1u);
    spanning += static_cast<int>(d.stores(T::kSpanningStore));
  }
  // 30 entries with gaps need 4 or 5 leaves; every leaf but the last ends in an entry.
  EXPECT_GE(spanning, 3);
  EXPECT_LE(spanning, 4);
}

TEST(MapleStore, EraseBelowTheMinimumRebalances) {
  for (bool rcu : {true, false}) {
    MapleTree t(rcu);
    RangeModel m;
    Fill(t, m, 40);
    ASSERT_GE(t.height(), 2);
    uint64_t rebalances = 0;
    // Erase entries in the middle one by one until a leaf drops below its minimum.
    for (int k = 10; k < 30 && !rebalances; k++) {
      Delta d(t);
      Both(t, m, 1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
      ASSERT_EQ(Dump(t), m.Dump());
      ASSERT_EQ(t.Validate(), "");
      rebalances = d.stores(T::kRebalance);
      if (rebalances) {
        EXPECT_GE(d.prealloc(), d.used());
      }
    }
    EXPECT_EQ(rebalances, 1u);
  }
}

TEST(MapleStore, TheTreeShrinksBackToOneLeafAndEmpties) {
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 200);
  ASSERT_GE(t.height(), 3);
  for (int k = 199; k >= 0; k--) {
    Both(t, m, 1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
    ASSERT_EQ(t.Validate(), "") << k;
    if (k == 3) {
      EXPECT_EQ(t.height(), 1);
    }
  }
  EXPECT_EQ(t.height(), 0);
  EXPECT_EQ(t.nodes(), 0u);
  EXPECT_EQ(Count(t, T::kNewRoot), 1u);  // the last erase: NULL over [0, ULONG_MAX]
  std::vector<void*> retired;
  t.TakeRetired(retired);
  EXPECT_EQ(retired.size(), t.stats().retired_nodes);
  MapleTree::FreeNodes(retired);
}

TEST(MapleStore, NodesAre256BytesWithTheKernelsFanOut) {
  EXPECT_EQ(MapleTree::kNodeSize, 256u);
  EXPECT_EQ(MapleTree::kRangeSlots, 16);
  EXPECT_EQ(MapleTree::kArangeSlots, 10);
  // 16 entries per full leaf: 8 ranges with gaps fill one leaf.
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 7);
  EXPECT_EQ(t.nodes(), 1u);
}

// The walk cache (MapleTree::Walk): a walk reuses the path of the leaf this thread last
// walked to only while that leaf is the tree's, as it is now.

/// A tree of 300 entries [1000 + 10k, 1000 + 10k + 4] (several levels).
void FillTree(MapleTree& t) {
  for (uint64_t k = 0; k < 300; k++) t.Store(1000 + 10 * k, 1004 + 10 * k, E(1 + k));
}

TEST(MapleWalk, AStoreOnAnotherThreadEndsThisThreadsCachedWalk) {
  for (bool rcu : {true, false}) {
    MapleTree t(rcu);
    FillTree(t);
    ASSERT_GE(t.height(), 2);
    std::vector<void*> retired;
    // This thread walks to the leaf of 1500 (entry 51, [1500, 1504]).
    ASSERT_EQ(t.Load(1500), E(51));
    // Another thread (the writer, as under mmap_lock for write) replaces that leaf (a
    // node store: a new leaf in RCU mode, the leaf rewritten without) and the VMA.
    std::thread([&] {
      t.Store(1500, 1502, E(7000));
      t.TakeRetired(retired);
    }).join();
    uint64_t first = 0, last = 0;
    EXPECT_EQ(t.Load(1500, &first, &last), E(7000)) << "rcu " << rcu;
    EXPECT_EQ(first, 1500u);
    EXPECT_EQ(last, 1502u);
    EXPECT_EQ(t.Load(1503, &first, &last), E(51));  // what is left of the old entry
    EXPECT_EQ(first, 1503u);
    EXPECT_EQ(last, 1504u);
    EXPECT_EQ(t.Find(1505, &first, &last), E(52));
    EXPECT_EQ(first, 1510u);
    EXPECT_EQ(t.Validate(), "");
    MapleTree::FreeNodes(retired);
  }
}

TEST(MapleWalk, TwoTreesOnOneThreadDoNotShareACachedWalk) {
  MapleTree a(true), b(true);
  FillTree(a);
  for (uint64_t k = 0; k < 300; k++) b.Store(1000 + 10 * k, 1004 + 10 * k, E(5000 + k));
  // Same indexes, alternating trees: each answer is the tree's own.
  for (uint64_t x = 1000; x < 4000; x += 7) {
    const uint64_t k = (x - 1000) / 10, in = (x - 1000) % 10 < 5;
    EXPECT_EQ(a.Load(x), in ? E(1 + k) : nullptr) << x;
    EXPECT_EQ(b.Load(x), in ? E(5000 + k) : nullptr) << x;
  }
}

TEST(MapleWalk, FindStartSkipsTheEntryThatStartsBelowIndex) {
  MapleTree t(true);
  FillTree(t);
  uint64_t first = 0, last = 0;
  EXPECT_EQ(t.FindStart(1502, &first, &last), E(52));  // [1500, 1504] starts below
  EXPECT_EQ(first, 1510u);
  EXPECT_EQ(t.FindStart(1500, &first, &last), E(51));
  EXPECT_EQ(first, 1500u);
  EXPECT_EQ(t.FindStart(1505, &first, &last), E(52));  // in the gap after it
  EXPECT_EQ(first, 1510u);
  // The last entry of a leaf: the next leaf's first entry. Every start checked.
  for (uint64_t k = 0; k + 1 < 300; k++) {
    ASSERT_EQ(t.FindStart(1001 + 10 * k, &first, &last), E(2 + k)) << k;
    ASSERT_EQ(first, 1010 + 10 * k);
  }
  EXPECT_EQ(t.FindStart(1000 + 10 * 299 + 1, &first, &last), nullptr);
}

TEST(MapleStore, GapSearchFindsTheHighestFittingGap) {
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 100);  // gaps of 5 between entries, below 1000 and above the last
  EXPECT_EQ(t.EmptyAreaRevEnd(5, 0, 2000), 2000u);  // the gap above everything, clipped
  EXPECT_EQ(t.EmptyAreaRevEnd(5, 0, 1500), 1500u);
  EXPECT_EQ(t.EmptyAreaRevEnd(5, 0, 1494), 1490u);  // the gap [1485, 1489]... clipped end
  EXPECT_EQ(t.EmptyAreaRevEnd(6, 1000, 1990), kMax);  // no 6-long gap inside
  EXPECT_EQ(t.EmptyAreaRevEnd(6, 0, 1990), 1000u);    // the gap below the first entry
  t.Store(1500, 1514, nullptr);                        // a 25-long gap [1495, 1519]
  EXPECT_EQ(t.EmptyAreaRevEnd(20, 0, 1990), 1520u);
  EXPECT_EQ(t.Validate(), "");
}

// ---------------------------------------------------------------- RCU readers

struct Retired {
  struct rcu_head head;
  std::vector<void*> nodes;
};
void FreeRetired(struct rcu_head* h) {
  RcuCallbackBegin(h);
  Retired* r = reinterpret_cast<Retired*>(reinterpret_cast<char*>(h) - offsetof(Retired, head));
  MapleTree::FreeNodes(r->nodes);
  delete r;
}

/// Stable entries at [1000k, 1000k + 99]; the writer churns the space between them.
struct StableTree {
  static constexpr uint64_t kStride = 1000;
  uint64_t stable;
  MapleTree t{true};
  explicit StableTree(uint64_t n) : stable(n) {
    for (uint64_t k = 0; k < n; k++) t.Store(k * kStride, k * kStride + 99, E(100000 + k));
  }
  static bool IsStable(void* e) { return reinterpret_cast<uintptr_t>(e) >= reinterpret_cast<uintptr_t>(E(100000)); }
  /// What a reader at index x must find: the stable entry, or anything else outside.
  bool Consistent(uint64_t x) const {
    void* e = t.LoadRcu(x);
    const uint64_t k = x / kStride;
    return x % kStride < 100 ? e == E(100000 + k) : !IsStable(e);
  }
  /// One random store in a churn area: short ranges, sometimes a whole area (a
  /// spanning store over leaves), a third of them NULL.
  void Churn(std::mt19937_64& rng) {
    const uint64_t k = rng() % stable;
    const uint64_t lo = k * kStride + 100, hi = (k + 1) * kStride - 1;
    void* e = rng() % 3 ? E(1 + rng() % 5000) : nullptr;
    if (rng() % 40 == 0) {
      t.Store(lo, hi, e);
    } else {
      const uint64_t a = lo + rng() % (hi - lo + 1);
      t.Store(a, std::min(hi, a + rng() % (rng() % 4 == 0 ? 600 : 20)), e);
    }
  }
};

TEST(MapleRcu, EveryStepOfEveryStoreLeavesAConsistentTree) {
  // After each store a lockless reader can see (each node published, each slot or pivot
  // rewritten in place), every index reads either its value before the store or its
  // value after it: a reader never sees a torn tree.
  struct Ctx {
    MapleTree t{true};
    RangeModel before, after;
    uint64_t first = 0, last = 0, steps = 0, bad = 0, checked = 0;
    std::mt19937_64 rng{9};
    void Check(uint64_t x) {
      void* e = t.LoadRcu(x);
      checked++;
      if (e != before.Load(x) && e != after.Load(x)) bad++;
    }
  } c;
  c.t.SetStepHook(
      [](void* p) {
        Ctx* c = static_cast<Ctx*>(p);
        c->steps++;
        const uint64_t lo = c->first > 40 ? c->first - 40 : 0, hi = std::min<uint64_t>(c->last, 1 << 20) + 40;
        for (uint64_t x = lo; x <= hi; x++) c->Check(x);
        for (int i = 0; i < 64; i++) c->Check(c->rng() % 30000);
      },
      &c);
  std::mt19937_64 rng(5);
  std::vector<void*> retired;
  int max_height = 0;
  for (int i = 0; i < 6000; i++) {
    const bool grow = (i / 2000) % 2 == 0;
    c.first = rng() % 30000;
    c.last = c.first + (rng() % 16 == 0 ? rng() % 3000 : rng() % 6);
    void* e = (rng() % 10 < (grow ? 8u : 2u)) ? E(1 + rng() % 1000) : nullptr;
    c.after.Store(c.first, c.last, e);
    c.t.Store(c.first, c.last, e);
    c.before.Store(c.first, c.last, e);
    c.t.TakeRetired(retired);
    max_height = std::max(max_height, c.t.height());
  }
  c.t.SetStepHook(nullptr, nullptr);
  EXPECT_EQ(c.bad, 0u) << "of " << c.checked << " lookups";
  EXPECT_GT(c.steps, 6000u);
  EXPECT_GE(max_height, 3);
  EXPECT_EQ(c.t.Validate(), "");
  for (T type : {T::kSplitStore, T::kSpanningStore, T::kRebalance, T::kNodeStore, T::kSlotStore, T::kExactFit})
    EXPECT_GT(Count(c.t, type), 0u) << MapleStoreTypeName(type);
  MapleTree::FreeNodes(retired);
}

TEST(MapleRcu, ReadersSeeAConsistentTreeAtEveryStep) {
  // The same property with real concurrency: readers under RCU race the writer, whose
  // retired nodes are freed after grace periods. A small tree, so that readers are
  // often in the node being replaced.
  RcuThread();
  StableTree s(16);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, errors{0};
  auto reader = [&](int seed) {
    RcuThread();
    std::mt19937_64 rng(seed);
    while (!stop.load(std::memory_order_relaxed)) {
      RcuReadGuard g;
      for (int i = 0; i < 64; i++)
        if (!s.Consistent(rng() % (s.stable * StableTree::kStride))) errors.fetch_add(1, std::memory_order_relaxed);
      reads.fetch_add(64, std::memory_order_relaxed);
    }
  };
  std::thread r1(reader, 1), r2(reader, 2);
  std::mt19937_64 rng(3);
  const int steps = getenv("VMSPACE_INDEX_STEPS") ? atoi(getenv("VMSPACE_INDEX_STEPS")) : 30000;
  // Run until the readers have overlapped the writer for a while (on a loaded machine
  // they may get little CPU), not for a fixed time.
  const uint64_t min_reads = 2000000;
  for (int i = 0; i < steps || reads.load(std::memory_order_relaxed) < min_reads; i++) {
    s.Churn(rng);
    if (i % 256 == 0) {
      Retired* r = new Retired;
      s.t.TakeRetired(r->nodes);
      CallRcu(&r->head, &FreeRetired);
    }
  }
  stop = true;
  r1.join();
  r2.join();
  Retired* r = new Retired;
  s.t.TakeRetired(r->nodes);
  CallRcu(&r->head, &FreeRetired);
  RcuBarrier();
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_EQ(s.t.Validate(), "");
  for (T type : {T::kSplitStore, T::kSpanningStore, T::kRebalance, T::kNodeStore, T::kSlotStore, T::kExactFit})
    EXPECT_GT(Count(s.t, type), 0u) << MapleStoreTypeName(type);
}

// ---------------------------------------------------------------- VmaIndex

/// synchronize_rcu() for the tests: a callback queued after the caller's last
/// retirement has run once RcuBarrier returns.
void WaitForReaders() {
  static struct rcu_head h;
  CallRcu(&h, [](struct rcu_head* p) { RcuCallbackBegin(p); });
  RcuBarrier();
}

uint64_t EnvOr(const char* name, uint64_t def) {
  const char* e = getenv(name);
  return e && *e ? strtoull(e, nullptr, 0) : def;
}

/// The model: start -> (end, Vma*), non-overlapping.
struct Range {
  uint64_t end;
  Vma* vma;
};
using Model = std::map<uint64_t, Range>;

Vma* ModelFindVma(const Model& m, uint64_t addr) {  // first with end > addr
  auto it = m.upper_bound(addr);
  if (it != m.begin()) {
    auto p = std::prev(it);
    if (p->second.end > addr) return p->second.vma;
  }
  return it == m.end() ? nullptr : it->second.vma;
}
Vma* ModelNextFrom(const Model& m, uint64_t addr) {  // first with start >= addr
  auto it = m.lower_bound(addr);
  return it == m.end() ? nullptr : it->second.vma;
}
Vma* ModelPrevOf(const Model& m, uint64_t addr) {  // last with start < addr
  auto it = m.lower_bound(addr);
  return it == m.begin() ? nullptr : std::prev(it)->second.vma;
}
Vma* ModelContaining(const Model& m, uint64_t addr) {
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return nullptr;
  --it;
  return it->second.end > addr ? it->second.vma : nullptr;
}
/// The end of the highest gap (clipped to [low, high)) of at least `length` bytes.
uint64_t ModelHighestGapEnd(const Model& m, uint64_t length, uint64_t low, uint64_t high) {
  uint64_t ge = ~0ull;  // the gaps from the top: [end of the last range, ~0) first
  auto fits = [&](uint64_t gs, uint64_t e) {
    gs = std::max(gs, low);
    e = std::min(e, high);
    return e > gs && e - gs >= length ? e : ~0ull;
  };
  for (auto it = m.rbegin(); it != m.rend(); ++it) {
    if (uint64_t r = fits(it->second.end, ge); r != ~0ull) return r;
    ge = it->first;
  }
  return fits(0, ge);
}

Vma* NewVma(uint64_t start, uint64_t end) {
  Vma* v = new Vma;
  v->vm_start = start;
  v->vm_end = end;
  return v;
}

/// An index to test: rbtree, maple (RCU mode, the engine's), maple without RCU.
struct IndexCase {
  const char* name;
  VmaIndexKind kind;
  bool rcu;
  std::unique_ptr<VmaIndex> Make() const {
    return kind == VmaIndexKind::kRbtree ? VmaIndex::Create(kind) : VmaIndex::CreateMaple(rcu);
  }
};
// gtest prints parameters with it (the name instead of a byte dump).
void PrintTo(const IndexCase& c, std::ostream* os) { *os << c.name; }

class VmaIndexModel : public ::testing::TestWithParam<IndexCase> {};

// Insert/Erase/Update chosen at random in a universe of kPages pages, in three
// phases (grow to ~1500 ranges: a tree of three levels; churn; shrink to empty: node
// merges and root collapse), every answer compared with the model. Besides single
// changes: splits as __split_vma makes them (shrink, then insert the part cut off)
// and erases of neighbouring ranges in one write section (munmap), the sequences the
// maple index turns into the kernel's stores. The index's own invariants are checked
// at the end of every write section.
TEST_P(VmaIndexModel, MatchesModelOnRandomOps) {
  const IndexCase c = GetParam();
  std::unique_ptr<VmaIndex> idx = c.Make();
  const bool rcu = c.kind == VmaIndexKind::kMaple && c.rcu;
  std::mt19937_64 rng(EnvOr("VMSPACE_INDEX_SEED", 7));
  auto R = [&](uint64_t n) { return rng() % n; };
  constexpr uint64_t kPages = 1 << 15;
  const uint64_t base = 0x7f0000000000;  // high keys: ranges near the top of user space
  const int steps = static_cast<int>(EnvOr("VMSPACE_INDEX_STEPS", 12000));

  Model m;
  std::vector<std::unique_ptr<Vma>> owned;  // no readers: freed at the end
  std::vector<void*> retired;
  auto Pick = [&](Model& mm) {  // a range at random (the first at or above a random address)
    auto it = mm.lower_bound(base + R(kPages) * P);
    return it == mm.end() ? mm.begin() : it;
  };
  auto addr_near = [&]() -> uint64_t {  // a probe: anywhere, or at/near a range edge
    if (m.empty() || R(3) == 0) return base + R(kPages + 64) * P - 32 * P + R(2) * R(P);
    auto it = Pick(m);
    uint64_t edge = R(2) ? it->first : it->second.end;
    static const int64_t kDelta[] = {-1, 0, 1, -static_cast<int64_t>(P), static_cast<int64_t>(P)};
    return edge + static_cast<uint64_t>(kDelta[R(5)]);
  };
  auto check = [&](int step) {
    for (int q = 0; q < 8; q++) {
      uint64_t a = addr_near();
      ASSERT_EQ(idx->FindVma(a), ModelFindVma(m, a)) << "step " << step << " FindVma " << std::hex << a;
      ASSERT_EQ(idx->NextFrom(a), ModelNextFrom(m, a)) << "step " << step << " NextFrom " << std::hex << a;
      ASSERT_EQ(idx->PrevOf(a), ModelPrevOf(m, a)) << "step " << step << " PrevOf " << std::hex << a;
      // Every store is visible to RCU readers as it is made (not at Commit).
      ASSERT_EQ(idx->LookupRcu(a), rcu ? ModelContaining(m, a) : nullptr)
          << "step " << step << " LookupRcu " << std::hex << a;
      uint64_t length = (1 + R(R(4) == 0 ? 64 : 4)) * P;
      uint64_t low = R(4) == 0 ? 0 : addr_near() & ~(P - 1);
      uint64_t high = R(4) == 0 ? ~0ull : low + R(kPages / 2) * P;
      ASSERT_EQ(idx->HighestGapEnd(length, low, high), ModelHighestGapEnd(m, length, low, high))
          << "step " << step << std::hex << " HighestGapEnd len " << length << " [" << low << ", "
          << high << ")";
    }
    if (step % 64 == 0) {
      std::vector<Vma*> walk, want;
      idx->ForEach([&](Vma* v) { walk.push_back(v); });
      for (const auto& [s, r] : m) want.push_back(r.vma);
      ASSERT_EQ(walk, want) << "step " << step << " ForEach";
    }
  };

  size_t peak = 0;
  for (int step = 0; step < steps; step++) {
    const int phase = step < steps / 3 ? 0 : step < 2 * steps / 3 ? 1 : 2;
    const int insert_pct = phase == 0 ? 75 : phase == 1 ? 40 : 10;
    const int op = static_cast<int>(R(100));
    if (op < insert_pct || m.empty()) {
      uint64_t start = base + R(kPages) * P, end = start + (1 + R(8)) * P;
      Vma* below = ModelPrevOf(m, end);  // the last range starting below end
      bool free = !below || below->vm_end <= start;
      if (free) {
        Vma* v = NewVma(start, end);
        owned.emplace_back(v);
        idx->Insert(v);
        m[start] = {end, v};
      }
    } else {
      auto it = Pick(m);
      Vma* v = it->second.vma;
      if (op < insert_pct + (100 - insert_pct) / 2) {
        for (int n = R(4) == 0 ? 1 + static_cast<int>(R(3)) : 1; n && it != m.end(); n--) {
          idx->Erase(it->second.vma, it->second.vma->vm_start, it->second.vma->vm_end);
          it = m.erase(it);
        }
      } else if (R(3) == 0 && v->vm_end - v->vm_start >= 2 * P) {  // split
        const uint64_t os = v->vm_start, oe = v->vm_end;
        const uint64_t at = os + (1 + R((oe - os) / P - 1)) * P;
        const bool below = R(2);
        Vma* n = below ? NewVma(os, at) : NewVma(at, oe);
        owned.emplace_back(n);
        if (below) v->vm_start = at;
        else v->vm_end = at;
        idx->Update(v, os, oe);
        idx->Insert(n);
        m.erase(it);
        m[v->vm_start] = {v->vm_end, v};
        m[n->vm_start] = {n->vm_end, n};
      } else {  // Update: move either edge within the neighbours (order is kept)
        uint64_t lo_limit = it == m.begin() ? base - 64 * P : std::prev(it)->second.end;
        auto nx = std::next(it);
        uint64_t hi_limit = nx == m.end() ? base + (kPages + 64) * P : nx->first;
        uint64_t os = v->vm_start, oe = v->vm_end;
        uint64_t ns = os, ne = oe;
        if (R(2)) ns = lo_limit + R((oe - lo_limit) / P) * P;  // in [lo_limit, oe)
        else ne = oe - (oe - os > P ? R(2) * P : 0) + R((hi_limit - oe) / P + 1) * P;
        if (ns >= ne) ns = ne - P;
        if (ns < lo_limit) ns = lo_limit;
        v->vm_start = ns;
        v->vm_end = ne;
        idx->Update(v, os, oe);
        m.erase(it);
        m[ns] = {ne, v};
      }
    }
    peak = std::max(peak, m.size());
    if (R(8) == 0) {  // end of a write section (mmap_write_unlock)
      idx->Commit();
      idx->TakeRetired(retired);
      ASSERT_EQ(idx->Check(), "") << "step " << step;
      if (!rcu) {
        EXPECT_TRUE(retired.empty());
      }
    }
    check(step);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(peak, 1000u);  // several levels of nodes were exercised
  EXPECT_TRUE(m.empty() || m.size() < 200u);
  idx->Commit();
  idx->TakeRetired(retired);
  if (c.kind == VmaIndexKind::kMaple) {
    EXPECT_EQ(idx->Stats().maple.prealloc_short, 0u);
  }
  VmaIndex::DeleteRetired(retired);  // no readers here
}

INSTANTIATE_TEST_SUITE_P(VmaIndex, VmaIndexModel,
                         ::testing::Values(IndexCase{"rbtree", VmaIndexKind::kRbtree, false},
                                           IndexCase{"maple", VmaIndexKind::kMaple, true},
                                           IndexCase{"maple_norcu", VmaIndexKind::kMaple, false}),
                         [](const ::testing::TestParamInfo<IndexCase>& i) { return std::string(i.param.name); });

// LookupRcu from reader threads during writes (maple). Each probe slot i has a probe
// address inside a 16-page area; the writer keeps exactly one range of the slot's own
// over the probe at every step, replacing it (Erase + Insert of a new VMA) or moving
// its edges (Update) in write sections that also insert and erase unrelated ranges
// between the slots (node splits and merges). A reader must find the slot's VMA
// (never null, never another slot's) whose generation lies between the last one
// committed before its lookup and the last one published after it (stores are seen
// as they are made, so a reader may already see a generation not yet committed).
TEST(VmaIndexRcu, ReadersSeeOldOrNewRangeDuringWrites) {
  std::unique_ptr<VmaIndex> idx = VmaIndex::Create(VmaIndexKind::kMaple);
  constexpr int kSlots = 64;
  constexpr uint64_t kSlotSpan = 32 * P;  // [0, 16) pages: the slot's range, [16, 32): noise
  const uint64_t base = 0x10000000;
  auto probe = [&](int i) { return base + static_cast<uint64_t>(i) * kSlotSpan + 8 * P; };
  // vm_pgoff = slot, vm_flags = generation: written before the VMA is inserted, never
  // changed while it can be seen (readers read only these two fields).
  auto make = [&](int i, uint64_t gen, uint64_t first_page, uint64_t end_page) {
    Vma* v = NewVma(base + i * kSlotSpan + first_page * P, base + i * kSlotSpan + end_page * P);
    v->vm_pgoff = static_cast<uint64_t>(i);
    v->vm_flags = gen;
    return v;
  };
  std::vector<Vma*> cur(kSlots);
  std::vector<std::atomic<uint64_t>> committed(kSlots), published(kSlots);
  for (int i = 0; i < kSlots; i++) {
    cur[i] = make(i, 1, 4, 12);
    idx->Insert(cur[i]);
    committed[i].store(1);
    published[i].store(1);
  }
  idx->Commit();
  std::vector<void*> retired;
  idx->TakeRetired(retired);

  std::atomic<bool> done{false};
  std::atomic<int> started{0};
  std::atomic<uint64_t> errors{0};
  const int kReaders = 2;
  std::vector<uint64_t> lookups(kReaders);
  std::vector<std::thread> readers;
  for (int t = 0; t < kReaders; t++) {
    readers.emplace_back([&, t] {
      RcuThread();
      std::mt19937_64 rng(100 + t);
      started.fetch_add(1);
      uint64_t n = 0;
      while (!done.load(std::memory_order_acquire)) {
        int i = static_cast<int>(rng() % kSlots);
        uint64_t lo = committed[i].load(std::memory_order_acquire);
        uint64_t slot, gen;
        bool found;
        {
          RcuReadGuard g;
          Vma* v = idx->LookupRcu(probe(i));
          found = v != nullptr;
          slot = found ? v->vm_pgoff : 0;
          gen = found ? v->vm_flags : 0;
        }
        uint64_t hi = published[i].load(std::memory_order_acquire);
        if (!found || slot != static_cast<uint64_t>(i) || gen < lo || gen > hi) {
          if (errors.fetch_add(1) < 5)
            ADD_FAILURE() << "slot " << i << ": found " << found << " slot " << slot << " gen "
                          << gen << " not in [" << lo << ", " << hi << "]";
        }
        n++;
      }
      lookups[t] = n;
    });
  }
  while (started.load() < kReaders) std::this_thread::yield();

  RcuThread();
  std::mt19937_64 rng(EnvOr("VMSPACE_INDEX_SEED", 7));
  std::vector<std::vector<Vma*>> noise(kSlots);  // ranges in each slot's noise pages
  std::vector<Vma*> dead;                        // erased VMAs: freed after a grace period
  const int sections = static_cast<int>(EnvOr("VMSPACE_INDEX_RCU_SECTIONS", 20000));
  uint64_t gen = 1;
  for (int sec = 0; sec < sections; sec++) {
    std::vector<int> touched;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; k++) {
      int i = static_cast<int>(rng() % kSlots);
      uint64_t first = rng() % 9, end = 9 + rng() % 8;  // always covers page 8
      switch (rng() % 4) {
        case 0: {  // replace the slot's VMA by a new one
          Vma* v = make(i, ++gen, first, end);
          published[i].store(gen, std::memory_order_release);
          idx->Erase(cur[i], cur[i]->vm_start, cur[i]->vm_end);
          dead.push_back(cur[i]);
          idx->Insert(v);
          cur[i] = v;
          touched.push_back(i);
          break;
        }
        case 1: {  // move its edges
          Vma* v = cur[i];
          uint64_t os = v->vm_start, oe = v->vm_end;
          v->vm_start = base + i * kSlotSpan + first * P;
          v->vm_end = base + i * kSlotSpan + end * P;
          idx->Update(v, os, oe);
          break;
        }
        default: {  // a noise range in pages [16, 32) of the slot
          auto& nz = noise[i];
          if (!nz.empty() && rng() % 2) {
            size_t j = rng() % nz.size();
            idx->Erase(nz[j], nz[j]->vm_start, nz[j]->vm_end);
            dead.push_back(nz[j]);
            nz.erase(nz.begin() + static_cast<long>(j));
          } else if (nz.size() < 8) {
            uint64_t p = 16 + 2 * nz.size();  // one page each, one-page holes between
            bool used = false;
            for (Vma* x : nz) used |= x->vm_start == base + i * kSlotSpan + p * P;
            if (!used) {
              Vma* x = make(i + 1000, 0, p, p + 1);
              idx->Insert(x);
              nz.push_back(x);
            }
          }
        }
      }
    }
    idx->Commit();  // mmap_write_unlock: publish
    for (int i : touched) committed[i].store(published[i].load());
    idx->TakeRetired(retired);
    if (retired.size() + dead.size() >= 4096 || sec + 1 == sections) {
      WaitForReaders();  // as the engine's call_rcu batches: no reader holds them now
      VmaIndex::DeleteRetired(retired);
      for (Vma* v : dead) delete v;
      dead.clear();
    }
  }
  done.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0u);
  for (int t = 0; t < kReaders; t++) EXPECT_GT(lookups[t], 1000u) << "reader " << t;
  EXPECT_GT(gen, static_cast<uint64_t>(sections) / 8);
  for (int i = 0; i < kSlots; i++) {
    EXPECT_EQ(idx->LookupRcu(probe(i)), cur[i]);
    idx->Erase(cur[i], cur[i]->vm_start, cur[i]->vm_end);
    delete cur[i];
    for (Vma* x : noise[i]) {
      idx->Erase(x, x->vm_start, x->vm_end);
      delete x;
    }
  }
  idx->Commit();
  idx->TakeRetired(retired);
  VmaIndex::DeleteRetired(retired);  // the readers are gone
}

/// VMAs owned by a test (no readers remain when it ends).
struct OwnedVmas {
  std::vector<std::unique_ptr<Vma>> all;
  Vma* Make(uint64_t start, uint64_t end) {
    all.emplace_back(NewVma(start, end));
    return all.back().get();
  }
  Vma* operator[](size_t i) const { return all[i].get(); }
};

TEST(VmaIndexMaple, SplitAndMunmapIssueTheKernelsStores) {
  std::unique_ptr<VmaIndex> idx = VmaIndex::Create(VmaIndexKind::kMaple);
  OwnedVmas vmas;
  auto make = [&](uint64_t s, uint64_t e) { return vmas.Make(s, e); };
  for (uint64_t k = 0; k < 8; k++) idx->Insert(make((100 + 20 * k) * P, (110 + 20 * k) * P));
  idx->Commit();
  auto stores = [&] { return idx->Stats().maple.stores_total(); };
  auto of = [&](T type) { return idx->Stats().maple.stores[static_cast<int>(type)]; };
  // __split_vma(): the VMA shrinks, the new VMA is stored over the part it lost: one
  // store (a node store: one new boundary), not a clear and a store.
  Vma* v = vmas[2];
  uint64_t s0 = stores(), node_stores = of(T::kNodeStore);
  const uint64_t os = v->vm_start, oe = v->vm_end;
  v->vm_end = os + 4 * P;
  idx->Update(v, os, oe);
  idx->Insert(make(os + 4 * P, oe));
  idx->Commit();
  EXPECT_EQ(stores() - s0, 1u);
  EXPECT_EQ(of(T::kNodeStore) - node_stores, 1u);
  // munmap of four neighbouring VMAs: one NULL store over the range.
  s0 = stores();
  for (int k : {1, 2, 8, 3}) idx->Erase(vmas[k], vmas[k]->vm_start, vmas[k]->vm_end);
  idx->Commit();
  EXPECT_EQ(stores() - s0, 1u);
  EXPECT_EQ(idx->FindVma(vmas[1]->vm_start), vmas[4]);
  EXPECT_EQ(idx->Check(), "");
  // vma_expand(): the end moves into the gap above: a slot store, in place.
  s0 = stores();
  const uint64_t slot_stores = of(T::kSlotStore);
  const uint64_t e0 = vmas[0]->vm_end;
  vmas[0]->vm_end = e0 + 2 * P;
  idx->Update(vmas[0], vmas[0]->vm_start, e0);
  idx->Commit();
  EXPECT_EQ(stores() - s0, 1u);
  EXPECT_EQ(of(T::kSlotStore) - slot_stores, 1u);
  std::vector<void*> retired;
  idx->TakeRetired(retired);
  VmaIndex::DeleteRetired(retired);
}

TEST(VmaIndexMaple, ReplacingAVmaNeverLeavesItsAddressesEmpty) {
  // The engine's sequences that replace one VMA by another (Erase + Insert over an
  // overlapping range, as MAP_FIXED; Update + Insert, as __split_vma) or move it
  // (Update, as vma_expand / vma_shrink): after every step a lockless reader sees, at
  // an address mapped both before and after, the old or the new VMA, never nothing.
  std::unique_ptr<VmaIndex> idx = VmaIndex::Create(VmaIndexKind::kMaple);
  OwnedVmas vmas;
  auto make = [&](uint64_t s, uint64_t e) { return vmas.Make(s, e); };
  constexpr int kSlots = 40;
  constexpr uint64_t kSpan = 64 * P, kBase = 1ull << 30;
  std::vector<Vma*> cur(kSlots);
  for (int i = 0; i < kSlots; i++) {
    cur[i] = make(kBase + i * kSpan + 8 * P, kBase + i * kSpan + 24 * P);
    idx->Insert(cur[i]);
  }
  idx->Commit();
  struct Ctx {
    VmaIndex* idx;
    uint64_t lo = 0, hi = 0;          // addresses mapped before and after
    const Vma *a = nullptr, *b = nullptr;  // the VMAs a reader may find there
    uint64_t steps = 0, bad = 0;
  } ctx{idx.get()};
  idx->maple_tree()->SetStepHook(
      [](void* p) {
        Ctx* c = static_cast<Ctx*>(p);
        c->steps++;
        for (uint64_t x = c->lo; x < c->hi; x += P) {
          const Vma* v = c->idx->LookupRcu(x);
          if (v != c->a && v != c->b) c->bad++;
        }
      },
      &ctx);
  std::mt19937_64 rng(13);
  std::vector<void*> retired;
  for (int step = 0; step < 3000; step++) {
    const int i = static_cast<int>(rng() % kSlots);
    Vma* v = cur[i];
    const uint64_t base = kBase + i * kSpan;
    const uint64_t s = base + (1 + rng() % 16) * P, e = base + (20 + rng() % 40) * P;  // covers [17, 20)
    const uint64_t os = v->vm_start, oe = v->vm_end;
    ctx.lo = std::max(os, s);
    ctx.hi = std::min(oe, e);
    switch (rng() % 3) {
      case 0: {  // MAP_FIXED: the old VMA goes, a new one takes an overlapping range
        Vma* n = make(s, e);
        ctx.a = v;
        ctx.b = n;
        idx->Erase(v, os, oe);
        idx->Insert(n);
        cur[i] = n;
        break;
      }
      case 1: {  // __split_vma at a page inside, then the part cut off is unmapped
        if (oe - os < 2 * P) break;
        const uint64_t at = os + (1 + rng() % ((oe - os) / P - 1)) * P;
        Vma* n = make(at, oe);
        v->vm_end = at;
        ctx.lo = os;
        ctx.hi = oe;
        ctx.a = v;
        ctx.b = n;
        idx->Update(v, os, oe);
        idx->Insert(n);
        idx->Commit();
        ctx.lo = ctx.hi = 0;
        idx->Erase(n, at, oe);
        break;
      }
      default: {  // the VMA moves to [s, e) (vma_expand / vma_shrink)
        ctx.a = ctx.b = v;
        v->vm_start = s;
        v->vm_end = e;
        idx->Update(v, os, oe);
      }
    }
    idx->Commit();
    idx->TakeRetired(retired);
  }
  idx->maple_tree()->SetStepHook(nullptr, nullptr);
  EXPECT_EQ(ctx.bad, 0u);
  EXPECT_GT(ctx.steps, 3000u);
  EXPECT_EQ(idx->Check(), "");
  VmaIndex::DeleteRetired(retired);
}

// ---------------------------------------------------------------- whole spaces

std::string Dump(AddressSpace& as) {
  std::string s;
  for (VmaInfo v : as.Maps()) {
    v.inode = 0;  // shmem inode numbers are global: the two spaces get different ones
    s += AddressSpace::FormatMapsLine(v) + AddressSpace::VmFlagsString(v.flags) + " rss=" +
         std::to_string(v.rss_pages) + "\n";
  }
  return s;
}

TEST(VmaIndex, RbtreeAndMapleAgreeOnRandomOps) {
  FrameAllocator frames(1ull << 30);
  SpaceOptions a_opts, b_opts;
  std::string err;
  ASSERT_TRUE(LockingProfile::Parse("linux-6.0", &a_opts.profile, &err));
  ASSERT_TRUE(LockingProfile::Parse("linux-6.6", &b_opts.profile, &err));
  AddressSpace a(frames, a_opts), b(frames, b_opts);
  std::mt19937_64 rng(getenv("VMSPACE_INDEX_SEED") ? atoi(getenv("VMSPACE_INDEX_SEED")) : 7);
  const uint64_t base = 0x7ffff0000000;  // just below mmap_base: hints and FIXED land near top-down picks
  const int steps = getenv("VMSPACE_INDEX_STEPS") ? atoi(getenv("VMSPACE_INDEX_STEPS")) : 4000;
  for (int i = 0; i < steps; i++) {
    uint64_t page = rng() % 4096, n = 1 + rng() % (rng() % 8 == 0 ? 600 : 24);
    uint64_t addr = base + page * P;
    int prot = static_cast<int>(rng() % 8) & 7;
    int op = static_cast<int>(rng() % 7);
    SysResult ra, rb;
    std::string what;
    switch (op) {
      case 0: case 1: {
        int flags = MAP_PRIVATE | MAP_ANONYMOUS;
        if (rng() % 4 == 0) flags = MAP_SHARED | MAP_ANONYMOUS;
        if (rng() % 20 == 0 && !(flags & MAP_SHARED)) flags |= MAP_GROWSDOWN;
        uint64_t hint = rng() % 3 == 0 ? addr : 0;
        ra = a.Mmap(hint, n * P, prot, flags);
        rb = b.Mmap(hint, n * P, prot, flags);
        what = "mmap";
        break;
      }
      case 2: {
        int flags = MAP_PRIVATE | MAP_ANONYMOUS | (rng() % 2 ? MAP_FIXED : MAP_FIXED_NOREPLACE);
        ra = a.Mmap(addr, n * P, prot, flags);
        rb = b.Mmap(addr, n * P, prot, flags);
        what = "mmap fixed";
        break;
      }
      case 3: case 4:
        ra = a.Munmap(addr, n * P);
        rb = b.Munmap(addr, n * P);
        what = "munmap";
        break;
      case 5:
        ra = a.Mprotect(addr, n * P, prot);
        rb = b.Mprotect(addr, n * P, prot);
        what = "mprotect";
        break;
      case 6: {
        AccessType t = static_cast<AccessType>(rng() % 3);
        FaultResult fa = a.Fault(addr, t), fb = b.Fault(addr, t);
        ASSERT_EQ(fa.outcome, fb.outcome) << "step " << i;
        ASSERT_EQ(fa.sig_code, fb.sig_code) << "step " << i;
        break;
      }
    }
    ASSERT_EQ(ra.error, rb.error) << "step " << i << " " << what;
    ASSERT_EQ(ra.value, rb.value) << "step " << i << " " << what;
    if (i % 16 == 0 || i == steps - 1) {
      ASSERT_EQ(Dump(a), Dump(b)) << "step " << i;
      ASSERT_EQ(a.Validate(), "");
      ASSERT_EQ(b.Validate(), "");
    }
  }
  EXPECT_GT(a.Counters().map_count, 10u);
}

}  // namespace
}  // namespace vmspace
