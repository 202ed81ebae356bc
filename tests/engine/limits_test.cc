// SPDX-License-Identifier: Apache-2.0
// The engine's bounds on client-chosen work and memory: walks that cannot
// wrap, stop checks at page-table granularity (CancelScope), page tables charged to
// the frame limit, and frees already queued reclaimed before an allocation fails.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <functional>
#include <memory>
#include <vector>

#include "engine/address_space.h"
#include "engine/cancel.h"
#include "engine/frame_allocator.h"
#include "engine/per_thread.h"
#include "mm.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;

TEST(Limits, AccessStrideNearTwoToTheSixtyFourTouchesOnce) {
  FrameAllocator frames(1ull << 24);
  auto as = std::make_unique<AddressSpace>(frames);
  const uint64_t a = as->Mmap(0, P, RW, PA).value;
  // A stride near 2^64 once wrapped the touch count to 0 and the walk never advanced.
  AccessResult r = as->Access(a, 2, ~0ull, AccessType::kWrite);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.accesses, 1u);
  EXPECT_EQ(r.faults, 1u);
  r = as->Access(a, 4096, 0ull - 4095, AccessType::kWrite);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.accesses, 1u);
  // A stride whose second touch would pass 2^64: one touch, the walk ends.
  r = as->Access(a, 4096, 1ull << 63, AccessType::kRead);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.accesses, 1u);
  // Two touches in the page (offsets 0 and 4000), values (uint8)i.
  r = as->Access(a, 4096, 4000, AccessType::kWrite);
  EXPECT_EQ(r.accesses, 2u);
  uint8_t b[2] = {1, 1};
  ASSERT_TRUE(as->ReadMemory(a + 4000, &b[0], 1).ok());
  ASSERT_TRUE(as->ReadMemory(a, &b[1], 1).ok());
  EXPECT_EQ(b[0], static_cast<uint8_t>(4000));
  EXPECT_EQ(b[1], 0);
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Limits, CancelScopeStopsWalksAtThePageTableBoundary) {
  FrameAllocator frames(1ull << 28);
  auto as = std::make_unique<AddressSpace>(frames);
  const uint64_t len = 16ull << 20;
  const uint64_t a = as->Mmap(0, len, RW, PA).value;
  ASSERT_EQ(a % kPmdSize, 0u) << "THP alignment places a 2 MiB multiple on a 2 MiB boundary";
  int checks = 0;
  const std::function<bool()> stop_after_two = [&] { return ++checks > 2; };
  {
    CancelScope scope(stop_after_two);
    const AccessResult r = as->Access(a, len, P, AccessType::kWrite);
    EXPECT_EQ(r.stop.outcome, FaultOutcome::kInterrupted);
    EXPECT_EQ(r.accesses, 3 * 512u) << "three tables walked: the first, then two checks passed";
    EXPECT_EQ(checks, 3);
  }
  EXPECT_EQ(as->Counters().anon_pages, 3 * 512u);
  // Without a scope the same walk completes.
  EXPECT_EQ(as->Access(a, len, P, AccessType::kWrite).accesses, len / P);

  const std::function<bool()> stop_now = [] { return true; };
  std::vector<uint8_t> buf(4ull << 20);
  {
    CancelScope scope(stop_now);
    const CopyResult c = as->ReadMemory(a + (1ull << 20), buf.data(), buf.size());
    EXPECT_EQ(c.stop.outcome, FaultOutcome::kInterrupted);
    EXPECT_EQ(c.bytes, 1ull << 20) << "stops where the copy enters the next page table";
    // MAP_POPULATE: the mmap succeeds, its first page table is populated.
    const SysResult m = as->Mmap(0, 8ull << 20, RW, PA | MAP_POPULATE);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(as->Counters().anon_pages, len / P + 512);
  }
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Limits, PageTablesCountAgainstTheFrameLimit) {
  // A 1 MiB limit, 512 GiB MAP_NORESERVE, one byte read every 2 MiB (the zero page:
  // no frames) once grew the daemon by 1 GiB of page tables.
  FrameAllocator frames(1ull << 20);
  auto as = std::make_unique<AddressSpace>(frames);
  const uint64_t len = 512ull << 30;
  const SysResult m = as->Mmap(0, len, PROT_READ, PA | MAP_NORESERVE);
  ASSERT_TRUE(m.ok());
  const AccessResult r = as->Access(m.value, len, kPmdSize, AccessType::kRead);
  EXPECT_EQ(r.stop.outcome, FaultOutcome::kOom);
  EXPECT_GT(r.accesses, 200u);
  EXPECT_LT(r.accesses, 256u);
  EXPECT_EQ(frames.table_bytes(), 1ull << 20) << "one thread: the limit is exact";
  EXPECT_EQ(frames.in_use_frames(), 0);
  EXPECT_GE(as->Counters().pgtable_bytes, frames.table_bytes());
  // Unmapping frees the tables (after a grace period) and their charge.
  ASSERT_TRUE(as->Munmap(m.value, len).ok());
  frames.Reclaim();
  EXPECT_EQ(frames.table_bytes(), 0u);
  as.reset();
  EXPECT_EQ(frames.table_bytes(), 0u);
}

