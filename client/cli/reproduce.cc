// SPDX-License-Identifier: Apache-2.0
// `vmspace reproduce SEED [--quick] [--out DIR]`: one command per reproduced result. It
// runs the seed's workload with the comparison the result needs (the benches' own
// measure functions: lib/willitscale.h, shmem_dirty.h, execl.h, seed004.h), the variants
// alternating over N repetitions (A B, then B A, ...) and the kernel's run of the same
// loop in every repetition, and writes a results folder: results.json (with the
// provenance: vmspace version and commit, host kernel, CPU, cores, date, command line),
// results.csv (one row per run), a chart of the ratios (SVG or PNG by its extension,
// lib/plot.h) and summary.txt, the text it prints: each ratio the thread reports beside
// ours as the median and range over the repetitions, and a one-line verdict that says
// "not resolved on this machine" when the range crosses 1.
#include "cli/commands.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <sstream>

#include "cli/bench.h"
#include "lib/execl.h"
#include "lib/plot.h"
#include "lib/shmem_dirty.h"
#include "vmspace_version.h"

namespace vmspace::cli {

namespace {

/// One run of one variant (or of the kernel) in one repetition.
struct Sample {
  double value = 0;  // a rate, higher is faster, in Study::unit
  std::string error;
  Json detail = Json::object();  // the figures that explain it (retries, pgfault per page ...)
};

/// A ratio the thread reports, as ours: value(num) / value(den) of the same repetition.
/// The thread's direction is above 1.
struct Claim {
  std::string num, den;  // variant names
  double thread = 0;     // the thread's figure of the same ratio
  std::string source;    // how the thread's figure is made from what it states
};

/// One reproduced result: what runs, and how it is read.
struct Study {
  std::string seed;     // "seed-004"
  std::string title;    // "the mmap/munmap regression 6.0 -> 6.1 -> 6.7"
  std::string thread;   // the citation
  std::string setting;  // what one run is, in words
  std::string bench;    // the `vmspace bench` command that runs the same comparison
  std::string unit;     // of Sample::value
  std::vector<std::string> variants;
  std::string shape;    // the thread's ordering, "linux-6.0 > linux-6.1 > linux-6.7"
  std::vector<Claim> claims;
  std::function<Sample(const std::string& variant)> run;
  std::function<Sample()> kernel;
};

/// One repetition of a study: each variant's sample (in Study::variants order), the
/// kernel's, and the order the variants ran in.
struct Repetition {
  std::vector<Sample> variants;
  Sample kernel;
  std::vector<std::string> order;
};

/// A claim's ratios over the repetitions, summarized.
struct ClaimFigures {
  std::vector<double> runs;  // one per repetition where both sides ran
  std::optional<double> median, lo, hi;
  std::string verdict;  // "reproduced" | "not reproduced" | "not resolved on this machine" | "failed"
};

struct StudyFigures {
  std::vector<Repetition> reps;
  std::vector<ClaimFigures> claims;
  std::vector<std::optional<double>> x_native;  // per variant: median of value / the kernel's
  std::optional<double> kernel_median;
  std::string verdict;  // the one line
  std::string error;    // the first failure ("" if none)
};

std::optional<double> Median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  return v[MedianIndex(v)];
}

std::string Fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

/// The short name of a variant in ratios ("linux-6.0" -> "6.0").
std::string Short(const std::string& v) { return StripPrefix(v, "linux-"); }

std::string ClaimName(const Claim& c) { return Short(c.num) + "/" + Short(c.den); }

// ---- the four studies ----

/// How large the runs are: --quick or full, times --scale.
struct Sizes {
  bool quick = false;
  double scale = 1;
};

Study Seed000(const Sizes& z) {
  bench::BenchConfig cfg;
  cfg.workload = bench::Workload::kPageFault4;
  cfg.mode = bench::Mode::kThreads;
  cfg.clients = 2;
  cfg.duration_s = (z.quick ? 0.5 : 3.0) * z.scale;
  cfg.pin = true;
  Study s;
  s.seed = "seed-000";
  s.title = "fault-around under the VMA lock";
  s.thread =
      "Matthew Wilcox, \"[PATCH 6/6] mm: Run the fault-around code under the VMA lock\", April 2023 (Yin Fengwei's "
      "will-it-scale page_fault4 figures), "
      "https://lore.kernel.org/linux-mm/?q=s%3A%22Run+the+fault-around+code+under+the+VMA+lock%22";
  std::ostringstream set;
  set << "will-it-scale page_fault4, 2 threads in one space, " << std::setprecision(3) << cfg.duration_s
      << " s per run; the kernel: the same loops on files under /var/tmp";
  s.setting = set.str();
  s.bench = "vmspace bench page_fault4 --mode threads --clients 2 --compare linux-6.4,linux-6.6";
  s.unit = "pages/s";
  s.variants = {"linux-6.4", "linux-6.6"};
  s.shape = "linux-6.6 > linux-6.4";
  s.claims = {{"linux-6.6", "linux-6.4", 1.132, "page_fault4 +13.2 % with fault-around under the VMA lock"}};
  s.run = [cfg](const std::string& v) {
    bench::BenchConfig one = cfg;
    one.profile = v;
    std::unique_ptr<bench::Backend> backend = bench::MakeInprocessBackend();
    const bench::BenchResult r = bench::RunBench(one, *backend);
    Sample x{r.ops_per_s(), r.error, Json::object()};
    x.detail["faults_retried_under_mmap_lock"] =
        r.locks ? Json(r.locks->event("vma_lock_retry_file") + r.locks->event("vma_lock_retry_anon_vma")) : Json(nullptr);
    x.detail["mmap_lock_contentions_per_1k_faults"] = OptJson(r.contentions_per_1k_faults());
    return x;
  };
  s.kernel = [cfg] {
    const bench::BenchResult r = bench::RunBenchNative(cfg);
    return Sample{r.ops_per_s(), r.error, Json::object()};
  };
  return s;
}

Study Seed002(const Sizes& z) {
  const uint64_t bytes =
      std::max<uint64_t>(kPageSize, static_cast<uint64_t>((z.quick ? 64.0 : 400.0) * z.scale * (1 << 20)) & kPageMask);
  const int runs = z.quick ? 2 : 3;
  Study s;
  s.seed = "seed-002";
  s.title = "shared write faults complete without a retry (VM_FAULT_COMPLETED)";
  s.thread =
      "Peter Xu, \"[PATCH v5] mm: Avoid unnecessary page fault retires on shared memory types\", May 2022, "
      "https://lore.kernel.org/linux-mm/?q=s%3A%22Avoid+unnecessary+page+fault+retires+on+shared+memory+types%22";
  s.setting = "write one byte of each page of a " + HumanBytes(bytes) + " MAP_SHARED shmem mapping, mean of " +
              std::to_string(runs) + " timed runs after a warm-up; the kernel: a memfd";
  s.bench = "vmspace bench shmem-dirty --compare shared_fault_completion=retry,completed";
  s.unit = "pages/s";
  s.variants = {"retry", "completed"};
  s.shape = "completed > retry";
  s.claims = {{"completed", "retry", 650.980 / 569.396, "650.980 ms (retry) / 569.396 ms (completed), 400 MB"}};
  auto rate = [](const bench::ShmemDirtyResult& r) {
    return r.seconds_mean > 0 ? static_cast<double>(r.pages) / r.seconds_mean : 0.0;
  };
  s.run = [bytes, runs, rate](const std::string& v) {
    SharedFaultCompletion mode{};
    if (!ParseSharedFaultCompletion(v, &mode)) return Sample{0, "unknown mode " + v, Json::object()};
    const std::vector<bench::ShmemDirtyResult> rows = bench::RunShmemDirtyEngine(bytes, "", {mode}, runs);
    if (rows.empty()) return Sample{0, "no result", Json::object()};
    const bench::ShmemDirtyResult& r = rows[0];
    Sample x{rate(r), r.error, Json::object()};
    x.detail["ms"] = r.seconds_mean * 1e3;
    x.detail["pgfault_per_page"] = r.pgfault_per_page();
    x.detail["retries"] = r.retries;
    return x;
  };
  s.kernel = [bytes, runs, rate] {
    const bench::ShmemDirtyResult r = bench::RunShmemDirtyNative(bytes, runs);
    Sample x{rate(r), r.error, Json::object()};
    x.detail["ms"] = r.seconds_mean * 1e3;
    return x;
  };
  return s;
}

Study Seed003(const Sizes& z) {
  const int clients = z.quick ? 2 : 4;
  const double seconds = (z.quick ? 0.5 : 2.0) * z.scale;
  const uint64_t native_loops = static_cast<uint64_t>(clients) * (z.quick ? 200 : 1000);
  Study s;
  s.seed = "seed-003";
  s.title = "the i_mmap_rwsem scope of mmap (UnixBench execl)";
  s.thread =
      "Yu Ma, \"[PATCH] mm/mmap: move vma operations to mm_struct out of the critical section of file mapping "
      "lock\", June 2023, "
      "https://lore.kernel.org/linux-mm/?q=s%3A%22move+vma+operations+to+mm_struct+out+of+the+critical+section%22";
  std::ostringstream set;
  set << "execl in the engine, " << clients << " clients, " << std::setprecision(3) << seconds
      << " s per run (fork + exec + exit of a space); the kernel: " << native_loops
      << " fork + execve + wait of a static binary (or fewer in as long)";
  s.setting = set.str();
  s.bench = "vmspace bench execl --compare i_mmap_scope=wide,narrow";
  s.unit = "execs/s";
  s.variants = {"wide", "narrow"};
  s.shape = "narrow > wide";
  s.claims = {{"narrow", "wide", 1.12, "+12 % execl, 160 parallel copies on 224 threads"}};
  s.run = [clients, seconds](const std::string& v) {
    IMmapScope scope{};
    if (!ParseIMmapScope(v, &scope)) return Sample{0, "unknown scope " + v, Json::object()};
    const bench::ExeclResult r = bench::RunExeclEngine(scope, "", clients, seconds, bench::DefaultExeclBinary());
    Sample x{r.iterations_per_s(), r.error, Json::object()};
    x.detail["race_hits"] = r.race_hits;
    x.detail["rmap_checks"] = r.rmap_checks;
    x.detail["i_mmap_contentions"] = r.i_mmap_contentions;
    return x;
  };
  s.kernel = [clients, native_loops, seconds] {
    const bench::ExeclResult r = bench::RunExeclNative(clients, native_loops, seconds, bench::DefaultExeclBinary());
    return Sample{r.iterations_per_s(), r.error, Json::object()};
  };
  return s;
}

Study Seed004(const Sizes& z, bool page_fault) {
  stress::StressConfig cfg;
  cfg.rounds = std::max<uint64_t>(100, static_cast<uint64_t>((z.quick ? 30000.0 : 300000.0) * z.scale));
  cfg.page_fault = page_fault;
  Study s;
  s.seed = page_fault ? "seed-004-page-fault" : "seed-004";
  s.title = std::string("the mmap/munmap regression 6.0 -> 6.1 -> 6.7") + (page_fault ? ", with page faults" : "");
  s.thread = kSeed004Thread;
  s.setting = "the thread's program, 1024 slots, " + std::to_string(cfg.rounds) + " rounds, page faults " +
              (page_fault ? "on" : "off") + "; the kernel: the same sequence in a forked child";
  s.bench = std::string("vmspace bench stress --compare linux-6.0,linux-6.1,linux-6.7") +
            (page_fault ? " --page-fault" : "");
  s.unit = "rounds/s";
  s.variants = {"linux-6.0", "linux-6.1", "linux-6.7"};
  s.shape = "linux-6.0 > linux-6.1 > linux-6.7";
  // The thread's system times of 10 M rounds (stress::kSeedTable): a time ratio is our
  // rate ratio the other way round.
  const stress::SeedFigure& k60 = stress::kSeedTable[0];
  const stress::SeedFigure& k61 = stress::kSeedTable[1];
  const stress::SeedFigure& k67 = stress::kSeedTable[2];
  auto t = [page_fault](const stress::SeedFigure& f) { return page_fault ? f.fault_s : f.no_fault_s; };
  auto src = [&](const stress::SeedFigure& slow, const stress::SeedFigure& fast) {
    std::ostringstream o;
    o << (page_fault && slow.fault_approx ? "~" : "") << t(slow) << " s (" << slow.kernel << ") / " << t(fast)
      << " s (" << fast.kernel << ") system time of 10M rounds";
    return o.str();
  };
  s.claims = {{"linux-6.0", "linux-6.1", t(k61) / t(k60), src(k61, k60)},
              {"linux-6.1", "linux-6.7", t(k67) / t(k61), src(k67, k61)}};
  s.run = [cfg](const std::string& v) {
    stress::StressConfig one = cfg;
    one.locking_profile = v;
    const stress::StressStats r = stress::RunEngineStress(one);
    Sample x{r.rounds_per_sec(), r.error, Json::object()};
    x.detail["mmap_lock_contentions_per_1k_rounds"] = OptJson(r.contentions_per_1k_rounds());
    return x;
  };
  s.kernel = [cfg] {
    const stress::StressStats r = stress::RunNativeStress(cfg);
    return Sample{r.rounds_per_sec(), r.error, Json::object()};
  };
  return s;
}

/// The studies `which` names ("all": every one), in seed order.
std::vector<Study> StudiesFor(const std::string& which, const Sizes& z) {
  const std::string w = which.rfind("seed-", 0) == 0 ? which.substr(5) : which;
  std::vector<Study> out;
  if (w == "000" || w == "all") out.push_back(Seed000(z));
  if (w == "002" || w == "all") out.push_back(Seed002(z));
  if (w == "003" || w == "all") out.push_back(Seed003(z));
  if (w == "004" || w == "all") {
    out.push_back(Seed004(z, false));
    if (!z.quick) out.push_back(Seed004(z, true));
  }
  if (out.empty()) throw UsageError{"SEED: one of seed-000, seed-002, seed-003, seed-004, all; not '" + which + "'"};
  return out;
}

// ---- measuring ----

size_t IndexOf(const std::vector<std::string>& v, const std::string& x) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), x) - v.begin());
}

