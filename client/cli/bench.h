// SPDX-License-Identifier: Apache-2.0
// Pieces the `vmspace bench` commands share: locking profiles and --compare, lock
// figures in JSON and tables, progress lines, medians, and the seed-004 runs of
// `bench stress` (plain, --compare, --scaling). Internal to the CLI (cli/).
#pragma once

#include <cstdint>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/output.h"
#include "lib/seed004.h"
#include "lib/willitscale.h"

namespace vmspace::cli {

/// n / s, or 0 when s is not positive (per second).
double Rate(uint64_t n, double s);

/// The figures of one seed-004 run: seconds, rounds, ops and their rates by type, faults,
/// bytes touched and the untimed set-up / tear-down ops.
Json StatsJson(const stress::StressStats& s);

/// The --profile / --locking-profile value ("" if neither).
std::string ProfileOption(const Ctx& c);

/// The profile specs to run: --compare expanded (a SWITCH=V1,V2 list varies `base`),
/// else just `base` (which may be "").
std::vector<std::string> ProfilesToRun(const Ctx& c, const std::string& base);

/// Checks that --plot can work before anything runs. Returns "" or the error.
std::string CheckPlot(const Ctx& c);

/// The lock-derived fields every bench result carries (null without lock figures).
void AddLockFields(Json& j, const std::optional<bench::LockFigures>& locks, std::optional<uint64_t> contentions,
                   std::optional<double> per_1k_faults, std::optional<double> wait_per_op, const std::string& note);

/// An event count of the lock figures as text, "-" without them.
std::string Count(const std::optional<bench::LockFigures>& l, const char* event);

/// Prints each distinct lock note once.
void PrintNotes(std::ostream& o, const std::vector<std::string>& notes);

/// Runs one profile after another through `run`, with a progress line per profile.
template <typename R, typename F>
std::vector<R> RunProfiles(Ctx& c, const std::vector<std::string>& profiles, const std::string& what, bool progress,
                           double seconds_each, F run) {
  std::vector<R> out;
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (progress) {
      std::ostringstream p;
      p << "vmspace bench: " << what << " [" << (i + 1) << "/" << profiles.size() << "] profile "
        << (profiles[i].empty() ? "(default)" : profiles[i]);
      if (seconds_each > 0) p << ", " << std::setprecision(3) << seconds_each << " s";
      c.err << p.str() << "\n" << std::flush;
    }
    out.push_back(run(profiles[i]));
  }
  return out;
}

/// The values of a space setting to run one after another: --compare SETTING=V1,V2,
/// else `single` ("V"), each parsed by `parse` (false: not a value; `what` names them).
template <typename T, typename Parse>
std::vector<T> SettingValues(const Ctx& c, const std::string& setting, const std::string& single, const char* what,
                             Parse parse) {
  std::string list = single;
  if (c.args.Has("compare")) {
    list = c.args.Get("compare");
    if (list.rfind(setting + "=", 0) != 0)
      throw UsageError{"--compare: want " + setting + "=" + what + "; got '" + list + "'"};
    list = list.substr(setting.size() + 1);
  }
  std::vector<T> out;
  std::stringstream ss(list);
  for (std::string v; std::getline(ss, v, ',');) {
    T x;
    if (!parse(v, &x)) throw UsageError{setting + ": one of " + what + ", not '" + v + "'"};
    out.push_back(x);
  }
  if (out.empty()) throw UsageError{setting + ": no value"};
  return out;
}

/// The first failure of a setting benchmark's rows, then of its native run ("" if none).
template <typename R>
std::string FirstError(const std::vector<R>& rows, const std::optional<R>& native) {
  for (const R& r : rows)
    if (!r.ok()) return r.setting + ": " + r.error;
  if (native && !native->ok()) return "native: " + native->error;
  return "";
}

/// The index of the median of v (the lower one for an even count); v is not empty.
size_t MedianIndex(const std::vector<double>& v);

/// With --plot FILE: draws the chart with `plot(FILE)`, which returns "" or its error.
/// Returns FILE (JSON) if the chart was written, else null; a plot error becomes `error`
/// unless that already names one.
template <typename Plot>
Json PlotIfAsked(const Ctx& c, std::string& error, Plot plot) {
  if (!c.args.Has("plot")) return nullptr;
  const std::string plot_error = plot(c.args.Get("plot"));
  if (plot_error.empty()) return c.args.Get("plot");
  if (error.empty()) error = "plot: " + plot_error;
  return nullptr;
}

