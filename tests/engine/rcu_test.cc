// The engine's call_rcu worker (sync/rcu.cc), checked by behaviour:
//  * a callback waits for a reader that was inside its read section when it was
//    queued, and runs once the reader leaves;
//  * the callbacks of one thread run in the order it queued them, those of many
//    threads all run, and RcuBarrier waits for every one queued before it;
//  * at most one grace period starts per kRcuGpIntervalUs under a constant stream.
// Waiting for another thread uses WaitUntil: a hang is the failure, the bound generous.
#include "sync/rcu.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/address_space.h"
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

}  // namespace
}  // namespace vmspace
