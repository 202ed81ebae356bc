// SPDX-License-Identifier: Apache-2.0
#include "sync/rcu.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>
#include <vector>

#include "engine/address_space.h"
#include "engine/stats.h"
#include "sync/kthread.h"
#include "sync/mutex.h"
#include "engine/per_thread.h"

namespace vmspace {
static_assert(kMaxEngineThreads == rcu_internal::kMaxRcuThreads);

namespace rcu_internal {
constinit thread_local ThreadState tls{};
Reader unregistered_reader;
constinit thread_local Reader* reader = &unregistered_reader;
RcuState rcu_state;
Reader readers[kMaxRcuThreads];
std::atomic<int> reader_slots{0};
#if defined(__SANITIZE_THREAD__)
char gp_token;
#endif
namespace {
/// Slot allocation (registration and thread exit only): the free slots below
/// reader_slots. completed: every grace period up to it has ended (scans raise it).
struct Registry {
  Mutex mu{LockRank::kRcuRegistry};
  std::vector<int> free ABSL_GUARDED_BY(mu);
  alignas(kDestructiveInterferenceBytes) std::atomic<uint64_t> completed{1};  // gp_seq's first value: none started
};
Registry& Reg() {
  static Registry* r = new Registry;  // never destroyed: threads may exit after main
  return *r;
}
/// Gives the thread a Reader slot (offline); gives it back at thread exit.
struct Registrar {
  int slot;
  Registrar() {
    Registry& r = Reg();
    MutexLock l(r.mu);
    if (!r.free.empty()) {
      slot = r.free.back();
      r.free.pop_back();
    } else {
      slot = reader_slots.load(std::memory_order_relaxed);
      if (slot == kMaxRcuThreads) {
        fprintf(stderr, "vmspace: more than %d threads entered the engine at once\n", kMaxRcuThreads);
        abort();
      }
      reader_slots.store(slot + 1, std::memory_order_release);
    }
    reader = &readers[slot];
  }
  ~Registrar() {
    Offline();
    reader = &unregistered_reader;
    Registry& r = Reg();
    MutexLock l(r.mu);
    r.free.push_back(slot);
  }
};
}  // namespace
void RegisterSlow() {
  static thread_local Registrar r;  // unregisters at thread exit
  (void)r;
  static std::atomic<uint64_t> next_id{1};
  tls.id = next_id.fetch_add(1, std::memory_order_relaxed);
  tls.registered = true;
}

uint64_t StartGracePeriod() {
  SmpMb();  // the updates before it (unlinks) are visible before the counter moves
  const uint64_t g = rcu_state.gp_seq.fetch_add(2, std::memory_order_seq_cst) + 2;
  SmpMb();  // the counter moves before the scans that judge this grace period
  return g;
}

uint64_t PollGracePeriods() {
  Registry& r = Reg();
  // Read first: every grace period started by now has ended once each thread is
  // offline or went online after its start (ctr at least its number).
  uint64_t done = rcu_state.gp_seq.load(std::memory_order_seq_cst);
  const int n = reader_slots.load(std::memory_order_acquire);
  for (int i = 0; i < n; i++) {
    const uint64_t v = readers[i].ctr.load(std::memory_order_acquire);
    if (v != 0 && v < done) done = v;  // offline at v's start or after: v and those before it ended
  }
  SmpMb();  // the scan is done before what the caller frees
  uint64_t c = r.completed.load(std::memory_order_relaxed);
  while (c < done && !r.completed.compare_exchange_weak(c, done, std::memory_order_relaxed)) {
  }
  return std::max(c, done);
}
}  // namespace rcu_internal

namespace {

/// The engine's call_rcu worker, one per process: Linux's rcu_gp_kthread (it starts
/// grace periods and sees them end) and rcu_do_batch (the callbacks of an ended grace
/// period, in queue order). Once every kRcuGpIntervalUs tick it (1) starts a grace
/// period for the callbacks queued since the last tick, a segment of its own, as the
/// kernel's rcu_segcblist tags each segment with the gp_seq it waits for, and (2) scans
/// the registered threads once (PollGracePeriods) and runs every segment whose grace
/// period has ended; kRcuGpCheckUs after a start it scans once more. Under constant
/// churn (an engine call lasts microseconds) a grace period has ended by that check,
/// and the worker never waits for a thread, spins on one's counter or has to be woken
/// by one (liburcu's synchronize_rcu polled the online threads' counters 100 times,
/// then slept on a futex that each of them had to wake). The hottest deferred frees,
/// a space's gathers of retired index nodes, page tables and frames, do not come here
/// at all while the space is busy (FreePolledGathersLocked).
///
/// While callbacks keep coming or wait, the worker ticks (a timed sleep no one has to
/// end, as the kernel's grace-period kthread is driven by the tick), so CallRcu wakes
/// nobody: a futex wake-up (and its IPI to the sleeping CPU) on every callback that
/// found the worker asleep cost the seed-004 loop 1-12% of its time in try_to_wake_up.
/// After kRcuIdlePolls empty ticks the worker sleeps until a CallRcu wakes it (an idle
/// engine costs no CPU).
///
/// Callbacks are linked through their rcu_head: queueing allocates nothing. mu_
/// (LockRank::kRcuQueue) guards the queue and the counts; nothing is taken under it and
/// no callback runs under it. The segments are the worker thread's own.
class CallbackWorker {
 public:
  void Queue(rcu_head* h, void (*fn)(rcu_head*)) {
    h->func = fn;
    h->next = nullptr;
    bool wake;
    {
      MutexLock l(mu_);
      if (tail_) tail_->next = h;
      else head_ = h;
      tail_ = h;
      queued_++;
      wake = idle_;
      idle_ = false;  // one wake-up is enough
      wakeups_ += wake;
      if (!started_) {
        started_ = true;
        std::thread([this] { Run(); }).detach();
      }
    }
    if (wake) work_cv_.notify_one();
  }

