// SPDX-License-Identifier: Apache-2.0
// The memory the daemon keeps for reuse when no space holds it, read at scrape time:
// what its RSS holds beyond the spaces' own memory after a load has gone.
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

namespace vmspace {
class FrameAllocator;
}

namespace vmspace::metrics {

/// Appends, read now:
///   vmspace_cache_bytes{cache="frames"}       free frames kept resident for reuse
///                                             (at most --frame-cache-bytes once trimmed)
///   vmspace_cache_bytes{cache="index_nodes"}  free VMA-index nodes kept in the node pools'
///                                             slabs (never given back, as a kmem_cache
///                                             that is not shrunk)
///   vmspace_cache_bytes{cache="thread_stats"} the engine's and the RPC counters' per-thread
///                                             blocks (kept after their threads exit for the
///                                             next ones: bounded by the peak thread count,
///                                             ~60 KiB a thread)
///   vmspace_cache_bytes{cache="malloc_free"}  free bytes glibc malloc keeps in its arenas
///                                             (mallinfo2 fordblks; an upper bound of their
///                                             resident part: malloc_trim gives the pages
///                                             inside free chunks back but they still count)
///   vmspace_heap_allocated_bytes              bytes malloc has handed out and not had back
///                                             (mallinfo2 uordblks + hblkhd)
/// `frames` may be null (the frames and index_nodes values then read 0). mallinfo2 takes
/// each malloc arena's lock in turn, the per-thread blocks their registries' mutexes.
void CollectCaches(const FrameAllocator* frames, std::vector<prometheus::MetricFamily>& out);

}  // namespace vmspace::metrics
