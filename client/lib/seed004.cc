#include "lib/seed004.h"

// The engine headers come before <sys/wait.h>: glibc's <signal.h> defines `si_addr` as a
// macro, which would break FaultResult::si_addr in engine/types.h.
#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/types.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <functional>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace vmspace::stress {

GlibcRandom::GlibcRandom(uint32_t seed) {
  if (seed == 0) seed = 1;
  state_[0] = static_cast<int32_t>(seed);
  int32_t word = static_cast<int32_t>(seed);
  for (int i = 1; i < 31; ++i) {
    // state[i] = (16807 * state[i - 1]) % 2147483647 without overflow (glibc srandom_r).
    long hi = word / 127773;
    long lo = word % 127773;
    word = static_cast<int32_t>(16807 * lo - 2836 * hi);
    if (word < 0) word += 2147483647;
    state_[i] = word;
  }
  f_ = 3;
  r_ = 0;
  for (int i = 0; i < 310; ++i) Next();
}

int32_t GlibcRandom::Next() {
  uint32_t val = static_cast<uint32_t>(state_[f_]) + static_cast<uint32_t>(state_[r_]);
  state_[f_] = static_cast<int32_t>(val);
  int32_t result = static_cast<int32_t>(val >> 1);
  if (++f_ >= 31) {
    f_ = 0;
    ++r_;
  } else if (++r_ >= 31) {
    r_ = 0;
  }
  return result;
}

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

constexpr int kProt = PROT_READ | PROT_WRITE;
constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kProgressStep = 256;

struct Slot {
  uint64_t addr = 0;
  uint64_t len = 0;
};


}  // namespace

void ClientFigures::SetError(const std::string& what) {
  if (error[0] == 0) snprintf(error, sizeof error, "%s", what.c_str());
}

namespace {

std::string ErrText(const char* op, int err) {
  return std::string(op) + ": " + ErrnoName(err) + " (" + std::to_string(err) + ")";
}

}  // namespace

void MergeFigures(StressStats& s, const std::vector<ClientFigures>& figs, bool hash) {
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (const ClientFigures& f : figs) {
    if (f.error[0] != 0 && s.error.empty()) s.error = f.error;
    if (f.t0 != 0) t0 = std::min(t0, f.t0);
    t1 = std::max(t1, f.t1);
    s.rounds += f.rounds;
    s.mmaps += f.mmaps;
    s.munmaps += f.munmaps;
    s.accesses += f.accesses;
    s.bytes_touched += f.bytes_touched;
    s.faults += f.faults;
    s.major_faults += f.major_faults;
    s.setup_mmaps += f.setup_mmaps;
    s.teardown_munmaps += f.teardown_munmaps;
    s.messages += f.messages;
    s.waits += f.waits;
    if (hash) s.addr_hash ^= f.addr_hash;
  }
  s.seconds = t1 > t0 ? static_cast<double>(t1 - t0) / 1e9 : 0;
}

