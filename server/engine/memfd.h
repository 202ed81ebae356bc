// SPDX-License-Identifier: Apache-2.0
// The memfd seals' checks on mmap (include/linux/memfd.h, mm/memfd.c, include/linux/mm.h
// is_readonly_sealed; Linux 6.18), defined in memfd.cc with FileTable::AddSeals and
// GetSeals. The seals' checks on truncate and write are in file_table.cc (shmem_setattr,
// shmem_write_begin).
#pragma once

#include <cstdint>

#include "filemap.h"

namespace vmspace {

/// F_ALL_SEALS: the seal bits F_ADD_SEALS knows.
inline constexpr uint32_t kAllSeals =
    F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_FUTURE_WRITE | F_SEAL_EXEC;

/// is_write_sealed(): F_SEAL_WRITE or F_SEAL_FUTURE_WRITE.
inline bool IsWriteSealed(uint32_t seals) { return seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE); }

/// is_readonly_sealed(): a shared mapping without VM_WRITE of a write-sealed file, which
/// do_mmap makes unable to become writable (VM_MAYWRITE cleared).
inline bool IsReadonlySealed(const File& f, uint64_t vm_flags) {
  return IsWriteSealed(f.seals.load(std::memory_order_acquire)) && (vm_flags & (VM_SHARED | VM_WRITE)) == VM_SHARED;
}

/// memfd_check_seals_mmap(): EPERM for a shared writable mapping of a write-sealed file;
/// a shared read-only one loses VM_MAYWRITE (mprotect to write then EACCES). 0 else.
int MemfdCheckSealsMmap(const File& f, uint64_t* vm_flags);

}  // namespace vmspace
