// Instrumented lock primitives: a reader-writer semaphore (mmap_lock) and a spinlock
// (page-table locks). Each acquisition is counted per lock class and mode; with lock
// stats enabled, wait time (contended acquisitions only) and hold time are recorded
// too, like CONFIG_LOCK_STAT's /proc/lock_stat. Counting goes to the calling thread's
// stats block (stats.h), so instrumentation never adds a shared write.
//
// The lock order these locks are used in is written down in LOCKING.md.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "engine/stats.h"

namespace vmspace {

/// Lock ranks for the debug lock-order checker, in the order of LOCKING.md: a thread may
/// only acquire a lock whose rank is higher than every rank it already holds.
enum class LockRank : uint8_t {
  kMmapLock = 1,
  kVmaLock = 2,
  kAnonVmaLock = 3,
  kShmem = 4,
  kPageTableLock = 5,
  kPtl = 6,
  kFrameShard = 7,
  kFrameChunk = 8,
};
LockRank RankOf(LockClass c);

#if defined(VMSPACE_LOCKDEP)
/// Records that the calling thread takes/releases a lock of `rank`; aborts with a
/// message on an order violation (a rank not above every rank held).
void LockdepAcquire(LockRank rank);
void LockdepRelease(LockRank rank);
/// The ranks the calling thread holds, innermost last (for tests).
int LockdepDepth();
inline constexpr bool kLockdep = true;
#else
inline void LockdepAcquire(LockRank) {}
inline void LockdepRelease(LockRank) {}
inline int LockdepDepth() { return 0; }
inline constexpr bool kLockdep = false;
#endif

/// RAII lock_guard for a std::mutex-like lock that also feeds the lockdep checker.
template <typename M>
class RankedGuard {
 public:
  RankedGuard(M& m, LockRank r) : m_(m), r_(r) {
    LockdepAcquire(r_);
    m_.lock();
  }
  ~RankedGuard() {
    m_.unlock();
    LockdepRelease(r_);
  }
  RankedGuard(const RankedGuard&) = delete;
  RankedGuard& operator=(const RankedGuard&) = delete;

 private:
  M& m_;
  LockRank r_;
};

/// One acquisition in this many (per thread) has its hold time measured; its hold time
/// is recorded with this weight. Wait times of contended acquisitions are always
/// measured (with --lock-stats=on). Keeps lock_stat's cost on the fault path small.
inline constexpr uint32_t kHoldSampleEvery = 16;

/// Reader-writer semaphore like Linux's rw_semaphore: writers are preferred once
/// waiting (glibc PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP), so a stream of readers
/// cannot starve mmap/munmap. Not recursive.
class RwSem {
 public:
  explicit RwSem(LockClass cls);
  ~RwSem();
  RwSem(const RwSem&) = delete;
  RwSem& operator=(const RwSem&) = delete;

  /// down_read / up_read.
  void LockRead();
  void UnlockRead();
  /// down_read_trylock: true if taken (counted as an uncontended acquisition).
  bool TryLockRead();
  /// down_write / up_write.
  void LockWrite();
  void UnlockWrite();
  bool TryLockWrite();

 private:
  pthread_rwlock_t rw_;
  LockClass cls_;
  // Hold-time stamp of the current writer (0 = not sampled); readers keep theirs in a
  // thread-local per lock class.
  uint64_t write_acquired_ticks_ = 0;
};

/// Test-and-test-and-set spinlock with instrumentation, for page-table locks
/// (mm->page_table_lock and split PTE locks). Spins with pause, yields after a while.
class SpinLock {
 public:
  explicit SpinLock(LockClass cls = LockClass::kPtl) : cls_(cls) {}
  void Lock();
  void Unlock();
  bool TryLock() { return !locked_.exchange(true, std::memory_order_acquire); }

 private:
  std::atomic<bool> locked_{false};
  LockClass cls_;
  uint64_t acquired_ticks_ = 0;
};

/// RAII holders.
class SpinGuard {
 public:
  explicit SpinGuard(SpinLock& l) : l_(l) { l_.Lock(); }
  ~SpinGuard() { l_.Unlock(); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  SpinLock& l_;
};

}  // namespace vmspace
