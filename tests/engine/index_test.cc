// The VMA indexes against independent models:
//  * MapleTree against a std::map of ranges (gaps included), in RCU and no-RCU mode,
//    with the tree's invariants (mt_validate: pivots, limits, gaps, parents, NULL
//    placement, node fill) checked after every store, and every store type reached;
//  * one test per store type: the type the kernel's rules pick, what it costs in
//    nodes, and the result;
//  * LookupRcu readers racing a writer: entries that never change must be found at
//    every step of every kind of store;
//  * both VmaIndex kinds against a std::map of VMAs (find/next/prev/gap queries);
//  * whole address spaces with each index giving identical answers.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

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
    t.Store(first, last, e);
    m.Store(first, last, e);
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
    t.Store(base + 10 * k, base + 10 * k + 4, E(k + 1));
    m.Store(base + 10 * k, base + 10 * k + 4, E(k + 1));
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

TEST(MapleStore, ExactFitRewritesTheSlotInPlace) {
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 5);
  const uint64_t nodes = t.nodes();
  Delta d(t);
  t.Store(1020, 1024, E(99));  // exactly entry 3's range
  EXPECT_ONE_STORE(d, T::kExactFit);
  EXPECT_EQ(d.prealloc(), 0u);
  EXPECT_EQ(d.retired_nodes(), 0u);
  EXPECT_EQ(t.nodes(), nodes);
  EXPECT_EQ(t.Load(1022), E(99));
  EXPECT_EQ(t.Validate(), "");
}

TEST(MapleStore, MovingAVmaEndWithinItsGapIsASlotStore) {
  // vma_expand of [1020, 1024] to [1020, 1027]: the entry keeps its slot, one pivot
  // moves into the following gap, no new boundary (wr_slot_store).
  for (bool rcu : {true, false}) {
    MapleTree t(rcu);
    RangeModel m;
    Fill(t, m, 5);
    Delta d(t);
    t.Store(1020, 1027, E(3));
    m.Store(1020, 1027, E(3));
    EXPECT_ONE_STORE(d, T::kSlotStore);
    EXPECT_EQ(d.prealloc(), 0u);
    EXPECT_EQ(d.retired_nodes(), 0u);
    EXPECT_EQ(Dump(t), m.Dump());
    // The start moving down into the gap below: the other slot-store case.
    Delta d2(t);
    t.Store(1017, 1027, E(3));
    m.Store(1017, 1027, E(3));
    EXPECT_ONE_STORE(d2, T::kSlotStore);
    // Shrinking the end back: a NULL over the tail joins the gap after it.
    Delta d3(t);
    t.Store(1025, 1027, nullptr);
    m.Store(1025, 1027, nullptr);
    EXPECT_ONE_STORE(d3, T::kSlotStore);
    EXPECT_EQ(Dump(t), m.Dump());
    EXPECT_EQ(t.Validate(), "");
  }
}

TEST(MapleStore, NewBoundariesReplaceOneNode) {
  // A range in the middle of a gap adds two boundaries: the leaf is rebuilt; with RCU
  // a new leaf replaces it (one node preallocated, used, and one retired).
  for (bool rcu : {true, false}) {
    MapleTree t(rcu);
    RangeModel m;
    Fill(t, m, 4);
    Delta d(t);
    t.Store(1006, 1007, E(50));
    m.Store(1006, 1007, E(50));
    EXPECT_ONE_STORE(d, T::kNodeStore);
    EXPECT_EQ(d.prealloc(), rcu ? 1u : 0u);
    EXPECT_EQ(d.used(), rcu ? 1u : 0u);
    EXPECT_EQ(d.retired_nodes(), rcu ? 1u : 0u);
    EXPECT_EQ(Dump(t), m.Dump());
    EXPECT_EQ(t.Validate(), "");
  }
}

