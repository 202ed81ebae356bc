#include "cli/cli.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iomanip>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "lib/client.h"
#include "lib/parse.h"
#include "lib/seed004.h"
#include "lib/stress_grpc.h"

namespace vmspace::cli {
namespace {

using client::Client;
using client::ClientOptions;
using client::Hex;
using Json = nlohmann::ordered_json;
namespace v1 = ::vmspace::v1;

/// A usage error: printed with the command's usage, exit code 2.
struct UsageError {
  std::string what;
};

/// Everything a subcommand needs.
struct Ctx {
  Ctx(std::string cmd, std::ostream& o, std::ostream& e) : command(std::move(cmd)), out(o), err(e) {}
  std::string command;  // "mmap", "bench stress"
  ParsedArgs args;
  std::ostream& out;
  std::ostream& err;
  bool json = false;
  ClientOptions client;

  uint64_t U64(const std::string& name, std::optional<uint64_t> def = std::nullopt) const {
    if (!args.Has(name)) {
      if (def) return *def;
      throw UsageError{"--" + name + " is required"};
    }
    auto v = client::ParseU64(args.Get(name));
    if (!v) throw UsageError{"--" + name + ": not a number: '" + args.Get(name) + "'"};
    return *v;
  }
  /// The space id: --space, or the first positional argument.
  uint64_t Space() const {
    std::string s;
    if (args.Has("space")) s = args.Get("space");
    else if (!args.positional.empty()) s = args.positional[0];
    else throw UsageError{"a space id is required (--space ID or first argument)"};
    auto v = client::ParseU64(s);
    if (!v) throw UsageError{"bad space id '" + s + "'"};
    return *v;
  }
  int Prot(const std::string& name, const char* def) const {
    std::string s = args.Get(name, def);
    auto v = client::ParseProt(s);
    if (!v) throw UsageError{"--" + name + ": bad protection '" + s + "' (e.g. rw, r-x, none, 3)"};
    return *v;
  }
  int MapFlags(const std::string& name, const char* def) const {
    std::string s = args.Get(name, def);
    auto v = client::ParseMapFlags(s);
    if (!v) throw UsageError{"--" + name + ": bad flags '" + s + "' (e.g. private,anonymous,fixed or 0x22)"};
    return *v;
  }
  v1::AccessType Access(const char* def) const {
    std::string s = args.Get("access", def);
    auto v = client::ParseAccessType(s);
    if (!v) throw UsageError{"--access: bad access type '" + s + "' (read, write, exec)"};
    return static_cast<v1::AccessType>(*v);
  }
};

struct Command {
  std::string name;
  std::string synopsis;  // after "vmspace NAME "
  std::string summary;
  std::vector<OptionSpec> options;
  std::function<int(Ctx&)> run;
};

const std::vector<OptionSpec>& GlobalOptions() {
  static const std::vector<OptionSpec> opts = {
      {"target", "HOST:PORT", "vmspaced address (default 127.0.0.1:50051)"},
      {"timeout", "SECONDS", "deadline of each call (default 10)"},
      {"json", "", "print one JSON object instead of text"},
      {"help", "", "show this help"},
  };
  return opts;
}

// ---- output helpers ----

/// Prints a failed call: JSON error object on `out` with --json, and always one line on
/// `err` naming the errno. Returns the exit code.
int Fail(Ctx& c, const client::Error& e) {
  if (c.json) {
    Json j;
    j["error"] = {{"code", client::StatusCodeName(e.code)},
                  {"errno", e.err},
                  {"errno_name", e.errno_name},
                  {"name", e.Name()},
                  {"message", e.message}};
    c.out << j.dump() << "\n";
  }
  c.err << "vmspace " << c.command << ": " << e.ToString() << "\n";
  return kExitFailed;
}

std::string StripPrefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string OutcomeName(v1::FaultOutcome o) { return Lower(StripPrefix(v1::FaultOutcome_Name(o), "FAULT_OUTCOME_")); }
std::string LockPathName(v1::LockPath p) { return Lower(StripPrefix(v1::LockPath_Name(p), "LOCK_PATH_")); }
bool IsSignal(v1::FaultOutcome o) { return o == v1::FAULT_OUTCOME_SIGSEGV || o == v1::FAULT_OUTCOME_SIGBUS; }

Json FaultJson(const v1::FaultInfo& f) {
  Json j;
  j["outcome"] = OutcomeName(f.outcome());
  if (f.si_code() != v1::SI_CODE_NONE) j["si_code"] = v1::SiCode_Name(f.si_code());
  else j["si_code"] = nullptr;
  j["si_addr"] = f.si_addr();
  j["si_addr_hex"] = Hex(f.si_addr());
  j["lock_path"] = LockPathName(f.lock_path());
  j["vma_lock_retry"] = f.vma_lock_retry();
  return j;
}

std::string FaultText(const v1::FaultInfo& f) {
  std::string s = OutcomeName(f.outcome());
  if (IsSignal(f.outcome())) {
    s = (f.outcome() == v1::FAULT_OUTCOME_SIGSEGV ? "SIGSEGV" : "SIGBUS");
    if (f.si_code() != v1::SI_CODE_NONE) s += " " + v1::SiCode_Name(f.si_code());
    s += " at " + Hex(f.si_addr());
  }
  if (f.lock_path() != v1::LOCK_PATH_NONE) s += " (" + LockPathName(f.lock_path()) + ")";
  if (f.vma_lock_retry()) s += " after a VMA-lock retry";
  return s;
}

/// `stop` of an Access/Read/Write response: null unless the walk stopped early.
Json StopJson(const v1::FaultInfo& stop) {
  if (stop.outcome() == v1::FAULT_OUTCOME_NONE) return nullptr;
  return FaultJson(stop);
}

void HexDump(std::ostream& out, uint64_t addr, const std::string& data) {
  char line[128];
  for (size_t off = 0; off < data.size(); off += 16) {
    snprintf(line, sizeof line, "%016llx: ", static_cast<unsigned long long>(addr + off));
    std::string text = line;
    std::string ascii;
    for (size_t i = 0; i < 16; ++i) {
      if (off + i < data.size()) {
        unsigned char ch = static_cast<unsigned char>(data[off + i]);
        snprintf(line, sizeof line, "%02x", ch);
        text += line;
        ascii += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '.';
      } else {
        text += "  ";
      }
      if (i % 2 == 1) text += ' ';
    }
    out << text << ' ' << ascii << "\n";
  }
}

std::string HumanBytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream s;
  if (u == 0) s << b << " B";
  else s << std::fixed << std::setprecision(1) << v << ' ' << units[u];
  return s.str();
}

// ---- subcommands ----

int CmdCreate(Ctx& c) {
  v1::SpaceSettings s;
  if (c.args.Has("max-map-count")) s.set_max_map_count(c.U64("max-map-count"));
  if (c.args.Has("mmap-base")) s.set_mmap_base(c.U64("mmap-base"));
  if (c.args.Has("mmap-min-addr")) s.set_mmap_min_addr(c.U64("mmap-min-addr"));
  if (c.args.Has("dac-mmap-min-addr")) s.set_dac_mmap_min_addr(c.U64("dac-mmap-min-addr"));
  if (c.args.Has("cap-sys-rawio")) s.set_cap_sys_rawio(c.args.Flag("cap-sys-rawio"));
  s.set_locking_profile(c.args.Get("locking-profile"));
  Client cl(c.client);
  auto r = cl.CreateSpace(s, c.args.Get("label"));
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"space_id", r.value()}}.dump() << "\n";
  else c.out << r.value() << "\n";
  return kExitOk;
}

