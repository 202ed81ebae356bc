// SPDX-License-Identifier: Apache-2.0
#include "lib/execl.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "engine/exec.h"
#include "engine/file.h"
#include "engine/stats.h"
#include "lib/harness.h"

extern char** environ;

namespace vmspace::bench {

namespace {
constexpr uint64_t P = kPageSize;

/// A page of each part of the program's layout and how the program first touches it:
/// text executed, data and bss written, rodata read, the stack's top page written.
std::vector<std::pair<uint64_t, AccessType>> Touches(AddressSpace& as) {
  std::vector<std::pair<uint64_t, AccessType>> t;
  for (const VmaInfo& v : as.Maps()) {
    if (v.name == "[vvar]" || v.name == "[vvar_vclock]" || v.name == "[vdso]") continue;
    const AccessType a = (v.flags & VM_EXEC) ? AccessType::kExec : (v.flags & VM_WRITE) ? AccessType::kWrite
                                                                                          : AccessType::kRead;
    t.push_back({v.name == "[stack]" ? v.end - P : v.start, a});
  }
  return t;
}

/// One fork + exec + exit: the parent's copy (dup_mmap), its exec (the child's old mm
/// dropped), the program's touches, the exit. Returns "" or what failed.
std::string ForkExecOnce(AddressSpace& parent, const ExecImage& img,
                         const std::vector<std::pair<uint64_t, AccessType>>& touches) {
  int err = 0;
  std::unique_ptr<AddressSpace> child = parent.DupMmap(&err);
  if (!child) return harness::ErrnoText("fork", err);
  std::unique_ptr<AddressSpace> exec = child->Exec(img, &err);
  if (!exec) return harness::ErrnoText("exec", err);
  child.reset();  // exec_mmap: the old mm goes
  for (auto [addr, acc] : touches) {
    FaultResult f = exec->Fault(addr, acc);
    if (f.failed()) return std::string("touch ended in ") + FaultOutcomeName(f.outcome);
  }
  return "";
}
}  // namespace

ExeclResult RunExeclEngine(IMmapScope scope, const std::string& profile, int clients, double seconds,
                           const std::string& program) {
  ExeclResult r;
  r.setting = IMmapScopeName(scope);
  r.clients = clients;
  r.binary = program;
  SpaceOptions o;
  std::string err;
  if (!LockingProfile::Parse(profile.empty() ? "linux-6.15" : profile, &o.profile, &err)) {
    r.error = "profile: " + err;
    return r;
  }
  o.i_mmap_scope = scope;
  // The program in a data directory of its own (the FileTable opens files beneath it).
  char tmpl[] = "/tmp/vmspace-execl-XXXXXX";
  if (!mkdtemp(tmpl)) {
    r.error = std::string("mkdtemp: ") + strerror(errno);
    return r;
  }
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  std::error_code ec;
  std::filesystem::copy_file(program, dir + "/program", ec);
  if (ec) {
    r.error = "copy " + program + ": " + ec.message() + " (build target vmspace-execl-true, or --native-binary)";
    return r;
  }
  FrameAllocator frames;
  std::vector<std::string> errors(clients);
  std::atomic<uint64_t> iters{0};
  StatsSnapshot before;
  uint64_t t0 = 0;
  {
    FileTable files(frames, dir);
    ExecImage img;
    if (int e = OpenExecImage(files, "program", "", &img)) {
      r.error = harness::ErrnoText(("open " + program).c_str(), e);
      return r;
    }
    img.argv = {"/program"};
    SysResult id = files.Open("program", OpenFlags{});  // the rmap checker's handle
    if (!id.ok()) {
      r.error = harness::ErrnoText(("open " + program).c_str(), id.error);
      return r;
    }
    // Each client is a process that exec'd the program once and then forks and execs.
    std::vector<std::unique_ptr<AddressSpace>> parents;
    for (int c = 0; c < clients; ++c) {
      int e = 0;
      parents.push_back(AddressSpace(frames, o).Exec(img, &e));
      if (!parents.back()) {
        r.error = harness::ErrnoText(("exec " + program).c_str(), e);
        return r;
      }
    }
    const auto touches = Touches(*parents[0]);
    std::atomic<bool> stop{false};
    before = ReadStats(o.profile.stats_slot());
    t0 = harness::MonoNs();
    std::vector<std::thread> ts;
    for (int c = 0; c < clients; ++c)
      ts.emplace_back([&, c] {
        StatsSlotScope slot(o.profile.stats_slot());
        while (!stop.load(std::memory_order_relaxed)) {
          errors[c] = ForkExecOnce(*parents[c], img, touches);
          if (!errors[c].empty()) break;
          iters.fetch_add(1, std::memory_order_relaxed);
        }
      });
    std::thread checker([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        SysResult k = files.CheckRmap(id.value);
        r.rmap_checks++;
        if (k.ok() && k.value > 0) r.race_hits++;
        std::this_thread::yield();
      }
    });
    while (harness::MonoNs() - t0 < static_cast<uint64_t>(seconds * 1e9)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop = true;
    for (auto& t : ts) t.join();
    checker.join();
    r.seconds = static_cast<double>(harness::MonoNs() - t0) / 1e9;
    parents.clear();
    files.Close(id.value);
  }
  const StatsSnapshot d = ReadStats(o.profile.stats_slot()).Minus(before);
  for (LockMode m : {LockMode::kRead, LockMode::kWrite}) {
    const LockStatCell& cell = d.lock(LockClass::kIMmapRwsem, m);
    r.i_mmap_acquisitions += cell.acquisitions;
    r.i_mmap_contentions += cell.contentions;
    r.i_mmap_wait_s += static_cast<double>(cell.wait_ns_total) / 1e9;
  }
  r.iterations = iters.load();
  for (const std::string& e : errors)
    if (!e.empty() && r.error.empty()) r.error = e;
  return r;
}

std::string DefaultExeclBinary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path() : self.parent_path()) / "vmspace-execl-true";
}

