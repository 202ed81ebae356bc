// SPDX-License-Identifier: Apache-2.0
#include "lib/harness.h"

// The engine headers come before <sys/wait.h>: glibc's <signal.h> defines `si_addr` as a
// macro, which would break FaultResult::si_addr in engine/types.h.
#include "engine/address_space.h"
#include "engine/file.h"
#include "engine/frame_allocator.h"
#include "engine/stats.h"
#include "engine/types.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <filesystem>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

namespace vmspace::harness {

namespace {
uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

uint64_t MonoNs() { return ClockNs(CLOCK_MONOTONIC); }

Progress* NewSharedProgress() {
  void* p = mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) Progress;
}

void ClientFigures::SetError(const std::string& what) {
  if (error[0] == 0) snprintf(error, sizeof error, "%s", what.c_str());
}

// ---- lock figures and results ----

const LockStatCell& LockFigures::lock(const std::string& cls, const std::string& mode) const {
  static const LockStatCell kZero;
  for (size_t c = 0; c < static_cast<size_t>(LockClass::kCount); ++c)
    for (size_t m = 0; m < static_cast<size_t>(LockMode::kCount); ++m)
      if (cls == LockClassName(static_cast<LockClass>(c)) && mode == LockModeName(static_cast<LockMode>(m)))
        return stats.locks[c][m];
  return kZero;
}

uint64_t LockFigures::event(const std::string& name) const {
  for (size_t e = 0; e < stats.events.size(); ++e)
    if (name == EventName(static_cast<Event>(e))) return stats.events[e];
  return 0;
}

std::map<std::string, uint64_t> LockFigures::events() const {
  std::map<std::string, uint64_t> m;
  for (size_t e = 0; e < stats.events.size(); ++e) m[EventName(static_cast<Event>(e))] = stats.events[e];
  return m;
}

double LockFigures::mmap_lock_wait_s() const {
  uint64_t ns = stats.lock(LockClass::kMmapLock, LockMode::kRead).wait_ns_total +
                stats.lock(LockClass::kMmapLock, LockMode::kWrite).wait_ns_total;
  return static_cast<double>(ns) / 1e9;
}

namespace {
std::optional<double> PerThousand(std::optional<uint64_t> n, uint64_t of) {
  if (!n || of == 0) return std::nullopt;
  return 1000.0 * static_cast<double>(*n) / static_cast<double>(of);
}
std::optional<double> WaitPer(const std::optional<LockFigures>& l, uint64_t of) {
  if (!l || of == 0) return std::nullopt;
  return l->mmap_lock_wait_s() / static_cast<double>(of);
}
}  // namespace

std::optional<uint64_t> RunResult::mmap_lock_contentions() const {
  if (!locks) return std::nullopt;
  return locks->stats.lock(LockClass::kMmapLock, LockMode::kRead).contentions +
         locks->stats.lock(LockClass::kMmapLock, LockMode::kWrite).contentions;
}
std::optional<double> RunResult::contentions_per_1k_faults() const {
  return PerThousand(mmap_lock_contentions(), faults);
}
std::optional<double> RunResult::contentions_per_1k_rounds() const {
  return PerThousand(mmap_lock_contentions(), rounds);
}
std::optional<double> RunResult::mmap_lock_wait_s_per_op() const { return WaitPer(locks, ops); }
std::optional<double> RunResult::mmap_lock_wait_s_per_round() const { return WaitPer(locks, rounds); }

// ---- sessions ----

std::string ErrnoText(const char* op, int err) {
  return std::string(op) + ": " + ErrnoName(err) + " (" + std::to_string(err) + ")";
}

bool SyncSession::Fail(const std::string& what) {
  if (error_.empty()) error_ = what;
  return false;
}

uint64_t SyncSession::Mmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) {
  if (error_.empty() && DoMmap(len, prot, flags, file, addr))
    counters_.addr_hash = HashAddr(counters_.addr_hash, *addr);
  return ++ops_;
}
bool SyncSession::Literal(const Addr& addr) {
  return addr.of == 0 || Fail("an op named an earlier op's address on a session that cannot (CanRefer false)");
}
uint64_t SyncSession::Munmap(Addr addr, uint64_t len) {
  if (error_.empty() && Literal(addr)) DoMunmap(addr.value, len);
  return ++ops_;
}
uint64_t SyncSession::Access(Addr addr, uint64_t len, uint64_t stride, bool write) {
  if (error_.empty() && Literal(addr)) DoAccess(addr.value, len, stride, write);
  return ++ops_;
}
uint64_t SyncSession::MadviseDontneed(uint64_t addr, uint64_t len) {
  if (error_.empty()) DoMadviseDontneed(addr, len);
  return ++ops_;
}

