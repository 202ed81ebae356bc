// Thin wrapper over liburcu (memb flavour) used by the engine: read-side sections,
// deferred frees (call_rcu), and per-thread registration.
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

/// Queues fn(head) to run after a grace period (call_rcu).
/// The callback must start with RcuCallbackBegin(head) and end with RcuCallbackEnd().
inline void CallRcu(struct rcu_head* head, void (*fn)(struct rcu_head*)) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(head);  // the callback thread receives `head` through liburcu's queue
#endif
  urcu_memb_call_rcu(head, fn);
}
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
/// Waits until every callback queued so far has run (rcu_barrier). Also declared in
/// the public engine/address_space.h.
void RcuBarrier();

}  // namespace vmspace
