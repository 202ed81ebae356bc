// SPDX-License-Identifier: Apache-2.0
#include "sync/spinlock.h"

#include <sched.h>

#include "sync/lock_timing.h"
#include "sync/rcu.h"

namespace vmspace {

void SpinLock::Lock() {
  LockdepAcquire(rank_, this);
  bool contended = locked_.exchange(true, std::memory_order_acquire);
  uint64_t wait = 0;
  if (contended) {
    wait = sync_internal::TimedWait([&] {
      RcuSleep sleep;  // it may yield the CPU
      int spins = 0;
      for (;;) {
        while (locked_.load(std::memory_order_relaxed)) {
          if (++spins < 1000) __builtin_ia32_pause();
          else sched_yield();
        }
        if (!locked_.exchange(true, std::memory_order_acquire)) break;
      }
    });
  }
  RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
  acquired_ticks_ = sync_internal::HoldStamp();
}

void SpinLock::Unlock() {
  sync_internal::EndHold(cls_, LockMode::kWrite, acquired_ticks_);
  locked_.store(false, std::memory_order_release);
  LockdepRelease(rank_, this);
}

}  // namespace vmspace
