// ShmemObject: the memory object behind shared anonymous mappings (mm/shmem.c).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "engine/frame_allocator.h"
#include "sync/mutex.h"

namespace vmspace {

/// The shmem object behind a shared anonymous mapping (shmem_zero_setup, mm/shmem.c):
/// its pages indexed by page offset. Shared by every VMA split from the original
/// mapping; its pages are freed when the last VMA referring to it is freed.
struct ShmemObject {
  ShmemObject(FrameAllocator& f, uint64_t ino, uint64_t pages) : frames(f), inode(ino), size_pages(pages) {}
  ~ShmemObject();
  /// The frame at `pgoff`, allocating a zeroed one if absent (shmem_get_folio);
  /// nullptr if the frame limit is reached. Takes `mu` (i_pages lock; not held with a
  /// PTE lock).
  void* GetPage(uint64_t pgoff) ABSL_LOCKS_EXCLUDED(mu);

  FrameAllocator& frames;
  const uint64_t inode;       // immutable; shown in maps
  const uint64_t size_pages;  // immutable
  Mutex mu{LockRank::kIPages};
  std::unordered_map<uint64_t, void*> pages ABSL_GUARDED_BY(mu);
};

}  // namespace vmspace
