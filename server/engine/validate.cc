// Invariant checker (mm/vma.c validate_mm, plus the accounting Linux checks at exit:
// check_mm's "BUG: Bad rss-counter state").
#include <string>
#include <unordered_set>

#include "fmt/format.h"
#include "mm.h"

namespace vmspace {

std::string AddressSpace::Validate() {
  RcuThread();
  MmStruct& m = *mm_;
  StatsSlotScope slot_scope(m.stats_slot);
  m.MmapWriteLock();
  // Write-lock every VMA (as mm_take_all_locks would): no fault runs while we count.
  for (Vma* v = m.FindVmaLocked(0); v; v = m.VmaNextLocked(v)) m.VmaStartWriteLocked(v);

  std::string err;
  uint64_t prev_end = 0, count = 0, total = 0;
  uint64_t anon_frames = 0, shmem_ptes = 0, ptes = 0;
  std::unordered_set<void*> frames_seen;
  void* zero = FrameAllocator::ZeroPage();
  for (Vma* v = m.FindVmaLocked(0); v && err.empty(); v = m.VmaNextLocked(v)) {
    if (!PageAligned(v->vm_start) || !PageAligned(v->vm_end) || v->vm_start >= v->vm_end ||
        v->vm_end > kTaskSize) {
      err = fmt::format("bad vma [{:#x}, {:#x})", v->vm_start, v->vm_end);
    } else if (v->vm_start < prev_end) {
      err = fmt::format("overlap at {:#x}", v->vm_start);
    } else if (m.FindVmaLocked(v->vm_start) != v) {
      err = fmt::format("index lookup of {:#x} misses its VMA", v->vm_start);
    } else if (m.VmaIsDetached(v)) {
      err = fmt::format("detached VMA in the tree at {:#x}", v->vm_start);
    } else if (uint32_t rc = v->vm_refcnt.load(); m.vma_form == VmaForm::kRefcnt && rc >= Vma::kVmaLockOffset) {
      // Attached, no writer waiting (a reader may transiently hold it until its
      // vm_lock_seq re-check fails).
      err = fmt::format("vm_refcnt {} on an attached VMA at {:#x}", rc, v->vm_start);
    }
    prev_end = v->vm_end;
    count++;
    total += v->pages();
    const bool anon = v->is_anonymous();
    m.pt.ForEachPresent(v->vm_start, v->vm_end, [&](uint64_t a, uint64_t pte) {
      ptes++;
      void* f = PteFrame(pte);
      if (!anon) {
        shmem_ptes++;
      } else if (f != zero) {
        anon_frames++;
        if (!frames_seen.insert(f).second && err.empty())
          err = fmt::format("frame {} mapped twice (again at {:#x})", f, a);
      }
    });
  }
  uint64_t all_ptes = 0;
  m.pt.ForEachPresent(0, kTaskSize, [&](uint64_t, uint64_t) { all_ptes++; });
  const uint64_t map_count = m.map_count.load(std::memory_order_relaxed);
  const uint64_t total_vm = m.total_vm.load(std::memory_order_relaxed);
  const int64_t rss_anon = m.rss[MM_ANONPAGES].Sum(), rss_shmem = m.rss[MM_SHMEMPAGES].Sum();
  if (err.empty() && count != map_count) err = fmt::format("map_count {} != {} VMAs", map_count, count);
  if (err.empty() && total != total_vm) err = fmt::format("total_vm {} != {} pages", total_vm, total);
  if (err.empty() && all_ptes != ptes)
    err = fmt::format("{} present PTEs outside any VMA", all_ptes - ptes);
  if (err.empty() && rss_anon != static_cast<int64_t>(anon_frames))
    err = fmt::format("MM_ANONPAGES {} != {} anonymous frames mapped", rss_anon, anon_frames);
  if (err.empty() && rss_shmem != static_cast<int64_t>(shmem_ptes))
    err = fmt::format("MM_SHMEMPAGES {} != {} shmem PTEs", rss_shmem, shmem_ptes);
  m.MmapWriteUnlock();
  return err;
}

}  // namespace vmspace
