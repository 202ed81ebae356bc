// SPDX-License-Identifier: Apache-2.0
// Implementation of the kernel-oracle session: child process management, the op
// language, and the canonical text of each side's answers.
#include "oracle_session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#ifndef VMSPACE_ORACLE_CHILD_PATH
#define VMSPACE_ORACLE_CHILD_PATH "vmspace_oracle_child"
#endif

namespace vmspace::oracle {
namespace {

std::string Hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s.c_str(), &end, 0);
  if (errno || *end) return false;
  *out = v;
  return true;
}

// Reads the hex fields of a child response line after its tag.
std::vector<uint64_t> HexFields(const std::string& line) {
  std::vector<uint64_t> v;
  std::istringstream in(line.size() > 2 ? line.substr(2) : "");
  std::string w;
  while (in >> w) v.push_back(strtoull(w.c_str(), nullptr, 16));
  return v;
}

std::string SigName(int sig) {
  if (sig == SIGSEGV) return "SIGSEGV";
  if (sig == SIGBUS) return "SIGBUS";
  return "sig" + std::to_string(sig);
}
std::string SiCodeName(int sig, int code) {
  if (sig == SIGSEGV) {
    if (code == 1) return "SEGV_MAPERR";
    if (code == 2) return "SEGV_ACCERR";
    if (code == 4) return "SEGV_PKUERR";
  }
  if (sig == SIGBUS) {
    if (code == 1) return "BUS_ADRALN";
    if (code == 2) return "BUS_ADRERR";
    if (code == 3) return "BUS_OBJERR";
  }
  if (code == 0x80) return "SI_KERNEL";
  return "code" + std::to_string(code);
}

struct NamedBit {
  const char* name;
  int bits;
};
const NamedBit kFlagNames[] = {
    {"anonymous", MAP_ANONYMOUS},   {"fixed_noreplace", MAP_FIXED_NOREPLACE},
    {"fixed", MAP_FIXED},           {"noreserve", MAP_NORESERVE},
    {"populate", MAP_POPULATE},     {"growsdown", MAP_GROWSDOWN},
    {"locked", MAP_LOCKED},         {"stack", MAP_STACK},
    {"hugetlb", MAP_HUGETLB},       {"nonblock", MAP_NONBLOCK},
    {"denywrite", MAP_DENYWRITE},   {"executable", MAP_EXECUTABLE},
    {"sync", 0x80000},              {"uninitialized", 0x4000000},
};
const NamedBit kProtNames[] = {
    {"sem", 0x8}, {"growsdown", PROT_GROWSDOWN}, {"growsup", PROT_GROWSUP}};

}  // namespace

std::string ErrName(int err) {
  const char* n = strerrorname_np(err);
  return n ? n : "errno" + std::to_string(err);
}

bool ParseProt(const std::string& s, int* out) {
  int prot = 0;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, '|')) {
    if (part.empty()) return false;
    uint64_t v;
    if (part == "none") continue;
    if (ParseU64(part, &v)) {
      prot |= static_cast<int>(v);
      continue;
    }
    bool named = false;
    for (const auto& n : kProtNames)
      if (part == n.name) {
        prot |= n.bits;
        named = true;
      }
    if (named) continue;
    for (char c : part) {
      if (c == 'r') prot |= PROT_READ;
      else if (c == 'w') prot |= PROT_WRITE;
      else if (c == 'x') prot |= PROT_EXEC;
      else if (c == '-') continue;
      else return false;
    }
  }
  *out = prot;
  return true;
}

std::string ProtName(int prot) {
  std::string s;
  if (prot & PROT_READ) s += 'r';
  if (prot & PROT_WRITE) s += 'w';
  if (prot & PROT_EXEC) s += 'x';
  int rest = prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC);
  for (const auto& n : kProtNames)
    if (rest & n.bits) {
      if (!s.empty()) s += '|';
      s += n.name;
      rest &= ~n.bits;
    }
  if (rest) s += (s.empty() ? "" : "|") + Hex(static_cast<uint32_t>(rest));
  return s.empty() ? "none" : s;
}

bool ParseFlags(const std::string& s, int* out) {
  int flags = 0;
  std::string part;
  std::string norm = s;
  for (char& c : norm)
    if (c == '|') c = ',';
  std::istringstream in(norm);
  while (std::getline(in, part, ',')) {
    if (part.empty()) return false;
    uint64_t v;
    if (ParseU64(part, &v)) flags |= static_cast<int>(v);
    else if (part == "private") flags |= MAP_PRIVATE;
    else if (part == "shared") flags |= MAP_SHARED;
    else if (part == "shared_validate") flags |= MAP_SHARED_VALIDATE;
    else if (part == "droppable") flags |= MAP_DROPPABLE;
    else if (part == "anon") flags |= MAP_ANONYMOUS;
    else {
      bool named = false;
      for (const auto& n : kFlagNames)
        if (part == n.name) {
          flags |= n.bits;
          named = true;
        }
      if (!named) return false;
    }
  }
  *out = flags;
  return true;
}

std::string FlagsName(int flags) {
  std::vector<std::string> parts;
  int type = flags & 0x0f;
  if (type == MAP_SHARED_VALIDATE) parts.push_back("shared_validate");
  else if (type == MAP_SHARED) parts.push_back("shared");
  else if (type == MAP_PRIVATE) parts.push_back("private");
  else if (type == MAP_DROPPABLE) parts.push_back("droppable");
  else if (type) parts.push_back(Hex(static_cast<uint32_t>(type)));
  int rest = flags & ~0x0f;
  for (const auto& n : kFlagNames)
    if ((rest & n.bits) == n.bits && n.bits) {
      parts.push_back(n.name);
      rest &= ~n.bits;
    }
  if (rest) parts.push_back(Hex(static_cast<uint32_t>(rest)));
  if (parts.empty()) return "0x0";
  std::string s;
  for (size_t i = 0; i < parts.size(); i++) s += (i ? "," : "") + parts[i];
  return s;
}

// ---------------------------------------------------------------- KernelChild

std::string ChildPath() {
  const char* e = getenv("VMSPACE_ORACLE_CHILD");
  return e && *e ? e : VMSPACE_ORACLE_CHILD_PATH;
}

KernelChild::KernelChild(const std::string& path) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) {
    error_ = std::string("pipe: ") + strerror(errno);
    return;
  }
  pid_ = fork();
  if (pid_ < 0) {
    error_ = std::string("fork: ") + strerror(errno);
    return;
  }
  if (pid_ == 0) {
    // Child: only async-signal-safe calls until execv.
    personality(ADDR_NO_RANDOMIZE);
    struct rlimit rl;
    getrlimit(RLIMIT_STACK, &rl);
    rl.rlim_cur = 8ull << 20;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur) rl.rlim_max = rl.rlim_cur;
    setrlimit(RLIMIT_STACK, &rl);
    // The engine has no address-space or data limits: lift the soft ones as far as
    // the hard ones allow (an `ulimit -v` of the caller must not make mmaps fail).
    for (int res : {RLIMIT_AS, RLIMIT_DATA}) {
      getrlimit(res, &rl);
      rl.rlim_cur = rl.rlim_max;
      setrlimit(res, &rl);
    }
    dup2(in[0], 0);
    dup2(out[1], 1);
    char* argv[] = {const_cast<char*>(path.c_str()), nullptr};
    execv(path.c_str(), argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
  signal(SIGPIPE, SIG_IGN);
  if (!ReadResponse(&hello_)) {
    if (error_.empty()) error_ = "no start-up report from " + path;
    return;
  }
  if (hello_.empty() || hello_[0].rfind("P ", 0) != 0) {
    error_ = "bad start-up report: " + (hello_.empty() ? std::string("(empty)") : hello_[0]);
    return;
  }
  auto p = HexFields(hello_[0]);
  if (p.size() < 2 || !(p[0] & ADDR_NO_RANDOMIZE)) error_ = "child runs with ASLR enabled";
  else if (p[1] != (8ull << 20)) error_ = "child RLIMIT_STACK is not 8 MiB";
}

KernelChild::KernelChild(pid_t pid, int to_child, int from_child)
    : forked_(true), pid_(pid), to_child_(to_child), from_child_(from_child) {
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  std::vector<std::string> hello;
  if (!ReadResponse(&hello)) {
    if (error_.empty()) error_ = "no start-up report from the forked child";
    return;
  }
  if (hello.empty() || hello[0].rfind("F ", 0) != 0)
    error_ = "bad start-up report of the forked child: " + (hello.empty() ? std::string("(empty)") : hello[0]);
  hello_ = std::move(hello);
}

