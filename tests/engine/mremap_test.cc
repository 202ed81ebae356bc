// SPDX-License-Identifier: Apache-2.0
// mremap(2) (AddressSpace::Mremap): shrink, grow in place, moves (MAYMOVE, FIXED,
// DONTUNMAP), the old_len 0 duplicate of a shared mapping, errno order, and what a
// move keeps: the frames (moved, not copied), vm_pgoff and anon_vma of a faulted
// VMA, accounting. Values are Linux 6.18's (the oracle cases check them on a kernel).
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cerrno>

#include "engine/file.h"

#include "engine/address_space.h"
#include "engine/stats.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kMaymove = 1, kFixed = 2, kDontunmap = 4;
constexpr uint64_t A = 0x100000000000;  // a free area

struct MremapTest : ::testing::TestWithParam<const char*> {
  FrameAllocator frames{1ull << 28};
  std::unique_ptr<AddressSpace> as =
      std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam()));
  void TearDown() override {
    EXPECT_EQ(as->Validate(), "");
    testing_util::ExpectAllFramesFreed(as, frames);
  }
  void Map(uint64_t addr, uint64_t len, int prot = RW, int flags = PA) {
    ASSERT_EQ(as->Mmap(addr, len, prot, flags | MAP_FIXED).value, addr);
  }
  void Fill(uint64_t addr, uint64_t pages) {  // page i holds i + 1 in its first byte
    for (uint64_t i = 0; i < pages; i++) {
      const uint8_t v = static_cast<uint8_t>(i + 1);
      ASSERT_TRUE(as->WriteMemory(addr + i * P, &v, 1).ok());
    }
  }
  uint8_t Read(uint64_t addr) {
    uint8_t v = 0xee;
    EXPECT_TRUE(as->ReadMemory(addr, &v, 1).ok());
    return v;
  }
};

TEST_P(MremapTest, ShrinkUnmapsTheTail) {
  Map(A, 4 * P);
  Fill(A, 4);
  EXPECT_EQ(as->Mremap(A, 4 * P, 0x1001, 0).value, A);
  auto m = as->Maps();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].end, A + 2 * P);
  EXPECT_EQ(as->Counters().anon_pages, 2u);
  EXPECT_EQ(as->Counters().total_vm_pages, 2u);
}

TEST_P(MremapTest, GrowInPlaceKeepsFramesAndMergesWithNext) {
  Map(A, 2 * P);
  Fill(A, 2);
  Map(A + 4 * P, 2 * P);  // untouched: pgoff A>>12 + 4 continues A's
  EXPECT_EQ(as->Mremap(A, 2 * P, 4 * P, 0).value, A);
  auto m = as->Maps();
  ASSERT_EQ(m.size(), 1u);  // vma_merge_extend joined the next VMA
  EXPECT_EQ(m[0].end, A + 6 * P);
  EXPECT_EQ(Read(A + P), 2);
  EXPECT_EQ(as->Counters().total_vm_pages, 6u);
}

// A fork child's VMA still has its parent's anon_vma in its chain: vma_merge_extend
// gives the new range the VMA's own anon_vma, so the growth in place succeeds (it was
// ENOMEM, as if the VMA could not take its own anon_vma).
TEST_P(MremapTest, ForkChildGrowsInPlace) {
  Map(A, 2 * P);
  Fill(A, 2);
  int err = -1;
  std::unique_ptr<AddressSpace> child = as->DupMmap(&err);
  ASSERT_EQ(err, 0);
  ASSERT_TRUE(child);
  EXPECT_EQ(child->Mremap(A, 2 * P, 4 * P, 0).value, A);
  EXPECT_EQ(child->Mremap(A, 4 * P, 6 * P, kMaymove).value, A);
  auto m = child->Maps();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].end, A + 6 * P);
  uint8_t v = 0;
  ASSERT_TRUE(child->ReadMemory(A + P, &v, 1).ok());
  EXPECT_EQ(v, 2);
  EXPECT_EQ(child->Validate(), "");
  child.reset();
  EXPECT_EQ(as->Mremap(A, 2 * P, 4 * P, 0).value, A);  // the parent's chain is its own: it grew before too
}

