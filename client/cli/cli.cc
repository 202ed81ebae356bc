#include "cli/cli.h"

#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "engine/stats.h"
#include "lib/client.h"
#include "lib/parse.h"
#include "lib/plot.h"
#include "lib/seed004.h"
#include "lib/execl.h"
#include "lib/shmem_dirty.h"
#include "lib/stress_grpc.h"
#include "lib/willitscale.h"
#include "lib/willitscale_grpc.h"

namespace vmspace::cli {
namespace {

using client::Client;
using client::ClientOptions;
using client::Hex;
using Json = nlohmann::ordered_json;
namespace v1 = ::vmspace::v1;

/// Engine event name (EventName) of the pages fault-around mapped (the faulting one included).
constexpr const char* kEventFaultAround = "fault_around_pages";

/// VMA-lock faults redone under mmap_lock, every reason (nullopt without lock figures).
std::optional<uint64_t> Retries(const std::optional<bench::LockFigures>& l) {
  if (!l) return std::nullopt;
  return l->event("vma_lock_retry_file") + l->event("vma_lock_retry_anon_vma");
}

/// A usage error: printed with the command's usage, exit code 2.
struct UsageError {
  std::string what;
};

/// One option of a command. `arg` is the value's placeholder ("ADDR"), or "" for a
/// boolean flag (which also takes --flag=true/false, yes/no, 1/0).
struct OptionSpec {
  std::string name;
  std::string arg;
  std::string help;
};

/// The options of the command being run as CLI11 parsed them (its own and the global
/// ones, which may also have been given before the command). Values stay text; Ctx turns
/// them into numbers, protections etc. (lib/parse.h), so that an error names its option.
class Args {
 public:
  Args(const CLI::App* cmd, const std::map<const CLI::Option*, const bool*>* flags) : cmd_(cmd), flags_(flags) {}
  /// Whether --name was given (for "space": also as the first argument).
  bool Has(const std::string& name) const { return Find(name) != nullptr; }
  /// The value of --name (the last one if repeated), or `def` if not given.
  std::string Get(const std::string& name, const std::string& def = "") const {
    return Has(name) ? Find(name)->as<std::string>() : def;
  }
  /// A boolean flag's value (false if absent).
  bool Flag(const std::string& name) const {
    auto it = Has(name) ? flags_->find(Find(name)) : flags_->end();
    return it != flags_->end() && *it->second;
  }

