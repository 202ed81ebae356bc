// SPDX-License-Identifier: Apache-2.0
// The memory budget: one limit over frames, page tables, VMAs, index
// nodes, page cache and buffers, each kind charged where it is allocated and
// uncharged where it is freed, so that after every space is destroyed and rcu_barrier
// every kind reads exactly 0, also after a concurrent stress.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/memory_budget.h"
#include "engine/profile.h"
#include "mm.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;

int64_t Use(FrameAllocator& f, MemKind k) { return f.budget().usage(k); }

void ExpectEveryKindZero(FrameAllocator& f) {
  RcuBarrier();
  for (int k = 0; k < kMemKinds; k++)
    EXPECT_EQ(f.budget().usage(static_cast<MemKind>(k)), 0) << MemKindName(static_cast<MemKind>(k));
}

TEST(MemoryBudget, ChargesUpToTheLimitExactlyThenRefuses) {
  MemoryBudget b(1 << 20);
  int n = 0;
  while (b.TryCharge(MemKind::kBuffers, 4096)) n++;
  EXPECT_EQ(n, 256);  // stocks drained before the refusal: not one page early
  EXPECT_EQ(b.usage(), 1u << 20);
  EXPECT_EQ(b.failcnt(), 1u);
  EXPECT_FALSE(b.HasRoom(1));
  EXPECT_EQ(b.failcnt(), 2u);
  for (int i = 0; i < n; i++) b.Uncharge(MemKind::kBuffers, 4096);
  EXPECT_EQ(b.usage(MemKind::kBuffers), 0);
  EXPECT_TRUE(b.HasRoom(1 << 20));
  EXPECT_FALSE(b.HasRoom((1 << 20) + 1));
}