ExeclResult RunExeclNative(int clients, uint64_t iterations, double seconds, const std::string& binary) {
  ExeclResult r;
  r.setting = "native";
  r.clients = clients;
  r.binary = binary;
  if (access(binary.c_str(), X_OK) != 0) {
    r.error = "native binary " + binary + ": " + strerror(errno) + " (build target vmspace-execl-true, or --native-binary)";
    return r;
  }
  // Each client is a process of the program (as the engine's clients exec'd it once)
  // that loops fork + execve of itself; it reports its loops and time on a pipe.
  struct Client {
    pid_t pid = -1;
    int out = -1;
  };
  std::vector<Client> cs(clients);
  for (int c = 0; c < clients && r.error.empty(); ++c) {
    const uint64_t n = iterations / clients + (static_cast<uint64_t>(c) < iterations % clients ? 1 : 0);
    const std::string count = std::to_string(n), ns = std::to_string(static_cast<uint64_t>(seconds * 1e9));
    char* argv[] = {const_cast<char*>(binary.c_str()), const_cast<char*>("loop"), const_cast<char*>(count.c_str()),
                    const_cast<char*>(ns.c_str()), nullptr};
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      r.error = std::string("pipe: ") + strerror(errno);
      break;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    const int e = posix_spawn(&cs[c].pid, argv[0], &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    cs[c].out = fds[0];
    if (e != 0) {
      cs[c].pid = -1;
      r.error = "posix_spawn of " + binary + ": " + strerror(e);
    }
  }
  uint64_t slowest_ns = 0;
  for (Client& c : cs) {
    std::string text;
    char buf[128];
    for (ssize_t n; c.out >= 0 && (n = read(c.out, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    if (c.out >= 0) close(c.out);
    int st = 0;
    const bool exited = c.pid > 0 && waitpid(c.pid, &st, 0) == c.pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    unsigned long long done = 0, ns = 0;
    if (sscanf(text.c_str(), "%llu %llu", &done, &ns) == 2) {
      r.iterations += done;
      slowest_ns = std::max<uint64_t>(slowest_ns, ns);
    }
    if (!exited && r.error.empty()) r.error = "fork + execve of " + binary + " failed (its client exited non-zero)";
  }
  r.seconds = static_cast<double>(slowest_ns) / 1e9;
  return r;
}

}  // namespace vmspace::bench
