// SPDX-License-Identifier: Apache-2.0
// The page-fault path, the zap of PTE ranges, and accesses of the space's memory
// (mm/memory.c, arch/x86/mm/fault.c; Linux 6.18), defined in memory.cc. The
// fault-around (do_fault_around + filemap_map_pages) is in filemap.h / filemap.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "engine/cancel.h"
#include "engine/types.h"
#include "mm.h"
#include "page_table.h"

namespace vmspace {

/// Whether a walk over a client's range that moved from `prev` to `addr` entered a new
/// page table (2 MiB of addresses) and its caller asked to stop (CancelScope): the
/// cancellation point of Access, ReadMemory/WriteMemory and MAP_POPULATE.
inline bool StopAtTable(uint64_t prev, uint64_t addr) {
  return (prev / kPmdSize) != (addr / kPmdSize) && CancelScope::StopRequested();
}

/// One page fault being handled (struct vm_fault).
struct VmFault {
  Vma* vma;
  uint64_t address;      // the faulting byte
  AccessType access;     // as handled (an NX fetch is handled as a read)
  bool vma_locked;       // FAULT_FLAG_VMA_LOCK: under the VMA read lock, not mmap_lock
  /// Set by the handler with outcome kNone: VM_FAULT_RETRY, the fault needs mmap_lock
  /// (only with vma_locked); the event names the reason.
  bool retry = false;
  /// Set by the handler: a shared write dirtied a clean page-cache page, its PTE is
  /// installed (fault_dirty_shared_page: the caller drops its lock and throttles).
  bool dirtied = false;
  /// The PTE table covering `address` if the caller's walk found one (under the same
  /// lock, so it stays), else null: the handler walks again, allocating (vmf->pmd).
  PageTable::PteTable* pte_table = nullptr;
};

/// Test-only: called after each fault of an access that did not fail, before the access
/// is re-executed (arguments: the space, the address), on the faulting thread with no
/// engine lock held: a test that zaps the page there drives the fault retry cap
/// (kMaxFaultRetries). Null in production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_fault_retry_test_hook{nullptr};

/// Test-only: called in an access's TLB-hit path after the PTE was read and allows the
/// access and before the frame is accessed (arguments: the space, the address), on the
/// accessing thread under RCU, counted in the space's TlbUsers: the thread holds a
/// "TLB entry" for the page while the hook runs (fork_race_test). Null in production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_access_test_hook{nullptr};

/// The zap itself (zap_pte_range): PTEs mapping page-cache pages (kPteFile) are
/// cleared and uncounted; private anonymous frames (also COW copies in private file
/// VMAs) go to `pages`, except frames fork shared (kPteSharedAnon): their map count is
/// dropped, and the last mapping frees the frame after a grace period. Caller holds mmap_lock, or (unmap_mapping_range) the File's
/// i_mmap_rwsem with v linked, which keeps v's fields and page tables in place.
void ZapPteRange(MmStruct& mm, Vma* v, uint64_t start, uint64_t end, std::vector<void*>& pages);

/// Clears the guard markers (kPteGuardMarker) of [start, end) (zap_nonpresent_ptes
/// with ZAP_FLAG_DROP_MARKER, mm/memory.c). Caller holds mmap_lock.
void ZapGuardMarkers(MmStruct& mm, uint64_t start, uint64_t end);

/// unmap_page_range() for [start, end) of v: each PTE is read and cleared in one step
/// under its table's PTE lock (ptep_get_and_clear), so a racing fault or zap can
/// never make a frame be freed twice or not at all. Private anonymous frames go to
/// `pages` (the caller frees them, after a grace period unless no reader can exist);
/// RSS counters follow. Guard markers go too (unmap_vmas' ZAP_FLAG_DROP_MARKER; a
/// madvise zap calls ZapPteRange, which keeps them). Caller holds mmap_lock (read:
/// munmap after its downgrade; write: MAP_FIXED replacement, exit).
inline void ZapRangeLocked(MmStruct& mm, Vma* v, uint64_t start, uint64_t end, std::vector<void*>& pages)
    ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock) {
  ZapPteRange(mm, v, start, end, pages);
  ZapGuardMarkers(mm, start, end);
}

