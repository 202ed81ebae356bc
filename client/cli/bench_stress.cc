// `vmspace bench stress`: the seed-004 mmap/munmap stress on one transport, then the same
// sequence on the kernel; --compare and --scaling are bench_stress_compare.cc and
// bench_stress_scaling.cc.
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

}  // namespace

stress::StressStats RunOurStress(const Ctx& c, const stress::StressConfig& cfg, const std::string& transport,
                                 int batch, int inflight, stress::Progress* progress) {
  if (transport == "inprocess") return stress::RunEngineStress(cfg, progress);
  if (transport == "unary") return stress::RunUnaryStress(cfg, c.client, progress);
  return stress::RunStreamStress(cfg, c.client, batch, inflight, progress);
}

int CmdBenchStress(Ctx& c) {
  stress::StressConfig cfg;
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
  std::string transport = c.args.Get("transport", "inprocess");
  if (transport != "inprocess" && transport != "unary" && transport != "stream") {
    throw UsageError{"--transport must be inprocess, unary or stream"};
  }
  uint64_t batch = c.U64("batch", harness::kDefaultBatch);
  uint64_t inflight = c.U64("inflight", 4);
  if (batch < 1 || batch > 1000000) throw UsageError{"--batch must be 1..1000000"};
  if (inflight < 1 || inflight > 4096) throw UsageError{"--inflight must be 1..4096"};
  cfg.locking_profile = ProfileOption(c);
  bool progress_on = !c.args.Flag("quiet");
  bool native_on = !c.args.Flag("skip-native");
  const uint64_t repeat = c.U64("repeat", 1);
  if (repeat < 1 || repeat > 100) throw UsageError{"--repeat must be 1..100"};
  if (c.args.Has("plot") && !c.args.Has("compare")) throw UsageError{"--plot needs --compare (a chart of the profiles)"};
  if (c.args.Flag("scaling")) {
    if (c.args.Has("compare")) throw UsageError{"--scaling and --compare do not go together (scale one profile)"};
    if (cfg.clients < 2) throw UsageError{"--scaling needs --clients C with C >= 2 (1 client against C)"};
    if (c.args.Flag("seed-table")) throw UsageError{"--seed-table needs --compare (the seed's table of profiles)"};
    if (!cfg.locking_profile.empty()) {
      if (std::string e = bench::CheckProfile(cfg.locking_profile); !e.empty()) throw UsageError{"--profile: " + e};
    }
    return BenchStressScaling(c, cfg, transport, static_cast<int>(batch), static_cast<int>(inflight), progress_on,
                              native_on, static_cast<int>(repeat));
  }
  if (c.args.Has("compare")) {
    return BenchStressCompare(c, cfg, transport, static_cast<int>(batch), static_cast<int>(inflight), progress_on,
                              native_on, static_cast<int>(repeat));
  }
  if (c.args.Has("repeat")) throw UsageError{"--repeat needs --compare or --scaling (repetitions of the runs and the kernel's)"};
  uint64_t total = cfg.rounds * static_cast<uint64_t>(cfg.clients);

  stress::StressStats run;
  {
    stress::Progress progress;
    ProgressPrinter pp(c.err, progress_on, transport, &progress, total);
    run = RunOurStress(c, cfg, transport, static_cast<int>(batch), static_cast<int>(inflight), &progress);
  }
  std::optional<stress::StressStats> native;
  if (native_on && run.ok()) {
    stress::Progress* progress = stress::NewSharedProgress();
    ProgressPrinter pp(c.err, progress_on, "native", progress, total);
    native = stress::RunNativeStress(cfg, progress);
  }
  std::optional<double> ratio;
  if (native && native->ok() && native->rounds_per_sec() > 0) {
    ratio = run.rounds_per_sec() / native->rounds_per_sec();
  }
  std::string error = !run.ok() ? run.error : (native && !native->ok()) ? "native: " + native->error : "";

  if (c.json) {
    Json j;
    j["workload"] = "seed-004";
    j["transport"] = transport;
    if (transport == "unary" || transport == "stream") j["target"] = c.client.target;
    j["rounds_per_client"] = cfg.rounds;
    j["clients"] = cfg.clients;
    j["shared_space"] = cfg.shared_space;
    j["page_fault"] = cfg.page_fault;
    j["seed"] = cfg.seed;
    j["stride"] = cfg.stride;
    j["locking_profile"] = cfg.locking_profile.empty() ? Json(nullptr) : Json(cfg.locking_profile);
    if (transport == "stream") {
      j["batch"] = batch;
      j["inflight"] = inflight;
    }
    Json stats = StatsJson(run);
    for (auto& [k, v] : stats.items()) j[k] = v;
    if (transport == "stream") {
      j["messages"] = run.messages;
      uint64_t ops = run.mmaps + run.munmaps + run.accesses;
      j["ops_per_message"] = run.messages ? static_cast<double>(ops) / static_cast<double>(run.messages) : 0.0;
      j["waits"] = run.waits;
    }
    j["addr_hash"] = cfg.shared_space ? Json(nullptr) : Json(Hex(run.addr_hash));
    j["native"] = native ? StatsJson(*native) : Json(nullptr);
    j["ratio_vs_native"] = ratio ? Json(*ratio) : Json(nullptr);
    j["error"] = error.empty() ? Json(nullptr) : Json(error);
    c.out << j.dump() << "\n";
  } else if (run.ok() || run.rounds > 0) {  // (a run that never started prints only its error)
    std::ostringstream o;
    o << "seed-004 stress: transport " << transport;
    if (transport == "stream") o << " (batch " << batch << " ops, " << inflight << " in flight)";
    if (transport != "inprocess") o << " to " << c.client.target;
    o << "; " << cfg.clients << " client" << (cfg.clients > 1 ? "s" : "") << " ("
      << (cfg.shared_space ? "one shared space" : "own space each") << "), " << cfg.rounds
      << " rounds each, page faults " << (cfg.page_fault ? "on" : "off") << ", seed " << cfg.seed;
    if (!cfg.locking_profile.empty()) o << ", locking profile " << cfg.locking_profile;
    o << "\n";
    char line[256];
    snprintf(line, sizeof line, "%-20s %9s %12s %12s %12s %12s %12s %10s\n", "", "time(s)", "rounds/s",
             "mmap/s", "munmap/s", "access/s", "ops/s", "faults");
    o << line;
    auto row = [&](const std::string& name, const stress::StressStats& s) {
      uint64_t ops = s.mmaps + s.munmaps + s.accesses;
      snprintf(line, sizeof line, "%-20s %9.3f %12.0f %12.0f %12.0f %12.0f %12.0f %10llu\n", name.c_str(),
               s.seconds, s.rounds_per_sec(), Rate(s.mmaps, s.seconds), Rate(s.munmaps, s.seconds),
               Rate(s.accesses, s.seconds), Rate(ops, s.seconds), static_cast<unsigned long long>(s.faults));
      o << line;
    };
    row("vmspace " + transport, run);
    if (native) row("native (kernel)", *native);
    o << "ops: " << run.mmaps << " mmap, " << run.munmaps << " munmap, " << run.accesses << " access in "
      << run.rounds << " rounds (+" << run.setup_mmaps << " untimed setup mmaps)\n";
    if (transport == "stream") {
      uint64_t ops = run.mmaps + run.munmaps + run.accesses;
      snprintf(line, sizeof line, "stream: %llu messages, %.1f ops/message, %llu waits for an unanswered mmap\n",
               static_cast<unsigned long long>(run.messages),
               run.messages ? static_cast<double>(ops) / static_cast<double>(run.messages) : 0.0,
               static_cast<unsigned long long>(run.waits));
      o << line;
    }
    if (ratio) {
      if (*ratio >= 1) {
        snprintf(line, sizeof line, "ratio vs native: %.4f (vmspace is %.2fx the kernel's rounds/s)\n", *ratio, *ratio);
      } else {
        snprintf(line, sizeof line, "ratio vs native: %.4f (the kernel is %.1fx faster)\n", *ratio,
                 *ratio > 0 ? 1.0 / *ratio : 0.0);
      }
      o << line;
    }
    if (!cfg.shared_space) o << "addr hash: " << Hex(run.addr_hash) << "\n";
    c.out << o.str();
  }
  if (!error.empty()) {
    c.err << "vmspace bench stress: " << error << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace vmspace::cli
