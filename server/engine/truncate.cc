// SPDX-License-Identifier: Apache-2.0
// Truncation of a file's page cache and the unmapping of its pages from every space
// (mm/truncate.c truncate_setsize / truncate_pagecache / truncate_inode_pages_range,
// mm/memory.c unmap_mapping_range; Linux 6.18).
#include <fcntl.h>
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

namespace {
/// truncate_inode_pages_range() (mm/truncate.c): removes the page-cache pages of
/// [first, end) (pages), dropping their dirty state; each folio under its lock. The
/// folios removed go to `removed`: a fault that held a folio lock across the caller's
/// first unmap pass may still map one, so the caller frees them (FreeRemovedFolios)
/// only after its second pass, as Linux's folio is freed only when the last PTE
/// reference goes (truncate_cleanup_folio -> unmap_mapping_folio, then folio_put).
void TruncateInodePagesRange(File& file, uint64_t first, uint64_t end, std::vector<Folio*>& removed) {
  std::vector<uint64_t> indexes;
  {
    RcuReadGuard g;
    uint64_t index = first;
    while (index < end && file.pages.Find(&index, end)) indexes.push_back(index++);
  }
  for (uint64_t index : indexes) {
    Folio* f;
    {
      RcuReadGuard g;
      f = file.pages.Load(index);
      if (f) f->Lock();
    }
    if (!f) continue;
    const bool ours = !f->removed.load(std::memory_order_relaxed);
    if (ours) {  // filemap_remove_folio
      MutexLock l(file.i_pages_lock);
      file.pages.Store(index, nullptr);
      f->removed.store(true, std::memory_order_release);
      file.nrpages.fetch_sub(1, std::memory_order_relaxed);
      file.ClearDirty(f);
      file.EndWritebackLocked(f);  // a writeback between its passes (no folio lock) skips it now
    }
    f->Unlock();
    if (ours) removed.push_back(f);
  }
}

/// Frees the folios TruncateInodePagesRange removed, each after a grace period that
/// starts now: no PTE maps them any more (the second unmap pass ran), and an access
/// that read a PTE before that pass is in a read section the grace period waits for.
void FreeRemovedFolios(const std::vector<Folio*>& removed) {
  for (Folio* f : removed) FreeFolioDeferred(f);
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
  // filemap_invalidate_lock (as ext4_setattr takes it around truncate_setsize and
  // truncate_pagecache): no page is added from here until the host file is truncated.
  WriteGuard il(invalidate_lock);
  i_size.store(size, std::memory_order_release);  // i_size_write: faults see it from now
  // truncate_pagecache(): unmap, drop the pages, unmap again (a fault that held a
  // folio lock across the first pass installed its PTE before we removed the folio).
  const uint64_t holebegin = (size + kPageSize - 1) >> kPageShift;
  UnmapMappingRange(holebegin, ~0ull >> kPageShift);
  if (auto hook = g_truncate_test_hook.load(std::memory_order_relaxed)) hook(this, 1);
  std::vector<Folio*> removed;
  TruncateInodePagesRange(*this, holebegin, ~0ull, removed);
  if (auto hook = g_truncate_test_hook.load(std::memory_order_relaxed)) hook(this, 2);
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
  FreeRemovedFolios(removed);
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

namespace {
/// unmap_mapping_range(..., even_cows = 0) of pages [first, last]: only PTEs mapping
/// page-cache pages (kPteFile) are cleared, in every VMA of i_mmap.
void UnmapMappingPages(File& file, uint64_t first, uint64_t last) {
  ReadGuard l(file.i_mmap_rwsem);
  for (const auto& [pgoff, v] : file.i_mmap) {
    if (pgoff > last) break;
    const uint64_t vlast = pgoff + v->pages() - 1;
    if (vlast < first) continue;
    const uint64_t s = v->vm_start + ((std::max(first, pgoff) - pgoff) << kPageShift);
    const uint64_t e = v->vm_start + ((std::min(last, vlast) - pgoff + 1) << kPageShift);
    MmStruct& m = *v->vm_mm;
    int64_t n = 0;
    m.pt.ForEachTable(s, e, [&](PageTable::PteTable& t, int i0, int i1, uint64_t) {
      SpinGuard g(t.ptl);
      for (int i = i0; i < i1; i++)
        if ((t.Get(i) & kPtePresent) && (t.Get(i) & kPteFile)) {
          t.Clear(i);
          n++;
        }
    });
    if (n) {
      StatsSlotScope slot(m.stats_slot);
      m.AddRss(file.shmem() ? MM_SHMEMPAGES : MM_FILEPAGES, -n);
    }
  }
}
}  // namespace

int File::PunchHole(uint64_t first, uint64_t last) {
  MutexLock l(i_rwsem);
  WriteGuard il(invalidate_lock);  // as ext4_punch_hole: through the punch of the host file
  UnmapMappingPages(*this, first, last);
  std::vector<Folio*> removed;
  TruncateInodePagesRange(*this, first, last + 1, removed);
  UnmapMappingPages(*this, first, last);  // a fault that held a folio lock across the first pass
  FreeRemovedFolios(removed);
  if (fd < 0) return 0;
  const uint64_t size = i_size.load(std::memory_order_relaxed);
  const uint64_t off = first << kPageShift;
  if (off >= size) return 0;
  if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                static_cast<off_t>(std::min((last + 1) << kPageShift, size) - off)) != 0)
    return errno;
  return 0;
}

bool File::EvictCleanFolio(uint64_t index) {
  Folio* f;
  {
    RcuReadGuard g;
    f = pages.Load(index);
    if (f) f->Lock();
  }
  if (!f) return false;
  bool evict = !f->removed.load(std::memory_order_relaxed) && !f->dirty.load(std::memory_order_relaxed) &&
               !f->writeback.load(std::memory_order_relaxed);
  if (evict) {  // folio_mapped(): any PTE of any VMA of i_mmap still mapping it
    ReadGuard l(i_mmap_rwsem);
    for (const auto& [pgoff, v] : i_mmap) {
      if (pgoff > index) break;
      if (pgoff + v->pages() <= index) continue;
      const uint64_t a = v->vm_start + ((index - pgoff) << kPageShift);
      PageTable::PteTable* t = v->vm_mm->pt.Lookup(a, false);
      const uint64_t pte = t ? t->Get(PageTable::PteIndex(a)) : 0;
      if ((pte & kPtePresent) && PteFrame(pte) == f->frame) evict = false;
    }
  }
  if (evict) {  // filemap_remove_folio
    MutexLock l(i_pages_lock);
    pages.Store(index, nullptr);
    f->removed.store(true, std::memory_order_release);
    nrpages.fetch_sub(1, std::memory_order_relaxed);
  }
  f->Unlock();
  if (evict) FreeFolioDeferred(f);
  return evict;
}

}  // namespace vmspace