int CmdDestroy(Ctx& c) {
  uint64_t space = c.Space();
  Client cl(c.client);
  auto r = cl.DestroySpace(space);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}, {"space_id", space}}.dump() << "\n";
  else c.out << "destroyed space " << space << "\n";
  return kExitOk;
}

int CmdList(Ctx& c) {
  Client cl(c.client);
  auto r = cl.ListSpaces();
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) {
    Json arr = Json::array();
    for (const v1::SpaceInfo& s : r.value()) {
      Json sj = {{"space_id", s.space_id()},
                     {"label", s.label()},
                     {"map_count", s.map_count()},
                     {"total_vm_bytes", s.total_vm_bytes()},
                     {"rss_bytes", s.rss_bytes()},
                     {"pgtable_bytes", s.pgtable_bytes()},
                     {"locking_profile", s.locking_profile()}};
      arr.push_back(std::move(sj));
    }
    c.out << Json{{"spaces", arr}}.dump() << "\n";
    return kExitOk;
  }
  char line[256];
  snprintf(line, sizeof line, "%8s %10s %12s %12s %10s  %-12s %s\n", "ID", "MAPS", "VM", "RSS",
           "PGTABLE", "PROFILE", "LABEL");
  c.out << line;
  for (const v1::SpaceInfo& s : r.value()) {
    snprintf(line, sizeof line, "%8llu %10llu %12s %12s %10s  %-12s %s\n",
             static_cast<unsigned long long>(s.space_id()),
             static_cast<unsigned long long>(s.map_count()), HumanBytes(s.total_vm_bytes()).c_str(),
             HumanBytes(s.rss_bytes()).c_str(), HumanBytes(s.pgtable_bytes()).c_str(),
             s.locking_profile().empty() ? "-" : s.locking_profile().c_str(), s.label().c_str());
    c.out << line;
  }
  return kExitOk;
}