std::string Workload::ClientName(int client, int) const { return "client " + std::to_string(client); }

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) cpus.push_back(i);
  }
  return cpus;
}

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

namespace {

static_assert(Session::kAnonFlags == (MAP_PRIVATE | MAP_ANONYMOUS));

// ---- in-process (the engine) ----

class EngineSession : public SyncSession {
 public:
  /// `files` in `dir`; `name` prefixes this session's file names.
  EngineSession(AddressSpace& as, FileTable& files, std::string name)
      : as_(as), files_(files), name_(std::move(name)) {}

  bool OpenFile(uint64_t bytes, uint64_t* file, bool* shmem) override {
    OpenFlags f;
    f.write = f.create = f.exclusive = f.truncate = true;
    const std::string path = name_ + "-" + std::to_string(++nfiles_);
    SysResult r = files_.Open(path, f);
    if (!r.ok()) return Fail(ErrnoText(("open " + path).c_str(), r.error));
    *file = r.value;
    *shmem = false;
    const int err = files_.Truncate(r.value, bytes);
    return err == 0 || Fail(ErrnoText("ftruncate", err));
  }
  void CloseFile(uint64_t file) override {
    (void)files_.Truncate(file, 0);  // as unlink: nothing to write back
    (void)files_.Close(file);
  }

 protected:
  bool DoMmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) override {
    SysResult r = (flags & MAP_ANONYMOUS) ? as_.Mmap(0, len, prot, flags)
                                          : as_.Mmap(0, len, prot, flags, 0, files_.Get(file));
    if (!r.ok()) return Fail(ErrnoText("mmap", r.error));
    *addr = r.value;
    return true;
  }
  bool DoMunmap(uint64_t addr, uint64_t len) override {
    SysResult r = as_.Munmap(addr, len);
    return r.ok() || Fail(ErrnoText("munmap", r.error));
  }
  bool DoAccess(uint64_t addr, uint64_t len, uint64_t stride, bool write) override {
    AccessResult ar = as_.Access(addr, len, stride, write ? AccessType::kWrite : AccessType::kRead);
    counters_.bytes_touched += ar.accesses;
    counters_.faults += ar.faults;
    counters_.major_faults += ar.major_faults;
    return ar.ok() || Fail(std::string("access: ") + FaultOutcomeName(ar.stop.outcome));
  }
  bool DoMadviseDontneed(uint64_t addr, uint64_t len) override {
    SysResult r = as_.Madvise(addr, len, MADV_DONTNEED);
    return r.ok() || Fail(ErrnoText("madvise", r.error));
  }

 private:
  AddressSpace& as_;
  FileTable& files_;
  const std::string name_;
  uint64_t nfiles_ = 0;
};

/// A fresh directory under /var/tmp for the in-process backend's files ("" if none
/// could be made: file workloads then fail at OpenFile with EACCES).
std::string MakeTempDir() {
  char dir[] = "/var/tmp/vmspace-bench.XXXXXX";
  return mkdtemp(dir) ? dir : "";
}

