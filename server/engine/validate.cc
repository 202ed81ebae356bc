// SPDX-License-Identifier: Apache-2.0
// Invariant checker (mm/vma.c validate_mm, plus the accounting Linux checks at exit:
// check_mm's "BUG: Bad rss-counter state").
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "fmt/format.h"
#include "filemap.h"
#include "mm.h"
#include "mmap_lock.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

namespace {

/// The anonymous rmap of the frame the PTE at addr of v maps: an exclusive frame
/// belongs to v's anon_vma (v has one); a frame fork shared has metadata whose anon_vma
/// v is chained to, the rmap walk from it finds this mapping (rmap_walk_anon), and its
/// PTE is writable only if no other space maps it (map count 1).
std::string CheckAnonRmap(MmStruct& m, Vma* v, uint64_t addr, uint64_t pte) {
  void* f = PteFrame(pte);
  if (!(pte & kPteSharedAnon)) {
    if (!v->anon()) return fmt::format("anonymous frame at {:#x} in a VMA without an anon_vma", addr);
    return "";
  }
  PageMeta* meta = PageMetaOf(f);
  if (!meta) return fmt::format("shared frame {} at {:#x} has no metadata", f, addr);
  const int32_t mapcount = meta->mapcount.load(std::memory_order_acquire);
  if (mapcount < 1) return fmt::format("shared frame {} at {:#x} has map count {}", f, addr, mapcount);
  if ((pte & kPteWrite) && mapcount > 1)
    return fmt::format("writable PTE at {:#x} of a frame {} PTEs map (copy-on-write broken)", addr, mapcount);
  if (!VmaChainedTo(v, meta->anon_vma))
    return fmt::format("frame at {:#x} belongs to anon_vma {} that its VMA [{:#x}, {:#x}) is not chained to",
                       addr, meta->anon_vma->id, v->vm_start, v->vm_end);
  bool found = false;
  RmapWalkAnon(
      meta->anon_vma, meta->index, [&](Vma* w, uint64_t a) { found |= w == v && a == addr; }, &m);
  if (!found) return fmt::format("the rmap walk of the frame at {:#x} (index {:#x}) misses it", addr, meta->index);
  return "";
}

}  // namespace

