// SPDX-License-Identifier: Apache-2.0
// Heap the engine keeps after the spaces that used it are gone, for the daemon's metrics.
#pragma once

#include <cstdint>

namespace vmspace {

/// Bytes of heap the VMA index's node pools (maple tree and rbtree nodes) have carved
/// into slabs: nodes linked into trees, in trees' caches and free in the pools. Like a
/// kmem_cache that is never shrunk, the slabs are kept for reuse after the spaces that
/// used them are gone. No lock (a relaxed read).
uint64_t IndexNodePoolBytes();

/// Bytes of the engine's per-thread statistics blocks (stats.h): one per thread that
/// ever counted at once, kept after the thread exits for the next one (its counts are
/// part of the totals), so bounded by the peak number of threads. Takes the blocks'
/// registry mutex.
uint64_t ThreadStatsBytes();

}  // namespace vmspace
