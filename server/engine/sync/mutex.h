// Mutex: a sleeping lock (std::mutex) with a lockdep rank and the clang thread-safety
// capability, for the engine's leaf and near-leaf locks that are not instrumented in the
// lock stats (anon_vma_lock, the shmem page index, allocator shards, the node pool).
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"
#include "sync/lockdep.h"

namespace vmspace {

class ABSL_LOCKABLE Mutex {
 public:
  explicit Mutex(LockRank rank) : rank_(rank) {}
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    LockdepAcquire(rank_, this);
    mu_.lock();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.unlock();
    LockdepRelease(rank_, this);
  }

 private:
  std::mutex mu_;
  const LockRank rank_;
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