std::unique_ptr<KernelChild> KernelChild::Fork(int* kernel_errno, std::string* error) {
  *kernel_errno = 0;
  if (!error_.empty()) {
    *error = error_;
    return nullptr;
  }
  char tmpl[] = "/tmp/vmspace-oracle-fork-XXXXXX";
  if (!mkdtemp(tmpl)) {
    *error = std::string("mkdtemp: ") + strerror(errno);
    return nullptr;
  }
  const std::string dir = tmpl, out_path = dir + "/out", in_path = dir + "/in";
  auto cleanup = [&] {
    unlink(out_path.c_str());
    unlink(in_path.c_str());
    rmdir(dir.c_str());
  };
  if (mkfifo(out_path.c_str(), 0600) || mkfifo(in_path.c_str(), 0600)) {
    *error = std::string("mkfifo: ") + strerror(errno);
    cleanup();
    return nullptr;
  }
  // The reading end of OUT first, without blocking: the new process opens IN for
  // reading (waiting for the writer below), then OUT for writing, which finds this
  // reader. A FIFO polls as hung up only after a writer has come and gone.
  const int from = ::open(out_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  const std::vector<std::string> resp = from < 0 ? std::vector<std::string>{} : Call("fork " + out_path + " " + in_path);
  const auto f = resp.empty() ? std::vector<uint64_t>{} : HexFields(resp[0]);
  if (resp.empty() || f.size() != 1 || (resp[0][0] != 'R' && resp[0][0] != 'E')) {
    *error = from < 0 ? std::string("open FIFO: ") + strerror(errno)
                      : "fork answered " + (resp.empty() ? std::string("nothing") : resp[0]);
    if (from >= 0) close(from);
    cleanup();
    return nullptr;
  }
  if (resp[0][0] == 'E') {
    *kernel_errno = static_cast<int>(f[0]);
    close(from);
    cleanup();
    return nullptr;
  }
  int to = -1;
  for (int i = 0; i < 20000 && to < 0; i++) {  // ENXIO until the new process reads
    to = ::open(in_path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (to < 0 && errno != ENXIO) break;
    if (to < 0) usleep(500);
  }
  if (to < 0) {
    *error = std::string("the forked child did not open its input: ") + strerror(errno);
    close(from);
    cleanup();
    kill(static_cast<pid_t>(f[0]), SIGKILL);
    return nullptr;
  }
  fcntl(from, F_SETFL, 0);
  fcntl(to, F_SETFL, 0);
  std::unique_ptr<KernelChild> child(new KernelChild(static_cast<pid_t>(f[0]), to, from));
  cleanup();  // both ends are open now
  return child;
}

KernelChild::~KernelChild() {
  if (forked_) {
    // Not the driver's child: its parent reaps it (SIGCHLD ignored); wait for the exit
    // through the pidfd, so the next op sees its memory released.
    if (to_child_ >= 0) {
      const char q[] = "quit\n";
      (void)!write(to_child_, q, sizeof q - 1);
      close(to_child_);
    }
    if (pidfd_ >= 0) {
      struct pollfd pfd = {pidfd_, POLLIN, 0};
      if (poll(&pfd, 1, 5000) == 0) syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0);
      poll(&pfd, 1, 5000);
      close(pidfd_);
    }
    if (from_child_ >= 0) close(from_child_);
    return;
  }
  if (pid_ > 0) {
    if (to_child_ >= 0) {
      const char q[] = "quit\n";
      (void)!write(to_child_, q, sizeof q - 1);
      close(to_child_);
    }
    // Give it a moment to exit, then make sure.
    for (int i = 0; i < 200; i++) {
      int st;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_ || r < 0) {
        pid_ = -1;
        break;
      }
      usleep(1000);
    }
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (from_child_ >= 0) close(from_child_);
}

bool KernelChild::ReadResponse(std::vector<std::string>* out) {
  out->clear();
  for (;;) {
    size_t nl;
    while ((nl = buf_.find('\n')) != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (line == ".") return true;
      out->push_back(std::move(line));
    }
    struct pollfd pfd = {from_child_, POLLIN, 0};
    int pr = poll(&pfd, 1, 60000);
    if (pr == 0) {
      error_ = "kernel child did not answer within 60 s";
      return false;
    }
    if (pr < 0) {
      if (errno == EINTR) continue;
      error_ = std::string("poll: ") + strerror(errno);
      return false;
    }
    char b[65536];
    ssize_t n = read(from_child_, b, sizeof b);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int st = 0;
      if (pid_ > 0 && waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = WIFSIGNALED(st) ? "kernel child killed by signal " + std::to_string(WTERMSIG(st))
                                 : "kernel child exited with status " +
                                       std::to_string(WEXITSTATUS(st));
      } else {
        error_ = "kernel child closed its output";
      }
      return false;
    }
    buf_.append(b, static_cast<size_t>(n));
  }
}

std::vector<std::string> KernelChild::Call(const std::string& request) {
  if (!error_.empty()) return {"X " + error_};
  std::string req = request + "\n";
  size_t off = 0;
  while (off < req.size()) {
    ssize_t n = write(to_child_, req.data() + off, req.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "cannot write to the kernel child";
      return {"X " + error_};
    }
    off += static_cast<size_t>(n);
  }
  std::vector<std::string> out;
  if (!ReadResponse(&out)) return {"X " + error_};
  return out;
}

// ---------------------------------------------------------------- OracleSession

struct OracleSession::MapLine {
  uint64_t start = 0, end = 0, offset = 0, inode = 0;
  std::string perms, dev, name, vmflags;
  std::string ino_label;  // a test file's label in place of dev and inode
  bool has_flags = false;
};

namespace {

// Parses "start-end perms offset maj:min inode [name]" (hex, hex, word, hex, hex:hex,
// decimal). Hand-written (not sscanf): the random test parses a few hundred lines
// per op.
bool ParseMapLine(const std::string& text, uint64_t* s, uint64_t* e, std::string* perms,
                  uint64_t* off, std::string* dev, uint64_t* ino, std::string* name) {
  const char* p = text.c_str();
  bool ok = true;
  // A number in `base` followed by `sep` (0: any); advances p past the separator.
  auto number = [&](int base, char sep) -> uint64_t {
    while (*p == ' ') p++;
    char* end = nullptr;
    uint64_t v = strtoull(p, &end, base);
    if (end == p || (sep && *end != sep)) ok = false;
    p = *end && sep ? end + 1 : end;
    return v;
  };
  *s = number(16, '-');
  *e = number(16, ' ');
  const char* word = p;
  while (*p && *p != ' ') p++;
  *perms = std::string(word, static_cast<size_t>(p - word));
  *off = number(16, ' ');
  uint64_t dmaj = number(16, ':'), dmin = number(16, ' ');
  *ino = number(10, 0);
  if (!ok || perms->empty() || perms->size() > 7) return false;
  char d[32];
  snprintf(d, sizeof d, "%02" PRIx64 ":%02" PRIx64, dmaj, dmin);
  *dev = d;
  while (*p == ' ') p++;
  *name = p;
  while (!name->empty() && (name->back() == ' ' || name->back() == '\n')) name->pop_back();
  return true;
}

// VmFlags without "sd": with CONFIG_MEM_SOFT_DIRTY every new VMA has VM_SOFTDIRTY,
// which the engine does not model (it never changes a merge: is_mergeable_vma()
// ignores it).
std::string WithoutSoftDirty(const std::string& flags) {
  std::string out;
  std::istringstream in(flags);
  for (std::string f; in >> f;)
    if (f != "sd") out += (out.empty() ? "" : " ") + f;
  return out;
}

// The stack_guard_gap= kernel parameter in pages, or 256 (the default).
uint64_t StackGuardGapPages() {
  std::ifstream in("/proc/cmdline");
  for (std::string w; in >> w;)
    if (w.rfind("stack_guard_gap=", 0) == 0) return strtoull(w.c_str() + 16, nullptr, 0);
  return 256;
}

// A number from a /proc/sys file, or `def` if it cannot be read.
uint64_t SysctlU64(const char* path, uint64_t def) {
  std::ifstream in(path);
  uint64_t v;
  return in >> v ? v : def;
}

bool IsShmemName(const std::string& name) {
  return name.rfind("/dev/zero", 0) == 0 || name.rfind("/SYSV", 0) == 0;
}

}  // namespace

