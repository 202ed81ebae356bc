// The page-fault path, the zap of PTE ranges, and accesses of the space's memory
// (mm/memory.c, arch/x86/mm/fault.c).
#pragma once

#include <atomic>
#include <cstdint>

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

}  // namespace vmspace