TEST(Limits, FreedFramesAreReusableAtOnce) {
  // A 64 MiB limit, write 48 MiB, MADV_DONTNEED it all, write it again: when the
  // frees waited for a grace period the second write failed 7 in 8.
  FrameAllocator frames(64ull << 20);
  auto as = std::make_unique<AddressSpace>(frames);
  const uint64_t len = 48ull << 20;
  const uint64_t a = as->Mmap(0, len, RW, PA).value;
  for (int round = 0; round < 8; round++) {
    const AccessResult r = as->Access(a, len, P, AccessType::kWrite);
    ASSERT_TRUE(r.ok()) << "round " << round << ": " << FaultOutcomeName(r.stop.outcome);
    ASSERT_EQ(r.accesses, len / P);
    ASSERT_TRUE(as->Madvise(a, len, MADV_DONTNEED).ok());
  }
  testing_util::ExpectAllFramesFreed(as, frames);
}

TEST(Limits, FreeBatchReturnsFramesToTheUnmappingThreadsShard) {
  // A deferred batch freed by another thread (the RCU callback's) goes to the shard
  // named, so the thread that unmapped the frames gets them back first (LIFO), and a
  // thread of another shard does not.
  FrameAllocator frames(1ull << 30);
  std::vector<void*> batch;
  int shard = -1;
  std::atomic<int> step{0};
  std::vector<void*> again;
  std::thread t([&] {
    shard = ThreadShard();
    for (int i = 0; i < 3; i++) batch.push_back(frames.Alloc());
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    for (int i = 0; i < 3; i++) again.push_back(frames.Alloc());
  });
  while (step.load() != 1) std::this_thread::yield();
  const std::vector<void*> freed = batch;
  frames.FreeBatch(batch, shard);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(frames.in_use_frames(), 0);
  void* other = nullptr;
  std::thread o([&] {  // the thread made next gets the next shard: none of them there
    EXPECT_NE(ThreadShard(), shard);
    other = frames.Alloc();
  });
  o.join();
  EXPECT_EQ(std::find(freed.begin(), freed.end(), other), freed.end());
  step = 2;
  t.join();
  EXPECT_EQ(std::vector<void*>(again.rbegin(), again.rend()), freed);
  frames.Free(other);
  for (void* f : again) frames.Free(f);
  EXPECT_EQ(frames.in_use_frames(), 0);
}

TEST(Limits, FlushDeferredFreesUnchargesIdleSpaces) {
  // Eight spaces each write and unmap one frame less than a batch. No thread is in a
  // space's TLB-hit path, so the frames are freed at once; the page tables the munmaps
  // free (lockless walkers may still be reading them) stay in each space's gather
  // until FlushDeferredFrees hands them to RCU.
  constexpr uint64_t kLen = (MmStruct::kDeferFrames - 1) * P;
  FrameAllocator frames(1ull << 30);
  std::vector<std::unique_ptr<AddressSpace>> spaces;
  std::vector<uint64_t> addrs;
  for (int i = 0; i < 8; i++) {
    spaces.push_back(std::make_unique<AddressSpace>(frames));
    AddressSpace& as = *spaces.back();
    addrs.push_back(as.Mmap(0, kLen, RW, PA).value);
    ASSERT_TRUE(as.Access(addrs.back(), kLen, P, AccessType::kWrite).ok());
  }
  const uint64_t tables = frames.table_bytes();
  ASSERT_GE(tables, 8 * 3 * P);  // a PUD, a PMD and a PTE table (at least) each
  for (int i = 0; i < 8; i++) {
    ASSERT_TRUE(spaces[i]->Munmap(addrs[i], kLen).ok());
    EXPECT_EQ(spaces[i]->Counters().anon_pages, 0u);
  }
  RcuBarrier();
  EXPECT_EQ(frames.in_use_bytes(), 0u) << "frames: no thread could be accessing them";
  EXPECT_EQ(frames.table_bytes(), tables) << "page tables kept back for batching";
  frames.FlushDeferredFrees();
  RcuBarrier();
  EXPECT_EQ(frames.table_bytes(), 0u);
  spaces.clear();
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0);
}

}  // namespace
}  // namespace vmspace