OracleSession::OracleSession(uint64_t region_size, const SpaceOptions& extra) {
  size_ = region_size;
  child_ = std::make_unique<KernelChild>(ChildPath());
  if (!child_->ok()) {
    setup_error_ = "kernel child: " + child_->error();
    return;
  }
  // Model the kernel and the settings of this machine, as the child found them at
  // start-up (see the protocol in child/oracle_child.cc): some kernel builds allocate
  // a page on anonymous read faults instead of mapping the zero page; THP alignment
  // of anonymous mappings is new in 6.7; the effective mmap_min_addr depends on the
  // sysctl and CONFIG_LSM_MMAP_MIN_ADDR; CAP_SYS_RAWIO on who runs the test.
  SpaceOptions opts = extra;
  for (const auto& l : child_->hello()) {
    auto f = HexFields(l);
    if (f.empty()) continue;
    if (l.rfind("Z ", 0) == 0) kernel_zero_page_ = f[0] == 1;
    else if (l.rfind("T ", 0) == 0) kernel_thp_align_ = f[0];
    else if (l.rfind("L ", 0) == 0 && f[0]) opts.mmap_min_addr = f[0];  // 0: probe failed
    else if (l.rfind("K ", 0) == 0) opts.cap_sys_rawio = f[0] == 1;
    else if (l.rfind("I ", 0) == 0 && f.size() == 2) {  // CAP_IPC_LOCK, RLIMIT_MEMLOCK
      opts.cap_ipc_lock = f[0] == 1;
      opts.rlimit_memlock = f[1];
    }
  }
  opts.zero_page = kernel_zero_page_;
  opts.thp_align_anon = kernel_thp_align_ & 1;
  opts.dac_mmap_min_addr = SysctlU64("/proc/sys/vm/mmap_min_addr", opts.dac_mmap_min_addr);
  opts.max_map_count = SysctlU64("/proc/sys/vm/max_map_count", opts.max_map_count);
  max_map_count_ = opts.max_map_count;
  // The child's break: its static PIE's brk area starts at ELF_ET_DYN_BASE with ASLR
  // off, and static glibc's start-up took its TLS from it ([heap], fenced above like
  // every private anonymous VMA of the child). The engine gets the same start_brk and
  // break, its heap made by Brk() itself (a brk VMA that later growth can extend, as
  // the kernel's), so brk ops compare as is; maps print the heap's start as `brkstart`
  // and the break at start-up as `brkbase`, whatever the child's TLS size.
  uint64_t heap_start = 0, heap_end = 0;
  for (const auto& l : child_->hello()) {
    uint64_t s, e, off, ino;
    std::string perms, dev, name;
    if (l.rfind("M ", 0) == 0 && ParseMapLine(l.substr(2), &s, &e, &perms, &off, &dev, &ino, &name) &&
        name == "[heap]") {
      heap_start = s;
      heap_end = e;
    }
  }
  {
    auto resp = child_->Call("brk 0");
    auto f = resp.empty() ? std::vector<uint64_t>{} : HexFields(resp[0]);
    if (f.size() != 1 || resp[0][0] != 'R' || (heap_end && heap_end != ((f[0] + kPageSize - 1) & kPageMask))) {
      setup_error_ = "kernel child: brk(0) answered " + (resp.empty() ? std::string("nothing") : resp[0]);
      return;
    }
    brkbase_ = f[0];
    brkstart_ = opts.start_brk = heap_end ? heap_start : ((f[0] + kPageSize - 1) & kPageMask);
  }
  if (StackGuardGapPages() * kPageSize != kStackGuardGap) {
    setup_error_ = "the kernel command line sets stack_guard_gap=" +
                   std::to_string(StackGuardGapPages()) + "; the engine models 256 pages";
    return;
  }
  frames_ = std::make_unique<FrameAllocator>();
  engine_ = std::make_unique<AddressSpace>(*frames_, opts);
  if (heap_end && engine_->Brk(brkbase_) != brkbase_) {
    setup_error_ = "engine brk to the child's break " + Hex(brkbase_) + " refused";
    return;
  }
  // The child's heap holds its TLS, written at start-up: its VMA has an anon_vma, which
  // decides whether the heap merges with its growth (anon_vma_compatible, VM_LOCKED
  // differing). The engine's heap gets one the same way: a write fault.
  if (heap_end && !engine_->Access(heap_start, heap_end - heap_start, kPageSize, AccessType::kWrite).ok()) {
    setup_error_ = "engine cannot write its heap";
    return;
  }

  // Replicate the child's layout: one MAP_SHARED|MAP_ANONYMOUS PROT_NONE placeholder
  // per VMA (shared anonymous VMAs never merge, so the VMA count is preserved).
  uint64_t kcount = 0;
  for (const auto& l : child_->hello()) {
    if (l.rfind("C ", 0) == 0) kcount = HexFields(l)[0];
    if (l.rfind("M ", 0) != 0) continue;
    uint64_t s, e, off, ino;
    std::string perms, dev, name;
    if (!ParseMapLine(l.substr(2), &s, &e, &perms, &off, &dev, &ino, &name)) {
      setup_error_ = "cannot parse child maps line: " + l;
      return;
    }
    if (s >= kTaskSize) continue;  // not mappable (vsyscall is filtered by the child)
    initial_.insert({s, e});
    if (name == "[heap]") continue;  // made by Brk() above
    SysResult r = engine_->Mmap(s, e - s, PROT_NONE, MAP_FIXED | MAP_SHARED | MAP_ANONYMOUS, 0);
    if (!r.ok() || r.value != s) {
      setup_error_ = "engine cannot replicate " + l + ": " + ErrName(r.error);
      return;
    }
  }
  uint64_t ecount = engine_->Counters().map_count;
  if (ecount != kcount) {
    setup_error_ = "after replicating the layout the engine has " + std::to_string(ecount) +
                   " VMAs, the kernel child " + std::to_string(kcount);
    return;
  }
  if (size_) {
    for (uint64_t g : {base_ - kPageSize, base_ + size_}) {
      StepResult r = Run("mmap " + Hex(g) + " 0x1000 none shared,anonymous,fixed");
      if (!r.match || !r.kernel_ok) {
        setup_error_ = "guard page: kernel " + r.kernel + ", engine " + r.engine;
        return;
      }
    }
  }
}

OracleSession::~OracleSession() {
  others_.clear();  // the forked processes' spaces, before the frames and files
  engine_.reset();  // its VMAs hold the files
  files_.reset();
  if (!tmp_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  }
}

std::string OracleSession::FileLabel(uint64_t ino, bool kernel) const {
  for (const auto& [label, f] : file_refs_)
    if ((kernel ? f.kernel_ino : f.engine_ino) == ino) return label;
  return "";
}

std::string OracleSession::Addr(uint64_t a) const {
  if (brkbase_ && a + 0x100000 >= brkstart_ && a <= brkbase_ + (1ull << 32)) {  // the brk area
    if (a >= brkbase_) return "brkbase+" + Hex(a - brkbase_);
    if (a >= brkstart_) return "brkstart+" + Hex(a - brkstart_);
    return "brkstart-" + Hex(brkstart_ - a);
  }
  if (size_ && a + 0x100000 >= base_ && a <= base_ + size_ + 0x100000) {
    if (a >= base_) return "base+" + Hex(a - base_);
    return "base-" + Hex(base_ - a);
  }
  return Hex(a);
}

uint64_t OracleSession::Eval(const std::string& expr, std::string* err) const {
  uint64_t total = 0;
  size_t i = 0;
  int sign = 1;
  if (expr.empty()) {
    *err = "empty expression";
    return 0;
  }
  while (i < expr.size()) {
    size_t j = i;
    while (j < expr.size() && expr[j] != '+' && (expr[j] != '-' || j == i)) j++;
    std::string term = expr.substr(i, j - i);
    uint64_t v = 0;
    if (term == "base") v = base_;
    else if (term == "brkbase") v = brkbase_;
    else if (term == "brkstart") v = brkstart_;
    else if (term == "top") v = kDefaultMmapBase;
    else if (term == "TASK_SIZE") v = kTaskSize;
    else if (term == "NULL") v = 0;
    else if (!term.empty() && term[0] == '$') {
      auto it = vars_.find(term.substr(1));
      if (it == vars_.end()) {
        *err = "unknown variable " + term;
        return 0;
      }
      v = it->second;
    } else if (!ParseU64(term, &v)) {
      *err = "bad number '" + term + "'";
      return 0;
    }
    total = sign > 0 ? total + v : total - v;
    if (j < expr.size()) sign = expr[j] == '+' ? 1 : -1;
    i = j + 1;
  }
  return total;
}

void OracleSession::NormalizeFileLine(MapLine* m, bool kernel) const {
  // A test file's line: the directory becomes $TMP, device and inode the file's label
  // (each side has its own copy of the file).
  const std::string dir = tmp_ + (kernel ? "/kernel" : "/engine");
  if (tmp_.empty() || m->name.rfind(dir + "/", 0) != 0) return;
  m->name = "$TMP" + m->name.substr(dir.size());
  const std::string label = FileLabel(m->inode, kernel);
  m->dev = "dev";
  m->inode = 0;
  m->ino_label = label.empty() ? "?" : label;
}

std::string OracleSession::FormatMapLine(const MapLine& m) const {
  if (!m.ino_label.empty()) {
    std::string s = Addr(m.start) + "-" + Addr(m.end) + " " + m.perms + " " + Hex(m.offset) + " ino_of=" +
                    m.ino_label + " " + m.name;
    if (m.has_flags) s += " [" + m.vmflags + "]";
    return s;
  }
  std::string ino = IsShmemName(m.name) || m.dev == "00:01" ? "*" : std::to_string(m.inode);
  std::string s = Addr(m.start) + "-" + Addr(m.end) + " " + m.perms + " " + Hex(m.offset) + " " +
                  m.dev + " " + ino;
  if (!m.name.empty()) s += " " + m.name;
  if (m.has_flags) s += " [" + m.vmflags + "]";
  return s;
}

