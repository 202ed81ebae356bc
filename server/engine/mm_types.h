// SPDX-License-Identifier: Apache-2.0
// The types of an address space (include/linux/mm_types.h, mm_types_task.h): Vma, one
// virtual memory area (vm_area_struct; internal to the engine, callers see VmaInfo in
// address_space.h), AnonVma, VmaLock and VmaForm (the per-VMA lock), MmCounter (the
// RSS counter kinds) and TlbUsers (the model's mm_cpumask). Vma's lifetime is in
// vma_init.cc.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/types.h"
#include "engine/file.h"
#include "engine/per_thread.h"
#include "sync/mutex.h"
#include "sync/rcu.h"
#include "sync/rwsem.h"

namespace vmspace {

struct MmStruct;
struct File;

/// struct vma_lock (Linux 6.4 - 6.14, include/linux/mm_types.h): the per-VMA
/// rw_semaphore of the kRwsem form, allocated separately from its VMA (vma_lock_alloc in
/// vm_area_alloc / vm_area_dup; commit "mm: separate vma->lock from vm_area_struct":
/// the count and owner words a contended lock keeps changing no longer share cache
/// lines with the VMA fields every fault reads) and freed with the VMA.
struct VmaLock {
  RwSem lock{LockClass::kVmaLock, LockRank::kVmaLock};
};

/// The per-VMA lock and VMA lifetime a space uses, from its profile: none (vma_lock=off:
/// no lockless reader of VMAs, so vma_start_write only records the section and VMAs are
/// freed at once), or the profile's VmaLockForm.
enum class VmaForm : uint8_t { kNone, kRwsem, kRefcnt };

struct AnonVmaChain;

/// struct anon_vma (mm/rmap.c, include/linux/rmap.h; Linux 6.18): the object private
/// anonymous pages of a VMA (and of VMAs split from it) belong to, and through its
/// chain list the VMAs that may map them. A fork gives each child VMA its own anon_vma
/// whose parent is the parent VMA's (anon_vma_fork); all of one fork tree share the
/// root, whose lock guards every anon_vma of the tree (anon_vma_lock_write locks the
/// root's rwsem). Merging compares identities (is_mergeable_anon_vma).
/// Lifetime: `refs` counts the reference its chain list holds while it has entries
/// (dropped by unlink_anon_vmas when the last AVC goes), one per child anon_vma on its
/// root (get_anon_vma(root) in anon_vma_fork), and one per frame metadata (PageMeta,
/// rmap.h) that names it: Linux's pages hold none (rmap walkers check page_mapped under
/// RCU); here the metadata keeps it, so a walk from a page never reads freed memory.
struct AnonVma {
  explicit AnonVma(uint64_t i) : id(i) {}
  uint64_t id;  // unique within the space that created it (VmaInfo::anon_vma_id)
  std::atomic<uint64_t> refs{1};
  AnonVma* root = this;    // immutable after creation
  AnonVma* parent = this;  // immutable after creation
  /// anon_vma->rwsem: only the root's is used. Counted in the lock stats as "anon_vma".
  Mutex lock{LockRank::kAnonVmaRwsem, LockClass::kAnonVma};
  /// The root's lock guards these two and `head` of every anon_vma of the tree.
  uint64_t num_children = 0;     // anon_vmas whose parent is this one (self included for a root)
  uint64_t num_active_vmas = 0;  // VMAs whose vma->anon_vma is this one
  /// The AVCs of the VMAs that may map this anon_vma's pages (Linux: the rb_root
  /// interval tree by pgoff; a list here, walked whole).
  AnonVmaChain* head = nullptr;
};
inline AnonVma* GetAnonVma(AnonVma* a) {
  if (a) a->refs.fetch_add(1, std::memory_order_relaxed);
  return a;
}
/// put_anon_vma(): drops a reference; the last one frees it and drops its root's.
inline void PutAnonVma(AnonVma* a) {
  while (a && a->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    AnonVma* root = a->root == a ? nullptr : a->root;
    delete a;
    a = root;
  }
}

/// struct anon_vma_chain (include/linux/rmap.h): links one VMA and one anon_vma. Each VMA
/// keeps the list of its AVCs (same_vma, newest first, as list_add) and each anon_vma the
/// list of the AVCs naming it (prev/next). Changed under the root anon_vma's lock (the
/// anon_vma side) and mmap_lock write (the VMA side; a fault's anon_vma_prepare also
/// under mmap_lock read plus the space's anon_vma_lock).
struct AnonVmaChain {
  struct Vma* vma = nullptr;
  AnonVma* anon_vma = nullptr;
  AnonVmaChain* same_vma = nullptr;  // the next AVC of vma
  AnonVmaChain* prev = nullptr;      // the anon_vma's list
  AnonVmaChain* next = nullptr;
};

/// A VMA (struct vm_area_struct). Field protection (LOCKING.md): vm_start, vm_end,
/// vm_pgoff, vm_flags, anon_vma (set to non-null), vm_file are written only with
/// mmap_lock held for write AND the VMA write-locked (vma_start_write; checked by
/// VmaAssertWriteLocked), except anon_vma, which a fault may set from null
/// under mmap_lock read plus the space's anon_vma_lock. Readers hold mmap_lock (read
/// or write) or the VMA's read lock. Lifetime by the profile (LOCKING.md "Profiles"):
/// without per-VMA locks freed at once; kRwsem: its references dropped once detached,
/// its memory reused after a grace period (lockless lookups may still hold a pointer;
/// VmaCache::FreeRcu); kRefcnt: returned to the space's
/// typesafe-by-RCU cache at once and reused by the next VMA, so a lockless reader
/// re-checks what it locked (LockFoundVmaRcu). The compiler cannot check
/// "mmap_lock or this VMA's read lock", so these fields carry no GUARDED_BY; the
/// functions that change them require mmap_lock for write (checked) and assert the
/// VMA write lock (at run time, in lockdep builds).
struct Vma {
  uint64_t vm_start = 0;  // bytes, page aligned
  uint64_t vm_end = 0;    // bytes, exclusive
  uint64_t vm_flags = 0;  // VM_* bits
  union {
    uint64_t vm_pgoff = 0;  // pages: for private anon, vm_start >> 12 at creation
    /// While the VMA is free or waiting for its grace period (VmaCache): the next VMA
    /// of its list. Linux overlays the slab's free pointer and vm_rcu on vm_start and
    /// vm_end (vm_freeptr, 6.15; vm_rcu, 6.4); here it overlays vm_pgoff, which no
    /// lockless reader reads of a detached VMA (LockFoundVmaRcu reads the range before
    /// it checks `detached`). Every VmaCache::Alloc caller writes vm_pgoff.
    Vma* free_next;
  };
  // Null until the first write fault (private anon). Kept alive by the VMA's chain
  // (anon_vma_chain), which names it.
  std::atomic<AnonVma*> anon_vma{nullptr};
  /// vma->anon_vma_chain: the VMA's AVCs (AnonVmaChain::same_vma), null without an
  /// anon_vma. Changed as anon_vma (LOCKING.md) and under the root anon_vma's lock.
  AnonVmaChain* anon_vma_chain = nullptr;
  /// The open file mapped (struct file; for shared anonymous memory an unnamed shmem
  /// file), null for private anonymous memory. vm_pgoff is the file offset in pages.
  /// A file VMA is in its File's i_mmap from before it can map a page until after its
  /// PTEs are zapped; vm_start, vm_end and vm_pgoff of a linked VMA change only under
  /// i_mmap_rwsem write as well (rmap walkers read them under i_mmap_rwsem read).
  std::shared_ptr<OpenFile> vm_file;
  MmStruct* vm_mm = nullptr;  // the space: set at creation (copied by a split), then immutable

