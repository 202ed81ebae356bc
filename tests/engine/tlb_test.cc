// SPDX-License-Identifier: Apache-2.0
// When a zap's frames may be freed (FreeZappedPagesIfUnused, TlbUsers):
//  * with no thread in the space's TLB-hit path, the frames a munmap or MADV_DONTNEED
//    cleared are back in the allocator when the call returns (tlb_finish_mmu with no
//    remote CPU to flush), not after a grace period;
//  * while a thread is in it (TlbUsers::Enter), they wait for the grace period: that
//    thread may still be accessing one of them;
//  * a reader racing munmap/mmap of other addresses never sees bytes that were written
//    at another address (a frame freed and reused while it was still reading it);
//  * the page cache of a file whose last mapping goes while a thread is in that path
//    waits for the grace period too.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "mm.h"
#include "memory.h"
#include "profiles.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t P = kPageSize;
constexpr int RW = PROT_READ | PROT_WRITE;
constexpr int PA = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kPages = 8;

struct Tlb : ::testing::TestWithParam<const char*> {
  FrameAllocator frames;
  std::unique_ptr<AddressSpace> as;
  void SetUp() override { as = std::make_unique<AddressSpace>(frames, testing_profiles::ProfileOptions(GetParam())); }
  void TearDown() override { testing_util::ExpectAllFramesFreed(as, frames); }
  // kPages pages mapped and written: kPages frames in use.
  uint64_t MapWritten() {
    const uint64_t a = as->Mmap(0, kPages * P, RW, PA).value;
    EXPECT_TRUE(as->Access(a, kPages * P, P, AccessType::kWrite).ok());
    EXPECT_EQ(frames.in_use_frames(), static_cast<int64_t>(kPages));
    return a;
  }
};

MmStruct* g_mm = nullptr;
void RecordMm(MmStruct* m, uint64_t) { g_mm = m; }

// The space's MmStruct, as the fault hook sees it (one fault on a scratch page).
MmStruct* SpaceMm(AddressSpace& as) {
  const uint64_t a = as.Mmap(0, P, RW, PA).value;
  g_fault_retry_test_hook.store(&RecordMm);
  EXPECT_FALSE(as.Fault(a, AccessType::kRead).failed());
  g_fault_retry_test_hook.store(nullptr);
  EXPECT_TRUE(as.Munmap(a, P).ok());
  return g_mm;
}

TEST_P(Tlb, ZappedFramesAreFreedAtOnceWhenNoThreadIsInTheTlbHitPath) {
  uint64_t a = MapWritten();
  ASSERT_TRUE(as->Munmap(a, kPages * P).ok());
  EXPECT_EQ(frames.in_use_frames(), 0);
  a = MapWritten();
  ASSERT_TRUE(as->Madvise(a, kPages * P, MADV_DONTNEED).ok());
  EXPECT_EQ(frames.in_use_frames(), 0);
  EXPECT_EQ(as->Counters().anon_pages, 0u);
}

TEST_P(Tlb, ZappedFramesWaitForAGracePeriodWhileAThreadIsInTheTlbHitPath) {
  MmStruct* m = SpaceMm(*as);
  ASSERT_NE(m, nullptr);
  uint64_t a = MapWritten();
  int cell = m->tlb_users.Enter();  // as a thread between its PTE read and its access
  ASSERT_TRUE(as->Munmap(a, kPages * P).ok());
  EXPECT_EQ(frames.in_use_frames(), static_cast<int64_t>(kPages));
  m->tlb_users.Exit(cell);
  frames.Reclaim();  // the grace period
  EXPECT_EQ(frames.in_use_frames(), 0);
  a = MapWritten();
  cell = m->tlb_users.Enter();
  ASSERT_TRUE(as->Madvise(a, kPages * P, MADV_DONTNEED).ok());
  EXPECT_EQ(frames.in_use_frames(), static_cast<int64_t>(kPages));
  m->tlb_users.Exit(cell);
  frames.Reclaim();
  EXPECT_EQ(frames.in_use_frames(), 0);
}

