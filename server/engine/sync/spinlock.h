// SPDX-License-Identifier: Apache-2.0
// SpinLock: test-and-test-and-set spinlock with lock_stat instrumentation, for the
// page-table locks (mm->page_table_lock and split PTE locks, spinlock_t in Linux).
// Spins with pause and yields the CPU after a while (user space cannot disable
// preemption as the kernel does under a spinlock).
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "engine/stats.h"
#include "sync/lockdep.h"

namespace vmspace {

class ABSL_LOCKABLE SpinLock {
 public:
  SpinLock(LockClass cls, LockRank rank) : cls_(cls), rank_(rank), held_rank_(rank) {}
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;
  /// spin_lock / spin_unlock.
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void Unlock() ABSL_UNLOCK_FUNCTION();
  /// spin_lock_nested(lock, SINGLE_DEPTH_NESTING): Lock() ranked `nested` for lockdep,
  /// for a second lock of the same class taken under the first by a caller that no
  /// other thread can mirror (e.g. both PTE locks of a move under mmap_lock write).
  /// Unlock() as usual.
  void LockNested(LockRank nested) ABSL_EXCLUSIVE_LOCK_FUNCTION();

 private:
  std::atomic<bool> locked_{false};
  const LockClass cls_;
  const LockRank rank_;
  LockRank held_rank_;  // rank_, or LockNested's rank while so held
  uint64_t acquired_ticks_ = 0;
  void Acquire();
};

/// Scoped hold of a SpinLock.
class ABSL_SCOPED_LOCKABLE SpinGuard {
 public:
  explicit SpinGuard(SpinLock& l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l) : l_(l) { l_.Lock(); }
  ~SpinGuard() ABSL_UNLOCK_FUNCTION() { l_.Unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& l_;
};

}  // namespace vmspace
