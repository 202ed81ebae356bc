// The engine's call_rcu worker (sync/rcu.cc), checked by behaviour:
//  * a callback waits for a reader that was inside its read section when it was
//    queued, and runs once the reader leaves;
//  * the callbacks of one thread run in the order it queued them, those of many
//    threads all run, and RcuBarrier waits for every one queued before it;
//  * at most one grace period starts per kRcuGpIntervalUs under a constant stream;
//  * while callbacks keep coming the worker polls, and CallRcu wakes it only after it
//    stopped polling (kRcuIdlePolls);
//  * QSBR: a thread is online only inside the engine (an RcuEntry scope or a read
//    guard), so a grace period waits neither for a thread between engine calls nor for
//    one asleep on an engine lock, even while that lock's holder waits for the grace
//    period (the deadlock a sleeper left online would cause), but does wait for a
//    thread asleep inside a read section.
// Waiting for another thread uses WaitUntil: a hang is the failure, the bound generous.
#include "sync/rcu.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "sync/mutex.h"
#include "sync/rwsem.h"
#include "test_util.h"

namespace vmspace {
namespace {

using testing_util::WaitUntil;

struct Flag {
  rcu_head head;
  std::atomic<bool> ran{false};
  static void Set(rcu_head* h) {
    RcuCallbackBegin(h);
    reinterpret_cast<Flag*>(reinterpret_cast<char*>(h) - offsetof(Flag, head))->ran.store(true);
    RcuCallbackEnd();
  }
};

TEST(CallRcu, WaitsForAReaderInsideItsSection) {
  RcuThread();
  std::atomic<bool> inside{false}, leave{false};
  std::thread reader([&] {
    RcuThread();
    RcuReadGuard g;
    inside = true;
    while (!leave) std::this_thread::yield();
  });
  ASSERT_TRUE(WaitUntil([&] { return inside.load(); }));
  Flag f;
  const uint64_t gps = ReadRcuStats().grace_periods;
  CallRcu(&f.head, &Flag::Set);
  // The worker takes the callback within kRcuGpIntervalUs and waits for the reader:
  // many intervals later the callback has still not run, and no grace period ended.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(f.ran.load());
  EXPECT_EQ(ReadRcuStats().grace_periods, gps);
  EXPECT_EQ(ReadRcuStats().callbacks_pending, 1u);
  leave = true;
  reader.join();
  RcuBarrier();
  EXPECT_TRUE(f.ran.load());
  EXPECT_EQ(ReadRcuStats().callbacks_pending, 0u);
  EXPECT_GT(ReadRcuStats().grace_periods, gps);
}

struct Tagged {
  rcu_head head;
  int thread = 0, seq = 0;
  static std::mutex mu;
  static std::vector<std::pair<int, int>>* log;
  static void Record(rcu_head* h) {
    RcuCallbackBegin(h);
    auto* t = reinterpret_cast<Tagged*>(reinterpret_cast<char*>(h) - offsetof(Tagged, head));
    {
      std::lock_guard<std::mutex> l(mu);
      log->emplace_back(t->thread, t->seq);
    }
    RcuCallbackEnd();
  }
};
std::mutex Tagged::mu;
std::vector<std::pair<int, int>>* Tagged::log = nullptr;

TEST(CallRcu, RunsEachThreadsCallbacksInItsOrderAndBarrierWaitsForAll) {
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::pair<int, int>> log;
  Tagged::log = &log;
  std::vector<Tagged> items(kThreads * kEach);
  const RcuStats before = ReadRcuStats();
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      RcuThread();
      for (int i = 0; i < kEach; i++) {
        Tagged& x = items[t * kEach + i];
        x.thread = t;
        x.seq = i;
        CallRcu(&x.head, &Tagged::Record);
        if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      }
    });
  for (auto& t : ts) t.join();
  RcuBarrier();
  const RcuStats after = ReadRcuStats();
  {
    std::lock_guard<std::mutex> l(Tagged::mu);
    ASSERT_EQ(log.size(), static_cast<size_t>(kThreads * kEach));
    std::vector<int> next(kThreads, 0);
    for (auto [t, seq] : log) {
      ASSERT_EQ(seq, next[t]) << "thread " << t;
      next[t]++;
    }
  }
  EXPECT_EQ(after.callbacks_invoked - before.callbacks_invoked, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(after.callbacks_pending, 0u);
  // Batched: far fewer grace periods than callbacks.
  EXPECT_GE(after.grace_periods - before.grace_periods, 1u);
  EXPECT_LT(after.grace_periods - before.grace_periods, static_cast<uint64_t>(kThreads * kEach / 10));
  Tagged::log = nullptr;
}

TEST(CallRcu, StartsAtMostOneGracePeriodPerInterval) {
  RcuThread();
  // A constant stream: each callback queued as soon as the previous one ran.
  constexpr int kCallbacks = 100;
  std::vector<Flag> flags(kCallbacks);
  const uint64_t gps = ReadRcuStats().grace_periods;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& f : flags) {
    CallRcu(&f.head, &Flag::Set);
    ASSERT_TRUE(WaitUntil([&] { return f.ran.load(); }));
  }
  RcuBarrier();  // the last grace period is counted with its callbacks
  const double elapsed_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t n = ReadRcuStats().grace_periods - gps;
  EXPECT_EQ(n, static_cast<uint64_t>(kCallbacks));  // each callback waited for one of its own
  // 100 grace periods took at least 99 intervals.
  EXPECT_GE(elapsed_us, (kCallbacks - 1) * static_cast<double>(kRcuGpIntervalUs));
}

