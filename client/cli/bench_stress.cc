// SPDX-License-Identifier: Apache-2.0
// `vmspace bench stress`: the seed-004 mmap/munmap stress on one transport, then the same
// sequence on the kernel, measured into StressFigures and rendered as JSON or text;
// --compare and --scaling are bench_stress_compare.cc and bench_stress_scaling.cc.
#include "cli/commands.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/bench.h"
#include "lib/harness_grpc.h"
#include "lib/stress_grpc.h"

namespace vmspace::cli {

namespace {

/// Prints progress lines on `err` every 2 s while a run lasts.
class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream& err, bool enabled, std::string label, stress::Progress* p, uint64_t total)
      : err_(err), label_(std::move(label)), p_(p), total_(total) {
    if (enabled && p_ != nullptr) thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressPrinter() { Stop(); }
  void Stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::seconds(2), [&] { return stop_; })) {
      uint64_t done = p_->rounds.load(std::memory_order_relaxed);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      char line[200];
      snprintf(line, sizeof line, "vmspace bench: %s: %llu/%llu rounds (%.1f%%), %.0f rounds/s\n",
               label_.c_str(), static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_),
               total_ ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 0.0,
               s > 0 ? static_cast<double>(done) / s : 0.0);
      err_ << line << std::flush;
    }
  }

  std::ostream& err_;
  std::string label_;
  stress::Progress* p_;
  uint64_t total_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

/// The figures of one `bench stress` run: ours, the kernel's (not run with --skip-native
/// or when ours failed), ours / the kernel's rounds/s, the first failure ("" if none).
struct StressFigures {
  stress::StressStats ours;
  std::optional<stress::StressStats> native;
  std::optional<double> ratio;
  std::string error;
};

StressFigures MeasureStress(const StressSetup& s, std::ostream& err) {
  const uint64_t total = s.cfg.rounds * static_cast<uint64_t>(s.cfg.clients);
  StressFigures f;
  {
    stress::Progress progress;
    ProgressPrinter pp(err, s.progress, s.transport, &progress, total);
    f.ours = RunOurStress(s, s.cfg, &progress);
  }
  if (s.native && f.ours.ok()) {
    stress::Progress* progress = stress::NewSharedProgress();
    ProgressPrinter pp(err, s.progress, "native", progress, total);
    f.native = stress::RunNativeStress(s.cfg, progress);
  }
  if (f.native && f.native->ok() && f.native->rounds_per_sec() > 0) {
    f.ratio = f.ours.rounds_per_sec() / f.native->rounds_per_sec();
  }
  f.error = !f.ours.ok() ? f.ours.error : (f.native && !f.native->ok()) ? "native: " + f.native->error : "";
  return f;
}

/// Ops per Batch message of a stream run.
double OpsPerMessage(const stress::StressStats& r) {
  const uint64_t ops = r.mmaps + r.munmaps + r.accesses;
  return r.messages ? static_cast<double>(ops) / static_cast<double>(r.messages) : 0.0;
}

Json StressFiguresJson(const StressSetup& s, const StressFigures& f) {
  const stress::StressConfig& cfg = s.cfg;
  Json j = StressSetupJson(s);
  j["locking_profile"] = cfg.locking_profile.empty() ? Json(nullptr) : Json(cfg.locking_profile);
  if (s.transport == "stream") {
    j["batch"] = s.batch;
    j["inflight"] = s.inflight;
  }
  Json stats = StatsJson(f.ours);
  for (auto& [k, v] : stats.items()) j[k] = v;
  if (s.transport == "stream") {
    j["messages"] = f.ours.messages;
    j["ops_per_message"] = OpsPerMessage(f.ours);
    j["waits"] = f.ours.waits;
  }
  j["addr_hash"] = cfg.shared_space ? Json(nullptr) : Json(Hex(f.ours.addr_hash));
  j["native"] = f.native ? StatsJson(*f.native) : Json(nullptr);
  j["ratio_vs_native"] = OptJson(f.ratio);
  j["error"] = f.error.empty() ? Json(nullptr) : Json(f.error);
  return j;
}

