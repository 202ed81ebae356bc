// SPDX-License-Identifier: Apache-2.0
// The standard process_* metrics of a Prometheus client (prometheus-cpp has none), read
// from /proc/self at scrape time, as the Go and Python clients export them.
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

namespace vmspace::metrics {

/// Appends process_cpu_seconds_total, process_resident_memory_bytes,
/// process_virtual_memory_bytes, process_start_time_seconds, process_open_fds and
/// process_max_fds (and process_threads) to `out`. A file it cannot read leaves its
/// families out. Reads /proc/self/stat, /proc/stat (btime) and /proc/self/fd; no lock.
void CollectProcess(std::vector<prometheus::MetricFamily>& out);

}  // namespace vmspace::metrics
