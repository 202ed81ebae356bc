// SPDX-License-Identifier: Apache-2.0
// The replay of a recorded trace into vmspaced spaces (replay.h).
#include "lib/replay.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace vmspace::trace {

namespace {

using client::Client;
using client::Error;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMmapBase = 0x7ffff7fff000;  // TASK_SIZE - 128 MiB: ASLR off, stack rlimit below 127 MiB
constexpr uint64_t kMaxIo = 1 << 20;             // vmspaced's default --max-io-bytes

std::string Hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

int64_t Arg(const Event& e, const char* k) {
  auto it = e.args.find(k);
  return it == e.args.end() ? 0 : it->second;
}

int ProtOf(const std::string& perms) {
  return (perms.size() > 0 && perms[0] == 'r' ? PROT_READ : 0) | (perms.size() > 1 && perms[1] == 'w' ? PROT_WRITE : 0) |
         (perms.size() > 2 && perms[2] == 'x' ? PROT_EXEC : 0);
}

bool SpecialName(const std::string& n) { return n == "[vdso]" || n == "[vvar]" || n == "[vvar_vclock]"; }

/// What the daemon did with one recorded call.
struct Outcome {
  enum class Kind { kIssued, kRecordedOnly, kUnsupported } kind = Kind::kIssued;
  std::string name;  // kUnsupported: what is missing ("brk", "madvise(HUGEPAGE)", "fork")
  bool ok = true;
  uint64_t value = 0;  // mmap's address
  Error error;
  std::string differs;  // why the result's range may differ from the kernel's (a taint of it)
};

/// A range that an unsupported call changed on the kernel but not in the replay.
struct Taint {
  uint64_t lo = 0, hi = 0;
  std::string why;
};

struct Space {
  uint64_t mm = 0;
  /// The daemon's space; 0 until made. A fork child's is made by CloneSpace when its
  /// parent's thread reaches the fork (read by the child's threads meanwhile).
  std::atomic<uint64_t> id{0};
  const Event* layout = nullptr;
  uint64_t parent_mm = 0;  // a fork child's: the space CloneSpace copies (0: rebuilt from its layout)
  bool ready = false;      // the space exists (under Replayer::ready_mu_)
  std::atomic<bool> gone{false};  // destroyed when its process exec'd
  const Event* exit = nullptr;
  std::mutex mu;
  std::vector<Taint> taints;
  uint64_t brk_lo = 0, brk_hi = 0;
  std::vector<std::string> history;  // the calls issued, described, with the replay's result
};

/// The shared state of one replay.
class Replayer {
 public:
  Replayer(const Trace& t, const ReplayOptions& o) : t_(t), o_(o), setup_(o.client) {}
  ReplayResult Run();

 private:
  bool SetUpFiles();
  bool SetUpSpace(Space& s);
  void FaultIn(Client& c, Space& s, const std::vector<Vma>& vmas);
  void RunThread(int tid, const std::vector<const Event*>& events);
  /// A fork: the child's space as CloneSpace of its parent's (kernel/fork.c dup_mmap),
  /// at its fork record, by the thread that forked; --check compares it with the record.
  void Fork(Client& c, const Event& layout);
  /// The space of `mm`, once it exists (a fork child's threads wait for the fork).
  Space& Ready(uint64_t mm);
  /// An exec left the space of `mm`: it goes, as exec_mmap drops the old mm.
  void LeftByExec(Client& c, uint64_t mm);
  Outcome Issue(Client& c, Space& s, const Event& e);
  void Check(Space& s, const Event& e, const Outcome& out, Client& c);
  void CompareMaps(Client& c, Space& s, const Event& snap, const std::string& cause_all);
  std::string CauseOf(Space& s, uint64_t lo, uint64_t hi);
  std::string Concurrent(const Space& s, const Event& e) const;
  void AddDifference(Difference d) {
    std::lock_guard<std::mutex> l(mu_);
    r_.differences.push_back(std::move(d));
  }
  uint64_t DaemonFile(const Event& e) const {
    if (!e.file) return 0;
    auto it = files_.find(*e.file);
    return it == files_.end() ? 0 : it->second;
  }

