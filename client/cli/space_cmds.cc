// SPDX-License-Identifier: Apache-2.0
// The address-space commands: create, destroy, list, fork, exec, mmap, munmap, mprotect, msync,
// brk, mremap, madvise, mincore, mlock, munlock, mlockall, munlockall, mseal, fault,
// access, read, write, maps. Each is one VmSpace RPC, printed as text or JSON.
#include "cli/commands.h"

#include "cli/output.h"

#include <absl/strings/str_split.h>

#include <algorithm>
#include <sstream>
#include <string>

namespace vmspace::cli {

namespace {

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

}  // namespace

int CmdCreate(Ctx& c) {
  v1::SpaceSettings s;
  if (c.args.Has("max-map-count")) s.set_max_map_count(c.U64("max-map-count"));
  if (c.args.Has("mmap-base")) s.set_mmap_base(c.U64("mmap-base"));
  if (c.args.Has("mmap-min-addr")) s.set_mmap_min_addr(c.U64("mmap-min-addr"));
  if (c.args.Has("dac-mmap-min-addr")) s.set_dac_mmap_min_addr(c.U64("dac-mmap-min-addr"));
  if (c.args.Has("cap-sys-rawio")) s.set_cap_sys_rawio(c.args.Flag("cap-sys-rawio"));
  if (c.args.Has("rlimit-memlock")) s.set_rlimit_memlock(c.U64("rlimit-memlock"));
  if (c.args.Has("cap-ipc-lock")) s.set_cap_ipc_lock(c.args.Flag("cap-ipc-lock"));
  if (c.args.Has("shared-fault-completion")) s.set_shared_fault_completion(c.args.Get("shared-fault-completion"));
  if (c.args.Has("i-mmap-scope")) s.set_i_mmap_scope(c.args.Get("i-mmap-scope"));
  if (c.args.Has("start-brk")) s.set_start_brk(c.U64("start-brk"));
  if (c.args.Has("rlimit-data")) s.set_rlimit_data(c.U64("rlimit-data"));
  s.set_locking_profile(c.args.Get("locking-profile"));
  Client cl(c.client);
  auto r = cl.CreateSpace(s, c.args.Get("label"), c.args.Get("placement-key"));
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"space_id", r.value()}}.dump() << "\n";
  else c.out << r.value() << "\n";
  return kExitOk;
}

int CmdFork(Ctx& c) {
  uint64_t space = c.Space();
  Client cl(c.client);
  auto r = cl.CloneSpace(space, c.args.Get("profile"), c.args.Get("label"));
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"space_id", r.value()}, {"parent", space}}.dump() << "\n";
  else c.out << r.value() << "\n";
  return kExitOk;
}

int CmdExec(Ctx& c) {
  uint64_t space = c.Space();
  if (!c.args.Has("path")) throw UsageError{"--path is required"};
  const std::string path = c.args.Get("path");
  auto words = [&](const std::string& opt) {
    std::vector<std::string> out;
    for (absl::string_view w : absl::StrSplit(c.args.Get(opt), ' ', absl::SkipEmpty())) out.emplace_back(w);
    return out;
  };
  Client cl(c.client);
  auto r = cl.ExecSpace(space, path, words("argv"), words("env"), c.args.Get("interpreter"));
  if (!r.ok()) return Fail(c, r.error());
  const v1::ExecSpaceResponse& e = r.value();
  if (c.json) {
    c.out << Json{{"space_id", space}, {"path", path}, {"start_brk", e.start_brk()}, {"map_count", e.map_count()},
                  {"interpreter", e.interpreter()}}.dump() << "\n";
  } else {
    char brk[32];
    snprintf(brk, sizeof brk, "%#llx", static_cast<unsigned long long>(e.start_brk()));
    c.out << "space " << space << " now runs " << path << ": " << e.map_count() << " VMAs, start_brk " << brk
          << (e.interpreter().empty() ? std::string(", static") : ", interpreter " + e.interpreter()) << "\n";
  }
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
  std::vector<client::Error> unreachable;
  auto r = cl.ListSpaces(&unreachable);
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
    Json j{{"spaces", arr}};
    const int code = Unreached(c, unreachable, &j);
    c.out << j.dump() << "\n";
    return code;
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
  return Unreached(c, unreachable, nullptr);
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
  if (c.args.Flag("flags")) {
    // Each maps line followed by its smaps VmFlags line (fs/proc/task_mmu.c).
    std::string line;
    std::istringstream text(m.maps_text());
    for (const v1::Vma& v : m.vmas()) {
      if (!std::getline(text, line)) break;
      c.out << line << "\n    VmFlags: " << v.smaps_vmflags() << "\n";
    }
  } else {
    c.out << m.maps_text();
    if (!m.maps_text().empty() && m.maps_text().back() != '\n') c.out << "\n";
  }
  if (c.args.Flag("count")) c.out << "map_count " << m.map_count() << "\n";
  return kExitOk;
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

int CmdBrk(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr", 0);
  Client cl(c.client);
  auto r = cl.Brk(space, addr);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"brk", r.value()}, {"brk_hex", Hex(r.value())}}.dump() << "\n";
  else c.out << Hex(r.value()) << "\n";
  return kExitOk;
}

