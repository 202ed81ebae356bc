// SPDX-License-Identifier: Apache-2.0
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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/profile.h"
#include "engine/stats.h"
#include "sync/mutex.h"
#include "sync/rwsem.h"
#include "profiles.h"
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

/// A Flag that also records when its callback ran (steady_clock, ns).
struct TimedFlag {
  rcu_head head;
  std::atomic<bool> ran{false};
  std::atomic<int64_t> ran_ns{0};
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static void Set(rcu_head* h) {
    RcuCallbackBegin(h);
    auto* f = reinterpret_cast<TimedFlag*>(reinterpret_cast<char*>(h) - offsetof(TimedFlag, head));
    f->ran_ns.store(Now());
    f->ran.store(true);
    RcuCallbackEnd();
  }
};

TEST(CallRcu, WakesTheWorkerOnlyAfterItStoppedPolling) {
  RcuThread();
  RcuBarrier();
  // Callbacks ~2 ms apart, each queued after the previous one ran: after running one,
  // the worker polls its queue once per kRcuGpIntervalUs and sleeps only after
  // kRcuIdlePolls empty polls, the first at or after the callback ran and the others
  // kRcuGpIntervalUs apart, so at least (kRcuIdlePolls - 1) * kRcuGpIntervalUs of wall
  // time however loaded the machine is (each interval is a sleep of at least that
  // long). So a CallRcu made less than that after the previous callback ran finds
  // the worker polling and must not wake it. What a loaded machine changes is only how
  // long this thread takes between the two: each gap is measured from the callback's
  // own timestamp to the return of the next CallRcu (an upper bound of the real gap),
  // and only the calls whose gap may have let the worker sleep may wake it, plus the
  // first (the worker may have been asleep before). A worker that slept after every
  // empty queue would be woken at every call.
  constexpr int kCallbacks = 30;
  constexpr int64_t kWindowNs = int64_t{kRcuIdlePolls - 1} * kRcuGpIntervalUs * 1000;
  std::vector<TimedFlag> flags(kCallbacks);
  const uint64_t w0 = ReadRcuStats().worker_wakeups;
  uint64_t may_wake = 1;
  for (int i = 0; i < kCallbacks; i++) {
    CallRcu(&flags[i].head, &TimedFlag::Set);
    if (i > 0 && TimedFlag::Now() - flags[i - 1].ran_ns.load() >= kWindowNs) may_wake++;
    ASSERT_TRUE(WaitUntil([&] { return flags[i].ran.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const uint64_t woken = ReadRcuStats().worker_wakeups - w0;
  EXPECT_LE(woken, may_wake) << "calls made while the worker may have slept: " << may_wake;
  // Idle far longer than kRcuIdlePolls intervals: the worker sleeps, and the next
  // CallRcu wakes it, once.
  std::this_thread::sleep_for(std::chrono::milliseconds(30 * kRcuIdlePolls * kRcuGpIntervalUs / 1000));
  const uint64_t w1 = ReadRcuStats().worker_wakeups;
  TimedFlag last;
  CallRcu(&last.head, &TimedFlag::Set);
  ASSERT_TRUE(WaitUntil([&] { return last.ran.load(); }));
  EXPECT_EQ(ReadRcuStats().worker_wakeups - w1, 1u);
}

/// A thread inside an RCU read section from construction until Leave(): it holds up
/// every grace period that starts meanwhile.
class HeldReader {
 public:
  /// `first` runs inside the read section before it is held (e.g. an engine call on a
  /// space, which makes the thread one of the space's readers).
  explicit HeldReader(std::function<void()> first = {})
      : first_(std::move(first)), t_([this] {
          RcuReadGuard g;
          if (first_) first_();
          inside_ = true;
          while (!leave_) std::this_thread::yield();
        }) {
    EXPECT_TRUE(WaitUntil([&] { return inside_.load(); }));
  }
  ~HeldReader() { Leave(); }
  void Leave() {
    leave_ = true;
    if (t_.joinable()) t_.join();
  }

 private:
  std::atomic<bool> inside_{false}, leave_{false};
  std::function<void()> first_;
  std::thread t_;  // last: starts once the flags and first_ exist
};

TEST(RcuPoll, ACookieEndsOnceEveryThreadOnlineAtItsStartHasLeft) {
  RcuThread();
  HeldReader early;
  const uint64_t cookie = RcuStartPoll();
  HeldReader late;  // online after the start: does not hold the grace period up
  for (int i = 0; i < 20; i++) {
    EXPECT_FALSE(RcuPollState(cookie, true));  // `early` is still in its section
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  early.Leave();
  EXPECT_TRUE(WaitUntil([&] { return RcuPollState(cookie, true); }));
  EXPECT_TRUE(RcuPollState(cookie, false));  // what the scan found stands
}

TEST(RcuPoll, OneGracePeriodAtATimeAndTheNextStartsWhenItEnds) {
  RcuThread();
  RcuBarrier();
  SynchronizeRcu();  // every grace period started so far has ended, and a scan saw it
  HeldReader reader;
  const uint64_t c1 = RcuStartPoll();  // starts one (any before it has ended: no reader then)
  const uint64_t c2 = RcuStartPoll();  // c1 runs: c2 is the next, not started yet
  const uint64_t c3 = RcuStartPoll();  // still c1 running: the same next one
  EXPECT_EQ(c2, c1 + 2);
  EXPECT_EQ(c3, c2);
  EXPECT_FALSE(RcuPollState(c1, true));
  reader.Leave();
  EXPECT_TRUE(WaitUntil([&] { return RcuPollState(c1, true); }));
  // c1 ended: a poll starts c2, and a later one finds it ended (nobody is online).
  EXPECT_TRUE(WaitUntil([&] { return RcuPollState(c2, true); }));
}

TEST(RcuPoll, ThreadsThatComeAndGoReuseTheirReaderSlots) {
  RcuThread();
  const int before = rcu_internal::reader_slots.load();
  // Twice as many threads as there are slots, one after another.
  for (int i = 0; i < 2 * rcu_internal::kMaxRcuThreads / 64; i++) {
    std::vector<std::thread> ts;
    for (int k = 0; k < 64; k++)
      ts.emplace_back([] {
        RcuEntry e;
        EXPECT_TRUE(RcuOnline());
      });
    for (auto& t : ts) t.join();
  }
  EXPECT_LE(rcu_internal::reader_slots.load(), before + 64);
  SynchronizeRcu();  // no exited thread holds a grace period up
}

// n seed-004 rounds (mmap of 3 pages, munmap) on `as`; returns the most bytes of kind
// `k` charged to `frames`' budget after any of them.
int64_t ChurnRounds(AddressSpace& as, FrameAllocator& frames, int n, MemKind k) {
  int64_t most = 0;
  for (int i = 0; i < n; i++) {
    const uint64_t a = as.Mmap(0, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
    EXPECT_NE(a, 0u);
    EXPECT_TRUE(as.Munmap(a, 3 * 4096).ok());
    most = std::max(most, frames.budget().usage(k));
  }
  return most;
}

TEST(PolledGathers, ASpaceFreesWhatItRetiredItselfAndCallRcuTakesWhatWaitsTooLong) {
  RcuThread();
  FrameAllocator frames(64ull << 20);
  const SpaceOptions opts = testing_profiles::ProfileOptions("linux-6.15");  // RCU maple tree
  auto as = std::make_unique<AddressSpace>(frames, opts);
  for (int i = 0; i < 64; i++)  // a tree of some height: each round replaces nodes
    ASSERT_TRUE(as->Mmap(0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS).ok());
  auto queued = [] {
    const RcuStats s = ReadRcuStats();
    return s.callbacks_invoked + s.callbacks_pending;
  };
  auto rounds = [&](int n) { return ChurnRounds(*as, frames, n, MemKind::kIndexNodes); };
  RcuBarrier();
  const uint64_t q0 = queued();
  const StatsSnapshot s0 = ReadStats();
  const uint64_t gp0 = rcu_internal::rcu_state.gp_seq.load();
  const int64_t sole_most = rounds(20000);
  // This thread is the only one that ever entered the space: the nodes each call
  // retired went back into the space's node cache at its next call (at least one reuse
  // per call after the first), with no gather, no grace period and no call_rcu.
  const StatsSnapshot d0 = ReadStats().Minus(s0);
  EXPECT_GE(d0.event(Event::kRcuSoleReuses), 2 * 20000u - 1);
  EXPECT_EQ(d0.event(Event::kRcuPolledGathers), 0u);
  EXPECT_EQ(rcu_internal::rcu_state.gp_seq.load(), gp0);
  EXPECT_EQ(queued(), q0);
  // A second thread enters the space (an engine call): the space is shared for good,
  // so its retired nodes wait for grace periods in gathers of 256, each freed by a
  // later write section of the space, and none goes through call_rcu; at most
  // kMaxPolledGathers gathers wait beside the live tree.
  std::thread([&] { EXPECT_GT(as->CountVmas(0, ~0ull, 1), 0u); }).join();
  const StatsSnapshot s1 = ReadStats();
  const int64_t most = rounds(20000);
  const StatsSnapshot d1 = ReadStats().Minus(s1);
  EXPECT_GT(d1.event(Event::kRcuPolledGathers), 20000u / 256);
  // (once: the nodes this thread retired in its last call as the only reader)
  EXPECT_LE(d1.event(Event::kRcuSoleReuses), 1u);
  EXPECT_GT(rcu_internal::rcu_state.gp_seq.load(), gp0);
  EXPECT_EQ(queued(), q0);
  EXPECT_LT(most, 10 * 256 * 256);
  EXPECT_LT(sole_most, most);  // the sole space kept no gathers of nodes in flight
  // A reader of the space that stays in its read section holds every grace period
  // up: the space keeps kMaxPolledGathers gathers and hands the older ones to call_rcu.
  HeldReader reader([&] { as->CountVmas(0, ~0ull, 1); });
  rounds(20000);
  const uint64_t q2 = queued();
  EXPECT_GT(q2, q0 + 10);
  reader.Leave();
  // Idle now, the space hands its waiting gathers to call_rcu when asked to flush
  // deferred frees (the daemon does, periodically): no later write section will.
  frames.FlushDeferredFrees();
  EXPECT_GT(queued(), q2);
  RcuBarrier();
  testing_util::ExpectAllFramesFreed(as, frames);
}

// linux-6.6 (the separately allocated vma_lock, VMAs freed through call_rcu): a space
// that only its own thread has entered takes its detached VMAs back into its VMA cache
// at that thread's next call, as its index nodes, with no RCU batch and no grace
// period; once a second thread has entered it, its VMAs wait for grace periods again
// (kept in flight, so more of them are charged at once).
TEST(PolledGathers, ASoleSpaceReusesItsDetachedVmasInTheRwsemForm) {
  RcuThread();
  FrameAllocator frames(64ull << 20);
  const SpaceOptions opts = testing_profiles::ProfileOptions("linux-6.6");
  auto as = std::make_unique<AddressSpace>(frames, opts);
  for (int i = 0; i < 64; i++) ASSERT_TRUE(as->Mmap(0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS).ok());
  auto rounds = [&](int n) { return ChurnRounds(*as, frames, n, MemKind::kVmas); };
  RcuBarrier();
  const int64_t one = frames.budget().usage(MemKind::kVmas);  // the 64 pages, merged: one VMA
  ASSERT_GT(one, 0);
  const StatsSnapshot s0 = ReadStats();
  const uint64_t gp0 = rcu_internal::rcu_state.gp_seq.load();
  const int64_t sole_most = rounds(5000);
  EXPECT_GE(ReadStats().Minus(s0).event(Event::kRcuSoleReuses), 2 * 5000u - 1);
  EXPECT_EQ(rcu_internal::rcu_state.gp_seq.load(), gp0);
  // After each munmap: the merged VMA and the one it detached, which the next mmap
  // takes back before it allocates: nothing else in flight.
  EXPECT_EQ(sole_most, 2 * one);
  std::thread([&] { EXPECT_GT(as->CountVmas(0, ~0ull, 1), 0u); }).join();
  const StatsSnapshot s1 = ReadStats();
  const int64_t most = rounds(5000);
  EXPECT_LE(ReadStats().Minus(s1).event(Event::kRcuSoleReuses), 1u);
  EXPECT_GT(most, sole_most + 32 * one);  // batches of 64 VMAs wait for their grace periods
  EXPECT_GT(rcu_internal::rcu_state.gp_seq.load(), gp0);
  as.reset();
  RcuBarrier();
  EXPECT_EQ(frames.budget().usage(MemKind::kVmas), 0);
  EXPECT_EQ(frames.budget().usage(MemKind::kIndexNodes), 0);
}

// The single-reader rule under a race: a space's own thread churns (its retired nodes
// and VMAs reused without grace periods) while a second thread enters it and faults on
// a mapping that stays, through lock_vma_under_rcu and the tree. The second thread's
// first call marks the space shared before it reads anything, so it never finds a
// reused node or VMA: every access succeeds and the tree validates.
TEST(PolledGathers, ASecondThreadEnteringASoleSpaceReadsOnlyLiveNodes) {
  for (const char* profile : {"linux-6.6", "linux-6.15"}) {
    RcuThread();
    FrameAllocator frames(64ull << 20);
    const SpaceOptions opts = testing_profiles::ProfileOptions(profile);
    auto as = std::make_unique<AddressSpace>(frames, opts);
    const uint64_t stay = as->Mmap(0, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
    ASSERT_NE(stay, 0u);
    std::atomic<bool> go{false}, done{false};
    std::atomic<uint64_t> reads{0};
    std::thread owner([&] {
      for (int i = 0; i < 64; i++) ASSERT_TRUE(as->Mmap(0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS).ok());
      for (int i = 0; i < 20000; i++) {
        if (i == 2000) go = true;
        const uint64_t a = as->Mmap(0, (1 + i % 5) * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
        ASSERT_NE(a, 0u);
        ASSERT_TRUE(as->Munmap(a, (1 + i % 5) * 4096).ok());
      }
      done = true;
    });
    std::thread second([&] {
      while (!go) std::this_thread::yield();
      while (!done || reads.load() < 1000) {
        const AccessResult r = as->Access(stay + (reads.load() % 16) * 4096, 1, 1, AccessType::kWrite);
        ASSERT_TRUE(r.ok()) << profile;
        reads++;
      }
    });
    owner.join();
    second.join();
    EXPECT_GE(reads.load(), 1000u);
    EXPECT_EQ(as->Validate(), "") << profile;
    as.reset();
    RcuBarrier();
    EXPECT_EQ(frames.budget().usage(MemKind::kIndexNodes), 0) << profile;
    EXPECT_EQ(frames.budget().usage(MemKind::kVmas), 0) << profile;
  }
}

// Two spaces, each used by its own thread only, as two processes: the nodes each
// retires wait for their own thread's next quiescent state, so neither starts, scans
// or advances the shared grace-period sequence. Once a second thread has entered a
// space (a Maps call), that space's retired nodes take grace periods again.
TEST(PolledGathers, SpacesOnTheirOwnThreadsStartNoGracePeriod) {
  RcuThread();
  FrameAllocator frames(64ull << 20);
  const SpaceOptions opts = testing_profiles::ProfileOptions("linux-6.15");
  auto a = std::make_unique<AddressSpace>(frames, opts);
  auto b = std::make_unique<AddressSpace>(frames, opts);
  auto churn = [](AddressSpace* as, int n) {
    for (int i = 0; i < 64; i++) ASSERT_TRUE(as->Mmap(0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS).ok());
    for (int i = 0; i < n; i++) {
      const uint64_t addr = as->Mmap(0, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
      ASSERT_NE(addr, 0u);
      ASSERT_TRUE(as->Munmap(addr, 3 * 4096).ok());
    }
  };
  RcuBarrier();
  const StatsSnapshot s0 = ReadStats();
  const uint64_t gp0 = rcu_internal::rcu_state.gp_seq.load();
  {
    std::thread ta(churn, a.get(), 10000), tb(churn, b.get(), 10000);
    ta.join();
    tb.join();
  }
  const StatsSnapshot d0 = ReadStats().Minus(s0);
  EXPECT_GE(d0.event(Event::kRcuSoleReuses), 2 * 2 * 10000u);
  EXPECT_EQ(d0.event(Event::kRcuPolledGathers), 0u);
  EXPECT_EQ(rcu_internal::rcu_state.gp_seq.load(), gp0);
  // A second thread enters a (the main thread's Maps call; the next churn's thread is
  // a third): a's gathers wait for grace periods from now on, for good.
  EXPECT_GT(a->Maps(0, ~0ull).size(), 0u);
  const StatsSnapshot s1 = ReadStats();
  {
    std::thread ta(churn, a.get(), 10000);
    ta.join();
  }
  const StatsSnapshot d1 = ReadStats().Minus(s1);
  EXPECT_EQ(d1.event(Event::kRcuSoleReuses), 0u);
  EXPECT_GT(d1.event(Event::kRcuPolledGathers), 10000u / 256);
  EXPECT_GT(rcu_internal::rcu_state.gp_seq.load(), gp0);
  a.reset();
  b.reset();
  RcuBarrier();
  EXPECT_EQ(frames.budget().usage(MemKind::kIndexNodes), 0);
}

// True while the calling thread is online (a grace period waits for it).
bool Online() { return RcuOnline(); }

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
