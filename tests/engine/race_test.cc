// SPDX-License-Identifier: Apache-2.0
// Races the kernel answers deterministically, checked for every interleaving the
// machine produces:
//  * a write that reports success is never lost: thread A repeats {mmap(P, 4 KiB,
//    MAP_FIXED); write 0x5a to P; read P} while thread B keeps reading P. On the kernel
//    (two threads, the same loop) A always reads back 0x5a: B's read may install the
//    zero page between A's fault and A's store, and A's store then takes the zero-page
//    copy-on-write fault. The engine must re-execute the access in the same way.
//  * MADV_DONTNEED (mmap_lock read) racing faults and other DONTNEEDs of the same
//    pages frees exactly the frames it unmaps: after the space is destroyed the frame
//    allocator holds nothing (no leak, no double free), and RSS matches the page tables
//    at every check.
// Iteration counts scale with VMSPACE_STRESS_ITERS (test_util.h).
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "test_util.h"
#include "engine/address_space.h"
#include "profiles.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;

using testing_util::Iterations;

struct Race : ::testing::TestWithParam<const char*> {
  FrameAllocator frames{1ull << 30};
  std::unique_ptr<AddressSpace> as;
  void SetUp() override {
    SpaceOptions o;
    std::string err;
    ASSERT_TRUE(LockingProfile::Parse(GetParam(), &o.profile, &err)) << err;
    as = std::make_unique<AddressSpace>(frames, o);
  }
  void TearDown() override {
    if (!as) return;
    EXPECT_EQ(as->Validate(), "");
    testing_util::ExpectAllFramesFreed(as, frames);
  }
};

// The same loop on this machine's kernel, in this process: the answer the engine must give.
TEST(RaceOnKernel, WriteAfterConcurrentReadIsNeverLost) {
  void* p0 = mmap(nullptr, P, RW, PA, -1, 0);
  ASSERT_NE(p0, MAP_FAILED);
  uint8_t* page = static_cast<uint8_t*>(p0);  // accessed with relaxed atomics (racy by design)
  const int iters = Iterations(30000);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)__atomic_load_n(page, __ATOMIC_RELAXED);
  });
  int lost = 0;
  for (int i = 0; i < iters; i++) {
    ASSERT_EQ(mmap(p0, P, RW, PA | MAP_FIXED, -1, 0), p0);
    __atomic_store_n(page, 0x5a, __ATOMIC_RELAXED);
    if (__atomic_load_n(page, __ATOMIC_RELAXED) != 0x5a) lost++;
  }
  stop = true;
  reader.join();
  munmap(p0, P);
  EXPECT_EQ(lost, 0);
}

TEST_P(Race, WriteAfterConcurrentReadIsNeverLost) {
  const uint64_t page = 0x7f0000000000;
  const int iters = Iterations(30000);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint8_t b;
    while (!stop.load(std::memory_order_relaxed)) as->ReadMemory(page, &b, 1);
  });
  int lost = 0;
  for (int i = 0; i < iters; i++) {
    ASSERT_TRUE(as->Mmap(page, P, RW, PA | MAP_FIXED).ok());
    const uint8_t v = 0x5a;
    CopyResult w = as->WriteMemory(page, &v, 1);
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(w.bytes, 1u);
    uint8_t back = 0;
    ASSERT_TRUE(as->ReadMemory(page, &back, 1).ok());
    if (back != v) lost++;
  }
  stop = true;
  reader.join();
  EXPECT_EQ(lost, 0) << "writes that reported success but read back 0, of " << iters;
}

TEST_P(Race, DontneedRacingFaultsAccountsEveryFrame) {
  // Two threads repeat "write every page of one 2 MiB region, then MADV_DONTNEED it",
  // one more repeats the MADV_DONTNEED (all under mmap_lock read, so they race each
  // other and the faults), and one reads the region (installing zero-page PTEs that the
  // writers' faults replace). The engine before the fix freed the frame named by a PTE
  // read before taking the PTE lock: frames leaked or were freed twice, showing as an
  // OOM, a frame mapped twice, RSS counters off, or frames left in use at the end.
  constexpr uint64_t kPages = 512;
  const uint64_t base = as->Mmap(0, kPages * P, RW, PA).value;
  const int rounds = Iterations(300);
  std::atomic<int> done{0};
  struct CountDone {  // also when an ASSERT leaves the thread early
    std::atomic<int>& n;
    ~CountDone() { n++; }
  };
  constexpr int kWriters = 2;
  std::vector<std::thread> ts;
  for (int t = 0; t < kWriters; t++)
    ts.emplace_back([&] {
      CountDone d{done};
      for (int r = 0; r < rounds; r++) {
        AccessResult a = as->Access(base, kPages * P, P, AccessType::kWrite);
        ASSERT_TRUE(a.ok()) << "fault outcome " << FaultOutcomeName(a.stop.outcome) << " in round " << r;
        ASSERT_TRUE(as->Madvise(base, kPages * P, MADV_DONTNEED).ok());
      }
    });
  for (int t = 0; t < 1; t++)
    ts.emplace_back([&] {
      while (done.load() < kWriters) ASSERT_TRUE(as->Madvise(base, kPages * P, MADV_DONTNEED).ok());
    });
  ts.emplace_back([&] {
    while (done.load() < kWriters) ASSERT_TRUE(as->Access(base, kPages * P, P, AccessType::kRead).ok());
  });
  for (auto& t : ts) t.join();
  EXPECT_EQ(as->Validate(), "");
  // Every page written once more: exactly one frame each, and RSS says so.
  ASSERT_TRUE(as->Access(base, kPages * P, P, AccessType::kWrite).ok());
  EXPECT_EQ(as->Counters().anon_pages, kPages);
  EXPECT_EQ(as->Validate(), "");
}