class InprocessBackend : public Backend {
 public:
  InprocessBackend() : frames_(0), dir_(MakeTempDir()) {}
  ~InprocessBackend() override {
    {
      std::lock_guard lk(mu_);
      spaces_.clear();
    }
    files_.reset();  // writes back what is dirty, then the files go
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string CreateSpace(const std::string& profile, const std::string&, uint64_t* space) override {
    SpaceOptions opts;
    std::string err;
    if (!LockingProfile::Parse(profile, &opts.profile, &err)) return "locking profile: " + err;
    std::lock_guard lk(mu_);
    spaces_.push_back(std::make_unique<AddressSpace>(frames_, opts));
    *space = spaces_.size() - 1;
    return "";
  }
  std::string DestroySpace(uint64_t space) override {
    std::unique_ptr<AddressSpace> gone;
    {
      std::lock_guard lk(mu_);
      if (space >= spaces_.size() || !spaces_[space]) return "no such space";
      gone = std::move(spaces_[space]);
    }
    gone.reset();
    // What the space left for after a grace period (its last index nodes, VMAs and
    // frames) is freed before the next run: each run of a compare pays only for its own
    // work, as each native run is a fresh process.
    RcuBarrier();
    return "";
  }
  std::string OpenSession(uint64_t space, std::unique_ptr<Session>* out) override {
    std::lock_guard lk(mu_);
    if (space >= spaces_.size() || !spaces_[space]) return "no such space";
    *out = std::make_unique<EngineSession>(*spaces_[space], *files_, "client" + std::to_string(++sessions_));
    return "";
  }
  void Prepare(uint64_t bytes) override {
    std::vector<void*> frames;
    for (uint64_t i = 0; i < bytes / 4096; ++i) {
      void* f = frames_.Alloc();
      if (f == nullptr) break;
      static_cast<volatile char*>(f)[0] = 1;
      frames.push_back(f);
    }
    for (void* f : frames) frames_.Free(f);
  }
  bool ReadLocks(const std::string& profile_name, LockFigures* out, std::string*) override {
    LockingProfile p;  // stats_slot() goes by the name only
    p.name = profile_name;
    *out = {ReadStats(profile_name.empty() ? -1 : p.stats_slot()), LockStatsEnabled()};
    return true;
  }

 private:
  FrameAllocator frames_;
  std::string dir_;
  std::unique_ptr<FileTable> files_ = std::make_unique<FileTable>(frames_, dir_);
  std::mutex mu_;
  std::vector<std::unique_ptr<AddressSpace>> spaces_;
  uint64_t sessions_ = 0;
};

// ---- native (the real kernel, in this process) ----

class NativeSession : public SyncSession {
 public:
  /// Faults are this thread's ru_minflt + ru_majflt: call from the client's thread.
  SessionCounters counters() override {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    SessionCounters c = counters_;
    c.faults = static_cast<uint64_t>(ru.ru_minflt + ru.ru_majflt);
    c.major_faults = static_cast<uint64_t>(ru.ru_majflt);
    return c;
  }

 protected:
  bool DoMmap(uint64_t len, int prot, int flags, uint64_t file, uint64_t* addr) override {
    const int fd = (flags & MAP_ANONYMOUS) ? -1 : static_cast<int>(file);
    void* p = mmap(nullptr, len, prot, flags, fd, 0);
    if (p == MAP_FAILED) return Fail(ErrnoText("native mmap", errno));
    *addr = reinterpret_cast<uint64_t>(p);
    return true;
  }
  bool DoMunmap(uint64_t addr, uint64_t len) override {
    return munmap(reinterpret_cast<void*>(addr), len) == 0 || Fail(ErrnoText("native munmap", errno));
  }
  bool DoAccess(uint64_t addr, uint64_t len, uint64_t stride, bool write) override {
    // The seed's accessit(): addr[i] = i for every stride-th byte (or a volatile read).
    volatile char* p = reinterpret_cast<volatile char*>(addr);
    for (uint64_t j = 0; j < len; j += stride) {
      if (write) p[j] = static_cast<char>(j);
      else (void)p[j];
      ++counters_.bytes_touched;
    }
    return true;
  }
  bool DoMadviseDontneed(uint64_t addr, uint64_t len) override {
    return madvise(reinterpret_cast<void*>(addr), len, MADV_DONTNEED) == 0 ||
           Fail(ErrnoText("native madvise", errno));
  }