  void Barrier() {
    RcuSleep offline;  // the callbacks wait for a grace period, which waits for us
    mu_.Lock();
    const uint64_t target = queued_;
    while (invoked_ < target) done_cv_.wait(mu_);
    mu_.Unlock();
  }

  RcuStats Stats() {
    MutexLock l(mu_);
    return RcuStats{grace_periods_, invoked_, queued_ - invoked_, wakeups_};
  }

 private:
  /// Callbacks queued between two ticks, waiting for grace period `gp`.
  struct Segment {
    uint64_t gp;
    rcu_head* list;
  };

  void Run() {
    pthread_setname_np(pthread_self(), "rcu_gp");
    KthreadAffinity();  // not the pinned client's CPU that queued the first callback
    RcuThread();  // callbacks may enter read sections
    std::deque<Segment> segs;  // oldest first: their grace periods end in this order
    using Clock = std::chrono::steady_clock;
    auto next_tick = Clock::now();
    auto check_at = Clock::time_point::max();  // the early check of the latest grace period
    int polls_left = kRcuIdlePolls;
    for (;;) {
      if (segs.empty() && polls_left == 0) {
        mu_.Lock();
        if (!head_) {  // idle: the next CallRcu wakes the worker
          idle_ = true;
          while (!head_) work_cv_.wait(mu_);
        }
        mu_.Unlock();
      }
      if (check_at < next_tick) {  // the early check: scan only
        std::this_thread::sleep_until(check_at);
        check_at = Clock::time_point::max();
      } else {  // a tick: start a grace period for the callbacks queued since the last
        std::this_thread::sleep_until(next_tick);
        next_tick = Clock::now() + std::chrono::microseconds(kRcuGpIntervalUs);
        rcu_head* list;
        {
          MutexLock l(mu_);
          list = head_;
          head_ = tail_ = nullptr;
        }
        if (list) {
          segs.push_back(Segment{rcu_internal::StartGracePeriod(), list});
          check_at = Clock::now() + std::chrono::microseconds(kRcuGpCheckUs);
        }
        if (segs.empty()) {
          polls_left--;  // an empty tick
          continue;
        }
        polls_left = kRcuIdlePolls;
      }
      if (segs.empty()) continue;
      const uint64_t done = rcu_internal::PollGracePeriods();
      uint64_t n = 0, gps = 0;
      for (; !segs.empty() && segs.front().gp <= done; gps++) {
        for (rcu_head* h = segs.front().list; h; n++) {
          rcu_head* next = h->next;  // read first: the callback may free the head
          h->func(h);
          h = next;
        }
        segs.pop_front();
      }
      if (gps == 0) continue;
      {
        MutexLock l(mu_);
        invoked_ += n;
        grace_periods_ += gps;
      }
      done_cv_.notify_all();
    }
  }

