#include "sync/rwsem.h"

#include "sync/lock_timing.h"

namespace vmspace {

using sync_internal::EndHold;
using sync_internal::HoldStamp;
using sync_internal::TimedWait;

namespace {
// Acquisition stamp of the read lock each class is currently held in by this thread
// (a thread holds at most one read lock per class at a time; see LOCKING.md).
thread_local uint64_t tls_read_acquired[static_cast<size_t>(LockClass::kCount)];
}  // namespace

RwSem::RwSem(LockClass cls, LockRank rank) : cls_(cls), rank_(rank) {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&rw_, &a);
  pthread_rwlockattr_destroy(&a);
}

RwSem::~RwSem() { pthread_rwlock_destroy(&rw_); }

void RwSem::LockRead() {
  LockdepAcquire(rank_, this);
  bool contended = pthread_rwlock_tryrdlock(&rw_) != 0;
  uint64_t wait = contended ? TimedWait([&] { pthread_rwlock_rdlock(&rw_); }) : 0;
  RecordLock(cls_, LockMode::kRead, contended, wait, 0);
  tls_read_acquired[static_cast<size_t>(cls_)] = HoldStamp();
}

void RwSem::UnlockRead() {
  EndHold(cls_, LockMode::kRead, tls_read_acquired[static_cast<size_t>(cls_)]);
  pthread_rwlock_unlock(&rw_);
  LockdepRelease(rank_, this);
}

void RwSem::LockWrite() {
  LockdepAcquire(rank_, this);
  bool contended = pthread_rwlock_trywrlock(&rw_) != 0;
  uint64_t wait = contended ? TimedWait([&] { pthread_rwlock_wrlock(&rw_); }) : 0;
  RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
  write_acquired_ticks_ = HoldStamp();
#if defined(VMSPACE_LOCKDEP)
  writer_ = pthread_self();
  write_held_ = true;
#endif
}

void RwSem::UnlockWrite() {
#if defined(VMSPACE_LOCKDEP)
  write_held_ = false;
#endif
  EndHold(cls_, LockMode::kWrite, write_acquired_ticks_);
  pthread_rwlock_unlock(&rw_);
  LockdepRelease(rank_, this);
}

void RwSem::AssertHeld() const {
  VMSPACE_LOCK_ASSERT(LockdepHeld(this), "mmap_assert_locked: lock not held");
}

void RwSem::AssertWriteHeld() const {
#if defined(VMSPACE_LOCKDEP)
  VMSPACE_LOCK_ASSERT(LockdepHeld(this) && write_held_ && pthread_equal(writer_, pthread_self()),
                      "mmap_assert_write_locked: lock not held for write");
#endif
}

}  // namespace vmspace
