// SPDX-License-Identifier: Apache-2.0
// mlock, munlock and mlock2(MLOCK_ONFAULT) racing faults, MADV_DONTNEED, MADV_FREE with
// lazyfree reclaim, and truncate of a shared memfd mapping. One thread locks and
// unlocks random parts of a private anonymous region and of a MAP_SHARED memfd region
// (splitting and merging their VMAs, populating what VM_LOCKED covers); others write
// every page of both (a page holds a value naming it in its first 8 bytes), zap them
// with MADV_DONTNEED (EINVAL where locked), give the anonymous ones MADV_FREE and reclaim
// them, and truncate the memfd between 0 and its full size (SIGBUS beyond EOF; an mlock
// whose populate meets it answers ENOMEM). Every
// read sees 0 or the value naming that page. After every round: Validate() is clean
// (locked_vm equals the pages of VM_LOCKED VMAs), and with every deferred free done the
// frames in use are exactly the anonymous pages mapped plus the memfd's page cache, the
// space's rss is the sum of its VMAs', and no VMA is left VM_LOCKED after munlock.
// Iteration counts scale with VMSPACE_STRESS_ITERS (test_util.h).
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/file.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr uint64_t kPages = 64;
constexpr uint64_t kLen = kPages * P;
constexpr uint64_t kAnon = 0x200000000000 + 0x3000, kShm = kAnon + (4ull << 20);
constexpr uint64_t kTag = 0x6b6b000000000000ull;
constexpr int kMlockOnfault = 1;

using testing_util::Iterations;

struct MlockStress : ::testing::TestWithParam<const char*> {};

TEST_P(MlockStress, LockingRacingFaultsZapsAndTruncateKeepsExactAccounting) {
  FrameAllocator frames{1ull << 28};
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  auto as = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  SysResult fd = files.CreateShmem("locked", kLen);
  ASSERT_TRUE(fd.ok());
  ASSERT_EQ(as->Mmap(kAnon, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).value, kAnon);
  ASSERT_EQ(as->Mmap(kShm, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, 0, files.Get(fd.value)).value, kShm);
  const int rounds = Iterations(20);
  std::atomic<uint64_t> wrong_value{0}, bad_outcome{0}, bad_errno{0};
  std::atomic<uint64_t> first_wrong_at{0}, first_wrong_value{0};
  for (int round = 0; round < rounds; round++) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> ts;
    for (int w = 0; w < 2; w++)
      ts.emplace_back([&, w] {  // writers and readers of both regions
        std::mt19937_64 rng(round * 13 + w);
        while (!stop.load(std::memory_order_relaxed)) {
          const uint64_t i = rng() % kPages;
          const uint64_t at = (rng() & 1 ? kAnon : kShm) + i * P;
          const uint64_t name = kTag | (at >> 12);
          if (rng() & 1) {
            CopyResult c = as->WriteMemory(at, &name, sizeof name);
            if (!c.ok() && c.stop.outcome != FaultOutcome::kSigbus) bad_outcome++;
          } else {
            uint64_t v = 0;
            CopyResult c = as->ReadMemory(at, &v, sizeof v);
            if (!c.ok() && c.stop.outcome != FaultOutcome::kSigbus) bad_outcome++;
            if (c.ok() && v != 0 && v != name && wrong_value++ == 0) {
              first_wrong_at = at;  // the first one, for the failure message
              first_wrong_value = v;
            }
          }
        }
      });
    ts.emplace_back([&] {  // zaps: DONTNEED (EINVAL on locked VMAs), FREE + reclaim
      std::mt19937_64 rng(round * 17);
      while (!stop.load(std::memory_order_relaxed)) {
        const uint64_t first = rng() % kPages, n = 1 + rng() % (kPages - first);
        const uint64_t base = rng() & 1 ? kAnon : kShm;
        const int advice = base == kAnon && (rng() & 1) ? MADV_FREE : MADV_DONTNEED;
        const int e = as->Madvise(base + first * P, n * P, advice).error;
        if (e != 0 && e != EINVAL) bad_errno++;
        if (advice == MADV_FREE) as->ReclaimLazyFree();
      }
    });
    ts.emplace_back([&] {  // truncate the memfd: shrink (unmaps, SIGBUS after) and grow
      std::mt19937_64 rng(round * 19);
      while (!stop.load(std::memory_order_relaxed))
        if (files.Truncate(fd.value, (rng() % (kPages + 1)) * P) != 0) bad_errno++;
    });
    // The locker: mlock, mlock2(ONFAULT) and munlock of random ranges of both regions.
    // mlock populates: a memfd page beyond EOF ends it in SIGBUS, which mlock answers
    // with ENOMEM (__mlock_posix_error_return of EFAULT), the range locked anyway.
    std::mt19937_64 rng(round * 23);
    for (int k = 0; k < 400; k++) {
      const uint64_t first = rng() % kPages, n = 1 + rng() % (kPages - first);
      const bool shm = rng() & 1;
      const uint64_t at = (shm ? kShm : kAnon) + first * P;
      SysResult r;
      switch (rng() % 3) {
        case 0: r = as->Mlock(at, n * P, 0); break;
        case 1: r = as->Mlock(at, n * P, kMlockOnfault); break;
        default: r = as->Munlock(at, n * P); break;
      }
      ASSERT_TRUE(r.ok() || (shm && r.error == ENOMEM)) << "errno " << r.error << " in round " << round;
    }
    stop = true;
    for (auto& t : ts) t.join();
    ASSERT_EQ(as->Validate(), "") << "round " << round;
    FileStat st;
    ASSERT_TRUE(files.Stat(fd.value, &st).ok());
    frames.Reclaim();  // every deferred free done
    const SpaceCounters c = as->Counters();
    EXPECT_EQ(static_cast<uint64_t>(frames.in_use_frames()), c.anon_pages + st.cached_pages)
        << "frames lost (>) or freed twice (<) in round " << round;
    uint64_t rss = 0;
    for (const VmaInfo& v : as->Maps()) rss += v.rss_pages;
    EXPECT_EQ(c.rss_pages, rss) << "round " << round;
    // Unlock everything: no VMA keeps VM_LOCKED, locked_vm is back to 0.
    ASSERT_TRUE(as->Munlock(kAnon, kLen).ok());
    ASSERT_TRUE(as->Munlock(kShm, kLen).ok());
    EXPECT_EQ(as->Counters().locked_vm_pages, 0u) << "round " << round;
    for (const VmaInfo& v : as->Maps()) EXPECT_FALSE(v.flags & VM_LOCKED) << "round " << round;
    ASSERT_EQ(files.Truncate(fd.value, kLen), 0);
  }
  EXPECT_EQ(wrong_value.load(), 0u) << "values of another page seen; the first: at 0x" << std::hex
                                    << first_wrong_at.load() << " (" << (first_wrong_at.load() >= kShm ? "memfd" : "anon")
                                    << ") read 0x" << first_wrong_value.load();
  EXPECT_EQ(bad_outcome.load(), 0u) << "accesses that ended in something else than SIGBUS";
  EXPECT_EQ(bad_errno.load(), 0u) << "madvise or truncate errors other than EINVAL on locked VMAs";
  as.reset();
  files.Close(fd.value);
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0) << "frames leaked (>0) or freed twice (<0)";
}

INSTANTIATE_TEST_SUITE_P(Profiles, MlockStress, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
