#include "sync/rcu.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "engine/address_space.h"
#include "sync/mutex.h"

namespace vmspace {
namespace rcu_internal {
constinit thread_local ThreadState tls{};
#if defined(__SANITIZE_THREAD__)
char gp_token;
#endif
namespace {
/// Registers with liburcu-qsbr (which starts the thread online) and takes the thread
/// offline; unregisters at thread exit (liburcu takes the thread offline first).
struct Registrar {
  Registrar() {
    urcu_qsbr_register_thread();
    urcu_qsbr_thread_offline();
  }
  ~Registrar() { urcu_qsbr_unregister_thread(); }
};
}  // namespace
void RegisterSlow() {
  static thread_local Registrar r;  // unregisters at thread exit
  (void)r;
  tls.registered = true;
}
}  // namespace rcu_internal

namespace {

/// The engine's call_rcu worker, one per process: Linux's rcu_gp_kthread (one grace
/// period at a time, started once callbacks wait) and rcu_do_batch (the callbacks of
/// that grace period, in queue order). It replaces liburcu's call_rcu thread, which
/// sleeps 10 ms after every pass: at our churn rates that held ~12 k freed VMAs and
/// their index nodes in flight, so every VMA and node a write section took from its
/// cache had left the CPU caches. Here a grace period starts kRcuGpIntervalUs after the
/// previous one started (or at once, if the worker was idle that long), with every
/// callback queued by then.
///
/// While callbacks keep coming the worker polls its queue once per interval (a timed
/// sleep no one has to end, as the kernel's grace-period kthread is driven by the tick),
/// so CallRcu wakes nobody: a futex wake-up (and its IPI to the sleeping CPU) on every
/// callback that found the worker asleep cost the seed-004 loop 1-12% of its time in
/// try_to_wake_up. After kRcuIdlePolls empty polls the worker sleeps until a CallRcu
/// wakes it (an idle engine costs no CPU).
///
/// Callbacks are linked through their rcu_head (next.next holds the next rcu_head, func
/// the callback): queueing allocates nothing. mu_ (LockRank::kRcuQueue) guards the
/// queue and the counts; nothing is taken under it and no callback runs under it.
class CallbackWorker {
 public:
  void Queue(rcu_head* h, void (*fn)(rcu_head*)) {
    h->func = fn;
    h->next.next = nullptr;
    bool wake;
    {
      MutexLock l(mu_);
      if (tail_) SetNext(tail_, h);
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
  static rcu_head* Next(rcu_head* h) { return reinterpret_cast<rcu_head*>(h->next.next); }
  static void SetNext(rcu_head* h, rcu_head* n) { h->next.next = reinterpret_cast<cds_wfcq_node*>(n); }

  void Run() {
    pthread_setname_np(pthread_self(), "rcu_gp");
    RcuThread();  // callbacks may enter read sections
    auto next_gp = std::chrono::steady_clock::now();
    int polls_left = kRcuIdlePolls;
    for (;;) {
      mu_.Lock();
      while (!head_) {
        if (polls_left == 0) {  // idle: the next CallRcu wakes the worker
          idle_ = true;
          while (!head_) work_cv_.wait(mu_);
          break;
        }
        polls_left--;
        mu_.Unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(kRcuGpIntervalUs));
        mu_.Lock();
      }
      polls_left = kRcuIdlePolls;
      mu_.Unlock();
      // Callbacks queued while the worker waits join this grace period.
      std::this_thread::sleep_until(next_gp);
      rcu_head* list;
      {
        MutexLock l(mu_);
        list = head_;
        head_ = tail_ = nullptr;
      }
      next_gp = std::chrono::steady_clock::now() + std::chrono::microseconds(kRcuGpIntervalUs);
      SynchronizeRcu();
      uint64_t n = 0;
      for (; list; n++) {
        rcu_head* next = Next(list);  // read first: the callback may free the head
        list->func(list);
        list = next;
      }
      {
        MutexLock l(mu_);
        invoked_ += n;
        grace_periods_++;
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
  uint64_t grace_periods_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;  // CallRcus that woke the idle worker
  bool idle_ ABSL_GUARDED_BY(mu_) = false;     // the worker waits for work_cv_, not polling
  bool started_ ABSL_GUARDED_BY(mu_) = false;  // the worker thread exists
};

// The worker of this process, created by the first CallRcu, RcuBarrier or ReadRcuStats.
// Never deleted: its thread runs until the process exits. A fork child must not use
// the engine (nor could it use liburcu's call_rcu thread before): the worker thread
// does not exist in it, and liburcu's reader registry still lists the parent's threads.
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

void SynchronizeRcu() {
  RcuSleep offline;  // a grace period waits for the online threads, this one too
  urcu_qsbr_synchronize_rcu();
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
