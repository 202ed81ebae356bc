// Vma: one virtual memory area, the engine's vm_area_struct (include/linux/mm_types.h).
// Internal to the engine; callers see VmaInfo (address_space.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "engine/frame_allocator.h"
#include "engine/types.h"

namespace vmspace {

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

/// The shmem object behind a shared anonymous mapping (shmem_zero_setup): its pages
/// indexed by page offset. Shared by every VMA split from the original mapping.
struct ShmemObject {
  ShmemObject(FrameAllocator& f, uint64_t ino, uint64_t pages) : frames(f), inode(ino), size_pages(pages) {}
  ~ShmemObject();
  /// The frame at `pgoff`, allocating a zeroed one if absent (shmem_get_folio);
  /// nullptr if the frame limit is reached. Takes `mu` (never held with a PTE lock).
  void* GetPage(uint64_t pgoff);

  FrameAllocator& frames;
  const uint64_t inode;       // immutable; shown in maps
  const uint64_t size_pages;  // immutable
  std::mutex mu;
  std::unordered_map<uint64_t, void*> pages;  // guarded by mu
};

/// A VMA. Field protection (LOCKING.md): vm_start, vm_end, vm_pgoff, vm_flags,
/// anon_vma (set to non-null), shmem are written only with mmap_lock held for write
/// AND the VMA write-locked (vma_start_write), except anon_vma, which a fault may set
/// from null under mmap_lock read plus the space's anon_vma_lock. Readers hold
/// mmap_lock (read or write) or the VMA's read lock. Freed only after an RCU grace
/// period once detached (lockless lookups may still hold a pointer).
struct Vma {
  uint64_t vm_start = 0;  // bytes, page aligned
  uint64_t vm_end = 0;    // bytes, exclusive
  uint64_t vm_flags = 0;  // VM_* bits
  uint64_t vm_pgoff = 0;  // pages: for private anon, vm_start >> 12 at creation
  // Null until the first write fault (private anon). Holds a reference (GetAnonVma).
  std::atomic<AnonVma*> anon_vma{nullptr};
  std::shared_ptr<ShmemObject> shmem;  // shared anonymous: the backing object

  // ---- per-VMA lock (Linux 6.15 form: include/linux/mmap_lock.h, mm/mmap_lock.c) ----
  /// 0: detached (not in the index); 1: attached, unlocked; 1 + n: n readers. A writer
  /// adds kVmaLockOffset while it waits for readers to drain. Atomic.
  std::atomic<uint32_t> vm_refcnt{0};
  /// The space's mm_lock_seq when this VMA was last write-locked; the VMA is
  /// write-locked while it equals the current mm_lock_seq. Written under mmap_lock write.
  std::atomic<uint64_t> vm_lock_seq{~0ull};
  static constexpr uint32_t kVmaLockOffset = 0x40000000;

  Vma() = default;
  Vma(const Vma& o)  // vm_area_dup(): takes a new anon_vma reference; detached, unlocked
      : vm_start(o.vm_start), vm_end(o.vm_end), vm_flags(o.vm_flags), vm_pgoff(o.vm_pgoff),
        anon_vma(GetAnonVma(o.anon())), shmem(o.shmem) {}
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
  bool is_anonymous() const { return !shmem; }
  /// vm_start_gap(): start minus the stack guard gap for VM_GROWSDOWN VMAs.
  uint64_t start_gap() const {
    if (!(vm_flags & VM_GROWSDOWN)) return vm_start;
    return vm_start > kStackGuardGap ? vm_start - kStackGuardGap : 0;
  }
};

}  // namespace vmspace
