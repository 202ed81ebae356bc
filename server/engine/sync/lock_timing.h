// SPDX-License-Identifier: Apache-2.0
// Shared timing helpers of the instrumented locks (internal to sync/).
//
// Every acquisition is counted when it is taken (with its wait time if it had to wait,
// measured only with --lock-stats=on). Hold time is sampled: one acquisition in
// kHoldSampleEvery per thread stores a timestamp, and its release records the hold
// time with that weight (totals and histograms stay unbiased estimates). A stamp of 0
// means "not sampled". The same sample gives the lock timeline its holds
// (sync/lock_trace.h) while that is on.
#pragma once

#include <cstdint>

#include "engine/stats.h"
#include "sync/lock_trace.h"

namespace vmspace::sync_internal {

/// One acquisition in this many (per thread) has its hold time measured.
inline constexpr uint32_t kHoldSampleEvery = 16;

inline thread_local uint32_t tls_sample_ctr = 0;

/// A hold-time stamp for a new acquisition: NowTicks() | 1 if sampled (lock stats or
/// the lock timeline on), else 0.
inline uint64_t HoldStamp() {
  if ((++tls_sample_ctr & (kHoldSampleEvery - 1)) != 0) return 0;
  if (!LockStatsEnabled() && !LockTraceEnabled()) return 0;
  return NowTicks() | 1;
}
/// Records the hold time of a sampled acquisition (stamp from HoldStamp) in the lock
/// stats and the lock timeline, whichever is on; `self` is the releasing thread's lock
/// owner task (RwSem's), 0 for locks without one.
inline void EndHold(LockClass c, LockMode m, uint64_t stamp, uintptr_t self = 0) {
  if (!stamp) return;
  uint64_t now = NowTicks();
  if (LockStatsEnabled()) RecordHold(c, m, now > stamp ? now - stamp : 1, kHoldSampleEvery);
  lock_trace_internal::TraceHold(c, m, stamp, now, self);
}
/// Runs `acquire` (which blocks) and returns how long it took in ticks (0 if lock
/// stats are off).
template <typename F>
inline uint64_t TimedWait(F&& acquire) {
  if (!LockStatsEnabled()) {
    acquire();
    return 0;
  }
  uint64_t t0 = NowTicks();
  acquire();
  uint64_t t1 = NowTicks();
  return t1 > t0 ? t1 - t0 : 1;
}

}  // namespace vmspace::sync_internal
