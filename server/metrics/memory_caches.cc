// SPDX-License-Identifier: Apache-2.0
#include "metrics/memory_caches.h"

#include <malloc.h>

#include <algorithm>
#include <cstdint>

#include <prometheus/client_metric.h>
#include <prometheus/metric_type.h>

#include "engine/frame_allocator.h"
#include "engine/retained_memory.h"
#include "engine/memory_budget.h"
#include "engine/per_thread.h"
#include "metrics/rpc_stats.h"

namespace vmspace::metrics {

void CollectCaches(const FrameAllocator* frames, std::vector<prometheus::MetricFamily>& out) {
  const struct mallinfo2 mi = mallinfo2();
  uint64_t free_nodes = 0;
  if (frames) {
    // Nodes taken from the pools are charged (kIndexNodes) until they go back.
    const int64_t taken = frames->budget().usage(MemKind::kIndexNodes);
    free_nodes = IndexNodePoolBytes() - std::min<uint64_t>(IndexNodePoolBytes(),
                                                           static_cast<uint64_t>(std::max<int64_t>(taken, 0)));
  }
  prometheus::MetricFamily caches;
  caches.name = "vmspace_cache_bytes";
  caches.help =
      "Memory the daemon keeps for reuse that no space holds, bytes, by cache: frames (free frames, "
      "--frame-cache-bytes), index_nodes (free VMA-index nodes in the node pools), thread_stats (per-thread "
      "statistics blocks, kept for the next threads: bounded by the peak thread count), malloc_free (free "
      "bytes in glibc malloc's arenas, resident or not).";
  caches.type = prometheus::MetricType::Gauge;
  auto add = [&](const char* cache, uint64_t v) {
    prometheus::ClientMetric m;
    m.label = {{"cache", cache}};
    m.gauge.value = static_cast<double>(v);
    caches.metric.push_back(std::move(m));
  };
  add("frames", frames ? frames->cache_bytes() : 0);
  add("index_nodes", free_nodes);
  add("thread_stats", ThreadStatsBytes() + PerThread<rpc_stats_internal::ThreadBlock>::BlockCount() *
                                              sizeof(rpc_stats_internal::ThreadBlock));
  add("malloc_free", mi.fordblks);
  out.push_back(std::move(caches));

  prometheus::MetricFamily heap;
  heap.name = "vmspace_heap_allocated_bytes";
  heap.help = "Bytes glibc malloc has handed out and not had back (mallinfo2 uordblks + hblkhd).";
  heap.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric m;
  m.gauge.value = static_cast<double>(mi.uordblks + mi.hblkhd);
  heap.metric.push_back(std::move(m));
  out.push_back(std::move(heap));
}

}  // namespace vmspace::metrics
