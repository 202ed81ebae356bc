// Per-VMA locks: the 6.15 vm_refcnt form (include/linux/mmap_lock.h, mm/mmap_lock.c),
// with the 6.4-6.13 mm_lock_seq (advanced at mmap_write_unlock) and the 6.4-6.9
// eligibility rules of lock_vma_under_rcu. Lock rules: LOCKING.md.
#include <atomic>

#include "mm.h"
#include "sync/lock_timing.h"

namespace vmspace {

namespace {
// is_vma_writer_only(): a writer (VMA_LOCK_OFFSET) waits and at most the attach
// reference remains besides it.
inline bool IsVmaWriterOnly(uint32_t refcnt) {
  return (refcnt & Vma::kVmaLockOffset) && refcnt <= Vma::kVmaLockOffset + 1;
}
}  // namespace

void MmStruct::WaitForVmaReadersLocked(Vma* v, uint32_t target) {
  if (v->vm_refcnt.load(std::memory_order_seq_cst) == target) {
    RecordLock(LockClass::kVmaLock, LockMode::kWrite, false, 0, 0);
    return;
  }
  // Readers hold v: spin briefly (a reader on a CPU leaves within a few microseconds),
  // then sleep until the reader that leaves us alone wakes us (rcuwait_wait_event on
  // mm->vma_writer_wait; vma_refcount_put wakes). Spinning longer would burn the CPU a
  // preempted reader needs while we hold mmap_lock for write.
  static const uint64_t spin_ticks = NsToTicks(kVmaWriterSpinNs);
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
    const uint32_t w = vma_writer_wait.load(std::memory_order_seq_cst);
    if (v->vm_refcnt.load(std::memory_order_seq_cst) == target) break;
    vma_writer_wait.wait(w, std::memory_order_seq_cst);
  }
  RecordLock(LockClass::kVmaLock, LockMode::kWrite, true,
             LockStatsEnabled() ? NowTicks() - t0 + 1 : 0, 0);
}

void MmStruct::VmaStartWriteLocked(Vma* v) {
  mmap_lock.AssertWriteHeld();
  const uint64_t seq = mm_lock_seq.load(std::memory_order_relaxed);
  if (v->vm_lock_seq.load(std::memory_order_relaxed) == seq) return;  // already, this section
  if (v->vm_refcnt.load(std::memory_order_seq_cst) == 0) {
    // Detached: no reader can take it any more.
    v->vm_lock_seq.store(seq, std::memory_order_seq_cst);
    return;
  }
  // __vma_enter_locked(): new readers now fail; wait for the current ones.
  v->vm_refcnt.fetch_add(Vma::kVmaLockOffset, std::memory_order_seq_cst);
  WaitForVmaReadersLocked(v, Vma::kVmaLockOffset + 1);
  v->vm_lock_seq.store(seq, std::memory_order_seq_cst);
  // __vma_exit_locked()
  v->vm_refcnt.fetch_sub(Vma::kVmaLockOffset, std::memory_order_seq_cst);
}

void MmStruct::VmaAssertWriteLocked(const Vma* v) const {
  VMSPACE_LOCK_ASSERT(v->vm_lock_seq.load(std::memory_order_relaxed) ==
                          mm_lock_seq.load(std::memory_order_relaxed),
                      "vma_assert_write_locked: VMA changed without vma_start_write");
}

void MmStruct::VmaInitLocked(Vma* v) {
  v->vm_lock_seq.store(mm_lock_seq.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  v->vm_refcnt.store(1, std::memory_order_seq_cst);  // vma_mark_attached
}

void MmStruct::VmaMarkDetachedLocked(Vma* v) {
  VmaAssertWriteLocked(v);
  if (v->vm_refcnt.fetch_sub(1, std::memory_order_seq_cst) == 1) return;  // no readers: detached
  // Transient readers (they will fail their vm_lock_seq re-check) still hold it.
  uint32_t c = v->vm_refcnt.load(std::memory_order_seq_cst);
  do {
    if (c == 0) return;
  } while (!v->vm_refcnt.compare_exchange_weak(c, c + Vma::kVmaLockOffset, std::memory_order_seq_cst));
  WaitForVmaReadersLocked(v, Vma::kVmaLockOffset);
  v->vm_refcnt.fetch_sub(Vma::kVmaLockOffset, std::memory_order_seq_cst);
}

MmStruct::VmaReadResult MmStruct::VmaStartRead(Vma* v) {
  if (v->vm_lock_seq.load(std::memory_order_seq_cst) == mm_lock_seq.load(std::memory_order_seq_cst))
    return VmaReadResult::kLocked;
  uint32_t c = v->vm_refcnt.load(std::memory_order_seq_cst);
  do {
    if (c == 0) return VmaReadResult::kDetached;
    if (c >= Vma::kVmaLockOffset - 1) return VmaReadResult::kLocked;  // VMA_REF_LIMIT
  } while (!v->vm_refcnt.compare_exchange_weak(c, c + 1, std::memory_order_seq_cst));
  // Re-check: a writer may have locked it between the first check and our increment.
  if (v->vm_lock_seq.load(std::memory_order_seq_cst) == mm_lock_seq.load(std::memory_order_seq_cst)) {
    VmaEndRead(v);
    return VmaReadResult::kLocked;
  }
  return VmaReadResult::kOk;
}

void MmStruct::VmaEndRead(Vma* v) {
  // v may be freed once the count drops (after a grace period): touch only the mm after.
  const uint32_t now = v->vm_refcnt.fetch_sub(1, std::memory_order_seq_cst) - 1;
  if (IsVmaWriterOnly(now)) {
    vma_writer_wait.fetch_add(1, std::memory_order_seq_cst);
    vma_writer_wait.notify_all();
  }
}

Vma* MmStruct::LockVmaUnderRcu(uint64_t addr) {
  for (;;) {
    RcuReadGuard g;
    Vma* v = VmaLookupRcu(addr);
    if (!v) {
      CountEvent(Event::kVmaLockAbort);
      return nullptr;
    }
    VmaReadResult st = VmaStartRead(v);
    if (st == VmaReadResult::kDetached) {
      CountEvent(Event::kVmaLockMiss);
      continue;
    }
    if (st == VmaReadResult::kLocked) {
      RecordLock(LockClass::kVmaLock, LockMode::kRead, true, 0, 0);  // failed trylock
      CountEvent(Event::kVmaLockAbort);
      return nullptr;
    }
    // Locked and attached: now the fields are stable. The range may have changed
    // between the lookup and the lock.
    bool eligible = v->vm_start <= addr && addr < v->vm_end;
    // 6.4-6.9: anonymous VMAs need an anon_vma already (find_mergeable_anon_vma reads
    // unlocked neighbours). File VMAs are taken (6.5 "mm: allow per-VMA locks on
    // file-backed VMAs"); with vma_lock=anon their fault answers VM_FAULT_RETRY.
    if (eligible) eligible = !v->is_anonymous() || v->anon() != nullptr;
    if (!eligible) {
      VmaEndRead(v);
      CountEvent(Event::kVmaLockAbort);
      return nullptr;
    }
    return v;
  }
}

}  // namespace vmspace
