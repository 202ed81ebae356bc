// SPDX-License-Identifier: Apache-2.0
// PageTable: a 4-level x86-64 radix page table (PGD -> PUD -> PMD -> PTE, 512 entries
// each; P4D folded as on this machine) mapping 4 KiB virtual pages to frames.
//
// Locking (see LOCKING.md): upper-level tables are installed under the per-space
// page_table_lock (mm->page_table_lock); each PTE table has its own spinlock, the split
// PTE lock (pte_lockptr), that guards its entries. Walkers read upper-level entries
// without locks (acquire loads) and must hold mmap_lock or a VMA lock that covers the
// address, which keeps the tables they walk from being freed: tables are freed only by
// FreePgtables (under mmap_lock: munmap runs it after downgrading to read), and only
// where no VMA covers their span (mm/memory.c free_pgd_range with floor/ceiling), so no
// walker that holds a lock covering its address can be inside them.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/frame_allocator.h"
#include "engine/types.h"
#include "mm_types.h"
#include "sync/spinlock.h"

namespace vmspace {

/// PTE bits. The frame address occupies bits 12..63 (frames are 4 KiB aligned).
enum PteBits : uint64_t {
  kPtePresent = 1ull << 0,
  kPteWrite = 1ull << 1,  // writable: a write needs no fault
  kPteRead = 1ull << 2,   // readable (x86: any of VM_READ/WRITE/EXEC; clear = PROT_NONE)
  kPteExec = 1ull << 3,   // executable (clear = NX)
  /// Software bit (x86 leaves bits 9-11 to the OS): the frame is a page-cache page of
  /// the VMA's file, not a private anonymous frame the PTE owns (!PageAnon).
  kPteFile = 1ull << 9,
  /// Software bit: a private anonymous page given MADV_FREE and not written since (the
  /// clean state of Linux's lazyfree folio, whose PTE dirty bit madvise_free cleared).
  /// A store clears it (the CPU setting the dirty bit: AccessPage); reclaim
  /// (ShrinkLazyFree) drops a page that still has it.
  kPteLazyFree = 1ull << 10,
  /// Software bit: the private anonymous frame was shared by fork and has metadata
  /// (PageMeta, rmap.h: its map count, anon_vma and index); set in every PTE mapping
  /// it until the frame is freed. Such a PTE is writable only while the map count is
  /// 1 (do_wp_page reused the frame); a zap drops the count and frees the frame at 0.
  /// Bit 11 of a present PTE (the non-present kPteGuardMarker is the value 1 << 11).
  kPteSharedAnon = 1ull << 11,
};
/// A non-present PTE value marking a guard page (MADV_GUARD_INSTALL; Linux's
/// PTE_MARKER_GUARD swap-entry marker): any access faults with SIGSEGV (SEGV_MAPERR, as
/// VM_FAULT_SIGSEGV -> bad_area_nosemaphore), zaps by MADV_DONTNEED, truncate and
/// mprotect leave it, munmap and exit remove it. Not a frame: no RSS, no rmap.
inline constexpr uint64_t kPteGuardMarker = 1ull << 11;
inline bool IsGuardMarker(uint64_t pte) { return pte == kPteGuardMarker; }
inline uint64_t PageAlign(uint64_t x) { return (x + kPageSize - 1) & kPageMask; }

inline void* PteFrame(uint64_t pte) { return reinterpret_cast<void*>(pte & ~0xfffull); }
inline uint64_t MakePte(void* frame, uint64_t bits) {
  return reinterpret_cast<uint64_t>(frame) | kPtePresent | bits;
}

class PageTable {
 public:
  static constexpr int kEntries = 512;
  static constexpr uint64_t kPmdSpan = 1ull << 21;  // bytes mapped by one PTE table

