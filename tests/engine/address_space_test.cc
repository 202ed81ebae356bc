// SPDX-License-Identifier: Apache-2.0
// Engine tests with answers taken from the kernel on this machine (Linux 6.18,
// reference experiments exp02/exp03/exp05; the oracle suite in tests/oracle compares
// against the live kernel).
#include "engine/address_space.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "profiles.h"

#include <cerrno>

#include "engine/stats.h"

namespace vmspace {
namespace {

constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t W = 0x200000000000ull;  // a window far from everything
constexpr uint64_t P = 4096;

// Every semantic test runs under every locking profile: the profiles change how
// things are locked, never what the answers are.
struct Fixture : ::testing::TestWithParam<const char*> {
  FrameAllocator frames{1ull << 30};
  SpaceOptions opts;
  std::unique_ptr<AddressSpace> as;
  void SetUp() override {
    opts.cap_sys_rawio = true;
    std::string err;
    ASSERT_TRUE(LockingProfile::Parse(GetParam(), &opts.profile, &err)) << err;
    as = std::make_unique<AddressSpace>(frames, opts);
  }
  uint64_t MapFixed(uint64_t page, uint64_t pages, int prot, int extra = 0) {
    SysResult r = as->Mmap(W + page * P, pages * P, prot, PA | MAP_FIXED | extra);
    EXPECT_TRUE(r.ok()) << ErrnoName(r.error);
    return r.value;
  }
  // "[s,e) perms" in window pages, one per VMA
  std::string Lines() {
    std::string out;
    for (const VmaInfo& v : as->Maps(W, W + (1ull << 30))) {
      char b[96];
      snprintf(b, sizeof b, "[%llu,%llu) %c%c%c%c\n", (unsigned long long)((v.start - W) / P),
               (unsigned long long)((v.end - W) / P), v.flags & VM_READ ? 'r' : '-',
               v.flags & VM_WRITE ? 'w' : '-', v.flags & VM_EXEC ? 'x' : '-',
               v.flags & VM_MAYSHARE ? 's' : 'p');
      out += b;
    }
    return out;
  }
  void TearDown() override {
    if (as) {
      EXPECT_EQ(as->Validate(), "");
    }
    testing_util::ExpectAllFramesFreed(as, frames);
  }
};

TEST_P(Fixture, TopDownSequenceMatchesKernel) {
  // exp02 (static binary, setarch -R) minus its [vvar]/[vdso]: place a stand-in for
  // them so the first mapping lands below 0x7ffff7ff7000.
  ASSERT_TRUE(as->Mmap(0x7ffff7ff7000, 0x8000, PROT_READ, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED).ok());
  auto mm = [&](uint64_t len, int prot, int flags = PA, uint64_t hint = 0) {
    return as->Mmap(hint, len, prot, flags).value;
  };
  uint64_t a = mm(P, PROT_READ);
  EXPECT_EQ(a, 0x7ffff7ff6000u);
  uint64_t b = mm(P, RW);
  EXPECT_EQ(b, 0x7ffff7ff5000u);
  uint64_t c = mm(2 * P, PROT_READ);
  EXPECT_EQ(c, 0x7ffff7ff3000u);
  EXPECT_EQ(mm(3 * P, PROT_NONE), 0x7ffff7ff0000u);
  ASSERT_TRUE(as->Munmap(b, P).ok());
  EXPECT_EQ(mm(P, PROT_EXEC), 0x7ffff7ff5000u);      // e: reuses b's hole
  EXPECT_EQ(mm(2 * P, PROT_EXEC), 0x7ffff7fee000u);  // g
  ASSERT_TRUE(as->Munmap(c, 2 * P).ok());
  EXPECT_EQ(mm(P, RW), 0x7ffff7ff4000u);             // h: top of the 8K hole
  EXPECT_EQ(mm(2ull << 20, PROT_READ), 0x7ffff7c00000u);       // t1: PMD aligned
  EXPECT_EQ(mm((2ull << 20) + P, RW), 0x7ffff79ff000u);        // t2
  EXPECT_EQ(mm(4ull << 20, PROT_READ), 0x7ffff7400000u);       // t3
  EXPECT_EQ(mm(P, RW), 0x7ffff7ff3000u);                       // i
  EXPECT_EQ(mm(4 * P, RW, PA | MAP_GROWSDOWN), 0x7ffff7fea000u);  // gd
  EXPECT_EQ(mm(P, PROT_READ), 0x7ffff7ee9000u);                // j: 1 MiB guard below gd
  EXPECT_EQ(mm(P, PROT_READ, PA, 0x7ffff7400000 - (16 << 20)), 0x7ffff6400000u);  // k
  EXPECT_EQ(mm(P, PROT_READ, PA, 0x7ffff7fea000 - (512 << 10)), 0x7ffff7ee8000u);  // k2
  EXPECT_EQ(mm(P, PROT_READ, PA, a), 0x7ffff7ee7000u);         // l: busy hint
  EXPECT_EQ(mm(P, RW, PA | MAP_FIXED_NOREPLACE, 0x7ffff7fea000 - P), 0x7ffff7fe9000u);  // o
}

TEST_P(Fixture, MmapErrnos) {
  EXPECT_EQ(as->Mmap(0, 0, RW, PA).error, EINVAL);
  EXPECT_EQ(as->Mmap(0, ~0ull, RW, PA).error, ENOMEM);
  EXPECT_EQ(as->Mmap(0, P, RW, MAP_ANONYMOUS).error, EINVAL);
  EXPECT_EQ(as->Mmap(0, P, RW, MAP_SHARED_VALIDATE | MAP_ANONYMOUS).error, EINVAL);
  EXPECT_EQ(as->Mmap(0, P, RW, PA, 1).error, EINVAL);
  EXPECT_TRUE(as->Mmap(0, P, RW, PA, 4096).ok());
  EXPECT_EQ(as->Mmap(W + 1, P, RW, PA | MAP_FIXED).error, EINVAL);
  EXPECT_EQ(as->Mmap(kTaskSize, P, RW, PA | MAP_FIXED).error, ENOMEM);
  EXPECT_EQ(as->Mmap(0, P, RW, MAP_SHARED | MAP_ANONYMOUS | MAP_GROWSDOWN).error, EINVAL);
  EXPECT_EQ(as->Mmap(0, P, RW, MAP_PRIVATE).error, EBADF);
  EXPECT_EQ(as->Mmap(0x1000, P, RW, PA).value, 0x10000u);  // hint raised to mmap_min_addr
  MapFixed(0, 2, RW);
  EXPECT_EQ(as->Mmap(W + P, P, RW, PA | MAP_FIXED_NOREPLACE).error, EEXIST);
  EXPECT_EQ(as->Mmap(W + P, P, RW, PA | MAP_FIXED_NOREPLACE | MAP_FIXED).error, EEXIST);
  EXPECT_EQ(as->Mmap(0, 32ull << 40, RW, PA).error, ENOMEM);  // > RAM + swap
  EXPECT_TRUE(as->Mmap(0, 32ull << 30, RW, PA | MAP_NORESERVE).ok());
}

TEST_P(Fixture, NonRootFixedBelowDacMinIsEperm) {
  SpaceOptions o;
  o.profile = opts.profile;
  AddressSpace user(frames, o);
  EXPECT_EQ(user.Mmap(0, P, RW, PA | MAP_FIXED).error, EPERM);
  EXPECT_TRUE(user.Mmap(0x1000, P, RW, PA | MAP_FIXED).ok());
}

TEST_P(Fixture, MunmapMprotectErrnos) {
  EXPECT_EQ(as->Munmap(W, 0).error, EINVAL);
  EXPECT_EQ(as->Munmap(W + 1, P).error, EINVAL);
  EXPECT_TRUE(as->Munmap(W, P).ok());  // nothing there
  EXPECT_EQ(as->Munmap(kTaskSize, P).error, EINVAL);
  EXPECT_EQ(as->Munmap(W, ~0ull).error, EINVAL);
  EXPECT_TRUE(as->Mprotect(W, 0, PROT_READ).ok());
  EXPECT_EQ(as->Mprotect(W + 1, P, PROT_READ).error, EINVAL);
  MapFixed(0, 1, RW);
  EXPECT_EQ(as->Mprotect(W, P, 0x10).error, EINVAL);
  EXPECT_TRUE(as->Mprotect(W, P, PROT_READ | PROT_SEM).ok());
  EXPECT_EQ(as->Mprotect(W, P, PROT_READ | PROT_GROWSDOWN).error, EINVAL);
  EXPECT_EQ(as->Mprotect(W + P, P, PROT_READ).error, ENOMEM);
  // [mapped, hole, mapped]: ENOMEM, but the first part changed
  MapFixed(2, 1, RW);
  EXPECT_EQ(as->Mprotect(W, 3 * P, PROT_NONE).error, ENOMEM);
  EXPECT_EQ(Lines(), "[0,1) ---p\n[2,3) rw-p\n");
}

TEST_P(Fixture, MergeSplitSequences) {
  // S3
  MapFixed(0, 3, RW);
  ASSERT_TRUE(as->Mprotect(W + P, P, PROT_READ).ok());
  EXPECT_EQ(Lines(), "[0,1) rw-p\n[1,2) r--p\n[2,3) rw-p\n");
  ASSERT_TRUE(as->Mprotect(W + P, P, RW).ok());
  EXPECT_EQ(Lines(), "[0,3) rw-p\n");
  ASSERT_TRUE(as->Mprotect(W, P, PROT_READ).ok());
  ASSERT_TRUE(as->Mprotect(W + 2 * P, P, PROT_READ).ok());
  EXPECT_EQ(Lines(), "[0,1) r--p\n[1,2) rw-p\n[2,3) r--p\n");
  ASSERT_TRUE(as->Mprotect(W, 3 * P, PROT_READ).ok());
  EXPECT_EQ(Lines(), "[0,3) r--p\n");
  ASSERT_TRUE(as->Munmap(W, 3 * P).ok());
  // S4
  MapFixed(0, 8, RW);
  ASSERT_TRUE(as->Munmap(W, P).ok());
  ASSERT_TRUE(as->Munmap(W + 7 * P, P).ok());
  ASSERT_TRUE(as->Munmap(W + 3 * P, P).ok());
  EXPECT_EQ(Lines(), "[1,3) rw-p\n[4,7) rw-p\n");
  MapFixed(3, 1, RW);
  EXPECT_EQ(Lines(), "[1,7) rw-p\n");
}

TEST_P(Fixture, AccountingFlagsBlockMerges) {
  // S10: VM_ACCOUNT vs VM_NORESERVE
  MapFixed(0, 1, RW);
  MapFixed(1, 1, RW, MAP_NORESERVE);
  EXPECT_EQ(Lines(), "[0,1) rw-p\n[1,2) rw-p\n");
  auto v = as->Maps(W, W + 2 * P);
  EXPECT_EQ(AddressSpace::VmFlagsString(v[0].flags), "rd wr mr mw me ac");
  EXPECT_EQ(AddressSpace::VmFlagsString(v[1].flags), "rd wr mr mw me nr");
  // R then mprotect RW gains VM_ACCOUNT and merges with a RW neighbour
  MapFixed(3, 1, PROT_READ);
  ASSERT_TRUE(as->Mprotect(W + 3 * P, P, RW).ok());
  MapFixed(4, 1, RW);
  EXPECT_EQ(Lines(), "[0,1) rw-p\n[1,2) rw-p\n[3,5) rw-p\n");
}

TEST_P(Fixture, S20AccountDroppedOnlyIfUntouched) {
  MapFixed(0, 1, PROT_READ);
  MapFixed(1, 1, RW);
  ASSERT_TRUE(as->Mprotect(W + P, P, PROT_READ).ok());
  EXPECT_EQ(Lines(), "[0,2) r--p\n");
  MapFixed(3, 1, PROT_READ);
  MapFixed(4, 1, RW);
  ASSERT_EQ(as->Fault(W + 4 * P, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  ASSERT_TRUE(as->Mprotect(W + 4 * P, P, PROT_READ).ok());
  EXPECT_EQ(Lines(), "[0,2) r--p\n[3,4) r--p\n[4,5) r--p\n");
}

TEST_P(Fixture, S12FixedOverMiddleMergesWithPrevOnly) {
  MapFixed(0, 3, RW);
  MapFixed(1, 1, RW);
  EXPECT_EQ(Lines(), "[0,3) rw-p\n");
  MapFixed(1, 1, PROT_READ);
  EXPECT_EQ(Lines(), "[0,1) rw-p\n[1,2) r--p\n[2,3) rw-p\n");
  ASSERT_EQ(as->Fault(W, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  ASSERT_EQ(as->Fault(W + 2 * P, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  MapFixed(1, 1, RW);
  EXPECT_EQ(Lines(), "[0,2) rw-p\n[2,3) rw-p\n");
}

TEST_P(Fixture, S21BoundaryMoves) {
  MapFixed(0, 1, RW);
  MapFixed(1, 3, PROT_READ);
  MapFixed(4, 1, RW);
  ASSERT_TRUE(as->Mprotect(W + P, P, RW).ok());
  EXPECT_EQ(Lines(), "[0,2) rw-p\n[2,4) r--p\n[4,5) rw-p\n");
  ASSERT_TRUE(as->Mprotect(W + 3 * P, P, RW).ok());
  EXPECT_EQ(Lines(), "[0,2) rw-p\n[2,3) r--p\n[3,5) rw-p\n");
}

TEST_P(Fixture, FaultOutcomes) {
  StatsSnapshot s0 = ReadStats();
  MapFixed(0, 4, RW);
  EXPECT_EQ(as->Fault(W, AccessType::kRead).outcome, FaultOutcome::kMinor);   // zero page
  EXPECT_EQ(as->Fault(W, AccessType::kRead).outcome, FaultOutcome::kNone);
  EXPECT_EQ(as->Counters().rss_pages, 0u);  // the zero page is not RSS
  EXPECT_EQ(as->Fault(W, AccessType::kWrite).outcome, FaultOutcome::kMinor);  // COW
  EXPECT_EQ(as->Fault(W, AccessType::kWrite).outcome, FaultOutcome::kNone);
  EXPECT_EQ(as->Counters().rss_pages, 1u);
  EXPECT_EQ(as->Fault(W + P, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  FaultResult r = as->Fault(W + 10 * P, AccessType::kRead);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigsegv);
  EXPECT_EQ(r.sig_code, kSegvMaperr);
  EXPECT_EQ(r.sig_addr, W + 10 * P);
  r = as->Fault(W + 2 * P, AccessType::kExec);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigsegv);
  EXPECT_EQ(r.sig_code, kSegvAccerr);
  ASSERT_TRUE(as->Mprotect(W, P, PROT_READ).ok());
  r = as->Fault(W, AccessType::kWrite);
  EXPECT_EQ(r.sig_code, kSegvAccerr);
  ASSERT_TRUE(as->Mprotect(W, P, PROT_NONE).ok());
  EXPECT_EQ(as->Fault(W, AccessType::kRead).sig_code, kSegvAccerr);
  ASSERT_TRUE(as->Mprotect(W, P, PROT_WRITE).ok());  // x86: write implies read
  EXPECT_EQ(as->Fault(W, AccessType::kRead).outcome, FaultOutcome::kNone);
  StatsSnapshot d = ReadStats().Minus(s0);
  // pgfault: zero-page read, COW, write-first, exec-of-RW page fault-in = 4
  EXPECT_EQ(d.event(Event::kPgfault), 4u);
}

TEST_P(Fixture, DataSurvivesAndIsFreed) {
  RcuBarrier();
  const StatsSnapshot before = ReadStats(opts.profile.stats_slot());
  MapFixed(0, 4, RW);
  const char msg[] = "hello, vmspace";
  CopyResult w = as->WriteMemory(W + P - 5, msg, sizeof msg);
  EXPECT_TRUE(w.ok());
  EXPECT_EQ(w.faults, 2u);
  char back[sizeof msg] = {};
  CopyResult rd = as->ReadMemory(W + P - 5, back, sizeof msg);
  EXPECT_TRUE(rd.ok());
  EXPECT_STREQ(back, msg);
  AccessResult a = as->Access(W, 4 * P, 128, AccessType::kWrite);
  EXPECT_EQ(a.faults, 2u);  // pages 2 and 3
  EXPECT_EQ(a.accesses, 4 * P / 128);
  uint8_t byte = 0;
  as->ReadMemory(W + 256, &byte, 1);
  EXPECT_EQ(byte, static_cast<uint8_t>(256));
  EXPECT_EQ(as->Counters().rss_pages, 4u);
  ASSERT_TRUE(as->Munmap(W, 4 * P).ok());
  EXPECT_EQ(as->Counters().rss_pages, 0u);
  CopyResult bad = as->ReadMemory(W, back, 1);
  EXPECT_EQ(bad.stop.outcome, FaultOutcome::kSigsegv);
  // The deferred frees (run later on the RCU callback thread) count in this profile.
  as.reset();
  RcuBarrier();
  const StatsSnapshot d = ReadStats(opts.profile.stats_slot()).Minus(before);
  EXPECT_EQ(d.event(Event::kFramesAllocated), 4u);
  EXPECT_EQ(d.event(Event::kFramesFreed), 4u);
}

TEST_P(Fixture, MadviseDontneedRefaults) {
  MapFixed(0, 4, RW);
  ASSERT_TRUE(as->Access(W, 4 * P, P, AccessType::kWrite).ok());
  EXPECT_EQ(as->Counters().rss_pages, 4u);
  EXPECT_TRUE(as->Madvise(W, 4 * P, MADV_DONTNEED).ok());
  EXPECT_EQ(as->Counters().rss_pages, 0u);
  uint8_t b = 1;
  ASSERT_TRUE(as->ReadMemory(W, &b, 1).ok());
  EXPECT_EQ(b, 0);  // private anonymous: zero-filled again
  AccessResult r = as->Access(W, 4 * P, P, AccessType::kWrite);
  EXPECT_EQ(r.faults, 4u);  // page 0 is the zero page now: a COW fault like the others
  EXPECT_EQ(as->Madvise(W, 8 * P, MADV_DONTNEED).error, ENOMEM);  // hole after the VMA
  EXPECT_EQ(as->Counters().rss_pages, 0u);  // but the mapped part was zapped
  EXPECT_EQ(as->Madvise(W + 1, P, MADV_DONTNEED).error, EINVAL);
  EXPECT_TRUE(as->Madvise(W, 0, MADV_DONTNEED).ok());
  EXPECT_EQ(Lines(), "[0,4) rw-p\n");  // no split, no flag change
}

TEST_P(Fixture, GrowsDownExpands) {
  MapFixed(100, 4, RW, MAP_GROWSDOWN);
  EXPECT_EQ(as->Fault(W + 99 * P, AccessType::kWrite).outcome, FaultOutcome::kMinor);
  EXPECT_EQ(Lines(), "[99,104) rw-p\n");
}

TEST_P(Fixture, MaxMapCount) {
  SpaceOptions o;
  o.profile = opts.profile;
  o.max_map_count = 5;
  AddressSpace s(frames, o);
  for (int i = 0; i < 6; i++)  // reachable: max + 1
    ASSERT_TRUE(s.Mmap(W + i * 2 * P, P, i % 2 ? PROT_READ : RW, PA | MAP_FIXED).ok()) << i;
  EXPECT_EQ(s.Mmap(W + 20 * P, P, RW, PA | MAP_FIXED).error, ENOMEM);
  EXPECT_EQ(s.Counters().map_count, 6u);
  ASSERT_TRUE(s.Munmap(W, P).ok());
  ASSERT_TRUE(s.Mmap(W + 40 * P, 3 * P, RW, PA | MAP_FIXED).ok());  // back to 6
  EXPECT_EQ(s.Munmap(W + 41 * P, P).error, ENOMEM);
  EXPECT_TRUE(s.Munmap(W + 40 * P, P).ok());
}

INSTANTIATE_TEST_SUITE_P(Profiles, Fixture,
                         testing_profiles::AllProfiles(), testing_profiles::ProfileName());

TEST(MapsFormat, LinesMatchKernel) {
  VmaInfo anon;
  anon.start = 0x7eff58329000;
  anon.end = 0x7eff5832c000;
  anon.flags = VM_READ | VM_WRITE;
  EXPECT_EQ(AddressSpace::FormatMapsLine(anon), "7eff58329000-7eff5832c000 rw-p 00000000 00:00 0 ");
  VmaInfo sh;
  sh.start = 0x7eff58516000;
  sh.end = 0x7eff58517000;
  sh.flags = VM_READ | VM_WRITE | VM_SHARED | VM_MAYSHARE;
  sh.anonymous = false;
  sh.shmem = true;
  sh.dev_minor = 1;
  sh.inode = 1054;
  sh.name = "/dev/zero (deleted)";
  EXPECT_EQ(AddressSpace::FormatMapsLine(sh),
            "7eff58516000-7eff58517000 rw-s 00000000 00:01 1054                       /dev/zero (deleted)");
}

}  // namespace
}  // namespace vmspace
