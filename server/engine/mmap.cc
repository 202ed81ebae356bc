// SPDX-License-Identifier: Apache-2.0
// mmap(2), munmap(2), get_unmapped_area and stack expansion (mm/mmap.c, mm/vma.c
// __mmap_region and do_vmi_munmap, arch/x86/kernel/sys_x86_64.c; Linux 6.18).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "engine/stats.h"
#include "filemap.h"
#include "mm.h"
#include "mmap.h"
#include "memfd.h"
#include "memory.h"
#include "mlock.h"
#include "mmap_lock.h"
#include "rmap.h"
#include "vma.h"
#include "vma_lock.h"

namespace vmspace {

namespace {
constexpr int kMapType = 0x0f;
/// LEGACY_MAP_MASK (include/linux/mman.h): the flags MAP_SHARED_VALIDATE accepts for a
/// file without FOP_MMAP_SYNC (MAP_DENYWRITE 0x800, MAP_EXECUTABLE 0x1000,
/// MAP_UNINITIALIZED 0x4000000, MAP_HUGE_MASK 0x3f << 26).
constexpr uint64_t kLegacyMapMask = MAP_SHARED | MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS | 0x800 | 0x1000 |
                                    0x4000000 | MAP_GROWSDOWN | MAP_LOCKED | MAP_NORESERVE | MAP_POPULATE |
                                    MAP_NONBLOCK | MAP_STACK | MAP_HUGETLB | MAP_32BIT | (0x3full << 26);
/// MAX_LFS_FILESIZE: file_mmap_ok()'s limit for regular files.
constexpr uint64_t kMaxLfsFilesize = 0x7fffffffffffffffull;
}  // namespace

// ====================================================================== placement

/// unmapped_area_topdown() (mm/vma.c): the highest gap in [low, high) that holds
/// `length`, restarting below a VM_GROWSDOWN VMA's guard gap. Returns the address or
/// ~0 (ENOMEM).
uint64_t UnmappedAreaTopdownLocked(MmStruct& mm, uint64_t length, uint64_t low, uint64_t high) {
  if (low < mm.opts.mmap_min_addr) low = mm.opts.mmap_min_addr;
  for (;;) {
    if (high <= low || high - low < length) return ~0ull;
    uint64_t gap_end = mm.idx->HighestGapEnd(length, low, high);
    if (gap_end == ~0ull) return ~0ull;
    Vma* above = VmaNextFromLocked(mm, gap_end);
    if (above && (above->vm_flags & VM_GROWSDOWN) && above->start_gap() < gap_end) {
      high = above->start_gap();
      continue;
    }
    return gap_end - length;
  }
}

/// unmapped_area() (mm/vma.c): the lowest gap in [low, high) holding `length`. Only
/// the fallback and MAP_32BIT use it; it walks VMAs from the bottom.
uint64_t UnmappedAreaBottomupLocked(MmStruct& mm, uint64_t length, uint64_t low, uint64_t high) {
  if (low < mm.opts.mmap_min_addr) low = mm.opts.mmap_min_addr;
  for (;;) {
    if (high <= low || high - low < length) return ~0ull;
    Vma* lower = VmaPrevLocked(mm, low);
    if (lower && lower->vm_end <= low) lower = nullptr;
    uint64_t gs = lower ? lower->vm_end : low;
    bool found = false;
    Vma* upper = VmaNextFromLocked(mm, gs);
    while (true) {
      uint64_t s0 = gs < low ? low : gs;
      uint64_t ge = upper ? upper->vm_start : ~0ull;
      if (ge > high) ge = high;
      if (ge > s0 && ge - s0 >= length) {
        gs = s0;
        found = true;
        break;
      }
      if (!upper || upper->vm_start >= high) break;
      gs = upper->vm_end;
      upper = VmaNextFromLocked(mm, gs);
    }
    if (!found) return ~0ull;
    if (upper && (upper->vm_flags & VM_GROWSDOWN) && upper->start_gap() < gs + length) {
      low = upper->vm_end;
      continue;
    }
    return gs;
  }
}

/// arch_get_unmapped_area_topdown() / arch_get_unmapped_area() (arch/x86/kernel/
/// sys_x86_64.c): hint check, then top-down search below mmap_base, falling back to
/// bottom-up from TASK_SIZE/3. MAP_32BIT searches [1 GiB, 2 GiB) bottom-up.
uint64_t ArchGetUnmappedAreaLocked(MmStruct& mm, uint64_t addr, uint64_t len, int flags) {
  if (len > kTaskSize) return ~0ull;
  if (flags & MAP_FIXED) return addr;
  if (!(flags & MAP_32BIT)) {
    if (addr) {
      addr &= kPageMask;
      if (kTaskSize - len >= addr) {  // mmap_address_hint_valid
        Vma* v = FindVmaLocked(mm, addr);
        if (!v || addr + len <= v->start_gap()) return addr;
      }
    }
    uint64_t r = UnmappedAreaTopdownLocked(mm, len, kPageSize, mm.opts.mmap_base);
    if (r != ~0ull) return r;
  }
  // bottomup: arch_get_unmapped_area()
  uint64_t begin = (flags & MAP_32BIT) ? 0x40000000ull : PageAlign(kTaskSize / 3);
  uint64_t end = (flags & MAP_32BIT) ? 0x80000000ull : kTaskSize;
  if (len > end) return ~0ull;
  if (addr) {
    addr = PageAlign(addr);
    Vma* v = FindVmaLocked(mm, addr);
    if (end - len >= addr && (!v || addr + len <= v->start_gap())) return addr;
  }
  return UnmappedAreaBottomupLocked(mm, len, begin, end);
}

/// __get_unmapped_area() (mm/mmap.c) for anonymous memory, including the THP
/// alignment of private anonymous requests (thp_get_unmapped_area_vmflags,
/// __thp_get_unmapped_area with off = 0). Returns the address or an errno via *err.
uint64_t GetUnmappedAreaLocked(MmStruct& mm, uint64_t addr, uint64_t len, int flags, bool file, uint64_t off,
                               int* err) {
  *err = 0;
  if (len > kTaskSize) {
    *err = ENOMEM;
    return 0;
  }
  uint64_t r = ~0ull;
  // __thp_get_unmapped_area(): search with a PMD of padding, then place the range so
  // that file offset `off` lands PMD aligned (top-down: one PMD up if it already is).
  auto thp_area = [&](uint64_t o) -> uint64_t {
    mm.mmap_lock.AssertHeld();  // the caller's (a lambda is analysed on its own)
    const uint64_t len_pad = len + kPmdSize;
    if (len_pad < len || o + len_pad < o) return ~0ull;
    const uint64_t ret = ArchGetUnmappedAreaLocked(mm, addr, len_pad, flags);
    if (ret == ~0ull) return ~0ull;
    if (ret == addr) return addr;
    const uint64_t off_sub = (o - ret) & (kPmdSize - 1);
    return off_sub == 0 ? ret + kPmdSize : ret + off_sub;
  };
  const bool shared = flags & MAP_SHARED;  // shmem_get_unmapped_area (no THP for shmem here)
  if (file) {  // thp_get_unmapped_area (host files): when the range spans an aligned PMD
    const uint64_t off_align = (off + kPmdSize - 1) & ~(kPmdSize - 1);
    if (mm.opts.thp_align_anon && off + len > off_align && off + len - off_align >= kPmdSize) r = thp_area(off);
  } else if (!shared && mm.opts.thp_align_anon && !addr && (len % kPmdSize) == 0 && !(flags & MAP_FIXED)) {
    r = thp_area(0);
  }
  if (r == ~0ull) r = ArchGetUnmappedAreaLocked(mm, addr, len, flags);
  if (r == ~0ull) {
    *err = ENOMEM;
    return 0;
  }
  if (r > kTaskSize - len) {
    *err = ENOMEM;
    return 0;
  }
  if (r & (kPageSize - 1)) {
    *err = EINVAL;
    return 0;
  }
  // security_mmap_addr -> cap_mmap_addr
  if (r < mm.opts.dac_mmap_min_addr && !mm.opts.cap_sys_rawio) {
    *err = EPERM;
    return 0;
  }
  return r;
}

// ====================================================================== stack

int ExpandDownwardsLocked(MmStruct& mm, Vma* v, uint64_t addr) {
  mm.mmap_lock.AssertWriteHeld();
  addr &= kPageMask;
  if (addr < mm.opts.mmap_min_addr) return EPERM;
  // Enforce stack_guard_gap against the VMA below (FindVma found v as the first VMA
  // ending above addr, so prev ends at or below addr).
  Vma* prev = VmaPrevLocked(mm, v->vm_start);
  if (prev && !(prev->vm_flags & VM_GROWSDOWN) && (prev->vm_flags & VM_ACCESS_FLAGS) &&
      addr - prev->vm_end < kStackGuardGap)
    return ENOMEM;
  // Only now: "We must make sure the anon_vma is allocated." Later refusals
  // (acct_stack_growth) keep it, as in Linux.
  AnonVmaPrepareLocked(mm, v);
  VmaStartWriteLocked(mm, v);
  if (addr >= v->vm_start) return 0;  // somebody else expanded it already
  const uint64_t size = v->vm_end - addr;
  const uint64_t grow = (v->vm_start - addr) >> kPageShift;
  if (grow > v->vm_pgoff) return ENOMEM;
  // acct_stack_growth() with RLIMIT_STACK = 8 MiB.
  constexpr uint64_t kRlimitStack = 8ull << 20;
  if (size > kRlimitStack) return ENOMEM;
  if (!MlockFutureOk(mm, v->vm_flags, grow << kPageShift)) return ENOMEM;
  if (mm.map_count.load(std::memory_order_relaxed) > mm.opts.max_map_count) return ENOMEM;
  mm.total_vm.store(mm.total_vm.load(std::memory_order_relaxed) + grow, std::memory_order_relaxed);
  if (v->vm_flags & VM_LOCKED)
    mm.locked_vm.store(mm.locked_vm.load(std::memory_order_relaxed) + grow, std::memory_order_relaxed);
  if (v->vm_flags & VM_SEALED)  // mseal does not stop a stack from growing: more sealed pages
    mm.sealed_vm.store(mm.sealed_vm.load(std::memory_order_relaxed) + grow, std::memory_order_relaxed);
  VmaSetRangeLocked(mm, v, addr, v->vm_end);  // vm_pgoff -= grow
  return 0;
}

// ====================================================================== syscalls

namespace {

/// The part of do_mmap / __mmap_region that runs under mmap_lock: placement, flag
/// checks, accounting, MAP_FIXED replacement, merge or insert. Returns 0 with
/// *addr_inout = the address and *vm_flags_out, or an errno.
int DoMmapLocked(MmStruct& m, uint64_t* addr_inout, uint64_t plen, int prot, int flags, uint64_t offset,
                 const std::shared_ptr<OpenFile>& file, uint64_t* vm_flags_out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  uint64_t addr = *addr_inout;
  const uint64_t pages = plen >> kPageShift;
  if (!MayAddVmaLocked(m, /*over=*/true)) return (ENOMEM);
  int err = 0;
  addr = GetUnmappedAreaLocked(m, addr, plen, flags, file && !file->file->shmem(), offset, &err);
  if (err) return (err);
  // __mmap_setup()'s vma_find(): the first VMA ending above addr, which overlaps the
  // range (MAP_FIXED) or is the next VMA above it (the merge's next).
  Vma* found = FindVmaLocked(m, addr);
  Vma* overlap = found && found->vm_start < addr + plen ? found : nullptr;
  if ((flags & MAP_FIXED_NOREPLACE) && overlap) return (EEXIST);

  uint64_t vm_flags = CalcVmProtBits(prot) | m.def_flags | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC;
  if (flags & MAP_GROWSDOWN) vm_flags |= VM_GROWSDOWN;
  if (flags & MAP_LOCKED) vm_flags |= VM_LOCKED;
  if (flags & MAP_STACK) vm_flags |= VM_NOHUGEPAGE;  // since Linux 6.7
  if (flags & MAP_SYNC) vm_flags |= VM_SYNC;          // calc_vm_flag_bits, any mapping
  if ((flags & MAP_LOCKED) && !CanDoMlock(m)) return (EPERM);
  if (!MlockFutureOk(m, vm_flags, plen)) return (EAGAIN);
  uint64_t pgoff = offset >> kPageShift;
  if (file) {
    // file_mmap_ok(): the range must fit below MAX_LFS_FILESIZE.
    if (plen > kMaxLfsFilesize || pgoff > (kMaxLfsFilesize - plen) >> kPageShift) return (EOVERFLOW);
    switch (flags & kMapType) {
      case MAP_SHARED:
        flags &= kLegacyMapMask;
        [[fallthrough]];
      case MAP_SHARED_VALIDATE:
        // MAP_SYNC passes here (flags_mask) and is refused below, after the
        // permission checks, as this kernel orders it (seen: EACCES first).
        if (static_cast<uint64_t>(flags) & ~(kLegacyMapMask | MAP_SYNC)) return (EOPNOTSUPP);
        if ((prot & PROT_WRITE) && !file->writable) return (EACCES);
        vm_flags |= VM_SHARED | VM_MAYSHARE;
        if (!file->writable) vm_flags &= ~(VM_MAYWRITE | VM_SHARED);
        else if (IsReadonlySealed(*file->file, vm_flags)) vm_flags &= ~VM_MAYWRITE;
        [[fallthrough]];
      case MAP_PRIVATE:
        if (!file->readable) return (EACCES);
        // Every File here has ->mmap (host files are regular, FileTable refuses the
        // rest), so no ENODEV.
        if (vm_flags & VM_GROWSDOWN) return (EINVAL);
        break;
      default:
        return (EINVAL);
    }
    // Seals forbid a new writable shared mapping and make a read-only one stay so.
    if (int e = MemfdCheckSealsMmap(*file->file, &vm_flags)) return e;
  } else switch (flags & kMapType) {
    case MAP_SHARED:
      if (vm_flags & VM_GROWSDOWN) return (EINVAL);
      pgoff = 0;
      vm_flags |= VM_SHARED | VM_MAYSHARE;
      break;
    case MAP_DROPPABLE:  // Linux 6.11+
      if (flags & (MAP_LOCKED | MAP_HUGETLB)) return (EINVAL);
      if (vm_flags & VM_GROWSDOWN) return (EINVAL);
      vm_flags |= VM_DROPPABLE | VM_NORESERVE | VM_WIPEONFORK | VM_DONTDUMP;
      pgoff = addr >> kPageShift;
      break;
    case MAP_PRIVATE:
      pgoff = addr >> kPageShift;
      break;
    default:
      return (EINVAL);
  }
  if (flags & MAP_NORESERVE) vm_flags |= VM_NORESERVE;  // overcommit_memory != 2
  if (flags & MAP_HUGETLB) return (ENOMEM);  // no huge pages reserved

  // mmap_region(): a writable shared file mapping counts in i_mmap_writable while it is
  // set up (mapping_map_writable), so F_SEAL_WRITE cannot slip in: EPERM once denied.
  struct MapWritable {
    File* f = nullptr;
    ~MapWritable() {
      if (f) f->MappingUnmapWritable();
    }
  } writable;
  if (file && (vm_flags & (VM_SHARED | VM_MAYWRITE)) == (VM_SHARED | VM_MAYWRITE)) {
    if (int e = file->file->MappingMapWritable()) return e;
    writable.f = file->file.get();
  }
  // __mmap_region (mm/vma.c). Accounting is checked before unmapping what MAP_FIXED
  // replaces (Linux checks after gathering; only a failing MAP_FIXED differs).
  bool accountable = (vm_flags & (VM_NORESERVE | VM_SHARED | VM_WRITE)) == VM_WRITE;
  if (accountable) {
    uint64_t replaced = 0;
    for (Vma* v = overlap; v && v->vm_start < addr + plen; v = VmaNextLocked(m, v))
      if (v->vm_flags & VM_ACCOUNT) {
        uint64_t s = std::max(v->vm_start, addr), e = std::min(v->vm_end, addr + plen);
        replaced += (e - s) >> kPageShift;
      }
    if (pages - replaced > m.commit_limit_pages) return (ENOMEM);
    vm_flags |= VM_ACCOUNT;
  }
  if (!file && (vm_flags & VM_SHARED) && !(vm_flags & VM_NORESERVE) && pages > m.commit_limit_pages)
    return (ENOMEM);  // shmem_acct_size in shmem_zero_setup
  if ((flags & MAP_FIXED) && overlap) {
    if (int e = UnmapRangeLocked(m, addr, addr + plen, /*free_tables=*/false, nullptr)) return e;
  }
  // The filesystem's ->mmap_prepare refuses VM_SYNC (set by MAP_SYNC even with
  // MAP_SHARED or MAP_PRIVATE, which drop or ignore the flag itself) without DAX, after
  // MAP_FIXED has removed what was there: the range is left unmapped (seen on 6.18).
  if (file && (vm_flags & VM_SYNC)) return (EOPNOTSUPP);
  Vma* v = nullptr;
  // A shared anonymous mapping is a new shmem file: it never merges.
  if (file || !(vm_flags & VM_SHARED))
    v = VmaMergeNewRangeLocked(m, addr, addr + plen, vm_flags, pgoff, file.get(),
                                 overlap ? FindVmaLocked(m, addr) : found);  // after the unmap: again
  if (!v) {
    v = VmaAllocLocked(m);
    v->vm_mm = &m;
    v->vm_start = addr;
    v->vm_end = addr + plen;
    v->vm_flags = vm_flags;
    v->vm_pgoff = pgoff;
    if (file) v->vm_file = file;
    else if (vm_flags & VM_SHARED) v->vm_file = NewShmemFile(m.frames, "/dev/zero (deleted)", plen);  // shmem_zero_setup
    VmaLinkNewLocked(m, v);  // __mmap_new_vma: tree + i_mmap, before it can map a page
  }
  m.total_vm.store(m.total_vm.load(std::memory_order_relaxed) + pages, std::memory_order_relaxed);
  if (vm_flags & VM_LOCKED) {  // __mmap_complete
    if (!VmaSupportsMlock(v)) {
      VmaStartWriteLocked(m, v);
      v->vm_flags &= ~VM_LOCKED_MASK;
    } else {
      m.locked_vm.store(m.locked_vm.load(std::memory_order_relaxed) + pages, std::memory_order_relaxed);
    }
  }
  *addr_inout = addr;
  *vm_flags_out = vm_flags;
  return 0;
}

}  // namespace

SysResult AddressSpace::Mmap(uint64_t addr, uint64_t len, int prot, int flags, uint64_t offset) {
  return Mmap(addr, len, prot, flags, offset, nullptr);
}

SysResult AddressSpace::Mmap(uint64_t addr, uint64_t len, int prot, int flags, uint64_t offset,
                             std::shared_ptr<OpenFile> file) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  auto fail = [](int e) {
    CountOp(OpType::kMmap, e);
    return SysResult::Err(e);
  };
  // arch/x86/kernel/sys_x86_64.c: SYSCALL_DEFINE6(mmap)
  if (offset & (kPageSize - 1)) return fail(EINVAL);
  // ksys_mmap_pgoff: MAP_ANONYMOUS ignores the file; without it, fget() of the fd.
  if (flags & MAP_ANONYMOUS) file = nullptr;
  else if (!file || !file->file) return fail(EBADF);
  if (flags & MAP_HUGETLB) {
    if (file) return fail(EINVAL);  // not a hugetlbfs file
    int log = (flags >> 26) & 0x3f;  // MAP_HUGE_SHIFT, MAP_HUGE_MASK
    if (log != 0 && log != 21 && log != 30) return fail(EINVAL);  // hstate_sizelog
  }
  // do_mmap (mm/mmap.c)
  if (len == 0) return fail(EINVAL);
  if (flags & MAP_FIXED_NOREPLACE) flags |= MAP_FIXED;
  if (!(flags & MAP_FIXED)) {  // round_hint_to_min
    addr &= kPageMask;
    if (addr && addr < m.opts.mmap_min_addr) addr = PageAlign(m.opts.mmap_min_addr);
  }
  uint64_t plen = PageAlign(len);
  if (plen == 0) return fail(ENOMEM);
  const uint64_t pgoff = offset >> kPageShift;
  if (pgoff + (plen >> kPageShift) < pgoff) return fail(EOVERFLOW);