  /// A leaf table: 512 PTEs covering 2 MiB, with its split PTE lock. Entries are read
  /// locklessly (acquire loads: the hardware walker, the TLB-hit path, pte_same
  /// re-checks are done under ptl) and changed only under `ptl`, through Set/Clear.
  struct PteTable {
    std::atomic<uint64_t> pte[kEntries];
    SpinLock ptl{LockClass::kPtl, LockRank::kPtl};
    PteTable() {
      for (auto& p : pte) p.store(0, std::memory_order_relaxed);
    }
    /// The entry at index i (lockless read; re-check under ptl before acting on it).
    uint64_t Get(int i) const { return pte[i].load(std::memory_order_acquire); }
    /// Get(), sequentially consistent: the read after TlbUsers::Enter, which a zap's
    /// Clear and TlbUsers::Idle order against (a plain load on x86).
    uint64_t GetSync(int i) const { return pte[i].load(std::memory_order_seq_cst); }
    /// set_pte_at(): caller holds ptl.
    void Set(int i, uint64_t v) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ptl) {
      pte[i].store(v, std::memory_order_release);
    }
    /// ptep_get_and_clear(): clears the entry and returns what it held; caller holds ptl,
    /// so the value returned is the one the caller must account for (free its frame).
    /// Sequentially consistent (see GetSync).
    uint64_t Clear(int i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ptl) {
      return pte[i].exchange(0, std::memory_order_seq_cst);
    }
  };

  /// With `charge`, every table page allocated (not the PGD, which is part of this
  /// object) is charged to it (FrameAllocator::ChargeTable) until deleted; a table the
  /// limit refuses makes Lookup(alloc) return nullptr, as pte_alloc failing.
  explicit PageTable(FrameAllocator* charge = nullptr);
  ~PageTable();  // frees all tables (not the frames: callers zap first)
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  /// The PTE table covering `addr`, or nullptr if absent and !alloc (or allocation
  /// failed: the frame limit, see the constructor). With alloc, missing levels are installed (__pud_alloc, __pmd_alloc,
  /// __pte_alloc). Caller holds mmap_lock or a VMA lock covering addr.
  PteTable* Lookup(uint64_t addr, bool alloc);

  static int PteIndex(uint64_t addr) { return static_cast<int>((addr >> 12) & 511); }

  /// Calls fn(addr, pte_value) for each present PTE in [start, end), reading entries
  /// without locks (reporting and validation only). Caller holds mmap_lock.
  template <typename Fn>
  void ForEachPresent(uint64_t start, uint64_t end, Fn&& fn);
  /// Calls fn(PteTable&, first_index, end_index, addr_of_first) for each PTE table
  /// present in [start, end), with the index range [first_index, end_index) of the
  /// entries inside the range (zap_pte_range / change_pte_range take the table's ptl
  /// once for the whole run). Caller holds mmap_lock.
  template <typename Fn>
  void ForEachTable(uint64_t start, uint64_t end, Fn&& fn);

  /// Frees page-table pages in [start, end) whose whole span lies within
  /// [floor, ceiling) (mm/memory.c free_pgd_range / free_pgtables). Every PTE in those
  /// tables must already be zapped. Caller holds mmap_lock: for write, or downgraded to
  /// read once the VMAs are detached (munmap), so faults in other VMAs may install
  /// tables beside the walk (never inside [floor, ceiling), where no VMA is).
  /// Tables are unlinked at once but deleted only by DeleteTables(), which the caller
  /// runs after an RCU grace period (lockless walkers may still be reading them).
  struct TableGather {
    std::vector<void*> dirs;  // upper-level tables
    std::vector<void*> ptes;  // PTE tables
    FrameAllocator* charge = nullptr;  // uncharged as the tables are deleted
    bool empty() const { return dirs.empty() && ptes.empty(); }
  };
  void FreePgtables(uint64_t start, uint64_t end, uint64_t floor, uint64_t ceiling,
                    TableGather& gather);

  /// move_page_tables() / move_ptes() (mm/mremap.c, Linux 6.18) at the PTE level:
  /// moves every non-empty entry of [old_addr, old_addr+len) to the same offset from
  /// new_addr (the frames move with them: nothing is copied, freed or counted), one
  /// pair of tables at a time with the old table's ptl held and the new one's taken
  /// nested. The new range's entries must be empty; its tables are allocated
  /// (Lookup(alloc)). Returns the bytes of the range done: less than len only when a
  /// new table could not be allocated (then the caller moves them back, as the
  /// kernel does). Caller holds mmap_lock for write (no fault can run in either
  /// range: both VMAs are write-locked) and the rmap locks of the VMA.
  uint64_t MovePtes(uint64_t old_addr, uint64_t new_addr, uint64_t len);
  static void DeleteTables(TableGather& gather);