std::string AddressSpace::Validate() {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  MmapWriteLock(m);
  // Write-lock every VMA (as mm_take_all_locks would): no fault runs while we count.
  for (Vma* v = FindVmaLocked(m, 0); v; v = VmaNextLocked(m, v)) VmaStartWriteLocked(m, v);

  std::string err;
  uint64_t prev_end = 0, count = 0, total = 0, locked = 0, sealed = 0, sealed_count = 0;
  uint64_t anon_frames = 0, shmem_ptes = 0, file_ptes = 0, ptes = 0;
  std::unordered_map<File*, uint64_t> file_vmas;  // this space's VMAs per file
  std::unordered_set<void*> frames_seen;
  void* zero = FrameAllocator::ZeroPage();
  for (Vma* v = FindVmaLocked(m, 0); v && err.empty(); v = VmaNextLocked(m, v)) {
    if (!PageAligned(v->vm_start) || !PageAligned(v->vm_end) || v->vm_start >= v->vm_end ||
        v->vm_end > kTaskSize) {
      err = fmt::format("bad vma [{:#x}, {:#x})", v->vm_start, v->vm_end);
    } else if (v->vm_start < prev_end) {
      err = fmt::format("overlap at {:#x}", v->vm_start);
    } else if (FindVmaLocked(m, v->vm_start) != v) {
      err = fmt::format("index lookup of {:#x} misses its VMA", v->vm_start);
    } else if (VmaIsDetached(m, v)) {
      err = fmt::format("detached VMA in the tree at {:#x}", v->vm_start);
    } else if (uint32_t rc = v->vm_refcnt.load(); m.vma_form == VmaForm::kRefcnt && rc >= Vma::kVmaLockOffset) {
      // Attached, no writer waiting (a reader may transiently hold it until its
      // vm_lock_seq re-check fails).
      err = fmt::format("vm_refcnt {} on an attached VMA at {:#x}", rc, v->vm_start);
    }
    prev_end = v->vm_end;
    count++;
    total += v->pages();
    if (v->vm_flags & VM_LOCKED) locked += v->pages();
    if (v->vm_flags & VM_SEALED) {
      sealed += v->pages();
      sealed_count++;
    }
    File* file = v->file();
    if (file && err.empty()) {
      file_vmas[file]++;
      ReadGuard l(file->i_mmap_rwsem);
      if (!file->i_mmap.count({v->vm_pgoff, v}) || v->vm_mm != &m)
        err = fmt::format("file VMA [{:#x}, {:#x}) pgoff {:#x} missing from its i_mmap", v->vm_start,
                          v->vm_end, v->vm_pgoff);
    }
    m.pt.ForEachPresent(v->vm_start, v->vm_end, [&](uint64_t a, uint64_t pte) {
      ptes++;
      void* f = PteFrame(pte);
      if (pte & kPteFile) {
        (file && file->shmem() ? shmem_ptes : file_ptes)++;
        // The frame must be the page cache's page at that offset (nothing maps a
        // truncated or freed page).
        const uint64_t pgoff = v->vm_pgoff + ((a - v->vm_start) >> kPageShift);
        RcuReadGuard g;
        Folio* folio = file ? file->pages.Load(pgoff) : nullptr;
        if ((!folio || folio->frame != f) && err.empty())
          err = fmt::format("PTE at {:#x} maps {} which is not the page cache's page {:#x}", a, f, pgoff);
      } else if (f != zero) {
        anon_frames++;
        if (!frames_seen.insert(f).second && err.empty())
          err = fmt::format("frame {} mapped twice (again at {:#x})", f, a);
        if (err.empty()) err = CheckAnonRmap(m, v, a, pte);
      }
    });
  }
  uint64_t all_ptes = 0;
  m.pt.ForEachPresent(0, kTaskSize, [&](uint64_t, uint64_t) { all_ptes++; });
  const uint64_t map_count = m.map_count.load(std::memory_order_relaxed);
  const uint64_t total_vm = m.total_vm.load(std::memory_order_relaxed);
  for (const auto& [file, n] : file_vmas) {
    if (!err.empty()) break;
    uint64_t linked = 0;
    ReadGuard l(file->i_mmap_rwsem);
    for (const auto& [pgoff, v] : file->i_mmap) linked += v->vm_mm == &m;
    if (linked != n) err = fmt::format("i_mmap of {} holds {} VMAs of this space, the tree {}", file->maps_name, linked, n);
  }
  const int64_t rss_anon = m.rss[MM_ANONPAGES].Sum(), rss_shmem = m.rss[MM_SHMEMPAGES].Sum(),
                rss_file = m.rss[MM_FILEPAGES].Sum();
  if (err.empty() && count != map_count) err = fmt::format("map_count {} != {} VMAs", map_count, count);
  if (err.empty() && total != total_vm) err = fmt::format("total_vm {} != {} pages", total_vm, total);
  if (const uint64_t lv = m.locked_vm.load(std::memory_order_relaxed); err.empty() && lv != locked)
    err = fmt::format("locked_vm {} != {} pages of VM_LOCKED VMAs", lv, locked);
  if (const uint64_t sv = m.sealed_vm.load(std::memory_order_relaxed); err.empty() && sv != sealed)
    err = fmt::format("sealed {} != {} pages of VM_SEALED VMAs", sv, sealed);
  if (const uint64_t sn = m.sealed_vmas.load(std::memory_order_relaxed); err.empty() && sn != sealed_count)
    err = fmt::format("sealed_vmas {} != {} VM_SEALED VMAs", sn, sealed_count);
  if (err.empty() && all_ptes != ptes)
    err = fmt::format("{} present PTEs outside any VMA", all_ptes - ptes);
  if (err.empty() && rss_anon != static_cast<int64_t>(anon_frames))
    err = fmt::format("MM_ANONPAGES {} != {} anonymous frames mapped", rss_anon, anon_frames);
  if (err.empty() && rss_shmem != static_cast<int64_t>(shmem_ptes))
    err = fmt::format("MM_SHMEMPAGES {} != {} shmem PTEs", rss_shmem, shmem_ptes);
  if (err.empty() && rss_file != static_cast<int64_t>(file_ptes))
    err = fmt::format("MM_FILEPAGES {} != {} file PTEs", rss_file, file_ptes);
  MmapWriteUnlock(m);
  return err;
}

}  // namespace vmspace
