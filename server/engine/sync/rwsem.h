// SPDX-License-Identifier: Apache-2.0
// RwSem: the reader-writer semaphore behind mmap_lock, Linux's rw_semaphore
// (include/linux/rwsem.h, kernel/locking/rwsem.c as of 6.18), with lock_stat-like
// instrumentation and the clang thread-safety capability the compiler checks
// (-Wthread-safety).
//
// The kernel's algorithm, in user space:
//  * one count word: bit 0 writer-locked, bit 1 waiters present, bit 2 handoff, bits
//    8-62 the reader count (bit 63 read-fail guard); an owner word (the holder's task,
//    bit 0 reader-owned, bit 1 nonspinnable).
//  * down_read fast path: add a reader bias and check (one atomic add); down_write
//    fast path: compare-and-swap 0 -> writer-locked.
//  * writer optimistic spinning (rwsem_optimistic_spin) while the owner is a writer
//    that is "running", or readers for at most (10 + readers/2) us, then sleep. User
//    space has no owner->on_cpu: a writer owner counts as running while it still holds
//    the lock, for at most kOwnerSpinNs of spinning on that owner (about what a futex
//    sleep and wake-up costs, so spinning never loses more than sleeping would have).
//    The kernel queues extra spinners on an MCS lock (osq); here one thread spins at a
//    time and the others go to the wait queue.
//  * reader lock stealing in the slow path while no writer holds the lock and no waiter
//    has set the handoff bit (and the lock is not visibly reader-owned by others).
//  * the handoff bit: a waiter that has waited longer than the wait timeout
//    (RWSEM_WAIT_TIMEOUT, 4 ms: one jiffy at HZ=250) and still finds the lock taken
//    sets it; then nobody may steal (fast paths, spinning writers, stealing readers
//    fail) and the lock goes to the first waiter.
//  * a FIFO wait queue under a wait lock (a circular list, as the kernel's list_head): on release, the first waiter if it is a
//    writer, else every waiting reader (up to 256, also those queued behind writers,
//    the kernel's phase-fair reader batch), is woken. Waiters sleep on a futex.
//  * downgrade_write(): the writer becomes a reader and wakes the readers at the head
//    of the queue.
// Not recursive; a thread holds at most one RwSem of a class (LOCKING.md).
//
// Size: 40 bytes, as struct rw_semaphore on x86-64 (count, owner, osq, wait_lock, the
// wait list). What is per lock class rather than per lock lives in per-thread cells:
// the hold-time stamps (a thread holds one lock of a class at a time) and the lock
// event counts (RwSemEvents, as the kernel's lock_events are global per-CPU counters).
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "engine/stats.h"
#include "sync/lockdep.h"

