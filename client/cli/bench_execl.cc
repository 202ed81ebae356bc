// SPDX-License-Identifier: Apache-2.0
// `vmspace bench execl`: UnixBench execl as a real fork + exec loop (CloneSpace,
// ExecSpace, DestroySpace) in the engine or against a daemon, per i_mmap_scope, beside
// the kernel's fork + execve of the same static program, as many loops as the engine
// ran (or fewer in the same duration). Measured into an ExeclFigures, then rendered as JSON or text.
#include "cli/commands.h"

#include <iomanip>
#include <sstream>

#include "cli/bench.h"
#include "lib/execl.h"
#include "lib/execl_grpc.h"

namespace vmspace::cli {

namespace {

/// What `bench execl` was asked to run.
struct ExeclSetup {
  int clients = 2;
  double seconds = 2;             // per scope
  std::vector<IMmapScope> scopes;  // in the order given
  std::string profile;            // "" = linux-6.15
  bool native = true;             // also the kernel's loop
  std::string binary;             // the kernel loop's static program
  std::string transport = "inprocess";  // inprocess | unary
  std::string program;            // inprocess: a host path; unary: a path in the daemon's --data-dir
  client::ClientOptions client;   // unary: the daemon
  bool progress = true;           // progress lines on stderr
};

/// The figures of one `bench execl` run: a row per scope, the kernel's run, the first
/// failure ("" if none).
struct ExeclFigures {
  std::vector<bench::ExeclResult> rows;
  std::optional<bench::ExeclResult> native;
  std::string error;
};

/// The loops the kernel runs: as many as the engine's rows ran on average (the same
/// work measured; fewer if the duration passes first), 100 per client when they ran none.
uint64_t NativeIterations(const std::vector<bench::ExeclResult>& rows, int clients) {
  uint64_t sum = 0, n = 0;
  for (const auto& r : rows)
    if (r.iterations > 0) sum += r.iterations, n++;
  return n ? (sum + n / 2) / n : 100ull * static_cast<uint64_t>(clients);
}

ExeclFigures MeasureExecl(const ExeclSetup& s, std::ostream& err) {
  ExeclFigures f;
  for (IMmapScope sc : s.scopes) {
    if (s.progress) err << "vmspace bench execl: i_mmap_scope=" << IMmapScopeName(sc) << ", " << s.clients << " clients, "
                        << s.transport << "\n" << std::flush;
    f.rows.push_back(s.transport == "inprocess"
                         ? bench::RunExeclEngine(sc, s.profile, s.clients, s.seconds, s.program)
                         : bench::RunExeclDaemon(s.client, sc, s.profile, s.clients, s.seconds, s.program));
  }
  if (s.native) {
    const uint64_t n = NativeIterations(f.rows, s.clients);
    if (s.progress)
      err << "vmspace bench execl: the kernel (" << n << " fork + execve of " << s.binary << ")\n" << std::flush;
    f.native = bench::RunExeclNative(s.clients, n, s.seconds, s.binary);
  }
  f.error = FirstError(f.rows, f.native);
  return f;
}

Json ExeclJson(const bench::ExeclResult& r, double native_per_s) {
  const double n = r.iterations ? static_cast<double>(r.iterations) : 1;
  const bool native = r.setting == "native";
  return {{"i_mmap_scope", r.setting},
          {"clients", r.clients},
          {"seconds", r.seconds},
          {"iterations", r.iterations},
          {"iterations_per_s", r.iterations_per_s()},
          {"x_native", !native && native_per_s > 0 ? Json(r.iterations_per_s() / native_per_s) : Json(nullptr)},
          {"i_mmap_rwsem", native ? Json(nullptr)
                                  : Json{{"acquisitions", r.i_mmap_acquisitions},
                                         {"contentions", r.i_mmap_contentions},
                                         {"wait_seconds", r.i_mmap_wait_s},
                                         {"acquisitions_per_iteration", r.i_mmap_acquisitions / n},
                                         {"wait_us_per_iteration", r.i_mmap_wait_s * 1e6 / n}}},
          {"rmap_checks", native ? Json(nullptr) : Json(r.rmap_checks)},
          {"race_hits", native ? Json(nullptr) : Json(r.race_hits)},
          {"binary", Json(r.binary)},
          {"error", r.error.empty() ? Json(nullptr) : Json(r.error)}};
}

Json ExeclFiguresJson(const ExeclSetup& s, const ExeclFigures& f) {
  Json arr = Json::array();
  const double nat = f.native && f.native->ok() ? f.native->iterations_per_s() : 0;
  for (const auto& r : f.rows) arr.push_back(ExeclJson(r, nat));
  return Json{{"workload", "execl"}, {"clients", s.clients}, {"duration_s", s.seconds}, {"transport", s.transport},
              {"program", s.program}, {"target", s.transport == "inprocess" ? Json(nullptr) : Json(s.client.target)},
              {"results", arr}, {"native", f.native ? ExeclJson(*f.native, 0) : Json(nullptr)},
              {"error", f.error.empty() ? Json(nullptr) : Json(f.error)}};
}

std::string ExeclFiguresText(const ExeclSetup& s, const ExeclFigures& f) {
  std::ostringstream o;
  o << "bench execl: " << s.clients << " clients, each a space running " << s.program
    << " that loops: fork (CloneSpace), exec the program in the child (ExecSpace), "
    << (s.transport == "inprocess" ? "touch each segment, " : "") << "exit (DestroySpace); "
    << std::setprecision(3) << s.seconds << " s per scope ("
    << (s.transport == "inprocess" ? std::string("engine in-process") : s.transport + " to " + s.client.target)
    << ")\n";
  char line[256];
  snprintf(line, sizeof line, "%-22s %12s %8s %9s %12s %12s %14s %12s\n", "i_mmap_scope", "iter/s", "x first",
           "x native", "i_mmap acq/it", "i_mmap cont", "wait-us/iter", "race hits");
  o << line;
  const double first = f.rows.empty() ? 0 : f.rows[0].iterations_per_s();
  const double nat = f.native && f.native->ok() ? f.native->iterations_per_s() : 0;
  for (const auto& r : f.rows) {
    const double n = r.iterations ? static_cast<double>(r.iterations) : 1;
    snprintf(line, sizeof line, "%-22s %12.0f %8s %9s %12.1f %12llu %14.3f %5llu/%-6llu\n", r.setting.c_str(),
             r.iterations_per_s(), first > 0 ? Num(r.iterations_per_s() / first, "%.3fx").c_str() : "-",
             nat > 0 ? Num(r.iterations_per_s() / nat, "%.3fx").c_str() : "-", r.i_mmap_acquisitions / n, static_cast<unsigned long long>(r.i_mmap_contentions),
             r.i_mmap_wait_s * 1e6 / n, static_cast<unsigned long long>(r.race_hits),
             static_cast<unsigned long long>(r.rmap_checks));
    o << line;
    if (!r.ok()) o << "  error: " << r.error << "\n";
  }
  if (f.native) {
    snprintf(line, sizeof line, "%-22s %12.0f %8s %9s %12s %12s %14s %12s\n", "native (fork+execve)",
             f.native->iterations_per_s(), "-", "1x", "-", "-", "-", "-");
    o << line;
    if (!f.native->ok()) o << "  error: " << f.native->error << "\n";
    o << "native = " << s.clients << " processes of the static " << f.native->binary << ", each looping fork + "
      << "execve of it in the child + wait, " << f.native->iterations << " loops in all (the engine rows' "
      << "average, or fewer in " << s.seconds << " s), on this kernel\n";
  }
  o << "race hits = rmap checks (i_mmap_rwsem held for read) that found a VMA already in a space's tree but not "
       "in the file's i_mmap / checks run (in-process only); " << kSeed003Thread << ": +12% execl (160 parallel, 224 threads) for narrow\n";
  return o.str();
}

}  // namespace

int CmdBenchExecl(Ctx& c) {
  ExeclSetup s;
  const uint64_t clients = c.U64("clients", 2);
  if (clients < 1 || clients > 256) throw UsageError{"--clients must be 1..256"};
  s.clients = static_cast<int>(clients);
  std::string dur = c.args.Get("duration", "2s");
  auto seconds = client::ParseDurationSeconds(dur);
  if (!seconds) throw UsageError{"--duration: want e.g. 2s, 500ms; got '" + dur + "'"};
  s.seconds = *seconds;
  s.scopes = SettingValues<IMmapScope>(c, "i_mmap_scope", "wide,narrow", "wide,narrow", ParseIMmapScope);
  s.profile = ProfileOption(c);
  if (std::string e = bench::CheckProfile(s.profile.empty() ? "linux-6.15" : s.profile); !e.empty())
    throw UsageError{"--profile: " + e};
  s.progress = !c.args.Flag("quiet");
  s.native = !c.args.Flag("skip-native");
  if (s.native) s.binary = c.args.Get("native-binary", bench::DefaultExeclBinary());
  s.transport = c.args.Get("transport", "inprocess");
  if (s.transport != "inprocess" && s.transport != "unary") throw UsageError{"--transport must be inprocess or unary"};
  s.client = c.client;
  if (s.transport == "inprocess") s.program = c.args.Get("program", c.args.Get("native-binary", bench::DefaultExeclBinary()));
  else if (!c.args.Has("program")) throw UsageError{"--transport unary needs --program: a static ELF program in the daemon's --data-dir"};
  else s.program = c.args.Get("program");
  const ExeclFigures f = MeasureExecl(s, c.err);
  c.out << (c.json ? ExeclFiguresJson(s, f).dump() + "\n" : ExeclFiguresText(s, f));
  if (!f.error.empty()) {
    c.err << "vmspace " << c.command << ": " << f.error << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace vmspace::cli