  const Trace& t_;
  const ReplayOptions& o_;
  Client setup_;
  ReplayResult r_;
  std::mutex mu_;  // r_ from the call threads
  std::map<uint64_t, uint64_t> files_;  // trace File::id -> daemon file id
  std::map<uint64_t, uint64_t> files_ro_;  // trace File::id -> a read-only daemon id of its file
  std::map<std::string, uint64_t> file_of_daemon_;  // "dev:inode" of a daemon file -> trace File::id
  std::map<uint64_t, std::unique_ptr<Space>> spaces_;  // by mm
  std::map<uint64_t, std::vector<const Event*>> calls_of_mm_;  // each space's calls, in trace order
  std::mutex ready_mu_;  // Space::ready
  std::condition_variable ready_cv_;
  // --check: calls run in trace order; turn_ is the index in call_order_ that may run.
  std::vector<uint64_t> call_order_;
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  size_t turn_ = 0;
  std::chrono::steady_clock::time_point start_;
};

bool Replayer::SetUpFiles() {
  // A memfd that the program made: MFD_ALLOW_SEALING as its memfd_create asked.
  std::set<uint64_t> sealable;
  for (const Event& e : t_.events) {
    if (e.kind == Event::Kind::kCall && e.sys == "memfd_create" && e.file && (Arg(e, "flags") & 2 /* MFD_ALLOW_SEALING */))
      sealable.insert(*e.file);
  }
  for (const auto& [id, f] : t_.files) {
    std::string name = std::filesystem::path(f.path).filename().string();
    if (name.rfind("memfd:", 0) == 0) name = name.substr(6);
    if (auto d = name.find(" (deleted)"); d != std::string::npos) name.resize(d);
    if (name.empty()) name = "file" + std::to_string(id);
    name = name.substr(0, 200);
    client::Result<uint64_t> fid = uint64_t{0};
    v1::OpenFileRequest req;
    const bool host = o_.host_files && !f.shmem;  // a memfd stays one (its seals, its placement)
    if (host) {
      req.set_path("vmspace-replay-" + std::to_string(getpid()) + "-" + std::to_string(id) + "-" + name);
      req.set_write(true);
      req.set_create(true);
      req.set_truncate(true);
      fid = setup_.OpenFile(req);
      if (fid.ok()) {
        auto tr = setup_.TruncateFile(fid.value(), f.size);
        if (!tr.ok()) fid = tr.error();
      }
    } else {
      fid = setup_.CreateShmemFile(name, f.size, 0, sealable.count(id) > 0);
    }
    if (!fid.ok()) {
      r_.error = std::string(host ? "OpenFile(" + req.path() + ")" : "CreateShmemFile(" + name + ")") + ": " +
                 fid.error().ToString();
      return false;
    }
    files_[id] = fid.value();
    if (!f.captured.empty()) {
      std::ifstream in(std::filesystem::path(o_.trace_dir) / f.captured, std::ios::binary);
      std::string buf(kMaxIo, '\0');
      for (uint64_t off = 0; in;) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        const auto n = static_cast<size_t>(in.gcount());
        if (n == 0) break;
        auto w = setup_.WriteFile(fid.value(), off, buf.substr(0, n));
        if (!w.ok()) {
          r_.error = "WriteFile(" + name + "): " + w.error().ToString();
          return false;
        }
        off += n;
      }
    }
    if (host) {
      req.set_write(false);
      req.set_create(false);
      req.set_truncate(false);
      auto ro = setup_.OpenFile(req);
      if (ro.ok()) files_ro_[id] = ro.value();
    } else {
      // A read-only descriptor of the memfd (ReopenFile, as open("/proc/self/fd/N",
      // O_RDONLY)): a MAP_SHARED mapping of it has no VM_MAYWRITE, as the program's had.
      auto ro = setup_.ReopenFile(fid.value(), v1::FILE_ACCESS_RDONLY);
      if (ro.ok()) files_ro_[id] = ro.value();
    }
    auto st = setup_.StatFile(fid.value());
    if (st.ok()) file_of_daemon_[st.value().dev() + ":" + std::to_string(st.value().inode())] = id;
  }
  return true;
}

void Replayer::FaultIn(Client& c, Space& s, const std::vector<Vma>& vmas) {
  for (const Vma& v : vmas) {
    if (v.perms.empty() || v.perms[0] != 'r' || SpecialName(v.name)) continue;
    for (const ResidentRun& run : v.resident) {
      const bool write = run.anon && v.perms[1] == 'w';
      auto a = c.Access(s.id, v.start + run.first * kPage, run.count * kPage, kPage,
                        write ? v1::ACCESS_WRITE : v1::ACCESS_READ);
      if (a.ok()) {
        std::lock_guard<std::mutex> l(mu_);
        r_.faults += a.value().faults();
      }
    }
  }
}