 private:
  /// The nearest --name that was given: on the command, else on a parent (the global
  /// options are defined on every level). Null if none was given.
  const CLI::Option* Find(const std::string& name) const {
    for (const CLI::App* a = cmd_; a != nullptr; a = a->get_parent()) {
      const CLI::Option* o = a->get_option_no_throw("--" + name);
      if (o != nullptr && o->count() > 0) return o;
    }
    return nullptr;
  }
  const CLI::App* cmd_;
  const std::map<const CLI::Option*, const bool*>* flags_;
};

/// Everything a subcommand needs.
struct Ctx {
  Ctx(std::string cmd, Args a, std::ostream& o, std::ostream& e)
      : command(std::move(cmd)), args(a), out(o), err(e) {}
  std::string command;  // "mmap", "bench stress"
  Args args;
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
  /// The space id: --space, or the first positional argument (one CLI11 option).
  uint64_t Space() const {
    if (!args.Has("space")) throw UsageError{"a space id is required (--space ID or first argument)"};
    std::string s = args.Get("space");
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
      {"target", "HOST:PORT", "vmspaced address (default 127.0.0.1:50051); several daemons (shards): A,B,C or "
                              "shards:NAME:PORT (every address of NAME); calls go to the daemon of their space id"},
      {"timeout", "SECONDS", "deadline of each call (default 10)"},
      {"token", "TOKEN", "bearer token of vmspaced --token-file (default $VMSPACE_TOKEN)"},
      {"tls-ca", "PEM", "connect with TLS: the CA file that signed the daemon's certificate"},
      {"tls-cert", "PEM", "client certificate for mutual TLS (its subject CN is the tenant; with --tls-key)"},
      {"tls-key", "PEM", "private key of --tls-cert"},
      {"json", "", "print one JSON object instead of text"},
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

std::string Upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
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
  if (c.args.Has("shared-fault-completion")) s.set_shared_fault_completion(c.args.Get("shared-fault-completion"));
  if (c.args.Has("i-mmap-scope")) s.set_i_mmap_scope(c.args.Get("i-mmap-scope"));
  s.set_locking_profile(c.args.Get("locking-profile"));
  Client cl(c.client);
  auto r = cl.CreateSpace(s, c.args.Get("label"), c.args.Get("placement-key"));
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
                     {"shard", client::ShardOfSpace(s.space_id())},
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
  snprintf(line, sizeof line, "%16s %5s %10s %12s %12s %10s  %-12s %s\n", "ID", "SHARD", "MAPS", "VM", "RSS",
           "PGTABLE", "PROFILE", "LABEL");
  c.out << line;
  for (const v1::SpaceInfo& s : r.value()) {
    snprintf(line, sizeof line, "%16llu %5u %10llu %12s %12s %10s  %-12s %s\n",
             static_cast<unsigned long long>(s.space_id()), client::ShardOfSpace(s.space_id()),
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
  const uint64_t file = c.U64("file", 0);
  int flags = c.MapFlags("flags", file != 0 ? "private" : "private,anonymous");
  uint64_t offset = c.U64("offset", 0);
  Client cl(c.client);
  auto r = cl.Mmap(space, addr, len, prot, flags, offset, file);
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
    c.out << Json{{"accesses", a.accesses()}, {"faults", a.faults()}, {"stop", StopJson(a.stop())}}.dump() << "\n";
  } else {
    c.out << a.accesses() << " accesses, " << a.faults() << " faults";
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

/// The bytes to write: exactly one of --data TEXT, --hex HEX, --`path_option` PATH.
std::string DataArg(const Ctx& c, const std::string& path_option) {
  int sources = c.args.Has("data") + c.args.Has("hex") + c.args.Has(path_option);
  if (sources != 1) throw UsageError{"give exactly one of --data, --hex, --" + path_option};
  if (c.args.Has("data")) return c.args.Get("data");
  if (c.args.Has("hex")) {
    auto d = client::ParseHexBytes(c.args.Get("hex"));
    if (!d) throw UsageError{"--hex: not an even-length hex string"};
    return *d;
  }
  std::ifstream f(c.args.Get(path_option), std::ios::binary);
  if (!f) throw UsageError{"--" + path_option + ": cannot open '" + c.args.Get(path_option) + "'"};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int CmdWrite(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  const std::string data = DataArg(c, "file");
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

// Each daemon's GetServerInfo: spaces, version, and its memory budget by kind.
int CmdStats(Ctx& c) {
  Client cl(c.client);
  auto r = cl.GetServerInfo();
  if (!r.ok()) return Fail(c, r.error());
  Json all = Json::array();
  for (const v1::GetServerInfoResponse& i : r.value()) {
    Json mem = Json::object();
    for (const v1::MemoryUsage& u : i.memory()) mem[u.kind()] = u.bytes();
    all.push_back(Json{{"shard", i.shard()}, {"version", i.version()}, {"spaces", i.spaces()},
                       {"max_spaces", i.max_spaces()}, {"memory_bytes", mem},
                       {"memory_limit_bytes", i.memory_limit_bytes()}});
    if (c.json) continue;
    c.out << "shard " << i.shard() << " (vmspaced " << i.version() << "): " << i.spaces() << " of "
          << i.max_spaces() << " spaces\n";
    int64_t total = 0;
    for (const v1::MemoryUsage& u : i.memory()) {
      c.out << "  memory " << std::left << std::setw(12) << u.kind() << std::right << std::setw(14) << u.bytes()
            << " bytes\n";
      total += u.bytes();
    }
    c.out << "  memory " << std::left << std::setw(12) << "total" << std::right << std::setw(14) << total
          << " bytes of " << (i.memory_limit_bytes() ? std::to_string(i.memory_limit_bytes()) : "unlimited")
          << " (--max-memory-bytes)\n";
  }
  if (c.json) c.out << all.dump() << "\n";
  return kExitOk;
}

int CmdHealth(Ctx& c) {
  const std::string service = c.args.Get("service", "vmspace.v1.VmSpace");
  Client cl(c.client);
  auto r = cl.CheckHealth(service);
  if (!r.ok()) return Fail(c, r.error());
  const bool serving = r.value() == "SERVING";
  if (c.json) c.out << Json{{"service", service}, {"status", r.value()}, {"serving", serving}}.dump() << "\n";
  else c.out << r.value() << "\n";
  return serving ? kExitOk : kExitFailed;
}

int CmdMsync(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  std::string f = c.args.Get("flags", "sync");
  auto flags = client::ParseMsyncFlags(f);
  if (!flags) throw UsageError{"--flags: bad msync flags '" + f + "' (sync, async, invalidate or a number)"};
  Client cl(c.client);
  auto r = cl.Msync(space, addr, len, *flags);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}

// ---- file ----

/// The file id: --file, or the first positional argument.
uint64_t FileId(const Ctx& c) {
  if (!c.args.Has("file")) throw UsageError{"a file id is required (--file ID or first argument)"};
  auto v = client::ParseU64(c.args.Get("file"));
  if (!v || *v == 0) throw UsageError{"bad file id '" + c.args.Get("file") + "'"};
  return *v;
}

Json FileJson(const v1::FileInfo& f) {
  return {{"file_id", f.file_id()},      {"path", f.path()},
          {"shmem", f.shmem()},          {"size", f.size()},
          {"inode", f.inode()},          {"dev", f.dev()},
          {"cached_pages", f.cached_pages()}, {"dirty_pages", f.dirty_pages()},
          {"mapped_vmas", f.mapped_vmas()},   {"open_handles", f.open_handles()},
          {"writable", f.writable()}};
}

std::string FileName(const v1::FileInfo& f) { return f.shmem() ? "(shmem)" : f.path(); }

/// Prints the id of a new file (open, create-shmem).
int PrintFileId(Ctx& c, const client::Result<uint64_t>& r) {
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"file_id", r.value()}}.dump() << "\n";
  else c.out << r.value() << "\n";
  return kExitOk;
}

/// Prints the outcome of a call that returns nothing on file `id` (close, truncate, fsync).
int PrintFileOk(Ctx& c, const client::Result<client::Unit>& r, uint64_t id) {
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}, {"file_id", id}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}

int CmdFileOpen(Ctx& c) {
  if (!c.args.Has("path")) throw UsageError{"a path is required (--path PATH or first argument)"};
  v1::OpenFileRequest req;
  req.set_path(c.args.Get("path"));
  req.set_write(c.args.Flag("write"));
  req.set_create(c.args.Flag("create"));
  req.set_exclusive(c.args.Flag("exclusive"));
  req.set_truncate(c.args.Flag("truncate"));
  Client cl(c.client);
  return PrintFileId(c, cl.OpenFile(req, c.U64("near", 0)));
}

int CmdFileCreateShmem(Ctx& c) {
  Client cl(c.client);
  return PrintFileId(c, cl.CreateShmemFile(c.args.Get("name"), c.U64("size", 0), c.U64("near", 0)));
}

int CmdFileClose(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  return PrintFileOk(c, cl.CloseFile(id), id);
}

int CmdFileTruncate(Ctx& c) {
  const uint64_t id = FileId(c);
  const uint64_t size = c.U64("size");
  Client cl(c.client);
  return PrintFileOk(c, cl.TruncateFile(id, size), id);
}

int CmdFileFsync(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  return PrintFileOk(c, cl.FsyncFile(id), id);
}

int CmdFileStat(Ctx& c) {
  const uint64_t id = FileId(c);
  Client cl(c.client);
  auto r = cl.StatFile(id);
  if (!r.ok()) return Fail(c, r.error());
  const v1::FileInfo& f = r.value();
  if (c.json) {
    c.out << FileJson(f).dump() << "\n";
    return kExitOk;
  }
  c.out << "file " << f.file_id() << ": " << FileName(f) << (f.writable() ? " (read-write)" : " (read-only)") << "\n"
        << "  size " << f.size() << " (" << HumanBytes(f.size()) << "), inode " << f.inode() << ", dev " << f.dev()
        << "\n"
        << "  page cache " << f.cached_pages() << " pages, " << f.dirty_pages() << " dirty; " << f.mapped_vmas()
        << " VMAs map it; " << f.open_handles() << " open ids\n";
  return kExitOk;
}

int CmdFileList(Ctx& c) {
  Client cl(c.client);
  auto r = cl.ListFiles();
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) {
    Json arr = Json::array();
    for (const v1::FileInfo& f : r.value()) arr.push_back(FileJson(f));
    c.out << Json{{"files", arr}}.dump() << "\n";
    return kExitOk;
  }
  char line[512];
  snprintf(line, sizeof line, "%16s %2s %12s %10s %10s %6s %10s  %s\n", "ID", "RW", "SIZE", "CACHED", "DIRTY", "VMAS",
           "INODE", "PATH");
  c.out << line;
  for (const v1::FileInfo& f : r.value()) {
    snprintf(line, sizeof line, "%16llu %2s %12s %10llu %10llu %6llu %10llu  %s\n",
             static_cast<unsigned long long>(f.file_id()), f.writable() ? "rw" : "r",
             HumanBytes(f.size()).c_str(), static_cast<unsigned long long>(f.cached_pages()),
             static_cast<unsigned long long>(f.dirty_pages()), static_cast<unsigned long long>(f.mapped_vmas()),
             static_cast<unsigned long long>(f.inode()), FileName(f).c_str());
    c.out << line;
  }
  return kExitOk;
}

int CmdFileRead(Ctx& c) {
  const uint64_t id = FileId(c);
  const uint64_t offset = c.U64("offset", 0);
  const uint64_t len = c.U64("len");
  Client cl(c.client);
  auto r = cl.ReadFile(id, offset, len);
  if (!r.ok()) return Fail(c, r.error());
  const std::string& data = r.value();
  if (c.json) {
    c.out << Json{{"file_id", id}, {"offset", offset}, {"len", data.size()}, {"data_hex", client::HexBytes(data)}}.dump()
          << "\n";
  } else if (c.args.Flag("raw")) {
    c.out.write(data.data(), static_cast<std::streamsize>(data.size()));
  } else {
    HexDump(c.out, offset, data);
  }
  return kExitOk;
}

int CmdFileWrite(Ctx& c) {
  const uint64_t id = FileId(c);
  const uint64_t offset = c.U64("offset", 0);
  const std::string data = DataArg(c, "from");
  Client cl(c.client);
  auto r = cl.WriteFile(id, offset, data);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"bytes_written", r.value()}}.dump() << "\n";
  else c.out << "wrote " << r.value() << " of " << data.size() << " bytes\n";
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

// ---- bench: locking profiles, lock figures, tables, charts ----

/// The --profile / --locking-profile value ("" if neither).
std::string ProfileOption(const Ctx& c) {
  bool p = c.args.Has("profile"), lp = c.args.Has("locking-profile");
  if (p && lp && c.args.Get("profile") != c.args.Get("locking-profile")) {
    throw UsageError{"--profile and --locking-profile are the same option; give one"};
  }
  return p ? c.args.Get("profile") : c.args.Get("locking-profile");
}

/// The profile specs to run: --compare expanded (a SWITCH=V1,V2 list varies `base`),
/// else just `base` (which may be "").
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

/// Checks that --plot can work before anything runs. Returns "" or the error.
std::string CheckPlot(const Ctx& c) {
  if (!c.args.Has("plot")) return "";
  if (c.args.Get("plot").empty()) throw UsageError{"--plot needs a file name (FILE.svg)"};
  if (bench::FindGnuplot().empty()) return bench::GnuplotMissingMessage();
  return "";
}

Json OptJson(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

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

/// The lock-derived fields every bench result carries (null without lock figures).
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

std::string Num(std::optional<double> v, const char* fmt) {
  if (!v) return "-";
  char b[64];
  snprintf(b, sizeof b, fmt, *v);
  return b;
}

std::string Count(const std::optional<bench::LockFigures>& l, const char* event) {
  return l ? std::to_string(l->event(event)) : "-";
}

std::string Abbrev(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "~"; }

/// Prints each distinct lock note once.
void PrintNotes(std::ostream& o, const std::vector<std::string>& notes) {
  std::vector<std::string> seen;
  for (const std::string& n : notes) {
    if (n.empty() || std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    o << "note: " << n << "\n";
  }
}

/// Runs one profile after another through `run`, with a progress line per profile.
template <typename R, typename F>
std::vector<R> RunProfiles(Ctx& c, const std::vector<std::string>& profiles, const std::string& what, bool progress,
                           double seconds_each, F run) {
  std::vector<R> out;
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (progress) {
      std::ostringstream p;
      p << "vmspace bench: " << what << " [" << (i + 1) << "/" << profiles.size() << "] profile "
        << (profiles[i].empty() ? "(default)" : profiles[i]);
      if (seconds_each > 0) p << ", " << std::setprecision(3) << seconds_each << " s";
      c.err << p.str() << "\n" << std::flush;
    }
    out.push_back(run(profiles[i]));
  }
  return out;
}

// ---- bench page_fault1 | mmap1 | mixed ----

std::string WorkloadUnit(bench::Workload w) {
  switch (w) {
    case bench::Workload::kPageFault1: return "op = one 4 KiB page written (one write fault); 128 MiB per mmap";
    case bench::Workload::kMmap1: return "op = one mmap+munmap pair of 128 MiB";
    case bench::Workload::kMixed:
      return "op = one page written by a faulter (32 MiB region each, MADV_DONTNEED after each pass); "
             "churn = the churner's 16 KiB mmap+munmap pairs";
    case bench::Workload::kPageFault2:
      return "op = one 4 KiB page written (a copy-on-write fault); a MAP_PRIVATE mapping of the client's own 128 MiB "
             "file per iteration";
    case bench::Workload::kPageFault3:
      return "op = one 4 KiB page written; a MAP_SHARED mapping of the client's own 128 MiB file per iteration";
    case bench::Workload::kPageFault4:
      return "op = one 4 KiB page read; a MAP_PRIVATE mapping of the client's own 128 MiB file per iteration "
             "(fault-around maps cached neighbours)";
    case bench::Workload::kMmap2: return "op = one mmap+munmap pair of the client's own 128 MiB file (MAP_PRIVATE)";
  }
  return "";
}

Json BenchResultJson(const bench::BenchResult& r, bool mixed) {
  Json j;
  j["profile"] = r.profile;
  j["profile_name"] = r.profile_name;
  j["profile_description"] = r.profile_desc;
  j["seconds"] = r.seconds;
  j["ops"] = r.ops;
  j["ops_per_s"] = r.ops_per_s();
  j["faults"] = r.faults;
  j["faults_per_s"] = r.faults_per_s();
  j["iterations"] = r.rounds;
  if (mixed) {
    j["churn_ops"] = r.churn_ops;
    j["churn_ops_per_s"] = r.churn_ops_per_s();
  }
  AddLockFields(j, r.locks, r.mmap_lock_contentions(), r.contentions_per_1k_faults(), r.mmap_lock_wait_s_per_op(),
                r.locks_note);
  j["error"] = r.error.empty() ? Json(nullptr) : Json(r.error);
  return j;
}

/// Fields of the file workloads' results: major faults, fault-around pages, retries,
/// the files used.
void AddFileFields(Json& j, const bench::BenchResult& r) {
  j["pgmajfault"] = r.major_faults;
  j["fault_around_pages"] = r.locks ? Json(r.locks->event(kEventFaultAround)) : Json(nullptr);
  j["retries"] = Retries(r.locks) ? Json(*Retries(r.locks)) : Json(nullptr);
  j["files"] = {{"count", r.files}, {"shmem", r.shmem_files}};
}

/// The file workloads' extra table columns (the header with r null).
std::string FileColumns(const bench::BenchResult* r, std::optional<double> x_native) {
  char b[128];
  if (r == nullptr) {
    snprintf(b, sizeof b, " %9s %10s %10s %9s", "x native", "majflt", "fa-pages", "retries");
  } else {
    snprintf(b, sizeof b, " %9s %10llu %10s %9s", Num(x_native, "%.3fx").c_str(),
             static_cast<unsigned long long>(r->major_faults), Count(r->locks, kEventFaultAround).c_str(),
             Retries(r->locks) ? std::to_string(*Retries(r->locks)).c_str() : "-");
  }
  return b;
}

int CmdBenchWorkload(Ctx& c) {
  std::string wname = StripPrefix(c.command, "bench ");
  auto workload = bench::ParseWorkload(wname);
  if (!workload) throw UsageError{"unknown workload " + wname};
  const bool mixed = *workload == bench::Workload::kMixed;
  bench::BenchConfig cfg;
  cfg.workload = *workload;
  std::string mode = c.args.Get("mode", "threads");
  if (mode == "threads") cfg.mode = bench::Mode::kThreads;
  else if (mode == "processes") cfg.mode = bench::Mode::kProcesses;
  else throw UsageError{"--mode must be threads or processes"};
  if (mixed && cfg.mode != bench::Mode::kThreads) {
    throw UsageError{"mixed runs all clients in ONE space (the faulters and the churner share it): --mode threads"};
  }
  uint64_t clients = c.U64("clients", mixed ? 2 : 1);
  if (clients < 1 || clients > 1024) throw UsageError{"--clients must be 1..1024"};
  if (mixed && clients < 2) throw UsageError{"mixed needs --clients >= 2 (C-1 faulters and 1 churner)"};
  cfg.clients = static_cast<int>(clients);
  std::string dur = c.args.Get("duration", "5s");
  auto seconds = client::ParseDurationSeconds(dur);
  if (!seconds) throw UsageError{"--duration: want e.g. 5s, 500ms, 1.5s, 2m; got '" + dur + "'"};
  cfg.duration_s = *seconds;
  std::string transport = c.args.Get("transport", "inprocess");
  if (transport != "inprocess" && transport != "unary" && transport != "stream") {
    throw UsageError{"--transport must be inprocess, unary or stream"};
  }
  std::string base = ProfileOption(c);
  std::vector<std::string> profiles = ProfilesToRun(c, base);
  if (!c.args.Has("compare")) {
    if (profiles[0].empty()) profiles[0] = "linux-6.15";
    std::string e = bench::CheckProfile(profiles[0]);
    if (!e.empty()) throw UsageError{"--profile: " + e};
  }
  if (std::string e = CheckPlot(c); !e.empty()) {
    c.err << "vmspace " << c.command << ": " << e << "\n";
    return kExitFailed;
  }
  bool progress = !c.args.Flag("quiet");
  cfg.pin = c.args.Has("pin") ? c.args.Flag("pin") : transport == "inprocess";

  std::vector<bench::BenchResult> results = RunProfiles<bench::BenchResult>(
      c, profiles, wname, progress, cfg.duration_s, [&](const std::string& p) {
        bench::BenchConfig one = cfg;
        one.profile = p;
        // Fresh spaces (and, in-process, a fresh frame allocator) per profile.
        std::unique_ptr<bench::Backend> backend =
            transport == "inprocess" ? bench::MakeInprocessBackend()
                                     : bench::MakeDaemonBackend(c.client, transport == "stream");
        return bench::RunBench(one, *backend);
      });

  // The file workloads run once more on this machine's kernel (files under /var/tmp).
  const bool files = bench::UsesFiles(*workload);
  std::optional<bench::BenchResult> native;
  if (files && !c.args.Flag("skip-native")) {
    if (progress) c.err << "vmspace bench: " << wname << " on the kernel (native, once)\n" << std::flush;
    native = bench::RunBenchNative(cfg);
  }
  auto ratio = [&](const bench::BenchResult& r) -> std::optional<double> {
    if (!native || !native->ok() || native->ops_per_s() <= 0 || !r.ok()) return std::nullopt;
    return r.ops_per_s() / native->ops_per_s();
  };

  std::string error;
  for (const bench::BenchResult& r : results)
    if (!r.ok() && error.empty()) error = r.profile + ": " + r.error;
  if (native && !native->ok() && error.empty()) error = "native: " + native->error;

  std::string plot_error;
  if (c.args.Has("plot")) {
    bench::PlotSpec spec;
    std::ostringstream t;
    t << "vmspace bench " << wname << ": "
      << (mixed ? std::to_string(cfg.clients - 1) + (cfg.clients > 2 ? " faulters" : " faulter") + " + 1 churner"
                                                      : mode + ", " + std::to_string(cfg.clients) +
                                                            (cfg.clients > 1 ? " clients" : " client"))
      << ", " << std::setprecision(3) << cfg.duration_s << " s, " << transport;
    spec.title = t.str();
    bench::PlotPanel ops{mixed ? "faulter ops/s (pages written)" : wname == "mmap1" ? "ops/s (mmap+munmap pairs)"
                                                                                   : "ops/s (pages written)", {}};
    bench::PlotPanel cont{"mmap_lock contentions per 1000 faults", {}};
    bench::PlotPanel churn{"churner mmap+munmap/s", {}};
    bool faults = false;
    for (const bench::BenchResult& r : results) faults |= r.faults > 0;
    if (!faults) cont.title = "mmap_lock contentions per 1000 ops";
    for (const bench::BenchResult& r : results) {
      spec.labels.push_back(r.profile);
      ops.values.push_back(r.ok() ? std::optional<double>(r.ops_per_s()) : std::nullopt);
      std::optional<double> cv = r.contentions_per_1k_faults();
      if (!faults && r.mmap_lock_contentions() && r.ops > 0)
        cv = 1000.0 * static_cast<double>(*r.mmap_lock_contentions()) / static_cast<double>(r.ops);
      cont.values.push_back(cv);
      churn.values.push_back(r.ok() ? std::optional<double>(r.churn_ops_per_s()) : std::nullopt);
    }
    spec.panels = {ops, cont};
    if (mixed) spec.panels.push_back(churn);
    plot_error = bench::WriteSvgBarChart(spec, c.args.Get("plot"));
    if (!plot_error.empty() && error.empty()) error = "plot: " + plot_error;
  }

  if (c.json) {
    Json j;
    j["workload"] = wname;
    j["mode"] = mode;
    j["clients"] = cfg.clients;
    if (mixed) {
      j["faulters"] = cfg.clients - 1;
      j["churners"] = 1;
    }
    j["duration_s"] = cfg.duration_s;
    j["transport"] = transport;
    if (transport != "inprocess") j["target"] = c.client.target;
    j["pinned"] = cfg.pin;
    j["unit"] = WorkloadUnit(*workload);
    j["compare"] = c.args.Has("compare");
    Json arr = Json::array();
    for (const bench::BenchResult& r : results) {
      Json rj = BenchResultJson(r, mixed);
      if (files) {
        AddFileFields(rj, r);
        rj["ratio_vs_native"] = OptJson(ratio(r));
      }
      arr.push_back(std::move(rj));
    }
    j["results"] = arr;
    if (files) {
      Json nj = native ? BenchResultJson(*native, false) : Json(nullptr);
      if (native) AddFileFields(nj, *native);
      j["native"] = nj;
    }
    j["plot"] = c.args.Has("plot") && plot_error.empty() ? Json(c.args.Get("plot")) : Json(nullptr);
    j["error"] = error.empty() ? Json(nullptr) : Json(error);
    c.out << j.dump() << "\n";
  } else {
    std::ostringstream o;
    o << "bench " << wname << ": ";
    if (mixed) o << cfg.clients - 1 << " faulter" << (cfg.clients > 2 ? "s" : "") << " + 1 churner in one space";
    else o << mode << ", " << cfg.clients << " client" << (cfg.clients > 1 ? "s" : "") << " ("
           << (cfg.mode == bench::Mode::kThreads ? "one shared space" : "one space each") << ")";
    o << ", " << std::setprecision(3) << cfg.duration_s << " s per profile, transport " << transport;
    if (transport != "inprocess") o << " to " << c.client.target;
    if (cfg.pin) o << ", clients pinned to CPUs";
    o << "\n";
    char line[512];
    std::string hdr_churn = mixed ? "     churn/s" : "";
    std::string hdr_files = files ? FileColumns(nullptr, std::nullopt) : "";
    snprintf(line, sizeof line, "%-26s %13s %8s %13s%s %11s %10s %10s %8s %8s%s\n", "profile", "ops/s", "x first",
             "faults/s", hdr_churn.c_str(), "cont/1kflt", "wait-s/op", "vl-success", "vl-abort", "vl-miss",
             hdr_files.c_str());
    o << line;
    double first = results.empty() ? 0 : results[0].ops_per_s();
    std::vector<std::string> notes;
    for (const bench::BenchResult& r : results) {
      if (!r.ok() && r.seconds == 0) {
        o << std::left << std::setw(26) << Abbrev(r.profile, 26) << std::right << " error: " << r.error << "\n";
        continue;
      }
      std::string churn = mixed ? " " + Num(r.churn_ops_per_s(), "%12.0f") : "";
      snprintf(line, sizeof line, "%-26s %13.0f %8s %13.0f%s %11s %10s %10s %8s %8s%s\n",
               Abbrev(r.profile, 26).c_str(), r.ops_per_s(),
               first > 0 ? Num(r.ops_per_s() / first, "%.2fx").c_str() : "-", r.faults_per_s(), churn.c_str(),
               Num(r.contentions_per_1k_faults(), "%.3g").c_str(), Num(r.mmap_lock_wait_s_per_op(), "%.3g").c_str(),
               Count(r.locks, "vma_lock_success").c_str(), Count(r.locks, "vma_lock_abort").c_str(),
               Count(r.locks, "vma_lock_miss").c_str(), files ? FileColumns(&r, ratio(r)).c_str() : "");
      o << line;
      if (!r.ok()) o << "  error: " << r.error << "\n";
      notes.push_back(r.locks_note);
    }
    if (native && (native->ok() || native->seconds > 0)) {
      snprintf(line, sizeof line, "%-26s %13.0f %8s %13.0f %11s %10s %10s %8s %8s%s\n", "native (kernel, once)",
               native->ops_per_s(), "-", native->faults_per_s(), "-", "-", "-", "-", "-",
               FileColumns(&*native, 1.0).c_str());
      o << line;
    }
    if (files) {
      for (const bench::BenchResult& r : results)
        if (r.shmem_files > 0) {
          notes.push_back("the daemon has no --data-dir: its files were shmem (memory only), the kernel's on /var/tmp");
          break;
        }
    }
    o << WorkloadUnit(*workload) << "\n"
      << "x first = ops/s relative to the first row; cont/1kflt = mmap_lock contentions (read+write) per 1000 "
         "faults; wait-s/op = mmap_lock wait seconds per op; vl-* = VMA_LOCK_SUCCESS/ABORT/MISS\n";
    if (files)
      o << "x native = ops/s / the kernel's (same loops on files under /var/tmp, once in this invocation); majflt = "
           "major faults (pgmajfault); fa-pages = pages mapped by fault-around; retries = faults retried under "
           "mmap_lock\n";
    PrintNotes(o, notes);
    if (c.args.Has("plot") && plot_error.empty()) o << "chart: " << c.args.Get("plot") << "\n";
    c.out << o.str();
  }
  if (!error.empty()) {
    c.err << "vmspace " << c.command << ": " << error << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

// ---- bench shmem-dirty (seed 002) ----

/// The values of a space setting to run one after another: --compare SETTING=V1,V2,
/// else `single` ("V"), each parsed by `parse` (false: not a value; `what` names them).
template <typename T, typename Parse>
std::vector<T> SettingValues(const Ctx& c, const std::string& setting, const std::string& single, const char* what,
                             Parse parse) {
  std::string list = single;
  if (c.args.Has("compare")) {
    list = c.args.Get("compare");
    if (list.rfind(setting + "=", 0) != 0)
      throw UsageError{"--compare: want " + setting + "=" + what + "; got '" + list + "'"};
    list = list.substr(setting.size() + 1);
  }
  std::vector<T> out;
  std::stringstream ss(list);
  for (std::string v; std::getline(ss, v, ',');) {
    T x;
    if (!parse(v, &x)) throw UsageError{setting + ": one of " + what + ", not '" + v + "'"};
    out.push_back(x);
  }
  if (out.empty()) throw UsageError{setting + ": no value"};
  return out;
}

/// The completion modes to run: --compare shared_fault_completion=V1,V2, else
/// --shared-fault-completion (default completed).
std::vector<SharedFaultCompletion> CompletionModes(const Ctx& c) {
  return SettingValues<SharedFaultCompletion>(c, "shared_fault_completion",
                                              c.args.Get("shared-fault-completion", "completed"), "retry,completed",
                                              ParseSharedFaultCompletion);
}

/// The first failure of a setting benchmark's rows, then of its native run ("" if none).
template <typename R>
std::string FirstError(const std::vector<R>& rows, const std::optional<R>& native) {
  for (const R& r : rows)
    if (!r.ok()) return r.setting + ": " + r.error;
  if (native && !native->ok()) return "native: " + native->error;
  return "";
}

Json ShmemDirtyJson(const bench::ShmemDirtyResult& r) {
  return {{"shared_fault_completion", r.setting},
          {"profile", r.profile.empty() ? Json(nullptr) : Json(r.profile)},
          {"pages", r.pages},
          {"runs", r.runs},
          {"seconds", r.seconds_mean},
          {"seconds_min", r.seconds_min},
          {"seconds_stddev", r.seconds_stddev},
          {"pgfault", r.setting == "native" ? Json(nullptr) : Json(r.pgfault)},
          {"pgfault_per_page", r.setting == "native" ? Json(nullptr) : Json(r.pgfault_per_page())},
          {"min_flt", r.min_flt},
          {"min_flt_per_page", r.min_flt_per_page()},
          {"retries", r.retries},
          {"completed", r.completed},
          {"mmap_lock", {{"acquisitions", r.mmap_lock_acquisitions}, {"contentions", r.mmap_lock_contentions}}},
          {"vma_lock", {{"acquisitions", r.vma_lock_acquisitions}}},
          {"i_pages_lock", r.setting == "native" ? Json(nullptr) : Json{{"acquisitions", r.i_pages_lock_acquisitions}}},
          {"error", r.error.empty() ? Json(nullptr) : Json(r.error)}};
}

int CmdBenchShmemDirty(Ctx& c) {
  const uint64_t bytes = (c.U64("size", 400ull << 20) + kPageSize - 1) & kPageMask;
  if (bytes == 0 || bytes > (64ull << 30)) throw UsageError{"--size must be in (0, 64G]"};
  const uint64_t runs = c.U64("runs", 5);
  if (runs < 1 || runs > 1000) throw UsageError{"--runs must be 1..1000"};
  const std::vector<SharedFaultCompletion> modes = CompletionModes(c);
  const std::string profile = ProfileOption(c);
  if (std::string e = bench::CheckProfile(profile.empty() ? "linux-6.15" : profile); !e.empty())
    throw UsageError{"--profile: " + e};
  const bool progress = !c.args.Flag("quiet");
  if (progress) c.err << "vmspace bench shmem-dirty: the engine (in-process), " << modes.size() << " mode(s) x " << runs << " runs\n" << std::flush;
  std::vector<bench::ShmemDirtyResult> rows = bench::RunShmemDirtyEngine(bytes, profile, modes, static_cast<int>(runs));
  std::optional<bench::ShmemDirtyResult> native;
  if (!c.args.Flag("skip-native")) {
    if (progress) c.err << "vmspace bench shmem-dirty: the kernel (memfd)\n" << std::flush;
    native = bench::RunShmemDirtyNative(bytes, static_cast<int>(runs));
  }
  const std::string error = FirstError(rows, native);
  if (c.json) {
    Json arr = Json::array();
    for (const auto& r : rows) arr.push_back(ShmemDirtyJson(r));
    Json j{{"workload", "shmem-dirty"},
           {"size_bytes", bytes},
           {"runs", runs},
           {"transport", "inprocess"},
           {"results", arr},
           {"native", native ? ShmemDirtyJson(*native) : Json(nullptr)},
           {"error", error.empty() ? Json(nullptr) : Json(error)}};
    c.out << j.dump() << "\n";
  } else {
    std::ostringstream o;
    o << "bench shmem-dirty: write one byte of each page of a " << HumanBytes(bytes)
      << " MAP_SHARED shmem mapping, " << runs << " runs each (engine in-process, profile "
      << (rows.empty() ? "" : rows[0].profile) << ")\n";
    char line[256];
    snprintf(line, sizeof line, "%-22s %10s %8s %9s %9s %10s %9s %9s %10s %10s %8s\n", "shared_fault_completion", "ms",
             "+-%", "min-ms", "x first", "pgfault", "pgflt/pg", "minflt/pg", "retries", "mmap_lock", "mm-cont");
    o << line;
    const double first = rows.empty() ? 0 : rows[0].seconds_mean;
    for (const auto& r : rows) {
      if (!r.ok()) {
        o << std::left << std::setw(22) << r.setting << std::right << " error: " << r.error << "\n";
        continue;
      }
      snprintf(line, sizeof line, "%-22s %10.2f %8.2f %9.2f %9s %10llu %9.2f %9.2f %10llu %10llu %8llu\n",
               r.setting.c_str(), r.seconds_mean * 1e3, r.seconds_mean > 0 ? 100 * r.seconds_stddev / r.seconds_mean : 0,
               r.seconds_min * 1e3,
               first > 0 ? Num(r.seconds_mean / first, "%.3fx").c_str() : "-", static_cast<unsigned long long>(r.pgfault),
               r.pgfault_per_page(), r.min_flt_per_page(), static_cast<unsigned long long>(r.retries),
               static_cast<unsigned long long>(r.mmap_lock_acquisitions),
               static_cast<unsigned long long>(r.mmap_lock_contentions));
      o << line;
    }
    if (native && native->ok()) {
      snprintf(line, sizeof line, "%-22s %10.2f %8.2f %9.2f %9s %10s %9s %9.2f %10s %10s %8s\n", "native (kernel memfd)",
               native->seconds_mean * 1e3,
               native->seconds_mean > 0 ? 100 * native->seconds_stddev / native->seconds_mean : 0,
               native->seconds_min * 1e3, "-", "-", "-",
               native->min_flt_per_page(), "-", "-", "-");
      o << line;
    }
    o << "ms = mean time of the write loop (after one warm-up run); +-% = its standard deviation; min-ms = the "
         "fastest run; pgfault = vmstat pgfault of one run "
         "(handle_mm_fault calls: a VM_FAULT_RETRY counts twice); minflt/pg = getrusage min_flt per page; "
         "retries = VM_FAULT_RETRY after dirtying; mmap_lock / mm-cont = its acquisitions / contentions in one run\n"
      << "seed 002 (Peter Xu, aarch64 VM, 400 MB): 650.980 ms (retry) -> 569.396 ms (completed)\n";
    c.out << o.str();
  }
  if (!error.empty()) {
    c.err << "vmspace " << c.command << ": " << error << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

// ---- bench execl (seed 003) ----

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

// ---- lockstat ----

/// The lock cells of a GetLockStats answer as the engine's StatsSnapshot, so that the
/// table is the engine's own FormatLockStat (one renderer for daemon and CLI). Lock
/// classes or modes this build does not know are left out.
StatsSnapshot LockStatsSnapshot(const v1::GetLockStatsResponse& r) {
  auto ns = [](double seconds) { return static_cast<uint64_t>(std::llround(seconds * 1e9)); };
  StatsSnapshot snap;
  for (const v1::LockStat& l : r.locks()) {
    for (size_t c = 0; c < snap.locks.size(); ++c) {
      for (size_t m = 0; m < snap.locks[c].size(); ++m) {
        if (l.lock() != LockClassName(static_cast<LockClass>(c)) || l.mode() != LockModeName(static_cast<LockMode>(m)))
          continue;
        LockStatCell& x = snap.locks[c][m];
        x.acquisitions = l.acquisitions();
        x.contentions = l.contentions();
        x.wait_ns_total = ns(l.wait_seconds_total());
        x.wait_ns_max = ns(l.wait_seconds_max());
        x.hold_ns_total = ns(l.hold_seconds_total());
        x.hold_ns_max = ns(l.hold_seconds_max());
      }
    }
  }
  return snap;
}

int CmdLockstat(Ctx& c) {
  std::string p = ProfileOption(c);
  std::string name;  // "" = all profiles
  if (p == "custom") name = p;
  else if (!p.empty() && p != "all") {
    std::string e = bench::CheckProfile(p, &name);
    if (!e.empty()) throw UsageError{"--profile: " + e};
  }
  Client cl(c.client);
  auto r = cl.GetLockStats(name);
  if (!r.ok()) return Fail(c, r.error());
  const v1::GetLockStatsResponse& s = r.value();
  std::map<std::string, uint64_t> events(s.events().begin(), s.events().end());
  if (c.json) {
    Json locks = Json::array();
    for (const v1::LockStat& l : s.locks()) {
      locks.push_back({{"lock", l.lock()},
                       {"mode", l.mode()},
                       {"acquisitions", l.acquisitions()},
                       {"contentions", l.contentions()},
                       {"wait_seconds_total", l.wait_seconds_total()},
                       {"wait_seconds_max", l.wait_seconds_max()},
                       {"hold_seconds_total", l.hold_seconds_total()},
                       {"hold_seconds_max", l.hold_seconds_max()}});
    }
    c.out << Json{{"profile", name.empty() ? "all" : name},
                  {"lock_stats_enabled", s.lock_stats_enabled()},
                  {"locks", locks},
                  {"events", events},
                  {"text", s.text()}}
                 .dump()
          << "\n";
    return kExitOk;
  }
  std::ostringstream o;
  o << FormatLockStat(LockStatsSnapshot(s)) << "profile " << (name.empty() ? "all" : name)
    << (s.lock_stats_enabled() ? "" : "; timing off (vmspaced --lock-stats=off): counts only") << "\n";
  char line[128];
  if (!events.empty()) {
    o << "\nevents:\n";
    for (const auto& [k, v] : events) {
      snprintf(line, sizeof line, "  %-22s %14llu\n", k.c_str(), static_cast<unsigned long long>(v));
      o << line;
    }
  }
  c.out << o.str();
  return kExitOk;
}

// ---- bench stress --compare ----

/// Seed 004's table beside ours when --seed-table is given or the compare names a
/// profile of the seed's table (linux-6.0, linux-6.1, linux-6.7); else nullopt.
std::optional<stress::SeedComparisonTable> SeedTableFor(const Ctx& c, const std::vector<stress::StressStats>& rows,
                                                        bool page_fault) {
  std::map<std::string, double> ours;
  bool named = false;
  for (const stress::StressStats& r : rows) {
    const std::string& p = r.profile_name.empty() ? r.profile : r.profile_name;
    named = named || stress::InSeedTable(p);
    if (r.ok() && !ours.count(p)) ours[p] = r.rounds_per_sec();
  }
  if (!named && !c.args.Flag("seed-table")) return std::nullopt;
  return stress::CompareWithSeed(ours, page_fault);
}

Json SeedTableJson(const stress::SeedComparisonTable& t) {
  Json rows = Json::array();
  for (const stress::SeedComparison& r : t.rows) {
    rows.push_back({{"profile", r.seed->profile},
                    {"kernel", r.seed->kernel},
                    {"seed_seconds", r.seed_s},
                    {"seed_seconds_approx", t.page_fault && r.seed->fault_approx},
                    {"seed_slowdown", r.seed_slowdown},
                    {"our_seconds_per_seed_rounds", OptJson(r.our_s)},
                    {"our_slowdown", OptJson(r.our_slowdown)}});
  }
  return {{"source", "shared/seeds/004 (system time, 6.0.0 / 6.1.0 / 6.7.0-rc2)"},
          {"seed_rounds", stress::kSeedRounds},
          {"page_fault", t.page_fault},
          {"base", t.base},
          {"rows", rows}};
}

void PrintSeedTable(std::ostream& o, const stress::SeedComparisonTable& t) {
  o << "seed 004 beside ours (shared/seeds/004: kernel system time of " << stress::kSeedRounds
    << " rounds, page faults " << (t.page_fault ? "on" : "off") << "); slowdown = time / " << t.base << "'s\n";
  char line[256];
  snprintf(line, sizeof line, "%-12s %-10s %12s %13s %16s %12s\n", "profile", "kernel", "seed time(s)",
           "seed slowdown", "our time(s)/10M", "our slowdown");
  o << line;
  for (const stress::SeedComparison& r : t.rows) {
    const std::string seed_s = std::string(t.page_fault && r.seed->fault_approx ? "~" : "") + Num(r.seed_s, "%.0f");
    snprintf(line, sizeof line, "%-12s %-10s %12s %13.2f %16s %12s\n", r.seed->profile, r.seed->kernel,
             seed_s.c_str(), r.seed_slowdown, Num(r.our_s, "%.2f").c_str(), Num(r.our_slowdown, "%.2f").c_str());
    o << line;
  }
  o << "our time(s)/10M = " << stress::kSeedRounds
    << " rounds at our measured rounds/s (wall time of the engine; the seed's is the kernel's system time)\n";
}

/// The index of the median of v (the lower one for an even count); v is not empty.
size_t MedianIndex(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  return idx[(idx.size() - 1) / 2];
}

/// One seed-004 run of ours on `transport` (inprocess, unary or stream).
stress::StressStats RunOurStress(const Ctx& c, const stress::StressConfig& cfg, const std::string& transport,
                                 int batch, int inflight, stress::Progress* progress = nullptr) {
  if (transport == "inprocess") return stress::RunEngineStress(cfg, progress);
  if (transport == "unary") return stress::RunUnaryStress(cfg, c.client, progress);
  return stress::RunStreamStress(cfg, c.client, batch, inflight, progress);
}

/// bench stress --compare [--repeat N]: every profile, then the kernel, N times in turn.
/// A profile's row is its median-rounds/s repetition; its x native is the median over the
/// repetitions of its rounds/s over the kernel's of the same repetition (each ratio side
/// by side in time, as the machine's load drifts); the native row is the median native run.
int BenchStressCompare(Ctx& c, const stress::StressConfig& base_cfg, const std::string& transport, int batch,
                       int inflight, bool progress, bool native_on, int repeat) {
  std::vector<std::string> profiles = ProfilesToRun(c, base_cfg.locking_profile);
  if (std::string e = CheckPlot(c); !e.empty()) {
    c.err << "vmspace " << c.command << ": " << e << "\n";
    return kExitFailed;
  }
  // Each run carries its profile's lock deltas over the rounds (StressStats::locks).
  using StressRow = stress::StressStats;
  std::vector<std::vector<StressRow>> reps;       // [repetition][profile]
  std::vector<std::optional<StressRow>> natives;  // [repetition]
  for (int k = 0; k < repeat; ++k) {
    const std::string what =
        repeat > 1 ? "seed-004 stress, repetition " + std::to_string(k + 1) + "/" + std::to_string(repeat)
                   : "seed-004 stress";
    reps.push_back(RunProfiles<StressRow>(c, profiles, what, progress, 0, [&](const std::string& p) {
      stress::StressConfig cfg = base_cfg;
      cfg.locking_profile = p;
      return RunOurStress(c, cfg, transport, batch, inflight);
    }));
    const bool any_ok = std::any_of(reps.back().begin(), reps.back().end(), [](const StressRow& r) { return r.ok(); });
    std::optional<StressRow> n;
    if (native_on && any_ok) {
      if (progress) c.err << "vmspace bench: " << what << " on the kernel (native)\n" << std::flush;
      n = stress::RunNativeStress(base_cfg);
    }
    natives.push_back(std::move(n));
    if (!any_ok) break;  // every profile failed: no point in repeating it
  }
  // Per profile: the repetition with the median rounds/s (a failed one: the first
  // failure), and the median of the per-repetition ratios.
  std::vector<StressRow> rows;
  std::vector<std::optional<double>> ratios;
  std::vector<std::vector<double>> ratio_runs(profiles.size()), rps_runs(profiles.size());
  for (size_t i = 0; i < profiles.size(); ++i) {
    std::optional<size_t> failed;
    for (size_t k = 0; k < reps.size(); ++k) {
      const StressRow& r = reps[k][i];
      if (!r.ok()) {
        if (!failed) failed = k;
        continue;
      }
      rps_runs[i].push_back(r.rounds_per_sec());
      const std::optional<StressRow>& n = natives[k];
      if (n && n->ok() && n->rounds_per_sec() > 0) ratio_runs[i].push_back(r.rounds_per_sec() / n->rounds_per_sec());
    }
    if (failed) {
      rows.push_back(reps[*failed][i]);
      ratios.push_back(std::nullopt);
      continue;
    }
    rows.push_back(reps[MedianIndex(rps_runs[i])][i]);
    ratios.push_back(ratio_runs[i].size() == reps.size()
                         ? std::optional<double>(ratio_runs[i][MedianIndex(ratio_runs[i])])
                         : std::nullopt);
  }
  // The native row: the first failed native run, else the median one.
  std::optional<StressRow> native;
  std::vector<double> native_rps;
  std::vector<size_t> native_rep;  // the repetition of each native_rps entry
  for (size_t k = 0; k < natives.size(); ++k) {
    if (!natives[k]) continue;
    if (!natives[k]->ok()) {
      native = natives[k];
      break;
    }
    native_rps.push_back(natives[k]->rounds_per_sec());
    native_rep.push_back(k);
  }
  if (!native && !native_rps.empty()) native = natives[native_rep[MedianIndex(native_rps)]];
  std::string error;
  for (const StressRow& r : rows)
    if (!r.ok() && error.empty()) error = r.profile + ": " + r.error;
  if (native && !native->ok() && error.empty()) error = "native: " + native->error;

  std::string plot_error;
  if (c.args.Has("plot")) {
    bench::PlotSpec spec;
    spec.title = "vmspace bench stress (seed-004): " + std::to_string(base_cfg.clients) + " client(s), " +
                 std::to_string(base_cfg.rounds) + " rounds each, " + transport;
    bench::PlotPanel rps{"rounds/s", {}}, cont{"mmap_lock contentions per 1000 rounds", {}}, rat{"ratio vs native", {}};
    for (size_t i = 0; i < rows.size(); ++i) {
      const StressRow& r = rows[i];
      spec.labels.push_back(r.profile);
      rps.values.push_back(r.ok() ? std::optional<double>(r.rounds_per_sec()) : std::nullopt);
      cont.values.push_back(r.contentions_per_1k_rounds());
      rat.values.push_back(ratios[i]);
    }
    spec.panels = {rps, cont};
    if (native && native->ok()) spec.panels.push_back(rat);
    plot_error = bench::WriteSvgBarChart(spec, c.args.Get("plot"));
    if (!plot_error.empty() && error.empty()) error = "plot: " + plot_error;
  }

  if (c.json) {
    Json j;
    j["workload"] = "seed-004";
    j["transport"] = transport;
    if (transport != "inprocess") j["target"] = c.client.target;
    j["rounds_per_client"] = base_cfg.rounds;
    j["clients"] = base_cfg.clients;
    j["shared_space"] = base_cfg.shared_space;
    j["page_fault"] = base_cfg.page_fault;
    j["seed"] = base_cfg.seed;
    j["stride"] = base_cfg.stride;
    j["compare"] = true;
    j["repeat"] = repeat;
    j["native_rounds_per_s_runs"] = native_rps;
    if (transport == "stream") {
      j["batch"] = batch;
      j["inflight"] = inflight;
    }
    j["native"] = native ? StatsJson(*native) : Json(nullptr);
    Json arr = Json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
      const StressRow& r = rows[i];
      Json rj;
      rj["profile"] = r.profile;
      std::string pname, pdesc;
      bench::CheckProfile(r.profile, &pname, &pdesc);
      rj["profile_name"] = pname;
      rj["profile_description"] = pdesc;
      Json stats = StatsJson(r);
      for (auto& [k, v] : stats.items()) rj[k] = v;
      rj["ops_per_s"] = stats["ops_per_sec"]["total"];
      rj["faults_per_s"] = Rate(r.faults, r.seconds);
      rj["addr_hash"] = base_cfg.shared_space ? Json(nullptr) : Json(Hex(r.addr_hash));
      rj["ratio_vs_native"] = OptJson(ratios[i]);
      rj["ratio_vs_native_runs"] = ratio_runs[i];
      rj["rounds_per_s_runs"] = rps_runs[i];
      rj["mmap_lock_contentions_per_1k_rounds"] = OptJson(r.contentions_per_1k_rounds());
      AddLockFields(rj, r.locks, r.mmap_lock_contentions(), r.contentions_per_1k_faults(), r.mmap_lock_wait_s_per_round(), r.locks_note);
      rj["error"] = r.ok() ? Json(nullptr) : Json(r.error);
      arr.push_back(rj);
    }
    j["results"] = arr;
    const std::optional<stress::SeedComparisonTable> seed = SeedTableFor(c, rows, base_cfg.page_fault);
    j["seed_table"] = seed ? SeedTableJson(*seed) : Json(nullptr);
    j["plot"] = c.args.Has("plot") && plot_error.empty() ? Json(c.args.Get("plot")) : Json(nullptr);
    j["error"] = error.empty() ? Json(nullptr) : Json(error);
    c.out << j.dump() << "\n";
  } else {
    std::ostringstream o;
    o << "seed-004 stress: transport " << transport;
    if (transport != "inprocess") o << " to " << c.client.target;
    o << "; " << base_cfg.clients << " client" << (base_cfg.clients > 1 ? "s" : "") << " ("
      << (base_cfg.shared_space ? "one shared space" : "own space each") << "), " << base_cfg.rounds
      << " rounds each, page faults " << (base_cfg.page_fault ? "on" : "off") << ", seed " << base_cfg.seed << "\n";
    char line[512];
    snprintf(line, sizeof line, "%-26s %9s %12s %10s %12s %11s %11s %11s %10s %8s %8s\n", "profile", "time(s)",
             "rounds/s", "x native", "faults/s", "cont/1krnd", "cont/1kflt", "wait-s/rnd", "vl-success", "vl-abort",
             "vl-miss");
    o << line;
    std::vector<std::string> notes;
    for (size_t i = 0; i < rows.size(); ++i) {
      const StressRow& r = rows[i];
      if (!r.ok() && r.rounds == 0) {
        o << std::left << std::setw(26) << Abbrev(r.profile, 26) << std::right << " error: " << r.error << "\n";
        continue;
      }
      snprintf(line, sizeof line, "%-26s %9.3f %12.0f %10s %12.0f %11s %11s %11s %10s %8s %8s\n",
               Abbrev(r.profile, 26).c_str(), r.seconds, r.rounds_per_sec(), Num(ratios[i], "%.4f").c_str(),
               Rate(r.faults, r.seconds), Num(r.contentions_per_1k_rounds(), "%.3g").c_str(),
               Num(r.contentions_per_1k_faults(), "%.3g").c_str(), Num(r.mmap_lock_wait_s_per_round(), "%.3g").c_str(),
               Count(r.locks, "vma_lock_success").c_str(), Count(r.locks, "vma_lock_abort").c_str(),
               Count(r.locks, "vma_lock_miss").c_str());
      o << line;
      if (!r.ok()) o << "  error: " << r.error << "\n";
      notes.push_back(r.locks_note);
    }
    if (native) {
      snprintf(line, sizeof line, "%-26s %9.3f %12.0f %10s %12.0f\n",
               repeat > 1 ? "native (kernel, median)" : "native (kernel, once)", native->seconds,
               native->rounds_per_sec(), "1", Rate(native->faults, native->seconds));
      o << line;
    }
    if (repeat > 1) {
      o << "x native per repetition (each beside the kernel's run of the same repetition):\n";
      for (size_t i = 0; i < rows.size(); ++i) {
        o << "  " << std::left << std::setw(24) << Abbrev(rows[i].profile, 24) << std::right;
        for (double x : ratio_runs[i]) {
          snprintf(line, sizeof line, " %.2f", x);
          o << line;
        }
        if (!ratio_runs[i].empty()) {
          const auto [lo, hi] = std::minmax_element(ratio_runs[i].begin(), ratio_runs[i].end());
          snprintf(line, sizeof line, "  (median %s, range %.2f-%.2f)", Num(ratios[i], "%.2f").c_str(), *lo, *hi);
          o << line;
        }
        o << "\n";
      }
      o << "x native = the median over " << repeat
        << " repetitions of rounds/s / the kernel's rounds/s of the same repetition (each repetition runs every "
           "profile, then the kernel, on the same sequence); a row's other columns are those of its "
           "median-rounds/s repetition; ";
    } else {
      o << "x native = rounds/s / the kernel's rounds/s (same sequence, measured once in this invocation); ";
    }
    o << "cont/1krnd, cont/1kflt = mmap_lock contentions (read+write) per 1000 rounds / faults; wait-s/rnd = "
         "mmap_lock wait seconds per round; vl-* = VMA_LOCK_SUCCESS/ABORT/MISS\n";
    if (const std::optional<stress::SeedComparisonTable> seed = SeedTableFor(c, rows, base_cfg.page_fault))
      PrintSeedTable(o, *seed);
    PrintNotes(o, notes);
    if (c.args.Has("plot") && plot_error.empty()) o << "chart: " << c.args.Get("plot") << "\n";
    c.out << o.str();
  }
  if (!error.empty()) {
    c.err << "vmspace bench stress: " << error << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

/// bench stress --scaling --clients C [--repeat N]: how C clients in C spaces scale
/// against one. Each repetition runs one client, then C clients (each in its own space,
/// or one shared with --shared-space), then the kernel's one process and C processes
/// (threads with --shared-space); its ratio is the C-client aggregate rounds/s over the
/// one-client rounds/s of the same repetition, side by side in time. Each repetition
/// ends with two controls that share nothing, each in 1 thread, then in C
/// (stress::ControlSeconds; ratio C x the 1-thread time / the C-thread time):
/// integer-unit-bound register code (`alu`: tells vCPUs on one physical core's SMT
/// siblings from separate cores) and a std::map per thread (`map`: what this host gives
/// user-space data-structure code), and ours over the map's of the same repetition.
/// In process (and for the kernel), with C <= the CPUs this process may use, client c
/// is pinned to the c-th of them and the one-client run is made once on each of those
/// CPUs: `matched` is the C-client aggregate over the slowest CPU's one-client rounds/s
/// (with the same rounds per client, C times that is the most C clients can give when
/// they share nothing, however unequal the host makes its vCPUs), `spread` the fastest
/// CPU's one-client rounds/s over the slowest's. Prints every repetition and the
/// median ratios.
int BenchStressScaling(Ctx& c, const stress::StressConfig& base_cfg, const std::string& transport, int batch,
                       int inflight, bool progress, bool native_on, int repeat) {
  using StressRow = stress::StressStats;
  const int n = base_cfg.clients;
  // Pinned (one client per CPU, each CPU's one-client run measured) in process with at
  // most one client per CPU; the daemon's transports leave placement to the scheduler.
  const std::vector<int> cpus = harness::AllowedCpus();
  const bool pinned = transport == "inprocess" && !cpus.empty() && n <= static_cast<int>(cpus.size());
  const int solo_cpus = pinned ? n : 1;  // one-client runs per repetition
  auto ours = [&](int clients, int first_cpu) {
    stress::StressConfig cfg = base_cfg;
    cfg.clients = clients;
    cfg.pin_first_cpu = pinned ? first_cpu : -1;
    return RunOurStress(c, cfg, transport, batch, inflight);
  };
  auto kernel = [&](int clients, int first_cpu) {
    stress::StressConfig cfg = base_cfg;
    cfg.clients = clients;
    cfg.pin_first_cpu = pinned ? first_cpu : -1;
    return stress::RunNativeStress(cfg);
  };
  // One side of a repetition, ours or the kernel's: the one-client run on each CPU
  // (pinned; else one run), then all clients.
  struct Side {
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
  struct Rep {
    Side ours, kernel;  // kernel: only without --skip-native
    double alu_one_s = 0, alu_many_s = 0;  // the integer-unit control: 1 thread, C threads
    double map_one_s = 0, map_many_s = 0;  // the std::map control: 1 thread, C threads
    std::optional<double> alu_x, map_x;    // C x the 1-thread time / the C-thread time
    std::optional<double> over_map;        // ours.x / map_x
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
  auto run_side = [&](auto run, const std::string& who, Side& side, std::string& error) {
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
    if (transport == "inprocess") {
      double lo = side.many->on_cpu;
      for (const StressRow& s : side.one_by_cpu) lo = std::min(lo, s.on_cpu);
      if (lo > 0) side.on_cpu = lo;
    }
    if (!pinned) return;
    auto rps = [](const StressRow& s) { return s.rounds_per_sec(); };
    const auto [lo, hi] = std::minmax_element(side.one_by_cpu.begin(), side.one_by_cpu.end(),
                                              [&](const StressRow& a, const StressRow& b) { return rps(a) < rps(b); });
    side.matched = ratio(*lo, *side.many);
    if (side.matched) side.spread = rps(*hi) / rps(*lo);
    const std::vector<double>& by_client = side.many->client_rounds_per_s;
    if (transport == "inprocess" && static_cast<int>(by_client.size()) == n) {
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
  std::string profile = "the daemon's default";
  if (!base_cfg.locking_profile.empty()) bench::CheckProfile(base_cfg.locking_profile, &profile);
  else if (transport == "inprocess") profile = LockingProfile{}.name;
  std::vector<Rep> reps;
  std::vector<double> our_x, native_x, alu_x, map_x, over_map, matched_x, native_matched_x, per_client_x;
  std::string error;
  for (int k = 0; k < repeat && error.empty(); ++k) {
    const std::string what = "seed-004 scaling, repetition " + std::to_string(k + 1) + "/" + std::to_string(repeat);
    Rep r;
    if (progress) c.err << "vmspace bench: " << what << ": 1 client, then " << n << "\n" << std::flush;
    run_side(ours, "", r.ours, error);
    if (native_on && error.empty()) {
      if (progress) c.err << "vmspace bench: " << what << " on the kernel: 1, then " << n << "\n" << std::flush;
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
    if (r.ours.x) our_x.push_back(*r.ours.x);
    if (r.kernel.x) native_x.push_back(*r.kernel.x);
    if (r.alu_x) alu_x.push_back(*r.alu_x);
    if (r.map_x) map_x.push_back(*r.map_x);
    if (r.over_map) over_map.push_back(*r.over_map);
    if (r.ours.matched) matched_x.push_back(*r.ours.matched);
    if (r.ours.per_client) per_client_x.push_back(*r.ours.per_client);
    if (r.kernel.matched) native_matched_x.push_back(*r.kernel.matched);
    reps.push_back(std::move(r));
  }
  auto median = [](const std::vector<double>& v) -> std::optional<double> {
    if (v.empty()) return std::nullopt;
    return v[MedianIndex(v)];
  };
  const std::optional<double> our_med = median(our_x), native_med = median(native_x), alu_med = median(alu_x),
                              map_med = median(map_x), over_map_med = median(over_map),
                              matched_med = median(matched_x), native_matched_med = median(native_matched_x),
                              per_client_med = median(per_client_x);
  if (c.json) {
    auto rps = [](const std::optional<StressRow>& s) { return s && s->ok() ? Json(s->rounds_per_sec()) : Json(nullptr); };
    auto rps_list = [](const std::vector<StressRow>& v) {
      Json a = Json::array();
      for (const StressRow& s : v) a.push_back(s.ok() ? Json(s.rounds_per_sec()) : Json(nullptr));
      return a;
    };
    auto on_cpu = [&](const std::optional<StressRow>& s) {
      return transport == "inprocess" && s && s->ok() ? Json(s->on_cpu) : Json(nullptr);
    };
    auto on_cpu_list = [&](const std::vector<StressRow>& v) {
      Json a = Json::array();
      for (const StressRow& s : v) a.push_back(on_cpu(s));
      return a;
    };
    Json arr = Json::array();
    for (const Rep& r : reps) {
      auto rounds = [](const std::optional<StressRow>& s) { return s ? Json(s->rounds) : Json(nullptr); };
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
    c.out << Json{{"workload", "seed-004"},
                  {"scaling", true},
                  {"transport", transport},
                  {"clients", n},
                  {"shared_space", base_cfg.shared_space},
                  {"rounds_per_client", base_cfg.rounds},
                  {"page_fault", base_cfg.page_fault},
                  {"locking_profile", base_cfg.locking_profile.empty() ? Json(nullptr) : Json(base_cfg.locking_profile)},
                  {"profile_name", profile},
                  {"repeat", repeat},
                  {"pinned", pinned},
                  {"repetitions", arr},
                  {"ratio_median", OptJson(our_med)},
                  {"native_ratio_median", OptJson(native_med)},
                  {"alu_ratio_median", OptJson(alu_med)},
                  {"map_ratio_median", OptJson(map_med)},
                  {"ratio_over_map_median", OptJson(over_map_med)},
                  {"matched_ratio_median", OptJson(matched_med)},
                  {"native_matched_ratio_median", OptJson(native_matched_med)},
                  {"per_client_ratio_median", OptJson(per_client_med)},
                  {"error", error.empty() ? Json(nullptr) : Json(error)}}
                 .dump()
          << "\n";
  } else if (!our_x.empty()) {  // (a run that never completed a repetition prints only its error)
    std::ostringstream o;
    o << "seed-004 scaling: transport " << transport << "; 1 client against " << n << " ("
      << (base_cfg.shared_space ? "one shared space" : "own space each");
    if (native_on) o << (base_cfg.shared_space ? "; the kernel: threads of one process" : "; the kernel: one process each");
    o << "), " << base_cfg.rounds << " rounds each, page faults " << (base_cfg.page_fault ? "on" : "off")
      << ", locking profile " << profile;
    if (pinned) o << "; client c pinned to CPU " << cpus[0] << "+c, 1 client on each of " << n << " CPUs";
    o << "\n";
    char line[256];
    // The kernel's columns only when it ran (not with --skip-native).
    snprintf(line, sizeof line, "%-10s %14s %14s %8s", "repetition", "1 client r/s",
             (std::to_string(n) + " clients r/s").c_str(), "ratio");
    o << line;
    if (pinned) {
      snprintf(line, sizeof line, " %8s %8s %8s", "matched", "spread", "on-cpu");
      o << line;
    }
    if (native_on) {
      snprintf(line, sizeof line, " %14s %14s %8s", "kernel 1 r/s", ("kernel " + std::to_string(n) + " r/s").c_str(),
               "ratio");
      o << line;
      if (pinned) {
        snprintf(line, sizeof line, " %8s", "matched");
        o << line;
      }
    }
    snprintf(line, sizeof line, " %8s %8s %8s", "alu", "map", "ours/map");
    o << line << "\n";
    auto cell = [](const std::optional<StressRow>& s) { return s && s->ok() ? Num(s->rounds_per_sec(), "%.0f") : "-"; };
    for (size_t k = 0; k < reps.size(); ++k) {
      const Rep& r = reps[k];
      snprintf(line, sizeof line, "%-10zu %14s %14s %8s", k + 1, cell(r.ours.one()).c_str(), cell(r.ours.many).c_str(),
               Num(r.ours.x, "%.2f").c_str());
      o << line;
      if (pinned) {
        snprintf(line, sizeof line, " %8s %8s %8s", Num(r.ours.matched, "%.2f").c_str(), Num(r.ours.spread, "%.2f").c_str(),
                 Num(r.ours.on_cpu, "%.3f").c_str());
        o << line;
      }
      if (native_on) {
        snprintf(line, sizeof line, " %14s %14s %8s", cell(r.kernel.one()).c_str(), cell(r.kernel.many).c_str(),
                 Num(r.kernel.x, "%.2f").c_str());
        o << line;
        if (pinned) {
          snprintf(line, sizeof line, " %8s", Num(r.kernel.matched, "%.2f").c_str());
          o << line;
        }
      }
      snprintf(line, sizeof line, " %8s %8s %8s", Num(r.alu_x, "%.2f").c_str(), Num(r.map_x, "%.2f").c_str(),
               Num(r.over_map, "%.2f").c_str());
      o << line << "\n";
    }
    auto summary = [&](const char* who, const std::vector<double>& v, const std::optional<double>& med) {
      if (!med) return;
      const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      snprintf(line, sizeof line, "%s: median %.2f, range %.2f-%.2f over %zu repetition%s\n", who, *med, *lo, *hi,
               v.size(), v.size() == 1 ? "" : "s");
      o << line;
    };
    summary("ours", our_x, our_med);
    summary("ours matched", matched_x, matched_med);
    summary("ours per client", per_client_x, per_client_med);
    summary("kernel", native_x, native_med);
    summary("kernel matched", native_matched_x, native_matched_med);
    summary("alu", alu_x, alu_med);
    summary("map", map_x, map_med);
    summary("ours/map", over_map, over_map_med);
    o << "ratio = the " << n << "-client aggregate rounds/s / the 1-client rounds/s of the same repetition"
      << (pinned ? " (1 client on the first CPU)" : "") << "\n";
    if (pinned)
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
    c.out << o.str();
  }
  if (!error.empty()) {
    c.err << "vmspace bench stress: " << error << "\n";
    return kExitFailed;
  }
  return kExitOk;
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

// ---- table of commands ----

/// Options of `bench page_fault1 | mmap1 | mixed` and the file workloads.
std::vector<OptionSpec> BenchOptions() {
  return {
      {"mode", "M", "threads: all clients in one space (default); processes: one space each"},
      {"clients", "C", "concurrent clients (default 1; mixed: default 2 = 1 faulter + 1 churner)"},
      {"duration", "D", "timed phase per profile, e.g. 5s, 500ms, 1.5s (default 5s)"},
      {"profile", "P", "locking profile linux-6.0|6.1|6.4|6.6|6.7|6.15[,switch=v] (default linux-6.15); the base of --compare SWITCH=.."},
      {"locking-profile", "P", "same as --profile"},
      {"compare", "LIST", "run each profile in turn: linux-6.0,linux-6.6 | vma_lock=off,anon,all | SPEC;SPEC"},
      {"transport", "T", "inprocess (engine threads in this process, default), unary or stream (vmspaced)"},
      {"plot", "FILE.svg", "write an SVG bar chart per profile with gnuplot (ops/s, contentions per 1000 faults)"},
      {"pin", "", "pin client c to CPU c mod ncpus, as will-it-scale (default: on for inprocess; --pin=false)"},
      {"quiet", "", "no progress lines on stderr"},
  };
}

/// Options of the file workloads: BenchOptions() and --skip-native.
std::vector<OptionSpec> FileBenchOptions() {
  std::vector<OptionSpec> o = BenchOptions();
  o.push_back({"skip-native", "", "do not run the same loops on this machine's kernel"});
  return o;
}

/// Options of the space-setting benchmarks (shmem-dirty, execl): `own`, then the
/// profile, --skip-native and --quiet.
std::vector<OptionSpec> SettingBenchOptions(std::vector<OptionSpec> own) {
  own.push_back({"profile", "P", "locking profile of the spaces (default linux-6.15)"});
  own.push_back({"locking-profile", "P", "same as --profile"});
  own.push_back({"skip-native", "", "do not run the loop on this machine's kernel"});
  own.push_back({"quiet", "", "no progress lines on stderr"});
  return own;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> cmds = {
      {"create", "[options]", "create an empty address space; prints its id",
       {{"label", "TEXT", "free text shown by list (<= 64 bytes)"},
        {"max-map-count", "N", "vm.max_map_count (default 65530)"},
        {"mmap-base", "ADDR", "top of the mmap area (default 0x7ffff7fff000)"},
        {"mmap-min-addr", "ADDR", "effective mmap_min_addr (default 65536)"},
        {"dac-mmap-min-addr", "ADDR", "MAP_FIXED minimum without CAP_SYS_RAWIO (default 4096)"},
        {"cap-sys-rawio", "", "the caller has CAP_SYS_RAWIO"},
        {"locking-profile", "NAME", "locking profile (\"\" = daemon default)"},
        {"shared-fault-completion", "MODE", "retry | completed (default completed): how a shared write fault that dirtied a page ends"},
        {"i-mmap-scope", "SCOPE", "wide | narrow (default wide): i_mmap_rwsem across mmap's tree and i_mmap inserts, or the i_mmap insert only"},
        {"placement-key", "KEY", "several daemons: place by hash of KEY (default: the daemon with the fewest spaces)"}},
       CmdCreate},
      {"destroy", "SPACE", "destroy a space and free its frames", {{"space", "ID", "the space"}}, CmdDestroy},
      {"list", "", "list spaces with their counters", {}, CmdList},
      {"mmap", "SPACE --len LEN [options]", "mmap(2) anonymous memory or a file (--file); prints the address",
       {{"space", "ID", "the space (or first argument)"},
        {"addr", "ADDR", "hint, or the address with fixed/fixed_noreplace (default 0)"},
        {"len", "LEN", "length in bytes (rounded up to pages)"},
        {"prot", "PROT", "rw, r-x, none, read,write or a number (default rw)"},
        {"flags", "FLAGS", "private,anonymous,fixed,... or a number (default private,anonymous)"},
        {"offset", "OFF", "file offset (page aligned; ignored for anonymous)"},
        {"file", "ID", "map this open file (vmspace file open); flags default to private"}},
       CmdMmap},
      {"msync", "SPACE --addr ADDR --len LEN [--flags sync|async|invalidate]",
       "msync(2): write back the dirty pages of shared file mappings in a range",
       {{"space", "ID", "the space (or first argument)"}, {"addr", "ADDR", "start (page aligned)"},
        {"len", "LEN", "length in bytes"}, {"flags", "FLAGS", "sync (default), async, invalidate, or a number"}},
       CmdMsync},
      {"file open", "PATH [--write] [--create] [--exclusive] [--truncate]",
       "open(2) a file under vmspaced's --data-dir; prints its file id",
       {{"path", "PATH", "relative to --data-dir (or first argument)"},
        {"write", "", "open read-write (O_RDWR; default read-only)"},
        {"create", "", "create it if missing (O_CREAT)"},
        {"exclusive", "", "with --create: fail EEXIST if it exists (O_EXCL)"},
        {"truncate", "", "truncate to 0 (O_TRUNC; needs --write)"},
        {"near", "SPACE", "several daemons: open on the daemon of this space (default: shard 0's)"}},
       CmdFileOpen},
      {"file create-shmem", "[--name NAME] [--size SIZE]",
       "memfd_create(2): a memory-only file, opened read-write; prints its file id",
       {{"name", "NAME", "shown in maps as /memfd:NAME (deleted)"}, {"size", "SIZE", "bytes (default 0)"},
        {"near", "SPACE", "several daemons: create on the daemon of this space (default: shard 0's)"}},
       CmdFileCreateShmem},
      {"file close", "FILE", "close(2) a file id (its mappings stay)", {{"file", "ID", "the file id"}}, CmdFileClose},
      {"file truncate", "FILE --size SIZE", "ftruncate(2); shrinking unmaps the pages beyond from every space",
       {{"file", "ID", "the file id (or first argument)"}, {"size", "SIZE", "the new size in bytes"}}, CmdFileTruncate},
      {"file stat", "FILE", "size, inode, page-cache and dirty pages, mappings of an open file",
       {{"file", "ID", "the file id"}}, CmdFileStat},
      {"file ls", "", "list the daemon's open files", {}, CmdFileList},
      {"file read", "FILE --len LEN [--offset OFF] [--raw]", "pread(2) through the page cache (hex dump, or raw)",
       {{"file", "ID", "the file id (or first argument)"}, {"offset", "OFF", "file offset (default 0)"},
        {"len", "LEN", "bytes (fewer at end of file)"}, {"raw", "", "write the bytes as they are to stdout"}},
       CmdFileRead},
      {"file write", "FILE [--offset OFF] (--data TEXT | --hex HEX | --from PATH)", "pwrite(2) through the page cache",
       {{"file", "ID", "the file id (or first argument)"}, {"offset", "OFF", "file offset (default 0)"},
        {"data", "TEXT", "the bytes of TEXT"}, {"hex", "HEX", "bytes in hex, e.g. 00ff10"},
        {"from", "PATH", "the bytes of a local file"}},
       CmdFileWrite},
      {"file fsync", "FILE", "fsync(2): write the file's dirty pages back to its host file",
       {{"file", "ID", "the file id"}}, CmdFileFsync},
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
      {"stats", "", "each daemon's spaces and memory budget by kind (GetServerInfo)", {}, CmdStats},
      {"health", "[--service NAME]",
       "gRPC health check (grpc.health.v1.Health/Check); exit 0 only if SERVING (container HEALTHCHECK)",
       {{"service", "NAME", "service to check (default vmspace.v1.VmSpace; \"\" = the whole server)"}},
       CmdHealth},
      {"bench stress", "[options]",
       "the seed-004 mmap/munmap stress, compared with the kernel (native run in a forked child)",
       {{"rounds", "N", "rounds per client (default 100000)"},
        {"clients", "C", "concurrent clients, each in its own space (default 1)"},
        {"shared-space", "", "all clients in one space (native: threads of one process)"},
        {"page-fault", "", "write every 128th byte of a mapping before unmapping it"},
        {"seed", "N", "srand() seed; client c uses seed + c (default 1, as the C program)"},
        {"stride", "N", "bytes between writes with --page-fault (default 128)"},
        {"transport", "T", "inprocess (engine linked in, default), unary or stream"},
        {"batch", "N", "stream: ops per Batch message (default 1024)"},
        {"inflight", "N", "stream: messages in flight per client (default 4)"},
        {"locking-profile", "P", "engine locking profile of the spaces: linux-6.0|6.1|6.4|6.6|6.7|6.15[,switch=v] (default: the engine's/daemon's)"},
        {"profile", "P", "same as --locking-profile (the base of --compare SWITCH=..)"},
        {"compare", "LIST", "run once per profile: linux-6.0,linux-6.6 | vma_lock=off,anon,all | SPEC;SPEC (table; native once)"},
        {"plot", "FILE.svg", "with --compare: SVG bar chart (rounds/s, contentions) drawn by gnuplot"},
        {"skip-native", "", "do not run the native comparison"},
        {"repeat", "N", "with --compare: N repetitions of every profile, then the kernel; x native = the median of the per-repetition ratios; with --scaling: N repetitions (default 1)"},
        {"scaling", "", "with --clients C: each repetition runs 1 client, then C, then the kernel's 1 and C processes; prints C-client aggregate / 1-client per repetition and the medians, beside two controls in 1 and C threads that share nothing (alu: integer-unit-bound registers; map: a std::map each) and ours over the map's"},
        {"seed-table", "", "with --compare: seed 004's table beside ours (always when it names linux-6.0/6.1/6.7)"},
        {"quiet", "", "no progress lines on stderr"}},
       CmdBenchStress},
      {"bench page_fault1", "[options]",
       "will-it-scale page_fault1: mmap 128 MiB, write each page, munmap; ops = pages/s", BenchOptions(),
       CmdBenchWorkload},
      {"bench mmap1", "[options]", "will-it-scale mmap1: mmap+munmap 128 MiB; ops = pairs/s", BenchOptions(),
       CmdBenchWorkload},
      {"bench mixed", "[options]",
       "C-1 clients fault their own regions of ONE space while one client mmaps/munmaps in it",
       BenchOptions(), CmdBenchWorkload},
      {"bench page_fault2", "[options]",
       "will-it-scale page_fault2: MAP_PRIVATE 128 MiB file, write each page (COW), munmap; beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench page_fault3", "[options]",
       "will-it-scale page_fault3: MAP_SHARED 128 MiB file, write each page, munmap; beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench page_fault4", "[options]",
       "will-it-scale page_fault4: MAP_PRIVATE 128 MiB file, read each page (fault-around), munmap; beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench mmap2", "[options]", "will-it-scale mmap2: mmap+munmap of a 128 MiB file (MAP_PRIVATE); beside the kernel",
       FileBenchOptions(), CmdBenchWorkload},
      {"bench shmem-dirty", "[--size 400M] [--compare shared_fault_completion=retry,completed]",
       "seed 002: write each page of a MAP_SHARED shmem mapping; pgfault per page retry vs completed, beside the kernel",
       SettingBenchOptions({{"size", "BYTES", "mapping size (default 400M)"},
                            {"runs", "N", "runs per mode, each a fresh space (default 5)"},
                            {"shared-fault-completion", "MODE", "retry | completed (default completed; --compare runs several)"},
                            {"compare", "LIST", "shared_fault_completion=retry,completed"}}),
       CmdBenchShmemDirty},
      {"bench execl", "[--clients C] [--duration 2s] [--compare i_mmap_scope=wide,narrow]",
       "seed 003: UnixBench execl in the engine (a space per exec, one shared binary); i_mmap_rwsem per scope, beside the kernel",
       SettingBenchOptions({{"clients", "C", "concurrent clients (default 2)"},
                            {"duration", "D", "per scope (default 2s)"},
                            {"compare", "LIST", "i_mmap_scope=wide,narrow (default)"},
                            {"native-binary", "PATH",
                             "static program the kernel loop spawns and execs (default: vmspace-execl-true "
                             "next to this executable)"}}),
       CmdBenchExecl},
      {"lockstat", "[--profile P]", "the daemon's lock statistics, like /proc/lock_stat (GetLockStats)",
       {{"profile", "P", "one locking profile's spaces (linux-6.0..linux-6.15, custom); default all"}},
       CmdLockstat},
  };
  return cmds;
}

constexpr const char* kFooter =
    "Numbers take 0x hex and K/M/G suffixes; global options may come anywhere on the line.\n"
    "`vmspace COMMAND --help` lists a command's options.\n"
    "Exit status: 0 ok, 1 the call failed (the errno name is printed), 2 usage error.";

/// CLI11's help layout with two changes: a command's usage line is its synopsis
/// ("vmspace mmap SPACE --len LEN [options]"), and a command group such as `bench` is
/// listed by its members ("bench stress", "bench mmap1", ...) in the list of commands.
class HelpFormatter : public CLI::Formatter {
 public:
  std::map<const CLI::App*, std::string> synopsis;

  std::string make_usage(const CLI::App* app, std::string name) const override {
    auto it = synopsis.find(app);
    if (it == synopsis.end()) return CLI::Formatter::make_usage(app, std::move(name));
    return get_label("Usage") + ": " + name + (it->second.empty() ? "" : " " + it->second) + "\n";
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::vector<const CLI::App*> members = sub->get_subcommands({});
    if (members.empty()) return CLI::Formatter::make_subcommand(sub);
    std::ostringstream o;
    for (const CLI::App* m : members)
      CLI::detail::format_help(o, sub->get_name() + " " + m->get_name(), m->get_description(), get_column_width());
    return o.str();
  }
};

/// The whole command line as a CLI11 app: one subcommand per Command ("bench stress" is
/// `stress` under `bench`), each with its own options plus the global ones (which the
/// root has too, for "vmspace --json list"). Unknown options and arguments are kept as
/// extras, which RunCli reports in its own words.
struct CommandLine {
  CLI::App app{"vmspace: command-line client of vmspaced", "vmspace"};
  std::shared_ptr<HelpFormatter> help = std::make_shared<HelpFormatter>();
  std::map<const CLI::App*, const Command*> commands;
  std::deque<bool> flag_values;                     // what the boolean flags parse into
  std::map<const CLI::Option*, const bool*> flags;  // flag option -> its value

  CommandLine() {
    help->column_width(26);
    // Inherited by every subcommand added below.
    app.formatter(help);
    app.set_help_flag("-h,--help", "show this help");
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.allow_extras();
    app.require_subcommand(1);
    app.footer(kFooter);
    help->synopsis[&app] =
        "[--target HOST:PORT] [--timeout SECONDS] [--token TOKEN] [--tls-ca PEM [--tls-cert PEM --tls-key PEM]] "
        "[--json] COMMAND [options]";
    AddGlobal(&app);
    std::map<std::string, CLI::App*> groups;  // "bench"
    for (const Command& c : Commands()) {
      CLI::App* parent = &app;
      std::string leaf = c.name;
      if (size_t sp = c.name.find(' '); sp != std::string::npos) {
        std::string group = c.name.substr(0, sp);
        leaf = c.name.substr(sp + 1);
        CLI::App*& g = groups[group];
        if (g == nullptr) {
          const bool bench = group == "bench";
          g = app.add_subcommand(group, bench ? "the benchmarks (`vmspace bench WORKLOAD --help`)"
                                              : "the daemon's files (`vmspace " + group + " COMMAND --help`)");
          g->require_subcommand(1);
          g->group("Commands");
          help->synopsis[g] = bench ? "WORKLOAD [options]" : "COMMAND [options]";
          AddGlobal(g);
        }
        parent = g;
      }
      CLI::App* sub = parent->add_subcommand(leaf, c.summary);
      sub->group("Commands");
      help->synopsis[sub] = c.synopsis;
      commands[sub] = &c;
      // The synopsis's first word names the option that is also the first argument
      // ("SPACE --len LEN": --space, "FILE": --file, "PATH": --path).
      const std::string first = c.synopsis.substr(0, c.synopsis.find(' '));
      for (const OptionSpec& o : c.options) Add(sub, o, first == Upper(o.name));
      AddGlobal(sub);
    }
  }

  /// Adds one option; `positional`: also the command's first positional argument.
  CLI::Option* Add(CLI::App* a, const OptionSpec& o, bool positional = false) {
    if (o.arg.empty()) {
      bool& v = flag_values.emplace_back(false);
      CLI::Option* opt = a->add_flag("--" + o.name, v, o.help);
      flags[opt] = &v;
      return opt;
    }
    return a->add_option((positional ? Upper(o.name) + ",--" : "--") + o.name, o.help)->type_name(o.arg);
  }
  void AddGlobal(CLI::App* a) {
    for (const OptionSpec& o : GlobalOptions()) Add(a, o)->group("Global options");
  }
};

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CommandLine cl;
  CLI::App& app = cl.app;
  // The command that was given: the deepest subcommand CLI11 selected (or null).
  auto selected = [&]() -> CLI::App* {
    CLI::App* a = nullptr;
    for (CLI::App* p = &app;;) {
      std::vector<CLI::App*> subs = p->get_subcommands();
      if (subs.empty()) return a;
      a = p = subs[0];
    }
  };
  auto name_of = [](const CLI::App* a) {
    std::string n;
    for (; a != nullptr && a->get_parent() != nullptr; a = a->get_parent()) n = a->get_name() + (n.empty() ? "" : " " + n);
    return n;
  };
  // (app.help() is the help of the command CLI11 selected, named "vmspace bench stress".)
  auto usage_error = [&](const CLI::App* a, const std::string& what) {
    std::string n = name_of(a);
    err << "vmspace" << (n.empty() ? "" : " " + n) << ": " << what << "\n\n" << app.help();
    return kExitUsage;
  };
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes the last argument first
    if (!reversed.empty() && reversed.back() == "help") reversed.back() = "--help";
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    CLI::App* a = selected();
    if (a == nullptr || cl.commands.count(a) == 0) {
      // A missing or unknown command (or benchmark): CLI11 asks for one and keeps an
      // unknown word as an extra.
      std::vector<std::string> extra = app.remaining(true);
      auto word = std::find_if(extra.begin(), extra.end(), [](const std::string& x) { return x.rfind('-', 0) != 0; });
      if (word != extra.end()) {
        err << "vmspace: unknown command '" << name_of(a) << (a ? " " : "") << *word << "'\n\n"
            << app.help();
        return kExitUsage;
      }
      if (args.empty()) {
        err << app.help();
        return kExitUsage;
      }
      if (dynamic_cast<const CLI::RequiredError*>(&e))
        return usage_error(a, a && a->get_name() == "bench" ? "a workload is required" : "a command is required");
    }
    return usage_error(a, e.what());
  }
  CLI::App* a = selected();
  const Command& cmd = *cl.commands.at(a);
  std::vector<std::string> extra = app.remaining(true);
  extra.erase(std::remove(extra.begin(), extra.end(), "--"), extra.end());  // CLI11 keeps the marker
  if (!extra.empty()) {
    const std::string& x = extra[0];
    return usage_error(a, x.rfind('-', 0) == 0 ? "unknown option " + x : "unexpected argument '" + x + "'");
  }
  Ctx ctx(cmd.name, Args(a, &cl.flags), out, err);
  ctx.json = ctx.args.Flag("json");
  ctx.client.target = ctx.args.Get("target", "127.0.0.1:50051");
  if (ctx.args.Has("timeout")) {
    std::string t = ctx.args.Get("timeout");
    char* end = nullptr;
    double s = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || !(s > 0) || s > 1e6)
      return usage_error(a, "--timeout: want seconds > 0, got '" + t + "'");
    ctx.client.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000)));
  }
  const char* env_token = std::getenv("VMSPACE_TOKEN");
  ctx.client.token = ctx.args.Get("token", env_token ? env_token : "");
  for (auto [flag, pem] : {std::pair{"tls-ca", &ctx.client.tls_ca_pem},
                           std::pair{"tls-cert", &ctx.client.tls_cert_pem},
                           std::pair{"tls-key", &ctx.client.tls_key_pem}}) {
    if (!ctx.args.Has(flag)) continue;
    std::ifstream in(ctx.args.Get(flag));
    if (!in) return usage_error(a, std::string("--") + flag + ": cannot read " + ctx.args.Get(flag));
    std::stringstream text;
    text << in.rdbuf();
    *pem = text.str();
  }
  if (ctx.client.tls_cert_pem.empty() != ctx.client.tls_key_pem.empty())
    return usage_error(a, "--tls-cert and --tls-key go together");
  if (!ctx.client.tls_cert_pem.empty() && ctx.client.tls_ca_pem.empty())
    return usage_error(a, "--tls-cert needs --tls-ca");
  try {
    return cmd.run(ctx);
  } catch (const UsageError& e) {
    return usage_error(a, e.what);
  }
}

}  // namespace vmspace::cli
