// SPDX-License-Identifier: Apache-2.0
// `vmspace bench stress --compare`: the seed-004 stress once per locking profile (and
// --repeat), beside the kernel and the thread's own table; measured into
// StressCompareFigures, then drawn (--plot) and rendered as JSON or text.
#include "cli/bench.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>

#include "lib/plot.h"

namespace vmspace::cli {

namespace {

/// Seed 004's table beside ours when --seed-table is given or the compare names a
/// profile of the seed's table (linux-6.0, linux-6.1, linux-6.7); else nullopt.
std::optional<stress::SeedComparisonTable> SeedTableFor(bool seed_table, const std::vector<stress::StressStats>& rows,
                                                        bool page_fault) {
  std::map<std::string, double> ours;
  bool named = false;
  for (const stress::StressStats& r : rows) {
    const std::string& p = r.profile_name.empty() ? r.profile : r.profile_name;
    named = named || stress::InSeedTable(p);
    if (r.ok() && !ours.count(p)) ours[p] = r.rounds_per_sec();
  }
  if (!named && !seed_table) return std::nullopt;
  return stress::CompareWithSeed(ours, page_fault);
}

Json SeedTableJson(const stress::SeedComparisonTable& t) {
  Json rows = Json::array();
  for (const stress::SeedComparison& r : t.rows) {
    rows.push_back({{"profile", r.seed->profile},
                    {"kernel", r.seed->kernel},
                    {"seed_seconds", r.seed_s},
                    {"seed_seconds_approx", t.page_fault && r.seed->fault_approx},
                    {"seed_slowdown", r.seed_slowdown},
                    {"our_seconds_per_seed_rounds", OptJson(r.our_s)},
                    {"our_slowdown", OptJson(r.our_slowdown)}});
  }
  return {{"source", std::string(kSeed004Thread) + " (system time, 6.0.0 / 6.1.0 / 6.7.0-rc2)"},
          {"seed_rounds", stress::kSeedRounds},
          {"page_fault", t.page_fault},
          {"base", t.base},
          {"rows", rows}};
}

void PrintSeedTable(std::ostream& o, const stress::SeedComparisonTable& t) {
  o << "seed 004 beside ours (kernel system time of " << stress::kSeedRounds
    << " rounds, page faults " << (t.page_fault ? "on" : "off") << "); slowdown = time / " << t.base << "'s\n";
  char line[256];
  snprintf(line, sizeof line, "%-12s %-10s %12s %13s %16s %12s\n", "profile", "kernel", "seed time(s)",
           "seed slowdown", "our time(s)/10M", "our slowdown");
  o << line;
  for (const stress::SeedComparison& r : t.rows) {
    const std::string seed_s = std::string(t.page_fault && r.seed->fault_approx ? "~" : "") + Num(r.seed_s, "%.0f");
    snprintf(line, sizeof line, "%-12s %-10s %12s %13.2f %16s %12s\n", r.seed->profile, r.seed->kernel,
             seed_s.c_str(), r.seed_slowdown, Num(r.our_s, "%.2f").c_str(), Num(r.our_slowdown, "%.2f").c_str());
    o << line;
  }
  o << "our time(s)/10M = " << stress::kSeedRounds
    << " rounds at our measured rounds/s (wall time of the engine; the seed's is the kernel's system time)\n"
    << "seed time(s) = the same program's on 6.0.0 / 6.1.0 / 6.7.0-rc2 in " << kSeed004Thread << "\n";
}

using StressRow = stress::StressStats;

/// The figures of `bench stress --compare`, one entry per profile in the order run.
struct StressCompareFigures {
  std::vector<StressRow> rows;                // its median-rounds/s repetition (a failure: the first)
  std::vector<std::optional<double>> ratios;  // the median of ratio_runs (none unless every repetition has one)
  std::vector<std::vector<double>> ratio_runs;  // rounds/s / the kernel's of the same repetition
  std::vector<std::vector<double>> rps_runs;    // rounds/s of each repetition
  std::optional<StressRow> native;            // the first failed native run, else the median one
  std::vector<double> native_rps;             // the kernel's rounds/s of each repetition
  std::optional<stress::SeedComparisonTable> seed_table;
  std::string error;                          // the first failure ("" if none)
};

/// Runs every profile, then the kernel, `s.repeat` times in turn, and picks the rows.
StressCompareFigures MeasureStressCompare(const StressSetup& s, Ctx& c, const std::vector<std::string>& profiles,
                                          bool seed_table) {
  std::vector<std::vector<StressRow>> reps;       // [repetition][profile]
  std::vector<std::optional<StressRow>> natives;  // [repetition]
  for (int k = 0; k < s.repeat; ++k) {
    const std::string what =
        s.repeat > 1 ? "seed-004 stress, repetition " + std::to_string(k + 1) + "/" + std::to_string(s.repeat)
                     : "seed-004 stress";
    // Each run carries its profile's lock deltas over the rounds (StressStats::locks).
    reps.push_back(RunProfiles<StressRow>(c, profiles, what, s.progress, 0, [&](const std::string& p) {
      stress::StressConfig cfg = s.cfg;
      cfg.locking_profile = p;
      return RunOurStress(s, cfg);
    }));
    const bool any_ok = std::any_of(reps.back().begin(), reps.back().end(), [](const StressRow& r) { return r.ok(); });
    std::optional<StressRow> n;
    if (s.native && any_ok) {
      if (s.progress) c.err << "vmspace bench: " << what << " on the kernel (native)\n" << std::flush;
      n = stress::RunNativeStress(s.cfg);
    }
    natives.push_back(std::move(n));
    if (!any_ok) break;  // every profile failed: no point in repeating it
  }
  StressCompareFigures f;
  f.ratio_runs.resize(profiles.size());
  f.rps_runs.resize(profiles.size());
  // Per profile: the repetition with the median rounds/s (a failed one: the first
  // failure), and the median of the per-repetition ratios.
  for (size_t i = 0; i < profiles.size(); ++i) {
    std::optional<size_t> failed;
    for (size_t k = 0; k < reps.size(); ++k) {
      const StressRow& r = reps[k][i];
      if (!r.ok()) {
        if (!failed) failed = k;
        continue;
      }
      f.rps_runs[i].push_back(r.rounds_per_sec());
      const std::optional<StressRow>& n = natives[k];
      if (n && n->ok() && n->rounds_per_sec() > 0) f.ratio_runs[i].push_back(r.rounds_per_sec() / n->rounds_per_sec());
    }
    if (failed) {
      f.rows.push_back(reps[*failed][i]);
      f.ratios.push_back(std::nullopt);
      continue;
    }
    f.rows.push_back(reps[MedianIndex(f.rps_runs[i])][i]);
    f.ratios.push_back(f.ratio_runs[i].size() == reps.size()
                           ? std::optional<double>(f.ratio_runs[i][MedianIndex(f.ratio_runs[i])])
                           : std::nullopt);
  }
  // The native row: the first failed native run, else the median one.
  std::vector<size_t> native_rep;  // the repetition of each native_rps entry
  for (size_t k = 0; k < natives.size(); ++k) {
    if (!natives[k]) continue;
    if (!natives[k]->ok()) {
      f.native = natives[k];
      break;
    }
    f.native_rps.push_back(natives[k]->rounds_per_sec());
    native_rep.push_back(k);
  }
  if (!f.native && !f.native_rps.empty()) f.native = natives[native_rep[MedianIndex(f.native_rps)]];
  for (const StressRow& r : f.rows)
    if (!r.ok() && f.error.empty()) f.error = r.profile + ": " + r.error;
  if (f.native && !f.native->ok() && f.error.empty()) f.error = "native: " + f.native->error;
  f.seed_table = SeedTableFor(seed_table, f.rows, s.cfg.page_fault);
  return f;
}

/// Draws rounds/s, contentions per 1000 rounds and (with the kernel's run) the ratio per
/// profile into `path`. Returns "" or the error.
std::string PlotStressCompare(const StressSetup& s, const StressCompareFigures& f, const std::string& path) {
  bench::PlotSpec spec;
  spec.title = "vmspace bench stress (seed-004): " + std::to_string(s.cfg.clients) + " client(s), " +
               std::to_string(s.cfg.rounds) + " rounds each, " + s.transport;
  bench::PlotPanel rps{"rounds/s", {}}, cont{"mmap_lock contentions per 1000 rounds", {}}, rat{"ratio vs native", {}};
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const StressRow& r = f.rows[i];
    spec.labels.push_back(r.profile);
    rps.values.push_back(r.ok() ? std::optional<double>(r.rounds_per_sec()) : std::nullopt);
    cont.values.push_back(r.contentions_per_1k_rounds());
    rat.values.push_back(f.ratios[i]);
  }
  spec.panels = {rps, cont};
  if (f.native && f.native->ok()) spec.panels.push_back(rat);
  return bench::WriteBarChart(spec, path);
}

/// `chart`: the chart written (null: none).
Json StressCompareJson(const StressSetup& s, const StressCompareFigures& f, const Json& chart, const std::string& error) {
  const stress::StressConfig& base_cfg = s.cfg;
  Json j = StressSetupJson(s);
  j["compare"] = true;
  j["repeat"] = s.repeat;
  j["native_rounds_per_s_runs"] = f.native_rps;
  if (s.transport == "stream") {
    j["batch"] = s.batch;
    j["inflight"] = s.inflight;
  }
  j["native"] = f.native ? StatsJson(*f.native) : Json(nullptr);
  Json arr = Json::array();
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const StressRow& r = f.rows[i];
    Json rj;
    rj["profile"] = r.profile;
    std::string pname, pdesc;
    bench::CheckProfile(r.profile, &pname, &pdesc);
    rj["profile_name"] = pname;
    rj["profile_description"] = pdesc;
    Json stats = StatsJson(r);
    for (auto& [k, v] : stats.items()) rj[k] = v;
    rj["ops_per_s"] = stats["ops_per_sec"]["total"];
    rj["faults_per_s"] = Rate(r.faults, r.seconds);
    rj["addr_hash"] = base_cfg.shared_space ? Json(nullptr) : Json(Hex(r.addr_hash));
    rj["ratio_vs_native"] = OptJson(f.ratios[i]);
    rj["ratio_vs_native_runs"] = f.ratio_runs[i];
    rj["rounds_per_s_runs"] = f.rps_runs[i];
    rj["mmap_lock_contentions_per_1k_rounds"] = OptJson(r.contentions_per_1k_rounds());
    AddLockFields(rj, r.locks, r.mmap_lock_contentions(), r.contentions_per_1k_faults(), r.mmap_lock_wait_s_per_round(), r.locks_note);
    rj["error"] = r.ok() ? Json(nullptr) : Json(r.error);
    arr.push_back(rj);
  }
  j["results"] = arr;
  j["seed_table"] = f.seed_table ? SeedTableJson(*f.seed_table) : Json(nullptr);
  j["plot"] = chart;
  j["error"] = error.empty() ? Json(nullptr) : Json(error);
  return j;
}