bool Replayer::SetUpSpace(Space& s) {
  v1::SpaceSettings set;
  set.set_mmap_base(kMmapBase);
  set.set_mmap_min_addr(t_.header.mmap_min_addr);
  set.set_max_map_count(t_.header.max_map_count);
  set.set_locking_profile(o_.locking_profile);
  // mm->start_brk of the exec: brk calls then move the same break as on the kernel.
  if (s.layout != nullptr && s.layout->snap.start_brk != 0 && (s.layout->snap.start_brk & (kPage - 1)) == 0)
    set.set_start_brk(s.layout->snap.start_brk);
  auto id = setup_.CreateSpace(set, "replay mm " + std::to_string(s.mm));
  if (!id.ok()) {
    r_.error = "CreateSpace: " + id.error().ToString();
    return false;
  }
  s.id = id.value();
  ++r_.spaces;
  if (s.layout == nullptr) return true;
  s.brk_lo = s.brk_hi = s.layout->snap.start_brk;
  const Vma* prev = nullptr;
  for (const Vma& v : s.layout->snap.vmas) {
    if (v.name == "[vsyscall]") continue;  // above TASK_SIZE
    int prot = ProtOf(v.perms), flags = MAP_FIXED;
    uint64_t file = 0;
    if (SpecialName(v.name)) {
      // vdso/vvar: a placeholder that never merges (shared anonymous, PROT_NONE).
      prot = PROT_NONE;
      flags |= MAP_SHARED | MAP_ANONYMOUS;
    } else if (v.file) {
      file = files_.at(*v.file);
      flags |= v.perms[3] == 's' ? MAP_SHARED : MAP_PRIVATE;
      // A shared mapping without VM_MAYWRITE was of a read-only fd.
      if (v.perms[3] == 's' && (" " + v.vmflags + " ").find(" mw ") == std::string::npos) {
        if (auto ro = files_ro_.find(*v.file); ro != files_ro_.end()) file = ro->second;
      }
    } else {
      flags |= (v.perms[3] == 's' ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS;
      if (v.name == "[stack]") flags |= MAP_GROWSDOWN;
    }
    // The kernel's history that made this VMA what it is, replayed in short: a private
    // VMA with VM_ACCOUNT but no write was writable once (mapped writable, then
    // mprotected); a VMA that the kernel keeps apart from a like neighbour has an
    // anon_vma of its own (mapped unlike its neighbour, written, then made alike).
    const bool priv = v.perms.size() > 3 && v.perms[3] == 'p' && !SpecialName(v.name);
    const bool anon_pages = std::any_of(v.resident.begin(), v.resident.end(), [](const ResidentRun& r) { return r.anon; });
    const bool was_writable = priv && !(prot & PROT_WRITE) && (" " + v.vmflags + " ").find(" ac ") != std::string::npos;
    const bool kept_apart = priv && prev != nullptr && prev->end == v.start && prev->perms == v.perms &&
                            prev->file == v.file && (!v.file || prev->offset + (prev->end - prev->start) == v.offset) &&
                            anon_pages && (prot & PROT_WRITE) &&
                            std::any_of(prev->resident.begin(), prev->resident.end(), [](const ResidentRun& r) { return r.anon; });
    int map_prot = prot | (was_writable ? PROT_WRITE : 0);
    if (kept_apart) map_prot ^= PROT_EXEC;
    auto m = setup_.Mmap(s.id, v.start, v.end - v.start, map_prot, flags, file ? v.offset : 0, file);
    if (!m.ok()) {
      AddDifference({s.layout->seq, "the layout's VMA " + Hex(v.start) + "-" + Hex(v.end) + " " + v.perms + " " + v.name +
                                        " could not be recreated: " + m.error().Name(),
                     "", "the layout replica"});
    } else if (map_prot != prot) {
      for (const ResidentRun& run : v.resident) {
        if (run.anon) (void)setup_.Access(s.id, v.start + run.first * kPage, run.count * kPage, kPage, v1::ACCESS_WRITE);
      }
      (void)setup_.Mprotect(s.id, v.start, v.end - v.start, prot);
    }
    if (!SpecialName(v.name)) prev = &v;
  }
  FaultIn(setup_, s, s.layout->snap.vmas);
  if (o_.check) CompareMaps(setup_, s, *s.layout, "the layout replica");
  return true;
}

// The one place that says which recorded calls the daemon serves, and how: adding a
// call the daemon learns (memfd seals; CloneSpace for fork, whose child is recreated
// from its layout record today) is one case here.
Outcome Replayer::Issue(Client& c, Space& s, const Event& e) {
  Outcome o;
  auto done = [&](auto r) {
    o.ok = r.ok();
    if (!r.ok()) o.error = r.error();
    return o;
  };
  auto unsupported = [&](std::string name) {
    o.kind = Outcome::Kind::kUnsupported;
    o.name = std::move(name);
    return o;
  };
  auto recorded_only = [&] {
    o.kind = Outcome::Kind::kRecordedOnly;
    return o;
  };
  const std::string& sys = e.sys;
  const uint64_t addr = static_cast<uint64_t>(Arg(e, "addr")), len = static_cast<uint64_t>(Arg(e, "len"));
  if (sys == "mmap") {
    const int flags = static_cast<int>(Arg(e, "flags"));
    uint64_t file = (flags & MAP_ANONYMOUS) ? 0 : DaemonFile(e);
    auto mode = e.info.find("fd_flags");
    if (file != 0 && mode != e.info.end() && (mode->second & O_ACCMODE) == O_RDONLY) {
      if (auto ro = files_ro_.find(*e.file); ro != files_ro_.end()) file = ro->second;
      else if ((flags & MAP_TYPE) != MAP_PRIVATE) o.differs = "a MAP_SHARED mapping of a read-only fd (the replay's memfd is writable; try --files host)";
    }
    // thp_get_unmapped_area (mm/huge_memory.c __thp_get_unmapped_area): the kernel
    // places a regular file's mapping that spans a whole aligned PMD of the file so that
    // the PMD lands aligned; a memfd (shmem, no huge pages) is not aligned.
    const uint64_t off = static_cast<uint64_t>(Arg(e, "off")), pmd = uint64_t{2} << 20;
    const uint64_t off_align = (off + pmd - 1) & ~(pmd - 1);
    if (file != 0 && !o_.host_files && !t_.files.at(*e.file).shmem && !(flags & MAP_FIXED) && off + len > off_align &&
        off + len - off_align >= pmd && o.differs.empty())
      o.differs = "the THP alignment of a file mapping of 2 MiB or more (the replay's file is a memfd, which is not aligned; --files host is)";
    auto r = c.Mmap(s.id, addr, len, static_cast<int>(Arg(e, "prot")), flags,
                    static_cast<uint64_t>(Arg(e, "off")), file);
    if (r.ok()) o.value = r.value();
    return done(r);
  }
  if (sys == "munmap") return done(c.Munmap(s.id, addr, len));
  // The pages the program had written in the range before the call (mprotect, mremap,
  // madvise, the mlock family, mseal): they give its VMAs their anon_vma, which decides
  // merges and VM_ACCOUNT.
  const uint64_t range = static_cast<uint64_t>(Arg(e, sys == "mremap" ? "old_addr" : "addr")) & ~(kPage - 1);
  for (const ResidentRun& run : e.touched) {
    (void)c.Access(s.id, range + run.first * kPage, run.count * kPage, kPage, v1::ACCESS_WRITE);
  }
  if (sys == "mprotect") return done(c.Mprotect(s.id, addr, len, static_cast<int>(Arg(e, "prot"))));
  if (sys == "msync") return done(c.Msync(s.id, addr, len, static_cast<int>(Arg(e, "flags"))));
  if (sys == "madvise") return done(c.Madvise(s.id, addr, len, static_cast<int>(Arg(e, "advice"))));
  if (sys == "brk") {
    auto r = c.Brk(s.id, addr);
    if (r.ok()) o.value = r.value();
    return done(r);
  }
  if (sys == "mremap") {
    auto r = c.Mremap(s.id, static_cast<uint64_t>(Arg(e, "old_addr")), static_cast<uint64_t>(Arg(e, "old_len")),
                      static_cast<uint64_t>(Arg(e, "new_len")), static_cast<uint64_t>(Arg(e, "flags")),
                      static_cast<uint64_t>(Arg(e, "new_addr")));
    if (r.ok()) o.value = r.value();
    return done(r);
  }
  if (sys == "mlock") return done(c.Mlock(s.id, addr, len, 0));
  if (sys == "mlock2") return done(c.Mlock(s.id, addr, len, static_cast<int>(Arg(e, "flags"))));
  if (sys == "munlock") return done(c.Munlock(s.id, addr, len));
  if (sys == "mlockall") return done(c.Mlockall(s.id, static_cast<int>(Arg(e, "flags"))));
  if (sys == "munlockall") return done(c.Munlockall(s.id));
  if (sys == "mseal") return done(c.Mseal(s.id, addr, len, static_cast<uint64_t>(Arg(e, "flags"))));
  if (sys == "mincore") return done(c.Mincore(s.id, addr, len));
  if (sys == "ftruncate" && DaemonFile(e)) return done(c.TruncateFile(DaemonFile(e), static_cast<uint64_t>(Arg(e, "len"))));
  if (sys == "fallocate" && DaemonFile(e)) {
    if (Arg(e, "mode") != 0) return unsupported("fallocate(mode " + std::to_string(Arg(e, "mode")) + ")");
    if (e.ret != 0) return recorded_only();
    auto st = c.StatFile(DaemonFile(e));
    const uint64_t want = static_cast<uint64_t>(Arg(e, "off") + Arg(e, "len"));
    if (st.ok() && st.value().size() >= want) return o;
    return done(c.TruncateFile(DaemonFile(e), want));
  }
  if (sys == "pwrite64" && DaemonFile(e)) {
    if (e.ret <= 0) return recorded_only();  // nothing written; the kernel's errno is an fd's, not a mapping's
    // The bytes are not recorded: zeros of the written length.
    auto r = c.WriteFile(DaemonFile(e), static_cast<uint64_t>(Arg(e, "off")),
                         std::string(std::min<uint64_t>(static_cast<uint64_t>(e.ret), kMaxIo), '\0'));
    if (r.ok()) o.value = r.value();
    return done(r);
  }
  // clone, clone3, fork: a child with a space of its own was made by CloneSpace at its
  // fork record (Fork), just before; a thread or a vfork child shares its parent's.
  if (sys == "fcntl" && DaemonFile(e)) {
    if (Arg(e, "cmd") == 1033 /* F_ADD_SEALS */) return done(c.AddFileSeals(DaemonFile(e), static_cast<uint32_t>(Arg(e, "arg"))));
    if (Arg(e, "cmd") == 1034 /* F_GET_SEALS */) {
      auto r = c.GetFileSeals(DaemonFile(e));
      if (r.ok()) o.value = r.value();
      return done(r);
    }
  }
  // open, openat, close, dup*, memfd_create (its file was made at setup), vfork, execve,
  // exit_group and fd calls on what is not a regular file: nothing to send.
  return recorded_only();
}

/// A call of another thread of the space that ran at the same time as `e` on the kernel
/// (their entry-to-exit intervals overlap) and changes VMAs: which of the two took
/// mmap_lock first is not recorded (the trace orders calls by when the recorder saw
/// them return), so the replay's order may be the other. "" if none.
std::string Replayer::Concurrent(const Space& s, const Event& e) const {
  static const std::set<std::string> kChanges = {"mmap",  "munmap", "mremap",  "mprotect", "brk",        "madvise",
                                                 "mlock", "mlock2", "munlock", "mlockall", "munlockall", "mseal"};
  auto it = calls_of_mm_.find(s.mm);
  if (it == calls_of_mm_.end()) return "";
  for (const Event* o : it->second) {
    if (o == &e || o->tid == e.tid || !kChanges.count(o->sys)) continue;
    if (o->t_ns < e.t_ns + e.dur_ns && e.t_ns < o->t_ns + o->dur_ns)
      return "the order across threads: " + o->sys + " #" + std::to_string(o->seq) + " of tid " + std::to_string(o->tid) +
             " ran at the same time on the kernel";
  }
  return "";
}

std::string Replayer::CauseOf(Space& s, uint64_t lo, uint64_t hi) {
  std::lock_guard<std::mutex> l(s.mu);
  for (const Taint& t : s.taints) {
    if (t.lo < hi && lo < t.hi) return t.why;
  }
  return "";
}

void Replayer::Check(Space& s, const Event& e, const Outcome& out, Client& c) {
  const bool kernel_ok = e.err.empty();
  std::string what;
  if (kernel_ok && !out.ok) {
    what = e.sys + " failed " + out.error.Name() + ", the kernel returned " + (e.sys == "mmap" ? Hex(e.ret) : std::to_string(e.ret));
  } else if (!kernel_ok && out.ok) {
    what = e.sys + " succeeded" + (e.sys == "mmap" ? " (" + Hex(out.value) + ")" : "") + ", the kernel failed " + e.err;
  } else if (!kernel_ok && out.error.Name() != e.err) {
    what = e.sys + " failed " + out.error.Name() + ", the kernel " + e.err;
  } else if (kernel_ok && (e.sys == "mmap" || e.sys == "mremap" || e.sys == "brk") &&
             out.value != static_cast<uint64_t>(e.ret)) {
    what = e.sys + " returned " + Hex(out.value) + ", the kernel " + Hex(e.ret);
  } else if (kernel_ok && e.sys == "fcntl" && out.value != static_cast<uint64_t>(e.ret)) {
    what = e.sys + " returned " + std::to_string(out.value) + ", the kernel " + std::to_string(e.ret);
  }
  if (what.empty()) return;
  Difference d;
  d.seq = e.seq;
  d.what = DescribeCall(e) + ": " + what;
  uint64_t lo = static_cast<uint64_t>(Arg(e, e.sys == "mremap" ? "old_addr" : "addr"));
  uint64_t len = static_cast<uint64_t>(Arg(e, "len"));
  if (e.sys == "mmap" && kernel_ok) lo = static_cast<uint64_t>(e.ret);
  d.cause = CauseOf(s, lo, lo + std::max<uint64_t>(len, 1));
  if (d.cause.empty() && e.sys == "mmap" && out.ok) d.cause = CauseOf(s, out.value, out.value + std::max<uint64_t>(len, 1));
  if (d.cause.empty()) {  // the space has diverged: placements and ranges after it differ
    std::lock_guard<std::mutex> l(s.mu);
    if (!s.taints.empty()) d.cause = "may follow from " + s.taints.front().why;
  }
  if (d.cause.empty() && (d.cause = Concurrent(s, e)) != "") {
    // The space diverges from here: where the kernel and the replay put the range.
    std::lock_guard<std::mutex> l(s.mu);
    const std::string why = d.cause + " (#" + std::to_string(e.seq) + ")";
    s.taints.push_back({lo, lo + std::max<uint64_t>(len, 1), why});
    if (out.ok && e.sys != "brk") s.taints.push_back({out.value, out.value + std::max<uint64_t>(len, 1), why});
  }
  std::ostringstream ctx;
  {
    std::lock_guard<std::mutex> l(s.mu);
    const size_t from = s.history.size() > o_.context ? s.history.size() - o_.context : 0;
    for (size_t i = from; i < s.history.size(); ++i) ctx << "  " << s.history[i] << "\n";
  }
  const uint64_t around = lo > (64 << 10) ? lo - (64 << 10) : 0;
  auto maps = c.GetMaps(s.id, around, lo + len + (64 << 10));
  if (maps.ok()) {
    ctx << "  the replay's VMAs around " << Hex(lo) << ":\n";
    std::istringstream m(maps.value().maps_text());
    for (std::string line; std::getline(m, line);) ctx << "    " << line << "\n";
  }
  d.context = ctx.str();
  AddDifference(std::move(d));
}

/// A VMA as compared: the maps columns that must agree.
struct Cmp {
  uint64_t start = 0, end = 0;
  std::string perms, name, flags;
  uint64_t offset = 0;
  bool special = false;  // vdso/vvar: only the range
  std::string Line() const {
    char b[96];
    snprintf(b, sizeof b, "%llx-%llx %s %08llx ", static_cast<unsigned long long>(start),
             static_cast<unsigned long long>(end), perms.c_str(), static_cast<unsigned long long>(offset));
    return b + name + " [" + flags + "]";
  }
};

std::string NormalFlags(const std::string& f) {
  std::istringstream in(f);
  std::set<std::string> s;
  for (std::string w; in >> w;) {
    if (w != "sd") s.insert(w);  // soft-dirty: not modelled (as the oracle)
  }
  std::string out;
  for (const std::string& w : s) out += (out.empty() ? "" : " ") + w;
  return out;
}

void Replayer::CompareMaps(Client& c, Space& s, const Event& snap, const std::string& cause_all) {
  auto maps = c.GetMaps(s.id);
  if (!maps.ok()) {
    AddDifference({snap.seq, "GetMaps failed: " + maps.error().ToString(), "", cause_all});
    return;
  }
  std::vector<Cmp> k, r;
  for (const Vma& v : snap.snap.vmas) {
    if (v.name == "[vsyscall]") continue;
    Cmp x{v.start, v.end, v.perms, v.name, NormalFlags(v.vmflags), v.offset, SpecialName(v.name)};
    if (x.name == "[stack]" || x.name == "[heap]") x.name = "";
    k.push_back(x);
  }
  for (const v1::Vma& v : maps.value().vmas()) {
    Cmp x{v.start(), v.end(), v.perms(), v.name(), NormalFlags(v.smaps_vmflags()), v.offset(), false};
    if (v.inode() != 0) {
      auto f = file_of_daemon_.find(v.dev() + ":" + std::to_string(v.inode()));
      if (f != file_of_daemon_.end()) x.name = t_.files.at(f->second).path;
    }
    if (x.name == "[stack]" || x.name == "[heap]") x.name = "";
    r.push_back(x);
  }
  size_t i = 0, j = 0;
  bool first = true;
  auto around = [&](const std::vector<Cmp>& v, size_t at) {
    std::string s;
    for (size_t q = at > 3 ? at - 3 : 0; q < std::min(v.size(), at + 4); ++q) s += "    " + v[q].Line() + "\n";
    return s;
  };
  while (i < k.size() || j < r.size()) {
    std::string what;
    uint64_t lo = 0, hi = 0;
    if (j >= r.size() || (i < k.size() && k[i].start < r[j].start)) {
      what = "the kernel's VMA " + k[i].Line() + " is not in the replay";
      lo = k[i].start, hi = k[i].end;
      ++i;
    } else if (i >= k.size() || r[j].start < k[i].start) {
      what = "the replay's VMA " + r[j].Line() + " is not the kernel's";
      lo = r[j].start, hi = r[j].end;
      ++j;
    } else {
      const Cmp& a = k[i];
      const Cmp& b = r[j];
      const bool same = a.end == b.end &&
                        (a.special || (a.perms == b.perms && a.offset == b.offset && a.name == b.name && a.flags == b.flags));
      if (!same) {
        what = "VMA at " + Hex(a.start) + ": the kernel's " + a.Line() + ", the replay's " + b.Line();
        lo = a.start, hi = std::max(a.end, b.end);
      }
      ++i, ++j;
    }
    if (what.empty()) continue;
    Difference d;
    d.seq = snap.seq;
    d.what = (snap.kind == Event::Kind::kLayout ? "layout of mm " : "final maps of mm ") + std::to_string(s.mm) + ": " + what;
    d.cause = cause_all == "the layout replica" ? cause_all : CauseOf(s, lo, hi);
    if (d.cause.empty()) {
      std::lock_guard<std::mutex> l(s.mu);
      if (!s.taints.empty()) d.cause = "may follow from " + s.taints.front().why;
    }
    if (first) {
      d.context = "  the kernel's VMAs:\n" + around(k, i > 0 ? i - 1 : 0) + "  the replay's VMAs:\n" + around(r, j > 0 ? j - 1 : 0);
      first = false;
    }
    AddDifference(std::move(d));
  }
}

Space& Replayer::Ready(uint64_t mm) {
  Space& s = *spaces_.at(mm);
  std::unique_lock<std::mutex> l(ready_mu_);
  ready_cv_.wait(l, [&] { return s.ready; });
  return s;
}

void Replayer::Fork(Client& c, const Event& layout) {
  Space& child = *spaces_.at(layout.mm);
  Space& parent = Ready(child.parent_mm);
  // The pages the parent had written by the fork (the child's layout shows them, shared
  // copy-on-write): they give the parent's VMAs, and so the child's, their anon_vmas.
  for (const Vma& v : layout.snap.vmas) {
    if (v.perms.size() < 2 || v.perms[1] != 'w' || SpecialName(v.name)) continue;
    for (const ResidentRun& run : v.resident) {
      if (run.anon) (void)c.Access(parent.id, v.start + run.first * kPage, run.count * kPage, kPage, v1::ACCESS_WRITE);
    }
  }
  auto id = c.CloneSpace(parent.id);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++r_.issued;
    ++r_.by_sys["fork (CloneSpace)"];
    if (id.ok()) ++r_.spaces;
  }
  {
    std::lock_guard<std::mutex> l(parent.mu);
    parent.history.push_back("#" + std::to_string(layout.seq) + " fork of mm " + std::to_string(layout.mm) + "; replay: " +
                             (id.ok() ? "CloneSpace " + std::to_string(id.value()) : id.error().Name()));
  }
  child.brk_lo = child.brk_hi = layout.snap.start_brk;
  if (!id.ok()) {
    AddDifference({layout.seq, "CloneSpace of mm " + std::to_string(parent.mm) + " for mm " + std::to_string(layout.mm) +
                                   " failed: " + id.error().ToString(), "", ""});
  } else {
    child.id = id.value();
    if (o_.check) CompareMaps(c, child, layout, "");
  }
  {
    std::lock_guard<std::mutex> l(ready_mu_);
    child.ready = true;
  }
  ready_cv_.notify_all();
}

