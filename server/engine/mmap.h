// SPDX-License-Identifier: Apache-2.0
// mmap(2), munmap(2), get_unmapped_area and stack expansion (mm/mmap.c, Linux 6.18):
// the placement and stack functions are defined in mmap.cc.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "engine/types.h"
#include "mm.h"

namespace vmspace {

/// calc_vm_prot_bits(): PROT_READ/WRITE/EXEC have the VM_ values.
inline uint64_t CalcVmProtBits(int prot) { return static_cast<uint64_t>(prot) & VM_ACCESS_FLAGS; }

/// unmapped_area_topdown(): the highest gap in [low, high) holding `length`,
/// restarting below a VM_GROWSDOWN VMA's guard gap. Returns the address or ~0.
uint64_t UnmappedAreaTopdownLocked(MmStruct& mm, uint64_t length, uint64_t low, uint64_t high)
    ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// unmapped_area(): the lowest gap in [low, high) holding `length`, or ~0.
uint64_t UnmappedAreaBottomupLocked(MmStruct& mm, uint64_t length, uint64_t low, uint64_t high)
    ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// arch_get_unmapped_area_topdown() / arch_get_unmapped_area(): ~0 if none.
uint64_t ArchGetUnmappedAreaLocked(MmStruct& mm, uint64_t addr, uint64_t len, int flags)
    ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// __get_unmapped_area() (with the THP alignment of private anonymous requests, and
/// of file mappings as thp_get_unmapped_area does for `off` bytes into a file).
/// Returns the address, or 0 with *err = ENOMEM / EINVAL / EPERM.
uint64_t GetUnmappedAreaLocked(MmStruct& mm, uint64_t addr, uint64_t len, int flags, bool file, uint64_t off, int* err)
    ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// expand_downwards(): grows the VM_GROWSDOWN VMA v down to addr's page. Returns 0,
/// EPERM (below mmap_min_addr) or ENOMEM (guard gap, rlimit, map_count), with the
/// kernel's order: the anon_vma is prepared only after the address and guard-gap
/// checks pass (a refused expansion below them leaves the VMA untouched).
int ExpandDownwardsLocked(MmStruct& mm, Vma* v, uint64_t addr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

/// The pages of VMAs that are data mappings (is_data_mapping: writable, not shared,
/// not a stack), mm->data_vm counted by a walk. O(VMAs).
uint64_t DataVmPagesLocked(MmStruct& mm) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

/// may_expand_vm() (mm/mmap.c): whether npages more of a mapping with `flags` fit
/// RLIMIT_DATA (SpaceOptions::rlimit_data; RLIMIT_AS is not modelled). Walks the
/// VMAs only when the limit is finite.
bool MayExpandVmLocked(MmStruct& mm, uint64_t flags, uint64_t npages) ABSL_SHARED_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
