// SPDX-License-Identifier: Apache-2.0
// The ptrace recorder of `vmspace record` (ptrace_tracer.h).
#include "lib/ptrace_tracer.h"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace vmspace::trace {

namespace {

#if !defined(__x86_64__)
#error "the ptrace recorder reads x86-64 syscall numbers"
#endif

constexpr int kSysMseal = 462;  // x86-64; newer than this libc's headers
constexpr int kFAddSeals = 1033, kFGetSeals = 1034;
constexpr uint64_t kPage = 4096;
// Pages of one range whose pagemap a snapshot reads at most (1 GiB); larger VMAs
// (reservations) get no resident list.
constexpr uint64_t kMaxPagemapPages = 1ull << 18;

/// The syscalls the recorder writes, by x86-64 number, with their arguments' names
/// (register order; "" skips one) and which of them is a string in the tracee.
struct SysSpec {
  const char* name;
  std::vector<const char*> args;
  int path_arg = -1;  // index of a NUL-terminated string argument
};

const std::map<long, SysSpec>& Specs() {
  static const std::map<long, SysSpec> specs = {
      {SYS_mmap, {"mmap", {"addr", "len", "prot", "flags", "fd", "off"}}},
      {SYS_munmap, {"munmap", {"addr", "len"}}},
      {SYS_mprotect, {"mprotect", {"addr", "len", "prot"}}},
      {SYS_brk, {"brk", {"addr"}}},
      {SYS_mremap, {"mremap", {"old_addr", "old_len", "new_len", "flags", "new_addr"}}},
      {SYS_madvise, {"madvise", {"addr", "len", "advice"}}},
      {SYS_mlock, {"mlock", {"addr", "len"}}},
      {SYS_mlock2, {"mlock2", {"addr", "len", "flags"}}},
      {SYS_munlock, {"munlock", {"addr", "len"}}},
      {SYS_mlockall, {"mlockall", {"flags"}}},
      {SYS_munlockall, {"munlockall", {}}},
      {SYS_mincore, {"mincore", {"addr", "len"}}},
      {SYS_msync, {"msync", {"addr", "len", "flags"}}},
      {kSysMseal, {"mseal", {"addr", "len", "flags"}}},
      {SYS_memfd_create, {"memfd_create", {"name", "flags"}, 0}},
      {SYS_fcntl, {"fcntl", {"fd", "cmd", "arg"}}},
      {SYS_open, {"open", {"path", "flags", "mode"}, 0}},
      {SYS_openat, {"openat", {"dirfd", "path", "flags", "mode"}, 1}},
      {SYS_close, {"close", {"fd"}}},
      {SYS_dup, {"dup", {"fd"}}},
      {SYS_dup2, {"dup2", {"fd", "newfd"}}},
      {SYS_dup3, {"dup3", {"fd", "newfd", "flags"}}},
      {SYS_ftruncate, {"ftruncate", {"fd", "len"}}},
      {SYS_fallocate, {"fallocate", {"fd", "mode", "off", "len"}}},
      {SYS_pwrite64, {"pwrite64", {"fd", "", "len", "off"}}},
      {SYS_clone, {"clone", {"flags"}}},
      {SYS_clone3, {"clone3", {}}},
      {SYS_fork, {"fork", {}}},
      {SYS_vfork, {"vfork", {}}},
      {SYS_execve, {"execve", {"path"}, 0}},
      {SYS_execveat, {"execveat", {"dirfd", "path", "", "", "flags"}, 1}},
      {SYS_exit_group, {"exit_group", {"status"}}},
  };
  return specs;
}

/// The calls whose fd argument (or result) names a file the trace identifies.
bool FdArgIsFile(long nr) {
  return nr == SYS_ftruncate || nr == SYS_fallocate || nr == SYS_pwrite64 || nr == SYS_fcntl;
}

uint64_t NowNs(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

uint64_t ReadU64File(const std::string& path, uint64_t def) {
  std::ifstream f(path);
  uint64_t v;
  return (f >> v) ? v : def;
}

std::string DevString(dev_t d) {
  char b[32];
  snprintf(b, sizeof b, "%02x:%02x", major(d), minor(d));
  return b;
}

/// A NUL-terminated string of the tracee (at most 4096 bytes).
std::string ReadString(pid_t pid, uint64_t addr) {
  std::string s;
  char buf[256];
  while (addr != 0 && s.size() < 4096) {
    // Stay inside one page per read: the next page may be unmapped.
    size_t n = std::min<uint64_t>(sizeof buf, kPage - (addr % kPage));
    iovec local{buf, n}, remote{reinterpret_cast<void*>(addr), n};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) break;
    size_t len = strnlen(buf, static_cast<size_t>(got));
    s.append(buf, len);
    if (len < static_cast<size_t>(got)) break;
    addr += static_cast<uint64_t>(got);
  }
  return s;
}

/// Resident pages of [start, end) from an open /proc/PID/pagemap.
std::vector<ResidentRun> ResidentRuns(int pagemap_fd, uint64_t start, uint64_t end) {
  std::vector<ResidentRun> runs;
  if (pagemap_fd < 0 || end <= start || (end - start) / kPage > kMaxPagemapPages) return runs;
  std::vector<uint64_t> ents(4096);
  for (uint64_t page = start / kPage, last = end / kPage; page < last;) {
    const uint64_t n = std::min<uint64_t>(ents.size(), last - page);
    ssize_t got = pread(pagemap_fd, ents.data(), n * 8, static_cast<off_t>(page * 8));
    if (got <= 0) break;
    for (uint64_t i = 0; i < static_cast<uint64_t>(got) / 8; ++i) {
      const uint64_t e = ents[i];
      if (!(e >> 63 & 1)) continue;        // present
      const bool anon = !(e >> 61 & 1);    // not file-page / shared-anon
      const uint64_t idx = page + i - start / kPage;
      if (!runs.empty() && runs.back().anon == anon && runs.back().first + runs.back().count == idx)
        ++runs.back().count;
      else
        runs.push_back({idx, 1, anon});
    }
    page += static_cast<uint64_t>(got) / 8;
  }
  return runs;
}

struct Task {
  int tid = 0, tgid = 0;
  uint64_t mm = 0;
  bool seen = false;  // had its first stop
  // The syscall in progress (between its entry and exit stops).
  bool in_call = false;
  long nr = -1;
  uint64_t args[6] = {};
  uint64_t t0 = 0;
  std::string path;
  std::vector<ResidentRun> touched;
  bool layout_at_exit = false;  // its execve completed: take the layout at the exit stop
};

class Recorder {
 public:
  Recorder(const RecordOptions& opt, Writer& out, RecordSummary* sum) : opt_(opt), out_(out), sum_(sum) {}

