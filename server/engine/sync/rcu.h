// The engine's RCU: liburcu's memb flavour for read-side sections and grace periods
// (synchronize_rcu), and the engine's own call_rcu worker (rcu.cc) that runs deferred
// frees after them.
//
// Every thread that enters a read-side section must be registered; the engine does
// it lazily on each public entry point (RcuThread()), so callers (gRPC handler
// threads, benchmark threads) need not know about RCU.
#pragma once

#define _LGPL_SOURCE 1
#include <urcu/urcu-memb.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace vmspace {

namespace rcu_internal {
struct Registrar {
  Registrar() { urcu_memb_register_thread(); }
  ~Registrar() { urcu_memb_unregister_thread(); }
};
extern thread_local bool tls_registered;
void RegisterSlow();
#if defined(__SANITIZE_THREAD__)
// TSan cannot see liburcu's grace periods: model them as release/acquire on a token.
extern char gp_token;
#endif
}  // namespace rcu_internal

/// Registers the calling thread with liburcu if it is not yet (idempotent, cheap).
inline void RcuThread() {
  if (__builtin_expect(!rcu_internal::tls_registered, 0)) rcu_internal::RegisterSlow();
}

/// RAII read-side critical section (rcu_read_lock / rcu_read_unlock).
class RcuReadGuard {
 public:
  RcuReadGuard() { urcu_memb_read_lock(); }
  ~RcuReadGuard() {
#if defined(__SANITIZE_THREAD__)
    __tsan_release(&rcu_internal::gp_token);
#endif
    urcu_memb_read_unlock();
  }
  RcuReadGuard(const RcuReadGuard&) = delete;
  RcuReadGuard& operator=(const RcuReadGuard&) = delete;
};

/// One grace period at most per kRcuGpIntervalUs microseconds: the call_rcu worker
/// (rcu.cc) waits that long after the start of one grace period before it starts the
/// next, and every callback queued meanwhile joins it. It bounds the grace periods,
/// and with them liburcu's membarrier syscalls (IPIs to the CPUs running this process),
/// to about 1000 a second under constant churn, and keeps a grace period's worth of
/// freed VMAs, nodes and frames (what is in flight) about the size of the kernel's at
/// its own rate (HZ=250: a grace period of a few ticks at a quarter of our rounds/s).
inline constexpr int kRcuGpIntervalUs = 1000;

/// Queues fn(head) to run after a grace period (call_rcu): on the engine's call_rcu
/// worker thread, after a grace period that starts after this call, in queue order
/// (callbacks queued earlier by any thread run first). Takes the worker's queue lock
/// (LockRank::kRcuQueue, a leaf) for a few instructions; any lock may be held. The
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