std::string StressCompareText(const StressSetup& s, const StressCompareFigures& f, const Json& chart) {
  const stress::StressConfig& base_cfg = s.cfg;
  std::ostringstream o;
  o << "seed-004 stress: transport " << s.transport;
  if (s.transport != "inprocess") o << " to " << s.client.target;
  o << "; " << base_cfg.clients << " client" << (base_cfg.clients > 1 ? "s" : "") << " ("
    << (base_cfg.shared_space ? "one shared space" : "own space each") << "), " << base_cfg.rounds
    << " rounds each, page faults " << (base_cfg.page_fault ? "on" : "off") << ", seed " << base_cfg.seed << "\n";
  char line[512];
  snprintf(line, sizeof line, "%-26s %9s %12s %10s %12s %11s %11s %11s %10s %8s %8s\n", "profile", "time(s)",
           "rounds/s", "x native", "faults/s", "cont/1krnd", "cont/1kflt", "wait-s/rnd", "vl-success", "vl-abort",
           "vl-miss");
  o << line;
  std::vector<std::string> notes;
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const StressRow& r = f.rows[i];
    if (!r.ok() && r.rounds == 0) {
      o << std::left << std::setw(26) << Abbrev(r.profile, 26) << std::right << " error: " << r.error << "\n";
      continue;
    }
    snprintf(line, sizeof line, "%-26s %9.3f %12.0f %10s %12.0f %11s %11s %11s %10s %8s %8s\n",
             Abbrev(r.profile, 26).c_str(), r.seconds, r.rounds_per_sec(), Num(f.ratios[i], "%.4f").c_str(),
             Rate(r.faults, r.seconds), Num(r.contentions_per_1k_rounds(), "%.3g").c_str(),
             Num(r.contentions_per_1k_faults(), "%.3g").c_str(), Num(r.mmap_lock_wait_s_per_round(), "%.3g").c_str(),
             Count(r.locks, "vma_lock_success").c_str(), Count(r.locks, "vma_lock_abort").c_str(),
             Count(r.locks, "vma_lock_miss").c_str());
    o << line;
    if (!r.ok()) o << "  error: " << r.error << "\n";
    notes.push_back(r.locks_note);
  }
  if (f.native) {
    snprintf(line, sizeof line, "%-26s %9.3f %12.0f %10s %12.0f\n",
             s.repeat > 1 ? "native (kernel, median)" : "native (kernel, once)", f.native->seconds,
             f.native->rounds_per_sec(), "1", Rate(f.native->faults, f.native->seconds));
    o << line;
  }
  if (s.repeat > 1) {
    o << "x native per repetition (each beside the kernel's run of the same repetition):\n";
    for (size_t i = 0; i < f.rows.size(); ++i) {
      o << "  " << std::left << std::setw(24) << Abbrev(f.rows[i].profile, 24) << std::right;
      for (double x : f.ratio_runs[i]) {
        snprintf(line, sizeof line, " %.2f", x);
        o << line;
      }
      if (!f.ratio_runs[i].empty()) {
        const auto [lo, hi] = std::minmax_element(f.ratio_runs[i].begin(), f.ratio_runs[i].end());
        snprintf(line, sizeof line, "  (median %s, range %.2f-%.2f)", Num(f.ratios[i], "%.2f").c_str(), *lo, *hi);
        o << line;
      }
      o << "\n";
    }
    o << "x native = the median over " << s.repeat
      << " repetitions of rounds/s / the kernel's rounds/s of the same repetition (each repetition runs every "
         "profile, then the kernel, on the same sequence); a row's other columns are those of its "
         "median-rounds/s repetition; ";
  } else {
    o << "x native = rounds/s / the kernel's rounds/s (same sequence, measured once in this invocation); ";
  }
  o << "cont/1krnd, cont/1kflt = mmap_lock contentions (read+write) per 1000 rounds / faults; wait-s/rnd = "
       "mmap_lock wait seconds per round; vl-* = VMA_LOCK_SUCCESS/ABORT/MISS\n";
  if (f.seed_table) PrintSeedTable(o, *f.seed_table);
  PrintNotes(o, notes);
  if (!chart.is_null()) o << "chart: " << chart.get<std::string>() << "\n";
  return o.str();
}

}  // namespace

int BenchStressCompare(Ctx& c, const StressSetup& s) {
  std::vector<std::string> profiles = ProfilesToRun(c, s.cfg.locking_profile);
  if (std::string e = CheckPlot(c); !e.empty()) return BenchExit(c, e);
  const StressCompareFigures f = MeasureStressCompare(s, c, profiles, c.args.Flag("seed-table"));
  std::string error = f.error;
  const Json chart = PlotIfAsked(c, error, [&](const std::string& path) { return PlotStressCompare(s, f, path); });
  if (c.json) c.out << StressCompareJson(s, f, chart, error).dump() << "\n";
  else c.out << StressCompareText(s, f, chart);
  return BenchExit(c, error);
}

}  // namespace vmspace::cli
