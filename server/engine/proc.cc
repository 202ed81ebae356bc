// SPDX-License-Identifier: Apache-2.0
// /proc/PID/maps and smaps data, and the space's counters (fs/proc/task_mmu.c
// show_map_vma, show_smap_vma_flags; include/linux/mm.h get_mm_counter; Linux 6.18).
#include <cstdio>

#include "filemap.h"
#include "mm.h"
#include "proc.h"
#include "vma.h"

namespace vmspace {

uint64_t RssLocked(MmStruct& mm, uint64_t start, uint64_t end) {
  uint64_t n = 0;
  void* zero = FrameAllocator::ZeroPage();
  mm.pt.ForEachPresent(start, end, [&](uint64_t, uint64_t pte) {
    if (PteFrame(pte) != zero) n++;
  });
  return n;
}

const char* SpecialMappingNameLocked(const MmStruct& mm, const Vma* v) {
  if (!(v->vm_flags & VM_DONTEXPAND) || v->vm_file) return nullptr;
  for (const MmStruct::SpecialMapping& s : mm.special_mappings)
    if (s.start == v->vm_start) return s.name;
  return nullptr;
}

VmaInfo VmaInfoLocked(MmStruct& mm, const Vma* v) {
  VmaInfo i;
  i.start = v->vm_start;
  i.end = v->vm_end;
  i.flags = v->vm_flags;
  i.pgoff = v->vm_pgoff;
  i.anonymous = v->is_anonymous();
  if (const File* f = v->file()) {
    i.shmem = f->shmem();
    i.offset = v->vm_pgoff << kPageShift;
    i.dev_major = f->dev_major;
    i.dev_minor = f->dev_minor;
    i.inode = f->ino;
    i.name = f->maps_name;
  } else if (const char* special = SpecialMappingNameLocked(mm, v)) {
    i.name = special;  // vma->vm_ops->name
  } else if (v->vm_start < PageAlign(mm.brk) && v->vm_end > mm.start_brk) {
    i.name = "[heap]";  // vma_is_initial_heap()
  } else if (mm.start_stack && v->vm_start <= mm.start_stack && v->vm_end >= mm.start_stack) {
    i.name = "[stack]";  // vma_is_initial_stack()
  }
  i.rss_pages = RssLocked(mm, v->vm_start, v->vm_end);
  AnonVma* a = v->anon();
  i.anon_vma_id = a ? a->id : 0;
  return i;
}

std::vector<VmaInfo> AddressSpace::Maps(uint64_t start, uint64_t end) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  std::vector<VmaInfo> out;
  ReadGuard l(m.mmap_lock);
  for (Vma* v = FindVmaLocked(m, start); v && v->vm_start < end; v = VmaNextLocked(m, v))
    out.push_back(VmaInfoLocked(m, v));
  return out;
}

uint64_t AddressSpace::CountVmas(uint64_t start, uint64_t end, uint64_t max) {
  MmStruct& m = *mm_;
  SpaceEntry entry(m);
  ReadGuard l(m.mmap_lock);
  uint64_t n = 0;
  for (Vma* v = FindVmaLocked(m, start); v && v->vm_start < end && n < max; v = VmaNextLocked(m, v)) n++;
  return n;
}

std::string AddressSpace::RenderMaps(uint64_t start, uint64_t end) {
  std::string s;
  for (const VmaInfo& v : Maps(start, end)) {
    s += FormatMapsLine(v);
    s += '\n';
  }
  return s;
}

SpaceCounters AddressSpace::Counters() const {
  const MmStruct& m = *mm_;
  SpaceCounters c;
  c.map_count = m.map_count.load(std::memory_order_relaxed);
  c.total_vm_pages = m.total_vm.load(std::memory_order_relaxed);
  // A sum taken while faults run can be transiently negative (a cell decremented
  // before another's increment is seen): report 0 then, as get_mm_counter does.
  const int64_t anon = m.rss[MM_ANONPAGES].Sum(), shmem = m.rss[MM_SHMEMPAGES].Sum(),
                file = m.rss[MM_FILEPAGES].Sum();
  c.anon_pages = anon > 0 ? static_cast<uint64_t>(anon) : 0;
  c.shmem_pages = shmem > 0 ? static_cast<uint64_t>(shmem) : 0;
  c.file_pages = file > 0 ? static_cast<uint64_t>(file) : 0;
  c.rss_pages = c.anon_pages + c.shmem_pages + c.file_pages;
  c.pgtable_bytes = m.pt.table_pages() * kPageSize;
  c.locked_vm_pages = m.locked_vm.load(std::memory_order_relaxed);
  c.sealed_pages = m.sealed_vm.load(std::memory_order_relaxed);
  c.sealed_vmas = m.sealed_vmas.load(std::memory_order_relaxed);
  return c;
}

std::string AddressSpace::FormatMapsLine(const VmaInfo& v) {
  // fs/proc/task_mmu.c show_vma_header_prefix + show_map_vma
  char buf[512];
  int n = snprintf(buf, sizeof buf, "%08llx-%08llx %c%c%c%c %08llx %02x:%02x %llu ",
                   (unsigned long long)v.start, (unsigned long long)v.end,
                   (v.flags & VM_READ) ? 'r' : '-', (v.flags & VM_WRITE) ? 'w' : '-',
                   (v.flags & VM_EXEC) ? 'x' : '-', (v.flags & VM_MAYSHARE) ? 's' : 'p',
                   (unsigned long long)(v.anonymous ? 0 : v.offset), v.dev_major, v.dev_minor,
                   (unsigned long long)v.inode);
  std::string s(buf, n);
  if (!v.name.empty()) {
    // seq_pad(m, ' '): pad to 25 + 6 * sizeof(void*) - 1 = 72 columns, then one space
    if (s.size() < 72) s.append(72 - s.size(), ' ');
    s += ' ';
    s += v.name;
  }
  return s;
}

std::string AddressSpace::VmFlagsString(uint64_t flags) {
  // fs/proc/task_mmu.c show_smap_vma_flags: one mnemonic per set bit, in bit order.
  static const char* const kNames[64] = {
      "rd", "wr", "ex", "sh", "mr", "mw", "me", "ms",  // 0-7
      "gd", "um", "pf", "gu", "uw", "lo", "io", "sr",  // 8-15
      "rr", "dc", "de", "lf", "ac", "nr", "ht", "sf",  // 16-23
      "ar", "wf", "dd", "sd", "mm", "hg", "nh", "mg",  // 24-31
  };
  std::string s;
  for (int b = 0; b < 64; b++) {
    if (!(flags & (1ull << b))) continue;
    const char* name = b == 36 ? "dp" : b == 63 ? "sl" : kNames[b];  // VM_DROPPABLE, VM_SEALED
    if (!name || !name[0]) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s;
}

}  // namespace vmspace
