// SPDX-License-Identifier: Apache-2.0
// Truncation of a file's page cache and the unmapping of its pages from every space
// (mm/truncate.c truncate_setsize / truncate_pagecache / truncate_inode_pages_range,
// mm/memory.c unmap_mapping_range; Linux 6.18).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "filemap.h"
#include "memory.h"
#include "mm.h"
#include "mmu_gather.h"

namespace vmspace {

void File::UnmapMappingRange(uint64_t first, uint64_t last) {
  // unmap_mapping_range_tree(): every VMA whose pages intersect [first, last]. Linked
  // VMAs keep their page tables and fields while we hold i_mmap_rwsem (read).
  ReadGuard l(i_mmap_rwsem);
  for (const auto& [pgoff, v] : i_mmap) {
    if (pgoff > last) break;
    const uint64_t vlast = pgoff + v->pages() - 1;
    if (vlast < first) continue;
    const uint64_t s = v->vm_start + ((std::max(first, pgoff) - pgoff) << kPageShift);
    const uint64_t e = v->vm_start + ((std::min(last, vlast) - pgoff + 1) << kPageShift);
    // zap_page_range_single() with even_cows: private copies of these pages go too.
    auto* g = new MmuGather;
    MmStruct& m = *v->vm_mm;
    {
      StatsSlotScope slot(m.stats_slot);
      ZapPteRange(m, v, s, e, g->pages);
    }
    MmuGather::Queue(g, m.frames, m.stats_slot);  // lockless accessors may still touch them
  }
}

namespace {
/// ftruncate(2) of the host file: 0, EFBIG (beyond the host filesystem's s_maxbytes, as
/// inode_newsize_ok answers on it) or EIO.
int HostTruncate(int fd, uint64_t size) {
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) == 0) return 0;
  return errno == EFBIG ? EFBIG : EIO;
}
}  // namespace

int File::SetSizeLocked(uint64_t size) {
  const uint64_t old = i_size.load(std::memory_order_relaxed);
  if (size >= old) {
    // Growing: the host file first, so a size the host filesystem refuses changes
    // nothing (inode_newsize_ok comes before truncate_setsize).
    if (size != old) {
      if (int e = HostTruncate(fd, size)) return e;
      ZeroPostEofLocked(old, ~0ull);
    }
    i_size.store(size, std::memory_order_release);  // i_size_write: faults see it from now
    return 0;
  }
  i_size.store(size, std::memory_order_release);  // i_size_write: faults see it from now
  // truncate_pagecache(): unmap, drop the pages, unmap again (a fault that held a
  // folio lock across the first pass installed its PTE before we removed the folio).
  const uint64_t holebegin = (size + kPageSize - 1) >> kPageShift;
  UnmapMappingRange(holebegin, ~0ull >> kPageShift);
  std::vector<uint64_t> indexes;
  {
    RcuReadGuard g;
    uint64_t index = holebegin;
    while (pages.Find(&index, ~0ull)) indexes.push_back(index++);
  }
  for (uint64_t index : indexes) {
    Folio* f;
    {
      RcuReadGuard g;
      f = pages.Load(index);
      if (f) f->Lock();
    }
    if (!f) continue;
    const bool ours = !f->removed.load(std::memory_order_relaxed);
    if (ours) {  // filemap_remove_folio
      MutexLock l(i_pages_lock);
      pages.Store(index, nullptr);
      f->removed.store(true, std::memory_order_release);
      nrpages.fetch_sub(1, std::memory_order_relaxed);
      ClearDirty(f);
      EndWritebackLocked(f);  // a writeback between its passes (no folio lock) skips it now
    }
    f->Unlock();
    if (ours) FreeFolioDeferred(f);
  }
  // truncate_inode_partial_folio(): the rest of the last page reads as zeros (atomic
  // stores: mapped readers may be looking at it).
  if (size & (kPageSize - 1)) {
    Folio* f;
    {
      RcuReadGuard g;
      f = pages.Load(size >> kPageShift);
      if (f) f->Lock();
    }
    if (f) {
      auto* p = static_cast<uint8_t*>(f->frame);
      for (uint64_t o = size & (kPageSize - 1); o < kPageSize; o++) __atomic_store_n(p + o, 0, __ATOMIC_RELAXED);
      f->Unlock();
    }
  }
  UnmapMappingRange(holebegin, ~0ull >> kPageShift);
  return HostTruncate(fd, size);
}

void File::ZeroPostEofLocked(uint64_t old_size, uint64_t pos) {
  if (shmem() || !(old_size & (kPageSize - 1)) || pos <= old_size) return;
  Folio* f;
  {
    RcuReadGuard g;
    f = pages.Load(old_size >> kPageShift);
    if (f) f->Lock();
  }
  if (!f) return;  // not cached: the host file's tail beyond EOF reads as zeros already
  const uint64_t page_end = (old_size | (kPageSize - 1)) + 1;
  auto* p = static_cast<uint8_t*>(f->frame);
  // Atomic stores: mapped readers may be looking at the page.
  for (uint64_t o = old_size; o < std::min(pos, page_end); o++)
    __atomic_store_n(p + (o & (kPageSize - 1)), 0, __ATOMIC_RELAXED);
  f->Unlock();
}

}  // namespace vmspace
