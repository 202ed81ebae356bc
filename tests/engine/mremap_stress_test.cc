// SPDX-License-Identifier: Apache-2.0
// mremap moves racing faults, accesses and MADV_DONTNEED. One thread moves a 64-page
// region back and forth between two places with mremap(MAYMOVE|FIXED); others write
// and read every page of both places (a page holds a value naming it: its index plus a
// tag, in its first 8 bytes) and zap both with MADV_DONTNEED. A move moves the PTEs
// under both PTE locks with the source VMA write-locked, so every access sees the old
// or the new mapping of the same frame: a read gets SIGSEGV (that place is unmapped
// now), 0 (a zapped page) or the value naming that page, never another page's value.
// After every round: Validate() is clean and, with every deferred free done, the
// frames in use are exactly the anonymous pages mapped (none lost, none twice).
// Iteration counts scale with VMSPACE_STRESS_ITERS (test_util.h).
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr uint64_t kPages = 64;
constexpr uint64_t kLen = kPages * P;
constexpr uint64_t kMaymove = 1, kFixed = 2;
// Two places 4 MiB apart (different page tables), not 2 MiB aligned.
constexpr uint64_t kA = 0x200000000000 + 0x3000, kB = kA + (4ull << 20);
constexpr uint64_t kTag = 0x5a5a000000000000ull;

using testing_util::Iterations;

struct MremapStress : ::testing::TestWithParam<const char*> {};

TEST_P(MremapStress, MovesRacingAccessesLoseNoFrameAndTearNoPage) {
  FrameAllocator frames{1ull << 28};
  auto as = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  ASSERT_EQ(as->Mmap(kA, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).value, kA);
  const int rounds = Iterations(30);
  const int moves = 300;
  uint64_t moved_total = 0;
  std::atomic<uint64_t> torn{0}, bad_outcome{0};
  for (int round = 0; round < rounds; round++) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> ts;
    for (int w = 0; w < 2; w++)
      ts.emplace_back([&, w] {  // writers: each page gets its own name, at either place
        std::mt19937_64 rng(round * 7 + w);
        while (!stop.load(std::memory_order_relaxed)) {
          const uint64_t i = rng() % kPages;
          const uint64_t v = kTag | i;
          const uint64_t at = (rng() & 1 ? kA : kB) + i * P;
          CopyResult c = as->WriteMemory(at, &v, sizeof v);
          if (!c.ok() && c.stop.outcome != FaultOutcome::kSigsegv) bad_outcome++;
        }
      });
    ts.emplace_back([&] {  // reader
      std::mt19937_64 rng(round * 11);
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t i = rng() % kPages;
        uint64_t v = 0;
        CopyResult c = as->ReadMemory((rng() & 1 ? kA : kB) + i * P, &v, sizeof v);
        if (!c.ok()) {
          if (c.stop.outcome != FaultOutcome::kSigsegv) bad_outcome++;
          continue;
        }
        if (v != 0 && v != (kTag | i)) torn++;
      }
    });
    ts.emplace_back([&] {  // MADV_DONTNEED of both places (ENOMEM where one is unmapped)
      while (!stop.load(std::memory_order_relaxed)) {
        as->Madvise(kA, kLen, MADV_DONTNEED);
        as->Madvise(kB, kLen, MADV_DONTNEED);
      }
    });
    // The mover: back and forth.
    for (int m = 0; m < moves; m++) {
      const bool at_a = (moved_total % 2) == 0;
      SysResult r = as->Mremap(at_a ? kA : kB, kLen, kLen, kMaymove | kFixed, at_a ? kB : kA);
      ASSERT_TRUE(r.ok()) << "errno " << r.error << " in round " << round;
      ASSERT_EQ(r.value, at_a ? kB : kA);
      moved_total++;
    }
    stop = true;
    for (auto& t : ts) t.join();
    ASSERT_EQ(as->Validate(), "") << "round " << round;
    auto maps = as->Maps();
    ASSERT_EQ(maps.size(), 1u);
    EXPECT_EQ(maps[0].start, moved_total % 2 ? kB : kA);
    frames.Reclaim();  // every deferred free done
    EXPECT_EQ(static_cast<uint64_t>(frames.in_use_frames()), as->Counters().anon_pages)
        << "frames lost (>) or freed twice (<) in round " << round;
    EXPECT_EQ(as->Counters().anon_pages, maps[0].rss_pages) << "round " << round;
    // Every surviving page still names itself.
    const uint64_t at = maps[0].start;
    for (uint64_t i = 0; i < kPages; i++) {
      uint64_t v = 0;
      ASSERT_TRUE(as->ReadMemory(at + i * P, &v, sizeof v).ok());
      if (v != 0 && v != (kTag | i)) torn++;
    }
  }
  EXPECT_EQ(torn.load(), 0u) << "values of another page seen";
  EXPECT_EQ(bad_outcome.load(), 0u) << "accesses that ended in something else than SIGSEGV";
  testing_util::ExpectAllFramesFreed(as, frames);
}

INSTANTIATE_TEST_SUITE_P(Profiles, MremapStress, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
