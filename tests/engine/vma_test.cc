// SPDX-License-Identifier: Apache-2.0
// VMA merge/split/unmap tests in the style of Linux's tools/testing/vma: each test draws
// the ranges (one column per page from the window's base; letters are VMAs, '*' is the
// range being mapped or changed), then checks the VMAs that result and which ones the
// operation write-locked (vma_start_write) or detached. They drive the engine's mm/vma.c
// counterpart (server/engine/vma.cc) directly, without faults or page tables.
#include <gtest/gtest.h>

#include <string>

#include "mm.h"
#include "mmap_lock.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;
constexpr uint64_t W = 0x10000000;  // the window: column k is page W + k * P
constexpr uint64_t RW = VM_READ | VM_WRITE | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC;
constexpr uint64_t RO = VM_READ | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC;

struct VmaTest : ::testing::Test {
  FrameAllocator frames{1ull << 24};
  SpaceOptions opts;
  std::unique_ptr<MmStruct> mm;
  void SetUp() override {
    opts.max_map_count = 100;
    mm = std::make_unique<MmStruct>(frames, opts);
    MmapWriteLock(*mm);
  }
  void TearDown() override { MmapWriteUnlock(*mm); }
  /// Ends the current write section (as mmap_write_unlock) and starts the next, so the
  /// next operation's write locks can be told apart from the setup's.
  void NewSection() {
    MmapWriteUnlock(*mm);
    MmapWriteLock(*mm);
  }
  /// A private anonymous VMA over columns [from, to) (vm_pgoff as mmap gives it).
  Vma* Add(int from, int to, uint64_t flags = RW) {
    Vma* v = VmaAllocLocked(*mm);
    v->vm_start = W + from * P;
    v->vm_end = W + to * P;
    v->vm_flags = flags;
    v->vm_pgoff = v->vm_start >> kPageShift;
    VmaInsertLocked(*mm, v);
    mm->total_vm.fetch_add(v->pages());
    return v;
  }
  /// "[0,3) [3,5)" in columns, every VMA of the window in order.
  std::string Ranges() {
    std::string s;
    for (Vma* v = FindVmaLocked(*mm, W); v; v = VmaNextLocked(*mm, v)) {
      if (!s.empty()) s += ' ';
      s += '[';  // appended piece by piece: GCC 12 warns (-Wrestrict) on "[" + std::string
      s += std::to_string((v->vm_start - W) / P);
      s += ',';
      s += std::to_string((v->vm_end - W) / P);
      s += ')';
    }
    return s;
  }
  bool WriteLocked(const Vma* v) { return v->vm_lock_seq.load() == mm->mm_lock_seq.load(); }
  bool Detached(const Vma* v) { return VmaIsDetached(*mm, v); }
  uint64_t PgoffOk(const Vma* v) { return v->vm_pgoff == v->vm_start >> kPageShift; }
};

TEST_F(VmaTest, MergeNewRangeBothSides) {
  // 0123456
  // AA*BB
  // AAAAA     A grows over the new range and B; B is removed.
  Vma* a = Add(0, 2);
  Vma* b = Add(3, 5);
  NewSection();
  Vma* r = VmaMergeNewRangeLocked(*mm, W + 2 * P, W + 3 * P, RW, (W + 2 * P) >> kPageShift);
  EXPECT_EQ(r, a);
  EXPECT_EQ(Ranges(), "[0,5)");
  EXPECT_TRUE(WriteLocked(a));
  EXPECT_TRUE(Detached(b));
  EXPECT_EQ(mm->map_count.load(), 1u);
  EXPECT_TRUE(PgoffOk(a));
}

TEST_F(VmaTest, MergeNewRangeLeftOnlyWhenNextDiffers) {
  // 0123456
  // AA*BB     B read-only
  // AAABB
  Vma* a = Add(0, 2);
  Vma* b = Add(3, 5, RO);
  NewSection();
  EXPECT_EQ(VmaMergeNewRangeLocked(*mm, W + 2 * P, W + 3 * P, RW, (W + 2 * P) >> kPageShift), a);
  EXPECT_EQ(Ranges(), "[0,3) [3,5)");
  EXPECT_TRUE(WriteLocked(a));
  EXPECT_FALSE(WriteLocked(b));
}

TEST_F(VmaTest, MergeNewRangeRightMovesStartAndPgoff) {
  // 0123456
  //  *BB      nothing on the left
  //  BBB      B starts one page lower; vm_pgoff follows
  Vma* b = Add(2, 4);
  NewSection();
  EXPECT_EQ(VmaMergeNewRangeLocked(*mm, W + 1 * P, W + 2 * P, RW, (W + 1 * P) >> kPageShift), b);
  EXPECT_EQ(Ranges(), "[1,4)");
  EXPECT_TRUE(WriteLocked(b));
  EXPECT_TRUE(PgoffOk(b));
}

