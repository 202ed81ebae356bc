// SPDX-License-Identifier: Apache-2.0
// Concurrency stress: faulting threads race a thread that keeps changing the same
// space (mmap, munmap, mprotect, MAP_FIXED replacement). Run under ThreadSanitizer and
// AddressSanitizer by the test script; here it checks that nothing crashes, that data
// in a region nobody unmaps survives intact, that fault outcomes are always one of the
// legal ones for the racing states, and that the space's invariants hold after each
// writer step.
#include <gtest/gtest.h>

#include "test_util.h"
#include "profiles.h"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "engine/address_space.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;

using testing_util::Iterations;

struct Stress : ::testing::TestWithParam<const char*> {
  SpaceOptions Opts() {
    SpaceOptions o;
    std::string err;
    EXPECT_TRUE(LockingProfile::Parse(GetParam(), &o.profile, &err)) << err;
    return o;
  }
};

TEST_P(Stress, FaultsRaceMmapMunmapMprotect) {
  FrameAllocator frames(1ull << 30);
  auto space = std::make_unique<AddressSpace>(frames, Opts());
  AddressSpace& as = *space;
  const uint64_t stable = as.Mmap(0x300000000000, 64 * P, RW, PA | MAP_FIXED).value;
  const uint64_t churn = 0x310000000000;  // 256 pages the writer keeps changing
  ASSERT_TRUE(as.Mmap(churn, 256 * P, RW, PA | MAP_FIXED).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> faults{0}, signals{0}, reader_iters{0};

  auto reader = [&](int id) {
    std::mt19937_64 rng(id);
    uint64_t mine = stable + static_cast<uint64_t>(id) * 16 * P;  // 16 stable pages each
    uint8_t v = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      // stable region: write a pattern, read it back
      uint64_t off = (rng() % (16 * P - 8));
      uint64_t val = rng();
      ASSERT_TRUE(as.WriteMemory(mine + off, &val, 8).ok());
      uint64_t back = 0;
      ASSERT_TRUE(as.ReadMemory(mine + off, &back, 8).ok());
      ASSERT_EQ(back, val);
      // churn region: any legal outcome
      uint64_t a = churn + (rng() % (256 * P));
      AccessType t = static_cast<AccessType>(rng() % 3);
      FaultResult r = as.Fault(a, t);
      if (r.signal()) {
        signals++;
        ASSERT_EQ(r.outcome, FaultOutcome::kSigsegv);
        ASSERT_TRUE(r.sig_code == kSegvMaperr || r.sig_code == kSegvAccerr);
        ASSERT_EQ(r.sig_addr, a);
      } else {
        ASSERT_NE(r.outcome, FaultOutcome::kOom);
        if (r.outcome != FaultOutcome::kNone) faults++;
      }
      as.ReadMemory(a, &v, 1);
      // MADV_DONTNEED from several threads at once (mmap_lock read), racing faults.
      if (rng() % 8 == 0) {
        uint64_t page = rng() % 256;
        as.Madvise(churn + page * P, (1 + rng() % 8) * P, MADV_DONTNEED);  // may hit holes
      }
      reader_iters++;
    }
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; i++) ts.emplace_back(reader, i);

  // The writer runs in a lambda so a failed ASSERT returns to the join below.
  auto writer = [&] {
    std::mt19937_64 rng(42);
    const int steps = Iterations(3000);
    // Run at least `steps` writer steps and until the readers have raced it for a while
    // (threads may start late on a loaded machine); at most 20 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int i = 0; i < steps || (reader_iters.load() < 3000 &&
                                  std::chrono::steady_clock::now() < deadline); i++) {
      uint64_t page = rng() % 256, n = 1 + rng() % 16;
      if (page + n > 256) n = 256 - page;
      uint64_t a = churn + page * P;
      switch (rng() % 5) {
        case 0: ASSERT_TRUE(as.Munmap(a, n * P).ok()); break;
        case 1: ASSERT_TRUE(as.Mmap(a, n * P, RW, PA | MAP_FIXED).ok()); break;
        case 2: as.Mprotect(a, n * P, static_cast<int>(rng() % 8)); break;  // may hit holes
        case 3: as.Mmap(0, n * P, static_cast<int>(rng() % 8), PA); break;  // elsewhere
        case 4: as.Madvise(a, n * P, MADV_DONTNEED); break;                 // may hit holes
      }
      ASSERT_EQ(as.Validate(), "") << "step " << i;  // the invariants after every step
    }
  };
  writer();
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(as.Validate(), "");
  EXPECT_GT(faults.load() + signals.load(), 0u);
  testing_util::ExpectAllFramesFreed(space, frames);
}

TEST_P(Stress, ConcurrentFaultsOnSamePagesAgree) {
  // Many threads fault the same fresh pages at once: exactly one frame per page,
  // every write lands, and RSS is exact afterwards.
  FrameAllocator frames(1ull << 30);
  auto space = std::make_unique<AddressSpace>(frames, Opts());
  AddressSpace& as = *space;
  const int rounds = Iterations(3000) / 30;
  for (int r = 0; r < rounds; r++) {
    uint64_t base = as.Mmap(0, 32 * P, RW, PA).value;
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++)
      ts.emplace_back([&, t] {
        for (uint64_t p = 0; p < 32; p++) {
          uint8_t b = static_cast<uint8_t>(t + 1);
          ASSERT_TRUE(as.WriteMemory(base + p * P + t, &b, 1).ok());
        }
      });
    for (auto& t : ts) t.join();
    for (uint64_t p = 0; p < 32; p++)
      for (int t = 0; t < 4; t++) {
        uint8_t b = 0;
        ASSERT_TRUE(as.ReadMemory(base + p * P + t, &b, 1).ok());
        ASSERT_EQ(b, t + 1);
      }
    ASSERT_EQ(as.Counters().rss_pages, 32u);
    ASSERT_TRUE(as.Munmap(base, 32 * P).ok());
  }
  EXPECT_EQ(as.Validate(), "");
  testing_util::ExpectAllFramesFreed(space, frames);
}

INSTANTIATE_TEST_SUITE_P(Profiles, Stress,
                         testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