  bool Run(std::string* error);

 private:
  void OnSyscallStop(Task& t);
  void OnEntry(Task& t, const __ptrace_syscall_info& si);
  void OnExit(Task& t, const __ptrace_syscall_info& si);
  void OnEvent(Task& t, int event);
  /// Registers a task met for the first time (a fork/clone child), with its address
  /// space: that of a task it shares one with, else a new one (then its layout). A
  /// child the parent's clone event or clone return names after the child has already
  /// run, exited and been reaped (a busy machine schedules it first) is the reaped
  /// task, not a new one: its /proc entry is gone and kcmp cannot match it any more.
  Task& Register(int tid, const Task* parent);
  void Snapshot(Task& t, Event::Kind kind, const std::string& reason, int64_t status);
  std::optional<uint64_t> FileOfFd(int tid, int64_t fd, int64_t* size);
  std::optional<uint64_t> FileOfStat(const struct stat& st, const std::string& path, const std::string& source);
  void Emit(Event& e);
  int LiveTasksOf(uint64_t mm) const {
    int n = 0;
    for (const auto& [tid, t] : tasks_) n += t.mm == mm;
    return n;
  }

  const RecordOptions& opt_;
  Writer& out_;
  RecordSummary* sum_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::map<int, Task> tasks_;
  std::map<int, Task> reaped_;  // tasks that exited, until their tid is met alive again
  std::map<std::string, uint64_t> file_ids_;  // "dev:ino" -> File::id
  std::set<uint64_t> exited_mms_;
  uint64_t next_mm_ = 1, next_file_ = 1, seq_ = 0;
  int root_ = 0;
};

void Recorder::Emit(Event& e) {
  e.seq = seq_++;
  out_.WriteEvent(e);
  if (e.kind == Event::Kind::kCall) {
    ++sum_->calls;
    ++sum_->by_sys[e.sys];
  }
}

std::optional<uint64_t> Recorder::FileOfStat(const struct stat& st, const std::string& path,
                                             const std::string& source) {
  if (!S_ISREG(st.st_mode)) return std::nullopt;
  const std::string key = DevString(st.st_dev) + ":" + std::to_string(st.st_ino);
  if (auto it = file_ids_.find(key); it != file_ids_.end()) return it->second;
  File f;
  f.id = next_file_++;
  f.path = path;
  f.dev = DevString(st.st_dev);
  f.ino = st.st_ino;
  f.size = static_cast<uint64_t>(st.st_size);
  f.shmem = path.rfind("/memfd:", 0) == 0;
  if (opt_.capture_files && !source.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt_.files_dir, ec);
    const std::string dst = opt_.files_dir + "/" + std::to_string(f.id);
    int in = open(source.c_str(), O_RDONLY | O_CLOEXEC);
    int outfd = in >= 0 ? open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    if (outfd >= 0) {
      char buf[1 << 16];
      uint64_t left = std::min<uint64_t>(f.size, opt_.capture_limit);
      while (left > 0) {
        ssize_t n = read(in, buf, std::min<uint64_t>(sizeof buf, left));
        if (n <= 0 || write(outfd, buf, static_cast<size_t>(n)) != n) break;
        f.captured_bytes += static_cast<uint64_t>(n);
        left -= static_cast<uint64_t>(n);
      }
      f.captured = opt_.files_ref + "/" + std::to_string(f.id);
      close(outfd);
    }
    if (in >= 0) close(in);
  }
  file_ids_[key] = f.id;
  out_.WriteFile(f);
  return f.id;
}

