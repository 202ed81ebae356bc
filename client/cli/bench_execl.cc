// `vmspace bench execl`: UnixBench execl in the engine, per i_mmap_scope, beside the
// kernel's posix_spawn.
#include "cli/commands.h"

#include <iomanip>
#include <sstream>

#include "cli/bench.h"
#include "lib/execl.h"

namespace vmspace::cli {

namespace {

Json ExeclJson(const bench::ExeclResult& r) {
  const double n = r.iterations ? static_cast<double>(r.iterations) : 1;
  const bool native = r.setting == "native";
  return {{"i_mmap_scope", r.setting},
          {"clients", r.clients},
          {"seconds", r.seconds},
          {"iterations", r.iterations},
          {"iterations_per_s", r.iterations_per_s()},
          {"i_mmap_rwsem", native ? Json(nullptr)
                                  : Json{{"acquisitions", r.i_mmap_acquisitions},
                                         {"contentions", r.i_mmap_contentions},
                                         {"wait_seconds", r.i_mmap_wait_s},
                                         {"acquisitions_per_iteration", r.i_mmap_acquisitions / n},
                                         {"wait_us_per_iteration", r.i_mmap_wait_s * 1e6 / n}}},
          {"rmap_checks", native ? Json(nullptr) : Json(r.rmap_checks)},
          {"race_hits", native ? Json(nullptr) : Json(r.race_hits)},
          {"binary", native ? Json(r.binary) : Json(nullptr)},
          {"error", r.error.empty() ? Json(nullptr) : Json(r.error)}};
}

}  // namespace

int CmdBenchExecl(Ctx& c) {
  const uint64_t clients = c.U64("clients", 2);
  if (clients < 1 || clients > 256) throw UsageError{"--clients must be 1..256"};
  std::string dur = c.args.Get("duration", "2s");
  auto seconds = client::ParseDurationSeconds(dur);
  if (!seconds) throw UsageError{"--duration: want e.g. 2s, 500ms; got '" + dur + "'"};
  const std::vector<IMmapScope> scopes =
      SettingValues<IMmapScope>(c, "i_mmap_scope", "wide,narrow", "wide,narrow", ParseIMmapScope);
  const std::string profile = ProfileOption(c);
  if (std::string e = bench::CheckProfile(profile.empty() ? "linux-6.15" : profile); !e.empty())
    throw UsageError{"--profile: " + e};
  const bool progress = !c.args.Flag("quiet");
  std::vector<bench::ExeclResult> rows;
  for (IMmapScope sc : scopes) {
    if (progress) c.err << "vmspace bench execl: i_mmap_scope=" << IMmapScopeName(sc) << ", " << clients << " clients\n" << std::flush;
    rows.push_back(bench::RunExeclEngine(sc, profile, static_cast<int>(clients), *seconds));
  }
  std::optional<bench::ExeclResult> native;
  if (!c.args.Flag("skip-native")) {
    const std::string binary = c.args.Get("native-binary", bench::DefaultExeclBinary());
    if (progress) c.err << "vmspace bench execl: the kernel (posix_spawn " << binary << ")\n" << std::flush;
    native = bench::RunExeclNative(static_cast<int>(clients), *seconds, binary);
  }
  const std::string error = FirstError(rows, native);
  if (c.json) {
    Json arr = Json::array();
    for (const auto& r : rows) arr.push_back(ExeclJson(r));
    c.out << Json{{"workload", "execl"}, {"clients", clients}, {"duration_s", *seconds}, {"transport", "inprocess"},
                  {"results", arr}, {"native", native ? ExeclJson(*native) : Json(nullptr)},
                  {"error", error.empty() ? Json(nullptr) : Json(error)}}
                 .dump()
          << "\n";
  } else {
    std::ostringstream o;
    o << "bench execl: " << clients << " clients, each: create a space, map one shared binary as ld.so does, touch "
      << "each segment, destroy; " << std::setprecision(3) << *seconds << " s per scope (engine in-process)\n";
    char line[256];
    snprintf(line, sizeof line, "%-22s %12s %8s %12s %12s %14s %12s\n", "i_mmap_scope", "iter/s", "x first",
             "i_mmap acq/it", "i_mmap cont", "wait-us/iter", "race hits");
    o << line;
    const double first = rows.empty() ? 0 : rows[0].iterations_per_s();
    for (const auto& r : rows) {
      const double n = r.iterations ? static_cast<double>(r.iterations) : 1;
      snprintf(line, sizeof line, "%-22s %12.0f %8s %12.1f %12llu %14.3f %5llu/%-6llu\n", r.setting.c_str(),
               r.iterations_per_s(), first > 0 ? Num(r.iterations_per_s() / first, "%.3fx").c_str() : "-",
               r.i_mmap_acquisitions / n, static_cast<unsigned long long>(r.i_mmap_contentions),
               r.i_mmap_wait_s * 1e6 / n, static_cast<unsigned long long>(r.race_hits),
               static_cast<unsigned long long>(r.rmap_checks));
      o << line;
      if (!r.ok()) o << "  error: " << r.error << "\n";
    }
    if (native) {
      snprintf(line, sizeof line, "%-22s %12.0f %8s %12s %12s %14s %12s\n", "native (spawn+exec)",
               native->iterations_per_s(), "-", "-", "-", "-", "-");
      o << line;
      o << "native = posix_spawn (vfork + exec) + wait of the static " << native->binary << " on this kernel\n";
    }
    o << "race hits = rmap checks (i_mmap_rwsem held for read) that found a VMA already in a space's tree but not "
         "in the file's i_mmap / checks run; seed 003 thread: +12% execl (160 parallel, 224 threads) for narrow\n";
    c.out << o.str();
  }
  if (!error.empty()) {
    c.err << "vmspace " << c.command << ": " << error << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace vmspace::cli