 public:
  /// will-it-scale's tmpfile, on a real filesystem (/var/tmp: /tmp may be tmpfs).
  bool OpenFile(uint64_t bytes, uint64_t* file, bool* shmem) override {
    char path[] = "/var/tmp/vmspace-bench.XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return Fail(ErrnoText("native mkstemp", errno));
    unlink(path);
    *file = static_cast<uint64_t>(fd);
    *shmem = false;
    return ftruncate(fd, static_cast<off_t>(bytes)) == 0 || Fail(ErrnoText("native ftruncate", errno));
  }
  void CloseFile(uint64_t file) override { close(static_cast<int>(file)); }
};

// ---- the runner ----

constexpr uint64_t kProgressStep = 256;

/// State every client of a run shares (in MAP_SHARED memory for RunNative).
struct Shared {
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};  // clients that have begun their timed phase
};

/// A Shared in MAP_SHARED memory (forked children see the parent's), unmapped when
/// the owner drops it.
struct SharedDeleter {
  void operator()(Shared* s) const {
    s->~Shared();
    munmap(s, sizeof(Shared));
  }
};
std::unique_ptr<Shared, SharedDeleter> NewShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return std::unique_ptr<Shared, SharedDeleter>(new (p) Shared);
}

/// One client's whole life on its own thread: set-up, `at_start` (returns when the run
/// starts), the timed steps until the loop is done or `stop`, the drain of its ops,
/// `at_end`, tear-down, close. Any failure sets `stop` for everyone.
void RunClient(ClientLoop& loop, Session& s, const RunSpec& spec, int cpu, Shared& sh,
               const std::function<void()>& at_start, const std::function<void()>& at_end, ClientFigures& f) {
  if (cpu >= 0) PinTo(cpu);
  loop.Setup(s, f);
  const bool setup_ok = s.Wait();
  if (!setup_ok) sh.stop.store(true);
  at_start();
  const SessionCounters c0 = s.counters();
  f.t0 = MonoNs();
  const uint64_t cpu0 = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  sh.started.fetch_add(1);
  uint64_t steps = 0, reported = 0;
  while (setup_ok && !sh.stop.load(std::memory_order_relaxed) && s.ok() && loop.Step(s, sh.stop, f)) {
    if (spec.progress && ++steps - reported >= kProgressStep) {
      spec.progress->rounds.fetch_add(steps - reported, std::memory_order_relaxed);
      reported = steps;
    }
  }
  s.Wait();
  f.cpu_ns = ClockNs(CLOCK_THREAD_CPUTIME_ID) - cpu0;
  f.t1 = MonoNs();
  const SessionCounters c1 = s.counters();
  if (spec.progress) spec.progress->rounds.fetch_add(steps - reported, std::memory_order_relaxed);
  f.bytes_touched = c1.bytes_touched - c0.bytes_touched;
  f.faults = c1.faults - c0.faults;
  f.major_faults = c1.major_faults - c0.major_faults;
  f.messages = c1.messages - c0.messages;
  if (!s.ok()) sh.stop.store(true);
  at_end();
  if (s.ok()) {
    loop.Teardown(s, f);
    s.Wait();
  }
  s.Close();
  f.addr_hash = s.counters().addr_hash;
  if (!s.ok()) f.SetError((setup_ok ? "" : "set-up: ") + s.error());
  if (!f.ok()) sh.stop.store(true);
}

/// The parent's part of the timed phase: with a duration, waits until every client has
/// started, then `duration_s` more (or until a failure), then sets stop.
void TimePhase(const RunSpec& spec, Shared& sh) {
  if (!(spec.duration_s > 0)) return;
  auto sleep_ns = [](uint64_t ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); };
  while (sh.started.load() < spec.clients && !sh.stop.load()) sleep_ns(1000000);
  const uint64_t end = MonoNs() + static_cast<uint64_t>(spec.duration_s * 1e9);
  for (uint64_t now = MonoNs(); now < end && !sh.stop.load(); now = MonoNs())
    sleep_ns(std::min<uint64_t>(end - now, 5000000));
  sh.stop.store(true);
}