void Replayer::LeftByExec(Client& c, uint64_t mm) {
  Space& s = *spaces_.at(mm);
  if (s.exit != nullptr || s.gone.exchange(true)) return;
  (void)c.DestroySpace(s.id);
}

void Replayer::RunThread(int tid, const std::vector<const Event*>& events) {
  client::ClientOptions co = o_.client;
  co.own_connection = true;
  Client c(co);
  (void)tid;
  const uint64_t t_first = t_.events.empty() ? 0 : t_.events.front().t_ns;
  uint64_t mm = 0;  // the thread's address space so far
  for (const Event* e : events) {
    size_t pos = 0;
    if (o_.check) {
      pos = static_cast<size_t>(std::lower_bound(call_order_.begin(), call_order_.end(), e->seq) - call_order_.begin());
      std::unique_lock<std::mutex> l(turn_mu_);
      turn_cv_.wait(l, [&] { return turn_ == pos; });
    }
    if (o_.paced) std::this_thread::sleep_until(start_ + std::chrono::nanoseconds(e->t_ns - std::min(e->t_ns, t_first)));
    if (e->kind == Event::Kind::kLayout) {
      Fork(c, *e);
      if (o_.check) {
        std::lock_guard<std::mutex> l(turn_mu_);
        ++turn_;
        turn_cv_.notify_all();
      }
      continue;
    }
    if ((e->sys == "execve" || e->sys == "execveat") && e->err.empty() && mm != 0 && mm != e->mm) LeftByExec(c, mm);
    mm = e->mm;
    Space& s = Ready(e->mm);
    Outcome out = Issue(c, s, *e);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (out.kind == Outcome::Kind::kIssued) {
        ++r_.issued;
        ++r_.by_sys[e->sys];
      } else if (out.kind == Outcome::Kind::kUnsupported) {
        ++r_.unsupported[out.name];
      } else {
        ++r_.recorded_only;
      }
    }
    if (out.kind == Outcome::Kind::kUnsupported) {
      // What the kernel changed that the replay did not.
      Taint t;
      t.why = "unsupported " + out.name + " at #" + std::to_string(e->seq);
      const uint64_t a = static_cast<uint64_t>(Arg(*e, "addr")), len = static_cast<uint64_t>(Arg(*e, "len"));
      std::lock_guard<std::mutex> l(s.mu);
      if (e->sys == "brk") {
        if (e->ret > 0) {
          s.brk_hi = std::max(s.brk_hi, static_cast<uint64_t>(e->ret));
          if (s.brk_lo == 0) s.brk_lo = static_cast<uint64_t>(e->ret);
        }
        t.lo = s.brk_lo, t.hi = s.brk_hi;  // the heap, once it has grown
      } else if (e->sys == "mremap") {
        const uint64_t oa = static_cast<uint64_t>(Arg(*e, "old_addr"));
        s.taints.push_back({oa, oa + static_cast<uint64_t>(Arg(*e, "old_len")), t.why});
        if (e->ret > 0) t.lo = static_cast<uint64_t>(e->ret), t.hi = t.lo + static_cast<uint64_t>(Arg(*e, "new_len"));
      } else if (e->sys == "mlockall" || e->sys == "munlockall") {
        t.lo = 0, t.hi = ~uint64_t{0};
      } else if (e->sys != "mincore" && e->sys != "fcntl" && out.name != "fork") {
        t.lo = a, t.hi = a + len;
      }
      if (t.hi > t.lo) s.taints.push_back(t);
    }
    if (!out.differs.empty() && out.ok) {
      std::lock_guard<std::mutex> l(s.mu);
      const uint64_t len = static_cast<uint64_t>(Arg(*e, "len"));
      s.taints.push_back({out.value, out.value + len, out.differs + " at #" + std::to_string(e->seq)});
      if (e->sys == "mmap" && e->err.empty() && static_cast<uint64_t>(e->ret) != out.value)  // and where the kernel put it
        s.taints.push_back({static_cast<uint64_t>(e->ret), static_cast<uint64_t>(e->ret) + len, s.taints.back().why});
    }
    if (o_.check && out.kind == Outcome::Kind::kIssued) Check(s, *e, out, c);
    {
      std::lock_guard<std::mutex> l(s.mu);
      std::string res = out.kind == Outcome::Kind::kUnsupported ? "not replayed (unsupported)"
                        : out.kind == Outcome::Kind::kRecordedOnly ? "recorded only"
                        : out.ok ? (e->sys == "mmap" ? Hex(out.value) : "0")
                                 : out.error.Name();
      s.history.push_back(DescribeCall(*e) + "; replay: " + res);
    }
    if (o_.check) {
      std::lock_guard<std::mutex> l(turn_mu_);
      ++turn_;
      turn_cv_.notify_all();
    }
  }
}

