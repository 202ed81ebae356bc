// SPDX-License-Identifier: Apache-2.0
// `vmspace bench stress --scaling`: C clients against one, ours and the kernel's, per
// repetition; measured into ScalingFigures, then rendered as JSON or text.
#include "cli/bench.h"

#include <algorithm>
#include <sstream>

#include "engine/profile.h"
#include "lib/harness.h"
#include "lib/plot.h"

namespace vmspace::cli {

namespace {

using StressRow = stress::StressStats;

/// One side of a repetition, ours or the kernel's: the one-client run on each CPU
/// (pinned; else one run), then all clients.
struct ScalingSide {
  std::vector<StressRow> one_by_cpu;
  std::optional<StressRow> many;  // not run if a one-client run failed
  std::optional<double> x;        // many / the first CPU's one-client rounds/s
  std::optional<double> matched;  // many / the slowest CPU's one-client rounds/s
  std::optional<double> spread;   // the fastest CPU's one-client rounds/s / the slowest's
  /// The slowest client beside the others: the lowest, over the clients, of a client's
  /// rounds/s in the many-client run / the one-client rounds/s on its CPU (pinned, in
  /// process; 1 = no client lost anything to the others).
  std::optional<double> per_client;
  /// In process: the lowest RunResult::on_cpu of this side's runs (1: no client's CPU
  /// ran anything else of the guest meanwhile).
  std::optional<double> on_cpu;
  std::optional<StressRow> one() const {
    return one_by_cpu.empty() ? std::nullopt : std::optional<StressRow>(one_by_cpu.front());
  }
};

/// One repetition: ours, the kernel's, and the two controls.
struct ScalingRep {
  ScalingSide ours, kernel;  // kernel: only without --skip-native
  double alu_one_s = 0, alu_many_s = 0;  // the integer-unit control: 1 thread, C threads
  double map_one_s = 0, map_many_s = 0;  // the std::map control: 1 thread, C threads
  std::optional<double> alu_x, map_x;    // C x the 1-thread time / the C-thread time
  std::optional<double> over_map;        // ours.x / map_x
};

/// A ratio over the repetitions that have it, and its median (none: no repetition has it).
struct ScalingSeries {
  std::vector<double> v;
  std::optional<double> median;
  void Add(const std::optional<double>& x) {
    if (x) v.push_back(*x);
  }
  void Summarize() {
    if (!v.empty()) median = v[MedianIndex(v)];
  }
};

/// The figures of `bench stress --scaling`.
struct ScalingFigures {
  std::vector<int> cpus;  // the CPUs this process may use (harness::AllowedCpus)
  bool pinned = false;    // client c pinned to cpus[c], the one-client run made on each
  std::string profile;    // the locking profile's name
  std::vector<ScalingRep> reps;
  ScalingSeries ours, kernel, alu, map, over_map, matched, kernel_matched, per_client;
  std::string error;  // the first failure ("" if none); no repetition runs after it
};

/// Each repetition runs one client, then C clients (each in its own space, or one shared
/// with --shared-space), then the kernel's one process and C processes (threads with
/// --shared-space); its ratio is the C-client aggregate rounds/s over the one-client
/// rounds/s of the same repetition, side by side in time.
/// In process (and for the kernel), with C <= the CPUs this process may use, client c
/// is pinned to the c-th of them and the one-client run is made once on each of those
/// CPUs: `matched` is the C-client aggregate over the slowest CPU's one-client rounds/s
/// (with the same rounds per client, C times that is the most C clients can give when
/// they share nothing, however unequal the host makes its vCPUs), `spread` the fastest
/// CPU's one-client rounds/s over the slowest's, `on_cpu` whether another thread of this
/// process (the engine's call_rcu worker, say) took a client's CPU meanwhile.
/// Each repetition ends with two controls that share nothing, each in 1 thread, then in
/// C, pinned as the clients (stress::ControlSeconds; ratio C x the 1-thread time / the
/// C-thread time). They tell what the host allows, so that a ratio below C is not
/// blamed on the spaces: `alu` (integer-unit-bound register code) is near 1 when the C
/// vCPUs are SMT siblings of one physical core and near C on separate cores; `map` (a
/// std::map per thread) is what the host gives user-space data-structure code such as
/// the engine's, and ours over the map's (1 = our spaces scale as code that shares
/// nothing) is the figure that is the spaces' own.
ScalingFigures MeasureScaling(const StressSetup& s, std::ostream& err) {
  const stress::StressConfig& base_cfg = s.cfg;
  const int n = base_cfg.clients;
  ScalingFigures f;
  // Pinned (one client per CPU, each CPU's one-client run measured) in process with at
  // most one client per CPU; the daemon's transports leave placement to the scheduler.
  f.cpus = harness::AllowedCpus();
  f.pinned = s.transport == "inprocess" && !f.cpus.empty() && n <= static_cast<int>(f.cpus.size());
  const bool pinned = f.pinned;
  const int solo_cpus = pinned ? n : 1;  // one-client runs per repetition
  auto ours = [&](int clients, int first_cpu) {
    stress::StressConfig cfg = base_cfg;
    cfg.clients = clients;
    cfg.pin_first_cpu = pinned ? first_cpu : -1;
    return RunOurStress(s, cfg);
  };
  auto kernel = [&](int clients, int first_cpu) {
    stress::StressConfig cfg = base_cfg;
    cfg.clients = clients;
    cfg.pin_first_cpu = pinned ? first_cpu : -1;
    return stress::RunNativeStress(cfg);
  };
  // The controls' steps per thread: each ~0.2 s on this VM's EPYC (Zen 4).
  constexpr uint64_t kAluIters = 40'000'000, kMapIters = 1'500'000;
  auto ratio = [](const StressRow& one, const StressRow& many) -> std::optional<double> {
    if (!one.ok() || !many.ok() || one.rounds_per_sec() <= 0) return std::nullopt;
    return many.rounds_per_sec() / one.rounds_per_sec();
  };
  // Runs one side (run(clients, first_cpu)); the first failure goes to `error`, named
  // with `who`. Then its ratios: x against the first CPU, matched and spread against
  // the slowest and fastest CPUs (pinned runs only).
  auto run_side = [&](auto run, const std::string& who, ScalingSide& side, std::string& error) {
    for (int cpu = 0; cpu < solo_cpus && error.empty(); ++cpu) {
      side.one_by_cpu.push_back(run(1, cpu));
      if (!side.one_by_cpu.back().ok()) error = who + "1 client: " + side.one_by_cpu.back().error;
    }
    if (!error.empty()) return;
    side.many = run(n, 0);
    if (!side.many->ok()) {
      error = who + std::to_string(n) + " clients: " + side.many->error;
      return;
    }
    side.x = ratio(side.one_by_cpu.front(), *side.many);
    if (s.transport == "inprocess") {
      double lo = side.many->on_cpu;
      for (const StressRow& r : side.one_by_cpu) lo = std::min(lo, r.on_cpu);
      if (lo > 0) side.on_cpu = lo;
    }
    if (!pinned) return;
    auto rps = [](const StressRow& r) { return r.rounds_per_sec(); };
    const auto [lo, hi] = std::minmax_element(side.one_by_cpu.begin(), side.one_by_cpu.end(),
                                              [&](const StressRow& a, const StressRow& b) { return rps(a) < rps(b); });
    side.matched = ratio(*lo, *side.many);
    if (side.matched) side.spread = rps(*hi) / rps(*lo);
    const std::vector<double>& by_client = side.many->client_rounds_per_s;
    if (s.transport == "inprocess" && static_cast<int>(by_client.size()) == n) {
      double low = 0;
      for (int k = 0; k < n; ++k) {
        const double alone = rps(side.one_by_cpu[static_cast<size_t>(k) % side.one_by_cpu.size()]);
        const double rel = alone > 0 ? by_client[static_cast<size_t>(k)] / alone : 0;
        low = k == 0 ? rel : std::min(low, rel);
      }
      if (low > 0) side.per_client = low;
    }
  };
  // The profile's name: the one given, else the engine's default in process; the
  // daemon's default is its own (--locking-profile of vmspaced).
  f.profile = "the daemon's default";
  if (!base_cfg.locking_profile.empty()) bench::CheckProfile(base_cfg.locking_profile, &f.profile);
  else if (s.transport == "inprocess") f.profile = LockingProfile{}.name;
  std::string& error = f.error;
  for (int k = 0; k < s.repeat && error.empty(); ++k) {
    const std::string what = "seed-004 scaling, repetition " + std::to_string(k + 1) + "/" + std::to_string(s.repeat);
    ScalingRep r;
    if (s.progress) err << "vmspace bench: " << what << ": 1 client, then " << n << "\n" << std::flush;
    run_side(ours, "", r.ours, error);
    if (s.native && error.empty()) {
      if (s.progress) err << "vmspace bench: " << what << " on the kernel: 1, then " << n << "\n" << std::flush;
      run_side(kernel, "native, ", r.kernel, error);
    }
    if (error.empty()) {
      using stress::Control;
      r.alu_one_s = stress::ControlSeconds(Control::kAlu, 1, kAluIters);
      r.alu_many_s = stress::ControlSeconds(Control::kAlu, n, kAluIters);
      r.map_one_s = stress::ControlSeconds(Control::kMap, 1, kMapIters);
      r.map_many_s = stress::ControlSeconds(Control::kMap, n, kMapIters);
      if (r.alu_many_s > 0) r.alu_x = n * r.alu_one_s / r.alu_many_s;
      if (r.map_many_s > 0) r.map_x = n * r.map_one_s / r.map_many_s;
    }
    if (r.ours.x && r.map_x) r.over_map = *r.ours.x / *r.map_x;
    f.ours.Add(r.ours.x);
    f.kernel.Add(r.kernel.x);
    f.alu.Add(r.alu_x);
    f.map.Add(r.map_x);
    f.over_map.Add(r.over_map);
    f.matched.Add(r.ours.matched);
    f.per_client.Add(r.ours.per_client);
    f.kernel_matched.Add(r.kernel.matched);
    f.reps.push_back(std::move(r));
  }
  for (ScalingSeries* v : {&f.ours, &f.kernel, &f.alu, &f.map, &f.over_map, &f.matched, &f.kernel_matched,
                           &f.per_client})
    v->Summarize();
  return f;
}

/// Draws the ratio of each repetition (C-client aggregate rounds/s / 1-client rounds/s)
/// and their median: ours, the kernel's (with the native runs) and the std::map control,
/// one panel each, into `path`. Returns "" or the error.
std::string PlotScaling(const StressSetup& s, const ScalingFigures& f, const std::string& path) {
  const std::string n = std::to_string(s.cfg.clients);
  bench::PlotSpec spec;
  spec.title = "vmspace bench stress --scaling (seed-004): " + n + " clients / 1 client, " +
               std::to_string(s.cfg.rounds) + " rounds each, " + s.transport + ", " + f.profile;
  bench::PlotPanel ours{"ours: " + n + "-client / 1-client rounds/s", {}};
  bench::PlotPanel kernel{"kernel: " + n + " / 1 " + (s.cfg.shared_space ? "threads" : "processes"), {}};
  bench::PlotPanel map{"control: a std::map per thread, " + n + " / 1", {}};
  for (size_t i = 0; i < f.reps.size(); ++i) {
    spec.labels.push_back("rep " + std::to_string(i + 1));
    ours.values.push_back(f.reps[i].ours.x);
    kernel.values.push_back(f.reps[i].kernel.x);
    map.values.push_back(f.reps[i].map_x);
  }
  spec.labels.push_back("median");
  ours.values.push_back(f.ours.median);
  kernel.values.push_back(f.kernel.median);
  map.values.push_back(f.map.median);
  spec.panels = {ours};
  if (s.native) spec.panels.push_back(kernel);
  spec.panels.push_back(map);
  return bench::WriteBarChart(spec, path);
}

/// `chart`: the chart written (null: none); `error`: the run's or the chart's.
Json ScalingJson(const StressSetup& s, const ScalingFigures& f, const Json& chart, const std::string& error) {
  const stress::StressConfig& base_cfg = s.cfg;
  auto rps = [](const std::optional<StressRow>& r) { return r && r->ok() ? Json(r->rounds_per_sec()) : Json(nullptr); };
  auto rps_list = [](const std::vector<StressRow>& v) {
    Json a = Json::array();
    for (const StressRow& r : v) a.push_back(r.ok() ? Json(r.rounds_per_sec()) : Json(nullptr));
    return a;
  };
  auto on_cpu = [&](const std::optional<StressRow>& r) {
    return s.transport == "inprocess" && r && r->ok() ? Json(r->on_cpu) : Json(nullptr);
  };
  auto on_cpu_list = [&](const std::vector<StressRow>& v) {
    Json a = Json::array();
    for (const StressRow& r : v) a.push_back(on_cpu(r));
    return a;
  };
  Json arr = Json::array();
  for (const ScalingRep& r : f.reps) {
    auto rounds = [](const std::optional<StressRow>& x) { return x ? Json(x->rounds) : Json(nullptr); };
    arr.push_back({{"one_client_rounds", rounds(r.ours.one())},
                   {"clients_rounds", rounds(r.ours.many)},
                   {"native_one_rounds", rounds(r.kernel.one())},
                   {"native_clients_rounds", rounds(r.kernel.many)},
                   {"one_client_rounds_per_s", rps(r.ours.one())},
                   {"clients_rounds_per_s", rps(r.ours.many)},
                   {"ratio", OptJson(r.ours.x)},
                   {"one_client_rounds_per_s_by_cpu", rps_list(r.ours.one_by_cpu)},
                   {"matched_ratio", OptJson(r.ours.matched)},
                   {"cpu_spread", OptJson(r.ours.spread)},
                   {"on_cpu_one_by_cpu", on_cpu_list(r.ours.one_by_cpu)},
                   {"clients_on_cpu", on_cpu(r.ours.many)},
                   {"clients_rounds_per_s_by_client",
                    r.ours.many && r.ours.many->ok() ? Json(r.ours.many->client_rounds_per_s) : Json(nullptr)},
                   {"per_client_ratio", OptJson(r.ours.per_client)},
                   {"native_one_rounds_per_s", rps(r.kernel.one())},
                   {"native_one_rounds_per_s_by_cpu", rps_list(r.kernel.one_by_cpu)},
                   {"native_matched_ratio", OptJson(r.kernel.matched)},
                   {"native_cpu_spread", OptJson(r.kernel.spread)},
                   {"native_clients_rounds_per_s", rps(r.kernel.many)},
                   {"native_ratio", OptJson(r.kernel.x)},
                   {"alu_one_thread_s", r.alu_one_s},
                   {"alu_threads_s", r.alu_many_s},
                   {"alu_ratio", OptJson(r.alu_x)},
                   {"map_one_thread_s", r.map_one_s},
                   {"map_threads_s", r.map_many_s},
                   {"map_ratio", OptJson(r.map_x)},
                   {"ratio_over_map", OptJson(r.over_map)}});
  }
  return Json{{"workload", "seed-004"},
              {"scaling", true},
              {"transport", s.transport},
              {"clients", base_cfg.clients},
              {"shared_space", base_cfg.shared_space},
              {"rounds_per_client", base_cfg.rounds},
              {"page_fault", base_cfg.page_fault},
              {"locking_profile", base_cfg.locking_profile.empty() ? Json(nullptr) : Json(base_cfg.locking_profile)},
              {"profile_name", f.profile},
              {"repeat", s.repeat},
              {"pinned", f.pinned},
              {"repetitions", arr},
              {"ratio_median", OptJson(f.ours.median)},
              {"native_ratio_median", OptJson(f.kernel.median)},
              {"alu_ratio_median", OptJson(f.alu.median)},
              {"map_ratio_median", OptJson(f.map.median)},
              {"ratio_over_map_median", OptJson(f.over_map.median)},
              {"matched_ratio_median", OptJson(f.matched.median)},
              {"native_matched_ratio_median", OptJson(f.kernel_matched.median)},
              {"per_client_ratio_median", OptJson(f.per_client.median)},
              {"plot", chart},
              {"error", error.empty() ? Json(nullptr) : Json(error)}};
}

std::string ScalingText(const StressSetup& s, const ScalingFigures& f, const Json& chart) {
  const stress::StressConfig& base_cfg = s.cfg;
  const int n = base_cfg.clients;
  const bool native_on = s.native;
  std::ostringstream o;
  o << "seed-004 scaling: transport " << s.transport << "; 1 client against " << n << " ("
    << (base_cfg.shared_space ? "one shared space" : "own space each");
  if (native_on) o << (base_cfg.shared_space ? "; the kernel: threads of one process" : "; the kernel: one process each");
  o << "), " << base_cfg.rounds << " rounds each, page faults " << (base_cfg.page_fault ? "on" : "off")
    << ", locking profile " << f.profile;
  if (f.pinned) o << "; client c pinned to CPU " << f.cpus[0] << "+c, 1 client on each of " << n << " CPUs";
  o << "\n";
  char line[256];
  // The kernel's columns only when it ran (not with --skip-native).
  snprintf(line, sizeof line, "%-10s %14s %14s %8s", "repetition", "1 client r/s",
           (std::to_string(n) + " clients r/s").c_str(), "ratio");
  o << line;
  if (f.pinned) {
    snprintf(line, sizeof line, " %8s %8s %8s", "matched", "spread", "on-cpu");
    o << line;
  }
  if (native_on) {
    snprintf(line, sizeof line, " %14s %14s %8s", "kernel 1 r/s", ("kernel " + std::to_string(n) + " r/s").c_str(),
             "ratio");
    o << line;
    if (f.pinned) {
      snprintf(line, sizeof line, " %8s", "matched");
      o << line;
    }
  }
  snprintf(line, sizeof line, " %8s %8s %8s", "alu", "map", "ours/map");
  o << line << "\n";
  auto cell = [](const std::optional<StressRow>& s) { return s && s->ok() ? Num(s->rounds_per_sec(), "%.0f") : "-"; };
  for (size_t k = 0; k < f.reps.size(); ++k) {
    const ScalingRep& r = f.reps[k];
    snprintf(line, sizeof line, "%-10zu %14s %14s %8s", k + 1, cell(r.ours.one()).c_str(), cell(r.ours.many).c_str(),
             Num(r.ours.x, "%.2f").c_str());
    o << line;
    if (f.pinned) {
      snprintf(line, sizeof line, " %8s %8s %8s", Num(r.ours.matched, "%.2f").c_str(), Num(r.ours.spread, "%.2f").c_str(),
               Num(r.ours.on_cpu, "%.3f").c_str());
      o << line;
    }
    if (native_on) {
      snprintf(line, sizeof line, " %14s %14s %8s", cell(r.kernel.one()).c_str(), cell(r.kernel.many).c_str(),
               Num(r.kernel.x, "%.2f").c_str());
      o << line;
      if (f.pinned) {
        snprintf(line, sizeof line, " %8s", Num(r.kernel.matched, "%.2f").c_str());
        o << line;
      }
    }
    snprintf(line, sizeof line, " %8s %8s %8s", Num(r.alu_x, "%.2f").c_str(), Num(r.map_x, "%.2f").c_str(),
             Num(r.over_map, "%.2f").c_str());
    o << line << "\n";
  }
  auto summary = [&](const char* who, const ScalingSeries& x) {
    if (!x.median) return;
    const std::vector<double>& v = x.v;
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    snprintf(line, sizeof line, "%s: median %.2f, range %.2f-%.2f over %zu repetition%s\n", who, *x.median, *lo, *hi,
             v.size(), v.size() == 1 ? "" : "s");
    o << line;
  };
  summary("ours", f.ours);
  summary("ours matched", f.matched);
  summary("ours per client", f.per_client);
  summary("kernel", f.kernel);
  summary("kernel matched", f.kernel_matched);
  summary("alu", f.alu);
  summary("map", f.map);
  summary("ours/map", f.over_map);
  o << "ratio = the " << n << "-client aggregate rounds/s / the 1-client rounds/s of the same repetition"
    << (f.pinned ? " (1 client on the first CPU)" : "") << "\n";
  if (f.pinned)
    o << "matched = the " << n << "-client aggregate / the slowest CPU's 1-client rounds/s (" << n
      << " = as fast as clients that share nothing, on these CPUs as the host runs them now); spread = the fastest"
      << " CPU's 1-client rounds/s / the slowest's; on-cpu = the lowest, over the repetition's runs and their"
      << " clients, of a client thread's CPU time / its wall time (below 1: its CPU also ran another thread of"
      << " the guest, such as the engine's call_rcu worker; what the host takes is not seen)\n"
      << "per client = the lowest, over the clients, of a client's rounds/s beside the others / its CPU's 1-client"
      << " rounds/s (in process; 1 = no client lost anything to the others)\n";
  o
    << "alu, map = the controls, " << n << " threads that share nothing, pinned as the clients (" << n
    << " x the 1-thread time / the " << n << "-thread time): alu, integer-unit-bound register code (near 1 when"
    << " the vCPUs share a physical core's SMT siblings, near " << n << " on separate cores); map, a std::map"
    << " per thread (erase and insert of 1024 keys): what this host gives user-space data-structure code\n"
    << "ours/map = our ratio / the map's of the same repetition (1 = our spaces scale as code that shares nothing)\n";
  if (!chart.is_null()) o << "chart: " << chart.get<std::string>() << "\n";
  return o.str();
}

}  // namespace

int BenchStressScaling(Ctx& c, const StressSetup& s) {
  if (std::string e = CheckPlot(c); !e.empty()) return BenchExit(c, e);
  const ScalingFigures f = MeasureScaling(s, c.err);
  std::string error = f.error;
  Json chart = nullptr;
  if (!f.reps.empty()) chart = PlotIfAsked(c, error, [&](const std::string& path) { return PlotScaling(s, f, path); });
  if (c.json) c.out << ScalingJson(s, f, chart, error).dump() << "\n";
  else if (!f.ours.v.empty()) c.out << ScalingText(s, f, chart);  // (a run that never completed a repetition prints only its error)
  return BenchExit(c, error);
}

}  // namespace vmspace::cli