TEST_P(MremapTest, GrowBlockedNeedsMaymove) {
  Map(A, 2 * P);
  Fill(A, 2);
  Map(A + 2 * P, P, PROT_READ);
  EXPECT_EQ(as->Mremap(A, 2 * P, 4 * P, 0).error, ENOMEM);
  const uint64_t anon_before = as->Counters().anon_pages;
  const uint64_t in_use = frames.in_use_frames();
  SysResult r = as->Mremap(A, 2 * P, 4 * P, kMaymove);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r.value, A);
  // The frames moved: none allocated or freed, the data is at the new address.
  EXPECT_EQ(frames.in_use_frames(), in_use);
  EXPECT_EQ(as->Counters().anon_pages, anon_before);
  EXPECT_EQ(Read(r.value), 1);
  EXPECT_EQ(Read(r.value + P), 2);
  EXPECT_EQ(Read(r.value + 2 * P), 0);
  EXPECT_EQ(as->Fault(A, AccessType::kRead).outcome, FaultOutcome::kSigsegv);
  auto m = as->Maps(r.value, r.value + 4 * P);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].pgoff, A >> 12);  // a faulted VMA keeps its pgoff (linear_page_index)
  EXPECT_NE(m[0].anon_vma_id, 0u);
  EXPECT_EQ(as->Counters().total_vm_pages, 5u);
  EXPECT_EQ(as->Counters().map_count, 2u);
}

TEST_P(MremapTest, FixedReplacesTheDestination) {
  Map(A, 2 * P);
  Fill(A, 2);
  Map(A + 16 * P, 4 * P);
  Fill(A + 16 * P, 4);
  const uint64_t in_use = frames.in_use_frames();
  EXPECT_EQ(as->Mremap(A, 2 * P, 2 * P, kMaymove | kFixed, A + 17 * P).value, A + 17 * P);
  EXPECT_EQ(frames.in_use_frames() + 2, in_use + 0) << "the two replaced frames are freed";
  auto m = as->Maps();
  ASSERT_EQ(m.size(), 3u);  // [16], moved [17,19), [19]
  EXPECT_EQ(Read(A + 17 * P), 1);
  EXPECT_EQ(Read(A + 19 * P), 4);
}

TEST_P(MremapTest, FaultedVmaMovedBesideAnUntouchedOneDoesNotMerge) {
  Map(A, P);
  Fill(A, 1);
  Map(A + 32 * P, P);  // untouched, pgoff (A >> 12) + 32
  ASSERT_EQ(as->Mremap(A, P, P, kMaymove | kFixed, A + 31 * P).value, A + 31 * P);
  EXPECT_EQ(as->Maps().size(), 2u);  // pgoff A>>12 does not continue at A+32P
  // An untouched VMA moved there takes the destination's pgoff and merges.
  Map(A + 8 * P, P);
  ASSERT_EQ(as->Mremap(A + 8 * P, P, P, kMaymove | kFixed, A + 33 * P).value, A + 33 * P);
  auto m = as->Maps();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[1].start, A + 32 * P);
  EXPECT_EQ(m[1].end, A + 34 * P);
}

TEST_P(MremapTest, DontunmapLeavesAnEmptySourceStillAccounted) {
  Map(A, 2 * P);
  Fill(A, 2);
  SysResult r = as->Mremap(A, 2 * P, 2 * P, kMaymove | kDontunmap, A + 64 * P);
  ASSERT_EQ(r.value, A + 64 * P);  // the hint is free
  auto m = as->Maps();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].flags & VM_ACCOUNT, VM_ACCOUNT);  // as Linux 6.18 (dontunmap_complete)
  EXPECT_EQ(m[0].anon_vma_id, 0u);  // moved whole: unlink_anon_vmas
  EXPECT_EQ(m[0].rss_pages, 0u);
  EXPECT_EQ(Read(A), 0);
  EXPECT_EQ(Read(A + 64 * P + P), 2);
  EXPECT_EQ(as->Counters().total_vm_pages, 4u);
}

