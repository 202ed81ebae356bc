// RwSem (mmap_lock): Linux's rw_semaphore algorithm, checked by behaviour.
//  * mutual exclusion and reader sharing under stress: a plain counter changed only
//    under the write lock (a broken exclusion is a lost update, and a data race for
//    ThreadSanitizer), readers and writers counting themselves in and out;
//  * the queue order the kernel guarantees: the writer at the head gets the lock
//    before readers queued behind it, then every queued reader is granted at once;
//  * the handoff bit: set by a writer that waited past the timeout and still finds the
//    lock taken, cleared when it gets the lock; a writer is not starved by a stream of
//    readers, readers are not starved by writers;
//  * downgrade_write(): readers are admitted (queued ones at the head woken), writers
//    stay out until the last read unlock; a writer at the head keeps its place;
//  * lock stats: uncontended acquisitions count no contention; a writer that had to
//    wait for a reader (and a reader for a writer) counts one, with a wait time.
// Waiting for another thread uses WaitUntil: a hang is the failure, the bound generous.
#include "sync/rwsem.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/stats.h"
#include "test_util.h"

namespace vmspace {
namespace {

using testing_util::Iterations;

// Waits (yielding) until pred() holds; false after a minute (a hang).
template <typename P>
bool WaitUntil(P pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

RwSem MakeSem(uint64_t timeout_ns = RwSem::kWaitTimeoutNs) {
  return RwSem(LockClass::kMmapLock, LockRank::kMmapLock, timeout_ns);
}

uint64_t Readers(const RwSem& s) { return s.count() >> RwSem::kReaderShift; }

// ---------------------------------------------------------------- stress

struct Shared {
  RwSem sem{LockClass::kMmapLock, LockRank::kMmapLock};
  std::atomic<int> readers_in{0}, writers_in{0};
  std::atomic<int> violations{0};
  uint64_t counter ABSL_GUARDED_BY(sem) = 0;  // plain: changed only under write
};

// The in/out counters are relaxed: only the lock orders `counter`'s accesses, so
// ThreadSanitizer reports a race if the lock does not.
constexpr auto kRelaxed = std::memory_order_relaxed;

void WriteStep(Shared& s) {
  s.sem.LockWrite();
  if (s.writers_in.fetch_add(1, kRelaxed) != 0 || s.readers_in.load(kRelaxed) != 0) s.violations++;
  const uint64_t v = s.counter;
  s.counter = v + 1;
  if (s.writers_in.fetch_sub(1, kRelaxed) != 1 || s.readers_in.load(kRelaxed) != 0) s.violations++;
  s.sem.UnlockWrite();
}

uint64_t ReadStep(Shared& s) {
  s.sem.LockRead();
  s.readers_in.fetch_add(1, kRelaxed);
  if (s.writers_in.load(kRelaxed) != 0) s.violations++;
  const uint64_t v = s.counter;
  if (s.writers_in.load(kRelaxed) != 0) s.violations++;
  s.readers_in.fetch_sub(1, kRelaxed);
  s.sem.UnlockRead();
  return v;
}

// 4 threads, one write in 8 (a thread's view of the counter never goes back).
TEST(RwSem, MutualExclusionAndSharingUnderStress) {
  Shared s;
  const int iters = Iterations(20000);
  constexpr int kThreads = 4;
  std::atomic<uint64_t> writes{0};
  std::atomic<int> monotonic_violations{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      uint64_t last = 0, rng = 0x9e3779b97f4a7c15ull * (t + 1);
      for (int i = 0; i < iters; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        if (rng % 8 == 0) {
          WriteStep(s);
          writes.fetch_add(1, kRelaxed);
        } else {
          uint64_t v = ReadStep(s);
          if (v < last) monotonic_violations++;
          last = v;
        }
      }
    });
  for (auto& t : ts) t.join();
  s.sem.LockRead();
  EXPECT_EQ(s.counter, writes.load());
  s.sem.UnlockRead();
  EXPECT_EQ(s.violations.load(), 0);
  EXPECT_EQ(monotonic_violations.load(), 0);
  EXPECT_EQ(s.sem.count(), 0u) << "lock word not back to unlocked, no waiters";
  EXPECT_EQ(s.sem.waiters(), 0u);
}

// Readers really share: two threads inside at once.
TEST(RwSem, ReadersHoldTogether) {
  RwSem sem = MakeSem();
  sem.LockRead();
  std::atomic<bool> in{false}, leave{false};
  std::thread r([&] {
    sem.LockRead();
    in = true;
    while (!leave) std::this_thread::yield();
    sem.UnlockRead();
  });
  ASSERT_TRUE(WaitUntil([&] { return in.load(); }));
  EXPECT_EQ(Readers(sem), 2u);
  EXPECT_EQ(sem.count() & RwSem::kWriterLocked, 0u);
  leave = true;
  r.join();
  sem.UnlockRead();
  EXPECT_EQ(sem.count(), 0u);
}

// ---------------------------------------------------------------- queue order

// A thread that takes the lock (write or read) when started and logs the order.
struct Taker {
  std::thread t;
  std::atomic<bool> got{false}, release{false};
  Taker(RwSem& sem, bool write, std::atomic<int>& clock, int* order) {
    t = std::thread([&sem, write, &clock, order, this] {
      if (write) sem.LockWrite();
      else sem.LockRead();
      *order = clock.fetch_add(1);
      got = true;
      while (!release) std::this_thread::yield();
      if (write) sem.UnlockWrite();
      else sem.UnlockRead();
    });
  }
  ~Taker() {
    if (t.joinable()) Release();
  }
  void Release() {
    release = true;
    t.join();
  }
};

// Main holds write; W2, then R1 and R2 queue. The head writer gets the lock first
// (readers behind it wait); when it leaves, both readers are granted together.
TEST(RwSem, HeadWriterFirstThenReaderBatch) {
  RwSem sem = MakeSem();
  std::atomic<int> clock{0};
  int ow = -1, o1 = -1, o2 = -1;
  sem.LockWrite();
  Taker w2(sem, true, clock, &ow);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
  Taker r1(sem, false, clock, &o1);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 2; }));
  Taker r2(sem, false, clock, &o2);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 3; }));
  EXPECT_TRUE(sem.count() & RwSem::kFlagWaiters);
  sem.UnlockWrite();
  ASSERT_TRUE(WaitUntil([&] { return w2.got.load(); }));
  EXPECT_FALSE(r1.got.load());
  EXPECT_FALSE(r2.got.load());
  EXPECT_EQ(sem.waiters(), 2u);
  w2.Release();
  // Both readers hold it at the same time (one batch): neither releases before both got it.
  ASSERT_TRUE(WaitUntil([&] { return r1.got.load() && r2.got.load(); }));
  EXPECT_EQ(Readers(sem), 2u);
  EXPECT_EQ(sem.count() & RwSem::kFlagWaiters, 0u) << "queue empty: waiters bit cleared";
  r1.Release();
  r2.Release();
  EXPECT_EQ(ow, 0);
  EXPECT_GT(o1, ow);
  EXPECT_GT(o2, ow);
  EXPECT_EQ(sem.count(), 0u);
  EXPECT_GE(sem.events().wake_reader, 2u);
}