TEST(MemoryBudget, LimitHoldsAcrossThreadsAndStocksComeBack) {
  MemoryBudget b(8 << 20);
  std::atomic<int> got{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; t++)
    ts.emplace_back([&] {
      int mine = 0;
      while (b.TryCharge(MemKind::kFrames, 4096)) mine++;
      got += mine;
    });
  for (auto& t : ts) t.join();
  // Every thread stopped only after a drain found no room: all 2048 pages charged.
  EXPECT_EQ(got.load(), 2048);
  EXPECT_EQ(b.usage(MemKind::kFrames), 8 << 20);
  ts.clear();
  for (int t = 0; t < 8; t++)
    ts.emplace_back([&] {
      for (int i = 0; i < 256; i++) b.Uncharge(MemKind::kFrames, 4096);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(b.usage(), 0u);
  EXPECT_TRUE(b.HasRoom(8 << 20));  // the stocks given back count as room
}

TEST(MemoryBudget, ChargeMayPassTheLimitAndScopedChargeFollowsItsSize) {
  MemoryBudget b(8192);
  b.Charge(MemKind::kVmas, 12288);  // __GFP_NOFAIL
  EXPECT_EQ(b.usage(), 12288u);
  EXPECT_FALSE(b.TryCharge(MemKind::kVmas, 1));
  b.Uncharge(MemKind::kVmas, 12288);
  {
    ScopedCharge c(&b, MemKind::kBuffers);
    EXPECT_TRUE(c.Resize(8000));
    EXPECT_FALSE(c.Resize(8193));
    EXPECT_EQ(c.bytes(), 8000u);
    EXPECT_TRUE(c.Resize(100));
    EXPECT_EQ(b.usage(MemKind::kBuffers), 100);
  }
  EXPECT_EQ(b.usage(), 0u);
  EXPECT_STREQ(MemKindName(MemKind::kIndexNodes), "index_nodes");
}

class Budget : public ::testing::TestWithParam<const char*> {
 protected:
  SpaceOptions Opts() {
    SpaceOptions o;
    std::string err;
    EXPECT_TRUE(LockingProfile::Parse(GetParam(), &o.profile, &err)) << err;
    return o;
  }
};

TEST_P(Budget, EachKindIsChargedWhileItLivesAndZeroAfter) {
  FrameAllocator frames(0, 0);
  auto as = std::make_unique<AddressSpace>(frames, Opts());
  // frames: 10 written pages, exactly.
  const uint64_t a = as->Mmap(0, 10 * P, RW, PA).value;
  ASSERT_TRUE(as->Access(a, 10 * P, P, AccessType::kWrite).ok());
  EXPECT_EQ(Use(frames, MemKind::kFrames), static_cast<int64_t>(10 * P));
  // page tables: the budget's kind is exactly the allocator's table count.
  const uint64_t big = as->Mmap(0, 64ull << 20, RW, PA | MAP_NORESERVE).value;
  ASSERT_TRUE(as->Access(big, 64ull << 20, 2ull << 20, AccessType::kRead).ok());
  EXPECT_EQ(Use(frames, MemKind::kPageTables), static_cast<int64_t>(frames.table_bytes()));
  EXPECT_GE(Use(frames, MemKind::kPageTables), static_cast<int64_t>(32 * P));
  // VMAs: three split off by an mprotect in the middle; each one is sizeof(Vma) or more.
  const int64_t vmas = Use(frames, MemKind::kVmas);
  EXPECT_GE(vmas, static_cast<int64_t>(2 * sizeof(Vma)));
  ASSERT_TRUE(as->Mprotect(a + 4 * P, P, PROT_READ).ok());
  EXPECT_GE(Use(frames, MemKind::kVmas), vmas + static_cast<int64_t>(2 * sizeof(Vma)));
  EXPECT_GT(Use(frames, MemKind::kIndexNodes), 0);
  // page cache: a shared anonymous mapping's pages are shmem page cache, not frames.
  const int64_t before = Use(frames, MemKind::kFrames);
  const uint64_t sh = as->Mmap(0, 3 * P, RW, MAP_SHARED | MAP_ANONYMOUS).value;
  ASSERT_TRUE(as->Access(sh, 3 * P, P, AccessType::kWrite).ok());
  EXPECT_EQ(Use(frames, MemKind::kPageCache), static_cast<int64_t>(3 * P));
  EXPECT_EQ(Use(frames, MemKind::kFrames), before);
  EXPECT_EQ(Use(frames, MemKind::kBuffers), 0);
  as.reset();
  ExpectEveryKindZero(frames);
}

TEST_P(Budget, FaultBeyondTheBudgetIsOomAndMmapBeyondItEnomem) {
  FrameAllocator frames(0, 1 << 20);
  auto as = std::make_unique<AddressSpace>(frames, Opts());
  const uint64_t a = as->Mmap(0, 2 << 20, RW, PA).value;
  AccessResult r = as->Access(a, 2 << 20, P, AccessType::kWrite);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.stop.outcome, FaultOutcome::kOom);
  EXPECT_NE(r.stop.vm_fault & VM_FAULT_OOM, 0u);
  EXPECT_LE(frames.budget().usage(), 1u << 20);
  EXPECT_GT(r.accesses, 100u);  // most of the megabyte was usable
  // VMAs: alternate protections until the budget refuses one more; ENOMEM, and the
  // budget is passed by at most one change's worth.
  ASSERT_TRUE(as->Munmap(a, 2 << 20).ok());
  int err = 0;
  for (int i = 0; i < 100000 && !err; i++) {
    SysResult m = as->Mmap(0, P, (i & 1) ? PROT_READ : RW, PA);
    if (!m.ok()) err = m.error;
  }
  EXPECT_EQ(err, ENOMEM);
  EXPECT_LE(frames.budget().usage(), (1u << 20) + MmStruct::kVmaChangeBytes);
  EXPECT_GT(Use(frames, MemKind::kVmas), 1 << 19);
  as.reset();
  ExpectEveryKindZero(frames);
}

TEST_P(Budget, VmasFreedAfterAGracePeriodAreReclaimedBeforeEnomem) {
  // Make many VMAs, unmap them all, make them again: the second round finds the first
  // round's VMAs and nodes (freed by call_rcu in RCU profiles) waited for, not ENOMEM.
  FrameAllocator frames(0, 4 << 20);
  auto as = std::make_unique<AddressSpace>(frames, Opts());
  int made = 0;
  for (;; made++) {
    SysResult m = as->Mmap(0, P, (made & 1) ? PROT_READ : RW, PA);
    if (!m.ok()) {
      ASSERT_EQ(m.error, ENOMEM);
      break;
    }
  }
  ASSERT_GT(made, 1000);
  for (int round = 0; round < 4; round++) {
    ASSERT_TRUE(as->Munmap(0, kTaskSize).ok());
    const int want = made * 9 / 10;
    for (int i = 0; i < want; i++)
      ASSERT_TRUE(as->Mmap(0, P, (i & 1) ? PROT_READ : RW, PA).ok()) << "round " << round << " vma " << i;
  }
  // The same VMAs made by mprotect splits of one mapping (split_vma under the budget).
  for (int round = 0; round < 2; round++) {
    ASSERT_TRUE(as->Munmap(0, kTaskSize).ok());
    const int want = made * 9 / 10;
    const uint64_t a = as->Mmap(0, static_cast<uint64_t>(want) * P, RW, PA).value;
    ASSERT_NE(a, 0u);
    for (int i = 1; i < want; i += 2)
      ASSERT_TRUE(as->Mprotect(a + static_cast<uint64_t>(i) * P, P, PROT_READ).ok()) << "round " << round << " page " << i;
  }
  // Beyond the budget the split is ENOMEM.
  const uint64_t b = as->Mmap(0, static_cast<uint64_t>(made) * 4 * P, RW, PA | MAP_NORESERVE).value;
  int err = 0;
  for (int i = 1; i < made * 4 && !err; i += 2) err = as->Mprotect(b + static_cast<uint64_t>(i) * P, P, PROT_READ).error;
  EXPECT_EQ(err, ENOMEM);
  as.reset();
  ExpectEveryKindZero(frames);
}

TEST_P(Budget, ExactAccountingAfterAConcurrentStress) {
  FrameAllocator frames(0, 64 << 20);
  std::vector<std::unique_ptr<AddressSpace>> spaces;
  for (int i = 0; i < 4; i++) spaces.push_back(std::make_unique<AddressSpace>(frames, Opts()));
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; t++)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      AddressSpace& as = *spaces[t % spaces.size()];  // two threads per space
      const uint64_t base = 0x100000000ull + static_cast<uint64_t>(t) * (64ull << 20);
      for (int i = 0; i < 3000; i++) {
        const uint64_t off = (rng() % 8192) * P, len = (1 + rng() % 64) * P;
        const uint64_t at = base + off % (32ull << 20);
        switch (rng() % 6) {
          case 0: as.Mmap(at, len, RW, PA | MAP_FIXED); break;
          case 1: as.Mmap(at, len, RW, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED); break;
          case 2: as.Munmap(at, len); break;
          case 3: as.Mprotect(at, len, (rng() & 1) ? PROT_READ : RW); break;
          case 4: as.Madvise(at, len, MADV_DONTNEED); break;
          case 5: as.Access(at, len, P, AccessType::kWrite); break;
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_GT(Use(frames, MemKind::kVmas), 0);
  for (auto& s : spaces) EXPECT_EQ(s->Validate(), "");
  spaces.clear();
  ExpectEveryKindZero(frames);
  EXPECT_EQ(frames.in_use_frames(), 0);
}

INSTANTIATE_TEST_SUITE_P(Profiles, Budget, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