  // ---- per-VMA lock; which fields are used depends on the profile's VmaLockForm ----
  /// kRefcnt (6.15, include/linux/mmap_lock.h, mm/mmap_lock.c): 0: detached (not in the
  /// index); 1: attached, unlocked; 1 + n: n readers. A writer adds kVmaLockOffset while
  /// it waits for readers to drain (VMA_LOCK_OFFSET); the reader that leaves it alone
  /// with them wakes it (vma_refcount_put). A VMA reused from the space's cache keeps it
  /// at 0 until it is attached again (vm_area_init_from). Unused in the kRwsem form.
  std::atomic<uint32_t> vm_refcnt{0};
  /// kRwsem (6.4 - 6.14): vma->detached, set when the VMA leaves the index (under its
  /// write lock); a reader that locked a stale VMA sees it and retries (VMA_LOCK_MISS).
  std::atomic<bool> detached{true};
  /// The space's mm_lock_seq when this VMA was last write-locked; the VMA is
  /// write-locked while it equals the current mm_lock_seq. Written under mmap_lock
  /// write (both forms).
  std::atomic<uint64_t> vm_lock_seq{~0ull};
  /// kRwsem: vma->vm_lock, the separately allocated `struct vma_lock` (an rw_semaphore),
  /// allocated with the VMA and freed with it; null in the kRefcnt form.
  VmaLock* vm_lock = nullptr;
  // No rcu_head and no budget pointer: the kRwsem form frees VMAs after a grace period
  // in batches (VmaCache::FreeRcu), each batch with one rcu_head and the budget it
  // uncharges. 96 bytes.
  static constexpr uint32_t kVmaLockOffset = 0x40000000;