// ---------------------------------------------------------------- handoff

// With a zero wait timeout, a queued writer that finds the lock (read-)held asks for
// the handoff at its first try; the bit stays until it gets the lock, and readers that
// come meanwhile queue behind it instead of joining the readers that hold it.
TEST(RwSem, HandoffBitSetByWaitingWriterAndClearedOnAcquire) {
  RwSem sem = MakeSem(/*timeout_ns=*/0);
  std::atomic<int> clock{0};
  int ow = -1, orr = -1;
  sem.LockRead();
  Taker w(sem, true, clock, &ow);
  ASSERT_TRUE(WaitUntil([&] { return (sem.count() & RwSem::kFlagHandoff) != 0; }));
  EXPECT_EQ(sem.events().wlock_handoff, 1u);
  EXPECT_EQ(sem.waiters(), 1u);
  Taker r(sem, false, clock, &orr);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 2; }));
  EXPECT_EQ(Readers(sem), 1u) << "the new reader must queue, not join";
  sem.UnlockRead();
  ASSERT_TRUE(WaitUntil([&] { return w.got.load(); }));
  EXPECT_EQ(sem.count() & RwSem::kFlagHandoff, 0u) << "handoff cleared when the writer took the lock";
  EXPECT_FALSE(r.got.load());
  w.Release();
  ASSERT_TRUE(WaitUntil([&] { return r.got.load(); }));
  r.Release();
  EXPECT_LT(ow, orr);
  EXPECT_EQ(sem.count(), 0u);
}