/// After a round of MADV_FREE / MADV_DONTNEED / guard races: once the deferred frees
/// have run, the frames in use are exactly the space's anonymous pages.
void ExpectExactFrames(FrameAllocator& frames, AddressSpace& as, int round) {
  RcuBarrier();
  ASSERT_EQ(as.Validate(), "") << "round " << round;
  ASSERT_EQ(frames.in_use_frames(), static_cast<int64_t>(as.Counters().anon_pages)) << "round " << round;
}

TEST_P(Race, WritesAfterFreeSurviveReclaim) {
  // Each round: every page written and given MADV_FREE; then two writers store into
  // their halves (each store followed by a read of it) while another thread reclaims
  // lazily freed pages. A store clears the page's clean state before it lands (the
  // dirty bit), so the reclaim either dropped the page before (the store faults a new
  // frame in) or keeps it: a read after a store never sees anything else.
  constexpr uint64_t kPages = 256;
  const uint64_t base = as->Mmap(0, kPages * P, RW, PA).value;
  const int rounds = Iterations(100);
  for (int r = 0; r < rounds; r++) {
    ASSERT_TRUE(as->Access(base, kPages * P, P, AccessType::kWrite).ok());
    ASSERT_EQ(as->Madvise(base, kPages * P, MADV_FREE).error, 0);
    std::atomic<bool> stop{false};
    std::atomic<int> lost{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; t++)
      ts.emplace_back([&, t] {
        for (uint64_t i = t; i < kPages; i += 2) {
          const uint8_t v = static_cast<uint8_t>(0x80 | (i & 0x7f));
          uint8_t got = 0;
          if (!as->WriteMemory(base + i * P + 7, &v, 1).ok() || !as->ReadMemory(base + i * P + 7, &got, 1).ok() ||
              got != v)
            lost++;
        }
      });
    ts.emplace_back([&] {
      while (!stop.load()) as->ReclaimLazyFree();
    });
    ts[0].join();
    ts[1].join();
    stop = true;
    ts[2].join();
    ASSERT_EQ(lost.load(), 0) << "round " << r;
    for (uint64_t i = 0; i < kPages; i++) {  // the stores are still there after one more reclaim
      uint8_t got = 0;
      as->ReclaimLazyFree();
      ASSERT_TRUE(as->ReadMemory(base + i * P + 7, &got, 1).ok());
      ASSERT_EQ(got, static_cast<uint8_t>(0x80 | (i & 0x7f))) << "page " << i << " round " << r;
    }
    ExpectExactFrames(frames, *as, r);
  }
}

TEST_P(Race, FreeDontneedGuardsRacingFaultsAccountEveryFrame) {
  // Writers and a reader fault the first region in while other threads give it
  // MADV_FREE, MADV_DONTNEED and reclaim; another thread installs and removes guard
  // pages on the second region while a reader faults it (SIGSEGV or a page). After
  // each round the frames in use are exactly the anonymous pages mapped.
  constexpr uint64_t kPages = 512;
  const uint64_t base = as->Mmap(0, 2 * kPages * P, RW, PA).value;
  const uint64_t guarded = base + kPages * P;
  const int rounds = Iterations(40);
  for (int r = 0; r < rounds; r++) {
    std::atomic<int> writers{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; t++)
      ts.emplace_back([&] {
        for (int k = 0; k < 3; k++) EXPECT_TRUE(as->Access(base, kPages * P, P, AccessType::kWrite).ok());
        writers++;
      });
    ts.emplace_back([&] {
      while (writers.load() < 2) {
        EXPECT_EQ(as->Madvise(base, kPages * P, MADV_FREE).error, 0);
        as->ReclaimLazyFree();
        EXPECT_EQ(as->Madvise(base + P * 64, P * 128, MADV_DONTNEED).error, 0);
      }
    });
    ts.emplace_back([&] {
      while (writers.load() < 2) {
        EXPECT_EQ(as->Madvise(guarded + 8 * P, 64 * P, MADV_GUARD_INSTALL).error, 0);
        EXPECT_EQ(as->Madvise(guarded, kPages * P, MADV_GUARD_REMOVE).error, 0);
      }
    });
    ts.emplace_back([&] {
      while (writers.load() < 2)
        for (uint64_t i = 0; i < 80; i++) {
          const FaultOutcome o = as->Fault(guarded + i * P, AccessType::kWrite).outcome;
          EXPECT_TRUE(o == FaultOutcome::kNone || o == FaultOutcome::kMinor || o == FaultOutcome::kSigsegv)
              << FaultOutcomeName(o);
        }
    });
    ts.emplace_back([&] {
      while (writers.load() < 2) EXPECT_TRUE(as->Access(base, kPages * P, P, AccessType::kRead).ok());
    });
    for (auto& t : ts) t.join();
    ExpectExactFrames(frames, *as, r);
  }
  // No guard left: every page faults a frame in.
  ASSERT_EQ(as->Madvise(guarded, kPages * P, MADV_GUARD_REMOVE).error, 0);
  ASSERT_TRUE(as->Access(base, 2 * kPages * P, P, AccessType::kWrite).ok());
  EXPECT_EQ(as->Counters().anon_pages, 2 * kPages);
  ExpectExactFrames(frames, *as, rounds);
}

INSTANTIATE_TEST_SUITE_P(Profiles, Race,
                         ::testing::Values("linux-6.0", "linux-6.1", "linux-6.4", "linux-6.6", "linux-6.7", "linux-6.15",
                                           "linux-6.6,vma_lock=off"),
                         testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
