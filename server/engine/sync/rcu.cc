#include "sync/rcu.h"

namespace vmspace {
namespace rcu_internal {
thread_local bool tls_registered = false;
#if defined(__SANITIZE_THREAD__)
char gp_token;
#endif
void RegisterSlow() {
  static thread_local Registrar r;  // unregisters at thread exit
  (void)r;
  tls_registered = true;
}
}  // namespace rcu_internal

void SynchronizeRcu() {
  urcu_memb_synchronize_rcu();
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&rcu_internal::gp_token);
#endif
}

void RcuBarrier() {
  urcu_memb_barrier();
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&rcu_internal::gp_token);
#endif
}

}  // namespace vmspace