int CmdMmap(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr", 0);
  uint64_t len = c.U64("len");
  int prot = c.Prot("prot", "rw");
  int flags = c.MapFlags("flags", "private,anonymous");
  uint64_t offset = c.U64("offset", 0);
  Client cl(c.client);
  auto r = cl.Mmap(space, addr, len, prot, flags, offset);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"addr", r.value()}, {"addr_hex", Hex(r.value())}}.dump() << "\n";
  else c.out << Hex(r.value()) << "\n";
  return kExitOk;
}

int CmdMunmap(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  Client cl(c.client);
  auto r = cl.Munmap(space, addr, len);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}

int CmdMprotect(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  if (!c.args.Has("prot")) throw UsageError{"--prot is required"};
  int prot = c.Prot("prot", "");
  Client cl(c.client);
  auto r = cl.Mprotect(space, addr, len, prot);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}

int CmdFault(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  v1::AccessType access = c.Access("read");
  Client cl(c.client);
  auto r = cl.Fault(space, addr, access);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << FaultJson(r.value()).dump() << "\n";
  else c.out << FaultText(r.value()) << "\n";
  return kExitOk;
}

int CmdAccess(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  uint64_t stride = c.U64("stride", 1);
  v1::AccessType access = c.Access("read");
  Client cl(c.client);
  auto r = cl.Access(space, addr, len, stride, access);
  if (!r.ok()) return Fail(c, r.error());
  const v1::AccessResponse& a = r.value();
  if (c.json) {
    c.out << Json{{"accesses", a.accesses()},
                  {"faults", a.faults()},
                  {"major_faults", a.major_faults()},
                  {"stop", StopJson(a.stop())}}
                 .dump()
          << "\n";
  } else {
    c.out << a.accesses() << " accesses, " << a.faults() << " faults (" << a.major_faults()
          << " major)";
    if (a.stop().outcome() != v1::FAULT_OUTCOME_NONE) c.out << "; stopped: " << FaultText(a.stop());
    c.out << "\n";
  }
  return kExitOk;
}

int CmdRead(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  Client cl(c.client);
  auto r = cl.ReadMemory(space, addr, len);
  if (!r.ok()) return Fail(c, r.error());
  const v1::ReadMemoryResponse& m = r.value();
  if (c.json) {
    c.out << Json{{"addr", addr},
                  {"len", m.data().size()},
                  {"data_hex", client::HexBytes(m.data())},
                  {"faults", m.faults()},
                  {"stop", StopJson(m.stop())}}
                 .dump()
          << "\n";
    return kExitOk;
  }
  if (c.args.Flag("raw")) {
    c.out.write(m.data().data(), static_cast<std::streamsize>(m.data().size()));
  } else {
    HexDump(c.out, addr, m.data());
  }
  if (m.stop().outcome() != v1::FAULT_OUTCOME_NONE) {
    c.err << "vmspace read: stopped after " << m.data().size() << " bytes: " << FaultText(m.stop()) << "\n";
  }
  return kExitOk;
}

int CmdWrite(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  int sources = c.args.Has("data") + c.args.Has("hex") + c.args.Has("file");
  if (sources != 1) throw UsageError{"give exactly one of --data, --hex, --file"};
  std::string data;
  if (c.args.Has("data")) {
    data = c.args.Get("data");
  } else if (c.args.Has("hex")) {
    auto d = client::ParseHexBytes(c.args.Get("hex"));
    if (!d) throw UsageError{"--hex: not an even-length hex string"};
    data = *d;
  } else {
    std::ifstream f(c.args.Get("file"), std::ios::binary);
    if (!f) throw UsageError{"--file: cannot open '" + c.args.Get("file") + "'"};
    std::ostringstream ss;
    ss << f.rdbuf();
    data = ss.str();
  }
  Client cl(c.client);
  auto r = cl.WriteMemory(space, addr, data);
  if (!r.ok()) return Fail(c, r.error());
  const v1::WriteMemoryResponse& w = r.value();
  if (c.json) {
    c.out << Json{{"bytes_written", w.bytes_written()}, {"faults", w.faults()}, {"stop", StopJson(w.stop())}}.dump()
          << "\n";
  } else {
    c.out << "wrote " << w.bytes_written() << " of " << data.size() << " bytes, " << w.faults() << " faults";
    if (w.stop().outcome() != v1::FAULT_OUTCOME_NONE) c.out << "; stopped: " << FaultText(w.stop());
    c.out << "\n";
  }
  return kExitOk;
}