/// Prints `error` (if any) as "vmspace COMMAND: error" on Ctx::err; returns the exit code
/// of a bench that ran: kExitOk without an error, else kExitFailed.
int BenchExit(Ctx& c, const std::string& error);

/// The mailing-list threads the benchmarks reproduce, as their output cites them
/// (subject, author, date; https://lore.kernel.org/linux-mm/ finds them by subject).
inline constexpr const char* kSeed002Thread =
    "Peter Xu, \"[PATCH v5] mm: Avoid unnecessary page fault retires on shared memory types\", May 2022";
inline constexpr const char* kSeed003Thread =
    "Yu Ma, \"[PATCH] mm/mmap: move vma operations to mm_struct out of the critical section of file mapping "
    "lock\", June 2023";
inline constexpr const char* kSeed004Thread =
    "\"[REGRESSION]: mmap performance regression starting with k-6.1\", November 2023, "
    "https://lore.kernel.org/linux-mm/?q=s%3A%22mmap+performance+regression+starting+with+k-6.1%22";

/// What `bench stress` was asked to run: its options, parsed and checked.
struct StressSetup {
  stress::StressConfig cfg;  // rounds, clients, seed, locking profile (the base of --compare) ...
  std::string transport;     // inprocess, unary or stream
  ClientOptions client;      // the daemon (unary, stream)
  int batch = 1024;          // stream: ops per Batch message
  int inflight = 4;          // stream: messages in flight per client
  bool progress = true;      // progress lines on stderr
  bool native = true;        // the same sequence on the kernel too
  int repeat = 1;            // --compare, --scaling: repetitions
};

/// The setting of a `bench stress` run as its JSON starts: workload, transport, target,
/// rounds per client, clients, shared space, page faults, seed, stride.
Json StressSetupJson(const StressSetup& s);

/// One seed-004 run of ours with `cfg` on `s.transport` (inprocess, unary or stream).
stress::StressStats RunOurStress(const StressSetup& s, const stress::StressConfig& cfg,
                                 stress::Progress* progress = nullptr);

/// bench stress --compare [--repeat N]: every profile, then the kernel, N times in turn.
/// A profile's row is its median-rounds/s repetition; its x native is the median over the
/// repetitions of its rounds/s over the kernel's of the same repetition (each ratio side
/// by side in time, as the machine's load drifts); the native row is the median native run.
int BenchStressCompare(Ctx& c, const StressSetup& s);

/// bench stress --scaling --clients C [--repeat N]: how C clients scale against one,
/// ours and the kernel's, per repetition and as medians (bench_stress_scaling.cc).
int BenchStressScaling(Ctx& c, const StressSetup& s);

/// What one run of a sweep gives: the aggregate rate (ops/s) or the error.
struct SweepRun {
  double rate = 0;
  std::string error;
};

/// `bench WORKLOAD --sweep 1..N` (bench_sweep.cc): at each task count, each profile's
/// run and the kernel's, as will-it-scale's runtest does; the workload's command fills in
/// how a run is made.
struct SweepSpec {
  std::string workload;               // "page_fault4", "stress"
  std::string unit;                   // "pages/s"
  std::string mode;                   // "threads (one space)" / "processes (a space each)"
  std::string setting;                // the rest of the setting, in words ("1 s per run")
  std::vector<int> tasks;             // ParseSweep
  std::vector<std::string> profiles;  // one series each ("" = the default)
  bool native = true;                 // a series of the kernel's runs too
  bool progress = true;
  std::function<SweepRun(const std::string& profile, int tasks)> ours;
  std::function<SweepRun(int tasks)> kernel;
};

/// The task counts of --sweep: "A..B" (every count from A to B) or an increasing list
/// "1,2,4"; each 1..1024. Throws UsageError.
std::vector<int> ParseSweep(const std::string& v);

/// Runs the sweep and prints it: a table of ops/s and per-task scaling (ops/s at N /
/// (N x ops/s at the first count)) per series, or JSON; --csv FILE writes the CSV
/// (tasks,series,ops_per_s,per_task_scaling), --plot FILE the chart. Returns the exit code.
int RunSweep(Ctx& c, const SweepSpec& s);

}  // namespace vmspace::cli
