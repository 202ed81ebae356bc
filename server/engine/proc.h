// SPDX-License-Identifier: Apache-2.0
// The data of /proc/PID/maps and smaps for one VMA (fs/proc/task_mmu.c; Linux 6.18),
// defined in proc.cc with the maps text and the space's counters.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// Resident pages (not the zero page) mapped in [start, end), walking the PTEs (the
/// smaps Rss of one VMA).
uint64_t RssLocked(MmStruct& mm, uint64_t start, uint64_t end) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// The name of v if it is one of the space's special mappings (MmStruct::
/// special_mappings: [vvar], [vdso]...; the vm_special_mapping's name), else null.
const char* SpecialMappingNameLocked(const MmStruct& mm, const Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// The VmaInfo (maps line data) of v.
VmaInfo VmaInfoLocked(MmStruct& mm, const Vma* v) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
