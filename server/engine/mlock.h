// SPDX-License-Identifier: Apache-2.0
// The mlock family's helpers (mm/mlock.c, Linux 6.18), defined in mlock.cc with
// mlock2(2), munlock(2), mlockall(2) and munlockall(2); and __mm_populate (mm/gup.c),
// which mlock, mlockall and mmap's MAP_POPULATE / VM_LOCKED use.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// can_do_mlock(): RLIMIT_MEMLOCK is not 0, or the process has CAP_IPC_LOCK. No lock.
bool CanDoMlock(const MmStruct& mm);

/// mlock_future_ok(): a mapping of `bytes` with `vm_flags` keeps locked_vm within
/// RLIMIT_MEMLOCK (always true without VM_LOCKED or with CAP_IPC_LOCK). mmap answers
/// EAGAIN, stack growth ENOMEM when it is not. Caller holds mmap_lock for write.
bool MlockFutureOk(const MmStruct& mm, uint64_t vm_flags, uint64_t bytes) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// vma_supports_mlock(): VM_LOCKED is never set on VM_SPECIAL or VM_DROPPABLE VMAs
/// (mlock skips them; a new one loses def_flags' VM_LOCKED).
inline bool VmaSupportsMlock(const Vma* v) { return !(v->vm_flags & (VM_SPECIAL | VM_DROPPABLE)); }

/// __mm_populate() (mm/gup.c): faults in the pages of the VMAs in [start, start + len)
/// as populate_vma_page_range does: nothing for VM_LOCKONFAULT, VM_IO or VM_PFNMAP
/// VMAs; EFAULT for an inaccessible (PROT_NONE) one; write faults where the VMA is
/// private and writable (breaking COW), read faults elsewhere. Returns 0, or the first
/// error (EFAULT: a page ended in a signal; ENOMEM: no frame; EINTR: the caller asked
/// to stop, CancelScope) unless `ignore_errors`, which goes on at the next VMA (mmap).
/// Takes mmap_lock for read to find each VMA; the faults take their own locks.
int MmPopulate(MmStruct& mm, uint64_t start, uint64_t len, bool ignore_errors) ABSL_LOCKS_EXCLUDED(mm.mmap_lock);

}  // namespace vmspace