std::string StressFiguresText(const StressSetup& s, const StressFigures& f) {
  const stress::StressConfig& cfg = s.cfg;
  const stress::StressStats& run = f.ours;
  std::ostringstream o;
  o << "seed-004 stress: transport " << s.transport;
  if (s.transport == "stream") o << " (batch " << s.batch << " ops, " << s.inflight << " in flight)";
  if (s.transport != "inprocess") o << " to " << s.client.target;
  o << "; " << cfg.clients << " client" << (cfg.clients > 1 ? "s" : "") << " ("
    << (cfg.shared_space ? "one shared space" : "own space each") << "), " << cfg.rounds
    << " rounds each, page faults " << (cfg.page_fault ? "on" : "off") << ", seed " << cfg.seed;
  if (!cfg.locking_profile.empty()) o << ", locking profile " << cfg.locking_profile;
  o << "\n";
  char line[256];
  snprintf(line, sizeof line, "%-20s %9s %12s %12s %12s %12s %12s %10s\n", "", "time(s)", "rounds/s",
           "mmap/s", "munmap/s", "access/s", "ops/s", "faults");
  o << line;
  auto row = [&](const std::string& name, const stress::StressStats& r) {
    uint64_t ops = r.mmaps + r.munmaps + r.accesses;
    snprintf(line, sizeof line, "%-20s %9.3f %12.0f %12.0f %12.0f %12.0f %12.0f %10llu\n", name.c_str(),
             r.seconds, r.rounds_per_sec(), Rate(r.mmaps, r.seconds), Rate(r.munmaps, r.seconds),
             Rate(r.accesses, r.seconds), Rate(ops, r.seconds), static_cast<unsigned long long>(r.faults));
    o << line;
  };
  row("vmspace " + s.transport, run);
  if (f.native) row("native (kernel)", *f.native);
  o << "ops: " << run.mmaps << " mmap, " << run.munmaps << " munmap, " << run.accesses << " access in "
    << run.rounds << " rounds (+" << run.setup_mmaps << " untimed setup mmaps)\n";
  if (s.transport == "stream") {
    snprintf(line, sizeof line, "stream: %llu messages, %.1f ops/message, %llu waits for an unanswered mmap\n",
             static_cast<unsigned long long>(run.messages), OpsPerMessage(run),
             static_cast<unsigned long long>(run.waits));
    o << line;
  }
  if (const std::optional<double>& ratio = f.ratio) {
    if (*ratio >= 1) {
      snprintf(line, sizeof line, "ratio vs native: %.4f (vmspace is %.2fx the kernel's rounds/s)\n", *ratio, *ratio);
    } else {
      snprintf(line, sizeof line, "ratio vs native: %.4f (the kernel is %.1fx faster)\n", *ratio,
               *ratio > 0 ? 1.0 / *ratio : 0.0);
    }
    o << line;
  }
  if (!cfg.shared_space) o << "addr hash: " << Hex(run.addr_hash) << "\n";
  return o.str();
}

}  // namespace

stress::StressStats RunOurStress(const StressSetup& s, const stress::StressConfig& cfg, stress::Progress* progress) {
  if (s.transport == "inprocess") return stress::RunEngineStress(cfg, progress);
  if (s.transport == "unary") return stress::RunUnaryStress(cfg, s.client, progress);
  return stress::RunStreamStress(cfg, s.client, s.batch, s.inflight, progress);
}

Json StressSetupJson(const StressSetup& s) {
  const stress::StressConfig& cfg = s.cfg;
  Json j;
  j["workload"] = "seed-004";
  j["transport"] = s.transport;
  if (s.transport != "inprocess") j["target"] = s.client.target;
  j["rounds_per_client"] = cfg.rounds;
  j["clients"] = cfg.clients;
  j["shared_space"] = cfg.shared_space;
  j["page_fault"] = cfg.page_fault;
  j["seed"] = cfg.seed;
  j["stride"] = cfg.stride;
  return j;
}