std::string ProfileForStats(const std::string& p) {
  if (p.empty() || p == "default") return "";
  return p.find(',') != std::string::npos || p.find('=') != std::string::npos ? "custom" : p;
}

ReplayResult Replayer::Run() {
  // The address spaces: each has a layout record (exec, fork) and maybe an exit one.
  for (const Event& e : t_.events) {
    if (e.mm == 0) continue;
    auto& s = spaces_[e.mm];
    if (!s) {
      s = std::make_unique<Space>();
      s->mm = e.mm;
    }
    if (e.kind == Event::Kind::kLayout && s->layout == nullptr) s->layout = &e;
    if (e.kind == Event::Kind::kExit) s->exit = &e;
  }
  // A fork child's space is CloneSpace of its parent's, made when the thread that
  // forked reaches the child's fork record (before the clone call's own record).
  std::map<uint64_t, const Event*> fork_of;  // child mm -> the clone/fork call that made it
  for (const Event& e : t_.events) {
    if (e.kind != Event::Kind::kCall || e.ret <= 0 || (e.sys != "clone" && e.sys != "clone3" && e.sys != "fork")) continue;
    auto cm = e.info.find("child_mm");
    if (cm != e.info.end() && static_cast<uint64_t>(cm->second) != e.mm && spaces_.count(static_cast<uint64_t>(cm->second)))
      fork_of[static_cast<uint64_t>(cm->second)] = &e;
  }
  for (auto& [mm, s] : spaces_) {
    auto f = fork_of.find(mm);
    if (s->layout != nullptr && s->layout->snap.reason == "fork" && f != fork_of.end() && spaces_.count(f->second->mm))
      s->parent_mm = f->second->mm;
  }
  if (!SetUpFiles()) return r_;
  for (auto& [mm, s] : spaces_) {
    if (s->parent_mm != 0) continue;
    if (!SetUpSpace(*s)) return r_;
    s->ready = true;
  }
  std::map<int, std::vector<const Event*>> by_tid;
  for (const Event& e : t_.events) {
    if (e.mm == 0) continue;
    if (e.kind == Event::Kind::kLayout && e.snap.reason == "fork" && spaces_.at(e.mm)->parent_mm != 0 &&
        spaces_.at(e.mm)->layout == &e) {
      by_tid[fork_of.at(e.mm)->tid].push_back(&e);
      call_order_.push_back(e.seq);
    }
    if (e.kind != Event::Kind::kCall) continue;
    by_tid[e.tid].push_back(&e);
    call_order_.push_back(e.seq);
    calls_of_mm_[e.mm].push_back(&e);
  }
  r_.threads = by_tid.size();
  const std::string stats_profile = ProfileForStats(o_.locking_profile);
  auto before = setup_.GetLockStats(stats_profile);
  start_ = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> threads;
    for (const auto& [tid, events] : by_tid) threads.emplace_back([this, tid = tid, &events = events] { RunThread(tid, events); });
    for (std::thread& th : threads) th.join();
  }
  r_.call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  auto after = setup_.GetLockStats(stats_profile);
  if (before.ok() && after.ok()) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> b;
    for (const v1::LockStat& l : before.value().locks()) b[l.lock() + "-" + (l.mode() == "read" ? "R" : "W")] = {l.contentions(), l.acquisitions()};
    for (const v1::LockStat& l : after.value().locks()) {
      const std::string key = l.lock() + "-" + (l.mode() == "read" ? "R" : "W");
      r_.contentions[key] = l.contentions() - b[key].first;
      r_.acquisitions[key] = l.acquisitions() - b[key].second;
    }
  }
  for (auto& [mm, s] : spaces_) {
    if (s->exit == nullptr || s->id == 0) continue;
    FaultIn(setup_, *s, s->exit->snap.vmas);
    if (o_.check) CompareMaps(setup_, *s, *s->exit, "");
  }
  for (auto& [mm, s] : spaces_) {
    if (s->id != 0 && !s->gone) (void)setup_.DestroySpace(s->id);
  }
  for (auto& [id, fid] : files_) (void)setup_.CloseFile(fid);
  std::stable_sort(r_.differences.begin(), r_.differences.end(),
                   [](const Difference& a, const Difference& b) { return a.seq < b.seq; });
  return r_;
}

}  // namespace