  uint64_t vm_flags = 0;
  const uint64_t hint = addr;
  const int err = RetryAfterReclaim(m, [&] {
    addr = hint;
    MmapWriteLock(m);
    const int e = DoMmapLocked(m, &addr, plen, prot, flags, offset, file, &vm_flags);
    MmapWriteUnlock(m);
    return e;
  });
  if (err) return fail(err);
  CountOp(OpType::kMmap, 0);
  const bool populate = ((flags & (MAP_POPULATE | MAP_NONBLOCK)) == MAP_POPULATE) || (vm_flags & VM_LOCKED);
  // mm_populate after dropping mmap_lock: stops at the first page that cannot be
  // faulted in (populate_vma_page_range's error) or when the caller asks to stop
  // (fatal_signal_pending); nothing for VM_LOCKONFAULT; the mmap succeeds either way.
  if (populate) MmPopulate(m, addr, plen, /*ignore_errors=*/true);
  return SysResult::Ok(addr);
}

SysResult AddressSpace::Munmap(uint64_t addr, uint64_t len) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  // do_vmi_munmap (mm/vma.c)
  if ((addr & (kPageSize - 1)) || addr > kTaskSize || len > kTaskSize - addr) {
    CountOp(OpType::kMunmap, EINVAL);
    return SysResult::Err(EINVAL);
  }
  uint64_t end = addr + PageAlign(len);
  if (end == addr) {
    CountOp(OpType::kMunmap, EINVAL);
    return SysResult::Err(EINVAL);
  }
  const int e = RetryAfterReclaim(m, [&] {  // a split the budget refused
    MmapWriteLock(m);
    return DoVmiMunmapUnlock(m, addr, end);
  });
  CountOp(OpType::kMunmap, e);
  return e ? SysResult::Err(e) : SysResult::Ok();
}