// The handoff stops lock stealing: a reader that lets go and takes the lock again at
// once (it would steal it: no other reader, no writer holds it) must queue behind the
// writer that set the handoff, so the writer has had the lock when the reader is back.
TEST(RwSem, HandoffStopsReaderFromStealingTheLockBack) {
  RwSem sem = MakeSem(/*timeout_ns=*/0);
  std::atomic<bool> w_got{false};
  sem.LockRead();
  std::thread w([&] {
    sem.LockWrite();
    w_got = true;
    sem.UnlockWrite();
  });
  ASSERT_TRUE(WaitUntil([&] { return (sem.count() & RwSem::kFlagHandoff) != 0; }));
  sem.UnlockRead();
  sem.LockRead();
  const bool writer_first = w_got.load();
  sem.UnlockRead();
  w.join();
  EXPECT_TRUE(writer_first) << "the reader stole the lock back from the writer that asked for the handoff";
  EXPECT_EQ(sem.count(), 0u);
}

// The readers queued behind a write holder are granted the lock by its up_write
// itself: a writer that unlocks and locks again at once comes after them.
TEST(RwSem, WriteUnlockGrantsQueuedReadersBeforeTheWriterIsBack) {
  RwSem sem = MakeSem();
  std::atomic<int> clock{0};
  int o1 = -1, o2 = -1;
  sem.LockWrite();
  Taker r1(sem, false, clock, &o1);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
  Taker r2(sem, false, clock, &o2);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 2; }));
  sem.UnlockWrite();
  EXPECT_EQ(Readers(sem), 2u) << "up_write did not grant the queued readers";
  EXPECT_EQ(sem.waiters(), 0u);
  r1.release = true;
  r2.release = true;
  sem.LockWrite();
  EXPECT_TRUE(r1.got.load() && r2.got.load());
  sem.UnlockWrite();
}

// With the default timeout nothing is handed off while the waiter is young.
TEST(RwSem, NoHandoffBeforeTimeout) {
  RwSem sem = MakeSem(/*timeout_ns=*/60'000'000'000ull);
  std::atomic<int> clock{0};
  int ow = -1;
  sem.LockRead();
  Taker w(sem, true, clock, &ow);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
  EXPECT_EQ(sem.count() & RwSem::kFlagHandoff, 0u);
  sem.UnlockRead();
  ASSERT_TRUE(WaitUntil([&] { return w.got.load(); }));
  w.Release();
  EXPECT_EQ(sem.events().wlock_handoff, 0u);
}

// Progress under stress: reader threads re-taking the lock back to back (stealing it
// whenever it is free) do not keep a writer out; its acquisitions all complete while
// they run (the mechanism: the handoff, tested above).
TEST(RwSem, WriterNotStarvedByReaderStream) {
  Shared s;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; i++)
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        ReadStep(s);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  ASSERT_TRUE(WaitUntil([&] { return reads.load() > 1000; }));
  const int kWrites = Iterations(300);
  std::atomic<int> done{0};
  std::thread writer([&] {
    for (int i = 0; i < kWrites; i++) {
      WriteStep(s);
      done++;
    }
  });
  const bool finished = WaitUntil([&] { return done.load() == kWrites; });
  stop = true;
  writer.join();
  for (auto& t : readers) t.join();
  ASSERT_TRUE(finished) << "writer starved: " << done.load() << " of " << kWrites;
  EXPECT_EQ(s.violations.load(), 0);
  s.sem.LockRead();
  EXPECT_EQ(s.counter, static_cast<uint64_t>(kWrites));
  s.sem.UnlockRead();
  const RwSemEvents e = s.sem.events();
  std::printf("reads %llu; writer: opt_lock %llu sleeps %llu handoffs %llu; reader steals %llu\n",
              static_cast<unsigned long long>(reads.load()), static_cast<unsigned long long>(e.opt_lock),
              static_cast<unsigned long long>(e.sleep_writer), static_cast<unsigned long long>(e.wlock_handoff),
              static_cast<unsigned long long>(e.rlock_steal));
}