int CmdMaps(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t start = c.U64("start", 0);
  uint64_t end = c.U64("end", 0);
  Client cl(c.client);
  auto r = cl.GetMaps(space, start, end);
  if (!r.ok()) return Fail(c, r.error());
  const v1::GetMapsResponse& m = r.value();
  if (c.json) {
    Json vmas = Json::array();
    for (const v1::Vma& v : m.vmas()) {
      Json vj = {{"start", v.start()},
                      {"end", v.end()},
                      {"start_hex", Hex(v.start())},
                      {"end_hex", Hex(v.end())},
                      {"perms", v.perms()},
                      {"vm_flags", v.vm_flags()},
                      {"smaps_vmflags", v.smaps_vmflags()},
                      {"pgoff", v.pgoff()},
                      {"offset", v.offset()},
                      {"dev", v.dev()},
                      {"inode", v.inode()},
                      {"name", v.name()},
                      {"rss_bytes", v.rss_bytes()}};
      vmas.push_back(std::move(vj));
    }
    c.out << Json{{"map_count", m.map_count()}, {"vmas", vmas}, {"maps_text", m.maps_text()}}.dump() << "\n";
    return kExitOk;
  }
  c.out << m.maps_text();
  if (!m.maps_text().empty() && m.maps_text().back() != '\n') c.out << "\n";
  if (c.args.Flag("count")) c.out << "map_count " << m.map_count() << "\n";
  return kExitOk;
}

int CmdPing(Ctx& c) {
  Client cl(c.client);
  auto t0 = std::chrono::steady_clock::now();
  auto r = cl.Ping();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}, {"latency_us", us}}.dump() << "\n";
  else c.out << "ok (" << std::fixed << std::setprecision(0) << us << " us)\n";
  return kExitOk;
}