  /// Page-table pages currently allocated (the PGD included), each 4 KiB of entries.
  uint64_t table_pages() const { return table_pages_.load(std::memory_order_relaxed); }

 private:
  struct Dir {
    std::atomic<void*> e[kEntries];
    Dir() {
      for (auto& p : e) p.store(nullptr, std::memory_order_relaxed);
    }
  };
  // level shifts: PGD 39, PUD 30, PMD 21
  Dir pgd_;
  FrameAllocator* const charge_;
  SpinLock page_table_lock_{LockClass::kPageTableLock, LockRank::kPageTableLock};
  std::atomic<uint64_t> table_pages_{1};

  void FreeLevel(Dir* dir, int level, uint64_t base, uint64_t start, uint64_t end,
                 uint64_t floor, uint64_t ceiling, TableGather& gather);
  void DestroyLevel(Dir* dir, int level);
  template <typename Fn>
  void WalkLevel(Dir* dir, int level, uint64_t base, uint64_t start, uint64_t end, Fn& fn);
};

template <typename Fn>
void PageTable::ForEachTable(uint64_t start, uint64_t end, Fn&& fn) {
  start &= ~0xfffull;
  if (start < end) WalkLevel(&pgd_, 0, 0, start, end, fn);
}

template <typename Fn>
void PageTable::ForEachPresent(uint64_t start, uint64_t end, Fn&& fn) {
  ForEachTable(start, end, [&](PteTable& t, int i0, int i1, uint64_t a0) {
    for (int i = i0; i < i1; i++) {
      const uint64_t v = t.Get(i);
      if (v & kPtePresent) fn(a0 + static_cast<uint64_t>(i - i0) * 4096, v);
    }
  });
}

template <typename Fn>
void PageTable::WalkLevel(Dir* dir, int level, uint64_t base, uint64_t start, uint64_t end,
                          Fn& fn) {
  static constexpr int kShifts[3] = {39, 30, 21};
  const int shift = kShifts[level];
  const uint64_t span = 1ull << shift;
  const int first = static_cast<int>((start >> shift) & 511);
  const int last = static_cast<int>(((end - 1) >> shift) & 511);
  for (int i = first; i <= last; i++) {
    void* child = dir->e[i].load(std::memory_order_acquire);
    if (!child) continue;
    const uint64_t cstart = base + static_cast<uint64_t>(i) * span;
    const uint64_t s = start > cstart ? start : cstart;
    const uint64_t e = end < cstart + span ? end : cstart + span;
    if (level < 2) {
      WalkLevel(static_cast<Dir*>(child), level + 1, cstart, s, e, fn);
      continue;
    }
    fn(*static_cast<PteTable*>(child), PteIndex(s), PteIndex(e - 1) + 1, s);
  }
}

/// PTE permission bits for a frame mapped in `vma` (vm_page_prot plus the write rule
/// of do_anonymous_page / change_protection's MM_CP_TRY_CHANGE_WRITABLE): writable if
/// the VMA is writable and the frame is not the zero page. Callers pass true for a
/// frame fork shares (kPteSharedAnon with a map count above 1): copy-on-write.
inline uint64_t PteBitsFor(const Vma& vma, bool zero_page) {
  uint64_t b = 0;
  if (vma.vm_flags & VM_ACCESS_FLAGS) b |= kPteRead;
  if (vma.vm_flags & VM_EXEC) b |= kPteExec;
  if ((vma.vm_flags & VM_WRITE) && !zero_page) b |= kPteWrite;
  return b;
}

/// Whether a PTE value lets the CPU perform `a` without a fault.
inline bool PteAllows(uint64_t pte, AccessType a) {
  if (!(pte & kPtePresent)) return false;
  switch (a) {
    case AccessType::kRead: return pte & kPteRead;
    case AccessType::kWrite: return pte & kPteWrite;
    case AccessType::kExec: return pte & kPteExec;
  }
  return false;
}

}  // namespace vmspace