int CmdMremap(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t old_len = c.U64("old-len");
  uint64_t new_len = c.U64("new-len");
  uint64_t flags = 0, new_addr = 0;
  if (c.args.Flag("maymove")) flags |= 1;  // MREMAP_MAYMOVE
  if (c.args.Has("fixed")) {
    flags |= 1 | 2;  // MREMAP_FIXED needs MREMAP_MAYMOVE
    new_addr = c.U64("fixed");
  }
  if (c.args.Flag("dontunmap")) flags |= 1 | 4;  // MREMAP_DONTUNMAP, likewise
  Client cl(c.client);
  auto r = cl.Mremap(space, addr, old_len, new_len, flags, new_addr);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"addr", r.value()}, {"addr_hex", Hex(r.value())}}.dump() << "\n";
  else c.out << Hex(r.value()) << "\n";
  return kExitOk;
}

namespace {
/// Prints "ok" (or {"ok": true}) for a call that returns nothing.
int PrintOk(Ctx& c, const client::Result<client::Unit>& r) {
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}
}  // namespace

int CmdMlock(Ctx& c) {
  const uint64_t space = c.Space();
  const uint64_t addr = c.U64("addr"), len = c.U64("len");
  Client cl(c.client);
  return PrintOk(c, cl.Mlock(space, addr, len, c.args.Flag("onfault") ? 1 : 0));
}

int CmdMunlock(Ctx& c) {
  const uint64_t space = c.Space();
  const uint64_t addr = c.U64("addr"), len = c.U64("len");
  Client cl(c.client);
  return PrintOk(c, cl.Munlock(space, addr, len));
}

int CmdMlockall(Ctx& c) {
  const uint64_t space = c.Space();
  const std::string f = c.args.Get("flags", "current");
  int flags = 0;
  if (auto n = client::ParseU64(f)) {
    flags = static_cast<int>(*n);
  } else {
    size_t pos = 0;
    while (pos <= f.size()) {
      const size_t comma = std::min(f.find(',', pos), f.size());
      const std::string w = f.substr(pos, comma - pos);
      if (w == "current") flags |= 1;       // MCL_CURRENT
      else if (w == "future") flags |= 2;   // MCL_FUTURE
      else if (w == "onfault") flags |= 4;  // MCL_ONFAULT
      else throw UsageError{"--flags: '" + w + "' is not current, future or onfault"};
      pos = comma + 1;
    }
  }
  Client cl(c.client);
  return PrintOk(c, cl.Mlockall(space, flags));
}

int CmdMunlockall(Ctx& c) {
  const uint64_t space = c.Space();
  Client cl(c.client);
  return PrintOk(c, cl.Munlockall(space));
}

int CmdMseal(Ctx& c) {
  const uint64_t space = c.Space();
  const uint64_t addr = c.U64("addr"), len = c.U64("len");
  Client cl(c.client);
  return PrintOk(c, cl.Mseal(space, addr, len, c.U64("flags", 0)));
}

int CmdMadvise(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  if (!c.args.Has("advice")) throw UsageError{"--advice is required"};
  const std::string a = c.args.Get("advice");
  auto advice = client::ParseMadvise(a);
  if (!advice) throw UsageError{"--advice: bad madvise advice '" + a + "' (an MADV_* name such as dontneed, free, "
                                "guard_install, or a number)"};
  Client cl(c.client);
  auto r = cl.Madvise(space, addr, len, *advice);
  if (!r.ok()) return Fail(c, r.error());
  if (c.json) c.out << Json{{"ok", true}, {"advice", *advice}}.dump() << "\n";
  else c.out << "ok\n";
  return kExitOk;
}

int CmdMincore(Ctx& c) {
  uint64_t space = c.Space();
  uint64_t addr = c.U64("addr");
  uint64_t len = c.U64("len");
  Client cl(c.client);
  auto r = cl.Mincore(space, addr, len);
  if (!r.ok()) return Fail(c, r.error());
  std::string bits;
  bits.reserve(r.value().size());
  uint64_t resident = 0;
  for (char b : r.value()) {
    bits += (b & 1) ? '1' : '0';
    resident += b & 1;
  }
  if (c.json) {
    c.out << Json{{"addr", addr}, {"pages", bits.size()}, {"resident", resident}, {"vec", bits}}.dump() << "\n";
  } else {
    c.out << bits << "\n";
  }
  return kExitOk;
}

}  // namespace vmspace::cli
