// SPDX-License-Identifier: Apache-2.0
// `vmspace bench WORKLOAD --sweep 1..N`: will-it-scale's runtest, ops/s per task count
// for every profile and the kernel's, as a table (or JSON), a CSV (--csv) and a chart
// (--plot); the workload's own command gives the runs (bench.h SweepSpec).
#include "cli/bench.h"

#include <fstream>

#include "lib/plot.h"

namespace vmspace::cli {

namespace {

/// The figures of a sweep: [task count][series] ops/s (series: the profiles, then the
/// kernel), and the first failure.
struct SweepFigures {
  std::vector<std::string> series;
  std::vector<std::vector<std::optional<double>>> rate;
  std::string error;
  /// rate at point i over the rate at the first point (one task), per task at that point
  /// count: the linear-scaling share ("x 1 task" / tasks).
  std::optional<double> Scaling(const SweepSpec& s, size_t i, size_t k) const {
    if (!rate[i][k] || !rate[0][k] || *rate[0][k] <= 0) return std::nullopt;
    return *rate[i][k] / *rate[0][k] / (static_cast<double>(s.tasks[i]) / s.tasks[0]);
  }
};

SweepFigures MeasureSweep(Ctx& c, const SweepSpec& s) {
  SweepFigures f;
  f.series = s.profiles;
  if (s.native) f.series.push_back("native");
  for (int t : s.tasks) {
    std::vector<std::optional<double>> row;
    for (const std::string& p : s.profiles) {
      if (s.progress)
        c.err << "vmspace bench: " << s.workload << " sweep: " << t << " task" << (t > 1 ? "s" : "") << ", profile "
              << (p.empty() ? "(default)" : p) << "\n"
              << std::flush;
      const SweepRun r = s.ours(p, t);
      if (!r.error.empty() && f.error.empty()) f.error = p + " at " + std::to_string(t) + " tasks: " + r.error;
      row.push_back(r.error.empty() ? std::optional<double>(r.rate) : std::nullopt);
    }
    if (s.native) {
      if (s.progress) c.err << "vmspace bench: " << s.workload << " sweep: " << t << " tasks on the kernel\n" << std::flush;
      const SweepRun r = s.kernel(t);
      if (!r.error.empty() && f.error.empty()) f.error = "native at " + std::to_string(t) + " tasks: " + r.error;
      row.push_back(r.error.empty() ? std::optional<double>(r.rate) : std::nullopt);
    }
    f.rate.push_back(std::move(row));
  }
  return f;
}

std::string SweepCsv(const SweepSpec& s, const SweepFigures& f) {
  std::ostringstream o;
  o << "tasks,series,ops_per_s,per_task_scaling\n";
  for (size_t i = 0; i < s.tasks.size(); ++i)
    for (size_t k = 0; k < f.series.size(); ++k) {
      o << s.tasks[i] << "," << f.series[k] << ",";
      if (f.rate[i][k]) o << std::setprecision(10) << *f.rate[i][k];
      o << ",";
      if (auto x = f.Scaling(s, i, k)) o << std::setprecision(4) << *x;
      o << "\n";
    }
  return o.str();
}

/// One panel of ops/s by task count per series.
std::string PlotSweep(const SweepSpec& s, const SweepFigures& f, const std::string& path) {
  bench::PlotSpec spec;
  spec.title = "vmspace bench " + s.workload + " --sweep: " + s.unit + " by task count (" + s.mode + ")";
  for (int t : s.tasks) spec.labels.push_back(std::to_string(t));
  for (size_t k = 0; k < f.series.size(); ++k) {
    bench::PlotPanel p{f.series[k] + " " + s.unit, {}};
    for (size_t i = 0; i < s.tasks.size(); ++i) p.values.push_back(f.rate[i][k]);
    spec.panels.push_back(p);
  }
  return bench::WriteBarChart(spec, path);
}

Json SweepJson(const SweepSpec& s, const SweepFigures& f, const Json& chart, const Json& csv, const std::string& error) {
  Json points = Json::array();
  for (size_t i = 0; i < s.tasks.size(); ++i) {
    Json by = Json::object(), sc = Json::object();
    for (size_t k = 0; k < f.series.size(); ++k) {
      by[f.series[k]] = OptJson(f.rate[i][k]);
      sc[f.series[k]] = OptJson(f.Scaling(s, i, k));
    }
    points.push_back({{"tasks", s.tasks[i]}, {"ops_per_s", by}, {"per_task_scaling", sc}});
  }
  return {{"workload", s.workload}, {"sweep", s.tasks},     {"mode", s.mode},   {"unit", s.unit},
          {"series", f.series},     {"points", points},     {"csv", csv},       {"plot", chart},
          {"error", error.empty() ? Json(nullptr) : Json(error)}};
}

std::string SweepText(const SweepSpec& s, const SweepFigures& f, const Json& chart, const Json& csv) {
  std::ostringstream o;
  o << "bench " << s.workload << " --sweep " << s.tasks.front() << ".." << s.tasks.back() << ": " << s.mode << ", "
    << s.unit << " by task count" << (s.setting.empty() ? "" : "; " + s.setting) << "\n";
  char line[128];
  snprintf(line, sizeof line, "%6s", "tasks");
  o << line;
  for (const std::string& n : f.series) {
    snprintf(line, sizeof line, " %16s %7s", Abbrev(n, 16).c_str(), "scale");
    o << line;
  }
  o << "\n";
  for (size_t i = 0; i < s.tasks.size(); ++i) {
    snprintf(line, sizeof line, "%6d", s.tasks[i]);
    o << line;
    for (size_t k = 0; k < f.series.size(); ++k) {
      snprintf(line, sizeof line, " %16s %7s", Num(f.rate[i][k], "%.0f").c_str(), Num(f.Scaling(s, i, k), "%.2f").c_str());
      o << line;
    }
    o << "\n";
  }
  o << "scale = ops/s at N tasks / (N x ops/s at " << s.tasks.front()
    << " task): 1 = linear, as will-it-scale's runtest plots it\n";
  if (!csv.is_null()) o << "csv: " << csv.get<std::string>() << "\n";
  if (!chart.is_null()) o << "chart: " << chart.get<std::string>() << "\n";
  return o.str();
}

}  // namespace

std::vector<int> ParseSweep(const std::string& v) {
  std::vector<int> out;
  auto num = [&](const std::string& x) {
    if (x.empty() || x.size() > 4 || x.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError{"--sweep: want 1..N or a list 1,2,4; got '" + v + "'"};
    const int n = std::stoi(x);
    if (n < 1 || n > 1024) throw UsageError{"--sweep: task counts are 1..1024"};
    return n;
  };
  if (const size_t dots = v.find(".."); dots != std::string::npos) {
    const int a = num(v.substr(0, dots)), b = num(v.substr(dots + 2));
    if (b < a) throw UsageError{"--sweep: " + v + " is empty"};
    for (int t = a; t <= b; ++t) out.push_back(t);
    return out;
  }
  std::stringstream ss(v);
  for (std::string x; std::getline(ss, x, ',');) {
    const int n = num(x);
    if (!out.empty() && n <= out.back()) throw UsageError{"--sweep: task counts must increase"};
    out.push_back(n);
  }
  if (out.empty()) throw UsageError{"--sweep: no task count"};
  return out;
}

int RunSweep(Ctx& c, const SweepSpec& s) {
  if (std::string e = CheckPlot(c); !e.empty()) return BenchExit(c, e);
  const SweepFigures f = MeasureSweep(c, s);
  std::string error = f.error;
  Json csv = nullptr;
  if (c.args.Has("csv")) {
    std::ofstream out(c.args.Get("csv"));
    out << SweepCsv(s, f);
    out.close();
    if (out) csv = c.args.Get("csv");
    else if (error.empty()) error = "--csv: cannot write " + c.args.Get("csv");
  }
  const Json chart = PlotIfAsked(c, error, [&](const std::string& path) { return PlotSweep(s, f, path); });
  if (c.json) c.out << SweepJson(s, f, chart, csv, error).dump() << "\n";
  else c.out << SweepText(s, f, chart, csv);
  return BenchExit(c, error);
}

}  // namespace vmspace::cli