std::string OracleSession::KernelMaps(uint64_t lo, uint64_t hi, bool with_flags) {
  auto resp = child_->Call("maps " + Hex(lo).substr(2) + " " + Hex(hi).substr(2) +
                           (with_flags ? " 1" : " 0"));
  std::string out;
  std::vector<MapLine> lines;
  for (const auto& l : resp) {
    if (l.rfind("M ", 0) == 0) {
      MapLine m;
      if (!ParseMapLine(l.substr(2), &m.start, &m.end, &m.perms, &m.offset, &m.dev, &m.inode,
                        &m.name))
        return "unparsable: " + l;
      NormalizeFileLine(&m, true);
      lines.push_back(m);
    } else if (l.rfind("F ", 0) == 0 && !lines.empty()) {
      lines.back().vmflags = WithoutSoftDirty(l.substr(2));
      lines.back().has_flags = true;
    } else if (l.rfind("C ", 0) == 0) {
      for (const auto& m : lines)
        if (!initial_.count({m.start, m.end})) out += FormatMapLine(m) + "\n";
      out += MapCountText(HexFields(l)[0]);
    } else {
      out += l + "\n";
    }
  }
  return out;
}

std::string OracleSession::EngineMaps(uint64_t lo, uint64_t hi, bool with_flags) {
  std::string text = engine_->RenderMaps(lo, hi);
  std::map<uint64_t, uint64_t> flags;
  if (with_flags)
    for (const auto& v : engine_->Maps(lo, hi)) flags[v.start] = v.flags;
  std::string out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    if (l.empty()) continue;
    MapLine m;
    if (!ParseMapLine(l, &m.start, &m.end, &m.perms, &m.offset, &m.dev, &m.inode, &m.name)) {
      out += "unparsable RenderMaps line: " + l + "\n";
      continue;
    }
    if (initial_.count({m.start, m.end})) continue;
    NormalizeFileLine(&m, false);
    auto it = flags.find(m.start);
    if (it != flags.end()) {
      m.vmflags = AddressSpace::VmFlagsString(it->second);
      m.has_flags = true;
    }
    out += FormatMapLine(m) + "\n";
  }
  out += MapCountText(engine_->Counters().map_count);
  return out;
}

std::string OracleSession::MapCountText(uint64_t count) const {
  uint64_t own = initial_.size();
  return "map_count=child" + (count >= own ? "+" + std::to_string(count - own)
                                           : "-" + std::to_string(own - count));
}

std::string OracleSession::Validate() {
  if (!engine_ && others_.empty()) return setup_error_.empty() ? "" : "no engine";
  std::string out = engine_ ? engine_->Validate() : "";
  if (!out.empty() && !others_.empty()) out = "@" + std::to_string(current_) + ": " + out;
  for (auto& [handle, p] : others_)
    if (std::string v = p.engine->Validate(); !v.empty()) out += (out.empty() ? "@" : "; @") + std::to_string(handle) + ": " + v;
  return out;
}

std::vector<int> OracleSession::processes() const {
  std::vector<int> out;
  for (const auto& [handle, p] : others_) out.push_back(handle);
  if (child_) out.push_back(current_);
  std::sort(out.begin(), out.end());
  return out;
}

bool OracleSession::Select(int handle) {
  if (handle == current_) return child_ != nullptr;
  auto it = others_.find(handle);
  if (it == others_.end()) return false;
  Process next = std::move(it->second);
  others_.erase(it);
  if (child_) others_[current_] = Process{std::move(child_), std::move(engine_)};
  child_ = std::move(next.child);
  engine_ = std::move(next.engine);
  current_ = handle;
  return true;
}

void OracleSession::Reselect(int handle) {
  if (Select(handle) || handle == current_) return;
  if (child_) others_[current_] = Process{std::move(child_), std::move(engine_)};
  current_ = handle;  // a process that has exited: ops on it are script errors
}

StepResult OracleSession::Maps(uint64_t lo, uint64_t hi, bool with_flags, int process) {
  const int prev = current_;
  if (!Select(process)) {
    StepResult res;
    res.op = "maps";
    res.kernel = res.engine = "script error: no process @" + std::to_string(process);
    res.match = false;
    res.script_error = true;
    return res;
  }
  StepResult res = Maps(lo, hi, with_flags);
  res.process = process;
  Reselect(prev);
  return res;
}

bool OracleSession::RunProcessOp(const std::string& op, StepResult* res, std::string* err) {
  if (op == "fork") {
    // fork: the kernel child forks (a new process with its own channel); the engine
    // copies the space (AddressSpace::DupMmap). Both answer "ok @N" with the new handle.
    const int handle = next_process_++;
    const std::string name = "ok @" + std::to_string(handle);
    int kerr = 0;
    std::string why;
    std::unique_ptr<KernelChild> kc = child_->Fork(&kerr, &why);
    int eerr = 0;
    std::unique_ptr<AddressSpace> es = engine_->DupMmap(&eerr);
    res->kernel_ok = kc && kc->ok();
    res->kernel = res->kernel_ok ? name : kc ? "X " + kc->error() : kerr ? "err=" + ErrName(kerr) : "X " + why;
    res->kernel_value = static_cast<uint64_t>(handle);
    res->engine = es ? name : "err=" + ErrName(eerr);
    if (res->kernel_ok && es) {
      others_[handle] = Process{std::move(kc), std::move(es)};
      for (auto& [label, f] : file_refs_)  // the descriptor table is copied
        if (f.processes.count(current_)) f.processes.insert(handle);
    }
    return true;
  }
  if (op == "exit") {
    // exit: the selected process quits (the kernel child exits, the engine space is
    // destroyed); its handle is not used again.
    const std::vector<std::string> resp = child_->Call("quit");
    res->kernel = resp.empty() ? "ok" : resp[0];
    res->kernel_ok = resp.empty();
    res->engine = "ok";
    child_.reset();  // waits until the process is gone
    engine_.reset();
    for (auto& [label, f] : file_refs_) f.processes.erase(current_);
    (void)err;
    return true;
  }
  return false;
}

StepResult OracleSession::Maps(uint64_t lo, uint64_t hi, bool with_flags) {
  StepResult res;
  res.op = "maps";
  res.process = current_;
  if (!child_) {
    res.kernel = res.engine = "script error: process @" + std::to_string(current_) + " has exited";
    res.match = false;
    res.script_error = true;
    return res;
  }
  res.kernel = KernelMaps(lo, hi, with_flags);
  res.engine = EngineMaps(lo, hi, with_flags);
  res.kernel_ok = true;
  Finish(&res);
  return res;
}

void OracleSession::Finish(StepResult* res) const {
  res->process = current_;
  if (child_ && !child_->ok()) res->kernel += " [" + child_->error() + "]";
  res->match = res->kernel == res->engine;
}

