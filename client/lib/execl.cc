// SPDX-License-Identifier: Apache-2.0
#include "lib/execl.h"

#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "engine/file.h"
#include "engine/stats.h"
#include "lib/harness.h"

extern char** environ;

namespace vmspace::bench {

namespace {
constexpr uint64_t P = kPageSize;
constexpr uint64_t kBinPages = 5;  // ELF header r--, text r-x (2), rodata r--, data rw-

/// One exec: returns "" or what failed.
std::string ExecOnce(FrameAllocator& frames, const SpaceOptions& o, const std::shared_ptr<OpenFile>& bin) {
  AddressSpace as(frames, o);
  SysResult base = as.Mmap(0, kBinPages * P, PROT_READ, MAP_PRIVATE, 0, bin);  // _dl_map_segments: the span
  if (!base.ok()) return harness::ErrnoText("mmap span", base.error);
  const uint64_t b = base.value;
  struct Seg {
    uint64_t off, pages;
    int prot;
  };
  for (Seg s : {Seg{P, 2, PROT_READ | PROT_EXEC}, Seg{3 * P, 1, PROT_READ}, Seg{4 * P, 1, PROT_READ | PROT_WRITE}}) {
    SysResult r = as.Mmap(b + s.off, s.pages * P, s.prot, MAP_PRIVATE | MAP_FIXED, s.off, bin);
    if (!r.ok()) return harness::ErrnoText("mmap segment", r.error);
  }
  SysResult bss = as.Mmap(b + kBinPages * P, 2 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
  SysResult stack = as.Mmap(0, 32 * P, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN);
  if (!bss.ok() || !stack.ok()) return "mmap bss/stack failed";
  const std::pair<uint64_t, AccessType> touches[] = {
      {b, AccessType::kRead},          {b + P, AccessType::kExec},
      {b + 3 * P, AccessType::kRead},  {b + 4 * P, AccessType::kWrite},
      {bss.value, AccessType::kWrite}, {stack.value + 31 * P, AccessType::kWrite}};
  for (auto [addr, acc] : touches) {
    FaultResult f = as.Fault(addr, acc);
    if (f.failed()) return std::string("touch ended in ") + FaultOutcomeName(f.outcome);
  }
  return "";
}
}  // namespace

ExeclResult RunExeclEngine(IMmapScope scope, const std::string& profile, int clients, double seconds) {
  ExeclResult r;
  r.setting = IMmapScopeName(scope);
  r.clients = clients;
  SpaceOptions o;
  std::string err;
  if (!LockingProfile::Parse(profile.empty() ? "linux-6.15" : profile, &o.profile, &err)) {
    r.error = "profile: " + err;
    return r;
  }
  o.i_mmap_scope = scope;
  FrameAllocator frames;
  FileTable files(frames, "");
  SysResult id = files.CreateShmem("execl-binary", kBinPages * P);
  if (!id.ok()) {
    r.error = harness::ErrnoText("create binary", id.error);
    return r;
  }
  std::vector<uint8_t> image(kBinPages * P, 0x90);
  files.Write(id.value, 0, image.data(), image.size());
  const std::shared_ptr<OpenFile> bin = files.Get(id.value);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> iters{0};
  std::vector<std::string> errors(clients);
  const StatsSnapshot before = ReadStats(o.profile.stats_slot());
  const uint64_t t0 = harness::MonoNs();
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c)
    ts.emplace_back([&, c] {
      StatsSlotScope slot(o.profile.stats_slot());
      while (!stop.load(std::memory_order_relaxed)) {
        errors[c] = ExecOnce(frames, o, bin);
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
  files.Close(id.value);
  return r;
}

std::string DefaultExeclBinary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path() : self.parent_path()) / "vmspace-execl-true";
}

ExeclResult RunExeclNative(int clients, double seconds, const std::string& binary) {
  ExeclResult r;
  r.setting = "native";
  r.clients = clients;
  r.binary = binary;
  if (access(binary.c_str(), X_OK) != 0) {
    r.error = "native binary " + binary + ": " + strerror(errno) + " (build target vmspace-execl-true, or --native-binary)";
    return r;
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> iters{0};
  std::atomic<bool> failed{false};
  const uint64_t t0 = harness::MonoNs();
  std::vector<std::thread> ts;
  for (int c = 0; c < clients; ++c)
    ts.emplace_back([&] {
      char* argv[] = {const_cast<char*>(binary.c_str()), nullptr};
      while (!stop.load(std::memory_order_relaxed)) {
        // posix_spawn: glibc's clone(CLONE_VM | CLONE_VFORK) + execve, so that the cost
        // is the exec of the small binary, not a copy of this (larger) process's mm.
        pid_t pid = -1;
        int st = 0;
        if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv, environ) != 0 || waitpid(pid, &st, 0) != pid ||
            !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          failed = true;
          break;
        }
        iters.fetch_add(1, std::memory_order_relaxed);
      }
    });
  while (harness::MonoNs() - t0 < static_cast<uint64_t>(seconds * 1e9)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  for (auto& t : ts) t.join();
  r.seconds = static_cast<double>(harness::MonoNs() - t0) / 1e9;
  r.iterations = iters.load();
  if (failed) r.error = "posix_spawn of " + binary + " failed";
  return r;
}

}  // namespace vmspace::bench