// ---- bench stress ----

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
  uint64_t batch = c.U64("batch", 64);
  uint64_t inflight = c.U64("inflight", 4);
  if (batch < 1 || batch > 1000000) throw UsageError{"--batch must be 1..1000000"};
  if (inflight < 1 || inflight > 4096) throw UsageError{"--inflight must be 1..4096"};
  cfg.locking_profile = c.args.Get("locking-profile");
  bool progress_on = !c.args.Flag("quiet");
  bool native_on = !c.args.Flag("skip-native");
  uint64_t total = cfg.rounds * static_cast<uint64_t>(cfg.clients);

  stress::StressStats run;
  {
    stress::Progress progress;
    ProgressPrinter pp(c.err, progress_on, transport, &progress, total);
    if (transport == "inprocess") run = stress::RunEngineStress(cfg, &progress);
    else if (transport == "unary") run = stress::RunUnaryStress(cfg, c.client, &progress);
    else run = stress::RunStreamStress(cfg, c.client, static_cast<int>(batch), static_cast<int>(inflight), &progress);
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

// ---- table of commands ----

const std::vector<Command>& Commands() {
  static const std::vector<Command> cmds = {
      {"create", "[options]", "create an empty address space; prints its id",
       {{"label", "TEXT", "free text shown by list (<= 64 bytes)"},
        {"max-map-count", "N", "vm.max_map_count (default 65530)"},
        {"mmap-base", "ADDR", "top of the mmap area (default 0x7ffff7fff000)"},
        {"mmap-min-addr", "ADDR", "effective mmap_min_addr (default 65536)"},
        {"dac-mmap-min-addr", "ADDR", "MAP_FIXED minimum without CAP_SYS_RAWIO (default 4096)"},
        {"cap-sys-rawio", "", "the caller has CAP_SYS_RAWIO"},
        {"locking-profile", "NAME", "locking profile (\"\" = daemon default)"}},
       CmdCreate},
      {"destroy", "SPACE", "destroy a space and free its frames", {{"space", "ID", "the space"}}, CmdDestroy},
      {"list", "", "list spaces with their counters", {}, CmdList},
      {"mmap", "SPACE --len LEN [options]", "mmap(2) anonymous memory; prints the address",
       {{"space", "ID", "the space (or first argument)"},
        {"addr", "ADDR", "hint, or the address with fixed/fixed_noreplace (default 0)"},
        {"len", "LEN", "length in bytes (rounded up to pages)"},
        {"prot", "PROT", "rw, r-x, none, read,write or a number (default rw)"},
        {"flags", "FLAGS", "private,anonymous,fixed,... or a number (default private,anonymous)"},
        {"offset", "OFF", "file offset (page aligned; ignored for anonymous)"}},
       CmdMmap},
      {"munmap", "SPACE --addr ADDR --len LEN", "munmap(2)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}},
       CmdMunmap},
      {"mprotect", "SPACE --addr ADDR --len LEN --prot PROT", "mprotect(2)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}, {"prot", "PROT", "rw, r-x, none, ... or a number"}},
       CmdMprotect},
      {"fault", "SPACE --addr ADDR [--access read|write|exec]", "one simulated CPU access of one byte",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "byte address"},
        {"access", "TYPE", "read (default), write or exec"}},
       CmdFault},
      {"access", "SPACE --addr ADDR --len LEN [--stride N] [--access TYPE]",
       "touch one byte every STRIDE bytes of a range",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"}, {"len", "LEN", "length"},
        {"stride", "N", "bytes between touches (default 1)"}, {"access", "TYPE", "read (default), write or exec"}},
       CmdAccess},
      {"read", "SPACE --addr ADDR --len LEN [--raw]", "read memory (hex dump, or raw bytes with --raw)",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"}, {"len", "LEN", "bytes"},
        {"raw", "", "write the bytes as they are to stdout"}},
       CmdRead},
      {"write", "SPACE --addr ADDR (--data TEXT | --hex HEX | --file PATH)", "write memory",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start"},
        {"data", "TEXT", "the bytes of TEXT"}, {"hex", "HEX", "bytes in hex, e.g. 00ff10"},
        {"file", "PATH", "the bytes of a file"}},
       CmdWrite},
      {"maps", "SPACE [--start ADDR] [--end ADDR]", "print /proc/PID/maps of a space",
       {{"space", "ID", "the space (or first argument)"}, {"start", "ADDR", "only VMAs overlapping [start, end)"},
        {"end", "ADDR", "0 = no limit"}, {"count", "", "also print the space's map_count"}},
       CmdMaps},
      {"ping", "", "check that the daemon answers", {}, CmdPing},
      {"bench stress", "[options]",
       "the seed-004 mmap/munmap stress, compared with the kernel (native run in a forked child)",
       {{"rounds", "N", "rounds per client (default 100000)"},
        {"clients", "C", "concurrent clients, each in its own space (default 1)"},
        {"shared-space", "", "all clients in one space (native: threads of one process)"},
        {"page-fault", "", "write every 128th byte of a mapping before unmapping it"},
        {"seed", "N", "srand() seed; client c uses seed + c (default 1, as the C program)"},
        {"stride", "N", "bytes between writes with --page-fault (default 128)"},
        {"transport", "T", "inprocess (engine linked in, default), unary or stream"},
        {"batch", "N", "stream: ops per Batch message (default 64)"},
        {"inflight", "N", "stream: messages in flight per client (default 4)"},
        {"locking-profile", "P", "engine locking profile of the spaces: linux-6.0|6.1|6.4|6.6[,switch=v] (default: the engine's/daemon's)"},
        {"skip-native", "", "do not run the native comparison"},
        {"quiet", "", "no progress lines on stderr"}},
       CmdBenchStress},
  };
  return cmds;
}

std::string Usage() {
  std::ostringstream o;
  o << "usage: vmspace [--target HOST:PORT] [--timeout S] [--json] COMMAND [options]\n\ncommands:\n";
  for (const Command& c : Commands()) o << "  " << std::left << std::setw(14) << c.name << c.summary << "\n";
  o << "\nglobal options (anywhere on the line):\n";
  for (const OptionSpec& s : GlobalOptions()) {
    std::string lhs = "--" + s.name + (s.arg.empty() ? "" : " " + s.arg);
    o << "  " << std::left << std::setw(22) << lhs << s.help << "\n";
  }
  o << "\nNumbers take 0x hex and K/M/G suffixes. `vmspace COMMAND --help` lists a command's options.\n"
       "Exit status: 0 ok, 1 the call failed (the errno name is printed), 2 usage error.\n";
  return o.str();
}