/// The one-line verdict of a claim from its ratios.
std::string ClaimVerdict(const ClaimFigures& c, size_t reps) {
  if (c.runs.size() < reps || !c.lo) return "failed";
  if (*c.lo > 1) return "reproduced";
  if (*c.hi < 1) return "not reproduced";
  return "not resolved on this machine";
}

StudyFigures MeasureStudy(const Study& s, int repeat, bool progress, std::ostream& err) {
  StudyFigures f;
  // One untimed run first: the first run of a process pays for warming the allocator
  // and the caches, which would fall on one variant only.
  if (progress) err << "vmspace reproduce: " << s.seed << " warm-up (" << s.variants[0] << ", not counted)\n" << std::flush;
  s.run(s.variants[0]);
  for (int k = 0; k < repeat; ++k) {
    Repetition r;
    r.variants.resize(s.variants.size());
    r.order = s.variants;
    if (k % 2 == 1) std::reverse(r.order.begin(), r.order.end());  // A B, then B A: drift falls on both
    for (const std::string& v : r.order) {
      if (progress)
        err << "vmspace reproduce: " << s.seed << " repetition " << k + 1 << "/" << repeat << ": " << v << "\n"
            << std::flush;
      r.variants[IndexOf(s.variants, v)] = s.run(v);
    }
    if (progress)
      err << "vmspace reproduce: " << s.seed << " repetition " << k + 1 << "/" << repeat << ": the kernel\n"
          << std::flush;
    r.kernel = s.kernel();
    f.reps.push_back(std::move(r));
  }
  for (const Claim& c : s.claims) {
    ClaimFigures cf;
    const size_t a = IndexOf(s.variants, c.num), b = IndexOf(s.variants, c.den);
    for (const Repetition& r : f.reps) {
      const Sample &x = r.variants[a], &y = r.variants[b];
      if (x.error.empty() && y.error.empty() && y.value > 0) cf.runs.push_back(x.value / y.value);
    }
    if (!cf.runs.empty()) {
      cf.median = Median(cf.runs);
      cf.lo = *std::min_element(cf.runs.begin(), cf.runs.end());
      cf.hi = *std::max_element(cf.runs.begin(), cf.runs.end());
    }
    cf.verdict = ClaimVerdict(cf, f.reps.size());
    f.claims.push_back(std::move(cf));
  }
  std::vector<double> kernel;
  for (const Repetition& r : f.reps)
    if (r.kernel.error.empty() && r.kernel.value > 0) kernel.push_back(r.kernel.value);
  f.kernel_median = Median(kernel);
  for (size_t i = 0; i < s.variants.size(); ++i) {
    std::vector<double> x;
    for (const Repetition& r : f.reps)
      if (r.variants[i].error.empty() && r.kernel.error.empty() && r.kernel.value > 0)
        x.push_back(r.variants[i].value / r.kernel.value);
    f.x_native.push_back(Median(x));
  }
  for (const Repetition& r : f.reps) {
    for (size_t i = 0; i < s.variants.size() && f.error.empty(); ++i)
      if (!r.variants[i].error.empty()) f.error = s.seed + " " + s.variants[i] + ": " + r.variants[i].error;
    if (f.error.empty() && !r.kernel.error.empty()) f.error = s.seed + " native: " + r.kernel.error;
  }
  // The verdict: the shape, then each ratio beside the thread's.
  bool all = true, none = true, failed = false;
  for (const ClaimFigures& c : f.claims) {
    all = all && c.verdict == "reproduced";
    none = none && c.verdict == "not reproduced";
    failed = failed || c.verdict == "failed";
  }
  std::ostringstream v;
  v << s.shape << ": "
    << (failed ? "failed (a run did not complete)"
               : all ? "reproduced" : none ? "not reproduced (the opposite on every repetition)"
                                           : "not resolved on this machine");
  for (size_t i = 0; i < s.claims.size(); ++i) {
    const ClaimFigures& c = f.claims[i];
    if (!c.median) continue;
    v << "; " << ClaimName(s.claims[i]) << " ratio " << Fixed(*c.median, 2) << " (" << Fixed(*c.lo, 2) << "-"
      << Fixed(*c.hi, 2) << ")" << " vs the thread's " << Fixed(s.claims[i].thread, 2);
    if (!all && !failed && c.verdict != "not resolved on this machine" && f.claims.size() > 1) v << " " << c.verdict;
  }
  f.verdict = v.str();
  return f;
}

