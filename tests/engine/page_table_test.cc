// SPDX-License-Identifier: Apache-2.0
// Unit tests of the page table and frame allocator.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/frame_allocator.h"
#include "engine/stats.h"
#include "page_table.h"
#include "sync/rcu.h"
#include "sync/rwsem.h"
#include "sync/spinlock.h"

namespace vmspace {
namespace {

TEST(PageTable, LookupAllocatesAllLevelsOnce) {
  PageTable pt;
  EXPECT_EQ(pt.table_pages(), 1u);  // the PGD
  EXPECT_EQ(pt.Lookup(0x7ffff7fff000, false), nullptr);
  PageTable::PteTable* t = pt.Lookup(0x7ffff7fff000, true);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(pt.table_pages(), 4u);  // PGD + PUD + PMD + PTE
  // Same 2 MiB: same table, nothing new.
  EXPECT_EQ(pt.Lookup(0x7ffff7e00000, true), t);
  EXPECT_EQ(pt.table_pages(), 4u);
  // Next 2 MiB: one more PTE table.
  EXPECT_NE(pt.Lookup(0x7ffff7c00000, true), t);
  EXPECT_EQ(pt.table_pages(), 5u);
}

TEST(PageTable, FreePgtablesRespectsFloorAndCeiling) {
  PageTable pt;
  // Three PTE tables: [0x40000000, +2M), [+2M, +4M), [+4M, +6M)
  const uint64_t base = 0x40000000;
  for (int i = 0; i < 3; i++) ASSERT_NE(pt.Lookup(base + i * (2ull << 20), true), nullptr);
  EXPECT_EQ(pt.table_pages(), 1u + 1 + 1 + 3);
  PageTable::TableGather g;
  // A neighbour VMA ends at base + 4 KiB and another starts at base + 6M - 4K:
  // only the middle table lies wholly within [floor, ceiling).
  pt.FreePgtables(base, base + (6ull << 20), base + 4096, base + (6ull << 20) - 4096, g);
  EXPECT_EQ(g.ptes.size(), 1u);
  EXPECT_EQ(g.dirs.size(), 0u);
  EXPECT_EQ(pt.table_pages(), 5u);
  EXPECT_EQ(pt.Lookup(base + (2ull << 20), false), nullptr);
  EXPECT_NE(pt.Lookup(base, false), nullptr);
  PageTable::DeleteTables(g);
  // Nothing around: everything down to the PUD goes (the PGD stays).
  pt.FreePgtables(base, base + (6ull << 20), 0, 1ull << 48, g);
  EXPECT_EQ(g.ptes.size(), 2u);
  EXPECT_EQ(g.dirs.size(), 2u);  // PMD and PUD
  EXPECT_EQ(pt.table_pages(), 1u);
  PageTable::DeleteTables(g);
}

// munmap runs free_pgtables under mmap_lock downgraded to read, while a fault under
// mmap_lock read (or a VMA lock) in a neighbouring VMA may install the first tables of
// the same PGD entry (pmd_install: the table is initialised, then published with a
// release store). free_pgtables walks into the new upper-level table and reads its
// entries: its load of the parent's slot must acquire that publication, or the read races
// with the table's initialisation (ThreadSanitizer reports the pair; only the
// happens-before matters, so the two threads are merely put in time order by a relaxed
// flag, which orders nothing for ThreadSanitizer).
TEST(PageTable, FreePgtablesReadsTablesAConcurrentFaultInstalled) {
  PageTable pt;
  const uint64_t fault_addr = 0x7f0000200000;  // a VMA's page; the munmapped range lies below it
  const uint64_t gone = 0x7f0000000000, gone_end = gone + (1ull << 20);
  std::atomic<bool> installed{false};
  std::thread fault([&] {
    ASSERT_NE(pt.Lookup(fault_addr, true), nullptr);
    installed.store(true, std::memory_order_relaxed);
  });
  while (!installed.load(std::memory_order_relaxed)) std::this_thread::yield();
  PageTable::TableGather g;
  // floor/ceiling: the previous VMA ends at `gone`, the faulting VMA starts at fault_addr.
  pt.FreePgtables(gone, gone_end, gone, fault_addr, g);
  fault.join();
  EXPECT_TRUE(g.empty());  // the PMD and PTE tables cover the faulting VMA: kept
  EXPECT_NE(pt.Lookup(fault_addr, false), nullptr);
  EXPECT_EQ(pt.table_pages(), 4u);
}

// Every table a space allocated is counted freed once the space is gone, whether munmap's
// free_pgtables or the teardown (exit_mmap) freed it (vmspace_pagetables_freed_total).
TEST(PageTable, EveryTableAllocatedIsCountedFreedByTheEnd) {
  const StatsSnapshot s0 = ReadStats();
  {
    PageTable pt;
    const uint64_t base = 0x40000000;
    for (int i = 0; i < 3; i++) ASSERT_NE(pt.Lookup(base + i * (2ull << 20), true), nullptr);
    ASSERT_NE(pt.Lookup(0x7f0000000000, true), nullptr);  // another PUD and PMD
    PageTable::TableGather g;
    pt.FreePgtables(base, base + (2ull << 20), 0, base + (2ull << 20), g);  // the first PTE table
    EXPECT_EQ(g.ptes.size(), 1u);
    PageTable::DeleteTables(g);
  }  // the rest goes with the table
  const StatsSnapshot d = ReadStats().Minus(s0);
  EXPECT_EQ(d.event(Event::kPgtablesAllocated), 4u + 2 + 2);  // PTE tables, PMDs, PUDs
  EXPECT_EQ(d.event(Event::kPgtablesFreed), d.event(Event::kPgtablesAllocated));
}

TEST(FrameAllocator, LimitAndReuse) {
  FrameAllocator fa(64 * 4096);
  std::vector<void*> got;
  for (;;) {
    void* f = fa.Alloc();
    if (!f) break;
    ASSERT_EQ(reinterpret_cast<uintptr_t>(f) % 4096, 0u);
    EXPECT_EQ(static_cast<uint8_t*>(f)[123], 0);
    static_cast<uint8_t*>(f)[123] = 7;
    got.push_back(f);
    ASSERT_LE(got.size(), 64u);
  }
  EXPECT_EQ(got.size(), 64u);
  EXPECT_EQ(fa.in_use_bytes(), 64u * 4096);
  fa.Free(got.back());
  got.pop_back();
  void* again = fa.Alloc();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(static_cast<uint8_t*>(again)[123], 0);  // re-zeroed
  got.push_back(again);
  for (void* f : got) fa.Free(f);
  EXPECT_EQ(fa.in_use_bytes(), 0u);
}

TEST(FrameAllocator, ZeroPageIsZero) {
  auto* z = static_cast<uint8_t*>(FrameAllocator::ZeroPage());
  for (int i = 0; i < 4096; i++) ASSERT_EQ(z[i], 0);
}

}  // namespace
}  // namespace vmspace

