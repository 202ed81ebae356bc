// VMA tree changes: link, unlink, set range, split, merge and unmap (mm/vma.h, mm/vma.c).
#pragma once

#include <atomic>
#include <cstdint>

#include "mm.h"

namespace vmspace {

/// Test-only: called by VmaLinkNewLocked between the VMA-tree insert and the i_mmap
/// insert of a new file VMA (arguments: the space, the VMA's start), on the mmap
/// thread, which holds mmap_lock for write (and, with i_mmap_scope wide, the file's
/// i_mmap_rwsem for write). Null in production.
inline std::atomic<void (*)(struct MmStruct*, uint64_t)> g_mmap_region_test_hook{nullptr};

}  // namespace vmspace
