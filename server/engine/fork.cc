// SPDX-License-Identifier: Apache-2.0
// fork's copy of an address space: dup_mmap (mm/mmap.c, Linux 6.18; kernel/fork.c
// before 6.16), copy_page_range / copy_pte_range / copy_present_pte (mm/memory.c) and
// AddressSpace::DupMmap.
#include "fork.h"

#include <thread>
#include <utility>
#include <vector>

#include "filemap.h"
#include "mmap_lock.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

int CopyPageRangeLocked(MmStruct& dst_mm, Vma* dst, MmStruct& src_mm, Vma* src) {
  // vma_needs_copy(): without an anon_vma there is no private page to copy; the child
  // faults file and shared pages in from the page cache itself, unless the VMA is in
  // VM_COPY_ON_FORK (VM_PFNMAP, VM_MIXEDMAP, VM_MAYBE_GUARD: guard markers cannot be
  // faulted back in).
  if (!(src->vm_flags & (VM_PFNMAP | VM_MIXEDMAP | VM_MAYBE_GUARD)) && !src->anon()) return 0;
  const bool cow = (src->vm_flags & (VM_SHARED | VM_MAYWRITE)) == VM_MAYWRITE;  // is_cow_mapping
  const MmCounter file_counter = src->file() && src->file()->shmem() ? MM_SHMEMPAGES : MM_FILEPAGES;
  void* zero = FrameAllocator::ZeroPage();
  int err = 0;
  std::vector<std::pair<int, uint64_t>> copied;
  copied.reserve(PageTable::kEntries);
  src_mm.pt.ForEachTable(src->vm_start, src->vm_end, [&](PageTable::PteTable& st, int i0, int i1, uint64_t a0) {
    if (err) return;
    PageTable::PteTable* dt = dst_mm.pt.Lookup(a0, true);  // pte_alloc (copy_pte_range)
    if (!dt) {
      err = ENOMEM;
      return;
    }
    copied.clear();
    int64_t anon = 0, file = 0;
    {
      SpinGuard dl(dt->ptl);                    // pte_alloc_map_lock(dst_mm)
      st.ptl.LockNested(LockRank::kPtlNested);  // spin_lock_nested(src_ptl)
      for (int i = i0; i < i1; i++) {
        uint64_t pte = st.Get(i);
        if (IsGuardMarker(pte)) {  // copy_nonpresent_pte(): copy_pte_marker keeps PTE_MARKER_GUARD
          copied.emplace_back(i, pte);
          continue;
        }
        if (!(pte & kPtePresent)) continue;
        void* f = PteFrame(pte);
        if (pte & kPteFile) {
          file++;  // folio_dup_file_rmap: the page cache keeps the page
        } else if (f != zero) {
          // copy_present_pte() of an anonymous folio: one more mapping; in a COW mapping
          // both PTEs lose write (ptep_set_wrprotect, pte_wrprotect).
          const uint64_t addr = a0 + static_cast<uint64_t>(i - i0) * kPageSize;
          const uint64_t index = src->vm_pgoff + ((addr - src->vm_start) >> kPageShift);
          PageDupAnonRmap(f, pte & kPteSharedAnon, src->anon(), index);
          uint64_t shared = pte | kPteSharedAnon;
          if (cow) shared &= ~kPteWrite;
          if (shared != pte) {
            st.Clear(i);  // sequentially consistent: ordered against TlbUsers (flush_tlb_mm)
            st.Set(i, shared);
          }
          pte = shared;
          anon++;
        }
        copied.emplace_back(i, pte);
      }
      if (auto hook = g_copy_pte_range_test_hook.load(std::memory_order_relaxed)) hook(&src_mm, a0);
      for (const auto& [i, pte] : copied) dt->Set(i, pte);
      st.ptl.Unlock();
    }
    if (anon) dst_mm.AddRss(MM_ANONPAGES, anon);
    if (file) dst_mm.AddRss(file_counter, file);
  });
  return err;
}

