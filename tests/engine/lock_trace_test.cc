// SPDX-License-Identifier: Apache-2.0
// The lock timeline (engine/lock_trace.h): a contended mmap_lock wait is recorded with
// its class, mode, duration and holder; faults are sampled with their address; nothing
// is recorded while the trace is off.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/lock_trace.h"
#include "sync/rwsem.h"
#include "test_util.h"

namespace vmspace {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;

uint32_t Tid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

// Thread `waiter` blocks in LockRead (or LockWrite) on `sem` while the calling thread
// holds it for write for about 20 ms. Returns the waiter's tid.
uint32_t ContendedWait(RwSem& sem, bool write) {
  std::atomic<uint32_t> tid{0};
  sem.LockWrite();
  std::thread waiter([&] {
    tid = Tid();
    if (write) {
      sem.LockWrite();
      sem.UnlockWrite();
    } else {
      sem.LockRead();
      sem.UnlockRead();
    }
  });
  EXPECT_TRUE(testing_util::WaitUntil([&] { return sem.waiters() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  sem.UnlockWrite();
  waiter.join();
  return tid;
}

TEST(LockTraceTest, ContendedMmapLockWaitIsAnEventWithClassAndMode) {
  RwSem sem{LockClass::kMmapLock, LockRank::kMmapLock, 0};
  ASSERT_TRUE(LockTraceStart());
  EXPECT_FALSE(LockTraceStart());  // one trace at a time
  const uint32_t reader = ContendedWait(sem, /*write=*/false);
  const uint32_t writer = ContendedWait(sem, /*write=*/true);
  uint64_t dropped = 1;
  const std::vector<TraceEvent> ev = LockTraceStop(1000, &dropped);
  EXPECT_EQ(dropped, 0u);
  int waits = 0;
  for (const TraceEvent& e : ev) {
    if (e.kind != TraceKind::kLockWait) continue;
    waits++;
    EXPECT_EQ(e.cls, LockClass::kMmapLock);
    EXPECT_TRUE(e.tid == reader || e.tid == writer) << e.tid;
    EXPECT_EQ(e.mode, e.tid == reader ? LockMode::kRead : LockMode::kWrite);
    EXPECT_GE(e.dur_ns, 15'000'000u);  // the holder's 20 ms, less the time to queue
    EXPECT_LT(e.dur_ns, 5'000'000'000u);
    EXPECT_FALSE(e.holder_readers);  // a writer held it
    EXPECT_EQ(e.space_id, 0u);       // no operation around it
  }
  EXPECT_EQ(waits, 2);
  // A read wait, then a write wait, in time order.
  std::vector<LockMode> modes;
  for (const TraceEvent& e : ev)
    if (e.kind == TraceKind::kLockWait) modes.push_back(e.mode);
  EXPECT_EQ(modes, (std::vector<LockMode>{LockMode::kRead, LockMode::kWrite}));
}

TEST(LockTraceTest, OffRecordsNothing) {
  RwSem sem{LockClass::kMmapLock, LockRank::kMmapLock, 0};
  EXPECT_FALSE(LockTraceEnabled());
  EXPECT_TRUE(LockTraceStop(1000).empty());  // not on: nothing to collect
  ContendedWait(sem, false);                 // off: not recorded
  ASSERT_TRUE(LockTraceStart());
  const std::vector<TraceEvent> ev = LockTraceStop(1000);
  EXPECT_TRUE(ev.empty()) << ev.size() << " events, the first " << TraceKindName(ev[0].kind);
}

TEST(LockTraceTest, FaultsAreSampledWithTheirAddressAndOperation) {
  FrameAllocator frames;
  {
    auto as = std::make_unique<AddressSpace>(frames);
    constexpr int kPages = 256;
    ASSERT_EQ(as->Mmap(kBase, kPages * kPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED).error,
              0);
    ASSERT_TRUE(LockTraceStart());
    {
      OpTrace op(7, "access", kBase, kPages * kPageSize);
      for (int i = 0; i < kPages; i++) as->Fault(kBase + i * kPageSize, AccessType::kWrite);
    }
    const std::vector<TraceEvent> ev = LockTraceStop(100000);
    int faults = 0, ops = 0;
    for (const TraceEvent& e : ev) {
      EXPECT_EQ(e.space_id, 7u);
      if (e.kind == TraceKind::kOp) {
        ops++;
        EXPECT_STREQ(e.name, "access");
        EXPECT_EQ(e.start, kBase);
        EXPECT_EQ(e.end, kBase + kPages * kPageSize);
      }
      if (e.kind == TraceKind::kFault) {
        faults++;
        EXPECT_EQ(e.mode, LockMode::kWrite);
        EXPECT_GE(e.start, kBase);
        EXPECT_LT(e.start, kBase + kPages * kPageSize);
        EXPECT_EQ(e.start % kPageSize, 0u);
        EXPECT_EQ(e.end, e.start + kPageSize);
      }
    }
    EXPECT_EQ(ops, 1);
    EXPECT_EQ(faults, kPages / static_cast<int>(kFaultSampleEvery));
  }
  RcuBarrier();
}

}  // namespace
}  // namespace vmspace