// ---- provenance and output ----

std::string FirstLineOf(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "" : line.substr(b);
  }
  return "";
}

std::string UtcNow(const char* fmt) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[64];
  std::strftime(b, sizeof b, fmt, &tm);
  return b;
}

/// Where and what ran: vmspace's version and commit, the host's kernel and CPU, the
/// date (UTC) and the command line.
Json Provenance(const Ctx& c) {
  utsname u{};
  uname(&u);
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  std::string line = "vmspace";
  for (const std::string& a : c.argv) line += " " + a;
  std::string cpu = FirstLineOf("/proc/cpuinfo", "model name");
  return {{"vmspace_version", VMSPACE_VERSION},
          {"vmspace_commit", VMSPACE_COMMIT},
          {"host_kernel", u.release},
          {"host_kernel_version", u.version},
          {"machine", u.machine},
          {"cpu_model", cpu.empty() ? Json(nullptr) : Json(cpu)},
          {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
          {"cores_allowed", allowed},
          {"date", UtcNow("%Y-%m-%dT%H:%M:%SZ")},
          {"command_line", line}};
}

Json SampleJson(const Sample& x, const std::optional<double>& x_native) {
  return {{"value", x.error.empty() ? Json(x.value) : Json(nullptr)},
          {"x_native", OptJson(x_native)},
          {"detail", x.detail},
          {"error", x.error.empty() ? Json(nullptr) : Json(x.error)}};
}

Json StudyJson(const Study& s, const StudyFigures& f) {
  Json reps = Json::array();
  for (const Repetition& r : f.reps) {
    Json vs = Json::object();
    for (size_t i = 0; i < s.variants.size(); ++i) {
      const Sample& x = r.variants[i];
      std::optional<double> xn;
      if (x.error.empty() && r.kernel.error.empty() && r.kernel.value > 0) xn = x.value / r.kernel.value;
      vs[s.variants[i]] = SampleJson(x, xn);
    }
    reps.push_back({{"order", r.order}, {"variants", vs}, {"kernel", SampleJson(r.kernel, std::nullopt)}});
  }
  Json claims = Json::array();
  for (size_t i = 0; i < s.claims.size(); ++i) {
    const Claim& c = s.claims[i];
    const ClaimFigures& cf = f.claims[i];
    claims.push_back({{"ratio", c.num + " / " + c.den},
                      {"runs", cf.runs},
                      {"median", OptJson(cf.median)},
                      {"min", OptJson(cf.lo)},
                      {"max", OptJson(cf.hi)},
                      {"thread", c.thread},
                      {"thread_source", c.source},
                      {"verdict", cf.verdict}});
  }
  Json xn = Json::object();
  for (size_t i = 0; i < s.variants.size(); ++i) xn[s.variants[i]] = OptJson(f.x_native[i]);
  return {{"seed", s.seed},
          {"title", s.title},
          {"thread", s.thread},
          {"setting", s.setting},
          {"bench_command", s.bench},
          {"unit", s.unit},
          {"variants", s.variants},
          {"repetitions", reps},
          {"ratios", claims},
          {"x_native_median", xn},
          {"kernel_median", OptJson(f.kernel_median)},
          {"verdict", f.verdict},
          {"error", f.error.empty() ? Json(nullptr) : Json(f.error)}};
}

/// results.csv: one row per run (every variant and the kernel, each repetition).
std::string Csv(const std::vector<Study>& studies, const std::vector<StudyFigures>& figs) {
  std::ostringstream o;
  o << "seed,repetition,position,variant,value,unit,kernel_value,x_native,error\n";
  auto num = [](double v) {
    std::ostringstream n;
    n << std::setprecision(10) << v;
    return n.str();
  };
  for (size_t s = 0; s < studies.size(); ++s) {
    const Study& st = studies[s];
    for (size_t k = 0; k < figs[s].reps.size(); ++k) {
      const Repetition& r = figs[s].reps[k];
      const bool kok = r.kernel.error.empty() && r.kernel.value > 0;
      for (size_t p = 0; p < r.order.size(); ++p) {
        const Sample& x = r.variants[IndexOf(st.variants, r.order[p])];
        const bool ok = x.error.empty();
        o << st.seed << "," << k + 1 << "," << p + 1 << "," << r.order[p] << "," << (ok ? num(x.value) : "") << ","
          << st.unit << "," << (kok ? num(r.kernel.value) : "") << "," << (ok && kok ? num(x.value / r.kernel.value) : "")
          << "," << (ok ? "" : "\"" + x.error + "\"") << "\n";
      }
      o << st.seed << "," << k + 1 << "," << r.order.size() + 1 << ",native," << (kok ? num(r.kernel.value) : "") << ","
        << st.unit << "," << (kok ? num(r.kernel.value) : "") << "," << (kok ? "1" : "") << ","
        << (r.kernel.error.empty() ? "" : "\"" + r.kernel.error + "\"") << "\n";
    }
  }
  return o.str();
}

/// The chart: one bar per ratio, ours (median) and the thread's side by side.
std::string Plot(const std::vector<Study>& studies, const std::vector<StudyFigures>& figs, int repeat,
                 const std::string& path) {
  bench::PlotSpec spec;
  spec.title = "vmspace reproduce: each ratio the thread reports (above 1: the thread's direction)";
  bench::PlotPanel ours{"ours: median of " + std::to_string(repeat) + " repetitions", {}};
  bench::PlotPanel thread{"the thread's", {}};
  for (size_t s = 0; s < studies.size(); ++s) {
    for (size_t i = 0; i < studies[s].claims.size(); ++i) {
      spec.labels.push_back(StripPrefix(studies[s].seed, "seed-") + " " + ClaimName(studies[s].claims[i]));
      ours.values.push_back(figs[s].claims[i].median);
      thread.values.push_back(studies[s].claims[i].thread);
    }
  }
  spec.panels = {ours, thread};
  return bench::WriteBarChart(spec, path);
}

std::string Text(const Json& prov, const std::vector<Study>& studies, const std::vector<StudyFigures>& figs,
                 int repeat, const std::string& dir, const Json& files) {
  std::ostringstream o;
  o << prov["command_line"].get<std::string>() << "\n"
    << "vmspace " << prov["vmspace_version"].get<std::string>() << ", Linux " << prov["host_kernel"].get<std::string>()
    << " " << prov["machine"].get<std::string>() << ", "
    << (prov["cpu_model"].is_null() ? "CPU model unknown" : prov["cpu_model"].get<std::string>()) << " ("
    << prov["cores"].get<long>() << " cores), " << prov["date"].get<std::string>() << "\n"
    << repeat << " repetitions after a warm-up run: the variants alternate (A B, then B A), the kernel runs the "
    << "same loop in each; "
    << "ratio = the median over the repetitions (range min-max)\n";
  char line[512];
  for (size_t s = 0; s < studies.size(); ++s) {
    const Study& st = studies[s];
    const StudyFigures& f = figs[s];
    o << "\n" << st.seed << ": " << st.title << "\n  " << st.setting << "\n  thread: " << st.thread << "\n";
    snprintf(line, sizeof line, "  %-16s %8s %8s %12s  %s\n", "ratio", "thread", "ours", "range", "verdict");
    o << line;
    for (size_t i = 0; i < st.claims.size(); ++i) {
      const ClaimFigures& c = f.claims[i];
      const std::string range = c.lo ? Fixed(*c.lo, 2) + "-" + Fixed(*c.hi, 2) : "-";
      snprintf(line, sizeof line, "  %-16s %8.2f %8s %12s  %s\n", ClaimName(st.claims[i]).c_str(), st.claims[i].thread,
               Num(c.median, "%.2f").c_str(), range.c_str(), c.verdict.c_str());
      o << line;
      o << "    (thread: " << st.claims[i].source << ")\n";
    }
    o << "  " << st.unit << " (median):";
    for (size_t i = 0; i < st.variants.size(); ++i) {
      std::vector<double> v;
      for (const Repetition& r : f.reps)
        if (r.variants[i].error.empty()) v.push_back(r.variants[i].value);
      o << " " << st.variants[i] << " " << Num(Median(v), "%.0f");
    }
    o << ", kernel " << Num(f.kernel_median, "%.0f") << "\n  x native (median):";
    for (size_t i = 0; i < st.variants.size(); ++i) o << " " << st.variants[i] << " " << Num(f.x_native[i], "%.2f");
    o << "\n  verdict: " << f.verdict << "\n";
    if (!f.error.empty()) o << "  error: " << f.error << "\n";
    o << "  the same comparison, one run: " << st.bench << "\n";
  }
  o << "\nresults: " << dir << " (" << files["json"].get<std::string>() << ", " << files["csv"].get<std::string>();
  if (!files["plot"].is_null()) o << ", " << files["plot"].get<std::string>();
  o << ", " << files["summary"].get<std::string>() << ")\n";
  return o.str();
}

bool WriteFile(const std::filesystem::path& p, const std::string& text, std::string* err) {
  std::ofstream out(p);
  out << text;
  out.close();
  if (!out) {
    *err = "cannot write " + p.string();
    return false;
  }
  return true;
}

}  // namespace