namespace {

// Canonical text of an access: "ok[ value=0x..]" or "SIGSEGV SEGV_MAPERR si_addr=...",
// followed by " faults=N" when the op compares fault counts.
std::string KernelAccessText(const std::vector<std::string>& resp, const OracleSession& s,
                             bool with_faults, bool* ok, uint64_t* fault_addr) {
  *ok = false;
  if (resp.empty()) return "(no answer)";
  const std::string& l = resp[0];
  auto f = HexFields(l);
  std::string t;
  if (l[0] == 'O' && f.size() == 1) {
    *ok = true;
    t = "ok";
  } else if (l[0] == 'V' && f.size() == 2) {
    *ok = true;
    char b[32];
    snprintf(b, sizeof b, "ok value=0x%02x", static_cast<unsigned>(f[0]));
    t = b;
  } else if (l[0] == 'S' && f.size() == 4) {
    int sig = static_cast<int>(f[0]), code = static_cast<int>(f[1]);
    t = SigName(sig) + " " + SiCodeName(sig, code) + " si_addr=" + s.Addr(f[2]);
    *fault_addr = f[2];
  } else {
    return l;
  }
  if (with_faults) t += " faults=" + std::to_string(f.back());
  return t;
}

std::string EngineAccessText(const FaultResult& f, uint64_t faults, const OracleSession& s,
                             bool with_faults) {
  std::string t = "ok";
  if (f.outcome == FaultOutcome::kSigsegv || f.outcome == FaultOutcome::kSigbus) {
    int sig = f.outcome == FaultOutcome::kSigsegv ? SIGSEGV : SIGBUS;
    t = SigName(sig) + " " + SiCodeName(sig, f.sig_code) + " si_addr=" + s.Addr(f.sig_addr);
  } else if (f.outcome == FaultOutcome::kOom) {
    t = "OOM";
  }
  if (with_faults) t += " faults=" + std::to_string(faults);
  return t;
}

/// The madvise advice named `name` (the MADV_ name in lower case without the prefix,
/// e.g. "dontneed", "guard_install"); false if there is none.
bool MadviseByName(const std::string& name, uint64_t* out) {
  static const std::pair<const char*, int> kAdvices[] = {
      {"normal", MADV_NORMAL}, {"random", MADV_RANDOM}, {"sequential", MADV_SEQUENTIAL},
      {"willneed", MADV_WILLNEED}, {"dontneed", MADV_DONTNEED}, {"free", MADV_FREE},
      {"remove", MADV_REMOVE}, {"dontfork", MADV_DONTFORK}, {"dofork", MADV_DOFORK},
      {"mergeable", MADV_MERGEABLE}, {"unmergeable", MADV_UNMERGEABLE}, {"hugepage", MADV_HUGEPAGE},
      {"nohugepage", MADV_NOHUGEPAGE}, {"dontdump", MADV_DONTDUMP}, {"dodump", MADV_DODUMP},
      {"wipeonfork", MADV_WIPEONFORK}, {"keeponfork", MADV_KEEPONFORK}, {"cold", MADV_COLD},
      {"pageout", MADV_PAGEOUT}, {"populate_read", MADV_POPULATE_READ},
      {"populate_write", MADV_POPULATE_WRITE}, {"dontneed_locked", MADV_DONTNEED_LOCKED},
      {"collapse", MADV_COLLAPSE}, {"hwpoison", MADV_HWPOISON}, {"soft_offline", MADV_SOFT_OFFLINE},
      {"guard_install", MADV_GUARD_INSTALL}, {"guard_remove", MADV_GUARD_REMOVE},
  };
  for (const auto& [n, v] : kAdvices)
    if (name == n) {
      *out = static_cast<uint64_t>(v);
      return true;
    }
  return false;
}

std::string KernelSysText(const std::vector<std::string>& resp, const OracleSession& s,
                          bool addr_result, bool* ok, uint64_t* value) {
  *ok = false;
  if (resp.empty()) return "(no answer)";
  const std::string& l = resp[0];
  auto f = HexFields(l);
  if (l[0] == 'R' && f.size() == 1) {
    *ok = true;
    *value = f[0];
    return "ret=" + (addr_result ? s.Addr(f[0]) : Hex(f[0]));
  }
  if (l[0] == 'E' && f.size() == 1) return "err=" + ErrName(static_cast<int>(f[0]));
  return l;
}

std::string EngineSysText(const SysResult& r, const OracleSession& s, bool addr_result) {
  if (r.ok()) return "ret=" + (addr_result ? s.Addr(r.value) : Hex(r.value));
  return "err=" + ErrName(r.error);
}

}  // namespace

namespace {
/// read_ahead_kb of the block device holding `path` (the kernel's mmap read-around
/// window for its files), or 128 (the default) if there is none to read.
uint64_t ReadAheadKbOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 128;
  const std::string id = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::error_code ec;
  std::filesystem::path dev = std::filesystem::canonical("/sys/dev/block/" + id, ec);
  if (!ec && std::filesystem::exists(dev / "partition")) dev = dev.parent_path();
  for (const std::string& f : {ec ? std::string() : (dev / "queue/read_ahead_kb").string(),
                               "/sys/class/bdi/" + id + "/read_ahead_kb"}) {
    std::ifstream in(f);
    uint64_t kb;
    if (!f.empty() && in >> kb) return kb;
  }
  return 128;
}
}  // namespace