TEST_P(MremapTest, ZeroOldLenDuplicatesASharedMapping) {
  Map(A, 2 * P, RW, MAP_SHARED | MAP_ANONYMOUS);
  Fill(A, 2);
  EXPECT_EQ(as->Mremap(A, 0, 2 * P, 0).error, ENOMEM);  // needs a move
  SysResult r = as->Mremap(A, 0, 2 * P, kMaymove);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Read(r.value + P), 2);  // the same shmem pages
  const uint8_t v = 9;
  ASSERT_TRUE(as->WriteMemory(r.value, &v, 1).ok());
  EXPECT_EQ(Read(A), 9);
  Map(A + 8 * P, P);
  EXPECT_EQ(as->Mremap(A + 8 * P, 0, P, kMaymove).error, EINVAL);  // private
}

TEST_P(MremapTest, ErrnoOrder) {
  Map(A, 4 * P);
  EXPECT_EQ(as->Mremap(A, P, P, 8).error, EINVAL);                         // unknown flag
  EXPECT_EQ(as->Mremap(A + 1, P, P, 0).error, EINVAL);                     // unaligned
  EXPECT_EQ(as->Mremap(A, P, 0, 0).error, EINVAL);                         // new_len 0
  EXPECT_EQ(as->Mremap(A, P, P, kFixed, A + 8 * P).error, EINVAL);         // FIXED without MAYMOVE
  EXPECT_EQ(as->Mremap(A, P, 2 * P, kMaymove | kDontunmap, 0).error, EINVAL);  // resize
  EXPECT_EQ(as->Mremap(A, 2 * P, 2 * P, kMaymove | kFixed, A + P).error, EINVAL);  // overlap
  EXPECT_EQ(as->Mremap(A + 8 * P, P, P, 0).error, EFAULT);                 // no VMA
  EXPECT_EQ(as->Mremap(A + 2 * P, 4 * P, 4 * P, 0).value, A + 2 * P);      // no resize: nothing checked
  EXPECT_EQ(as->Mremap(A + 2 * P, 4 * P, 8 * P, kMaymove).error, EFAULT);
  EXPECT_EQ(as->Mremap(A + 2 * P, P, 2 * P, 0).error, ENOMEM);            // not the VMA's end
  EXPECT_EQ(as->Mremap(A, P, P, kMaymove | kFixed, kTaskSize).error, EINVAL);
  EXPECT_EQ(as->Mremap(A, P, ~0ull - 0x1000, kMaymove).error, EINVAL);    // longer than TASK_SIZE
  EXPECT_EQ(as->Mremap(A + 64 * P, P, ~0ull - 0x1000, 0).error, EINVAL);  // even before the lookup
  EXPECT_EQ(as->Mremap(A, 4 * P, kTaskSize, kMaymove).error, ENOMEM);     // no room anywhere
  EXPECT_EQ(as->Mremap(A, 4 * P, kTaskSize, 0).error, ENOMEM);            // nor in place
  EXPECT_EQ(as->Mremap(A, kTaskSize, P, 0).error, EINVAL);                // the shrink's munmap
  EXPECT_EQ(as->Mremap(A + 64 * P, kTaskSize, P, 0).error, EFAULT);
  EXPECT_EQ(as->Counters().map_count, 1u);
}

TEST_P(MremapTest, FileGrownPastEofIsSigbus) {
  testing_util::ScratchDir dir;
  FileTable files(frames, dir.path);
  OpenFlags rw;
  rw.write = rw.create = true;
  SysResult id = files.Open("f", rw);
  ASSERT_TRUE(id.ok()) << id.error;
  ASSERT_EQ(files.Truncate(id.value, P), 0);
  ASSERT_EQ(as->Mmap(A, P, RW, MAP_SHARED | MAP_FIXED, 0, files.Get(id.value)).value, A);
  ASSERT_EQ(as->Mremap(A, P, 3 * P, 0).value, A);
  EXPECT_FALSE(as->Fault(A, AccessType::kRead).failed());
  FaultResult r = as->Fault(A + 2 * P, AccessType::kRead);
  EXPECT_EQ(r.outcome, FaultOutcome::kSigbus);
  as->Munmap(A, 3 * P);
}

INSTANTIATE_TEST_SUITE_P(Profiles, MremapTest, testing_profiles::AllProfiles(),
                         testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