  Vma() = default;
  /// vm_area_dup()'s copy (vm_area_init_from) plus anon_vma_clone: the range, flags,
  /// pgoff, the anon_vma and a copy of o's chain, vm_file and vm_mm; never the lock
  /// state (detached, unlocked).
  explicit Vma(const Vma& o) { InitFrom(o); }
  ~Vma();
  Vma& operator=(const Vma&) = delete;
  /// vm_area_init_from() + anon_vma_clone(): copies o's range, flags, pgoff, anon_vma
  /// (chaining this VMA to every anon_vma o is chained to) and backing object into this
  /// empty detached VMA (from VmaCache::Alloc: no anon_vma, no file), leaving
  /// vm_refcnt, detached, vm_lock_seq and vm_lock alone.
  void InitFrom(const Vma& o);
  /// What remove_vma() releases before vm_area_free() (the backing object's reference,
  /// fput; and the anon_vma chain, unlink_anon_vmas), leaving an empty detached
  /// VMA. The range, flags and lock state stay (a lockless reader may still read the
  /// range and lock state of a VMA waiting for its grace period).
  void ReleaseContents();
  AnonVma* anon() const { return anon_vma.load(std::memory_order_acquire); }
  /// Replaces the anon_vma and the chain with a single AVC to `a` (or none): for an
  /// anon_vma that is the only one of its VMAs' chains (caller holds mmap_lock for
  /// write; rmap.cc). An anon_vma whose list was empty gets a reference for it (the
  /// caller keeps its own). DupAnonVma (rmap.h) takes a neighbour's whole chain instead.
  void set_anon(AnonVma* a);

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

/// RSS counter kinds (mm->rss_stat, include/linux/mm_types_task.h).
enum MmCounter { MM_ANONPAGES = 0, MM_SHMEMPAGES = 1, MM_FILEPAGES = 2, NR_MM_COUNTERS = 3 };

/// The threads in a space's TLB-hit path (AccessPage: the lockless PTE read and the
/// access of the frame it maps), counted in cache-line cells by thread (ThreadShard):
/// the model's mm_cpumask. Private frames whose PTEs a zap cleared while no thread was
/// in the path are in no "TLB" and may be freed at once, as tlb_finish_mmu frees the
/// pages after a TLB flush that needs no IPI when the mm runs on no other CPU; else
/// they wait for an RCU grace period (the shootdown). No lock.
class TlbUsers {
 public:
  /// Enters the path; the PTE must be (re)read after it, sequentially consistent
  /// (PageTable::PteTable::GetSync). Returns the cell for Exit.
  int Enter() {
    const int c = ThreadShard();
    cells_[c].v.fetch_add(1, std::memory_order_seq_cst);
    return c;
  }
  /// Leaves the path: the access of the frame is complete.
  void Exit(int cell) { cells_[cell].v.fetch_sub(1, std::memory_order_release); }
  /// After PTEs were cleared (PteTable::Clear, sequentially consistent): true if no
  /// thread is in the path, so none can still be accessing a frame they mapped (one
  /// that enters from now on reads the cleared PTEs).
  /// Every access here is sequentially consistent (the Clear before, Enter, GetSync):
  /// in their single total order either this load sees the Enter or the reader's
  /// GetSync sees the cleared PTE, with no fence (which ThreadSanitizer does not model).
  bool Idle() const {
    for (const auto& c : cells_)
      if (c.v.load(std::memory_order_seq_cst) != 0) return false;
    return true;
  }

 private:
  struct alignas(kDestructiveInterferenceBytes) Padded {
    std::atomic<int64_t> v{0};
  };
  std::array<Padded, kThreadShards> cells_;
};

}  // namespace vmspace