TEST(MapleStore, AppendAfterTheLastSlotWithoutRcu) {
  MapleTree t(false);
  RangeModel m;
  Fill(t, m, 3);
  // The last slot is the gap up to ULONG_MAX: a range inside it adds two boundaries
  // at the node's end, written in place.
  Delta d(t);
  t.Store(2000, 2009, E(7));
  m.Store(2000, 2009, E(7));
  EXPECT_ONE_STORE(d, T::kAppend);
  EXPECT_EQ(d.prealloc(), 0u);
  EXPECT_EQ(Dump(t), m.Dump());
  EXPECT_EQ(t.Validate(), "");
  // In RCU mode the same store replaces the node (readers may cache the node's end).
  MapleTree r(true);
  RangeModel rm;
  Fill(r, rm, 3);
  Delta dr(r);
  r.Store(2000, 2009, E(7));
  EXPECT_ONE_STORE(dr, T::kNodeStore);
}

TEST(MapleStore, FullLeafSplitsAndTheTreeGrows) {
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 7);  // 7 entries + 7 gaps + the leading gap = 15 slots
  ASSERT_EQ(t.height(), 1);
  Delta d(t);
  t.Store(1006, 1007, E(50));  // needs 17 slots
  m.Store(1006, 1007, E(50));
  EXPECT_ONE_STORE(d, T::kSplitStore);
  EXPECT_EQ(d.prealloc(), 3u);  // height 1: 2 * 1 + 1
  EXPECT_EQ(d.used(), 3u);      // two leaves and a new root
  EXPECT_EQ(d.retired_nodes(), 1u);
  EXPECT_EQ(t.height(), 2);
  EXPECT_EQ(Dump(t), m.Dump());
  EXPECT_EQ(t.Validate(), "");
}

TEST(MapleStore, SplitPushesIntoASiblingWithRoom) {
  // Two leaves, the right one full: inserting into it pushes entries into the left
  // one (mas_push_data) instead of adding a third leaf.
  MapleTree t(true);
  RangeModel m;
  Fill(t, m, 8);
  ASSERT_EQ(t.height(), 2);
  for (int k = 8; k < 40 && t.nodes() == 3; k++) {
    uint64_t f = 1000 + 10 * k;
    t.Store(f, f + 4, E(k + 1));
    m.Store(f, f + 4, E(k + 1));
    if (t.nodes() > 3) break;
  }
  const uint64_t nodes = t.nodes();
  Delta d(t);
  t.Store(1012, 1013, E(70));  // into the leftmost leaf
  m.Store(1012, 1013, E(70));
  EXPECT_EQ(d.stores(T::kSplitStore) + d.stores(T::kNodeStore), 1u);
  EXPECT_EQ(Dump(t), m.Dump());
  EXPECT_EQ(t.Validate(), "");
  EXPECT_LE(t.nodes(), nodes + 1);
}

