// SPDX-License-Identifier: Apache-2.0
#include "metrics/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <prometheus/client_metric.h>
#include <prometheus/metric_type.h>

namespace vmspace::metrics {

namespace {

void Add(std::vector<prometheus::MetricFamily>& out, const char* name, const char* help,
         prometheus::MetricType type, double v) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter)
    m.counter.value = v;
  else
    m.gauge.value = v;
  f.metric.push_back(std::move(m));
  out.push_back(std::move(f));
}

/// Seconds since the epoch at which the system booted (/proc/stat btime), or -1.
double BootTime() {
  std::ifstream in("/proc/stat");
  std::string key;
  double v;
  while (in >> key) {
    if (key == "btime" && in >> v) return v;
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

}  // namespace

void CollectProcess(std::vector<prometheus::MetricFamily>& out) {
  using prometheus::MetricType;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (std::getline(in, line)) {
    // Fields after the command name (which may hold spaces): the state is field 3.
    const size_t paren = line.rfind(')');
    std::istringstream rest(paren == std::string::npos ? "" : line.substr(paren + 2));
    std::string f[50];
    int n = 0;
    while (n < 50 && rest >> f[n]) n++;
    // proc(5) numbering: utime 14, stime 15, num_threads 20, starttime 22, vsize 23, rss 24;
    // f[0] is field 3.
    if (n >= 22) {
      const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
      const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
      Add(out, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
          MetricType::Counter, (std::stod(f[11]) + std::stod(f[12])) / tick);
      Add(out, "process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
          std::stod(f[21]) * page);
      Add(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge, std::stod(f[20]));
      Add(out, "process_threads", "Number of OS threads in the process.", MetricType::Gauge, std::stod(f[17]));
      if (const double boot = BootTime(); boot >= 0)
        Add(out, "process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            MetricType::Gauge, boot + std::stod(f[19]) / tick);
    }
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    double fds = 0;
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') fds++;
    closedir(d);
    Add(out, "process_open_fds", "Number of open file descriptors.", MetricType::Gauge, fds - 1);  // less the dir's own
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    Add(out, "process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
        rl.rlim_cur == RLIM_INFINITY ? -1.0 : static_cast<double>(rl.rlim_cur));
}

}  // namespace vmspace::metrics