int DupMmap(MmStruct& mm, MmStruct& oldmm) {
  MmapWriteLock(oldmm);  // mmap_write_lock_killable(oldmm)
  mm.mmap_lock.LockWriteNested();  // mmap_write_lock_nested(mm, SINGLE_DEPTH_NESTING)
  uint64_t next_id;
  {
    MutexLock l(oldmm.anon_vma_lock);
    next_id = oldmm.next_anon_vma_id;
  }
  {
    // The child's new anon_vmas are numbered after every id of the parent's tree, so
    // the ids a child VMA shows stay unique in the child.
    MutexLock l(mm.anon_vma_lock);
    mm.next_anon_vma_id = next_id;
  }
  const bool lock_vmas = oldmm.opts.profile.fork_vma_lock;
  // dup_mm()'s copy of the mm_struct: the heap's bounds, start_stack, the special
  // mappings (their names: vm_special_mapping) and the process's RLIMIT_MEMLOCK
  // and CAP_IPC_LOCK carry over; def_flags does not (mm_init keeps only
  // VM_INIT_DEF_MASK, so mlockall(MCL_FUTURE) is not inherited), nor does locked_vm.
  mm.start_brk = oldmm.start_brk;
  mm.brk = oldmm.brk;
  mm.start_stack = oldmm.start_stack;
  mm.special_mappings = oldmm.special_mappings;
  mm.rlimit_memlock.store(oldmm.rlimit_memlock.load(std::memory_order_relaxed), std::memory_order_relaxed);
  mm.cap_ipc_lock.store(oldmm.cap_ipc_lock.load(std::memory_order_relaxed), std::memory_order_relaxed);
  int err = 0;
  uint64_t total_vm = 0, sealed_vm = 0;
  for (Vma* mpnt = FindVmaLocked(oldmm, 0); mpnt; mpnt = VmaNextLocked(oldmm, mpnt)) {
    if (mpnt->vm_flags & VM_DONTCOPY) continue;  // vm_stat_account(mm, -pages)
    // "fork: lock VMAs of the parent process when forking": no fault under the VMA lock
    // may change this VMA's anon_vma or PTEs while they are copied.
    if (lock_vmas) VmaStartWriteLocked(oldmm, mpnt);
    // security_vm_enough_memory_mm(oldmm, len) for a VM_ACCOUNT VMA: the heuristic
    // (overcommit_memory 0) refuses one request larger than RAM + swap; a VMA grown past
    // that by steps (brk, mremap, merged mappings) makes the fork fail.
    if ((mpnt->vm_flags & VM_ACCOUNT) && mpnt->pages() > oldmm.commit_limit_pages) {
      err = ENOMEM;
      break;
    }
    if (!mm.frames.budget().HasRoom(MmStruct::kVmaChangeBytes)) {  // vm_area_dup's kmem charge
      err = ENOMEM;
      break;
    }
    Vma* tmp = VmaAllocLocked(mm);
    tmp->vm_start = mpnt->vm_start;
    tmp->vm_end = mpnt->vm_end;
    tmp->vm_pgoff = mpnt->vm_pgoff;
    tmp->vm_flags = mpnt->vm_flags & ~VM_LOCKED_MASK;  // vm_flags_clear(tmp, VM_LOCKED_MASK)
    tmp->vm_file = mpnt->vm_file;                 // get_file
    tmp->vm_mm = &mm;
    // VM_WIPEONFORK: tmp->anon_vma = NULL, no chain: the child starts with zero pages.
    if (!(tmp->vm_flags & VM_WIPEONFORK)) AnonVmaFork(mm, tmp, mpnt);
    VmaLinkFileLocked(mm, tmp);  // vma_interval_tree_insert_after(tmp, mpnt)
    VmaInsertLocked(mm, tmp);    // vma_iter_bulk_store, map_count++
    total_vm += tmp->pages();
    if (tmp->vm_flags & VM_SEALED) sealed_vm += tmp->pages();  // mseal'd mappings stay sealed
    if (!(tmp->vm_flags & VM_WIPEONFORK)) err = CopyPageRangeLocked(mm, tmp, oldmm, mpnt);
    if (auto hook = g_dup_mmap_test_hook.load(std::memory_order_relaxed)) hook(&oldmm, mpnt->vm_start);
    if (err) break;
  }
  mm.total_vm.store(total_vm, std::memory_order_relaxed);
  mm.sealed_vm.store(sealed_vm, std::memory_order_relaxed);
  // flush_tlb_mm(oldmm): the PTEs write-protected above are in no parent thread's "TLB"
  // once none is in the access path (the Clear before each change was sequentially
  // consistent: TlbUsers::Idle). Before the VMA write locks go (mmap_write_unlock).
  while (!oldmm.tlb_users.Idle()) std::this_thread::yield();
  MmapWriteUnlock(mm);
  MmapWriteUnlock(oldmm);
  return err;
}

std::unique_ptr<AddressSpace> AddressSpace::DupMmap(int* error, const LockingProfile* profile) {
  SpaceEntry entry(*mm_);
  SpaceOptions o = mm_->opts;
  if (profile) o.profile = *profile;
  int err = 0;
  for (int attempt = 0;; attempt++) {
    auto child = std::make_unique<AddressSpace>(mm_->frames, o);
    err = vmspace::DupMmap(*child->mm_, *mm_);
    if (err == 0) {
      if (error) *error = 0;
      return child;
    }
    child.reset();  // exit_mmap of what was copied: shared frames get their counts back
    // As the kernel reclaims before it fails: once more after the frees already queued.
    if (err != ENOMEM || attempt > 0) break;
    mm_->frames.Reclaim();
  }
  if (error) *error = err;
  return nullptr;
}

}  // namespace vmspace