size_t ReplayResult::Unexplained() const {
  return static_cast<size_t>(std::count_if(differences.begin(), differences.end(),
                                           [](const Difference& d) { return d.cause.empty(); }));
}

ReplayResult Replay(const Trace& t, const ReplayOptions& opt) {
  Replayer r(t, opt);
  return r.Run();
}

std::string UnsupportedSummary(const ReplayResult& r) {
  uint64_t n = 0;
  std::vector<std::pair<uint64_t, std::string>> v;
  for (const auto& [name, c] : r.unsupported) {
    n += c;
    v.push_back({c, name});
  }
  if (n == 0) return "";
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::string s = "unsupported: " + std::to_string(n) + " calls (";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].second + " " + std::to_string(v[i].first);
  return s + ")";
}

std::string DescribeCall(const Event& e) {
  std::string s = "#" + std::to_string(e.seq) + " tid " + std::to_string(e.tid) + " " + e.sys + "(";
  bool first = true;
  for (const auto& [k, v] : e.sargs) {
    s += (first ? "" : ", ") + k + "=\"" + v + "\"";
    first = false;
  }
  for (const auto& [k, v] : e.args) {
    const bool hex = k == "addr" || k == "len" || k == "off" || k == "old_addr" || k == "old_len" || k == "new_len" ||
                     k == "new_addr" || k == "flags";
    s += (first ? "" : ", ") + k + "=" + (hex ? Hex(static_cast<uint64_t>(v)) : std::to_string(v));
    first = false;
  }
  s += ")";
  if (e.has_ret) s += " = " + (e.err.empty() ? (e.sys == "mmap" ? Hex(static_cast<uint64_t>(e.ret)) : std::to_string(e.ret)) : e.err);
  return s;
}

}  // namespace vmspace::trace
