// The engine's RCU: liburcu's QSBR flavour for read-side sections and grace periods
// (synchronize_rcu), and the engine's own call_rcu worker (rcu.cc) that runs deferred
// frees after them.
//
// Quiescent states, as the kernel's non-preemptible RCU: a registered thread is
// "online" (a grace period waits for it) only while it is inside the engine, i.e. in
// an RcuEntry scope (every public entry point opens one) or an RcuReadGuard, and it
// goes offline (a quiescent state) when the outermost one closes and whenever it
// sleeps in the engine outside a read section (RcuSleep: the futex and condition
// waits of the engine's locks, as a context switch is a quiescent state in Linux). A
// grace period therefore needs no IPI: synchronize_rcu waits for the online threads'
// next quiescent state (the end of their current engine call) and never calls
// membarrier, whose expedited IPIs (liburcu's memb flavour, which this replaces) cost
// the rcu_gp thread 3-33% of a core on this VM, as fast as the host delivered them, and
// interrupted the clients' CPUs (README, "Two spaces").
//
// Being online or offline costs one full barrier each way (liburcu's protocol: the
// store of the reader's counter, then smp_mb). liburcu's x86-64 smp_mb is mfence
// (16 ns here); it is redefined below as a locked add to the stack, the kernel's own
// x86-64 __smp_mb (arch/x86/include/asm/barrier.h, Linux 6.18: a full barrier for
// ordinary memory, 2 ns here), so an engine call pays about 6 ns for its quiescent
// states.
//
// Threads need not know about RCU: a thread registers on its first entry, starts
// offline, and unregisters at exit.
#pragma once

#define _LGPL_SOURCE 1
#include <urcu/arch.h>
#undef cmm_mb
#define cmm_mb() __asm__ __volatile__("lock; addl $0,0(%%rsp)" ::: "memory", "cc")
#include <urcu/urcu-qsbr.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace vmspace {

namespace rcu_internal {
/// The calling thread's RCU state (one TLS block, zero at thread start).
/// Whether the thread is online is liburcu's own state (urcu_qsbr_read_ongoing).
struct ThreadState {
  bool registered;
  int depth;       // open RcuEntry scopes and read guards: online while > 0, except asleep
  int read_depth;  // of them, RcuReadGuards (the thread must not go offline)
};
// constinit: no TLS wrapper call on each access (UBSan also took the wrapper's result
// for a null pointer).
extern constinit thread_local ThreadState tls;
void RegisterSlow();
inline void Enter() {
  if (__builtin_expect(!tls.registered, 0)) RegisterSlow();
  if (tls.depth++ == 0) urcu_qsbr_thread_online();
}
inline void Exit() {
  if (--tls.depth == 0) urcu_qsbr_thread_offline();
}
#if defined(__SANITIZE_THREAD__)
// TSan cannot see liburcu's grace periods: model them as release/acquire on a token.
extern char gp_token;
#endif
}  // namespace rcu_internal

/// Registers the calling thread with liburcu if it is not yet (idempotent, cheap); it
/// stays offline. For threads that wait for grace periods (synchronize_rcu) without
/// entering the engine through an RcuEntry.
inline void RcuThread() {
  if (__builtin_expect(!rcu_internal::tls.registered, 0)) rcu_internal::RegisterSlow();
}

/// The scope of one engine call (every public entry point opens one first): the thread
/// is online until the outermost scope closes, then offline (a quiescent state).
/// Nests. Inside it the thread must not sleep except through RcuSleep (the engine's
/// locks and waits do).
class RcuEntry {
 public:
  RcuEntry() { rcu_internal::Enter(); }
  ~RcuEntry() { rcu_internal::Exit(); }
  RcuEntry(const RcuEntry&) = delete;
  RcuEntry& operator=(const RcuEntry&) = delete;
};

/// RAII read-side critical section (rcu_read_lock / rcu_read_unlock): the thread is
/// online and does not go offline until it ends, even where it sleeps (as sleeping in
/// a memb read section, that only delays grace periods). Nests.
class RcuReadGuard {
 public:
  RcuReadGuard() {
    rcu_internal::Enter();
    rcu_internal::tls.read_depth++;
  }
  ~RcuReadGuard() {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&rcu_internal::gp_token);
#endif
    rcu_internal::tls.read_depth--;
    rcu_internal::Exit();
  }
  RcuReadGuard(const RcuReadGuard&) = delete;
  RcuReadGuard& operator=(const RcuReadGuard&) = delete;
};

/// Around a sleep in the engine (a futex or condition wait): an online thread outside
/// any read section goes offline for the sleep and back online after it, so a grace
/// period never waits for a sleeper (which might sleep on a lock whose holder waits
/// for that grace period). In a read section it stays online. As a context switch in
/// Linux (rcu_note_context_switch).
class RcuSleep {
 public:
  RcuSleep() : offline_(rcu_internal::tls.read_depth == 0 && urcu_qsbr_read_ongoing()) {
    if (offline_) urcu_qsbr_thread_offline();
  }
  ~RcuSleep() {
    if (offline_) urcu_qsbr_thread_online();
  }
  RcuSleep(const RcuSleep&) = delete;
  RcuSleep& operator=(const RcuSleep&) = delete;

 private:
  const bool offline_;
};

/// One grace period at most per kRcuGpIntervalUs microseconds: the call_rcu worker
/// (rcu.cc) waits that long after the start of one grace period before it starts the
/// next, and every callback queued meanwhile joins it. It bounds the grace periods to
/// about 2000 a second under constant churn (each costs the worker a scan of the
/// registered threads, and the threads it waited for a futex wake-up), and keeps what
/// is in flight (a grace period's worth of freed VMAs, nodes and frames) small enough
/// to come back from the CPU caches: at 1000 µs and with 4096-node gathers the
/// rwsem-form profiles ran 20-30% slower (README "Faster than the kernel").
inline constexpr int kRcuGpIntervalUs = 500;
/// Empty polls of its queue (one per kRcuGpIntervalUs) after which the call_rcu worker
/// stops polling and sleeps until a CallRcu wakes it: ~8 ms of idle polling.
inline constexpr int kRcuIdlePolls = 16;

/// Queues fn(head) to run after a grace period (call_rcu): on the engine's call_rcu
/// worker thread, after a grace period that starts after this call, in queue order
/// (callbacks queued earlier by any thread run first). Takes the worker's queue lock
/// (LockRank::kRcuQueue, a leaf) for a few instructions; any lock may be held. Wakes the
/// worker only when it stopped polling (kRcuIdlePolls). The
/// callback must start with RcuCallbackBegin(head) and end with RcuCallbackEnd(), and
/// must not call RcuBarrier or SynchronizeRcu. As kernel/rcu/tree.c call_rcu (Linux 6.18).
void CallRcu(struct rcu_head* head, void (*fn)(struct rcu_head*));
/// First statement of every call_rcu callback (TSan: pairs with CallRcu and the grace period).
inline void RcuCallbackBegin(struct rcu_head* head) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(head);
  __tsan_acquire(&rcu_internal::gp_token);
#else
  (void)head;
#endif
}
/// Last statement of every call_rcu callback (TSan: rcu_barrier() waits for it, so what
/// the callback did happens before RcuBarrier() returns).
inline void RcuCallbackEnd() {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(&rcu_internal::gp_token);
#endif
}
/// Waits for a grace period (synchronize_rcu). Must not be called in a read section.
void SynchronizeRcu();
/// Waits until every callback queued so far (by any thread) has run (rcu_barrier).
/// Must not be called from a callback or in a read section. Also declared in the
/// public engine/address_space.h.
void RcuBarrier();

}  // namespace vmspace
