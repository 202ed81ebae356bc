// SPDX-License-Identifier: Apache-2.0
// fork under load, per profile: threads of a parent write and MADV_DONTNEED its pages
// while it forks again and again; each child is handed to a pool of threads that write
// and read it back, check it and destroy it while later forks run. Every round
// Validate()s the parent and the new child; every eighth round the faulters pause, the
// children drain, and the frames in use (allocated - freed, after the deferred frees)
// must equal the parent's resident anonymous pages exactly. Its own executable, so a
// sanitizer build (deploy/test.sh's flags) can build and run just this test.
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;
constexpr uint64_t P = kPageSize;
constexpr uint64_t kPages = 64;
constexpr int kVmas = 3;
constexpr int kFaulters = 4;
constexpr int kChildThreads = 2;

uint64_t RandomPage(std::mt19937& rng) { return kBase + (rng() % kVmas) * 2 * kPages * P + (rng() % kPages) * P; }

class ForkStressTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ForkStressTest, ForksBesideFaultersAndConcurrentChildren) {
  const int rounds = testing_util::Iterations(3000) / 50 + 8;
  FrameAllocator frames;
  auto parent = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  for (int v = 0; v < kVmas; v++)
    ASSERT_TRUE(parent->Mmap(kBase + v * 2 * kPages * P, kPages * P, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());

  std::atomic<bool> stop{false}, pause{false};
  std::atomic<int> paused{0};
  std::vector<std::thread> faulters;
  for (int t = 0; t < kFaulters; t++)
    faulters.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load()) {
        if (pause.load()) {
          paused++;
          while (pause.load() && !stop.load()) std::this_thread::yield();
          paused--;
          continue;
        }
        const uint64_t a = RandomPage(rng);
        if (rng() % 8 == 0) {
          EXPECT_TRUE(parent->Madvise(a, P, MADV_DONTNEED).ok());
        } else {
          const uint8_t v = static_cast<uint8_t>(rng());
          EXPECT_TRUE(parent->WriteMemory(a, &v, 1).ok());
        }
      }
    });

  // The children's pool: each child written, read back, checked and destroyed.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<AddressSpace>> queue;
  int busy = 0;
  bool done = false;
  std::vector<std::thread> child_threads;
  for (int t = 0; t < kChildThreads; t++)
    child_threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (;;) {
        std::unique_ptr<AddressSpace> c;
        {
          std::unique_lock l(mu);
          cv.wait(l, [&] { return done || !queue.empty(); });
          if (queue.empty()) return;
          c = std::move(queue.front());
          queue.pop_front();
          busy++;
        }
        for (int i = 0; i < 48; i++) {
          const uint64_t a = RandomPage(rng);
          uint8_t v = static_cast<uint8_t>(rng()), back = 0;
          EXPECT_TRUE(c->WriteMemory(a, &v, 1).ok());
          EXPECT_TRUE(c->ReadMemory(a, &back, 1).ok());
          EXPECT_EQ(back, v) << "a child's own write";
          if (i % 16 == 15) {
            EXPECT_TRUE(c->Madvise(a, P, MADV_DONTNEED).ok());
          }
        }
        EXPECT_EQ(c->Validate(), "");
        c.reset();
        {
          std::lock_guard l(mu);
          busy--;
        }
        cv.notify_all();
      }
    });

  for (int r = 0; r < rounds; r++) {
    int err = -1;
    std::unique_ptr<AddressSpace> c = parent->DupMmap(&err);
    ASSERT_TRUE(c) << "round " << r << ": errno " << err;
    EXPECT_EQ(c->Validate(), "") << "child of round " << r;
    EXPECT_EQ(parent->Validate(), "") << "parent, round " << r;
    {
      std::lock_guard l(mu);
      queue.push_back(std::move(c));
    }
    cv.notify_all();
    if (r % 8 == 7) {
      // Quiescent point: no faulter running, every child destroyed.
      pause = true;
      ASSERT_TRUE(testing_util::WaitUntil([&] { return paused.load() == kFaulters; }));
      {
        std::unique_lock l(mu);
        cv.wait(l, [&] { return queue.empty() && busy == 0; });
      }
      frames.Reclaim();
      EXPECT_EQ(frames.in_use_frames(), static_cast<int64_t>(parent->Counters().anon_pages))
          << "round " << r << ": allocated - freed != the parent's live pages";
      EXPECT_EQ(parent->Validate(), "");
      pause = false;
    }
  }
  {
    std::lock_guard l(mu);
    done = true;
  }
  cv.notify_all();
  for (auto& t : child_threads) t.join();
  stop = true;
  for (auto& t : faulters) t.join();
  EXPECT_EQ(parent->Validate(), "");
  frames.Reclaim();
  EXPECT_EQ(frames.in_use_frames(), static_cast<int64_t>(parent->Counters().anon_pages));
  testing_util::ExpectAllFramesFreed(parent, frames);
}

INSTANTIATE_TEST_SUITE_P(Profiles, ForkStressTest, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