TEST_F(VmaTest, MergeNewRangeKeepsApartIncompatibleAnonVmas) {
  // 0123456
  // AA*BB     A and B have different anon_vmas: only one side may merge (the left)
  Vma* a = Add(0, 2);
  Vma* b = Add(3, 5);
  a->set_anon(new AnonVma{1001});
  PutAnonVma(a->anon());  // set_anon took its own reference
  b->set_anon(new AnonVma{1002});
  PutAnonVma(b->anon());
  NewSection();
  EXPECT_EQ(VmaMergeNewRangeLocked(*mm, W + 2 * P, W + 3 * P, RW, (W + 2 * P) >> kPageShift), a);
  EXPECT_EQ(Ranges(), "[0,3) [3,5)");
  EXPECT_FALSE(WriteLocked(b));
}

TEST_F(VmaTest, ModifyFlagsInTheMiddleSplitsInThree) {
  // 0123456789
  // AAA***AAA   mprotect [3,6)
  // AAABBBCCC   three VMAs; the middle one is returned; all were write-locked
  Vma* a = Add(0, 9);
  NewSection();
  int err = -1;
  Vma* m = VmaModifyFlagsLocked(*mm, a, W + 3 * P, W + 6 * P, RO, &err);
  EXPECT_EQ(err, 0);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->vm_start, W + 3 * P);
  EXPECT_EQ(m->vm_end, W + 6 * P);
  EXPECT_EQ(Ranges(), "[0,3) [3,6) [6,9)");
  for (Vma* v = FindVmaLocked(*mm, W); v; v = VmaNextLocked(*mm, v)) {
    EXPECT_TRUE(WriteLocked(v)) << v->vm_start;
    EXPECT_TRUE(PgoffOk(v)) << v->vm_start;
  }
  EXPECT_EQ(mm->map_count.load(), 3u);
}

TEST_F(VmaTest, ModifyFlagsMergesWithPrevAndShrinksMiddle) {
  // 0123456
  // AAA*BB    A rw, B ro; [3,4) becomes rw
  // AAAABB
  Vma* a = Add(0, 3);
  Vma* b = Add(3, 6, RO);
  NewSection();
  int err = -1;
  EXPECT_EQ(VmaModifyFlagsLocked(*mm, b, W + 3 * P, W + 4 * P, RW, &err), a);
  EXPECT_EQ(Ranges(), "[0,4) [4,6)");
  EXPECT_TRUE(WriteLocked(a));
  EXPECT_TRUE(WriteLocked(b));
  EXPECT_TRUE(PgoffOk(b));
}

TEST_F(VmaTest, ModifyFlagsMergesBothNeighbours) {
  // 0123456789
  // AAA***CCC  A and C rw, B ro; B becomes rw
  // AAAAAAAAA  B and C removed (detached)
  Vma* a = Add(0, 3);
  Vma* b = Add(3, 6, RO);
  Vma* c = Add(6, 9);
  NewSection();
  int err = -1;
  EXPECT_EQ(VmaModifyFlagsLocked(*mm, b, W + 3 * P, W + 6 * P, RW, &err), a);
  EXPECT_EQ(Ranges(), "[0,9)");
  EXPECT_TRUE(WriteLocked(a));
  EXPECT_TRUE(Detached(b));
  EXPECT_TRUE(Detached(c));
  EXPECT_EQ(mm->map_count.load(), 1u);
}

TEST_F(VmaTest, SplitRefusedAtMaxMapCount) {
  // 0123456789
  // AAA***AAA   with map_count already at the limit: ENOMEM, nothing changed
  Vma* a = Add(0, 9);
  for (int i = 1; i < 100; i++) Add(10 + 2 * i, 11 + 2 * i);
  ASSERT_EQ(mm->map_count.load(), 100u);
  NewSection();
  int err = 0;
  EXPECT_EQ(VmaModifyFlagsLocked(*mm, a, W + 3 * P, W + 6 * P, RO, &err), nullptr);
  EXPECT_EQ(err, ENOMEM);
  EXPECT_EQ(a->vm_start, W);
  EXPECT_EQ(a->vm_end, W + 9 * P);
}

TEST_F(VmaTest, UnmapAcrossVmasSplitsTheEnds) {
  // 0123456789
  // AAA**BB**C   munmap [3,8): A keeps [0,3), C keeps [8,10); B is gone
  // AAA     CC
  Vma* a = Add(0, 5);
  Vma* b = Add(5, 7, RO);
  Vma* c = Add(7, 10);
  NewSection();
  EXPECT_EQ(UnmapRangeLocked(*mm, W + 3 * P, W + 8 * P, true, nullptr), 0);
  EXPECT_EQ(Ranges(), "[0,3) [8,10)");
  // __split_vma keeps the original VMA on the side that is unmapped here: the pieces
  // that stay are new VMAs, born write-locked; the originals are all detached.
  EXPECT_TRUE(Detached(a));
  EXPECT_TRUE(Detached(b));
  EXPECT_TRUE(Detached(c));
  for (Vma* v = FindVmaLocked(*mm, W); v; v = VmaNextLocked(*mm, v)) {
    EXPECT_TRUE(WriteLocked(v));
    EXPECT_TRUE(PgoffOk(v));
  }
  EXPECT_EQ(mm->map_count.load(), 2u);
  EXPECT_EQ(mm->total_vm.load(), 5u);
}

}  // namespace
}  // namespace vmspace