// ====================================================================== brk

uint64_t DataVmPagesLocked(MmStruct& mm) {
  uint64_t n = 0;
  for (Vma* v = FindVmaLocked(mm, 0); v; v = VmaNextLocked(mm, v))
    if ((v->vm_flags & (VM_WRITE | VM_SHARED | VM_GROWSDOWN)) == VM_WRITE) n += v->pages();  // is_data_mapping
  return n;
}

bool MayExpandVmLocked(MmStruct& mm, uint64_t flags, uint64_t npages) {
  // RLIMIT_AS is not modelled (unlimited).
  if ((flags & (VM_WRITE | VM_SHARED | VM_GROWSDOWN)) != VM_WRITE) return true;
  if (mm.opts.rlimit_data == ~0ull) return true;
  return DataVmPagesLocked(mm) + npages <= (mm.opts.rlimit_data >> kPageShift);
}

namespace {

/// do_brk_flags() (mm/vma.c): maps [addr, addr+len) as private anonymous VM_ACCOUNT
/// memory with mm->def_flags (VM_LOCKED after mlockall(MCL_FUTURE): locked_vm grows),
/// expanding `brkvma` when it ends at addr (vma_merge_new_range with just_expand: only
/// the previous VMA; its sticky flags are ignored and kept), else with a new VMA.
/// Returns 0 or ENOMEM.
int DoBrkFlagsLocked(MmStruct& m, Vma* brkvma, uint64_t addr, uint64_t len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  // VM_DATA_DEFAULT_FLAGS (x86: VM_DATA_FLAGS_TSK_EXEC without READ_IMPLIES_EXEC).
  const uint64_t flags = VM_READ | VM_WRITE | VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC | VM_ACCOUNT | m.def_flags;
  const uint64_t pages = len >> kPageShift;
  if (!MayExpandVmLocked(m, flags, pages)) return ENOMEM;
  if (!MayAddVmaLocked(m, /*over=*/true)) return ENOMEM;  // map_count > sysctl_max_map_count
  if (pages > m.commit_limit_pages) return ENOMEM;        // security_vm_enough_memory_mm
  if (brkvma && brkvma->vm_end == addr && (brkvma->vm_flags & ~kVmSticky) == flags && !brkvma->vm_file &&
      brkvma->vm_pgoff + brkvma->pages() == (addr >> kPageShift) && IsMergeableAnonVma(brkvma, nullptr, nullptr)) {
    VmaSetRangeLocked(m, brkvma, brkvma->vm_start, addr + len);  // vma_expand
  } else {
    Vma* v = VmaAllocLocked(m);
    v->vm_mm = &m;
    v->vm_start = addr;
    v->vm_end = addr + len;
    v->vm_flags = flags;
    v->vm_pgoff = addr >> kPageShift;
    VmaLinkNewLocked(m, v);
  }
  m.total_vm.store(m.total_vm.load(std::memory_order_relaxed) + pages, std::memory_order_relaxed);
  if (flags & VM_LOCKED) m.locked_vm.store(m.locked_vm.load(std::memory_order_relaxed) + pages, std::memory_order_relaxed);
  return 0;
}

}  // namespace

