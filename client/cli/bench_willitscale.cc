// SPDX-License-Identifier: Apache-2.0
// `vmspace bench page_fault1..4 | mmap1 | mmap2 | mixed`: the will-it-scale style timed
// workloads, per locking profile, the file ones beside the kernel; measured into
// WorkloadFigures, then drawn (--plot) and rendered as JSON or text.
#include "cli/commands.h"

#include <iomanip>
#include <memory>
#include <sstream>

#include "cli/bench.h"
#include "lib/plot.h"
#include "lib/willitscale_grpc.h"

namespace vmspace::cli {

namespace {

/// Engine event name (EventName) of the pages fault-around mapped (the faulting one included).
constexpr const char* kEventFaultAround = "fault_around_pages";

/// VMA-lock faults redone under mmap_lock, every reason (nullopt without lock figures).
std::optional<uint64_t> Retries(const std::optional<bench::LockFigures>& l) {
  if (!l) return std::nullopt;
  return l->event("vma_lock_retry_file") + l->event("vma_lock_retry_anon_vma");
}

std::string WorkloadUnit(bench::Workload w) {
  switch (w) {
    case bench::Workload::kPageFault1: return "op = one 4 KiB page written (one write fault); 128 MiB per mmap";
    case bench::Workload::kMmap1: return "op = one mmap+munmap pair of 128 MiB";
    case bench::Workload::kMixed:
      return "op = one page written by a faulter (32 MiB region each, MADV_DONTNEED after each pass); "
             "churn = the churner's 16 KiB mmap+munmap pairs";
    case bench::Workload::kPageFault2:
      return "op = one 4 KiB page written (a copy-on-write fault); a MAP_PRIVATE mapping of the client's own 128 MiB "
             "file per iteration";
    case bench::Workload::kPageFault3:
      return "op = one 4 KiB page written; a MAP_SHARED mapping of the client's own 128 MiB file per iteration";
    case bench::Workload::kPageFault4:
      return "op = one 4 KiB page read; a MAP_PRIVATE mapping of the client's own 128 MiB file per iteration "
             "(fault-around maps cached neighbours)";
    case bench::Workload::kMmap2: return "op = one mmap+munmap pair of the client's own 128 MiB file (MAP_PRIVATE)";
  }
  return "";
}

Json BenchResultJson(const bench::BenchResult& r, bool mixed) {
  Json j;
  j["profile"] = r.profile;
  j["profile_name"] = r.profile_name;
  j["profile_description"] = r.profile_desc;
  j["seconds"] = r.seconds;
  j["ops"] = r.ops;
  j["ops_per_s"] = r.ops_per_s();
  j["faults"] = r.faults;
  j["faults_per_s"] = r.faults_per_s();
  j["iterations"] = r.rounds;
  if (mixed) {
    j["churn_ops"] = r.churn_ops;
    j["churn_ops_per_s"] = r.churn_ops_per_s();
  }
  AddLockFields(j, r.locks, r.mmap_lock_contentions(), r.contentions_per_1k_faults(), r.mmap_lock_wait_s_per_op(),
                r.locks_note);
  j["error"] = r.error.empty() ? Json(nullptr) : Json(r.error);
  return j;
}

/// Fields of the file workloads' results: major faults, fault-around pages, retries,
/// the files used.
void AddFileFields(Json& j, const bench::BenchResult& r) {
  j["pgmajfault"] = r.major_faults;
  j["fault_around_pages"] = r.locks ? Json(r.locks->event(kEventFaultAround)) : Json(nullptr);
  j["retries"] = Retries(r.locks) ? Json(*Retries(r.locks)) : Json(nullptr);
  j["files"] = {{"count", r.files}, {"shmem", r.shmem_files}};
}

/// The file workloads' extra table columns (the header with r null).
std::string FileColumns(const bench::BenchResult* r, std::optional<double> x_native) {
  char b[128];
  if (r == nullptr) {
    snprintf(b, sizeof b, " %9s %10s %10s %9s", "x native", "majflt", "fa-pages", "retries");
  } else {
    snprintf(b, sizeof b, " %9s %10llu %10s %9s", Num(x_native, "%.3fx").c_str(),
             static_cast<unsigned long long>(r->major_faults), Count(r->locks, kEventFaultAround).c_str(),
             Retries(r->locks) ? std::to_string(*Retries(r->locks)).c_str() : "-");
  }
  return b;
}

/// What `bench WORKLOAD` was asked to run.
struct WorkloadSetup {
  std::string name;               // "page_fault1"
  bench::BenchConfig cfg;         // workload, mode, clients, duration, pinning
  std::string mode;               // threads | processes
  std::string transport;          // inprocess | unary | stream
  ClientOptions client;           // the daemon (unary, stream)
  std::vector<std::string> profiles;  // one run each, in this order
  bool compare = false;           // --compare given
  bool progress = true;           // progress lines on stderr
  bool native = true;             // the file workloads: also on the kernel
  bool mixed() const { return cfg.workload == bench::Workload::kMixed; }
  bool files() const { return bench::UsesFiles(cfg.workload); }
};

/// The figures of one `bench WORKLOAD`: a result per profile, the kernel's (the file
/// workloads), the first failure ("" if none).
struct WorkloadFigures {
  std::vector<bench::BenchResult> results;
  std::optional<bench::BenchResult> native;
  std::string error;
  /// ops/s over the kernel's (none without a good kernel run).
  std::optional<double> Ratio(const bench::BenchResult& r) const {
    if (!native || !native->ok() || native->ops_per_s() <= 0 || !r.ok()) return std::nullopt;
    return r.ops_per_s() / native->ops_per_s();
  }
};

WorkloadFigures MeasureWorkload(Ctx& c, const WorkloadSetup& s) {
  WorkloadFigures f;
  f.results = RunProfiles<bench::BenchResult>(
      c, s.profiles, s.name, s.progress, s.cfg.duration_s, [&](const std::string& p) {
        bench::BenchConfig one = s.cfg;
        one.profile = p;
        // Fresh spaces (and, in-process, a fresh frame allocator) per profile.
        std::unique_ptr<bench::Backend> backend =
            s.transport == "inprocess" ? bench::MakeInprocessBackend()
                                       : bench::MakeDaemonBackend(s.client, s.transport == "stream");
        return bench::RunBench(one, *backend);
      });
  // The file workloads run once more on this machine's kernel (files under /var/tmp).
  if (s.files() && s.native) {
    if (s.progress) c.err << "vmspace bench: " << s.name << " on the kernel (native, once)\n" << std::flush;
    f.native = bench::RunBenchNative(s.cfg);
  }
  for (const bench::BenchResult& r : f.results)
    if (!r.ok() && f.error.empty()) f.error = r.profile + ": " + r.error;
  if (f.native && !f.native->ok() && f.error.empty()) f.error = "native: " + f.native->error;
  return f;
}

/// Draws ops/s, contentions per 1000 faults (or ops) and, for mixed, the churner's rate
/// per profile into `path`. Returns "" or the error.
std::string PlotWorkload(const WorkloadSetup& s, const WorkloadFigures& f, const std::string& path) {
  const bench::BenchConfig& cfg = s.cfg;
  const bool mixed = s.mixed();
  bench::PlotSpec spec;
  std::ostringstream t;
  t << "vmspace bench " << s.name << ": "
    << (mixed ? std::to_string(cfg.clients - 1) + (cfg.clients > 2 ? " faulters" : " faulter") + " + 1 churner"
              : s.mode + ", " + std::to_string(cfg.clients) + (cfg.clients > 1 ? " clients" : " client"))
    << ", " << std::setprecision(3) << cfg.duration_s << " s, " << s.transport;
  spec.title = t.str();
  bench::PlotPanel ops{mixed ? "faulter ops/s (pages written)" : s.name == "mmap1" ? "ops/s (mmap+munmap pairs)"
                                                                                   : "ops/s (pages written)", {}};
  bench::PlotPanel cont{"mmap_lock contentions per 1000 faults", {}};
  bench::PlotPanel churn{"churner mmap+munmap/s", {}};
  bool faults = false;
  for (const bench::BenchResult& r : f.results) faults |= r.faults > 0;
  if (!faults) cont.title = "mmap_lock contentions per 1000 ops";
  for (const bench::BenchResult& r : f.results) {
    spec.labels.push_back(r.profile);
    ops.values.push_back(r.ok() ? std::optional<double>(r.ops_per_s()) : std::nullopt);
    std::optional<double> cv = r.contentions_per_1k_faults();
    if (!faults && r.mmap_lock_contentions() && r.ops > 0)
      cv = 1000.0 * static_cast<double>(*r.mmap_lock_contentions()) / static_cast<double>(r.ops);
    cont.values.push_back(cv);
    churn.values.push_back(r.ok() ? std::optional<double>(r.churn_ops_per_s()) : std::nullopt);
  }
  spec.panels = {ops, cont};
  if (mixed) spec.panels.push_back(churn);
  return bench::WriteBarChart(spec, path);
}

/// `chart`: the chart written (null: none).
Json WorkloadJson(const WorkloadSetup& s, const WorkloadFigures& f, const Json& chart, const std::string& error) {
  const bench::BenchConfig& cfg = s.cfg;
  const bool mixed = s.mixed(), files = s.files();
  Json j;
  j["workload"] = s.name;
  j["mode"] = s.mode;
  j["clients"] = cfg.clients;
  if (mixed) {
    j["faulters"] = cfg.clients - 1;
    j["churners"] = 1;
  }
  j["duration_s"] = cfg.duration_s;
  j["transport"] = s.transport;
  if (s.transport != "inprocess") j["target"] = s.client.target;
  j["pinned"] = cfg.pin;
  j["unit"] = WorkloadUnit(cfg.workload);
  j["compare"] = s.compare;
  Json arr = Json::array();
  for (const bench::BenchResult& r : f.results) {
    Json rj = BenchResultJson(r, mixed);
    if (files) {
      AddFileFields(rj, r);
      rj["ratio_vs_native"] = OptJson(f.Ratio(r));
    }
    arr.push_back(std::move(rj));
  }
  j["results"] = arr;
  if (files) {
    Json nj = f.native ? BenchResultJson(*f.native, false) : Json(nullptr);
    if (f.native) AddFileFields(nj, *f.native);
    j["native"] = nj;
  }
  j["plot"] = chart;
  j["error"] = error.empty() ? Json(nullptr) : Json(error);
  return j;
}

std::string WorkloadText(const WorkloadSetup& s, const WorkloadFigures& f, const Json& chart) {
  const bench::BenchConfig& cfg = s.cfg;
  const bool mixed = s.mixed(), files = s.files();
  const std::vector<bench::BenchResult>& results = f.results;
  const std::optional<bench::BenchResult>& native = f.native;
  std::ostringstream o;
  o << "bench " << s.name << ": ";
  if (mixed) o << cfg.clients - 1 << " faulter" << (cfg.clients > 2 ? "s" : "") << " + 1 churner in one space";
  else o << s.mode << ", " << cfg.clients << " client" << (cfg.clients > 1 ? "s" : "") << " ("
         << (cfg.mode == bench::Mode::kThreads ? "one shared space" : "one space each") << ")";
  o << ", " << std::setprecision(3) << cfg.duration_s << " s per profile, transport " << s.transport;
  if (s.transport != "inprocess") o << " to " << s.client.target;
  if (cfg.pin) o << ", clients pinned to CPUs";
  o << "\n";
  char line[512];
  std::string hdr_churn = mixed ? "     churn/s" : "";
  std::string hdr_files = files ? FileColumns(nullptr, std::nullopt) : "";
  snprintf(line, sizeof line, "%-26s %13s %8s %13s%s %11s %10s %10s %8s %8s%s\n", "profile", "ops/s", "x first",
           "faults/s", hdr_churn.c_str(), "cont/1kflt", "wait-s/op", "vl-success", "vl-abort", "vl-miss",
           hdr_files.c_str());
  o << line;
  double first = results.empty() ? 0 : results[0].ops_per_s();
  std::vector<std::string> notes;
  for (const bench::BenchResult& r : results) {
    if (!r.ok() && r.seconds == 0) {
      o << std::left << std::setw(26) << Abbrev(r.profile, 26) << std::right << " error: " << r.error << "\n";
      continue;
    }
    std::string churn = mixed ? " " + Num(r.churn_ops_per_s(), "%12.0f") : "";
    snprintf(line, sizeof line, "%-26s %13.0f %8s %13.0f%s %11s %10s %10s %8s %8s%s\n",
             Abbrev(r.profile, 26).c_str(), r.ops_per_s(),
             first > 0 ? Num(r.ops_per_s() / first, "%.2fx").c_str() : "-", r.faults_per_s(), churn.c_str(),
             Num(r.contentions_per_1k_faults(), "%.3g").c_str(), Num(r.mmap_lock_wait_s_per_op(), "%.3g").c_str(),
             Count(r.locks, "vma_lock_success").c_str(), Count(r.locks, "vma_lock_abort").c_str(),
             Count(r.locks, "vma_lock_miss").c_str(), files ? FileColumns(&r, f.Ratio(r)).c_str() : "");
    o << line;
    if (!r.ok()) o << "  error: " << r.error << "\n";
    notes.push_back(r.locks_note);
  }
  if (native && (native->ok() || native->seconds > 0)) {
    snprintf(line, sizeof line, "%-26s %13.0f %8s %13.0f %11s %10s %10s %8s %8s%s\n", "native (kernel, once)",
             native->ops_per_s(), "-", native->faults_per_s(), "-", "-", "-", "-", "-",
             FileColumns(&*native, 1.0).c_str());
    o << line;
  }
  if (files) {
    for (const bench::BenchResult& r : results)
      if (r.shmem_files > 0) {
        notes.push_back("the daemon has no --data-dir: its files were shmem (memory only), the kernel's on /var/tmp");
        break;
      }
  }
  o << WorkloadUnit(cfg.workload) << "\n"
    << "x first = ops/s relative to the first row; cont/1kflt = mmap_lock contentions (read+write) per 1000 "
       "faults; wait-s/op = mmap_lock wait seconds per op; vl-* = VMA_LOCK_SUCCESS/ABORT/MISS\n";
  if (files)
    o << "x native = ops/s / the kernel's (same loops on files under /var/tmp, once in this invocation); majflt = "
         "major faults (pgmajfault); fa-pages = pages mapped by fault-around; retries = faults retried under "
         "mmap_lock\n";
  PrintNotes(o, notes);
  if (!chart.is_null()) o << "chart: " << chart.get<std::string>() << "\n";
  return o.str();
}

}  // namespace

int CmdBenchWorkload(Ctx& c) {
  WorkloadSetup s;
  s.name = StripPrefix(c.command, "bench ");
  auto workload = bench::ParseWorkload(s.name);
  if (!workload) throw UsageError{"unknown workload " + s.name};
  bench::BenchConfig& cfg = s.cfg;
  cfg.workload = *workload;
  const bool mixed = s.mixed();
  s.mode = c.args.Get("mode", "threads");
  if (s.mode == "threads") cfg.mode = bench::Mode::kThreads;
  else if (s.mode == "processes") cfg.mode = bench::Mode::kProcesses;
  else throw UsageError{"--mode must be threads or processes"};
  if (mixed && cfg.mode != bench::Mode::kThreads) {
    throw UsageError{"mixed runs all clients in ONE space (the faulters and the churner share it): --mode threads"};
  }
  uint64_t clients = c.U64("clients", mixed ? 2 : 1);
  if (clients < 1 || clients > 1024) throw UsageError{"--clients must be 1..1024"};
  if (mixed && clients < 2) throw UsageError{"mixed needs --clients >= 2 (C-1 faulters and 1 churner)"};
  cfg.clients = static_cast<int>(clients);
  std::string dur = c.args.Get("duration", "5s");
  auto seconds = client::ParseDurationSeconds(dur);
  if (!seconds) throw UsageError{"--duration: want e.g. 5s, 500ms, 1.5s, 2m; got '" + dur + "'"};
  cfg.duration_s = *seconds;
  s.transport = c.args.Get("transport", "inprocess");
  if (s.transport != "inprocess" && s.transport != "unary" && s.transport != "stream") {
    throw UsageError{"--transport must be inprocess, unary or stream"};
  }
  s.client = c.client;
  std::string base = ProfileOption(c);
  s.compare = c.args.Has("compare");
  s.profiles = ProfilesToRun(c, base);
  if (!s.compare) {
    if (s.profiles[0].empty()) s.profiles[0] = "linux-6.15";
    std::string e = bench::CheckProfile(s.profiles[0]);
    if (!e.empty()) throw UsageError{"--profile: " + e};
  }
  if (std::string e = CheckPlot(c); !e.empty()) return BenchExit(c, e);
  s.progress = !c.args.Flag("quiet");
  s.native = !c.args.Flag("skip-native");
  cfg.pin = c.args.Has("pin") ? c.args.Flag("pin") : s.transport == "inprocess";
  if (c.args.Has("sweep")) {
    if (mixed) throw UsageError{"--sweep: mixed splits its clients into faulters and a churner; sweep another workload"};
    if (c.args.Has("clients")) throw UsageError{"--sweep gives the task counts: leave --clients out"};
    SweepSpec sw;
    sw.workload = s.name;
    sw.unit = s.name == "mmap1" || s.name == "mmap2" ? "ops/s (mmap+munmap pairs)" : "ops/s (pages)";
    sw.mode = cfg.mode == bench::Mode::kThreads ? "threads (one space; the kernel: threads of one process)"
                                                : "processes (a space each; the kernel: a process each)";
    std::ostringstream set;
    set << std::setprecision(3) << cfg.duration_s << " s per run, transport " << s.transport
        << (cfg.pin ? ", tasks pinned to CPUs" : "");
    sw.setting = set.str();
    sw.tasks = ParseSweep(c.args.Get("sweep"));
    sw.profiles = s.profiles;
    sw.native = s.native;
    sw.progress = s.progress;
    sw.ours = [s](const std::string& p, int tasks) {
      bench::BenchConfig one = s.cfg;
      one.profile = p;
      one.clients = tasks;
      std::unique_ptr<bench::Backend> backend = s.transport == "inprocess"
                                                    ? bench::MakeInprocessBackend()
                                                    : bench::MakeDaemonBackend(s.client, s.transport == "stream");
      const bench::BenchResult r = bench::RunBench(one, *backend);
      return SweepRun{r.ops_per_s(), r.error};
    };
    sw.kernel = [s](int tasks) {
      bench::BenchConfig one = s.cfg;
      one.clients = tasks;
      const bench::BenchResult r = bench::RunBenchNative(one);
      return SweepRun{r.ops_per_s(), r.error};
    };
    return RunSweep(c, sw);
  }

  const WorkloadFigures f = MeasureWorkload(c, s);
  std::string error = f.error;
  const Json chart = PlotIfAsked(c, error, [&](const std::string& path) { return PlotWorkload(s, f, path); });
  if (c.json) c.out << WorkloadJson(s, f, chart, error).dump() << "\n";
  else c.out << WorkloadText(s, f, chart);
  return BenchExit(c, error);
}

}  // namespace vmspace::cli