bool OracleSession::RunFileOp(const std::vector<std::string>& w, StepResult* res, std::string* err) {
  const std::string& op = w[0];
  static const std::set<std::string> kOps = {"file",  "memfd", "pread",  "pwrite", "ftruncate",
                                             "fstat", "seal",  "seals", "reopen"};
  if (!kOps.count(op)) return false;
  auto H = [](uint64_t v) { return Hex(v).substr(2); };
  auto num = [&](size_t i) -> uint64_t {
    if (i >= w.size()) {
      if (err->empty()) *err = "missing argument " + std::to_string(i);
      return 0;
    }
    std::string e;
    uint64_t v = Eval(w[i], &e);
    if (!e.empty() && err->empty()) *err = e;
    return v;
  };
  if (w.size() < 2) {
    *err = op + " needs a file label";
    return true;
  }
  const std::string& label = w[1];
  if (op == "file" || op == "memfd") {
    // file LABEL SIZE [ro]: a test file of SIZE bytes, byte (k+1)&0xff in page k, opened
    // O_RDWR (or O_RDONLY) by the child and through the engine's FileTable, whose page
    // cache is then read in (the kernel's holds the file just written).
    // memfd LABEL SIZE: memfd_create(LABEL) / FileTable::CreateShmem, same content.
    const uint64_t size = num(2);
    const bool ro = w.size() > 3 && w[3] == "ro";
    const bool wronly = w.size() > 3 && w[3] == "wronly";
    // memfd LABEL SIZE [sealing|noexec_seal|exec|N joined by ',']: memfd_create flags.
    unsigned mfd_flags = 0;
    if (op == "memfd" && w.size() > 3) {
      std::istringstream parts(w[3]);
      std::string part;
      while (std::getline(parts, part, ',')) {
        uint64_t n;
        if (part == "sealing") mfd_flags |= MFD_ALLOW_SEALING;
        else if (part == "noexec_seal") mfd_flags |= MFD_NOEXEC_SEAL;
        else if (part == "exec") mfd_flags |= MFD_EXEC;
        else if (ParseU64(part, &n)) mfd_flags |= static_cast<unsigned>(n);
        else if (err->empty()) *err = "bad memfd flag " + part;
      }
    } else if (op == "file" && w.size() > 3 && !ro && !wronly && err->empty()) {
      *err = "file takes ro or wronly";
    }
    if (!err->empty()) return true;
    if (file_refs_.count(label) || label.find('/') != std::string::npos) {
      *err = "bad or duplicate file label " + label;
      return true;
    }
    if (tmp_.empty()) {
      char tmpl[] = "/tmp/vmspace-oracle-XXXXXX";
      if (!mkdtemp(tmpl)) {
        *err = std::string("mkdtemp: ") + strerror(errno);
        return true;
      }
      tmp_ = tmpl;
      std::filesystem::create_directory(tmp_ + "/kernel");
      std::filesystem::create_directory(tmp_ + "/engine");
      files_ = std::make_unique<FileTable>(*frames_, tmp_ + "/engine");
      files_->SetReadAheadBytes(ReadAheadKbOf(tmp_) << 10);  // as the kernel's files have
    }
    std::string content(size, 0);
    for (uint64_t i = 0; i < size; i++) content[i] = static_cast<char>(((i >> kPageShift) + 1) & 0xff);
    FileRef ref;
    SysResult er;
    std::vector<std::string> kr;
    if (op == "file") {
      // Written a page per write(2): a filesystem with large folios (ext4 since 6.16)
      // sizes a write's page-cache folio by its length, and a large dirty folio that
      // truncate cannot split stays cached whole (zeroed past EOF: mincore answers 1
      // there); the engine models 4 KiB page-cache pages, which page-sized writes give.
      for (const char* side : {"/kernel/", "/engine/"}) {
        const int fd = ::open((tmp_ + side + label).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        for (uint64_t off = 0; fd >= 0 && off < size; off += kPageSize)
          if (::pwrite(fd, content.data() + off, std::min<uint64_t>(kPageSize, size - off), static_cast<off_t>(off)) < 0)
            break;
        if (fd >= 0) ::close(fd);
      }
      const int access = ro ? O_RDONLY : wronly ? O_WRONLY : O_RDWR;
      kr = child_->Call("open " + tmp_ + "/kernel/" + label + " " + H(access));
      er = files_->Open(label, {.access = access});
      struct stat st;
      if (stat((tmp_ + "/kernel/" + label).c_str(), &st) == 0) ref.kernel_ino = st.st_ino;
      if (stat((tmp_ + "/engine/" + label).c_str(), &st) == 0) ref.engine_ino = st.st_ino;
      if (er.ok()) {  // read in through a handle of its own (a wronly one cannot read)
        const SysResult rd = files_->Reopen(er.value, O_RDONLY);
        std::string buf(size, 0);
        if (rd.ok()) files_->Read(rd.value, 0, buf.data(), size);
        if (rd.ok()) files_->Close(rd.value);
      }
    } else {
      kr = child_->Call("memfd " + label + " " + H(size) + " " + H(mfd_flags));
      // vm.memfd_noexec 1 or 2 makes a memfd created with neither MFD_EXEC nor
      // MFD_NOEXEC_SEAL a MFD_NOEXEC_SEAL one (check_sysctl_memfd_noexec); the engine
      // models the default 0, so the driver applies the sysctl to the engine's flags.
      unsigned engine_flags = mfd_flags;
      if (!(mfd_flags & (MFD_EXEC | MFD_NOEXEC_SEAL)) && SysctlU64("/proc/sys/vm/memfd_noexec", 0) >= 1)
        engine_flags |= MFD_NOEXEC_SEAL;
      er = files_->CreateShmem(label, size, engine_flags);
      if (er.ok()) files_->Write(er.value, 0, content.data(), size);
    }
    uint64_t fd = 0;
    res->kernel = KernelSysText(kr, *this, false, &res->kernel_ok, &fd);
    res->kernel = res->kernel_ok ? "ok" : res->kernel;
    res->engine = er.ok() ? "ok" : "err=" + ErrName(er.error);
    ref.kernel_fd = fd;
    ref.engine_id = er.value;
    ref.processes = {current_};
    if (res->kernel_ok && er.ok()) file_refs_[label] = ref;
    return true;
  }
  if (op == "reopen") {
    // reopen NEWLABEL LABEL ro|wo|rw: open("/proc/self/fd/N") / FileTable::Reopen.
    auto old = w.size() > 3 ? file_refs_.find(w[2]) : file_refs_.end();
    if (old == file_refs_.end() || file_refs_.count(label) || !old->second.processes.count(current_)) {
      *err = "reopen NEWLABEL LABEL ro|wo|rw with a known LABEL and a new NEWLABEL";
      return true;
    }
    const int access = w[3] == "ro" ? O_RDONLY : w[3] == "wo" ? O_WRONLY : w[3] == "rw" ? O_RDWR : -1;
    if (access < 0) {
      *err = "reopen mode must be ro, wo or rw";
      return true;
    }
    FileRef ref = old->second;
    uint64_t fd = 0;
    res->kernel = KernelSysText(child_->Call("reopen " + H(ref.kernel_fd) + " " + H(access)), *this, false,
                                &res->kernel_ok, &fd);
    res->kernel = res->kernel_ok ? "ok" : res->kernel;
    const SysResult er = files_->Reopen(ref.engine_id, access);
    res->engine = er.ok() ? "ok" : "err=" + ErrName(er.error);
    ref.kernel_fd = fd;
    ref.engine_id = er.value;
    ref.kernel_ino = ref.engine_ino = 0;  // maps lines keep the first label
    ref.processes = {current_};
    if (res->kernel_ok && er.ok()) file_refs_[label] = ref;
    return true;
  }
  auto it = file_refs_.find(label);
  if (it == file_refs_.end()) {
    *err = "unknown file " + label;
    return true;
  }
  if (!it->second.processes.count(current_)) {
    *err = "file " + label + " is not open in process @" + std::to_string(current_);
    return true;
  }
  const FileRef& f = it->second;
  if (op == "seal" || op == "seals") {
    // seal LABEL write|shrink|grow|future_write|seal|exec|N (joined by ','): F_ADD_SEALS;
    // seals LABEL: F_GET_SEALS.
    uint32_t seals = 0;
    if (op == "seal") {
      std::istringstream parts(w.size() > 2 ? w[2] : "");
      std::string part;
      while (std::getline(parts, part, ',')) {
        uint64_t n;
        if (part == "write") seals |= F_SEAL_WRITE;
        else if (part == "shrink") seals |= F_SEAL_SHRINK;
        else if (part == "grow") seals |= F_SEAL_GROW;
        else if (part == "future_write") seals |= F_SEAL_FUTURE_WRITE;
        else if (part == "seal") seals |= F_SEAL_SEAL;
        else if (part == "exec") seals |= F_SEAL_EXEC;
        else if (ParseU64(part, &n)) seals |= static_cast<uint32_t>(n);
        else {
          *err = "bad seal " + part;
          return true;
        }
      }
    }
    const int cmd = op == "seal" ? 1033 /* F_ADD_SEALS */ : 1034 /* F_GET_SEALS */;
    res->kernel = KernelSysText(child_->Call("fcntl " + H(f.kernel_fd) + " " + H(cmd) + " " + H(seals)), *this,
                                false, &res->kernel_ok, &res->kernel_value);
    if (op == "seal") {
      const int e = files_->AddSeals(f.engine_id, seals);
      res->engine = e ? "err=" + ErrName(e) : "ret=0x0";
    } else {
      res->engine = EngineSysText(files_->GetSeals(f.engine_id), *this, false);
    }
    return true;
  }
  if (op == "pread") {
    // pread LABEL OFF LEN: the bytes read (count, first byte, FNV-1a of all).
    const uint64_t off = num(2), len = num(3);
    if (!err->empty()) return true;
    if (len > (1u << 16)) {
      *err = "pread of more than 64 KiB";
      return true;
    }
    auto text = [](uint64_t n, uint64_t first, uint64_t hash) {
      return "ret=" + Hex(n) + (n ? " value=" + Hex(first) + " hash=" + Hex(hash) : "");
    };
    auto kr = child_->Call("pread " + H(f.kernel_fd) + " " + H(off) + " " + H(len));
    auto kf = kr.empty() ? std::vector<uint64_t>{} : HexFields(kr[0]);
    if (!kr.empty() && kr[0][0] == 'R' && kf.size() == 3) {
      res->kernel_ok = true;
      res->kernel = text(kf[0], kf[1], kf[2]);
    } else {
      res->kernel = KernelSysText(kr, *this, false, &res->kernel_ok, &res->kernel_value);
    }
    std::string buf(len, 0);
    SysResult r = files_->Read(f.engine_id, off, buf.data(), len);
    if (r.ok()) {
      uint64_t h = 0xcbf29ce484222325ull;
      for (uint64_t i = 0; i < r.value; i++) h = (h ^ static_cast<uint8_t>(buf[i])) * 0x100000001b3ull;
      res->engine = text(r.value, r.value ? static_cast<uint8_t>(buf[0]) : 0, h);
    } else {
      res->engine = "err=" + ErrName(r.error);
    }
  } else if (op == "pwrite") {
    const uint64_t off = num(2), len = num(3), v = num(4);
    if (!err->empty()) return true;
    if (len > (1u << 16)) {
      *err = "pwrite of more than 64 KiB";
      return true;
    }
    res->kernel = KernelSysText(child_->Call("pwrite " + H(f.kernel_fd) + " " + H(off) + " " + H(len) + " " +
                                             H(v & 0xff)),
                                *this, false, &res->kernel_ok, &res->kernel_value);
    std::string buf(len, static_cast<char>(v));
    res->engine = EngineSysText(files_->Write(f.engine_id, off, buf.data(), len), *this, false);
  } else if (op == "ftruncate") {
    const uint64_t size = num(2);
    if (!err->empty()) return true;
    res->kernel = KernelSysText(child_->Call("ftruncate " + H(f.kernel_fd) + " " + H(size)), *this, false,
                                &res->kernel_ok, &res->kernel_value);
    const int e = files_->Truncate(f.engine_id, size);
    res->engine = e ? "err=" + ErrName(e) : "ret=0x0";
  } else {  // fstat LABEL: st_size
    res->kernel = KernelSysText(child_->Call("fstat " + H(f.kernel_fd)), *this, false, &res->kernel_ok,
                                &res->kernel_value);
    FileStat st;
    SysResult r = files_->Stat(f.engine_id, &st);
    res->engine = r.ok() ? "ret=" + Hex(st.size_bytes) : "err=" + ErrName(r.error);
  }
  return true;
}

StepResult OracleSession::Run(const std::string& raw_line) {
  if (!raw_line.empty() && raw_line[0] == '@') {
    // @N OP: OP on process N.
    const size_t sp = raw_line.find(' ');
    uint64_t n = 0;
    StepResult res;
    res.op = raw_line;
    if (sp == std::string::npos || !ParseU64(raw_line.substr(1, sp - 1), &n) || n > 1000000) {
      res.kernel = res.engine = "script error: @N OP";
    } else if (const int prev = current_; !Select(static_cast<int>(n))) {
      res.kernel = res.engine = "script error: no process @" + std::to_string(n);
    } else {
      res = Run(raw_line.substr(sp + 1));
      res.op = raw_line;
      res.process = static_cast<int>(n);
      Reselect(prev);
      return res;
    }
    res.match = false;
    res.script_error = true;
    res.process = static_cast<int>(n);
    return res;
  }
  StepResult res;
  std::string line = raw_line;
  std::string bind;
  {
    auto w = Split(line);
    if (w.size() >= 3 && w[0][0] == '$' && w[1] == "=") {
      bind = w[0].substr(1);
      line = line.substr(line.find('=') + 1);
    }
  }
  auto w = Split(line);
  res.op = raw_line;
  res.process = current_;
  auto fail = [&](const std::string& why) {
    res.kernel = res.engine = "script error: " + why;
    res.match = false;
    res.script_error = true;
    return res;
  };
  if (!setup_error_.empty()) return fail("session not started: " + setup_error_);
  if (w.empty()) return fail("empty op");
  if (!child_) return fail("process @" + std::to_string(current_) + " has exited");
  std::string err;
  auto num = [&](size_t i) -> uint64_t {
    if (i >= w.size()) {
      if (err.empty()) err = "missing argument " + std::to_string(i);
      return 0;
    }
    std::string e;
    uint64_t v = Eval(w[i], &e);
    if (!e.empty() && err.empty()) err = e;
    return v;
  };
  auto prot = [&](size_t i) -> int {
    int p = 0;
    if (i >= w.size() || !ParseProt(w[i], &p)) {
      if (err.empty()) err = "bad prot";
    }
    return p;
  };
  auto flags = [&](size_t i) -> int {
    int f = 0;
    if (i >= w.size() || !ParseFlags(w[i], &f)) {
      if (err.empty()) err = "bad flags";
    }
    return f;
  };
  auto H = [](uint64_t v) { return Hex(v).substr(2); };
  const std::string& op = w[0];

  if (op == "mmap") {
    // mmap ADDR LEN PROT FLAGS [OFFSET [FILE]]: FILE a label of `file`/`memfd`.
    uint64_t a = num(1), l = num(2), off = w.size() > 5 ? num(5) : 0;
    int p = prot(3), f = flags(4);
    const FileRef* file = nullptr;
    if (w.size() > 6) {
      auto it = file_refs_.find(w[6]);
      if (it == file_refs_.end()) return fail("unknown file " + w[6]);
      if (!it->second.processes.count(current_))
        return fail("file " + w[6] + " is not open in process @" + std::to_string(current_));
      file = &it->second;
    }
    if (!err.empty()) return fail(err);
    res.is_mmap = true;
    res.kernel = KernelSysText(child_->Call("mmap " + H(a) + " " + H(l) + " " +
                                            H(static_cast<uint32_t>(p)) + " " +
                                            H(static_cast<uint32_t>(f)) + " " + H(off) +
                                            (file ? " " + H(file->kernel_fd) : "")),
                               *this, true, &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(file ? engine_->Mmap(a, l, p, f, off, files_->Get(file->engine_id))
                                    : engine_->Mmap(a, l, p, f, off),
                               *this, true);
  } else if (RunFileOp(w, &res, &err)) {
    if (!err.empty()) return fail(err);
  } else if (RunProcessOp(op, &res, &err)) {
    if (!err.empty()) return fail(err);
  } else if (op == "munmap") {
    uint64_t a = num(1), l = num(2);
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(child_->Call("munmap " + H(a) + " " + H(l)), *this, false,
                               &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(engine_->Munmap(a, l), *this, false);
  } else if (op == "mprotect") {
    uint64_t a = num(1), l = num(2);
    int p = prot(3);
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(
        child_->Call("mprotect " + H(a) + " " + H(l) + " " + H(static_cast<uint32_t>(p))), *this,
        false, &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(engine_->Mprotect(a, l, p), *this, false);
  } else if (op == "read" || op == "write" || op == "exec" || op == "fault") {
    // read/write/exec compare the outcome (and the value read); "fault ADDR r|w|x
    // [VAL]" is the same access and also compares the number of page faults taken.
    uint64_t a = num(1);
    std::string kind = op;
    bool with_faults = false;
    uint64_t val = 0;
    if (op == "fault") {
      with_faults = true;
      std::string k = w.size() > 2 ? w[2] : "";
      kind = k == "r" ? "read" : k == "w" ? "write" : k == "x" ? "exec" : "";
      if (kind.empty()) return fail("fault needs r, w or x");
      if (kind == "write") val = num(3);
    } else if (op == "write") {
      val = num(2);
    }
    if (!err.empty()) return fail(err);
    auto faults_of = [](const FaultResult& f) -> uint64_t { return f.faults; };
    if (kind == "read") {
      res.kernel = KernelAccessText(child_->Call("read " + H(a)), *this, with_faults,
                                    &res.kernel_ok, &res.kernel_si_addr);
      FaultResult f = engine_->Fault(a, AccessType::kRead);
      if (f.failed()) {
        res.engine = EngineAccessText(f, faults_of(f), *this, with_faults);
      } else {
        uint8_t v = 0;
        CopyResult c = engine_->ReadMemory(a, &v, 1);
        if (c.ok() && c.bytes == 1) {
          char b[64];
          snprintf(b, sizeof b, "ok value=0x%02x", v);
          res.engine = b;
          if (with_faults) res.engine += " faults=" + std::to_string(faults_of(f));
        } else {
          res.engine = "Fault() ok but ReadMemory(): " +
                       EngineAccessText(c.stop, c.faults, *this, with_faults);
        }
      }
    } else if (kind == "write") {
      res.kernel = KernelAccessText(child_->Call("write " + H(a) + " " + H(val & 0xff)), *this,
                                    with_faults, &res.kernel_ok, &res.kernel_si_addr);
      FaultResult f = engine_->Fault(a, AccessType::kWrite);
      if (f.failed()) {
        res.engine = EngineAccessText(f, faults_of(f), *this, with_faults);
      } else {
        uint8_t v = static_cast<uint8_t>(val);
        CopyResult c = engine_->WriteMemory(a, &v, 1);
        res.engine = c.ok() && c.bytes == 1
                         ? EngineAccessText(f, faults_of(f), *this, with_faults)
                         : "Fault() ok but WriteMemory(): " +
                               EngineAccessText(c.stop, c.faults, *this, with_faults);
      }
    } else {
      res.kernel = KernelAccessText(child_->Call("exec " + H(a)), *this, with_faults,
                                    &res.kernel_ok, &res.kernel_si_addr);
      FaultResult f = engine_->Fault(a, AccessType::kExec);
      res.engine = EngineAccessText(f, faults_of(f), *this, with_faults);
    }
  } else if (op == "fill") {
    uint64_t a = num(1), l = num(2), v = num(3);
    if (!err.empty()) return fail(err);
    if (l > (1ull << 30)) return fail("fill longer than 1 GiB");
    res.kernel = KernelAccessText(child_->Call("fill " + H(a) + " " + H(l) + " " + H(v & 0xff)),
                                  *this, false, &res.kernel_ok, &res.kernel_si_addr);
    std::vector<uint8_t> buf(l, static_cast<uint8_t>(v));
    CopyResult c = engine_->WriteMemory(a, buf.data(), l);
    res.engine = EngineAccessText(c.stop, c.faults, *this, false);
  } else if (op == "touch") {
    // touch ADDR LEN STRIDE r|w: one access every STRIDE bytes (AddressSpace::Access);
    // compares the outcome and the number of page faults.
    uint64_t a = num(1), l = num(2), stride = num(3);
    std::string k = w.size() > 4 ? w[4] : "";
    if (k != "r" && k != "w") return fail("touch needs r or w");
    if (!err.empty()) return fail(err);
    res.kernel = KernelAccessText(
        child_->Call("touch " + H(a) + " " + H(l) + " " + H(stride) + " " + (k == "w" ? "1" : "0")),
        *this, true, &res.kernel_ok, &res.kernel_si_addr);
    AccessResult ar =
        engine_->Access(a, l, stride, k == "w" ? AccessType::kWrite : AccessType::kRead);
    res.engine = EngineAccessText(ar.stop, ar.faults, *this, true);
  } else if (op == "mmapn") {
    uint64_t a = num(1), n = num(2), step = num(3), l = num(4);
    int p = prot(5), f = flags(6);
    if (!err.empty()) return fail(err);
    auto resp = child_->Call("mmapn " + H(a) + " " + H(n) + " " + H(step) + " " + H(l) + " " +
                             H(static_cast<uint32_t>(p)) + " " + H(static_cast<uint32_t>(f)));
    auto fk = resp.empty() ? std::vector<uint64_t>{} : HexFields(resp[0]);
    if (fk.size() == 2) {
      res.kernel = "done=" + std::to_string(fk[0]) +
                   (fk[1] ? " err=" + ErrName(static_cast<int>(fk[1])) : "");
      res.kernel_ok = fk[1] == 0;
      res.kernel_value = fk[0];
    } else {
      res.kernel = resp.empty() ? "(no answer)" : resp[0];
    }
    uint64_t done = 0;
    int e = 0;
    for (; done < n; done++) {
      SysResult r = engine_->Mmap(a + done * step, l, p, f, 0);
      if (!r.ok()) {
        e = r.error;
        break;
      }
    }
    res.engine = "done=" + std::to_string(done) + (e ? " err=" + ErrName(e) : "");
  } else if (op == "maps") {
    uint64_t lo = base_ - kPageSize, hi = base_ + size_ + kPageSize;
    if (w.size() == 2 && w[1] == "all") {
      lo = 0;
      hi = ~0ull;
    } else if (w.size() == 3) {
      lo = num(1);
      hi = num(2);
    } else if (w.size() != 1) {
      return fail("maps takes no argument, 'all', or LO HI");
    }
    if (!err.empty()) return fail(err);
    if (!size_ && w.size() == 1) return fail("maps without a region");
    res.kernel = KernelMaps(lo, hi, true);
    res.engine = EngineMaps(lo, hi, true);
    res.kernel_ok = true;
  } else if (op == "msync" || op == "madvise") {
    // msync ADDR LEN sync|async|invalidate (joined by ','); madvise ADDR LEN NAME|N
    uint64_t a = num(1), l = num(2), v = 0;
    const std::string arg = w.size() > 3 ? w[3] : "";
    std::istringstream parts(arg);
    std::string part;
    while (std::getline(parts, part, ',')) {
      uint64_t n;
      if (part == "sync") v |= MS_SYNC;
      else if (part == "async") v |= MS_ASYNC;
      else if (part == "invalidate") v |= MS_INVALIDATE;
      else if (op == "madvise" && MadviseByName(part, &n)) v |= n;
      else if (ParseU64(part, &n)) v |= n;
      else return fail("bad " + op + " argument " + part);
    }
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(child_->Call(op + " " + H(a) + " " + H(l) + " " + H(v)), *this, false,
                               &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(op == "msync" ? engine_->Msync(a, l, static_cast<int>(v))
                                             : engine_->Madvise(a, l, static_cast<int>(v)),
                               *this, false);
  } else if (op == "mincore") {
    // mincore ADDR LEN: the errno and the residency vector as 0/1 characters
    uint64_t a = num(1), l = num(2);
    if (!err.empty()) return fail(err);
    auto resp = child_->Call("mincore " + H(a) + " " + H(l));
    res.kernel = resp.empty() ? "(no answer)" : resp[0];
    if (!resp.empty() && resp[0].size() > 2 && resp[0][0] == 'C') {
      std::istringstream in(resp[0].substr(2));
      std::string e, vec;
      in >> e >> vec;
      res.kernel = (e == "0" ? "ok" : "err=" + ErrName(static_cast<int>(std::stoul(e, nullptr, 16)))) + " " + vec;
      res.kernel_ok = e == "0";
    }
    std::vector<uint8_t> ev;
    const SysResult r = engine_->Mincore(a, l, &ev);
    std::string vec;
    for (uint8_t b : ev) vec += b ? '1' : '0';
    res.engine = (r.ok() ? std::string("ok") : "err=" + ErrName(r.error)) + " " + (vec.empty() ? "-" : vec);
  } else if (op == "brk") {
    // brk ADDR: the break returned (brk(2) has no errno).
    uint64_t a = num(1);
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(child_->Call("brk " + H(a)), *this, true, &res.kernel_ok, &res.kernel_value);
    res.engine = "ret=" + Addr(engine_->Brk(a));
  } else if (op == "mremap") {
    // mremap OLD OLDLEN NEWLEN FLAGS [NEWADDR]; FLAGS maymove|fixed|dontunmap|hex|0.
    uint64_t a = num(1), ol = num(2), nl = num(3), na = w.size() > 5 ? num(5) : 0, f = 0;
    std::istringstream parts(w.size() > 4 ? w[4] : "");
    std::string part;
    while (std::getline(parts, part, '|')) {
      std::istringstream sub(part);
      std::string one;
      while (std::getline(sub, one, ',')) {
        uint64_t n;
        if (one == "maymove") f |= MREMAP_MAYMOVE;
        else if (one == "fixed") f |= MREMAP_FIXED;
        else if (one == "dontunmap") f |= MREMAP_DONTUNMAP;
        else if (ParseU64(one, &n)) f |= n;
        else return fail("bad mremap flag " + one);
      }
    }
    if (w.size() < 5 && err.empty()) err = "mremap needs OLD OLDLEN NEWLEN FLAGS";
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(child_->Call("mremap " + H(a) + " " + H(ol) + " " + H(nl) + " " + H(f) + " " + H(na)),
                               *this, true, &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(engine_->Mremap(a, ol, nl, f, na), *this, true);
  } else if (op == "mlock" || op == "munlock" || op == "mseal") {
    // mlock ADDR LEN [onfault|N] (mlock2); munlock ADDR LEN; mseal ADDR LEN [FLAGS]
    const uint64_t a = num(1), l = num(2);
    uint64_t f = 0;
    if (op != "munlock" && w.size() > 3) f = w[3] == "onfault" ? MLOCK_ONFAULT : num(3);
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(child_->Call(op + " " + H(a) + " " + H(l) + (op == "munlock" ? "" : " " + H(f))),
                               *this, false, &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(op == "mlock"     ? engine_->Mlock(a, l, static_cast<int>(f))
                               : op == "munlock" ? engine_->Munlock(a, l)
                                                 : engine_->Mseal(a, l, f),
                               *this, false);
  } else if (op == "mlockall" || op == "munlockall") {
    // mlockall current|future|onfault|N (joined by ','); munlockall
    uint64_t f = 0;
    std::istringstream parts(w.size() > 1 ? w[1] : "");
    std::string part;
    while (op == "mlockall" && std::getline(parts, part, ',')) {
      uint64_t n;
      if (part == "current") f |= MCL_CURRENT;
      else if (part == "future") f |= MCL_FUTURE;
      else if (part == "onfault") f |= MCL_ONFAULT;
      else if (ParseU64(part, &n)) f |= n;
      else return fail("bad mlockall flag " + part);
    }
    res.kernel = KernelSysText(child_->Call(op == "mlockall" ? "mlockall " + H(f) : op), *this, false,
                               &res.kernel_ok, &res.kernel_value);
    res.engine = EngineSysText(op == "mlockall" ? engine_->Mlockall(static_cast<int>(f)) : engine_->Munlockall(),
                               *this, false);
  } else if (op == "rlimit") {
    // rlimit memlock N: setrlimit(RLIMIT_MEMLOCK) soft and hard N bytes
    if (w.size() != 3 || w[1] != "memlock") return fail("rlimit memlock N");
    const uint64_t n = num(2);
    if (!err.empty()) return fail(err);
    res.kernel = KernelSysText(child_->Call("rlimit " + H(RLIMIT_MEMLOCK) + " " + H(n)), *this, false,
                               &res.kernel_ok, &res.kernel_value);
    engine_->SetRlimitMemlock(n);
    res.engine = "ret=0x0";
  } else if (op == "capability") {
    // capability ipc_lock on|off: CAP_IPC_LOCK in the effective set
    if (w.size() != 3 || w[1] != "ipc_lock" || (w[2] != "on" && w[2] != "off"))
      return fail("capability ipc_lock on|off");
    const bool on = w[2] == "on";
    res.kernel = KernelSysText(child_->Call(std::string("capipc ") + (on ? "1" : "0")), *this, false,
                               &res.kernel_ok, &res.kernel_value);
    engine_->SetCapIpcLock(on);
    res.engine = "ret=0x0";
  } else if (op == "locked") {
    // locked: the process's locked memory (VmLck, mm->locked_vm) in kB; it counts the
    // child's own VMAs too, which only mlockall(MCL_CURRENT) locks.
    auto resp = child_->Call("vmlck");
    auto fk = resp.empty() ? std::vector<uint64_t>{} : HexFields(resp[0]);
    res.kernel = fk.size() == 1 && resp[0][0] == 'R' ? "locked=" + std::to_string(fk[0]) + " kB"
                                                     : (resp.empty() ? "(no answer)" : resp[0]);
    res.kernel_ok = fk.size() == 1;
    res.kernel_value = fk.empty() ? 0 : fk[0];
    res.engine = "locked=" + std::to_string(engine_->Counters().locked_vm_pages * (kPageSize >> 10)) + " kB";
  } else if (op == "count") {
    auto resp = child_->Call("count");
    auto fk = resp.empty() ? std::vector<uint64_t>{} : HexFields(resp[0]);
    res.kernel = fk.size() == 1 ? MapCountText(fk[0])
                                : (resp.empty() ? "(no answer)" : resp[0]);
    res.kernel_value = fk.empty() ? 0 : fk[0];
    res.kernel_ok = true;
    res.engine = MapCountText(engine_->Counters().map_count);
  } else {
    return fail("unknown op '" + op + "'");
  }
  Finish(&res);
  if (!bind.empty()) vars_[bind] = res.kernel_ok ? res.kernel_value : 0;
  return res;
}

// ---------------------------------------------------------------- case files

bool LoadCase(const std::string& path, CaseFile* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot open " + path;
    return false;
  }
  std::string line;
  int n = 0;
  bool seen_op = false;
  while (std::getline(in, line)) {
    n++;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    auto w = Split(line);
    if (w.empty()) continue;
    if (w[0] == "region") {
      if (seen_op || w.size() != 2 || !ParseU64(w[1], &out->region_size)) {
        *err = path + ":" + std::to_string(n) + ": 'region SIZE' must come before the ops";
        return false;
      }
      continue;
    }
    if (w[0] == "skip") {
      out->skip = line.substr(line.find("skip") + 4);
      continue;
    }
    std::string op;
    for (size_t i = 0; i < w.size(); i++) op += (i ? " " : "") + w[i];
    out->ops.push_back({n, op});
    seen_op = true;
  }
  return true;
}

}  // namespace vmspace::oracle
