// SPDX-License-Identifier: Apache-2.0
// change_protection (mm/mprotect.c, Linux 6.18), defined in mprotect.cc with mprotect(2).
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mm.h"

namespace vmspace {

/// change_protection(): rewrites the permission bits of present PTEs in [start, end)
/// of v for its (new) flags, under each table's PTE lock. v is write-locked.
void ChangeProtectionLocked(MmStruct& mm, Vma* v, uint64_t start, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mm.mmap_lock);

}  // namespace vmspace
