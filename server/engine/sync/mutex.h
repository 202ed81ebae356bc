// SPDX-License-Identifier: Apache-2.0
// Mutex: a sleeping lock (std::mutex) with a lockdep rank and the clang thread-safety
// capability. Given a LockClass it is counted in the lock stats like the other
// instrumented locks (acquisitions, contentions, wait and sampled hold times: the
// i_pages lock, the writeback domain's lock); without one it is not (anon_vma_lock,
// i_rwsem, allocator shards, the node pool).
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"
#include "engine/stats.h"
#include "sync/lock_timing.h"
#include "sync/lockdep.h"
#include "sync/rcu.h"

namespace vmspace {

class ABSL_LOCKABLE Mutex {
 public:
  /// Not in the lock stats.
  explicit Mutex(LockRank rank) : rank_(rank), cls_(LockClass::kCount) {}
  /// Counted as `cls` (LockMode::kWrite): an acquisition that found the mutex held is
  /// contended, its wait timed until it got it.
  Mutex(LockRank rank, LockClass cls) : rank_(rank), cls_(cls) {}
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    LockdepAcquire(rank_, this);
    if (cls_ == LockClass::kCount) {
      if (!mu_.try_lock()) {
        RcuSleep sleep;
        mu_.lock();
      }
      return;
    }
    const bool contended = !mu_.try_lock();
    const uint64_t wait = contended ? sync_internal::TimedWait([&] {
      RcuSleep sleep;
      mu_.lock();
    })
                                    : 0;
    RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
    acquired_stamp_ = sync_internal::HoldStamp();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (cls_ != LockClass::kCount) sync_internal::EndHold(cls_, LockMode::kWrite, acquired_stamp_);
    mu_.unlock();
    LockdepRelease(rank_, this);
  }
  /// BasicLockable spelling, for std::unique_lock and std::condition_variable_any
  /// (whose wait releases and re-acquires: the re-acquisition is counted).
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { Lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { Unlock(); }

 private:
  std::mutex mu_;
  const LockRank rank_;
  const LockClass cls_;
  uint64_t acquired_stamp_ = 0;  // written by the holder only
};

/// Scoped hold of a Mutex.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& m) ABSL_EXCLUSIVE_LOCK_FUNCTION(m) : m_(m) { m_.Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { m_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

}  // namespace vmspace
