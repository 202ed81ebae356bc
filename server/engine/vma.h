// Vma: one virtual memory area, the engine's vm_area_struct (include/linux/mm_types.h).
// Internal to the engine; callers see VmaInfo (address_space.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/types.h"
#include "engine/file.h"

namespace vmspace {

struct MmStruct;
struct File;

/// Identity of an anon_vma (mm/rmap.c): the object that private anonymous pages of a
/// VMA (and of VMAs split from it) belong to. Only its identity matters for merging
/// (is_mergeable_anon_vma); there is no fork, so every anon_vma_chain is singular.
struct AnonVma {
  uint64_t id;
  std::atomic<uint64_t> refs{1};  // VMAs pointing at it
};
inline AnonVma* GetAnonVma(AnonVma* a) {
  if (a) a->refs.fetch_add(1, std::memory_order_relaxed);
  return a;
}
inline void PutAnonVma(AnonVma* a) {
  if (a && a->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete a;
}

/// A VMA (struct vm_area_struct). Field protection (LOCKING.md): vm_start, vm_end,
/// vm_pgoff, vm_flags, anon_vma (set to non-null), vm_file are written only with
/// mmap_lock held for write AND the VMA write-locked (vma_start_write; checked by
/// MmStruct::VmaAssertWriteLocked), except anon_vma, which a fault may set from null
/// under mmap_lock read plus the space's anon_vma_lock. Readers hold mmap_lock (read
/// or write) or the VMA's read lock. Freed only after an RCU grace period once
/// detached (lockless lookups may still hold a pointer). The compiler cannot check
/// "mmap_lock or this VMA's read lock", so these fields carry no GUARDED_BY; the
/// functions that change them require mmap_lock for write (checked) and assert the
/// VMA write lock (at run time, in lockdep builds).
struct Vma {
  uint64_t vm_start = 0;  // bytes, page aligned
  uint64_t vm_end = 0;    // bytes, exclusive
  uint64_t vm_flags = 0;  // VM_* bits
  uint64_t vm_pgoff = 0;  // pages: for private anon, vm_start >> 12 at creation
  // Null until the first write fault (private anon). Holds a reference (GetAnonVma).
  std::atomic<AnonVma*> anon_vma{nullptr};
  /// The open file mapped (struct file; for shared anonymous memory an unnamed shmem
  /// file), null for private anonymous memory. vm_pgoff is the file offset in pages.
  /// A file VMA is in its File's i_mmap from before it can map a page until after its
  /// PTEs are zapped; vm_start, vm_end and vm_pgoff of a linked VMA change only under
  /// i_mmap_rwsem write as well (rmap walkers read them under i_mmap_rwsem read).
  std::shared_ptr<OpenFile> vm_file;
  MmStruct* vm_mm = nullptr;  // the space: set at creation (copied by a split), then immutable

  // ---- per-VMA lock (Linux 6.15 form: include/linux/mmap_lock.h, mm/mmap_lock.c) ----
  /// 0: detached (not in the index); 1: attached, unlocked; 1 + n: n readers. A writer
  /// adds kVmaLockOffset while it waits for readers to drain (VMA_LOCK_OFFSET); the
  /// reader that leaves it alone with them wakes it (vma_refcount_put). Atomic.
  std::atomic<uint32_t> vm_refcnt{0};
  /// The space's mm_lock_seq when this VMA was last write-locked; the VMA is
  /// write-locked while it equals the current mm_lock_seq. Written under mmap_lock write.
  std::atomic<uint64_t> vm_lock_seq{~0ull};
  static constexpr uint32_t kVmaLockOffset = 0x40000000;

  Vma() = default;
  Vma(const Vma& o)  // vm_area_dup(): takes a new anon_vma reference; detached, unlocked
      : vm_start(o.vm_start), vm_end(o.vm_end), vm_flags(o.vm_flags), vm_pgoff(o.vm_pgoff),
        anon_vma(GetAnonVma(o.anon())), vm_file(o.vm_file), vm_mm(o.vm_mm) {}
  ~Vma() { PutAnonVma(anon_vma.load(std::memory_order_relaxed)); }
  Vma& operator=(const Vma&) = delete;
  AnonVma* anon() const { return anon_vma.load(std::memory_order_acquire); }
  /// Replaces the anon_vma (caller holds mmap_lock for write).
  void set_anon(AnonVma* a) {
    AnonVma* old = anon_vma.exchange(GetAnonVma(a), std::memory_order_acq_rel);
    PutAnonVma(old);
  }

  uint64_t pages() const { return (vm_end - vm_start) >> kPageShift; }
  /// vma_is_anonymous(): private anonymous (no vm_ops).
  bool is_anonymous() const { return !vm_file; }
  /// The mapped file (inode), or null.
  File* file() const { return vm_file ? vm_file->file.get() : nullptr; }
  /// vm_start_gap(): start minus the stack guard gap for VM_GROWSDOWN VMAs.
  uint64_t start_gap() const {
    if (!(vm_flags & VM_GROWSDOWN)) return vm_start;
    return vm_start > kStackGuardGap ? vm_start - kStackGuardGap : 0;
  }
};

}  // namespace vmspace