TEST(CallRcu, WakesTheWorkerOnlyAfterItStoppedPolling) {
  RcuThread();
  RcuBarrier();
  // Callbacks 2 ms apart, each queued after the previous one ran: the worker finds its
  // queue empty after every grace period and polls it again within kRcuGpIntervalUs,
  // well inside its kRcuIdlePolls, so no CallRcu has to wake it (the first may, if the
  // worker was idle before). A worker that slept after every empty queue would be
  // woken ~30 times.
  constexpr int kCallbacks = 30;
  std::vector<Flag> flags(kCallbacks);
  const uint64_t w0 = ReadRcuStats().worker_wakeups;
  for (auto& f : flags) {
    CallRcu(&f.head, &Flag::Set);
    ASSERT_TRUE(WaitUntil([&] { return f.ran.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_LE(ReadRcuStats().worker_wakeups - w0, 3u);
  // Idle far longer than kRcuIdlePolls intervals: the worker sleeps, and the next
  // CallRcu wakes it, once.
  std::this_thread::sleep_for(std::chrono::milliseconds(30 * kRcuIdlePolls * kRcuGpIntervalUs / 1000));
  const uint64_t w1 = ReadRcuStats().worker_wakeups;
  Flag last;
  CallRcu(&last.head, &Flag::Set);
  ASSERT_TRUE(WaitUntil([&] { return last.ran.load(); }));
  EXPECT_EQ(ReadRcuStats().worker_wakeups - w1, 1u);
}

// True while the calling thread is online for liburcu (a grace period waits for it).
bool Online() { return urcu_qsbr_read_ongoing() != 0; }

TEST(RcuQsbr, AThreadIsOnlineOnlyInsideTheEngine) {
  RcuThread();
  EXPECT_FALSE(Online());  // registered offline
  {
    RcuEntry e;
    EXPECT_TRUE(Online());
    {
      RcuEntry nested;
      RcuSleep s;
      EXPECT_FALSE(Online());  // asleep in the engine, outside a read section
    }
    EXPECT_TRUE(Online());  // the outer scope is still open
    {
      RcuReadGuard g;
      RcuSleep s;
      EXPECT_TRUE(Online());  // asleep in a read section: stays online
    }
    EXPECT_TRUE(Online());
  }
  EXPECT_FALSE(Online());
  {
    RcuReadGuard g;  // a read guard alone brings the thread online
    EXPECT_TRUE(Online());
  }
  EXPECT_FALSE(Online());
  // A public call returns offline.
  FrameAllocator frames(64ull << 20);
  {
    AddressSpace as(frames);
    ASSERT_TRUE(as.Mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).ok());
    EXPECT_FALSE(Online());
  }
  RcuBarrier();
}

// Runs SynchronizeRcu on its own thread; true if it returned within the bound. On
// false the caller must release what holds the grace period up, then join `t`.
bool GracePeriodEnds(std::thread& t, std::atomic<bool>& done) {
  t = std::thread([&] {
    SynchronizeRcu();
    done = true;
  });
  return WaitUntil([&] { return done.load(); });
}

TEST(RcuQsbr, AThreadBetweenEngineCallsHoldsNoGracePeriod) {
  FrameAllocator frames(64ull << 20);
  AddressSpace as(frames);
  std::atomic<bool> called{false}, leave{false};
  std::thread user([&] {
    EXPECT_TRUE(as.Mmap(0, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).ok());
    called = true;
    while (!leave) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // outside the engine
  });
  ASSERT_TRUE(WaitUntil([&] { return called.load(); }));
  std::thread gp;
  std::atomic<bool> done{false};
  EXPECT_TRUE(GracePeriodEnds(gp, done));
  leave = true;
  user.join();
  gp.join();
}

TEST(RcuQsbr, ASleeperOnAnEngineLockHoldsNoGracePeriodItsHolderWaitsFor) {
  Mutex mu{LockRank::kRcuQueue};
  RwSem sem{LockClass::kMmapLock, LockRank::kMmapLock};
  std::atomic<int> inside{0};
  sem.LockWrite();
  mu.Lock();
  // Two threads in the engine (online), then asleep on the mutex and the rwsem.
  std::thread on_mutex([&] {
    RcuEntry e;
    inside++;
    mu.Lock();
    mu.Unlock();
  });
  std::thread on_rwsem([&] {
    RcuEntry e;
    inside++;
    sem.LockRead();
    sem.UnlockRead();
  });
  ASSERT_TRUE(WaitUntil([&] { return inside.load() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let them go to sleep
  // The holder waits for a grace period (as truncate's SynchronizeRcu under i_rwsem):
  // it ends although both sleepers are still inside RcuEntry scopes.
  std::thread gp;
  std::atomic<bool> done{false};
  EXPECT_TRUE(GracePeriodEnds(gp, done));
  mu.Unlock();
  sem.UnlockWrite();
  on_mutex.join();
  on_rwsem.join();
  gp.join();
}

TEST(RcuQsbr, ASleeperInsideAReadSectionHoldsTheGracePeriod) {
  Mutex mu{LockRank::kRcuQueue};
  std::atomic<bool> inside{false};
  mu.Lock();
  std::thread reader([&] {
    RcuReadGuard g;
    inside = true;
    mu.Lock();  // asleep in a read section: stays online
    mu.Unlock();
  });
  ASSERT_TRUE(WaitUntil([&] { return inside.load(); }));
  std::atomic<bool> done{false};
  std::thread gp([&] {
    SynchronizeRcu();
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());  // the reader's section has not ended
  mu.Unlock();
  reader.join();
  EXPECT_TRUE(WaitUntil([&] { return done.load(); }));
  gp.join();
}

}  // namespace
}  // namespace vmspace
