// SPDX-License-Identifier: Apache-2.0
// Pieces the bench commands share (bench.h).
#include "cli/bench.h"

#include <algorithm>

#include "lib/plot.h"

namespace vmspace::cli {

namespace {

Json LocksJson(const bench::LockFigures& f) {
  Json j = Json::object();
  for (size_t cl = 0; cl < static_cast<size_t>(LockClass::kCount); ++cl) {
    Json modes = Json::object();
    for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); ++m) {
      if (static_cast<LockMode>(m) == LockMode::kRead && !LockClassShared(static_cast<LockClass>(cl))) continue;
      const LockStatCell& x = f.stats.locks[cl][m];
      modes[LockModeName(static_cast<LockMode>(m))] = {{"acquisitions", x.acquisitions},
                                                       {"contentions", x.contentions},
                                                       {"wait_seconds", static_cast<double>(x.wait_ns_total) / 1e9},
                                                       {"hold_seconds", static_cast<double>(x.hold_ns_total) / 1e9}};
    }
    j[LockClassName(static_cast<LockClass>(cl))] = modes;
  }
  return j;
}

}  // namespace

double Rate(uint64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0; }

Json StatsJson(const stress::StressStats& s) {
  uint64_t total = s.mmaps + s.munmaps + s.accesses;
  Json j;
  j["seconds"] = s.seconds;
  j["rounds"] = s.rounds;
  j["rounds_per_sec"] = s.rounds_per_sec();
  j["ops"] = {{"mmap", s.mmaps}, {"munmap", s.munmaps}, {"access", s.accesses}, {"total", total}};
  j["ops_per_sec"] = {{"mmap", Rate(s.mmaps, s.seconds)},
                      {"munmap", Rate(s.munmaps, s.seconds)},
                      {"access", Rate(s.accesses, s.seconds)},
                      {"total", Rate(total, s.seconds)}};
  j["faults"] = s.faults;
  j["major_faults"] = s.major_faults;
  j["bytes_touched"] = s.bytes_touched;
  j["setup_mmaps"] = s.setup_mmaps;
  j["teardown_munmaps"] = s.teardown_munmaps;
  return j;
}

std::string ProfileOption(const Ctx& c) {
  bool p = c.args.Has("profile"), lp = c.args.Has("locking-profile");
  if (p && lp && c.args.Get("profile") != c.args.Get("locking-profile")) {
    throw UsageError{"--profile and --locking-profile are the same option; give one"};
  }
  return p ? c.args.Get("profile") : c.args.Get("locking-profile");
}

std::vector<std::string> ProfilesToRun(const Ctx& c, const std::string& base) {
  if (!c.args.Has("compare")) return {base};
  std::string list = c.args.Get("compare");
  bool switch_form = list.find(';') == std::string::npos && list.find('=') != std::string::npos;
  if (!switch_form && !base.empty()) {
    throw UsageError{"--profile is the base of a '--compare SWITCH=V1,V2,...' list; with profile names "
                     "in --compare, leave --profile out"};
  }
  std::vector<std::string> specs;
  std::string e = bench::ExpandCompare(list, base, &specs);
  if (!e.empty()) throw UsageError{e};
  return specs;
}

std::string CheckPlot(const Ctx& c) {
  if (!c.args.Has("plot")) return "";
  if (c.args.Get("plot").empty()) throw UsageError{"--plot needs a file name (FILE.svg or FILE.png)"};
  if (bench::PlotFormat(c.args.Get("plot")).empty())
    throw UsageError{"--plot: '" + c.args.Get("plot") + "': the extension names the format: .svg (SVG) or .png (PNG)"};
  if (bench::FindGnuplot().empty()) return bench::GnuplotMissingMessage();
  return "";
}

void AddLockFields(Json& j, const std::optional<bench::LockFigures>& locks, std::optional<uint64_t> contentions,
                   std::optional<double> per_1k_faults, std::optional<double> wait_per_op, const std::string& note) {
  j["mmap_lock_contentions"] = contentions ? Json(*contentions) : Json(nullptr);
  j["mmap_lock_contentions_per_1k_faults"] = OptJson(per_1k_faults);
  j["mmap_lock_wait_s_per_op"] = OptJson(wait_per_op);
  for (const char* e : {"vma_lock_success", "vma_lock_abort", "vma_lock_miss", "pgfault"})
    j[e] = locks ? Json(locks->event(e)) : Json(nullptr);
  j["lock_timing"] = locks ? Json(locks->timing) : Json(nullptr);
  j["locks"] = locks ? LocksJson(*locks) : Json(nullptr);
  j["events"] = locks ? Json(locks->events()) : Json(nullptr);
  j["locks_note"] = note.empty() ? Json(nullptr) : Json(note);
}

std::string Count(const std::optional<bench::LockFigures>& l, const char* event) {
  return l ? std::to_string(l->event(event)) : "-";
}

void PrintNotes(std::ostream& o, const std::vector<std::string>& notes) {
  std::vector<std::string> seen;
  for (const std::string& n : notes) {
    if (n.empty() || std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    o << "note: " << n << "\n";
  }
}

size_t MedianIndex(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  return idx[(idx.size() - 1) / 2];
}

int BenchExit(Ctx& c, const std::string& error) {
  if (error.empty()) return kExitOk;
  c.err << "vmspace " << c.command << ": " << error << "\n";
  return kExitFailed;
}

}  // namespace vmspace::cli
