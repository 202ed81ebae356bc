// SPDX-License-Identifier: Apache-2.0
// brk(2) (AddressSpace::Brk): growth, merge into the heap VMA, shrink, the guard-gap
// check against the next mapping, RLIMIT_DATA, and the [heap] name in maps. Values are
// what Linux 6.18 gives a process with the same start_brk.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include "engine/address_space.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = 4096;

struct BrkTest : ::testing::Test {
  FrameAllocator frames{1ull << 28};
  std::unique_ptr<AddressSpace> as;
  void Make(SpaceOptions o = {}) { as = std::make_unique<AddressSpace>(frames, o); }
  void SetUp() override { Make(); }
  void TearDown() override {
    if (!as) return;
    EXPECT_EQ(as->Validate(), "");
    testing_util::ExpectAllFramesFreed(as, frames);
  }
};

TEST_F(BrkTest, QueryReturnsStartBrkAndMapsNothing) {
  EXPECT_EQ(as->Brk(0), 0x4ac000u);
  EXPECT_EQ(as->Brk(0x4ab000), 0x4ac000u);  // below start_brk: the current break
  EXPECT_EQ(as->Counters().map_count, 0u);
}

TEST_F(BrkTest, GrowthMergesIntoOneHeapVmaAndShrinkUnmaps) {
  const uint64_t b = as->Brk(0);
  EXPECT_EQ(as->Brk(b + 0x1800), b + 0x1800);  // not page aligned: returned as given
  EXPECT_EQ(as->Brk(b + 0x3000), b + 0x3000);
  auto maps = as->Maps();
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].start, b);
  EXPECT_EQ(maps[0].end, b + 0x3000);
  EXPECT_EQ(maps[0].name, "[heap]");
  EXPECT_EQ(maps[0].pgoff, b >> 12);
  EXPECT_EQ(maps[0].flags & (VM_READ | VM_WRITE | VM_EXEC | VM_ACCOUNT), VM_READ | VM_WRITE | VM_ACCOUNT);
  EXPECT_EQ(as->Counters().total_vm_pages, 3u);
  ASSERT_TRUE(as->Access(b, 3 * P, P, AccessType::kWrite).ok());
  EXPECT_EQ(as->Counters().anon_pages, 3u);
  EXPECT_EQ(as->Brk(b + 0x1001), b + 0x1001);  // keeps two pages
  maps = as->Maps();
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].end, b + 2 * P);
  EXPECT_EQ(as->Counters().anon_pages, 2u);
  EXPECT_EQ(as->Brk(b), b);
  EXPECT_EQ(as->Counters().map_count, 0u);
  EXPECT_EQ(as->Brk(0), b);
}

TEST_F(BrkTest, RefusedByTheNextMappingAndItsGuardGap) {
  const uint64_t b = as->Brk(0);
  ASSERT_TRUE(as->Mmap(b + 0x10000, P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  // newbrk + PAGE_SIZE must not pass the next VMA's start.
  EXPECT_EQ(as->Brk(b + 0x10000), b);
  EXPECT_EQ(as->Brk(b + 0xf000), b + 0xf000);
  ASSERT_TRUE(as->Munmap(b + 0x10000, P).ok());
  // A VM_GROWSDOWN VMA refuses within its stack guard gap (256 pages).
  const uint64_t stack = b + 0x200000;
  ASSERT_TRUE(as->Mmap(stack, P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_GROWSDOWN).ok());
  EXPECT_EQ(as->Brk(stack - 0x100000), b + 0xf000);
  EXPECT_EQ(as->Brk(stack - 0x101000), stack - 0x101000);
}

TEST_F(BrkTest, RlimitDataBoundsTheBreak) {
  as.reset();
  SpaceOptions o;
  o.rlimit_data = 0x5000;
  Make(o);
  const uint64_t b = as->Brk(0);
  EXPECT_EQ(as->Brk(b + 0x5000), b + 0x5000);
  EXPECT_EQ(as->Brk(b + 0x5001), b + 0x5000);  // check_data_rlimit
  ASSERT_TRUE(as->Brk(b) == b);
  // may_expand_vm: other private writable memory counts against the same limit.
  ASSERT_TRUE(as->Mmap(0, 0x3000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).ok());
  EXPECT_EQ(as->Brk(b + 0x3000), b);
  EXPECT_EQ(as->Brk(b + 0x2000), b + 0x2000);
}

TEST_F(BrkTest, HeapNameFollowsTheBreakNotTheVma) {
  const uint64_t b = as->Brk(0);
  // An mmap'd VMA at start_brk is "[heap]" too while it overlaps [start_brk, brk].
  ASSERT_TRUE(as->Mmap(b, P, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).ok());
  EXPECT_EQ(as->Maps()[0].name, "");  // brk == start_brk: the heap is empty
  EXPECT_EQ(as->Brk(b + P), b);       // the page is taken
}

}  // namespace
}  // namespace vmspace
