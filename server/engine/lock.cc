#include "engine/lock.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>

namespace vmspace {

namespace {
// Acquisition time of the read lock each class is currently held in by this thread
// (a thread holds at most one read lock per class at a time; see LOCKING.md).
thread_local uint64_t tls_read_acquired[static_cast<size_t>(LockClass::kCount)];

inline void Pause() { __builtin_ia32_pause(); }
}  // namespace

LockRank RankOf(LockClass c) {
  switch (c) {
    case LockClass::kMmapLock: return LockRank::kMmapLock;
    case LockClass::kVmaLock: return LockRank::kVmaLock;
    case LockClass::kPtl: return LockRank::kPtl;
    case LockClass::kPageTableLock: return LockRank::kPageTableLock;
    case LockClass::kCount: break;
  }
  return LockRank::kPtl;
}

#if defined(VMSPACE_LOCKDEP)
namespace {
thread_local LockRank tls_held[16];
thread_local int tls_depth = 0;
}  // namespace

void LockdepAcquire(LockRank rank) {
  for (int i = 0; i < tls_depth; i++) {
    if (static_cast<int>(tls_held[i]) >= static_cast<int>(rank)) {
      fprintf(stderr,
              "vmspace lockdep: lock order violation: acquiring rank %d while holding rank %d "
              "(see server/engine/LOCKING.md)\n",
              static_cast<int>(rank), static_cast<int>(tls_held[i]));
      abort();
    }
  }
  if (tls_depth == 16) {
    fprintf(stderr, "vmspace lockdep: more than 16 locks held\n");
    abort();
  }
  tls_held[tls_depth++] = rank;
}

void LockdepRelease(LockRank rank) {
  for (int i = tls_depth - 1; i >= 0; i--) {
    if (tls_held[i] == rank) {
      for (int k = i; k + 1 < tls_depth; k++) tls_held[k] = tls_held[k + 1];
      tls_depth--;
      return;
    }
  }
  fprintf(stderr, "vmspace lockdep: releasing rank %d that is not held\n", static_cast<int>(rank));
  abort();
}

int LockdepDepth() { return tls_depth; }
#endif

RwSem::RwSem(LockClass cls) : cls_(cls) {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&rw_, &a);
  pthread_rwlockattr_destroy(&a);
}

RwSem::~RwSem() { pthread_rwlock_destroy(&rw_); }

void RwSem::LockRead() {
  LockdepAcquire(RankOf(cls_));
  bool timing = LockStatsEnabled();
  if (pthread_rwlock_tryrdlock(&rw_) == 0) {
    if (timing) tls_read_acquired[static_cast<size_t>(cls_)] = NowNs();
    else RecordLock(cls_, LockMode::kRead, false, 0, 0);
    return;
  }
  uint64_t t0 = timing ? NowNs() : 0;
  pthread_rwlock_rdlock(&rw_);
  if (timing) {
    uint64_t t1 = NowNs();
    tls_read_acquired[static_cast<size_t>(cls_)] = t1;
    // Contention is recorded now; the acquisition and hold time at unlock.
    RecordLock(cls_, LockMode::kRead, true, t1 - t0, 0);
    // RecordLock counted one acquisition already; UnlockRead must not count another.
    tls_read_acquired[static_cast<size_t>(cls_)] |= 1ull << 63;
  } else {
    RecordLock(cls_, LockMode::kRead, true, 0, 0);
  }
}

bool RwSem::TryLockRead() {
  if (pthread_rwlock_tryrdlock(&rw_) != 0) return false;
  LockdepAcquire(RankOf(cls_));
  if (LockStatsEnabled()) tls_read_acquired[static_cast<size_t>(cls_)] = NowNs();
  else RecordLock(cls_, LockMode::kRead, false, 0, 0);
  return true;
}

void RwSem::UnlockRead() {
  if (LockStatsEnabled()) {
    uint64_t a = tls_read_acquired[static_cast<size_t>(cls_)];
    bool counted = a >> 63;
    a &= ~(1ull << 63);
    uint64_t now = NowNs();
    uint64_t hold = now > a ? now - a : 1;
    if (counted) RecordHold(cls_, LockMode::kRead, hold);
    else RecordLock(cls_, LockMode::kRead, false, 0, hold);
  }
  pthread_rwlock_unlock(&rw_);
  LockdepRelease(RankOf(cls_));
}

void RwSem::LockWrite() {
  LockdepAcquire(RankOf(cls_));
  bool timing = LockStatsEnabled();
  bool contended = false;
  uint64_t wait = 0;
  if (pthread_rwlock_trywrlock(&rw_) != 0) {
    contended = true;
    uint64_t t0 = timing ? NowNs() : 0;
    pthread_rwlock_wrlock(&rw_);
    if (timing) {
      write_acquired_ns_ = NowNs();
      wait = write_acquired_ns_ - t0;
    }
  } else if (timing) {
    write_acquired_ns_ = NowNs();
  }
  if (!timing) {
    RecordLock(cls_, LockMode::kWrite, contended, 0, 0);
  } else if (contended) {
    RecordLock(cls_, LockMode::kWrite, true, wait, 0);
    write_acquired_ns_ |= 1ull << 63;
  }
}

bool RwSem::TryLockWrite() {
  if (pthread_rwlock_trywrlock(&rw_) != 0) return false;
  LockdepAcquire(RankOf(cls_));
  if (LockStatsEnabled()) write_acquired_ns_ = NowNs();
  else RecordLock(cls_, LockMode::kWrite, false, 0, 0);
  return true;
}

void RwSem::UnlockWrite() {
  if (LockStatsEnabled()) {
    uint64_t a = write_acquired_ns_;
    bool counted = a >> 63;
    a &= ~(1ull << 63);
    uint64_t now = NowNs();
    uint64_t hold = now > a ? now - a : 1;
    if (counted) RecordHold(cls_, LockMode::kWrite, hold);
    else RecordLock(cls_, LockMode::kWrite, false, 0, hold);
  }
  pthread_rwlock_unlock(&rw_);
  LockdepRelease(RankOf(cls_));
}

void SpinLock::Lock() {
  LockdepAcquire(RankOf(cls_));
  if (!locked_.exchange(true, std::memory_order_acquire)) {
    if (LockStatsEnabled()) acquired_ns_ = NowNs();
    else RecordLock(cls_, LockMode::kWrite, false, 0, 0);
    return;
  }
  bool timing = LockStatsEnabled();
  uint64_t t0 = timing ? NowNs() : 0;
  int spins = 0;
  for (;;) {
    while (locked_.load(std::memory_order_relaxed)) {
      if (++spins < 1000) Pause();
      else sched_yield();
    }
    if (!locked_.exchange(true, std::memory_order_acquire)) break;
  }
  if (timing) {
    uint64_t t1 = NowNs();
    RecordLock(cls_, LockMode::kWrite, true, t1 - t0, 0);
    acquired_ns_ = t1 | (1ull << 63);
  } else {
    RecordLock(cls_, LockMode::kWrite, true, 0, 0);
  }
}

void SpinLock::Unlock() {
  if (LockStatsEnabled()) {
    uint64_t a = acquired_ns_;
    bool counted = a >> 63;
    a &= ~(1ull << 63);
    uint64_t now = NowNs();
    uint64_t hold = now > a ? now - a : 1;
    if (counted) RecordHold(cls_, LockMode::kWrite, hold);
    else RecordLock(cls_, LockMode::kWrite, false, 0, hold);
  }
  locked_.store(false, std::memory_order_release);
  LockdepRelease(RankOf(cls_));
}

}  // namespace vmspace