/// Sums the clients into `r` (first error wins, named by the workload), then lets the
/// workload set its own totals.
void Merge(const std::vector<ClientFigures>& figs, const Workload& w, bool hash, RunResult& r) {
  const int n = static_cast<int>(figs.size());
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (int c = 0; c < n; ++c) {
    const ClientFigures& f = figs[static_cast<size_t>(c)];
    if (!f.ok() && r.error.empty()) r.error = w.ClientName(c, n) + ": " + f.error;
    if (f.t0 != 0) t0 = std::min(t0, f.t0);
    t1 = std::max(t1, f.t1);
    if (f.t1 > f.t0) {
      const double share = static_cast<double>(f.cpu_ns) / static_cast<double>(f.t1 - f.t0);
      r.on_cpu = c == 0 ? share : std::min(r.on_cpu, share);
    }
    r.rounds += f.rounds;
    r.client_rounds_per_s.push_back(
        f.t1 > f.t0 ? static_cast<double>(f.rounds) * 1e9 / static_cast<double>(f.t1 - f.t0) : 0);
    r.mmaps += f.mmaps;
    r.munmaps += f.munmaps;
    r.accesses += f.accesses;
    r.bytes_touched += f.bytes_touched;
    r.faults += f.faults;
    r.major_faults += f.major_faults;
    r.setup_mmaps += f.setup_mmaps;
    r.teardown_munmaps += f.teardown_munmaps;
    r.messages += f.messages;
    r.waits += f.waits;
    r.files += f.files;
    r.shmem_files += f.shmem_files;
    if (hash) r.addr_hash ^= f.addr_hash;
  }
  r.seconds = t1 > t0 ? static_cast<double>(t1 - t0) / 1e9 : 0;
  w.Summarize(figs, r);
}

int CpuOf(const std::vector<int>& cpus, int c) {
  return cpus.empty() ? -1 : cpus[static_cast<size_t>(c) % cpus.size()];
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

// Body of one forked child of RunNative: runs clients [first, first + n) as threads on
// NativeSessions, tells the parent it is ready once they are all set up, waits for the
// go signal (EOF on go_fd), reports the figures.
[[noreturn]] void NativeChild(const RunSpec& spec, const Workload& w, int first, int n, Shared& sh,
                              int ready_fd, int go_fd, int result_fd) {
  std::vector<ClientFigures> figs(static_cast<size_t>(n));
  auto on_all_ready = [&]() noexcept {
    char c = 1;
    WriteAll(ready_fd, &c, 1);
    char buf;
    while (read(go_fd, &buf, 1) < 0 && errno == EINTR) {
    }
  };
  std::barrier start(n, on_all_ready);
  std::function<void()> at_start = [&] { start.arrive_and_wait(); };
  std::function<void()> at_end = [] {};
  std::vector<int> cpus = spec.pin ? AllowedCpus() : std::vector<int>{};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      int c = first + i;
      NativeSession s;
      std::unique_ptr<ClientLoop> loop = w.NewClient(c, spec.clients);
      RunClient(*loop, s, spec, CpuOf(cpus, spec.first_cpu + c), sh, at_start, at_end, figs[static_cast<size_t>(i)]);
    });
  }
  for (auto& t : threads) t.join();
  bool ok = WriteAll(result_fd, figs.data(), figs.size() * sizeof(ClientFigures));
  _exit(ok ? 0 : 3);
}

}  // namespace

std::unique_ptr<Backend> MakeInprocessBackend() { return std::make_unique<InprocessBackend>(); }

