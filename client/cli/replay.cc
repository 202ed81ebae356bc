// SPDX-License-Identifier: Apache-2.0
// `vmspace replay TRACE`: issues a recorded trace's calls in new spaces of vmspaced
// (lib/replay.h); --check compares them with the kernel's, --compare times them per
// locking profile (docs/replay.md).
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/trace_locks.h"
#include "lib/replay.h"

namespace vmspace::cli {

namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string w; std::getline(in, w, ',');) {
    if (!w.empty()) v.push_back(w);
  }
  return v;
}

uint64_t Sum(const std::map<std::string, uint64_t>& m, const std::string& prefix) {
  uint64_t n = 0;
  for (const auto& [k, v] : m) n += k.rfind(prefix, 0) == 0 ? v : 0;
  return n;
}

}  // namespace

int CmdReplay(Ctx& c) {
  if (!c.args.Has("trace")) throw UsageError{"a trace is required (vmspace record writes one)"};
  const std::string path = c.args.Get("trace");
  const std::string speed = c.args.Get("speed", "max");
  if (speed != "max" && speed != "asrecorded") throw UsageError{"--speed: asrecorded or max, not '" + speed + "'"};
  const bool check = c.args.Flag("check");
  std::vector<std::string> profiles = {c.args.Get("profile", "")};
  if (c.args.Has("compare")) {
    if (check) throw UsageError{"--check and --compare go separately"};
    profiles = SplitList(c.args.Get("compare"));
    if (profiles.empty()) throw UsageError{"--compare: a list of locking profiles, e.g. linux-6.0,linux-6.15"};
  }
  std::ifstream in(path);
  if (!in) {
    c.err << "vmspace replay: cannot read " << path << "\n";
    return kExitFailed;
  }
  std::string error;
  auto t = trace::Read(in, &error);
  if (!t) {
    c.err << "vmspace replay: " << path << ": " << error << "\n";
    return kExitFailed;
  }
  trace::ReplayOptions opt;
  opt.client = c.client;
  opt.trace_dir = std::filesystem::path(path).parent_path().string();
  if (opt.trace_dir.empty()) opt.trace_dir = ".";
  opt.check = check;
  opt.paced = speed == "asrecorded";
  opt.context = static_cast<size_t>(c.U64("context", 5));
  const std::string files = c.args.Get("files", "memfd");
  if (files != "memfd" && files != "host") throw UsageError{"--files: memfd or host, not '" + files + "'"};
  opt.host_files = files == "host";

  // --timeline: a TraceLocks call of every space runs beside the replay and is ended
  // (StopTraceLocks) when the replay is done.
  const std::string timeline = c.args.Get("timeline", "");
  std::optional<Client> tracer;
  std::thread trace_thread;
  client::Result<std::vector<v1::TraceLocksResponse>> traced = std::vector<v1::TraceLocksResponse>{};
  if (!timeline.empty()) {
    tracer.emplace(c.client);
    trace_thread = std::thread([&] { traced = tracer->TraceLocks(0, true, 600); });
    // The trace is on before the first call: wait for the daemon to have it on (a
    // stop request is refused until then).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  auto finish_timeline = [&]() -> bool {
    if (timeline.empty()) return true;
    auto stopped = tracer->StopTraceLocks();
    trace_thread.join();
    if (!stopped.ok() || !traced.ok()) {
      c.err << "vmspace replay: --timeline: " << (!traced.ok() ? traced.error().message : stopped.error().message) << "\n";
      return false;
    }
    std::string error;
    if (!WriteChromeTrace(traced.value(), timeline, &error)) {
      c.err << "vmspace replay: --timeline: " << error << "\n";
      return false;
    }
    return true;
  };
  Json runs = Json::array();
  int code = kExitOk;
  std::ostringstream table;
  if (profiles.size() > 1) {
    table << std::left << std::setw(14) << "profile" << std::right << std::setw(10) << "time(s)" << std::setw(12) << "calls/s"
          << std::setw(9) << "faults" << std::setw(16) << "mmap_lock/call" << std::setw(15) << "vma_lock/call" << "\n";
  }
  for (const std::string& p : profiles) {
    opt.locking_profile = p;
    trace::ReplayResult r = trace::Replay(*t, opt);
    if (!r.error.empty()) {
      c.err << "vmspace replay: " << r.error << "\n";
      finish_timeline();
      return kExitFailed;
    }
    const double rate = r.call_seconds > 0 ? static_cast<double>(r.issued) / r.call_seconds : 0;
    const double calls = std::max<double>(1, static_cast<double>(r.issued));
    const double mmap_c = static_cast<double>(Sum(r.contentions, "mmap_lock-")) / calls;
    const double vma_c = static_cast<double>(Sum(r.contentions, "vma_lock-")) / calls;
    const std::string uns = trace::UnsupportedSummary(r);
    Json j{{"profile", p.empty() ? "default" : p},
           {"spaces", r.spaces},
           {"threads", r.threads},
           {"issued", r.issued},
           {"recorded_only", r.recorded_only},
           {"unsupported", r.unsupported},
           {"seconds", r.call_seconds},
           {"calls_per_second", rate},
           {"faults", r.faults},
           {"contentions", r.contentions},
           {"mmap_lock_contentions_per_call", mmap_c},
           {"vma_lock_contentions_per_call", vma_c}};
    if (check) {
      Json diffs = Json::array();
      for (const trace::Difference& d : r.differences)
        diffs.push_back({{"seq", d.seq}, {"what", d.what}, {"cause", d.cause}, {"context", d.context}});
      j["differences"] = diffs;
      j["unexplained"] = r.Unexplained();
      if (r.Unexplained() > 0) code = kExitFailed;
    }
    runs.push_back(j);
    if (c.json) continue;
    if (profiles.size() > 1) {
      char line[160];
      snprintf(line, sizeof line, "%-14s%10.3f%12.0f%9llu%16.4f%15.4f\n", (p.empty() ? "default" : p).c_str(), r.call_seconds,
               rate, static_cast<unsigned long long>(r.faults), mmap_c, vma_c);
      table << line;
      continue;
    }
    c.out << path << ": " << r.spaces << " spaces, " << r.threads << " threads; " << r.issued << " calls issued in "
          << std::fixed << std::setprecision(3) << r.call_seconds << " s (" << std::setprecision(0) << rate
          << " calls/s), " << r.recorded_only << " recorded only (no daemon counterpart); " << r.faults
          << " faults to fault in the resident pages\n";
    std::string sep;
    for (const auto& [name, n] : r.by_sys) {
      c.out << sep << name << " " << n;
      sep = ", ";
    }
    if (!r.by_sys.empty()) c.out << "\n";
    c.out << (uns.empty() ? "unsupported: none" : uns) << "\n";
    if (!check) continue;
    if (r.differences.empty()) {
      c.out << "check: the replay agrees with the kernel (every result and each space's final maps)\n";
      continue;
    }
    const trace::Difference* first = nullptr;
    for (const trace::Difference& d : r.differences) {
      if (d.cause.empty()) {
        first = &d;
        break;
      }
    }
    c.out << "check: " << r.differences.size() << " differences, " << r.Unexplained() << " not explained by unsupported calls or the layout replica\n";
    if (first != nullptr) c.out << "first unexplained difference: " << first->what << "\n" << first->context;
    size_t shown = 0;
    for (const trace::Difference& d : r.differences) {
      if (shown++ == 40) {
        c.out << "  ... " << r.differences.size() - 40 << " more\n";
        break;
      }
      c.out << "  " << d.what << (d.cause.empty() ? "" : "  <- " + d.cause) << "\n";
    }
  }
  if (!finish_timeline()) code = kExitFailed;
  if (c.json) {
    c.out << (profiles.size() > 1 ? Json{{"trace", path}, {"runs", runs}} : runs[0]).dump() << "\n";
  } else if (profiles.size() > 1) {
    c.out << table.str();
  }
  return code;
}

}  // namespace vmspace::cli