// Progress under stress: writer threads re-taking the lock back to back (spinning
// writers steal it from the queue) do not keep a reader out (the mechanisms: up_write
// grants queued readers, and the reader handoff).
TEST(RwSem, ReadersNotStarvedByWriters) {
  Shared s;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 2; i++)
    writers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        WriteStep(s);
        writes.fetch_add(1, std::memory_order_relaxed);
      }
    });
  ASSERT_TRUE(WaitUntil([&] { return writes.load() > 1000; }));
  const int kReads = Iterations(300);
  std::atomic<int> done{0};
  std::thread reader([&] {
    for (int i = 0; i < kReads; i++) {
      ReadStep(s);
      done++;
    }
  });
  const bool finished = WaitUntil([&] { return done.load() == kReads; });
  stop = true;
  reader.join();
  for (auto& t : writers) t.join();
  ASSERT_TRUE(finished) << "reader starved: " << done.load() << " of " << kReads;
  EXPECT_EQ(s.violations.load(), 0);
  s.sem.LockRead();
  EXPECT_EQ(s.counter, writes.load());
  s.sem.UnlockRead();
  const RwSemEvents e = s.sem.events();
  std::printf("writes %llu; writers: opt_lock %llu sleeps %llu; reader handoffs %llu sleeps %llu\n",
              static_cast<unsigned long long>(writes.load()), static_cast<unsigned long long>(e.opt_lock),
              static_cast<unsigned long long>(e.sleep_writer), static_cast<unsigned long long>(e.rlock_handoff),
              static_cast<unsigned long long>(e.sleep_reader));
}

// ---------------------------------------------------------------- downgrade

// After downgrade_write: the reader queued during the write section is granted while
// the downgrader still reads, a writer stays out until both read locks are gone.
TEST(RwSem, DowngradeAdmitsQueuedReadersNotWriters) {
  RwSem sem = MakeSem();
  std::atomic<int> clock{0};
  int orr = -1, ow = -1;
  sem.LockWrite();
  Taker r(sem, false, clock, &orr);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
  sem.DowngradeWrite();
  ASSERT_TRUE(WaitUntil([&] { return r.got.load(); })) << "queued reader not woken by the downgrade";
  EXPECT_EQ(Readers(sem), 2u);
  EXPECT_EQ(sem.count() & RwSem::kWriterLocked, 0u);
  sem.AssertHeld();
  Taker w(sem, true, clock, &ow);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
  EXPECT_FALSE(w.got.load());
  sem.UnlockRead();
  EXPECT_FALSE(w.got.load()) << "a writer got in while a reader still holds the lock";
  r.Release();
  ASSERT_TRUE(WaitUntil([&] { return w.got.load(); }));
  w.Release();
  EXPECT_EQ(orr, 0);
  EXPECT_EQ(ow, 1);
  EXPECT_EQ(sem.count(), 0u);
}