namespace {

// ---- engine ----

void EngineClient(vmspace::AddressSpace& as, const StressConfig& cfg, int client,
                  const std::function<void()>& wait_start, Progress* progress, ClientFigures& f) {
  Seed004Sequence seq(cfg.seed + static_cast<uint32_t>(client));
  std::vector<Slot> slots(Seed004Sequence::kSlots);
  bool ok = true;
  for (Slot& s : slots) {
    s.len = seq.NextSize();
    vmspace::SysResult r = as.Mmap(0, s.len, kProt, kFlags);
    if (!r.ok()) {
      f.SetError(ErrText("setup mmap", r.error));
      ok = false;
      break;
    }
    s.addr = r.value;
    f.addr_hash = HashAddr(f.addr_hash, s.addr);
    ++f.setup_mmaps;
  }
  wait_start();
  f.t0 = MonoNs();
  uint64_t reported = 0;
  for (uint64_t i = 0; ok && i < cfg.rounds; ++i) {
    Slot& s = slots[seq.NextSlot()];
    if (cfg.page_fault) {
      vmspace::AccessResult ar = as.Access(s.addr, s.len, cfg.stride, vmspace::AccessType::kWrite);
      ++f.accesses;
      f.bytes_touched += ar.accesses;
      f.faults += ar.faults;
      f.major_faults += ar.major_faults;
      if (!ar.ok()) {
        f.SetError(std::string("access: ") + vmspace::FaultOutcomeName(ar.stop.outcome));
        break;
      }
    }
    vmspace::SysResult r = as.Munmap(s.addr, s.len);
    ++f.munmaps;
    if (!r.ok()) {
      f.SetError(ErrText("munmap", r.error));
      break;
    }
    s.len = seq.NextSize();
    r = as.Mmap(0, s.len, kProt, kFlags);
    ++f.mmaps;
    if (!r.ok()) {
      f.SetError(ErrText("mmap", r.error));
      s.addr = s.len = 0;
      break;
    }
    s.addr = r.value;
    f.addr_hash = HashAddr(f.addr_hash, s.addr);
    ++f.rounds;
    if (progress && f.rounds - reported >= kProgressStep) {
      progress->rounds.fetch_add(f.rounds - reported, std::memory_order_relaxed);
      reported = f.rounds;
    }
  }
  f.t1 = MonoNs();
  if (progress) progress->rounds.fetch_add(f.rounds - reported, std::memory_order_relaxed);
  for (Slot& s : slots) {
    if (s.len == 0) continue;
    if (as.Munmap(s.addr, s.len).ok()) ++f.teardown_munmaps;
  }
}

// ---- native ----

void NativeClient(const StressConfig& cfg, int client, const std::function<void()>& wait_start,
                  Progress* progress, ClientFigures& f) {
  Seed004Sequence seq(cfg.seed + static_cast<uint32_t>(client));
  std::vector<Slot> slots(Seed004Sequence::kSlots);
  bool ok = true;
  for (Slot& s : slots) {
    s.len = seq.NextSize();
    void* p = mmap(nullptr, s.len, kProt, kFlags, -1, 0);
    if (p == MAP_FAILED) {
      f.SetError(ErrText("native setup mmap", errno));
      s.len = 0;
      ok = false;
      break;
    }
    s.addr = reinterpret_cast<uint64_t>(p);
    ++f.setup_mmaps;
  }
  wait_start();
  rusage ru0{}, ru1{};
  getrusage(RUSAGE_THREAD, &ru0);
  f.t0 = MonoNs();
  for (uint64_t i = 0; ok && i < cfg.rounds; ++i) {
    Slot& s = slots[seq.NextSlot()];
    if (cfg.page_fault) {
      // The seed's accessit(): addr[i] = i for every 128th byte.
      volatile char* p = reinterpret_cast<volatile char*>(s.addr);
      for (uint64_t j = 0; j < s.len; j += cfg.stride) {
        p[j] = static_cast<char>(j);
        ++f.bytes_touched;
      }
      ++f.accesses;
    }
    ++f.munmaps;
    if (munmap(reinterpret_cast<void*>(s.addr), s.len) != 0) {
      f.SetError(ErrText("native munmap", errno));
      s.len = 0;
      break;
    }
    s.len = seq.NextSize();
    void* p = mmap(nullptr, s.len, kProt, kFlags, -1, 0);
    ++f.mmaps;
    if (p == MAP_FAILED) {
      f.SetError(ErrText("native mmap", errno));
      s.len = 0;
      break;
    }
    s.addr = reinterpret_cast<uint64_t>(p);
    ++f.rounds;
    if (progress && f.rounds % kProgressStep == 0) {
      progress->rounds.fetch_add(kProgressStep, std::memory_order_relaxed);
    }
  }
  f.t1 = MonoNs();
  getrusage(RUSAGE_THREAD, &ru1);
  f.faults = static_cast<uint64_t>(ru1.ru_minflt - ru0.ru_minflt + ru1.ru_majflt - ru0.ru_majflt);
  f.major_faults = static_cast<uint64_t>(ru1.ru_majflt - ru0.ru_majflt);
  for (Slot& s : slots) {
    if (s.len != 0 && munmap(reinterpret_cast<void*>(s.addr), s.len) == 0) ++f.teardown_munmaps;
  }
}

bool WriteAll(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Body of one forked child: runs clients [first, first + n) as threads, tells the parent
// it is ready after setup, waits for the go signal (EOF on go_fd), reports the figures.
[[noreturn]] void NativeChild(const StressConfig& cfg, int first, int n, int ready_fd, int go_fd,
                              int result_fd, Progress* progress) {
  std::vector<ClientFigures> figs(static_cast<size_t>(n));
  auto on_all_ready = [&]() noexcept {
    char c = 1;
    WriteAll(ready_fd, &c, 1);
    char buf;
    while (read(go_fd, &buf, 1) < 0 && errno == EINTR) {
    }
  };
  std::barrier start(n, on_all_ready);
  std::function<void()> wait_start = [&] { start.arrive_and_wait(); };
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] { NativeClient(cfg, first + i, wait_start, progress, figs[static_cast<size_t>(i)]); });
  }
  for (auto& t : threads) t.join();
  bool ok = WriteAll(result_fd, figs.data(), figs.size() * sizeof(ClientFigures));
  _exit(ok ? 0 : 3);
}

}  // namespace

