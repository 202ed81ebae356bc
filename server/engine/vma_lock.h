// SPDX-License-Identifier: Apache-2.0
// Per-VMA locks in the form of the space's profile (include/linux/mmap_lock.h,
// mm/mmap_lock.c, lock_vma_under_rcu in mm/memory.c), defined in vma_lock.cc. The form
// per MmStruct::vma_form: LOCKING.md "Profiles".
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

enum class VmaReadResult { kOk, kLocked, kDetached };

/// vma_start_write(): marks v write-locked until mmap_write_unlock (vm_lock_seq =
/// mm_lock_seq), after waiting out its readers: kRwsem takes and releases v's
/// vma_lock for write (down_write: optimistic spinning, then sleeping on the rwsem);
/// kRefcnt adds VMA_LOCK_OFFSET and waits for vm_refcnt to drain (spin up to
/// kVmaWriterSpinNs, then sleep on vma_writer_wait); kNone only records the section.
/// A wait is counted and timed in the lock stats (vma_lock, write).
void VmaStartWriteLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// vma_assert_write_locked() (lockdep builds).
void VmaAssertWriteLocked(const MmStruct& mm, const Vma* v);

/// A new VMA: write-locked (lockless readers skip it until the section ends), attached
/// (kRefcnt: vm_refcnt 1 with a release store, after every field is written;
/// kRwsem: detached = false).
void VmaInitLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// vma_mark_detached(): v is write-locked. kRefcnt drops the attach reference and
/// waits out transient readers (who will fail their re-check), vm_refcnt ends at 0;
/// kRwsem sets v->detached.
void VmaMarkDetachedLocked(MmStruct& mm, Vma* v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// Whether v is detached (kRefcnt: vm_refcnt == 0; else v->detached).
bool VmaIsDetached(const MmStruct& mm, const Vma* v);

/// vma_start_read(): never waits. kLocked: write-locked this section (or a writer is
/// waiting, or kRwsem's down_read_trylock failed); kDetached (kRefcnt only): vm_refcnt
/// was 0, the VMA left the tree (and may be reused) since the lookup. Caller is in an
/// RCU section (kRwsem: which keeps v allocated; kRefcnt: which keeps it a VMA).
VmaReadResult VmaStartRead(MmStruct& mm, Vma* v);

/// vma_end_read(): kRwsem up_read; kRefcnt vma_refcount_put, which wakes a writer
/// left alone with its readers.
void VmaEndRead(MmStruct& mm, Vma* v);

/// What lock_vma_under_rcu does with a VMA it found (LockFoundVmaRcu).
enum class VmaLockResult { kOk, kMiss, kLocked, kAbort };

/// lock_vma_under_rcu() after the lookup, for v found at addr: vma_start_read, then
/// the checks of the era on the VMA now locked: the range still holds addr (kRefcnt:
/// also the check that a reused VMA is not someone else's, here always true), kRwsem:
/// not detached (else kMiss: look up again), and the 6.4-6.9 eligibility (anonymous
/// VMAs need an anon_vma; others need vma_lock=all). kOk: v is read-locked; kMiss
/// (VMA_LOCK_MISS): detached since the lookup; kLocked: write-locked (a failed
/// trylock), and kAbort (other checks failed): both VMA_LOCK_ABORT, use mmap_lock.
/// Counts nothing; caller is in an RCU section.
VmaLockResult LockFoundVmaRcu(MmStruct& mm, Vma* v, uint64_t addr);

/// lock_vma_under_rcu(): the VMA covering addr, read-locked, or null (VMA_LOCK_ABORT:
/// use mmap_lock). Retries a lookup that found a detached VMA (VMA_LOCK_MISS).
Vma* LockVmaUnderRcu(MmStruct& mm, uint64_t addr);

/// A VMA read lock held for one fault (do_user_addr_fault's lock_vma_under_rcu ...
/// vma_end_read) with its bookkeeping: the lockdep acquisition (LockRank::kVmaLock),
/// the lock statistics (vma_lock, read: one uncontended acquisition; a failed trylock
/// is counted contended by LockVmaUnderRcu) and a sampled hold time
/// (sync_internal::kHoldSampleEvery). vma() is null when LockVmaUnderRcu answered
/// VMA_LOCK_ABORT (use mmap_lock). Unlock (or the destructor) ends the read; v may be
/// reused after. One thread, no other lock held.
class VmaFaultReadLock {
 public:
  VmaFaultReadLock(MmStruct& mm, uint64_t addr);
  ~VmaFaultReadLock() {
    if (v_) Unlock();
  }
  VmaFaultReadLock(const VmaFaultReadLock&) = delete;
  VmaFaultReadLock& operator=(const VmaFaultReadLock&) = delete;
  Vma* vma() const { return v_; }
  void Unlock();

 private:
  MmStruct& mm_;
  Vma* v_;
  uint64_t hold_start_ = 0;  // NowTicks() when the hold is sampled, else 0
};

/// The VMA whose stored range holds addr, from the RCU-published index (maple only).
/// Caller is in an RCU read-side section: RCU, not mmap_lock, keeps it alive.
inline Vma* VmaLookupRcu(MmStruct& mm, uint64_t addr) ABSL_NO_THREAD_SAFETY_ANALYSIS { return mm.idx->LookupRcu(addr); }

/// kRefcnt: waits until v->vm_refcnt == target (__vma_enter_locked's rcuwait_wait_event).
void WaitForVmaReadersLocked(MmStruct& mm, Vma* v, uint32_t target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
