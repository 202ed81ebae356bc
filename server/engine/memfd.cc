// SPDX-License-Identifier: Apache-2.0
// memfd seals: fcntl F_ADD_SEALS / F_GET_SEALS and their mmap check (mm/memfd.c
// memfd_add_seals, memfd_get_seals, memfd_check_seals_mmap; Linux 6.18). memfd_create
// itself is FileTable::CreateShmem (file_table.cc).
#include <cerrno>

#include "engine/file.h"
#include "filemap.h"
#include "memfd.h"

namespace vmspace {

int MemfdCheckSealsMmap(const File& f, uint64_t* vm_flags) {
  if (!IsWriteSealed(f.seals.load(std::memory_order_acquire))) return 0;
  // check_write_seal(): private mappings may write (COW); a shared writable one may not.
  const uint64_t mask = *vm_flags & (VM_SHARED | VM_WRITE);
  if (!(mask & VM_SHARED)) return 0;
  if (mask & VM_WRITE) return EPERM;
  *vm_flags &= ~VM_MAYWRITE;
  return 0;
}

int FileTable::AddSeals(uint64_t id, uint32_t seals) {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h) return EBADF;
  if (!h->writable) return EPERM;  // FMODE_WRITE
  if (seals & ~kAllSeals) return EINVAL;
  File& f = *h->file;
  MutexLock l(f.i_rwsem);  // inode_lock
  if (!f.sealable()) return EINVAL;  // memfd_file_seals_ptr() is NULL
  const uint32_t cur = f.seals.load(std::memory_order_relaxed);
  if (cur & F_SEAL_SEAL) return EPERM;
  // "SEAL_EXEC implys SEAL_WRITE, making W^X from the start" (before the write seal's
  // check: a writable shared mapping makes F_SEAL_EXEC EBUSY too, seen on 6.18).
  if ((seals & F_SEAL_EXEC) && f.mode_exec) seals |= F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
  if ((seals & F_SEAL_WRITE) && !(cur & F_SEAL_WRITE)) {
    // mapping_deny_writable(); memfd_wait_for_pins() has no pins to wait for here.
    if (int e = f.MappingDenyWritable()) return e;
  }
  f.seals.store(cur | seals, std::memory_order_release);
  return 0;
}

SysResult FileTable::GetSeals(uint64_t id) const {
  std::shared_ptr<OpenFile> h = Get(id);
  if (!h) return SysResult::Err(EBADF);
  if (!h->file->sealable()) return SysResult::Err(EINVAL);
  return SysResult::Ok(h->file->seals.load(std::memory_order_acquire));
}

}  // namespace vmspace
