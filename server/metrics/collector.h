// SPDX-License-Identifier: Apache-2.0
// The daemon's Prometheus collector: every value is read at scrape time from the
// engine's per-thread statistics (vmspace::ReadStats), the per-thread RPC counters
// (ReadRpcStats), the frame allocator and the space registry. Nothing on the request
// path touches prometheus-cpp objects.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace vmspace {
class FrameAllocator;
}

namespace vmspace::metrics {

/// Space-wide totals over all live spaces, gathered by the registry at scrape time.
struct SpaceGauges {
  uint64_t spaces = 0;           // live spaces
  uint64_t vmas = 0;             // sum of map_count
  uint64_t resident_bytes = 0;   // sum of present PTEs * 4096
  uint64_t pagetable_bytes = 0;  // sum of page-table bytes
  uint64_t page_cache_bytes = 0;        // pages in the files' page caches * 4096
  uint64_t page_cache_dirty_bytes = 0;  // of them not yet written back * 4096
  uint64_t locked_bytes = 0;     // sum of locked_vm * 4096 (mlock, MAP_LOCKED)
  uint64_t sealed_bytes = 0;     // bytes of sealed VMAs (mseal)
  uint64_t sealed_vmas = 0;      // sealed VMAs (mseal)
};

/// What vmspace_build_info and vmspace_shard say about this daemon.
struct BuildInfo {
  std::string version = "unknown";  // git describe of the build
  std::string commit = "unknown";   // the commit hash
  uint32_t shard = 0;               // --shard
};

/// A prometheus-cpp Collectable exporting the families listed in collector.cc
/// (vmspace_* engine and space metrics, grpc_server_* RPC metrics, vmspace_build_info,
/// vmspace_shard, process_*). A locking profile's series appear once a space of it has
/// taken a lock, only for the lock classes the profile has; work outside any space is
/// profile="none"; an op's errnos, a method's codes other than OK and its latency
/// histogram once it has been called (from 0).
/// Collect() is thread-safe and may run concurrently with requests; it takes only the
/// stats registration mutexes and whatever `gather_spaces` takes.
class Collector : public prometheus::Collectable {
 public:
  /// `frames` may be null (frame gauges then read 0) and must outlive the collector.
  /// `gather_spaces` may be empty.
  Collector(const FrameAllocator* frames, std::function<SpaceGauges()> gather_spaces, BuildInfo build);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const FrameAllocator* frames_;
  std::function<SpaceGauges()> gather_spaces_;
  BuildInfo build_;
};

}  // namespace vmspace::metrics