std::string CommandUsage(const Command& c) {
  std::ostringstream o;
  o << "usage: vmspace " << c.name << " " << c.synopsis << "\n  " << c.summary << "\n";
  if (!c.options.empty()) o << "options:\n";
  for (const OptionSpec& s : c.options) {
    std::string lhs = "--" + s.name + (s.arg.empty() ? "" : " " + s.arg);
    o << "  " << std::left << std::setw(22) << lhs << s.help << "\n";
  }
  o << "global options: --target HOST:PORT, --timeout S, --json\n";
  return o.str();
}

}  // namespace

std::string ParsedArgs::Get(const std::string& name, const std::string& def) const {
  auto it = values.find(name);
  return it == values.end() ? def : it->second;
}

bool ParsedArgs::Flag(const std::string& name) const {
  auto it = values.find(name);
  return it != values.end() && it->second == "true";
}

std::string ParseArgs(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs,
                      ParsedArgs* out) {
  bool options_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-' || (a[1] != '-' && a != "-h")) {
      out->positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    std::string name = a == "-h" ? "help" : a.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
    if (spec == specs.end()) return "unknown option --" + name;
    if (spec->arg.empty()) {
      std::string v = value.value_or("true");
      if (v == "true" || v == "1" || v == "yes") v = "true";
      else if (v == "false" || v == "0" || v == "no") v = "false";
      else return "--" + name + " takes no value (or true/false), got '" + v + "'";
      out->values[name] = v;
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) return "--" + name + " needs a value (" + spec->arg + ")";
      value = args[++i];
    }
    out->values[name] = *value;
  }
  return "";
}

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // Find the subcommand: the first positional argument (two words for "bench stress"),
  // skipping global options and their values.
  std::vector<std::string> rest;
  std::string name;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (name.empty() && !a.empty() && a[0] != '-') {
      name = a;
      if (name == "bench") {
        if (i + 1 < args.size() && args[i + 1][0] != '-') name += " " + args[++i];
      }
      continue;
    }
    rest.push_back(a);
    if (name.empty() && (a == "--target" || a == "--timeout") && i + 1 < args.size()) rest.push_back(args[++i]);
  }
  if (name.empty() || name == "help") {
    bool asked = name == "help" || std::find(args.begin(), args.end(), "--help") != args.end() ||
                 std::find(args.begin(), args.end(), "-h") != args.end();
    (asked ? out : err) << Usage();
    return asked ? kExitOk : kExitUsage;
  }
  const auto& cmds = Commands();
  auto cmd = std::find_if(cmds.begin(), cmds.end(), [&](const Command& c) { return c.name == name; });
  if (cmd == cmds.end()) {
    err << "vmspace: unknown command '" << name << "'\n\n" << Usage();
    return kExitUsage;
  }
  std::vector<OptionSpec> specs = cmd->options;
  specs.insert(specs.end(), GlobalOptions().begin(), GlobalOptions().end());
  Ctx ctx(cmd->name, out, err);
  std::string perr = ParseArgs(rest, specs, &ctx.args);
  if (!perr.empty()) {
    err << "vmspace " << cmd->name << ": " << perr << "\n" << CommandUsage(*cmd);
    return kExitUsage;
  }
  if (ctx.args.Flag("help")) {
    out << CommandUsage(*cmd);
    return kExitOk;
  }
  size_t max_positional = cmd->synopsis.rfind("SPACE", 0) == 0 ? 1 : 0;
  if (ctx.args.positional.size() > max_positional) {
    err << "vmspace " << cmd->name << ": unexpected argument '" << ctx.args.positional[max_positional] << "'\n"
        << CommandUsage(*cmd);
    return kExitUsage;
  }
  ctx.json = ctx.args.Flag("json");
  ctx.client.target = ctx.args.Get("target", "127.0.0.1:50051");
  if (ctx.args.Has("timeout")) {
    std::string t = ctx.args.Get("timeout");
    char* end = nullptr;
    double s = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || !(s > 0) || s > 1e6) {
      err << "vmspace " << cmd->name << ": --timeout: want seconds > 0, got '" << t << "'\n";
      return kExitUsage;
    }
    ctx.client.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000)));
  }
  try {
    return cmd->run(ctx);
  } catch (const UsageError& e) {
    err << "vmspace " << cmd->name << ": " << e.what << "\n" << CommandUsage(*cmd);
    return kExitUsage;
  }
}

}  // namespace vmspace::cli