RunResult Run(const RunSpec& spec, const Workload& w, Backend& backend) {
  RunResult r;
  r.profile = spec.profile;
  if (!spec.profile.empty()) (void)CheckProfile(spec.profile, &r.profile_name, &r.profile_desc);
  if (spec.clients < 1) {
    r.error = "need at least 1 client";
    return r;
  }
  const size_t n = static_cast<size_t>(spec.clients);
  const size_t nspaces = spec.shared_space ? 1 : n;

  // Set-up (untimed): spaces and sessions.
  std::vector<uint64_t> spaces;
  std::vector<std::unique_ptr<Session>> sessions(n);
  auto teardown = [&] {
    sessions.clear();
    for (uint64_t sp : spaces) {
      std::string e = backend.DestroySpace(sp);
      if (!e.empty() && r.error.empty()) r.error = "destroy space: " + e;
    }
  };
  for (size_t i = 0; i < nspaces && r.ok(); ++i) {
    uint64_t sp = 0;
    std::string e = backend.CreateSpace(spec.profile, spec.label, &sp);
    if (!e.empty()) r.error = "create space: " + e;
    else spaces.push_back(sp);
  }
  for (size_t c = 0; c < n && r.ok(); ++c) {
    std::string e = backend.OpenSession(spaces[nspaces == 1 ? 0 : c], &sessions[c]);
    if (!e.empty()) r.error = "open session: " + e;
  }
  if (!r.ok()) {
    teardown();
    return r;
  }
  backend.Prepare(std::min<uint64_t>(w.FrameBytes(spec.clients), 8ull << 30));

  // Lock figures when every client is set up and when every client's timed phase is
  // over (before any tear-down): the barriers' completions run between the phases.
  LockFigures before, after;
  std::string why;
  bool have_before = false, have_after = false;
  auto read_before = [&]() noexcept { have_before = backend.ReadLocks(r.profile_name, &before, &why); };
  auto read_after = [&]() noexcept { have_after = have_before && backend.ReadLocks(r.profile_name, &after, &why); };
  std::barrier start(static_cast<std::ptrdiff_t>(n + 1), read_before);
  std::barrier end(static_cast<std::ptrdiff_t>(n), read_after);
  std::function<void()> at_start = [&] { start.arrive_and_wait(); };
  std::function<void()> at_end = [&] { end.arrive_and_wait(); };

  auto sh = NewShared();
  if (!sh) {
    r.error = ErrnoText("mmap", errno);
    teardown();
    return r;
  }
  std::vector<ClientFigures> figs(n);
  std::vector<int> cpus = spec.pin ? AllowedCpus() : std::vector<int>{};
  std::vector<std::thread> threads;
  for (size_t c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      std::unique_ptr<ClientLoop> loop = w.NewClient(static_cast<int>(c), spec.clients);
      RunClient(*loop, *sessions[c], spec, CpuOf(cpus, spec.first_cpu + static_cast<int>(c)), *sh, at_start, at_end, figs[c]);
    });
  }
  start.arrive_and_wait();
  TimePhase(spec, *sh);
  for (auto& t : threads) t.join();

  if (have_after) {
    r.locks = after.Minus(before);
    r.locks_note = backend.LocksCaveat();
  } else {
    r.locks_note = why;
  }
  Merge(figs, w, !spec.shared_space, r);
  teardown();
  return r;
}

