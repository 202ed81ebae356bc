// SPDX-License-Identifier: Apache-2.0
// msync(2) (mm/msync.c, Linux 6.18) and fsync of an open file (fs/sync.c
// vfs_fsync_range with file_check_and_advance_wb_err).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "engine/stats.h"
#include "filemap.h"
#include "mm.h"
#include "vma.h"

namespace vmspace {

int HostDataSync(File& f) {
  if (f.fd < 0) return 0;
  CountEvent(Event::kHostFileSyncs);
  if (fdatasync(f.fd) == 0) return 0;
  f.wb_err.fetch_add(1, std::memory_order_acq_rel);
  return EIO;
}

int VfsFsyncRange(OpenFile& h, uint64_t first, uint64_t last) {
  File& f = *h.file;
  int err = f.WriteAndWait(first, last);
  if (const int e = HostDataSync(f); e && !err) err = e;
  // file_check_and_advance_wb_err(): a failure since this handle last looked is EIO
  // once (WriteRange's own failures and the writeback thread's included: they
  // advanced wb_err before their pages ended writeback).
  const uint64_t cur = f.wb_err.load(std::memory_order_acquire);
  if (h.wb_err_seen.exchange(cur, std::memory_order_acq_rel) != cur) return EIO;
  return err;
}

SysResult AddressSpace::Msync(uint64_t start, uint64_t len, int flags) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  auto done = [](int e) { return e ? SysResult::Err(e) : SysResult::Ok(); };
  if (flags & ~(MS_ASYNC | MS_INVALIDATE | MS_SYNC)) return done(EINVAL);
  if (start & (kPageSize - 1)) return done(EINVAL);
  if ((flags & MS_ASYNC) && (flags & MS_SYNC)) return done(EINVAL);
  len = PageAlign(len);
  const uint64_t end = start + len;
  if (end < start) return done(ENOMEM);
  if (end == start) return done(0);
  // Unmapped holes are skipped and reported as ENOMEM at the end; MS_ASYNC alone does
  // nothing (it starts no writeback since Linux 2.6.19) and stops at the first hole.
  int unmapped = 0;
  for (;;) {
    std::shared_ptr<OpenFile> sync_file;
    uint64_t fstart = 0, fend = 0;
    int error = 0;
    bool finished = false;
    {
      ReadGuard l(m.mmap_lock);
      Vma* vma = FindVmaLocked(m, start);
      for (;;) {
        error = ENOMEM;
        finished = true;
        if (!vma) break;
        if (start < vma->vm_start) {
          if (flags == MS_ASYNC) break;
          start = vma->vm_start;
          if (start >= end) break;
          unmapped = ENOMEM;
        }
        if ((flags & MS_INVALIDATE) && (vma->vm_flags & VM_LOCKED)) {
          error = EBUSY;
          break;
        }
        fstart = (start - vma->vm_start) + (vma->vm_pgoff << kPageShift);
        fend = fstart + (std::min(end, vma->vm_end) - start) - 1;
        start = vma->vm_end;
        if ((flags & MS_SYNC) && vma->vm_file && (vma->vm_flags & VM_SHARED)) {
          sync_file = vma->vm_file;  // get_file(); synced after mmap_read_unlock
          finished = false;
          break;
        }
        if (start >= end) {
          error = 0;
          break;
        }
        vma = VmaNextLocked(m, vma);
      }
    }
    if (sync_file) {
      error = VfsFsyncRange(*sync_file, fstart >> kPageShift, fend >> kPageShift);
      finished = error || start >= end;
    }
    if (finished) return done(error ? error : unmapped);
  }
}

}  // namespace vmspace