// A writer at the head of the queue keeps its place: the downgrade wakes only readers
// at the head, so the reader queued behind the writer waits for it.
TEST(RwSem, DowngradeKeepsHeadWriterFirst) {
  RwSem sem = MakeSem();
  std::atomic<int> clock{0};
  int ow = -1, orr = -1;
  sem.LockWrite();
  Taker w(sem, true, clock, &ow);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
  Taker r(sem, false, clock, &orr);
  ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 2; }));
  sem.DowngradeWrite();
  EXPECT_EQ(sem.waiters(), 2u);
  EXPECT_FALSE(r.got.load());
  sem.UnlockRead();
  ASSERT_TRUE(WaitUntil([&] { return w.got.load(); }));
  EXPECT_FALSE(r.got.load());
  w.Release();
  ASSERT_TRUE(WaitUntil([&] { return r.got.load(); }));
  r.Release();
  EXPECT_LT(ow, orr);
  EXPECT_EQ(sem.count(), 0u);
}

// A new reader joins a downgraded holder on the fast path (no waiter, no writer bit).
TEST(RwSem, DowngradedLockSharesWithNewReaders) {
  RwSem sem = MakeSem();
  sem.LockWrite();
  sem.AssertWriteHeld();
  sem.DowngradeWrite();
  EXPECT_EQ(sem.count(), RwSem::kReaderBias);
  std::thread r([&] {
    sem.LockRead();
    sem.UnlockRead();
  });
  r.join();
  sem.UnlockRead();
  EXPECT_EQ(sem.count(), 0u);
}

// ---------------------------------------------------------------- lock stats

struct LockStatDelta {
  StatsSnapshot base = ReadStats();
  LockStatCell Get(LockMode m) const { return ReadStats().Minus(base).lock(LockClass::kMmapLock, m); }
};

TEST(RwSemStats, UncontendedAcquisitionsCountNoContention) {
  RwSem sem = MakeSem();
  LockStatDelta d;
  for (int i = 0; i < 10; i++) {
    sem.LockRead();
    sem.UnlockRead();
  }
  for (int i = 0; i < 5; i++) {
    sem.LockWrite();
    sem.UnlockWrite();
  }
  sem.LockWrite();
  sem.DowngradeWrite();  // ends the write hold, counts an uncontended read acquisition
  sem.UnlockRead();
  const LockStatCell r = d.Get(LockMode::kRead), w = d.Get(LockMode::kWrite);
  EXPECT_EQ(r.acquisitions, 11u);
  EXPECT_EQ(r.contentions, 0u);
  EXPECT_EQ(w.acquisitions, 6u);
  EXPECT_EQ(w.contentions, 0u);
  EXPECT_EQ(w.wait_ns_total, 0u);
}

// A writer that waits for a reader: one contended write acquisition with a wait time;
// a reader that waits for a writer: one contended read acquisition.
TEST(RwSemStats, WaitingAcquisitionsAreContended) {
  if (!LockStatsEnabled()) GTEST_SKIP() << "lock timing off";
  RwSem sem = MakeSem();
  std::atomic<int> clock{0};
  int o = -1;
  LockStatDelta d;
  sem.LockRead();
  {
    Taker w(sem, true, clock, &o);
    ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
    sem.UnlockRead();
    ASSERT_TRUE(WaitUntil([&] { return w.got.load(); }));
    w.Release();
  }
  sem.LockWrite();
  {
    Taker r(sem, false, clock, &o);
    ASSERT_TRUE(WaitUntil([&] { return sem.waiters() == 1; }));
    sem.UnlockWrite();
    ASSERT_TRUE(WaitUntil([&] { return r.got.load(); }));
    r.Release();
  }
  const LockStatCell r = d.Get(LockMode::kRead), w = d.Get(LockMode::kWrite);
  EXPECT_EQ(w.acquisitions, 2u);
  EXPECT_EQ(w.contentions, 1u);
  EXPECT_GT(w.wait_ns_total, 0u);
  EXPECT_EQ(r.acquisitions, 2u);
  EXPECT_EQ(r.contentions, 1u);
  EXPECT_GT(r.wait_ns_total, 0u);
}

}  // namespace
}  // namespace vmspace