std::optional<uint64_t> Recorder::FileOfFd(int tid, int64_t fd, int64_t* size) {
  if (fd < 0) return std::nullopt;
  const std::string link = "/proc/" + std::to_string(tid) + "/fd/" + std::to_string(fd);
  struct stat st;
  if (stat(link.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (size) *size = st.st_size;
  char target[4096];
  ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  return FileOfStat(st, n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string(), link);
}

void Recorder::Snapshot(Task& t, Event::Kind kind, const std::string& reason, int64_t status) {
  Event e;
  e.kind = kind;
  e.tid = t.tid;
  e.tgid = t.tgid;
  e.mm = t.mm;
  e.t_ns = NowNs(t0_);
  e.snap.reason = reason;
  e.snap.status = status;
  const std::string proc = "/proc/" + std::to_string(t.tid);
  if (kind == Event::Kind::kLayout) {
    // /proc/PID/stat field 47 is start_brk; the comm (field 2) may hold spaces.
    std::string stat = ReadText(proc + "/stat");
    size_t rp = stat.rfind(')');
    if (rp != std::string::npos) {
      std::istringstream in(stat.substr(rp + 2));
      std::string f;
      for (int field = 3; in >> f; ++field) {
        if (field == 47) {
          e.snap.start_brk = std::stoull(f);
          break;
        }
      }
    }
  }
  int pm = open((proc + "/pagemap").c_str(), O_RDONLY | O_CLOEXEC);
  std::istringstream smaps(ReadText(proc + "/smaps"));
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long start, end, off, ino;
    char perms[8], dev[32];
    int name_at = 0;
    if (sscanf(line.c_str(), "%lx-%lx %7s %lx %31s %lu %n", &start, &end, perms, &off, dev, &ino, &name_at) >= 6 &&
        line.find(':') != std::string::npos && line.find('-') < line.find(' ')) {
      Vma v;
      v.start = start;
      v.end = end;
      v.perms = perms;
      v.offset = off;
      v.dev = dev;
      v.ino = ino;
      v.name = name_at > 0 && static_cast<size_t>(name_at) <= line.size() ? line.substr(static_cast<size_t>(name_at)) : "";
      const bool anon_shared = v.name == "/dev/zero (deleted)" || v.name.rfind("/SYSV", 0) == 0;
      if (ino != 0 && !anon_shared) {
        char range[64];
        snprintf(range, sizeof range, "/map_files/%lx-%lx", start, end);
        struct stat st;
        std::string source = proc + range;
        if (stat(source.c_str(), &st) != 0) {
          source = v.name;
          if (stat(source.c_str(), &st) != 0 || st.st_ino != ino) {
            // Not reachable: a file of the mapped extent stands for it.
            st = {};
            st.st_mode = S_IFREG;
            st.st_ino = ino;
            st.st_size = static_cast<off_t>(off + (end - start));
            unsigned maj = 0, min = 0;
            sscanf(dev, "%x:%x", &maj, &min);
            st.st_dev = makedev(maj, min);
            source.clear();
          }
        }
        v.file = FileOfStat(st, v.name, source);
      }
      if (v.name != "[vsyscall]") v.resident = ResidentRuns(pm, start, end);
      e.snap.vmas.push_back(std::move(v));
    } else if (line.rfind("VmFlags:", 0) == 0 && !e.snap.vmas.empty()) {
      std::string f = line.substr(8);
      while (!f.empty() && f.front() == ' ') f.erase(f.begin());
      while (!f.empty() && (f.back() == ' ' || f.back() == '\n')) f.pop_back();
      e.snap.vmas.back().vmflags = f;
    }
  }
  if (pm >= 0) close(pm);
  Emit(e);
}

Task& Recorder::Register(int tid, const Task* parent) {
  if (parent != nullptr && !tasks_.count(tid)) {
    if (auto r = reaped_.find(tid); r != reaped_.end()) return r->second;  // ran and exited first
  }
  Task& t = tasks_[tid];
  if (t.tid != 0) return t;  // known already (its first stop came before the event)
  t.tid = tid;
  t.tgid = tid;
  std::istringstream st(ReadText("/proc/" + std::to_string(tid) + "/status"));
  for (std::string line; std::getline(st, line);) {
    if (line.rfind("Tgid:", 0) == 0) t.tgid = std::stoi(line.substr(5));
  }
  for (const auto& [otid, o] : tasks_) {
    if (otid == tid || o.mm == 0) continue;
    if (o.tgid == t.tgid || syscall(SYS_kcmp, tid, otid, KCMP_VM, 0, 0) == 0) {
      t.mm = o.mm;
      break;
    }
  }
  if (t.mm == 0 && parent != nullptr && parent->mm == 0) return t;  // the recorder's own fork copy
  if (t.mm == 0) {
    t.mm = next_mm_++;
    ++sum_->spaces;
    Snapshot(t, Event::Kind::kLayout, "fork", 0);
  }
  ++sum_->tasks;
  return t;
}

void Recorder::OnEntry(Task& t, const __ptrace_syscall_info& si) {
  t.in_call = true;
  t.nr = static_cast<long>(si.entry.nr);
  for (int i = 0; i < 6; ++i) t.args[i] = si.entry.args[i];
  t.t0 = NowNs(t0_);
  t.path.clear();
  t.touched.clear();
  auto spec = Specs().find(t.nr);
  if (spec == Specs().end()) return;
  if (spec->second.path_arg >= 0) t.path = ReadString(t.tid, t.args[spec->second.path_arg]);
  if (t.mm == 0) return;
  // The anonymous pages the program wrote in the range before a call that changes a
  // VMA's flags or moves it: they give its VMAs their anon_vma, which decides merges
  // (ranges above 1 GiB are left out, as a VMA's resident runs are).
  const bool range_call = t.nr == SYS_mprotect || t.nr == SYS_mremap || t.nr == SYS_madvise || t.nr == SYS_mlock ||
                          t.nr == SYS_mlock2 || t.nr == SYS_munlock || t.nr == kSysMseal;
  if (range_call && t.args[1] <= (uint64_t{1} << 30)) {
    int pm = open(("/proc/" + std::to_string(t.tid) + "/pagemap").c_str(), O_RDONLY | O_CLOEXEC);
    const uint64_t a = t.args[0] & ~(kPage - 1);
    for (ResidentRun r : ResidentRuns(pm, a, (t.args[0] + t.args[1] + kPage - 1) & ~(kPage - 1))) {
      if (r.anon) t.touched.push_back(r);
    }
    if (pm >= 0) close(pm);
  }
  if (t.nr == SYS_exit_group) {
    Event e;
    e.tid = t.tid;
    e.tgid = t.tgid;
    e.mm = t.mm;
    e.t_ns = t.t0;
    e.sys = "exit_group";
    e.args["status"] = static_cast<int32_t>(t.args[0]);
    Emit(e);
    if (exited_mms_.insert(t.mm).second) Snapshot(t, Event::Kind::kExit, "exit_group", static_cast<int32_t>(t.args[0]));
  }
}

void Recorder::OnExit(Task& t, const __ptrace_syscall_info& si) {
  if (!t.in_call) return;
  t.in_call = false;
  auto it = Specs().find(t.nr);
  const bool layout = t.layout_at_exit;
  t.layout_at_exit = false;
  if (it == Specs().end() || t.nr == SYS_exit_group || (t.mm == 0 && !layout)) return;
  const SysSpec& spec = it->second;
  if (t.nr == SYS_fcntl && t.args[1] != kFAddSeals && t.args[1] != kFGetSeals) return;
  Event e;
  e.tid = t.tid;
  e.tgid = t.tgid;
  e.mm = t.mm;
  e.t_ns = t.t0;
  e.dur_ns = NowNs(t0_) - t.t0;
  e.sys = spec.name;
  for (size_t i = 0; i < spec.args.size(); ++i) {
    if (spec.args[i][0] == '\0') continue;
    if (static_cast<int>(i) == spec.path_arg) e.sargs[spec.args[i]] = t.path;
    else e.args[spec.args[i]] = static_cast<int64_t>(t.args[i]);
  }
  // Registers hold 64 bits; fds, flags and the like are C ints.
  for (const char* k : {"fd", "dirfd", "newfd", "prot", "flags", "advice", "cmd", "mode", "status"}) {
    if (auto a = e.args.find(k); a != e.args.end()) a->second = static_cast<int32_t>(a->second);
  }
  if (t.nr == SYS_clone3) {
    uint64_t flags = 0;
    iovec local{&flags, sizeof flags}, remote{reinterpret_cast<void*>(t.args[0]), sizeof flags};
    if (process_vm_readv(t.tid, &local, 1, &remote, 1, 0) == sizeof flags) e.args["flags"] = static_cast<int64_t>(flags);
  }
  e.has_ret = true;
  e.ret = si.exit.rval;
  e.err = ErrnoName(e.ret);
  e.touched = std::move(t.touched);
  int64_t size = -1;
  if (e.ret >= 0) {
    if (t.nr == SYS_mmap && !(t.args[3] & MAP_ANONYMOUS)) e.file = FileOfFd(t.tid, static_cast<int32_t>(t.args[4]), &size);
    if (t.nr == SYS_open || t.nr == SYS_openat || t.nr == SYS_memfd_create) e.file = FileOfFd(t.tid, e.ret, &size);
    if (FdArgIsFile(t.nr)) {
      e.file = FileOfFd(t.tid, static_cast<int32_t>(t.args[0]), &size);
      if (t.nr == SYS_pwrite64 && !e.file) return;  // a pipe or socket: not a file's
    }
    if ((t.nr == SYS_clone || t.nr == SYS_clone3 || t.nr == SYS_fork || t.nr == SYS_vfork) && e.ret > 0) {
      Task& c = Register(static_cast<int>(e.ret), &t);
      e.info["child_tid"] = c.tid;
      e.info["child_tgid"] = c.tgid;
      e.info["child_mm"] = static_cast<int64_t>(c.mm);
    }
  } else if (t.nr == SYS_pwrite64 || t.nr == SYS_ftruncate || t.nr == SYS_fallocate || t.nr == SYS_fcntl) {
    e.file = FileOfFd(t.tid, static_cast<int32_t>(t.args[0]), &size);
  } else if (t.nr == SYS_mmap && !(t.args[3] & MAP_ANONYMOUS)) {  // refused (EPERM of a seal, EACCES): still its file's
    e.file = FileOfFd(t.tid, static_cast<int32_t>(t.args[4]), &size);
    if (t.nr == SYS_pwrite64 && !e.file) return;
  }
  if (e.file && size >= 0) e.info["size"] = size;
  if (t.nr == SYS_mmap && e.file) {
    // The fd's access mode: a MAP_SHARED mapping of a read-only fd loses VM_MAYWRITE.
    std::istringstream fdinfo(ReadText("/proc/" + std::to_string(t.tid) + "/fdinfo/" + std::to_string(static_cast<int32_t>(t.args[4]))));
    for (std::string line; std::getline(fdinfo, line);) {
      if (line.rfind("flags:", 0) == 0) e.info["fd_flags"] = std::stoll(line.substr(6), nullptr, 8);
    }
  }
  Emit(e);
  if (layout && e.ret == 0) Snapshot(t, Event::Kind::kLayout, "exec", 0);
}

void Recorder::OnSyscallStop(Task& t) {
  __ptrace_syscall_info si{};
  if (ptrace(PTRACE_GET_SYSCALL_INFO, t.tid, sizeof si, &si) <= 0) return;
  if (si.op == PTRACE_SYSCALL_INFO_ENTRY) OnEntry(t, si);
  else if (si.op == PTRACE_SYSCALL_INFO_EXIT) OnExit(t, si);
}

void Recorder::OnEvent(Task& t, int event) {
  unsigned long msg = 0;
  ptrace(PTRACE_GETEVENTMSG, t.tid, 0, &msg);
  switch (event) {
    case PTRACE_EVENT_FORK:
    case PTRACE_EVENT_VFORK:
    case PTRACE_EVENT_CLONE:
      Register(static_cast<int>(msg), &t);
      break;
    case PTRACE_EVENT_EXEC: {
      Task* cur = &t;
      const int former = static_cast<int>(msg);
      if (former != t.tid && tasks_.count(former)) {  // a non-leader thread exec'd: it is the leader now
        Task moved = tasks_[former];
        tasks_.erase(former);
        moved.tid = t.tid;
        t = moved;
        cur = &t;
      }
      cur->mm = next_mm_++;
      ++sum_->spaces;
      cur->layout_at_exit = true;
      break;
    }
    case PTRACE_EVENT_EXIT: {
      const int status = static_cast<int>(msg);
      if (t.mm != 0 && !exited_mms_.count(t.mm) && (WIFSIGNALED(status) || LiveTasksOf(t.mm) == 1)) {
        exited_mms_.insert(t.mm);
        Snapshot(t, Event::Kind::kExit, WIFSIGNALED(status) ? "signal" : "exit",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      }
      break;
    }
    default:
      break;
  }
}

/// The program's path: argv[0] if it holds a '/', else the first executable of $PATH.
std::string Resolve(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  const char* p = getenv("PATH");
  std::istringstream path(p ? p : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(path, dir, ':');) {
    std::string c = (dir.empty() ? "." : dir) + "/" + prog;
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

bool Recorder::Run(std::string* error) {
  if (opt_.argv.empty()) {
    *error = "no program to record";
    return false;
  }
  const std::string exe = Resolve(opt_.argv[0]);
  if (exe.empty() || access(exe.c_str(), X_OK) != 0) {
    *error = opt_.argv[0] + ": not found or not executable";
    return false;
  }
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    return false;
  }
  std::vector<char*> argv;
  for (const std::string& a : opt_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(errpipe[0]);
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) {
      int e = errno;
      (void)!write(errpipe[1], &e, sizeof e);
      _exit(126);
    }
    personality(ADDR_NO_RANDOMIZE);
    raise(SIGSTOP);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(errpipe[1]);
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    return false;
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFSTOPPED(st)) {
    int e = 0;
    const bool got = read(errpipe[0], &e, sizeof e) == sizeof e;
    close(errpipe[0]);
    *error = got ? std::string("ptrace(PTRACE_TRACEME): ") + strerror(e) : "the program did not start";
    return false;
  }
  close(errpipe[0]);
  if (ptrace(PTRACE_SETOPTIONS, pid, 0,
             PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
                 PTRACE_O_TRACEEXEC | PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL) != 0) {
    *error = std::string("ptrace(PTRACE_SETOPTIONS): ") + strerror(errno);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return false;
  }
  root_ = pid;
  Task& root = tasks_[pid];
  root.tid = root.tgid = pid;
  root.seen = true;
  ++sum_->tasks;
  ptrace(PTRACE_SYSCALL, pid, 0, 0);
  for (;;) {
    const pid_t tid = waitpid(-1, &st, __WALL);
    if (tid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: every task is gone
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (tid == root_) sum_->exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (auto it = tasks_.find(tid); it != tasks_.end()) {
        reaped_[tid] = std::move(it->second);
        tasks_.erase(it);
      }
      continue;
    }
    if (!WIFSTOPPED(st)) continue;
    if (!tasks_.count(tid)) reaped_.erase(tid);  // a new task with a reused tid
    Task& t = tasks_.count(tid) ? tasks_[tid] : Register(tid, nullptr);
    const int sig = WSTOPSIG(st);
    int inject = 0;
    if (sig == (SIGTRAP | 0x80)) {
      OnSyscallStop(t);
    } else if (sig == SIGTRAP && (st >> 16) != 0) {
      OnEvent(t, st >> 16);
    } else if (!t.seen && sig == SIGSTOP) {
      // A new task's attach stop.
    } else {
      inject = sig;
    }
    t.seen = true;
    ptrace(PTRACE_SYSCALL, tid, 0, inject);
  }
  return true;
}

std::string Now() {
  char b[64];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

Header MakeHeader(const RecordOptions& opt) {
  Header h;
  h.vmspace_version = opt.vmspace_version;
  utsname u{};
  uname(&u);
  h.kernel = std::string(u.sysname) + " " + u.release + " " + u.version + " " + u.machine;
  std::istringstream cpu(ReadText("/proc/cpuinfo"));
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      h.cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  h.cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  h.date = Now();
  h.command = opt.argv;
  h.page_size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  h.mmap_min_addr = ReadU64File("/proc/sys/vm/mmap_min_addr", 65536);
  h.max_map_count = ReadU64File("/proc/sys/vm/max_map_count", 65530);
  rlimit rl{};
  getrlimit(RLIMIT_STACK, &rl);
  h.rlimit_stack = rl.rlim_cur == RLIM_INFINITY ? ~uint64_t{0} : rl.rlim_cur;
  h.aslr_off = true;
  return h;
}

}  // namespace

bool PtraceAvailable(std::string* why) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    int e = ptrace(PTRACE_TRACEME, 0, 0, 0) == 0 ? 0 : errno;
    (void)!write(p[1], &e, sizeof e);
    _exit(0);
  }
  close(p[1]);
  int e = -1;
  const bool got = read(p[0], &e, sizeof e) == sizeof e;
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  if (got && e == 0) return true;
  if (why) {
    std::string scope = ReadText("/proc/sys/kernel/yama/ptrace_scope");
    while (!scope.empty() && scope.back() == '\n') scope.pop_back();
    *why = std::string("ptrace(PTRACE_TRACEME) fails: ") + (got ? strerror(e) : "no answer") +
           (scope.empty() ? "" : " (kernel.yama.ptrace_scope = " + scope + ")");
  }
  return false;
}

bool Record(const RecordOptions& opt, Writer& out, RecordSummary* summary, std::string* error) {
  RecordSummary local;
  RecordSummary* sum = summary ? summary : &local;
  *sum = {};
  out.WriteHeader(MakeHeader(opt));
  Recorder r(opt, out, sum);
  return r.Run(error);
}

}  // namespace vmspace::trace