/// tlb_finish_mmu()'s free of the pages a zap gathered: if no thread is in the
/// TLB-hit path (tlb_users.Idle()), frees `pages` now into this thread's frame shard,
/// while they are still in its caches (the next faults reuse and clear them), and
/// returns true; else leaves them for the caller's RCU-deferred MmuGather. Call after
/// the zap that cleared their PTEs, from the zapping thread; no PTE lock held.
bool FreeZappedPagesIfUnused(MmStruct& mm, std::vector<void*>& pages);

/// do_fault() for file VMAs (do_read_fault with do_fault_around, do_cow_fault,
/// do_shared_fault, and do_wp_page / wp_page_shared / wp_page_copy of file pages):
/// `t`, `i` the PTE slot, `orig` its value when the fault began. kMinor, kMajor (the
/// page was read from the backing store), kNone (spurious), kSigbus (beyond EOF, or
/// the read failed), kOom. Locks as HandleMmFault, plus the folio lock; under the VMA
/// lock only when HandleMmFault did not answer VM_FAULT_RETRY.
FaultOutcome DoFileFault(MmStruct& mm, VmFault& vmf, PageTable::PteTable* t, int i, uint64_t orig);

/// handle_mm_fault() for one page of vmf.vma (access_error already checked).
/// Installs what the access needs: kMinor, kNone (spurious: the PTE already allows
/// it, or it only needed its bits refreshed), kSigbus, kOom. Caller holds mmap_lock
/// (read or write) or, with vmf.vma_locked, the VMA's read lock.
FaultOutcome HandleMmFault(MmStruct& mm, VmFault& vmf);

/// access_error() + handle_mm_fault() for a VMA covering addr, pinned by the caller's
/// lock (as HandleMmFault). Does not perform the access.
/// With vma_locked, *retry (if given) is set when the fault must be redone under
/// mmap_lock (VM_FAULT_RETRY); nothing was done then. With `fpin` (the caller may
/// drop its lock: FAULT_FLAG_ALLOW_RETRY without FAULT_FLAG_TRIED), a fault that
/// dirtied a shared page sets *fpin to the VMA's file (get_file), for
/// FinishDirtyFault after the caller's unlock (maybe_unlock_mmap_for_io).
FaultResult FaultInVma(MmStruct& mm, Vma* v, uint64_t addr, AccessType acc, bool vma_locked, bool* retry = nullptr,
                       std::shared_ptr<OpenFile>* fpin = nullptr);

/// The mmap_lock part of do_user_addr_fault (lock_mm_and_find_vma, handle_mm_fault);
/// `tried`: FAULT_FLAG_TRIED, the second attempt after VM_FAULT_RETRY (it never
/// drops its lock to throttle).
FaultResult FaultUnderMmapLock(MmStruct& mm, uint64_t addr, AccessType acc, bool tried) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

/// The end of a fault that dirtied a shared page, with the fault's lock dropped:
/// balance_dirty_pages_ratelimited, then VM_FAULT_COMPLETED (r returned), or
/// VM_FAULT_RETRY: handle_mm_fault again under mmap_lock (vmstat pgfault counts it
/// twice; r.faults once, as min_flt), per opts.shared_fault_completion.
FaultResult FinishDirtyFault(MmStruct& mm, FaultResult r, std::shared_ptr<OpenFile> fpin, uint64_t addr, AccessType acc)
    ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

/// do_user_addr_fault(): one fault at addr, under the VMA read lock when the profile
/// allows, else (or on VMA_LOCK_ABORT) under mmap_lock read, expanding a stack under
/// mmap_lock write. Takes and releases every lock itself.
FaultResult DoUserAddrFault(MmStruct& mm, uint64_t addr, AccessType acc) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

/// One access of the page holding addr with no data transfer (MAP_POPULATE,
/// Fault()): faults until the PTE allows it, as AddressSpace::Fault.
FaultResult FaultInPage(MmStruct& mm, uint64_t addr, AccessType acc) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

}  // namespace vmspace
