// VmaIndex against an independent model: each index kind ("rbtree", "maple") runs a
// seeded random sequence of Insert/Erase/Update with write sections (Commit), and
// every query (FindVma, NextFrom, PrevOf, HighestGapEnd, ForEach order, LookupRcu of
// the last committed tree) is compared with a std::map of ranges. A second test runs
// LookupRcu in reader threads while a writer replaces, moves and erases ranges
// around a stable set of probe addresses, freeing retired nodes after grace periods
// as the engine does.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <thread>
#include <vector>

#include "sync/rcu.h"
#include "vma_index.h"

namespace vmspace {

// gtest prints parameters with it ("rbtree" instead of a byte dump).
static void PrintTo(VmaIndexKind k, std::ostream* os) { *os << VmaIndexKindName(k); }

namespace {

constexpr uint64_t P = 4096;

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

class VmaIndexModel : public ::testing::TestWithParam<VmaIndexKind> {};

// Insert/Erase/Update chosen at random in a universe of kPages pages, in three
// phases (grow to ~1500 ranges: a tree of three levels; churn; shrink to empty: node
// merges and root collapse), every answer compared with the model.
TEST_P(VmaIndexModel, MatchesModelOnRandomOps) {
  const VmaIndexKind kind = GetParam();
  std::unique_ptr<VmaIndex> idx = VmaIndex::Create(kind);
  const bool rcu = kind == VmaIndexKind::kMaple;
  std::mt19937_64 rng(EnvOr("VMSPACE_INDEX_SEED", 7));
  auto R = [&](uint64_t n) { return rng() % n; };
  constexpr uint64_t kPages = 1 << 15;
  const uint64_t base = 0x7f0000000000;  // high keys: ranges near the top of user space
  const int steps = static_cast<int>(EnvOr("VMSPACE_INDEX_STEPS", 12000));

  Model m, committed;  // committed: what LookupRcu readers must see
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
      ASSERT_EQ(idx->LookupRcu(a), rcu ? ModelContaining(committed, a) : nullptr)
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
        idx->Erase(v, v->vm_start, v->vm_end);
        m.erase(it);
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
      committed = m;
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
  VmaIndex::DeleteRetired(retired);  // no readers here
}

INSTANTIATE_TEST_SUITE_P(VmaIndex, VmaIndexModel,
                         ::testing::Values(VmaIndexKind::kRbtree, VmaIndexKind::kMaple),
                         [](const ::testing::TestParamInfo<VmaIndexKind>& i) {
                           return std::string(VmaIndexKindName(i.param));
                         });

// LookupRcu from reader threads during writes (maple). Each probe slot i has a probe
// address inside a 16-page area; the writer keeps exactly one range of the slot's own
// over the probe at every commit, replacing it (Erase + Insert of a new VMA) or moving
// its edges (Update) in write sections that also insert and erase unrelated ranges
// between the slots (node splits and merges). A reader must find the slot's VMA
// (never null, never another slot's) whose generation lies between the last one
// committed before its lookup and the last one published after it.
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
      SynchronizeRcu();  // as the engine's call_rcu batches: no reader holds them now
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

}  // namespace
}  // namespace vmspace