namespace vmspace {
namespace {

// The debug lock-order checker (VMSPACE_LOCKDEP=ON builds; deploy/test.sh builds the
// sanitizer run that way) must abort on an inversion and accept the documented order.
TEST(Lockdep, DocumentedOrderIsAccepted) {
  if (!kLockdep) GTEST_SKIP() << "built without VMSPACE_LOCKDEP";
  RwSem mm(LockClass::kMmapLock, LockRank::kMmapLock);
  SpinLock ptl(LockClass::kPtl, LockRank::kPtl);
  mm.LockRead();
  ptl.Lock();
  EXPECT_EQ(LockdepDepth(), 2);
  ptl.Unlock();
  mm.UnlockRead();
  EXPECT_EQ(LockdepDepth(), 0);
}

TEST(LockdepDeathTest, InversionAborts) {
  if (!kLockdep) GTEST_SKIP() << "built without VMSPACE_LOCKDEP";
  EXPECT_DEATH(
      {
        SpinLock ptl(LockClass::kPtl, LockRank::kPtl);
        RwSem mm(LockClass::kMmapLock, LockRank::kMmapLock);
        ptl.Lock();
        mm.LockRead();  // mmap_lock under a PTE lock: never allowed
      },
      "lock order violation");
  EXPECT_DEATH(
      {
        SpinLock a(LockClass::kPtl, LockRank::kPtl);
        SpinLock b(LockClass::kPtl, LockRank::kPtl);
        a.Lock();
        b.Lock();  // two PTE locks at once
      },
      "lock order violation");
}

}  // namespace
}  // namespace vmspace
