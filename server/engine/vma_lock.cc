// SPDX-License-Identifier: Apache-2.0
// Per-VMA locks in the form of the space's profile (include/linux/mmap_lock.h,
// mm/mmap_lock.c, lock_vma_under_rcu in mm/memory.c): kRwsem, the 6.4-6.14 separately
// allocated vma_lock rw_semaphore with a detached flag; kRefcnt, the 6.15 vm_refcnt in
// the VMA. Both with the 6.4-6.13 mm_lock_seq (advanced at mmap_write_unlock) and the
// 6.4-6.9 eligibility rules. Lock rules: LOCKING.md.
#include <atomic>

#include "mm.h"
#include "vma_lock.h"
#include "sync/lock_timing.h"

namespace vmspace {

namespace {
// is_vma_writer_only(): a writer (VMA_LOCK_OFFSET) waits and at most the attach
// reference remains besides it.
inline bool IsVmaWriterOnly(uint32_t refcnt) {
  return (refcnt & Vma::kVmaLockOffset) && refcnt <= Vma::kVmaLockOffset + 1;
}

inline thread_local uint32_t tls_vma_hold_sample = 0;  // hold-time sampling of VMA read locks
}  // namespace

void WaitForVmaReadersLocked(MmStruct& mm, Vma* v, uint32_t target) {
  if (v->vm_refcnt.load(std::memory_order_seq_cst) == target) {
    RecordLock(LockClass::kVmaLock, LockMode::kWrite, false, 0, 0);
    return;
  }
  // Readers hold v: spin briefly (a reader on a CPU leaves within a few microseconds),
  // then sleep until the reader that leaves us alone wakes us (rcuwait_wait_event on
  // mm->vma_writer_wait; vma_refcount_put wakes). Spinning longer would burn the CPU a
  // preempted reader needs while we hold mmap_lock for write.
  static const uint64_t spin_ticks = NsToTicks(MmStruct::kVmaWriterSpinNs);
  const uint64_t t0 = NowTicks();
  bool done = false;
  while (NowTicks() - t0 < spin_ticks) {
    if (v->vm_refcnt.load(std::memory_order_seq_cst) == target) {
      done = true;
      break;
    }
    __builtin_ia32_pause();
  }
  while (!done) {
    const uint32_t w = mm.vma_writer_wait.load(std::memory_order_seq_cst);
    if (v->vm_refcnt.load(std::memory_order_seq_cst) == target) break;
    RcuSleep sleep;
    mm.vma_writer_wait.wait(w, std::memory_order_seq_cst);
  }
  RecordLock(LockClass::kVmaLock, LockMode::kWrite, true,
             LockStatsEnabled() ? NowTicks() - t0 + 1 : 0, 0);
}

void VmaStartWriteLocked(MmStruct& mm, Vma* v) {
  mm.mmap_lock.AssertWriteHeld();
  const uint64_t seq = mm.mm_lock_seq.load(std::memory_order_relaxed);
  if (v->vm_lock_seq.load(std::memory_order_relaxed) == seq) return;  // already, this section
  switch (mm.vma_form) {
    case VmaForm::kNone:  // no per-VMA locks: nothing to wait for (kept for the assertion)
      break;
    case VmaForm::kRwsem:
      // __vma_start_write() 6.4-6.14: down_write waits out the readers; the sequence is
      // written under the lock (WRITE_ONCE), so a reader that gets the lock after us
      // sees it (up_write's release, the trylock's acquire).
      v->vm_lock->lock.LockWrite();
      v->vm_lock_seq.store(seq, std::memory_order_relaxed);
      v->vm_lock->lock.UnlockWrite();
      return;
    case VmaForm::kRefcnt:
      if (v->vm_refcnt.load(std::memory_order_seq_cst) == 0) break;  // detached: no reader can take it
      // __vma_enter_locked(): new readers now fail; wait for the current ones.
      v->vm_refcnt.fetch_add(Vma::kVmaLockOffset, std::memory_order_seq_cst);
      WaitForVmaReadersLocked(mm, v, Vma::kVmaLockOffset + 1);
      // WRITE_ONCE: a reader whose vm_refcnt increment follows the release below sees it.
      v->vm_lock_seq.store(seq, std::memory_order_relaxed);
      // __vma_exit_locked()
      v->vm_refcnt.fetch_sub(Vma::kVmaLockOffset, std::memory_order_seq_cst);
      return;
  }
  v->vm_lock_seq.store(seq, std::memory_order_relaxed);  // no lockless readers
}

void VmaAssertWriteLocked(const MmStruct& mm, const Vma* v) {
  VMSPACE_LOCK_ASSERT(v->vm_lock_seq.load(std::memory_order_relaxed) ==
                          mm.mm_lock_seq.load(std::memory_order_relaxed),
                      "vma_assert_write_locked: VMA changed without vma_start_write");
}

void VmaInitLocked(MmStruct& mm, Vma* v) {
  // Plain stores (vma_lock_init): a lockless reader reaches v only through the index's
  // release store that publishes it, or (kRefcnt, a reused VMA) through vm_refcnt,
  // whose attaching release store comes after.
  v->vm_lock_seq.store(mm.mm_lock_seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (mm.vma_form == VmaForm::kRefcnt) v->vm_refcnt.store(1, std::memory_order_release);  // vma_mark_attached
  else v->detached.store(false, std::memory_order_relaxed);
}

void VmaMarkDetachedLocked(MmStruct& mm, Vma* v) {
  VmaAssertWriteLocked(mm, v);
  if (mm.vma_form != VmaForm::kRefcnt) {
    // 6.4-6.14 vma_mark_detached(): the write lock keeps readers out; one that locks
    // this VMA after the section (reads the advanced mm_lock_seq, whose release store
    // follows this one) sees the flag. A plain store, as the kernel's.
    v->detached.store(true, std::memory_order_relaxed);
    return;
  }
  if (v->vm_refcnt.fetch_sub(1, std::memory_order_seq_cst) == 1) return;  // no readers: detached
  // Transient readers (they will fail their vm_lock_seq re-check) still hold it.
  uint32_t c = v->vm_refcnt.load(std::memory_order_seq_cst);
  do {
    if (c == 0) return;
  } while (!v->vm_refcnt.compare_exchange_weak(c, c + Vma::kVmaLockOffset, std::memory_order_seq_cst));
  WaitForVmaReadersLocked(mm, v, Vma::kVmaLockOffset);
  v->vm_refcnt.fetch_sub(Vma::kVmaLockOffset, std::memory_order_seq_cst);
}

bool VmaIsDetached(const MmStruct& mm, const Vma* v) {
  return mm.vma_form == VmaForm::kRefcnt ? v->vm_refcnt.load(std::memory_order_seq_cst) == 0
                                      : v->detached.load(std::memory_order_seq_cst);
}

VmaReadResult VmaStartRead(MmStruct& mm, Vma* v) {
  // Check before locking. A race might cause a false "locked" result.
  if (v->vm_lock_seq.load(std::memory_order_seq_cst) == mm.mm_lock_seq.load(std::memory_order_seq_cst))
    return VmaReadResult::kLocked;
  if (mm.vma_form == VmaForm::kRwsem) {
    // 6.4-6.14: down_read_trylock on the separate vma_lock.
    if (!v->vm_lock->lock.TryLockReadUnaccounted()) return VmaReadResult::kLocked;
  } else {
    uint32_t c = v->vm_refcnt.load(std::memory_order_seq_cst);
    do {
      if (c == 0) return VmaReadResult::kDetached;
      if (c >= Vma::kVmaLockOffset - 1) return VmaReadResult::kLocked;  // VMA_REF_LIMIT
    } while (!v->vm_refcnt.compare_exchange_weak(c, c + 1, std::memory_order_seq_cst));
  }
  // Re-check: a writer may have locked it between the first check and our lock.
  if (v->vm_lock_seq.load(std::memory_order_seq_cst) == mm.mm_lock_seq.load(std::memory_order_seq_cst)) {
    VmaEndRead(mm, v);
    return VmaReadResult::kLocked;
  }
  return VmaReadResult::kOk;
}

void VmaEndRead(MmStruct& mm, Vma* v) {
  if (mm.vma_form == VmaForm::kRwsem) {
    v->vm_lock->lock.UnlockReadUnaccounted();
    return;
  }
  // v may be reused once the count drops: touch only the mm after.
  const uint32_t now = v->vm_refcnt.fetch_sub(1, std::memory_order_seq_cst) - 1;
  if (IsVmaWriterOnly(now)) {
    mm.vma_writer_wait.fetch_add(1, std::memory_order_seq_cst);
    mm.vma_writer_wait.notify_all();
  }
}

VmaLockResult LockFoundVmaRcu(MmStruct& mm, Vma* v, uint64_t addr) {
  switch (VmaStartRead(mm, v)) {
    case VmaReadResult::kDetached: return VmaLockResult::kMiss;
    case VmaReadResult::kLocked: return VmaLockResult::kLocked;
    case VmaReadResult::kOk: break;
  }
  // Locked: now the fields are stable. The range may have changed between the lookup
  // and the lock (kRefcnt: the VMA may even have been freed and reused for another
  // range; Linux also checks vma->vm_mm there, always this space's here).
  if (!(v->vm_start <= addr && addr < v->vm_end)) {
    VmaEndRead(mm, v);
    return VmaLockResult::kAbort;
  }
  // kRwsem: the area was replaced with another one since the lookup.
  if (mm.vma_form == VmaForm::kRwsem && v->detached.load(std::memory_order_seq_cst)) {
    VmaEndRead(mm, v);
    return VmaLockResult::kMiss;
  }
  // 6.4-6.9: anonymous VMAs need an anon_vma already (find_mergeable_anon_vma reads
  // unlocked neighbours). File VMAs are taken (6.5 "mm: allow per-VMA locks on
  // file-backed VMAs"); with vma_lock=anon their fault answers VM_FAULT_RETRY.
  const bool eligible = !v->is_anonymous() || v->anon() != nullptr;
  if (!eligible) {
    VmaEndRead(mm, v);
    return VmaLockResult::kAbort;
  }
  return VmaLockResult::kOk;
}

Vma* LockVmaUnderRcu(MmStruct& mm, uint64_t addr) {
  for (;;) {
    RcuReadGuard g;
    Vma* v = VmaLookupRcu(mm, addr);
    const VmaLockResult r = v ? LockFoundVmaRcu(mm, v, addr) : VmaLockResult::kAbort;
    if (r == VmaLockResult::kOk) return v;
    if (r == VmaLockResult::kMiss) {
      CountEvent(Event::kVmaLockMiss);
      continue;
    }
    if (r == VmaLockResult::kLocked) RecordLock(LockClass::kVmaLock, LockMode::kRead, true, 0, 0);  // failed trylock
    CountEvent(Event::kVmaLockAbort);
    return nullptr;
  }
}

VmaFaultReadLock::VmaFaultReadLock(MmStruct& mm, uint64_t addr) : mm_(mm), v_(LockVmaUnderRcu(mm, addr)) {
  if (!v_) return;
  LockdepAcquire(LockRank::kVmaLock, v_);
  RecordLock(LockClass::kVmaLock, LockMode::kRead, false, 0, 0);
  const bool sample = LockStatsEnabled() &&
                      (++tls_vma_hold_sample & (sync_internal::kHoldSampleEvery - 1)) == 0;
  if (sample) hold_start_ = NowTicks();
}

void VmaFaultReadLock::Unlock() {
  if (hold_start_)
    RecordHold(LockClass::kVmaLock, LockMode::kRead, NowTicks() - hold_start_, sync_internal::kHoldSampleEvery);
  LockdepRelease(LockRank::kVmaLock, v_);
  VmaEndRead(mm_, v_);
  v_ = nullptr;
}

}  // namespace vmspace
