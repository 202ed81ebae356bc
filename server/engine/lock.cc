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

// Scheme: every acquisition is counted when it is taken (with its wait time if it had
// to wait, measured only with --lock-stats=on). Hold time is sampled: one acquisition in
// kHoldSampleEvery per thread stores a timestamp, and its release records the hold time
// with that weight (so totals and histograms stay unbiased estimates). A stamp of 0
// means "not sampled".
namespace {
thread_local uint32_t tls_sample_ctr = 0;
inline uint64_t HoldStamp() {
  if (!LockStatsEnabled() || (++tls_sample_ctr & (kHoldSampleEvery - 1)) != 0) return 0;
  return NowTicks() | 1;  // never 0
}
inline void EndHold(LockClass c, LockMode m, uint64_t stamp) {
  if (!stamp) return;
  uint64_t now = NowTicks();
  RecordHold(c, m, now > stamp ? now - stamp : 1, kHoldSampleEvery);
}
// Waits for a contended lock: `acquire` blocks; returns the wait in ticks (0 if off).
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
}  // namespace

void RwSem::LockRead() {
  LockdepAcquire(RankOf(cls_));
  bool contended = pthread_rwlock_tryrdlock(&rw_) != 0;
  uint64_t wait = contended ? TimedWait([&] { pthread_rwlock_rdlock(&rw_); }) : 0;
  RecordLock(cls_, LockMode::kRead, contended, wait, 0);
  tls_read_acquired[static_cast<size_t>(cls_)] = HoldStamp();
}

bool RwSem::TryLockRead() {
  if (pthread_rwlock_tryrdlock(&rw_) != 0) return false;
  LockdepAcquire(RankOf(cls_));
  RecordLock(cls_, LockMode::kRead, false, 0, 0);
  tls_read_acquired[static_cast<size_t>(cls_)] = HoldStamp();
  return true;
}

void RwSem::UnlockRead() {
  EndHold(cls_, LockMode::kRead, tls_read_acquired[static_cast<size_t>(cls_)]);
  pthread_rwlock_unlock(&rw_);
  LockdepRelease(RankOf(cls_));
}

void RwSem::LockWrite() {
  LockdepAcquire(RankOf(cls_));
  bool contended = pthread_rwlock_trywrlock(&rw_) != 0;
  uint64_t wait = contended ? TimedWait([&] { pthread_rwlock_wrlock(&rw_); }) : 0;
  RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
  write_acquired_ticks_ = HoldStamp();
}

bool RwSem::TryLockWrite() {
  if (pthread_rwlock_trywrlock(&rw_) != 0) return false;
  LockdepAcquire(RankOf(cls_));
  RecordLock(cls_, LockMode::kWrite, false, 0, 0);
  write_acquired_ticks_ = HoldStamp();
  return true;
}

void RwSem::UnlockWrite() {
  EndHold(cls_, LockMode::kWrite, write_acquired_ticks_);
  pthread_rwlock_unlock(&rw_);
  LockdepRelease(RankOf(cls_));
}

void SpinLock::Lock() {
  LockdepAcquire(RankOf(cls_));
  bool contended = locked_.exchange(true, std::memory_order_acquire);
  uint64_t wait = 0;
  if (contended) {
    wait = TimedWait([&] {
      int spins = 0;
      for (;;) {
        while (locked_.load(std::memory_order_relaxed)) {
          if (++spins < 1000) Pause();
          else sched_yield();
        }
        if (!locked_.exchange(true, std::memory_order_acquire)) break;
      }
    });
  }
  RecordLock(cls_, LockMode::kWrite, contended, wait, 0);
  acquired_ticks_ = HoldStamp();
}

void SpinLock::Unlock() {
  EndHold(cls_, LockMode::kWrite, acquired_ticks_);
  locked_.store(false, std::memory_order_release);
  LockdepRelease(RankOf(cls_));
}

}  // namespace vmspace
