// SPDX-License-Identifier: Apache-2.0
// `vmspace bench fork`: fork of a space of N VMAs and S bytes (fraction F present), the
// child touching its pages and exiting, per locking profile (and, with parent threads,
// per fork_vma_lock switch), beside this machine's kernel. Measured into ForkFigures,
// then rendered as JSON or text.
#include "cli/commands.h"

#include <iomanip>
#include <sstream>

#include "cli/bench.h"
#include "engine/profile.h"
#include "lib/fork_bench.h"

namespace vmspace::cli {

namespace {

/// What `bench fork` was asked to run.
struct ForkSetup {
  bench::ForkConfig cfg;
  std::vector<std::string> profiles;  // the specs, each run in turn
  bool native = true;
  bool progress = true;
};

/// The figures of one `bench fork` run: a row per profile spec, the kernel's run, the
/// first failure ("" if none).
struct ForkFigures {
  std::vector<bench::ForkResult> rows;
  std::optional<bench::ForkResult> native;
  std::string error;
};

/// The specs to run: each profile; with parent threads, a profile with per-VMA locks
/// once with its fork_vma_lock and once with the other value.
std::vector<std::string> WithForkSwitch(const std::vector<std::string>& profiles, int parent_threads) {
  std::vector<std::string> out;
  for (const std::string& p : profiles) {
    const std::string spec = p.empty() ? "linux-6.15" : p;
    LockingProfile lp;
    std::string err;
    if (parent_threads == 0 || !LockingProfile::Parse(spec, &lp, &err) || lp.vma_lock == VmaLockMode::kOff) {
      out.push_back(spec);
      continue;
    }
    out.push_back(spec + (lp.fork_vma_lock ? "" : ",fork_vma_lock=off"));
    out.push_back(spec + (lp.fork_vma_lock ? ",fork_vma_lock=off" : ",fork_vma_lock=on"));
  }
  return out;
}

ForkFigures MeasureFork(const ForkSetup& s, std::ostream& err) {
  ForkFigures f;
  // The kernel first: its helper is a fork of this process, which is smallest before
  // the engine's runs have grown its heap.
  if (s.native) {
    if (s.progress) err << "vmspace bench fork: the kernel (fork of a helper process)\n" << std::flush;
    f.native = bench::RunForkNative(s.cfg);
  }
  for (size_t i = 0; i < s.profiles.size(); ++i) {
    if (s.progress)
      err << "vmspace bench fork: [" << (i + 1) << "/" << s.profiles.size() << "] " << s.profiles[i] << "\n"
          << std::flush;
    f.rows.push_back(bench::RunForkEngine(s.profiles[i], s.cfg));
  }
  for (const auto& r : f.rows)
    if (!r.ok() && f.error.empty()) f.error = r.setting + ": " + r.error;
  if (f.native && !f.native->ok() && f.error.empty()) f.error = "native: " + f.native->error;
  return f;
}

Json ForkJson(const bench::ForkResult& r, const ForkFigures& f, int parent_threads) {
  const bool native = r.setting == "native";
  const double n = r.forks ? static_cast<double>(r.forks) : 1;
  const double nat = f.native && f.native->ok() ? f.native->forks_per_s() : 0;
  auto lock = [&](uint64_t acq, uint64_t cont, double wait) {
    return native ? Json(nullptr)
                  : Json{{"acquisitions", acq}, {"contentions", cont}, {"wait_seconds", wait},
                         {"wait_us_per_fork", wait * 1e6 / n}};
  };
  return {{"profile", r.setting},
          {"seconds", r.seconds},
          {"forks", r.forks},
          {"forks_per_s", r.forks_per_s()},
          {"x_native", !native && nat > 0 ? Json(r.forks_per_s() / nat) : Json(nullptr)},
          {"child_pages_written", r.child_pages},
          {"mmap_lock", lock(r.mmap_lock_acquisitions, r.mmap_lock_contentions, r.mmap_lock_wait_s)},
          {"anon_vma_lock", lock(r.anon_vma_acquisitions, r.anon_vma_contentions, r.anon_vma_wait_s)},
          {"parent_writes", native || !parent_threads ? Json(nullptr) : Json(r.parent_writes)},
          {"race_hits", native || !parent_threads ? Json(nullptr) : Json(r.race_hits)},
          {"validate_failures", native || !parent_threads ? Json(nullptr) : Json(r.validate_failures)},
          {"validate_error", r.validate_error.empty() ? Json(nullptr) : Json(r.validate_error)},
          {"error", r.error.empty() ? Json(nullptr) : Json(r.error)}};
}

Json ForkFiguresJson(const ForkSetup& s, const ForkFigures& f) {
  Json arr = Json::array();
  for (const auto& r : f.rows) arr.push_back(ForkJson(r, f, s.cfg.parent_threads));
  return Json{{"workload", "fork"},
              {"size_bytes", s.cfg.size},
              {"vmas", s.cfg.vmas},
              {"touch", s.cfg.touch},
              {"parent_threads", s.cfg.parent_threads},
              {"duration_s", s.cfg.seconds},
              {"transport", "inprocess"},
              {"results", arr},
              {"native", f.native ? ForkJson(*f.native, f, 0) : Json(nullptr)},
              {"error", f.error.empty() ? Json(nullptr) : Json(f.error)}};
}

std::string ForkFiguresText(const ForkSetup& s, const ForkFigures& f) {
  std::ostringstream o;
  o << "bench fork: " << s.cfg.vmas << " private anonymous VMAs, " << HumanBytes(s.cfg.size) << " in all, "
    << std::setprecision(3) << s.cfg.touch * 100 << "% of the pages present; each fork: the child writes those "
    << f.rows.front().child_pages << " pages and exits; " << s.cfg.seconds << " s per profile (engine in-process)";
  if (s.cfg.parent_threads) o << "; " << s.cfg.parent_threads << " parent threads writing during the forks";
  o << "\n";
  const double nat = f.native && f.native->ok() ? f.native->forks_per_s() : 0;
  char line[320];
  snprintf(line, sizeof line, "%-36s %10s %9s %12s %11s %13s %11s %12s\n", "profile", "forks/s", "x native",
           "mmap_lock ac", "mmap cont", "mmap wait-us", "anon_vma ac", "anon_vma ct");
  o << line;
  for (const auto& r : f.rows) {
    const double n = r.forks ? static_cast<double>(r.forks) : 1;
    snprintf(line, sizeof line, "%-36s %10.1f %9s %12llu %11llu %13.1f %11llu %12llu\n", r.setting.c_str(),
             r.forks_per_s(), nat > 0 ? Num(r.forks_per_s() / nat, "%.3fx").c_str() : "-",
             static_cast<unsigned long long>(r.mmap_lock_acquisitions),
             static_cast<unsigned long long>(r.mmap_lock_contentions), r.mmap_lock_wait_s * 1e6 / n,
             static_cast<unsigned long long>(r.anon_vma_acquisitions),
             static_cast<unsigned long long>(r.anon_vma_contentions));
    o << line;
    if (!r.ok()) o << "  error: " << r.error << "\n";
  }
  if (f.native) {
    snprintf(line, sizeof line, "%-36s %10.1f %9s\n", "native (fork + write + exit)", f.native->forks_per_s(), "1x");
    o << line;
    if (!f.native->ok()) o << "  error: " << f.native->error << "\n";
  }
  if (s.cfg.parent_threads) {
    o << "race check (parent threads in pairs on shared pages, each writing its half in one access and reading "
         "it back; every child Validate()d; a hit needs a fork: small --size gives many):\n";
    snprintf(line, sizeof line, "%-36s %8s %14s %10s %18s\n", "profile", "forks", "parent writes", "race hits",
             "Validate failures");
    o << line;
    for (const auto& r : f.rows) {
      snprintf(line, sizeof line, "%-36s %8llu %14llu %10llu %18llu\n", r.setting.c_str(),
               static_cast<unsigned long long>(r.forks), static_cast<unsigned long long>(r.parent_writes),
               static_cast<unsigned long long>(r.race_hits),
               static_cast<unsigned long long>(r.validate_failures));
      o << line;
      if (!r.validate_error.empty()) o << "  first Validate failure: " << r.validate_error << "\n";
    }
    o << "race hit = a write the parent made and read back without its value: the lost write of Linux 6.4.0's "
         "fork race (fork_vma_lock=off), fixed by \"fork: lock VMAs of the parent process when forking\" "
         "(Suren Baghdasaryan, July 2023)\n";
  }
  o << "native = a helper process (a fork of this one, so its own mappings are copied too) with the same layout "
       "forking, the child writing the same pages and exiting, on this kernel\n";
  return o.str();
}

}  // namespace

int CmdBenchFork(Ctx& c) {
  ForkSetup s;
  s.cfg.size = (c.U64("size", 64ull << 20) + kPageSize - 1) & ~(kPageSize - 1);
  if (s.cfg.size == 0 || s.cfg.size > (16ull << 30)) throw UsageError{"--size must be in (0, 16G]"};
  s.cfg.vmas = c.U64("vmas", 16);
  if (s.cfg.vmas < 1 || s.cfg.vmas > 60000) throw UsageError{"--vmas must be 1..60000"};
  const std::string touch = c.args.Get("touch", "1");
  char* end = nullptr;
  s.cfg.touch = strtod(touch.c_str(), &end);
  if (touch.empty() || *end != '\0' || !(s.cfg.touch >= 0 && s.cfg.touch <= 1))
    throw UsageError{"--touch: a fraction in [0, 1], not '" + touch + "'"};
  const uint64_t threads = c.U64("parent-threads", 0);
  if (threads > 256) throw UsageError{"--parent-threads must be 0..256"};
  s.cfg.parent_threads = static_cast<int>(threads);
  std::string dur = c.args.Get("duration", "2s");
  auto seconds = client::ParseDurationSeconds(dur);
  if (!seconds) throw UsageError{"--duration: want e.g. 2s, 500ms; got '" + dur + "'"};
  s.cfg.seconds = *seconds;
  std::vector<std::string> profiles = ProfilesToRun(c, ProfileOption(c));
  for (const std::string& p : profiles)
    if (std::string e = bench::CheckProfile(p.empty() ? "linux-6.15" : p); !e.empty()) throw UsageError{e};
  s.profiles = WithForkSwitch(profiles, s.cfg.parent_threads);
  s.progress = !c.args.Flag("quiet");
  s.native = !c.args.Flag("skip-native");
  const ForkFigures f = MeasureFork(s, c.err);
  c.out << (c.json ? ForkFiguresJson(s, f).dump() + "\n" : ForkFiguresText(s, f));
  return BenchExit(c, f.error);
}

}  // namespace vmspace::cli