namespace vmspace {

/// Counts of the rwsem slow-path events of one lock class, named after the kernel's
/// lock events (kernel/locking/lock_events_list.h, CONFIG_LOCK_EVENT_COUNTS: global
/// counters, not per lock). A snapshot; Minus gives the events between two snapshots.
struct RwSemEvents {
  uint64_t opt_lock = 0;       // rwsem_opt_lock: writer got the lock by optimistic spinning
  uint64_t opt_fail = 0;       // rwsem_opt_fail: writer gave up spinning (or could not spin)
  uint64_t opt_nospin = 0;     // rwsem_opt_nospin: reader-owned spin timed out: nonspinnable
  uint64_t rlock_steal = 0;    // rwsem_rlock_steal: reader stole the lock in the slow path
  uint64_t rlock_fast = 0;     // rwsem_rlock_fast: reader found an empty queue and no writer
  uint64_t rlock_handoff = 0;  // rwsem_rlock_handoff: handoff set for the reader at the head
  uint64_t wlock_handoff = 0;  // rwsem_wlock_handoff: handoff set by a waiting writer
  uint64_t sleep_reader = 0;   // rwsem_sleep_reader: futex sleeps of queued readers
  uint64_t sleep_writer = 0;   // rwsem_sleep_writer: futex sleeps of queued writers
  uint64_t wake_reader = 0;    // rwsem_wake_reader: readers granted the lock from the queue
  uint64_t wake_writer = 0;    // rwsem_wake_writer: wake-ups of the writer at the head
  /// this - before, field by field.
  RwSemEvents Minus(const RwSemEvents& before) const;
};

class ABSL_LOCKABLE RwSem {
 public:
  // The count word (kernel/locking/rwsem.c).
  static constexpr uint64_t kWriterLocked = 1ull << 0;  // RWSEM_WRITER_LOCKED
  static constexpr uint64_t kFlagWaiters = 1ull << 1;   // RWSEM_FLAG_WAITERS
  static constexpr uint64_t kFlagHandoff = 1ull << 2;   // RWSEM_FLAG_HANDOFF
  static constexpr uint64_t kFlagReadFail = 1ull << 63; // RWSEM_FLAG_READFAIL
  static constexpr int kReaderShift = 8;                 // RWSEM_READER_SHIFT
  static constexpr uint64_t kReaderBias = 1ull << kReaderShift;
  /// RWSEM_WAIT_TIMEOUT: how long a waiter waits before it may set the handoff bit.
  static constexpr uint64_t kWaitTimeoutNs = 4'000'000;
  /// How long a spinning writer treats a writer owner as running (see above).
  static constexpr uint64_t kOwnerSpinNs = 10'000;

  /// `wait_timeout_ns` is RWSEM_WAIT_TIMEOUT, kept in whole microseconds (at most about
  /// 71 minutes; tests pass 0: a waiter that finds the
  /// lock taken may set the handoff bit at once, as the kernel's RT tasks do).
  RwSem(LockClass cls, LockRank rank, uint64_t wait_timeout_ns = kWaitTimeoutNs);
  ~RwSem() = default;
  RwSem(const RwSem&) = delete;
  RwSem& operator=(const RwSem&) = delete;

  /// down_read / up_read. Counted in the lock stats: contended when the reader had to
  /// queue (it waited in the queue, sleeping if not granted at once), with the wait
  /// time from queueing to the grant (a reader that steals the lock did not wait).
  void LockRead() ABSL_SHARED_LOCK_FUNCTION();
  void UnlockRead() ABSL_UNLOCK_FUNCTION();
  /// down_read_trylock(): a read hold if no writer holds or waits with the handoff (the
  /// count's read-fail mask), never waiting. Neither counted in the lock stats nor seen
  /// by lockdep: the caller accounts for it (the per-VMA lock of the rwsem form, whose
  /// read side lock_vma_under_rcu counts as VMA_LOCK_*). Release with UnlockReadUnaccounted.
  bool TryLockReadUnaccounted();
  /// up_read() of a TryLockReadUnaccounted hold: the last reader out wakes the queue.
  void UnlockReadUnaccounted();
  /// down_write / up_write. Contended when the fast path failed and the writer had to
  /// spin or queue; the wait time is all of its spinning and sleeping.
  void LockWrite() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  void UnlockWrite() ABSL_UNLOCK_FUNCTION();
  /// down_write_nested(SINGLE_DEPTH_NESTING): LockWrite of a second lock of the same
  /// class as one the caller holds (dup_mmap's child mmap_lock under the parent's, on a
  /// space no other thread can reach yet). Lockdep allows the equal rank.
  void LockWriteNested() ABSL_EXCLUSIVE_LOCK_FUNCTION();
  /// downgrade_write(): the write holder becomes a read holder without letting a writer
  /// in, and the readers at the head of the queue are granted the lock with it. The
  /// write hold ends (its hold time is recorded) and an uncontended read acquisition
  /// is counted, whose hold ends at UnlockRead. (The analysis has no downgrade
  /// attribute: release of the exclusive capability plus acquisition of the shared one.)
  void DowngradeWrite() ABSL_UNLOCK_FUNCTION() ABSL_SHARED_LOCK_FUNCTION();