RunResult RunNative(const RunSpec& spec, const Workload& w) {
  RunResult r;
  if (spec.clients < 1) {
    r.error = "need at least 1 client";
    return r;
  }
  auto sh = NewShared();
  // One child per client (separate mm), or one child with all clients as threads.
  const int nchildren = spec.shared_space ? 1 : spec.clients;
  const int per_child = spec.shared_space ? spec.clients : 1;
  int ready[2], go[2], result[2];
  if (!sh || pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0 || pipe2(result, O_CLOEXEC) != 0) {
    r.error = ErrnoText("native set-up", errno);
    return r;
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < nchildren; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      close(result[0]);
      NativeChild(spec, w, i * per_child, per_child, *sh, ready[1], go[0], result[1]);
    }
    if (pid < 0) {
      r.error = ErrnoText("fork", errno);
      sh->stop.store(true);  // the children started so far must not wait for the rest
      break;
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  close(result[1]);
  // Start all children's timed phases together: wait until each is set up, then close go.
  for (size_t i = 0; i < pids.size(); ++i) {
    char c;
    if (!ReadAll(ready[0], &c, 1)) {
      if (r.error.empty()) r.error = "native child died during set-up";
      sh->stop.store(true);
      break;
    }
  }
  close(go[1]);
  TimePhase(spec, *sh);
  std::vector<ClientFigures> figs;
  for (size_t i = 0; i < pids.size(); ++i) {
    std::vector<ClientFigures> part(static_cast<size_t>(per_child));
    if (!ReadAll(result[0], part.data(), part.size() * sizeof(ClientFigures))) {
      if (r.error.empty()) r.error = "native child died without reporting";
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
    if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && r.error.empty()) {
      r.error = "native child exited with status " + std::to_string(st);
    }
  }
  Merge(figs, w, false, r);
  return r;
}

// ---- locking profiles and --compare ----

std::string CheckProfile(const std::string& spec, std::string* name, std::string* desc) {
  LockingProfile p;
  std::string err;
  if (!LockingProfile::Parse(spec, &p, &err)) {
    std::string msg = "locking profile '" + spec + "': " + err;
    if (spec.find("index=rbtree") != std::string::npos && err.find("needs index=maple") != std::string::npos) {
      msg += "; index=rbtree only works with vma_lock=off (e.g. --profile linux-6.15,vma_lock=off "
             "--compare index=rbtree,maple)";
    }
    return msg;
  }
  if (name) *name = p.name;
  if (desc) *desc = p.Describe();
  return "";
}

std::string ExpandCompare(const std::string& list, const std::string& base, std::vector<std::string>* out) {
  out->clear();
  auto split = [](const std::string& s, char sep) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) {
      while (!item.empty() && item.front() == ' ') item.erase(item.begin());
      while (!item.empty() && item.back() == ' ') item.pop_back();
      v.push_back(item);
    }
    return v;
  };
  if (list.find(';') != std::string::npos) {
    for (const std::string& spec : split(list, ';')) {
      if (spec.empty()) return "--compare: empty profile between ';'";
      out->push_back(spec);
    }
  } else {
    std::vector<std::string> items = split(list, ',');
    if (items.empty() || (items.size() == 1 && items[0].empty())) return "--compare: empty list";
    for (const std::string& it : items)
      if (it.empty()) return "--compare: empty item in '" + list + "'";
    size_t eq = items[0].find('=');
    if (eq == std::string::npos) {
      // Profile names.
      for (const std::string& it : items) {
        if (it.find('=') != std::string::npos) {
          return "--compare: '" + list + "' mixes profile names and a switch; give profile names "
                 "(linux-6.0,linux-6.6), one switch and its values (vma_lock=off,anon,all), or "
                 "full profiles separated by ';'";
        }
        out->push_back(it);
      }
    } else {
      // One switch and its values, applied to the base profile.
      std::string key = items[0].substr(0, eq);
      std::vector<std::string> values = {items[0].substr(eq + 1)};
      for (size_t i = 1; i < items.size(); ++i) {
        const std::string& it = items[i];
        size_t e = it.find('=');
        if (e != std::string::npos) {
          if (it.substr(0, e) != key) {
            return "--compare: '" + list + "' varies more than one switch (" + key + ", " + it.substr(0, e) +
                   "); vary one, or give full profiles separated by ';'";
          }
          values.push_back(it.substr(e + 1));
        } else {
          values.push_back(it);
        }
      }
      std::string b = base.empty() ? "linux-6.15" : base;
      for (const std::string& v : values) {
        if (v.empty()) return "--compare: empty value for " + key;
        out->push_back(b + "," + key + "=" + v);
      }
    }
  }
  for (const std::string& spec : *out) {
    std::string e = CheckProfile(spec);
    if (!e.empty()) return "--compare: " + e;
  }
  return "";
}

}  // namespace vmspace::harness