int CmdReproduce(Ctx& c) {
  if (!c.args.Has("seed")) throw UsageError{"which result: seed-000, seed-002, seed-003, seed-004 or all"};
  Sizes z;
  z.quick = c.args.Flag("quick");
  if (c.args.Has("scale")) {
    char* end = nullptr;
    const std::string t = c.args.Get("scale");
    z.scale = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || !(z.scale > 0) || z.scale > 100)
      throw UsageError{"--scale: a factor in (0, 100], not '" + t + "'"};
  }
  const std::vector<Study> studies = StudiesFor(c.args.Get("seed"), z);
  const uint64_t repeat = c.U64("repeat", z.quick ? 3 : 5);
  if (repeat < 1 || repeat > 100) throw UsageError{"--repeat must be 1..100"};
  const std::string plot_name = c.args.Get("plot", "ratios.svg");
  if (bench::PlotFormat(plot_name).empty())
    throw UsageError{"--plot: '" + plot_name + "': the extension names the format: .svg (SVG) or .png (PNG)"};
  const std::filesystem::path dir = c.args.Get("out", "vmspace-reproduce-" + UtcNow("%Y%m%d-%H%M%S"));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return BenchExit(c, "--out " + dir.string() + ": " + ec.message());
  const bool progress = !c.args.Flag("quiet");
  const Json prov = Provenance(c);

  std::vector<StudyFigures> figs;
  for (const Study& s : studies) figs.push_back(MeasureStudy(s, static_cast<int>(repeat), progress, c.err));

  std::string error;
  for (const StudyFigures& f : figs)
    if (error.empty()) error = f.error;
  const std::filesystem::path plot_path = std::filesystem::path(plot_name).is_absolute() ? std::filesystem::path(plot_name) : dir / plot_name;
  std::string plot_error = bench::FindGnuplot().empty() ? bench::GnuplotMissingMessage()
                                                        : Plot(studies, figs, static_cast<int>(repeat), plot_path);
  if (!plot_error.empty() && error.empty()) error = "plot: " + plot_error;
  Json files{{"json", "results.json"},
             {"csv", "results.csv"},
             {"plot", plot_error.empty() ? Json(plot_path.filename().string()) : Json(nullptr)},
             {"summary", "summary.txt"}};
  const std::string text = Text(prov, studies, figs, static_cast<int>(repeat), dir.string(), files);
  Json j{{"provenance", prov},
         {"quick", z.quick},
         {"scale", z.scale},
         {"repeat", repeat},
         {"out", dir.string()},
         {"files", files},
         {"studies", Json::array()},
         {"plot_error", plot_error.empty() ? Json(nullptr) : Json(plot_error)},
         {"error", error.empty() ? Json(nullptr) : Json(error)}};
  for (size_t s = 0; s < studies.size(); ++s) j["studies"].push_back(StudyJson(studies[s], figs[s]));
  std::string werr;
  if (!WriteFile(dir / "results.json", j.dump(2) + "\n", &werr) || !WriteFile(dir / "results.csv", Csv(studies, figs), &werr) ||
      !WriteFile(dir / "summary.txt", text, &werr))
    return BenchExit(c, werr);
  if (c.json) c.out << j.dump() << "\n";
  else c.out << text;
  return BenchExit(c, error);
}

}  // namespace vmspace::cli
