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

/// vm_fault_t (include/linux/mm_types.h): what a fault handler answers, the VmFaultBits
/// of engine/types.h (Linux's values) and the engine's own bits below, carried from
/// HandleMmFault to do_user_addr_fault (DoUserAddrFault) as handle_mm_fault returns it.
/// 0: a page was installed or fixed (a minor fault); VM_FAULT_MAJOR: read from the
/// backing store; VM_FAULT_NOPAGE: fault-around mapped the page from the page cache;
/// VM_FAULT_RETRY: nothing was done, redo the fault under mmap_lock (only under the VMA
/// lock; the event names the reason); VM_FAULT_SIGSEGV (a guard marker),
/// VM_FAULT_SIGBUS (beyond EOF, or the read failed), VM_FAULT_OOM: the access fails.
using vm_fault_t = uint32_t;

/// Engine bits of vm_fault_t, above Linux's (bit 20 up; FaultResult::vm_fault never
/// carries them). VM_FAULT_SPURIOUS: nothing to install: the PTE already allowed the
/// access or only needed its bits refreshed, or a racing fault changed it first (Linux
/// answers 0; the engine does not count it as a fault in min_flt).
/// VM_FAULT_DIRTY_SHARED: a shared write dirtied a clean page-cache page and its PTE
/// is installed: the caller pins the file, drops its lock and throttles
/// (fault_dirty_shared_page), then answers VM_FAULT_COMPLETED or VM_FAULT_RETRY
/// (FinishDirtyFault).
inline constexpr vm_fault_t VM_FAULT_SPURIOUS = 0x100000;
inline constexpr vm_fault_t VM_FAULT_DIRTY_SHARED = 0x200000;
inline constexpr vm_fault_t kVmFaultEngineBits = VM_FAULT_SPURIOUS | VM_FAULT_DIRTY_SHARED;

/// One page fault being handled (struct vm_fault).
struct VmFault {
  Vma* vma;
  uint64_t address;      // the faulting byte
  AccessType access;     // as handled (an NX fetch is handled as a read)
  bool vma_locked;       // FAULT_FLAG_VMA_LOCK: under the VMA read lock, not mmap_lock
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

/// Test-only: called by a file fault that holds the folio lock and found the page below
/// i_size, before it installs the PTE (arguments: the space, the address), on the
/// faulting thread (truncate_race_test). Null in production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_file_fault_test_hook{nullptr};

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
/// `t`, `i` the PTE slot, `orig` its value when the fault began. Answers a vm_fault_t:
/// 0, VM_FAULT_MAJOR, VM_FAULT_NOPAGE, VM_FAULT_SPURIOUS, VM_FAULT_DIRTY_SHARED,
/// VM_FAULT_SIGBUS, VM_FAULT_OOM, and under the VMA lock of vma_lock=around
/// VM_FAULT_RETRY. Locks as HandleMmFault, plus the folio lock.
vm_fault_t DoFileFault(MmStruct& mm, VmFault& vmf, PageTable::PteTable* t, int i, uint64_t orig);

/// handle_mm_fault() for one page of vmf.vma (access_error already checked).
/// Installs what the access needs and answers a vm_fault_t (above). Caller holds
/// mmap_lock (read or write) or, with vmf.vma_locked, the VMA's read lock.
vm_fault_t HandleMmFault(MmStruct& mm, VmFault& vmf);

/// access_error() + handle_mm_fault() for a VMA covering addr, pinned by the caller's
/// lock (as HandleMmFault). Does not perform the access. The result's vm_fault is the
/// handler's vm_fault_t, the engine's bits included: the caller acts on
/// VM_FAULT_RETRY (with vma_locked: redo under mmap_lock; nothing was done) and
/// VM_FAULT_DIRTY_SHARED (FinishDirtyFault after its unlock).
FaultResult FaultInVma(MmStruct& mm, Vma* v, uint64_t addr, AccessType acc, bool vma_locked);

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
/// mmap_lock write. Takes and releases every lock itself. The result's vm_fault may
/// carry the engine's bits (kVmFaultEngineBits; AccessPage clears them).
FaultResult DoUserAddrFault(MmStruct& mm, uint64_t addr, AccessType acc) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

/// One access of the page holding addr with no data transfer (MAP_POPULATE,
/// Fault()): faults until the PTE allows it, as AddressSpace::Fault.
FaultResult FaultInPage(MmStruct& mm, uint64_t addr, AccessType acc) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

}  // namespace vmspace
