// SPDX-License-Identifier: Apache-2.0
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
#include <memory>
#include <thread>
#include <vector>

#include "engine/stats.h"
#include "test_util.h"

namespace vmspace {
namespace {

using testing_util::Iterations;

using testing_util::WaitUntil;

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

// A thread that takes the lock (write or read) when started, notes when it got it on
// the shared clock, and holds it until released.
struct Taker {
  std::thread t;
  std::atomic<bool> got{false}, release{false};
  int order = -1;  // written before `got`
  Taker(RwSem& sem, bool write, std::atomic<int>& clock) {
    t = std::thread([&sem, write, &clock, this] {
      if (write) sem.LockWrite();
      else sem.LockRead();
      order = clock.fetch_add(1);
      got = true;
      while (!release) std::this_thread::yield();
      if (write) sem.UnlockWrite();
      else sem.UnlockRead();
    });
  }
  ~Taker() {
    if (t.joinable()) Release();
  }
  bool Got() const { return got.load(); }
  void Release() {
    release = true;
    t.join();
  }
};

// The takers of one test: Queue() starts one and waits until it sleeps in the queue,
// so they queue in the order they are started.
struct Takers {
  RwSem& sem;
  std::atomic<int> clock{0};
  std::vector<std::unique_ptr<Taker>> all;
  explicit Takers(RwSem& s) : sem(s) {}
  Taker& Start(bool write) {
    all.push_back(std::make_unique<Taker>(sem, write, clock));
    return *all.back();
  }
  Taker& Queue(bool write) {
    const size_t n = sem.waiters();
    Taker& t = Start(write);
    EXPECT_TRUE(WaitUntil([&] { return sem.waiters() == n + 1; })) << "taker never queued";
    return t;
  }
};
constexpr bool kW = true, kR = false;

// After the holder let go: the writer w gets the lock while the reader r still waits,
// then r, and the lock ends free.
void ExpectWriterBeforeReader(RwSem& sem, Taker& w, Taker& r) {
  ASSERT_TRUE(WaitUntil([&] { return w.Got(); }));
  EXPECT_FALSE(r.Got());
  w.Release();
  ASSERT_TRUE(WaitUntil([&] { return r.Got(); }));
  r.Release();
  EXPECT_LT(w.order, r.order);
  EXPECT_EQ(sem.count(), 0u);
}

// Main holds write; W2, then R1 and R2 queue. The head writer gets the lock first
// (readers behind it wait); when it leaves, both readers are granted together.
TEST(RwSem, HeadWriterFirstThenReaderBatch) {
  RwSem sem = MakeSem();
  const RwSemEvents before = sem.events();  // the counts are per lock class
  Takers q(sem);
  sem.LockWrite();
  Taker& w2 = q.Queue(kW);
  Taker& r1 = q.Queue(kR);
  Taker& r2 = q.Queue(kR);
  EXPECT_TRUE(sem.count() & RwSem::kFlagWaiters);
  sem.UnlockWrite();
  ASSERT_TRUE(WaitUntil([&] { return w2.Got(); }));
  EXPECT_FALSE(r1.Got());
  EXPECT_FALSE(r2.Got());
  EXPECT_EQ(sem.waiters(), 2u);
  w2.Release();
  // Both readers hold it at the same time (one batch): neither releases before both got it.
  ASSERT_TRUE(WaitUntil([&] { return r1.Got() && r2.Got(); }));
  EXPECT_EQ(Readers(sem), 2u);
  EXPECT_EQ(sem.count() & RwSem::kFlagWaiters, 0u) << "queue empty: waiters bit cleared";
  r1.Release();
  r2.Release();
  EXPECT_EQ(w2.order, 0);
  EXPECT_GT(r1.order, 0);
  EXPECT_GT(r2.order, 0);
  EXPECT_EQ(sem.count(), 0u);
  EXPECT_GE(sem.events().Minus(before).wake_reader, 2u);
}

// The readers queued behind a write holder are granted the lock by its up_write
// itself: a writer that unlocks and locks again at once comes after them.
TEST(RwSem, WriteUnlockGrantsQueuedReadersBeforeTheWriterIsBack) {
  RwSem sem = MakeSem();
  Takers q(sem);
  sem.LockWrite();
  Taker& r1 = q.Queue(kR);
  Taker& r2 = q.Queue(kR);
  sem.UnlockWrite();
  EXPECT_EQ(Readers(sem), 2u) << "up_write did not grant the queued readers";
  EXPECT_EQ(sem.waiters(), 0u);
  r1.release = true;
  r2.release = true;
  sem.LockWrite();
  EXPECT_TRUE(r1.Got() && r2.Got());
  sem.UnlockWrite();
}

// ---------------------------------------------------------------- handoff

// With a zero wait timeout, a queued writer that finds the lock (read-)held asks for
// the handoff at its first try; the bit stays until it gets the lock, and readers that
// come meanwhile queue behind it instead of joining the readers that hold it.
TEST(RwSem, HandoffBitSetByWaitingWriterAndClearedOnAcquire) {
  RwSem sem = MakeSem(/*timeout_ns=*/0);
  const RwSemEvents before = sem.events();
  Takers q(sem);
  sem.LockRead();
  Taker& w = q.Start(kW);
  ASSERT_TRUE(WaitUntil([&] { return (sem.count() & RwSem::kFlagHandoff) != 0; }));
  EXPECT_EQ(sem.events().Minus(before).wlock_handoff, 1u);
  EXPECT_EQ(sem.waiters(), 1u);
  Taker& r = q.Queue(kR);
  EXPECT_EQ(Readers(sem), 1u) << "the new reader must queue, not join";
  sem.UnlockRead();
  ASSERT_TRUE(WaitUntil([&] { return w.Got(); }));
  EXPECT_EQ(sem.count() & RwSem::kFlagHandoff, 0u) << "handoff cleared when the writer took the lock";
  ExpectWriterBeforeReader(sem, w, r);
}

// The handoff stops lock stealing: a reader that lets go and takes the lock again at
// once (it would steal it: no other reader, no writer holds it) must queue behind the
// writer that set the handoff, so the writer has had the lock when the reader is back.
TEST(RwSem, HandoffStopsReaderFromStealingTheLockBack) {
  RwSem sem = MakeSem(/*timeout_ns=*/0);
  const RwSemEvents before = sem.events();
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
  // The writer's thread has exited: its event counts stay in the class's sums.
  EXPECT_EQ(sem.events().Minus(before).wlock_handoff, 1u);
}

// With the default timeout nothing is handed off while the waiter is young.
TEST(RwSem, NoHandoffBeforeTimeout) {
  RwSem sem = MakeSem(/*timeout_ns=*/60'000'000'000ull);
  const RwSemEvents before = sem.events();
  Takers q(sem);
  sem.LockRead();
  Taker& w = q.Queue(kW);
  EXPECT_EQ(sem.count() & RwSem::kFlagHandoff, 0u);
  sem.UnlockRead();
  ASSERT_TRUE(WaitUntil([&] { return w.Got(); }));
  w.Release();
  EXPECT_EQ(sem.events().Minus(before).wlock_handoff, 0u);
}

// Progress under stress: two threads re-take the lock back to back in one mode while a
// third needs kOps acquisitions in the other; all of them complete while the two run.
// Returns the stream's acquisitions (the writes, when the stream writes).
uint64_t StreamAgainstOne(Shared& s, bool stream_writes, const char* what) {
  const RwSemEvents before = s.sem.events();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> stream_ops{0};
  std::vector<std::thread> stream;
  for (int i = 0; i < 2; i++)
    stream.emplace_back([&] {
      while (!stop.load(kRelaxed)) {
        if (stream_writes) WriteStep(s);
        else ReadStep(s);
        stream_ops.fetch_add(1, kRelaxed);
      }
    });
  EXPECT_TRUE(WaitUntil([&] { return stream_ops.load() > 1000; }));
  const int kOps = Iterations(300);
  std::atomic<int> done{0};
  std::thread one([&] {
    for (int i = 0; i < kOps; i++) {
      if (stream_writes) ReadStep(s);
      else WriteStep(s);
      done++;
    }
  });
  const bool finished = WaitUntil([&] { return done.load() == kOps; });
  stop = true;
  one.join();
  for (auto& t : stream) t.join();
  EXPECT_TRUE(finished) << what << " starved: " << done.load() << " of " << kOps;
  EXPECT_EQ(s.violations.load(), 0);
  const RwSemEvents e = s.sem.events().Minus(before);
  std::printf("%llu stream acquisitions; writers: opt_lock %llu sleeps %llu handoffs %llu; readers: steals %llu "
              "sleeps %llu handoffs %llu\n",
              static_cast<unsigned long long>(stream_ops.load()), static_cast<unsigned long long>(e.opt_lock),
              static_cast<unsigned long long>(e.sleep_writer), static_cast<unsigned long long>(e.wlock_handoff),
              static_cast<unsigned long long>(e.rlock_steal), static_cast<unsigned long long>(e.sleep_reader),
              static_cast<unsigned long long>(e.rlock_handoff));
  return stream_writes ? stream_ops.load() : static_cast<uint64_t>(kOps);
}

// Readers stealing the lock whenever it is free do not keep a writer out (the
// mechanism: the handoff, tested above).
TEST(RwSem, WriterNotStarvedByReaderStream) {
  Shared s;
  const uint64_t writes = StreamAgainstOne(s, /*stream_writes=*/false, "writer");
  s.sem.LockRead();
  EXPECT_EQ(s.counter, writes);
  s.sem.UnlockRead();
}

// Spinning writers stealing the lock from the queue do not keep a reader out (the
// mechanisms: up_write grants queued readers, and the reader handoff).
TEST(RwSem, ReadersNotStarvedByWriters) {
  Shared s;
  const uint64_t writes = StreamAgainstOne(s, /*stream_writes=*/true, "reader");
  s.sem.LockRead();
  EXPECT_EQ(s.counter, writes);
  s.sem.UnlockRead();
}

// ---------------------------------------------------------------- downgrade

// After downgrade_write: the reader queued during the write section is granted while
// the downgrader still reads, a writer stays out until both read locks are gone.
TEST(RwSem, DowngradeAdmitsQueuedReadersNotWriters) {
  RwSem sem = MakeSem();
  Takers q(sem);
  sem.LockWrite();
  Taker& r = q.Queue(kR);
  sem.DowngradeWrite();
  ASSERT_TRUE(WaitUntil([&] { return r.Got(); })) << "queued reader not woken by the downgrade";
  EXPECT_EQ(Readers(sem), 2u);
  EXPECT_EQ(sem.count() & RwSem::kWriterLocked, 0u);
  sem.AssertHeld();
  Taker& w = q.Queue(kW);
  EXPECT_FALSE(w.Got());
  sem.UnlockRead();
  EXPECT_FALSE(w.Got()) << "a writer got in while a reader still holds the lock";
  r.Release();
  ASSERT_TRUE(WaitUntil([&] { return w.Got(); }));
  w.Release();
  EXPECT_EQ(r.order, 0);
  EXPECT_EQ(w.order, 1);
  EXPECT_EQ(sem.count(), 0u);
}

// A writer at the head of the queue keeps its place: the downgrade wakes only readers
// at the head, so the reader queued behind the writer waits for it.
TEST(RwSem, DowngradeKeepsHeadWriterFirst) {
  RwSem sem = MakeSem();
  Takers q(sem);
  sem.LockWrite();
  Taker& w = q.Queue(kW);
  Taker& r = q.Queue(kR);
  sem.DowngradeWrite();
  EXPECT_EQ(sem.waiters(), 2u);
  EXPECT_FALSE(r.Got());
  sem.UnlockRead();
  ExpectWriterBeforeReader(sem, w, r);
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
  Takers q(sem);
  LockStatDelta d;
  sem.LockRead();
  Taker& w = q.Queue(kW);
  sem.UnlockRead();
  ASSERT_TRUE(WaitUntil([&] { return w.Got(); }));
  w.Release();
  sem.LockWrite();
  Taker& r = q.Queue(kR);
  sem.UnlockWrite();
  ASSERT_TRUE(WaitUntil([&] { return r.Got(); }));
  r.Release();
  const LockStatCell rd = d.Get(LockMode::kRead), wr = d.Get(LockMode::kWrite);
  EXPECT_EQ(wr.acquisitions, 2u);
  EXPECT_EQ(wr.contentions, 1u);
  EXPECT_GT(wr.wait_ns_total, 0u);
  EXPECT_EQ(rd.acquisitions, 2u);
  EXPECT_EQ(rd.contentions, 1u);
  EXPECT_GT(rd.wait_ns_total, 0u);
}

}  // namespace
}  // namespace vmspace