namespace {

/// SYSCALL_DEFINE1(brk)'s part under mmap_lock write (mm/mmap.c): returns 0 with the
/// new break set, or ENOMEM (any refusal: the caller restores the old break), or
/// EAGAIN when the break shrinks: m.brk is set and [*unmap_start, *unmap_end) is left
/// for the caller's do_vmi_align_munmap with the lock dropped.
int BrkLocked(MmStruct& m, uint64_t brk, uint64_t* unmap_start, uint64_t* unmap_end)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mmap_lock) {
  if (brk < m.start_brk) return ENOMEM;
  // check_data_rlimit(): (brk - start_brk) + (end_data - start_data) > RLIMIT_DATA; the
  // space has no data segment.
  if (m.opts.rlimit_data != ~0ull && brk - m.start_brk > m.opts.rlimit_data) return ENOMEM;
  const uint64_t newbrk = PageAlign(brk), oldbrk = PageAlign(m.brk);
  if (oldbrk == newbrk) {
    m.brk = brk;
    return 0;
  }
  if (brk <= m.brk) {  // always allow shrinking brk
    // vma_find(&vmi, oldbrk) from newbrk: a VMA of the range to unmap.
    if (!FindVmaIntersectionLocked(m, newbrk, oldbrk)) return ENOMEM;
    m.brk = brk;  // do_vmi_align_munmap() drops the lock on success
    *unmap_start = newbrk;
    *unmap_end = oldbrk;
    return EAGAIN;
  }
  // check_brk_limits(): get_unmapped_area(NULL, oldbrk, len, 0, MAP_FIXED), then
  // mlock_future_ok() for mm->def_flags (RLIMIT_MEMLOCK after mlockall(MCL_FUTURE)).
  int err = 0;
  GetUnmappedAreaLocked(m, oldbrk, newbrk - oldbrk, MAP_FIXED | MAP_PRIVATE, false, 0, &err);
  if (err || !MlockFutureOk(m, m.def_flags, newbrk - oldbrk)) return ENOMEM;
  // vma_find(&vmi, newbrk + PAGE_SIZE + stack_guard_gap) from oldbrk: only a VMA
  // whose guard gap reaches the expansion area (plus a page) refuses it.
  Vma* next = FindVmaLocked(m, oldbrk);
  if (next && next->vm_start < newbrk + kPageSize + kStackGuardGap && newbrk + kPageSize > next->start_gap())
    return ENOMEM;
  // vma_prev_limit(&vmi, mm->start_brk): the VMA below oldbrk, if it lies in the heap.
  Vma* brkvma = VmaPrevLocked(m, oldbrk);
  if (brkvma && brkvma->vm_start < m.start_brk) brkvma = nullptr;
  if (DoBrkFlagsLocked(m, brkvma, oldbrk, newbrk - oldbrk)) return ENOMEM;
  m.brk = brk;
  return 0;
}

