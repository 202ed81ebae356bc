// SPDX-License-Identifier: Apache-2.0
#include "sync/spinlock.h"

#include <sched.h>

#include "sync/lock_timing.h"
#include "sync/rcu.h"

namespace vmspace {

void SpinLock::Lock() {
  LockdepAcquire(rank_, this);
  Acquire();
  held_rank_ = rank_;
}

void SpinLock::LockNested(LockRank nested) {
  LockdepAcquire(nested, this);
  Acquire();
  held_rank_ = nested;
}

void SpinLock::Acquire() {
  bool contended = locked_.exchange(true, std::memory_order_acquire);
  uint64_t wait = 0;
  if (contended) {
    lock_trace_internal::TraceWait trace(cls_, LockMode::kWrite, 0, 0);
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
    trace.Done(true);
  }
  RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
  acquired_ticks_ = sync_internal::HoldStamp();
}

void SpinLock::Unlock() {
  sync_internal::EndHold(cls_, LockMode::kWrite, acquired_ticks_);
  const LockRank held = held_rank_;
  locked_.store(false, std::memory_order_release);
  LockdepRelease(held, this);
}

}  // namespace vmspace