StressStats RunEngineStress(const StressConfig& cfg, Progress* progress) {
  StressStats stats;
  vmspace::SpaceOptions opts;
  if (!cfg.locking_profile.empty()) {
    std::string err;
    if (!vmspace::LockingProfile::Parse(cfg.locking_profile, &opts.profile, &err)) {
      stats.error = "locking profile: " + err;
      return stats;
    }
  }
  vmspace::FrameAllocator frames(0);
  int nspaces = cfg.shared_space ? 1 : cfg.clients;
  std::vector<std::unique_ptr<vmspace::AddressSpace>> spaces;
  for (int i = 0; i < nspaces; ++i) spaces.push_back(std::make_unique<vmspace::AddressSpace>(frames, opts));
  std::vector<ClientFigures> figs(static_cast<size_t>(cfg.clients));
  std::barrier<> start(cfg.clients);
  std::function<void()> wait_start = [&] { start.arrive_and_wait(); };
  std::vector<std::thread> threads;
  for (int c = 0; c < cfg.clients; ++c) {
    threads.emplace_back([&, c] {
      EngineClient(*spaces[cfg.shared_space ? 0 : static_cast<size_t>(c)], cfg, c, wait_start, progress,
                   figs[static_cast<size_t>(c)]);
    });
  }
  for (auto& t : threads) t.join();
  MergeFigures(stats, figs, !cfg.shared_space);
  return stats;
}

Progress* NewSharedProgress() {
  void* p = mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Progress;
}

StressStats RunNativeStress(const StressConfig& cfg, Progress* progress) {
  StressStats stats;
  // One child per client (separate mm), or one child with all clients as threads.
  int nchildren = cfg.shared_space ? 1 : cfg.clients;
  int per_child = cfg.shared_space ? cfg.clients : 1;
  int ready[2], go[2], result[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0 || pipe2(result, O_CLOEXEC) != 0) {
    stats.error = ErrText("pipe", errno);
    return stats;
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < nchildren; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      close(result[0]);
      NativeChild(cfg, i * per_child, per_child, ready[1], go[0], result[1], progress);
    }
    if (pid < 0) {
      stats.error = ErrText("fork", errno);
      break;
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  close(result[1]);
  // Start all children's rounds together: wait until each is set up, then close go.
  for (size_t i = 0; i < pids.size(); ++i) {
    char c;
    if (!ReadAll(ready[0], &c, 1)) {
      if (stats.error.empty()) stats.error = "native child died during setup";
      break;
    }
  }
  close(go[1]);
  std::vector<ClientFigures> figs;
  for (size_t i = 0; i < pids.size(); ++i) {
    std::vector<ClientFigures> part(static_cast<size_t>(per_child));
    if (!ReadAll(result[0], part.data(), part.size() * sizeof(ClientFigures))) {
      if (stats.error.empty()) stats.error = "native child died without reporting";
      break;
    }
    figs.insert(figs.end(), part.begin(), part.end());
  }
  close(ready[0]);
  close(result[0]);
  for (pid_t pid : pids) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && stats.error.empty()) {
      stats.error = "native child exited with status " + std::to_string(st);
    }
  }
  MergeFigures(stats, figs, false);
  return stats;
}

}  // namespace vmspace::stress
