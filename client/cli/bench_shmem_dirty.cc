// SPDX-License-Identifier: Apache-2.0
// `vmspace bench shmem-dirty`: write each page of a MAP_SHARED shmem mapping, per
// shared_fault_completion mode, beside the kernel's memfd; measured into
// ShmemDirtyFigures, then rendered as JSON or text.
#include "cli/commands.h"

#include <iomanip>
#include <sstream>

#include "cli/bench.h"
#include "lib/shmem_dirty.h"

namespace vmspace::cli {

namespace {

/// The completion modes to run: --compare shared_fault_completion=V1,V2, else
/// --shared-fault-completion (default completed).
std::vector<SharedFaultCompletion> CompletionModes(const Ctx& c) {
  return SettingValues<SharedFaultCompletion>(c, "shared_fault_completion",
                                              c.args.Get("shared-fault-completion", "completed"), "retry,completed",
                                              ParseSharedFaultCompletion);
}

Json ShmemDirtyJson(const bench::ShmemDirtyResult& r) {
  return {{"shared_fault_completion", r.setting},
          {"profile", r.profile.empty() ? Json(nullptr) : Json(r.profile)},
          {"pages", r.pages},
          {"runs", r.runs},
          {"seconds", r.seconds_mean},
          {"seconds_min", r.seconds_min},
          {"seconds_stddev", r.seconds_stddev},
          {"pgfault", r.setting == "native" ? Json(nullptr) : Json(r.pgfault)},
          {"pgfault_per_page", r.setting == "native" ? Json(nullptr) : Json(r.pgfault_per_page())},
          {"min_flt", r.min_flt},
          {"min_flt_per_page", r.min_flt_per_page()},
          {"retries", r.retries},
          {"completed", r.completed},
          {"mmap_lock", {{"acquisitions", r.mmap_lock_acquisitions}, {"contentions", r.mmap_lock_contentions}}},
          {"vma_lock", {{"acquisitions", r.vma_lock_acquisitions}}},
          {"i_pages_lock", r.setting == "native" ? Json(nullptr) : Json{{"acquisitions", r.i_pages_lock_acquisitions}}},
          {"error", r.error.empty() ? Json(nullptr) : Json(r.error)}};
}

/// What `bench shmem-dirty` was asked to run.
struct ShmemDirtySetup {
  uint64_t bytes = 400ull << 20;  // the mapping, whole pages
  int runs = 5;                   // per mode, each a fresh space
  std::vector<SharedFaultCompletion> modes;  // in the order given
  std::string profile;            // "" = linux-6.15
  bool native = true;             // also the kernel's memfd loop
  bool progress = true;           // progress lines on stderr
};

/// The figures of one `bench shmem-dirty`: a row per mode, the kernel's, the first
/// failure ("" if none).
struct ShmemDirtyFigures {
  std::vector<bench::ShmemDirtyResult> rows;
  std::optional<bench::ShmemDirtyResult> native;
  std::string error;
};

ShmemDirtyFigures MeasureShmemDirty(const ShmemDirtySetup& s, std::ostream& err) {
  ShmemDirtyFigures f;
  if (s.progress) err << "vmspace bench shmem-dirty: the engine (in-process), " << s.modes.size() << " mode(s) x " << s.runs << " runs\n" << std::flush;
  f.rows = bench::RunShmemDirtyEngine(s.bytes, s.profile, s.modes, s.runs);
  if (s.native) {
    if (s.progress) err << "vmspace bench shmem-dirty: the kernel (memfd)\n" << std::flush;
    f.native = bench::RunShmemDirtyNative(s.bytes, s.runs);
  }
  f.error = FirstError(f.rows, f.native);
  return f;
}

Json ShmemDirtyFiguresJson(const ShmemDirtySetup& s, const ShmemDirtyFigures& f) {
  Json arr = Json::array();
  for (const auto& r : f.rows) arr.push_back(ShmemDirtyJson(r));
  return Json{{"workload", "shmem-dirty"},
              {"size_bytes", s.bytes},
              {"runs", s.runs},
              {"transport", "inprocess"},
              {"results", arr},
              {"native", f.native ? ShmemDirtyJson(*f.native) : Json(nullptr)},
              {"error", f.error.empty() ? Json(nullptr) : Json(f.error)}};
}

std::string ShmemDirtyFiguresText(const ShmemDirtySetup& s, const ShmemDirtyFigures& f) {
  std::ostringstream o;
  o << "bench shmem-dirty: write one byte of each page of a " << HumanBytes(s.bytes)
    << " MAP_SHARED shmem mapping, " << s.runs << " runs each (engine in-process, profile "
    << (f.rows.empty() ? "" : f.rows[0].profile) << ")\n";
  char line[256];
  snprintf(line, sizeof line, "%-22s %10s %8s %9s %9s %10s %9s %9s %10s %10s %8s\n", "shared_fault_completion", "ms",
           "+-%", "min-ms", "x first", "pgfault", "pgflt/pg", "minflt/pg", "retries", "mmap_lock", "mm-cont");
  o << line;
  const double first = f.rows.empty() ? 0 : f.rows[0].seconds_mean;
  for (const auto& r : f.rows) {
    if (!r.ok()) {
      o << std::left << std::setw(22) << r.setting << std::right << " error: " << r.error << "\n";
      continue;
    }
    snprintf(line, sizeof line, "%-22s %10.2f %8.2f %9.2f %9s %10llu %9.2f %9.2f %10llu %10llu %8llu\n",
             r.setting.c_str(), r.seconds_mean * 1e3, r.seconds_mean > 0 ? 100 * r.seconds_stddev / r.seconds_mean : 0,
             r.seconds_min * 1e3,
             first > 0 ? Num(r.seconds_mean / first, "%.3fx").c_str() : "-", static_cast<unsigned long long>(r.pgfault),
             r.pgfault_per_page(), r.min_flt_per_page(), static_cast<unsigned long long>(r.retries),
             static_cast<unsigned long long>(r.mmap_lock_acquisitions),
             static_cast<unsigned long long>(r.mmap_lock_contentions));
    o << line;
  }
  if (f.native && f.native->ok()) {
    snprintf(line, sizeof line, "%-22s %10.2f %8.2f %9.2f %9s %10s %9s %9.2f %10s %10s %8s\n", "native (kernel memfd)",
             f.native->seconds_mean * 1e3,
             f.native->seconds_mean > 0 ? 100 * f.native->seconds_stddev / f.native->seconds_mean : 0,
             f.native->seconds_min * 1e3, "-", "-", "-",
             f.native->min_flt_per_page(), "-", "-", "-");
    o << line;
  }
  o << "ms = mean time of the write loop (after one warm-up run); +-% = its standard deviation; min-ms = the "
       "fastest run; pgfault = vmstat pgfault of one run "
       "(handle_mm_fault calls: a VM_FAULT_RETRY counts twice); minflt/pg = getrusage min_flt per page; "
       "retries = VM_FAULT_RETRY after dirtying; mmap_lock / mm-cont = its acquisitions / contentions in one run\n"
    << kSeed002Thread << " (aarch64 VM, 400 MB): 650.980 ms (retry) -> 569.396 ms (completed)\n";
  return o.str();
}

}  // namespace

int CmdBenchShmemDirty(Ctx& c) {
  ShmemDirtySetup s;
  s.bytes = (c.U64("size", 400ull << 20) + kPageSize - 1) & kPageMask;
  if (s.bytes == 0 || s.bytes > (64ull << 30)) throw UsageError{"--size must be in (0, 64G]"};
  const uint64_t runs = c.U64("runs", 5);
  if (runs < 1 || runs > 1000) throw UsageError{"--runs must be 1..1000"};
  s.runs = static_cast<int>(runs);
  s.modes = CompletionModes(c);
  s.profile = ProfileOption(c);
  if (std::string e = bench::CheckProfile(s.profile.empty() ? "linux-6.15" : s.profile); !e.empty())
    throw UsageError{"--profile: " + e};
  s.progress = !c.args.Flag("quiet");
  s.native = !c.args.Flag("skip-native");
  const ShmemDirtyFigures f = MeasureShmemDirty(s, c.err);
  c.out << (c.json ? ShmemDirtyFiguresJson(s, f).dump() + "\n" : ShmemDirtyFiguresText(s, f));
  return BenchExit(c, f.error);
}

}  // namespace vmspace::cli