TEST(MapleStore, StoreAcrossLeavesIsASpanningStore) {
  for (bool rcu : {true, false}) {
    MapleTree t(rcu);
    RangeModel m;
    Fill(t, m, 60);  // several leaves, height 3
    ASSERT_GE(t.height(), 2);
    const int h = t.height();
    Delta d(t);
    t.Store(1105, 1403, E(500));  // over ~30 entries: several leaves
    m.Store(1105, 1403, E(500));
    EXPECT_ONE_STORE(d, T::kSpanningStore);
    EXPECT_EQ(d.prealloc(), static_cast<uint64_t>(h * 3 + 1));
    EXPECT_LE(d.used(), d.prealloc());
    EXPECT_EQ(Dump(t), m.Dump());
    EXPECT_EQ(t.Validate(), "");
    // Clearing exactly that entry again (its neighbours are entries): an exact fit.
    Delta d2(t);
    t.Store(1105, 1403, nullptr);
    m.Store(1105, 1403, nullptr);
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
    t.Store(1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
    m.Store(1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
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
      t.Store(1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
      m.Store(1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
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
    t.Store(1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
    m.Store(1000 + 10 * k, 1000 + 10 * k + 4, nullptr);
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

/// The VMA model: start -> VMA.
struct VmaModel {
  std::map<uint64_t, Vma*> m;
  Vma* FindVma(uint64_t a) const {
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it->second->vm_end > a) return it->second;
    return nullptr;
  }
  Vma* NextFrom(uint64_t a) const {
    auto it = m.lower_bound(a);
    return it == m.end() ? nullptr : it->second;
  }
  Vma* PrevOf(uint64_t a) const {
    auto it = m.lower_bound(a);
    return it == m.begin() ? nullptr : std::prev(it)->second;
  }
  uint64_t HighestGapEnd(uint64_t len, uint64_t low, uint64_t high) const {
    uint64_t best = kMax, start = 0;
    auto consider = [&](uint64_t gs, uint64_t ge) {
      gs = std::max(gs, low);
      ge = std::min(ge, high);
      if (ge > gs && ge - gs >= len) best = ge;
    };
    for (auto& [s, v] : m) {
      consider(start, s);
      start = v->vm_end;
    }
    consider(start, kMax);
    return best;
  }
  bool Free(uint64_t s, uint64_t e) const {
    auto it = m.lower_bound(s);
    if (it != m.end() && it->first < e) return false;
    return it == m.begin() || std::prev(it)->second->vm_end <= s;
  }
};

class VmaIndexRandom : public ::testing::TestWithParam<int> {};

TEST_P(VmaIndexRandom, MatchesModel) {
  // 0: rbtree, 1: maple (RCU), 2: maple without RCU.
  std::unique_ptr<VmaIndex> idx = GetParam() == 0 ? VmaIndex::Create(VmaIndexKind::kRbtree)
                                                  : VmaIndex::CreateMaple(GetParam() == 1);
  VmaModel model;
  std::vector<std::unique_ptr<Vma>> all;
  std::mt19937_64 rng(11 + GetParam());
  const uint64_t base = 1ull << 32;
  std::vector<void*> retired;
  for (int i = 0; i < 20000; i++) {
    const uint64_t s = base + (rng() % 2000) * P, len = (1 + rng() % 12) * P;
    const int op = static_cast<int>(rng() % 8);
    if (op <= 4 && model.Free(s, s + len)) {  // insert
      all.push_back(std::make_unique<Vma>());
      Vma* v = all.back().get();
      v->vm_start = s;
      v->vm_end = s + len;
      idx->Insert(v);
      model.m[s] = v;
    } else if (op == 5 && !model.m.empty()) {  // erase one, or a run of neighbours (munmap)
      auto it = model.m.lower_bound(s);
      if (it == model.m.end()) it = model.m.begin();
      for (int n = 1 + static_cast<int>(rng() % 3); n && it != model.m.end(); n--) {
        idx->Erase(it->second, it->second->vm_start, it->second->vm_end);
        it = model.m.erase(it);
      }
    } else if (op >= 6 && !model.m.empty()) {  // change a range: grow into free space, shrink, or split
      auto it = model.m.lower_bound(s);
      if (it == model.m.end()) it = model.m.begin();
      Vma* v = it->second;
      const uint64_t os = v->vm_start, oe = v->vm_end;
      uint64_t ns = os, ne = oe;
      switch (rng() % 4) {
        case 0: ne = oe + (1 + rng() % 4) * P; break;
        case 1: ns = os - (1 + rng() % 4) * P; break;
        case 2:
          if (oe - os > P) ne = oe - P * (1 + rng() % ((oe - os) / P - 1));
          break;
        case 3:  // split: shrink, then insert the other part (as __split_vma)
          if (oe - os >= 2 * P) {
            const uint64_t at = os + P * (1 + rng() % ((oe - os) / P - 1));
            const bool below = rng() % 2;
            all.push_back(std::make_unique<Vma>());
            Vma* n = all.back().get();
            model.m.erase(os);
            if (below) {
              v->vm_start = at;
              n->vm_start = os;
              n->vm_end = at;
            } else {
              v->vm_end = at;
              n->vm_start = at;
              n->vm_end = oe;
            }
            idx->Update(v, os, oe);
            idx->Insert(n);
            model.m[v->vm_start] = v;
            model.m[n->vm_start] = n;
          }
          ns = ne = 0;
          break;
      }
      if (ns || ne) {
        model.m.erase(os);
        const bool ok = ns < ne && (ns >= os || model.Free(ns, os)) && (ne <= oe || model.Free(oe, ne));
        if (ok) {
          v->vm_start = ns;
          v->vm_end = ne;
          idx->Update(v, os, oe);
        }
        model.m[v->vm_start] = v;
      }
    }
    if (rng() % 3 == 0) {  // end of a write section
      idx->Commit();
      idx->TakeRetired(retired);
      ASSERT_EQ(idx->Check(), "") << "step " << i;
    }
    const uint64_t a = base + (rng() % 2100) * P;
    ASSERT_EQ(idx->FindVma(a), model.FindVma(a)) << "step " << i;
    ASSERT_EQ(idx->NextFrom(a), model.NextFrom(a)) << "step " << i;
    ASSERT_EQ(idx->PrevOf(a), model.PrevOf(a)) << "step " << i;
    const uint64_t glen = (1 + rng() % 16) * P, lo = base + (rng() % 1000) * P, hi = lo + (rng() % 1500) * P;
    ASSERT_EQ(idx->HighestGapEnd(glen, lo, hi), model.HighestGapEnd(glen, lo, hi)) << "step " << i;
    if (GetParam() == 1 && rng() % 8 == 0) {
      idx->Commit();
      RcuReadGuard g;
      Vma* holder = model.FindVma(a);
      ASSERT_EQ(idx->LookupRcu(a), holder && holder->vm_start <= a ? holder : nullptr) << "step " << i;
    }
  }
  std::vector<Vma*> order;
  idx->ForEach([&](Vma* v) { order.push_back(v); });
  std::vector<Vma*> expect;
  for (auto& [s, v] : model.m) expect.push_back(v);
  EXPECT_EQ(order, expect);
  EXPECT_GT(model.m.size(), 100u);
  EXPECT_EQ(idx->Check(), "");
  if (GetParam() != 0) {
    EXPECT_EQ(idx->Stats().maple.prealloc_short, 0u);
  }
  idx->TakeRetired(retired);
  VmaIndex::DeleteRetired(retired);
}

INSTANTIATE_TEST_SUITE_P(Kinds, VmaIndexRandom, ::testing::Values(0, 1, 2), [](const ::testing::TestParamInfo<int>& i) {
  return std::string(i.param == 0 ? "rbtree" : i.param == 1 ? "maple" : "maple_norcu");
});

TEST(VmaIndexMaple, SplitAndMunmapIssueTheKernelsStores) {
  std::unique_ptr<VmaIndex> idx = VmaIndex::Create(VmaIndexKind::kMaple);
  std::vector<std::unique_ptr<Vma>> vmas;
  auto make = [&](uint64_t s, uint64_t e) {
    vmas.push_back(std::make_unique<Vma>());
    vmas.back()->vm_start = s;
    vmas.back()->vm_end = e;
    return vmas.back().get();
  };
  for (uint64_t k = 0; k < 8; k++) idx->Insert(make((100 + 20 * k) * P, (110 + 20 * k) * P));
  idx->Commit();
  auto stores = [&] { return idx->Stats().maple.stores_total(); };
  auto of = [&](T type) { return idx->Stats().maple.stores[static_cast<int>(type)]; };
  // __split_vma(): the VMA shrinks, the new VMA is stored over the part it lost: one
  // store (a node store: one new boundary), not a clear and a store.
  Vma* v = vmas[2].get();
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
  for (int k : {1, 2, 8, 3}) idx->Erase(vmas[k].get(), vmas[k]->vm_start, vmas[k]->vm_end);
  idx->Commit();
  EXPECT_EQ(stores() - s0, 1u);
  EXPECT_EQ(idx->FindVma(vmas[1]->vm_start), vmas[4].get());
  EXPECT_EQ(idx->Check(), "");
  // vma_expand(): the end moves into the gap above: a slot store, in place.
  s0 = stores();
  const uint64_t slot_stores = of(T::kSlotStore);
  const uint64_t e0 = vmas[0]->vm_end;
  vmas[0]->vm_end = e0 + 2 * P;
  idx->Update(vmas[0].get(), vmas[0]->vm_start, e0);
  idx->Commit();
  EXPECT_EQ(stores() - s0, 1u);
  EXPECT_EQ(of(T::kSlotStore) - slot_stores, 1u);
  std::vector<void*> retired;
  idx->TakeRetired(retired);
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
