// RwSem: the reader-writer semaphore behind mmap_lock (include/linux/rwsem.h), with
// lock_stat-like instrumentation and the clang thread-safety capability the compiler
// checks (-Wthread-safety).
//
// Today it is glibc's writer-preferring rwlock (PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP):
// once a writer waits, new readers queue behind it, so a stream of readers cannot starve
// mmap/munmap. It does NOT yet have Linux's optimistic spinning, reader lock stealing or
// handoff bit (kernel/locking/rwsem.c). Not recursive.
#pragma once

#include <pthread.h>

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "engine/stats.h"
#include "sync/lockdep.h"

namespace vmspace {

class ABSL_LOCKABLE RwSem {
 public:
  RwSem(LockClass cls, LockRank rank);
  ~RwSem();
  RwSem(const RwSem&) = delete;
  RwSem& operator=(const RwSem&) = delete;

  /// down_read / up_read. Counted (and, contended, timed) in the lock stats.
  void LockRead() ABSL_SHARED_LOCK_FUNCTION();
  void UnlockRead() ABSL_UNLOCK_FUNCTION();
  /// down_write / up_write.
  void LockWrite() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void UnlockWrite() ABSL_UNLOCK_FUNCTION();

  /// mmap_assert_locked(): the caller holds it (read or write). Checked at run time in
  /// lockdep builds; tells the compiler's analysis the lock is held.
  void AssertHeld() const ABSL_ASSERT_SHARED_LOCK();
  /// mmap_assert_write_locked(): the caller holds it for write.
  void AssertWriteHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK();

 private:
  pthread_rwlock_t rw_;
  const LockClass cls_;
  const LockRank rank_;
  // Hold-time stamp of the current writer (0 = not sampled); readers keep theirs in a
  // thread-local per lock class.
  uint64_t write_acquired_ticks_ = 0;
#if defined(VMSPACE_LOCKDEP)
  pthread_t writer_{};  // debug: the write holder, for AssertWriteHeld
  bool write_held_ = false;
#endif
};

/// Scoped read hold of an RwSem.
class ABSL_SCOPED_LOCKABLE ReadGuard {
 public:
  explicit ReadGuard(RwSem& l) ABSL_SHARED_LOCK_FUNCTION(l) : l_(l) { l_.LockRead(); }
  ~ReadGuard() ABSL_UNLOCK_FUNCTION() { l_.UnlockRead(); }
  ReadGuard(const ReadGuard&) = delete;
  ReadGuard& operator=(const ReadGuard&) = delete;

 private:
  RwSem& l_;
};

}  // namespace vmspace