  /// mmap_assert_locked(): the caller holds it (read or write). Checked at run time in
  /// lockdep builds; tells the compiler's analysis the lock is held.
  void AssertHeld() const ABSL_ASSERT_SHARED_LOCK();
  /// mmap_assert_write_locked(): the caller holds it for write (the owner word names
  /// the calling thread). Checked in lockdep builds.
  void AssertWriteHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK();

  /// The count word, for tests and debugging (bits above).
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  /// The slow-path event counts of this lock's class so far, over all threads (past and
  /// present; takes a process-wide mutex: not for a hot path).
  RwSemEvents events() const { return ClassEvents(cls_); }
  static RwSemEvents ClassEvents(LockClass cls);
  /// The RwSemEvents counters as indices (rwsem.cc).
  enum Event : int;
  /// The number of threads in the wait queue (takes the wait lock), for tests.
  size_t waiters();

 private:
  struct Waiter;
  struct WakeQ;
  enum OwnerState : int;
  /// rwsem's raw wait_lock: protects the wait queue. A 4-byte futex lock (unlocked,
  /// locked, locked with sleepers), as raw_spinlock_t is 4 bytes; it spins briefly
  /// before it sleeps (a user-space holder can be preempted, so it cannot only spin).
  class ABSL_LOCKABLE WaitLock {
   public:
    void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
      uint32_t c = 0;
      if (!word_.compare_exchange_strong(c, 1, std::memory_order_acquire, std::memory_order_relaxed)) LockSlow();
    }
    void Unlock() ABSL_UNLOCK_FUNCTION();

   private:
    void LockSlow();
    std::atomic<uint32_t> word_{0};
  };
  uint64_t WaitDeadline(uint64_t t0) const;
  void Inc(Event e, uint64_t n = 1) const;

  bool DownReadSlowpath(uint64_t count, uint64_t* wait_ticks);
  bool DownWriteSlowpath(uint64_t* wait_ticks);
  void Wake();
  void MarkWake(int wake_type, WakeQ& q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);
  void CondWakeWaiter(uint64_t count, WakeQ& q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);
  bool TryWriteLock(Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);
  bool TryWriteLockUnqueued();
  /// The acquisition of LockWrite / LockWriteNested after lockdep's check: the fast
  /// path or the slow path, counted in the lock stats.
  void DownWrite();
  bool CanSpinOnOwner();
  static OwnerState StateOf(uintptr_t owner);
  OwnerState SpinOnOwner() const;
  bool OptimisticSpin();
  void SetOwner();
  void SetReaderOwned(uintptr_t task);
  void SetNonspinnable();
  void ClearNonspinnable();
  void AddWaiter(Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);
  void DelWaiter(Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);
  bool QueueEmpty() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);
  Waiter* FirstWaiter() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(wait_lock_);

  // As struct rw_semaphore: the count, the owner, the spinner gate (the osq), the wait
  // lock and queue; then the class, rank and wait timeout the kernel keeps elsewhere
  // (lockdep's class key; RWSEM_WAIT_TIMEOUT is a constant there).
  std::atomic<uint64_t> count_{0};
  std::atomic<uintptr_t> owner_{0};
  WaitLock wait_lock_;
  const uint32_t wait_timeout_us_;  // RWSEM_WAIT_TIMEOUT in microseconds
  Waiter* wait_head_ ABSL_GUARDED_BY(wait_lock_) = nullptr;  // the queue's oldest waiter (circular)
  std::atomic<bool> osq_{false};
  const LockClass cls_;
  const LockRank rank_;
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

/// Scoped write hold of an RwSem.
class ABSL_SCOPED_LOCKABLE WriteGuard {
 public:
  explicit WriteGuard(RwSem& l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l) : l_(l) { l_.LockWrite(); }
  ~WriteGuard() ABSL_UNLOCK_FUNCTION() { l_.UnlockWrite(); }
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;

 private:
  RwSem& l_;
};

}  // namespace vmspace