TEST_P(Tlb, AReaderRacingMunmapNeverSeesAnotherAddresssBytes) {
  // The writer maps X, fills it with 0x11 and unmaps it, then fills Y (elsewhere) with
  // 0x22, usually in X's frame just freed, and drops Y's page; the reader keeps reading
  // X's page. It may see 0x11, zeros (before the fill) or a fault, never 0x22.
  const uint64_t x = 0x7f0000000000, y = 0x7f0000100000;
  const int iters = testing_util::Iterations(100000);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> foreign{0}, reads{0};
  std::thread reader([&] {
    // The destination is given back to the host before every read, so the copy takes a
    // host page fault in the middle of the access (a reader that stays long in it).
    void* mem = mmap(nullptr, P, RW, PA, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    auto* buf = static_cast<uint8_t*>(mem);
    while (!stop.load(std::memory_order_relaxed)) {
      madvise(buf, P, MADV_DONTNEED);
      CopyResult r = as->ReadMemory(x, buf, P);
      if (r.bytes != P) continue;
      reads++;
      for (uint64_t i = 0; i < P; i++)
        if (buf[i] == 0x22) {
          foreign++;
          break;
        }
    }
    munmap(mem, P);
  });
  uint8_t ones[P], twos[P];
  memset(ones, 0x11, P);
  memset(twos, 0x22, P);
  ASSERT_TRUE(as->Mmap(y, P, RW, PA | MAP_FIXED).ok());
  for (int i = 0; i < iters; i++) {
    ASSERT_TRUE(as->Mmap(x, P, RW, PA | MAP_FIXED).ok());
    ASSERT_EQ(as->WriteMemory(x, ones, P).bytes, P);
    ASSERT_TRUE(as->Munmap(x, P).ok());
    ASSERT_EQ(as->WriteMemory(y, twos, P).bytes, P);
    ASSERT_TRUE(as->Madvise(y, P, MADV_DONTNEED).ok());
  }
  stop = true;
  reader.join();
  EXPECT_GT(reads.load(), 0u);
  EXPECT_EQ(foreign.load(), 0u) << "reads of X that returned Y's bytes, of " << reads.load();
}

// A thread in the TLB-hit path of a page of a shared anonymous mapping (its page cache
// belongs to a file only the VMA holds) while another thread unmaps the mapping: the
// zap clears the PTE, the VMA lets go of the file, and the file's last reference goes.
// The frame the reader is copying from must stay allocated until the reader is done
// (it is freed after a grace period), not be handed to another page at once.
std::atomic<MmStruct*> g_block_mm{nullptr};
std::atomic<bool> g_in_hook{false}, g_release{false};
void BlockInTlbHitPath(MmStruct* m, uint64_t) {
  MmStruct* expect = m;
  if (!g_block_mm.compare_exchange_strong(expect, nullptr)) return;  // once
  g_in_hook = true;
  while (!g_release.load()) std::this_thread::yield();
}

TEST_P(Tlb, TheLastUnmapOfASharedMappingKeepsItsPageForAThreadInTheTlbHitPath) {
  MmStruct* m = SpaceMm(*as);
  ASSERT_NE(m, nullptr);
  const uint64_t a = as->Mmap(0, P, RW, MAP_SHARED | MAP_ANONYMOUS).value;
  const uint64_t tag = 0x5a5a5a5a12345678ull;
  ASSERT_TRUE(as->WriteMemory(a, &tag, sizeof tag).ok());
  RcuBarrier();
  ASSERT_EQ(frames.in_use_frames(), 1);
  g_in_hook = false, g_release = false;
  g_block_mm = m;
  g_access_test_hook = &BlockInTlbHitPath;
  uint64_t seen = 0;
  std::thread reader([&] { EXPECT_TRUE(as->ReadMemory(a, &seen, sizeof seen).ok()); });
  while (!g_in_hook.load()) std::this_thread::yield();
  ASSERT_TRUE(as->Munmap(a, P).ok());
  const int64_t in_use_while_reading = frames.in_use_frames();
  g_release = true;
  reader.join();
  g_access_test_hook = nullptr;
  EXPECT_EQ(in_use_while_reading, 1) << "the page was freed while a reader was copying from it";
  EXPECT_EQ(seen, tag);
  RcuBarrier();
  EXPECT_EQ(frames.in_use_frames(), 0);
}

INSTANTIATE_TEST_SUITE_P(Profiles, Tlb, testing_profiles::AllProfiles(), testing_profiles::ProfileName());

}  // namespace
}  // namespace vmspace