int CmdBenchStress(Ctx& c) {
  StressSetup s;
  stress::StressConfig& cfg = s.cfg;
  cfg.rounds = c.U64("rounds", 100000);
  uint64_t clients = c.U64("clients", 1);
  if (clients < 1 || clients > 1024) throw UsageError{"--clients must be 1..1024"};
  cfg.clients = static_cast<int>(clients);
  cfg.shared_space = c.args.Flag("shared-space");
  cfg.page_fault = c.args.Flag("page-fault");
  uint64_t seed = c.U64("seed", 1);
  if (seed > 0xffffffffull) throw UsageError{"--seed must fit in 32 bits"};
  cfg.seed = static_cast<uint32_t>(seed);
  cfg.stride = c.U64("stride", 128);
  if (cfg.stride == 0) throw UsageError{"--stride must be > 0"};
  s.transport = c.args.Get("transport", "inprocess");
  if (s.transport != "inprocess" && s.transport != "unary" && s.transport != "stream") {
    throw UsageError{"--transport must be inprocess, unary or stream"};
  }
  s.client = c.client;
  uint64_t batch = c.U64("batch", harness::kDefaultBatch);
  uint64_t inflight = c.U64("inflight", 4);
  if (batch < 1 || batch > 1000000) throw UsageError{"--batch must be 1..1000000"};
  if (inflight < 1 || inflight > 4096) throw UsageError{"--inflight must be 1..4096"};
  s.batch = static_cast<int>(batch);
  s.inflight = static_cast<int>(inflight);
  cfg.locking_profile = ProfileOption(c);
  s.progress = !c.args.Flag("quiet");
  s.native = !c.args.Flag("skip-native");
  const uint64_t repeat = c.U64("repeat", 1);
  if (repeat < 1 || repeat > 100) throw UsageError{"--repeat must be 1..100"};
  s.repeat = static_cast<int>(repeat);
  if (c.args.Has("sweep")) {
    if (c.args.Flag("scaling") || c.args.Has("repeat") || c.args.Has("clients"))
      throw UsageError{"--sweep gives the task counts: leave --clients, --scaling and --repeat out (its point at C "
                       "tasks over its point at 1 is --scaling's ratio)"};
    SweepSpec sw;
    sw.workload = "stress";
    sw.unit = "rounds/s";
    sw.mode = cfg.shared_space ? "threads (one shared space; the kernel: threads of one process)"
                               : "processes (a space each; the kernel: a process each)";
    sw.setting = std::to_string(cfg.rounds) + " rounds per task, transport " + s.transport + ", page faults " +
                 (cfg.page_fault ? "on" : "off");
    sw.tasks = ParseSweep(c.args.Get("sweep"));
    sw.profiles = ProfilesToRun(c, cfg.locking_profile);
    sw.native = s.native;
    sw.progress = s.progress;
    sw.ours = [s](const std::string& p, int tasks) {
      stress::StressConfig one = s.cfg;
      one.locking_profile = p;
      one.clients = tasks;
      const stress::StressStats r = RunOurStress(s, one);
      return SweepRun{r.rounds_per_sec(), r.error};
    };
    sw.kernel = [s](int tasks) {
      stress::StressConfig one = s.cfg;
      one.clients = tasks;
      const stress::StressStats r = stress::RunNativeStress(one);
      return SweepRun{r.rounds_per_sec(), r.error};
    };
    return RunSweep(c, sw);
  }
  if (c.args.Has("plot") && !c.args.Has("compare") && !c.args.Flag("scaling"))
    throw UsageError{"--plot needs --compare (a chart of the profiles) or --scaling (a chart of the repetitions)"};
  if (c.args.Flag("scaling")) {
    if (c.args.Has("compare")) throw UsageError{"--scaling and --compare do not go together (scale one profile)"};
    if (cfg.clients < 2) throw UsageError{"--scaling needs --clients C with C >= 2 (1 client against C)"};
    if (c.args.Flag("seed-table")) throw UsageError{"--seed-table needs --compare (the seed's table of profiles)"};
    if (!cfg.locking_profile.empty()) {
      if (std::string e = bench::CheckProfile(cfg.locking_profile); !e.empty()) throw UsageError{"--profile: " + e};
    }
    return BenchStressScaling(c, s);
  }
  if (c.args.Has("compare")) return BenchStressCompare(c, s);
  if (c.args.Has("repeat")) throw UsageError{"--repeat needs --compare or --scaling (repetitions of the runs and the kernel's)"};

  const StressFigures f = MeasureStress(s, c.err);
  if (c.json) c.out << StressFiguresJson(s, f).dump() << "\n";
  else if (f.ours.ok() || f.ours.rounds > 0) c.out << StressFiguresText(s, f);  // (a run that never started prints only its error)
  return BenchExit(c, f.error);
}

}  // namespace vmspace::cli