/// The range a successful brk growth populates (mm_populate(oldbrk, newbrk - oldbrk)
/// when mm->def_flags has VM_LOCKED): [PAGE_ALIGN(old), PAGE_ALIGN(new)).
bool BrkPopulates(const MmStruct& m, uint64_t old_brk, uint64_t new_brk) ABSL_SHARED_LOCKS_REQUIRED(m.mmap_lock) {
  return (m.def_flags & VM_LOCKED) && PageAlign(new_brk) > PageAlign(old_brk);
}

}  // namespace

uint64_t AddressSpace::Brk(uint64_t brk) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  MmapWriteLock(m);
  const uint64_t origbrk = m.brk;
  uint64_t unmap_start = 0, unmap_end = 0;
  int e = BrkLocked(m, brk, &unmap_start, &unmap_end);
  if (e == EAGAIN) {
    e = DoVmiMunmapUnlock(m, unmap_start, unmap_end);
    if (!e) {
      CountOp(OpType::kBrk, 0);
      return brk;
    }
    MmapWriteLock(m);
  }
  if (e) m.brk = origbrk;
  const bool populate = !e && BrkPopulates(m, origbrk, brk);
  MmapWriteUnlock(m);
  if (populate) MmPopulate(m, PageAlign(origbrk), PageAlign(brk) - PageAlign(origbrk), /*ignore_errors=*/true);
  // brk(0) (any break below start_brk) is how a process asks for the break: no error.
  CountOp(OpType::kBrk, e && brk >= m.opts.start_brk ? ENOMEM : 0);
  return e ? origbrk : brk;
}

}  // namespace vmspace