  Mutex mu_{LockRank::kRcuQueue};
  std::condition_variable_any work_cv_;  // the queue became non-empty while idle_ (polls ended)
  std::condition_variable_any done_cv_;  // invoked_ grew
  rcu_head* head_ ABSL_GUARDED_BY(mu_) = nullptr;
  rcu_head* tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // callbacks queued since start
  uint64_t invoked_ ABSL_GUARDED_BY(mu_) = 0;  // of them, run (all of the first invoked_)
  uint64_t grace_periods_ ABSL_GUARDED_BY(mu_) = 0;  // ended with callbacks waiting for them
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;  // CallRcus that woke the idle worker
  bool idle_ ABSL_GUARDED_BY(mu_) = false;     // the worker waits for work_cv_, not polling
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the worker thread exists
};

// The worker of this process, created by the first CallRcu, RcuBarrier or ReadRcuStats.
// Never deleted: its thread runs until the process exits. A fork child must not use
// the engine: the worker thread does not exist in it, and the Reader slots still hold
// the parent's threads.
std::atomic<CallbackWorker*> g_worker{nullptr};

CallbackWorker& Worker() {
  CallbackWorker* w = g_worker.load(std::memory_order_acquire);
  if (__builtin_expect(w != nullptr, 1)) return *w;
  auto* fresh = new CallbackWorker;  // its thread starts with the first callback
  if (g_worker.compare_exchange_strong(w, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread's won
  return *w;
}

}  // namespace

void CallRcu(struct rcu_head* head, void (*fn)(struct rcu_head*)) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(head);  // the worker thread receives `head` through the queue
#endif
  Worker().Queue(head, fn);
}

uint64_t RcuTick() {
  if (uint64_t t = g_rcu_tick_test_value.load(std::memory_order_relaxed)) return t;
  static const uint64_t period = std::max<uint64_t>(1, NsToTicks(uint64_t{kRcuGpIntervalUs} * 1000));
  return NowTicks() / period;
}

uint64_t RcuStartPoll() {
  using namespace rcu_internal;
  SmpMb();  // the caller's unlinks come before the read of gp_seq
  const uint64_t s = rcu_state.gp_seq.load(std::memory_order_relaxed);
  uint64_t cur = s;
  // One grace period at a time, as the kernel's: start s + 2 only if s has ended.
  if (Reg().completed.load(std::memory_order_relaxed) >= s)
    rcu_state.gp_seq.compare_exchange_strong(cur, s + 2, std::memory_order_seq_cst);  // lost: another thread started it
  SmpMb();
  return s + 2;
}

bool RcuPollState(uint64_t cookie, bool scan) {
  using namespace rcu_internal;
  uint64_t done = Reg().completed.load(std::memory_order_acquire);
  if (done < cookie && scan) {
    done = PollGracePeriods();
    uint64_t s = rcu_state.gp_seq.load(std::memory_order_relaxed);
    // The cookie's grace period was left for later while another one ran: start it now.
    if (s < cookie && done >= s) rcu_state.gp_seq.compare_exchange_strong(s, s + 2, std::memory_order_seq_cst);
  }
  if (done < cookie) return false;
  SmpMb();
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&gp_token);
#endif
  return true;
}

void SynchronizeRcu() {
  RcuSleep offline;  // a grace period waits for the online threads, this one too
  const uint64_t g = rcu_internal::StartGracePeriod();
  // Polled, as the worker: the online threads leave their engine calls within
  // microseconds, so yield a few times, then sleep in growing steps (up to 1 ms).
  for (int i = 0; rcu_internal::PollGracePeriods() < g; i++) {
    if (i < 8) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 8 << std::min(i - 8, 7))));
  }
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&rcu_internal::gp_token);
#endif
}

void RcuBarrier() {
  Worker().Barrier();
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&rcu_internal::gp_token);
#endif
}

RcuStats ReadRcuStats() { return Worker().Stats(); }

}  // namespace vmspace
