#include "lib/willitscale.h"

// The engine headers come before anything that includes <signal.h>: glibc defines
// `si_addr` as a macro, which would break FaultResult::si_addr in engine/types.h.
#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/stats.h"
#include "engine/types.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

namespace vmspace::bench {

const char* WorkloadName(Workload w) {
  switch (w) {
    case Workload::kPageFault1: return "page_fault1";
    case Workload::kMmap1: return "mmap1";
    case Workload::kMixed: return "mixed";
  }
  return "?";
}

std::optional<Workload> ParseWorkload(std::string_view name) {
  for (Workload w : {Workload::kPageFault1, Workload::kMmap1, Workload::kMixed})
    if (name == WorkloadName(w)) return w;
  return std::nullopt;
}

bool NeedsFileMappings(std::string_view name) {
  return name == "page_fault2" || name == "page_fault3" || name == "mmap2";
}

const char* ModeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }

const LockCell& LockFigures::lock(const std::string& cls, const std::string& mode) const {
  static const LockCell kZero;
  for (size_t c = 0; c < kLockClassNames.size(); ++c)
    for (size_t m = 0; m < kLockModeNames.size(); ++m)
      if (cls == kLockClassNames[c] && mode == kLockModeNames[m]) return locks[c][m];
  return kZero;
}

uint64_t LockFigures::event(const std::string& name) const {
  auto it = events.find(name);
  return it == events.end() ? 0 : it->second;
}

LockFigures LockFigures::Minus(const LockFigures& base) const {
  auto sub = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  LockFigures r = *this;
  for (size_t c = 0; c < locks.size(); ++c)
    for (size_t m = 0; m < locks[c].size(); ++m) {
      LockCell& x = r.locks[c][m];
      const LockCell& y = base.locks[c][m];
      x.acquisitions = sub(x.acquisitions, y.acquisitions);
      x.contentions = sub(x.contentions, y.contentions);
      x.wait_s = std::max(0.0, x.wait_s - y.wait_s);
      x.hold_s = std::max(0.0, x.hold_s - y.hold_s);
    }
  for (auto& [k, v] : r.events) v = sub(v, base.event(k));
  return r;
}

std::optional<uint64_t> BenchResult::mmap_lock_contentions() const {
  if (!locks) return std::nullopt;
  return locks->lock("mmap_lock", "read").contentions + locks->lock("mmap_lock", "write").contentions;
}

std::optional<double> BenchResult::contentions_per_1k_faults() const {
  auto c = mmap_lock_contentions();
  if (!c || faults == 0) return std::nullopt;
  return 1000.0 * static_cast<double>(*c) / static_cast<double>(faults);
}

std::optional<double> BenchResult::mmap_lock_wait_s_per_op() const {
  if (!locks || ops == 0) return std::nullopt;
  double w = locks->lock("mmap_lock", "read").wait_s + locks->lock("mmap_lock", "write").wait_s;
  return w / static_cast<double>(ops);
}

std::string CheckProfile(const std::string& spec, std::string* name, std::string* desc) {
  LockingProfile p;
  std::string err;
  if (!LockingProfile::Parse(spec, &p, &err)) {
    std::string msg = "locking profile '" + spec + "': " + err;
    if (spec.find("index=rbtree") != std::string::npos && err.find("needs index=maple") != std::string::npos) {
      msg += "; index=rbtree only works with vma_lock=off (e.g. --profile linux-6.6,vma_lock=off "
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
      std::string b = base.empty() ? "linux-6.6" : base;
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

namespace {

constexpr int kRw = PROT_READ | PROT_WRITE;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string ErrnoText(int err) { return std::string(ErrnoName(err)) + " (" + std::to_string(err) + ")"; }

// ---- in-process backend ----

class EngineSession : public Session {
 public:
  explicit EngineSession(AddressSpace& as) : as_(as) {}
  std::string Mmap(uint64_t len, int prot, uint64_t* addr) override {
    SysResult r = as_.Mmap(0, len, prot, MAP_PRIVATE | MAP_ANONYMOUS);
    if (!r.ok()) return "mmap: " + ErrnoText(r.error);
    *addr = r.value;
    return "";
  }
  std::string Munmap(uint64_t addr, uint64_t len) override {
    SysResult r = as_.Munmap(addr, len);
    return r.ok() ? "" : "munmap: " + ErrnoText(r.error);
  }
  std::string TouchThen(uint64_t addr, uint64_t len, uint64_t chunk, const std::atomic<bool>& stop, Then then,
                        uint64_t* pages, uint64_t* faults) override {
    std::string err;
    for (uint64_t off = 0; off < len; off += chunk) {
      if (stop.load(std::memory_order_relaxed)) break;
      AccessResult ar = as_.Access(addr + off, std::min(chunk, len - off), kPageBytes, AccessType::kWrite);
      *pages += ar.accesses;
      *faults += ar.faults;
      if (!ar.ok()) {
        err = std::string("access: ") + FaultOutcomeName(ar.stop.outcome);
        break;
      }
    }
    std::string e2;
    if (then == Then::kMunmap) e2 = Munmap(addr, len);
    else if (then == Then::kMadviseDontneed) {
      SysResult r = as_.Madvise(addr, len, MADV_DONTNEED);
      if (!r.ok()) e2 = "madvise: " + ErrnoText(r.error);
    }
    return err.empty() ? e2 : err;
  }

 private:
  AddressSpace& as_;
};

LockFigures FromSnapshot(const StatsSnapshot& s) {
  LockFigures f;
  for (size_t c = 0; c < f.locks.size(); ++c)
    for (size_t m = 0; m < f.locks[c].size(); ++m) {
      const LockStatCell& x = s.locks[c][m];
      f.locks[c][m] = {x.acquisitions, x.contentions, static_cast<double>(x.wait_ns_total) / 1e9,
                       static_cast<double>(x.hold_ns_total) / 1e9};
    }
  for (size_t e = 0; e < static_cast<size_t>(Event::kCount); ++e)
    f.events[EventName(static_cast<Event>(e))] = s.events[e];
  f.timing = LockStatsEnabled();
  return f;
}

class InprocessBackend : public Backend {
 public:
  InprocessBackend() : frames_(0) {}
  ~InprocessBackend() override {
    std::lock_guard lk(mu_);
    spaces_.clear();
  }
  std::string CreateSpace(const std::string& profile, uint64_t* space) override {
    SpaceOptions opts;
    std::string err;
    if (!LockingProfile::Parse(profile, &opts.profile, &err)) return "locking profile: " + err;
    std::lock_guard lk(mu_);
    spaces_.push_back(std::make_unique<AddressSpace>(frames_, opts));
    *space = spaces_.size() - 1;
    return "";
  }
  std::string DestroySpace(uint64_t space) override {
    std::lock_guard lk(mu_);
    if (space >= spaces_.size() || !spaces_[space]) return "no such space";
    spaces_[space].reset();
    return "";
  }
  std::string OpenSession(uint64_t space, std::unique_ptr<Session>* out) override {
    std::lock_guard lk(mu_);
    if (space >= spaces_.size() || !spaces_[space]) return "no such space";
    *out = std::make_unique<EngineSession>(*spaces_[space]);
    return "";
  }
  void Prepare(uint64_t bytes) override {
    std::vector<void*> frames;
    for (uint64_t i = 0; i < bytes / kPageBytes; ++i) {
      void* f = frames_.Alloc();
      if (f == nullptr) break;
      static_cast<volatile char*>(f)[0] = 1;
      frames.push_back(f);
    }
    for (void* f : frames) frames_.Free(f);
  }
  bool ReadLocks(const std::string& profile_name, LockFigures* out, std::string* why) override {
    int slot = 4;  // custom
    for (int i = 0; i < 4; ++i)
      if (profile_name == LockingProfile::kNames[i]) slot = i;
    *out = FromSnapshot(ReadStats(slot));
    return true;
  }

 private:
  FrameAllocator frames_;
  std::mutex mu_;
  std::vector<std::unique_ptr<AddressSpace>> spaces_;
};

// ---- the runner ----

struct ClientOut {
  uint64_t t0 = 0, t1 = 0;
  uint64_t ops = 0, faults = 0, churn_ops = 0, iterations = 0;
  std::string error;
};

/// Shared state of one run's clients.
struct RunState {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  bool failed = false;
  void Fail() {
    stop.store(true, std::memory_order_relaxed);
    std::lock_guard lk(mu);
    failed = true;
    cv.notify_all();
  }
};

void PageFault1Client(Session& s, const BenchConfig& cfg, RunState& st, ClientOut& o) {
  while (!st.stop.load(std::memory_order_relaxed)) {
    uint64_t addr = 0;
    o.error = s.Mmap(kPageFaultBytes, kRw, &addr);
    if (!o.error.empty()) break;
    uint64_t pages = 0;
    o.error = s.TouchThen(addr, kPageFaultBytes, cfg.chunk_bytes, st.stop, Session::Then::kMunmap, &pages, &o.faults);
    o.ops += pages;
    if (!o.error.empty()) break;
    if (pages == kPageFaultBytes / kPageBytes) ++o.iterations;
  }
}

void Mmap1Client(Session& s, RunState& st, ClientOut& o) {
  while (!st.stop.load(std::memory_order_relaxed)) {
    uint64_t addr = 0;
    o.error = s.Mmap(kPageFaultBytes, kRw, &addr);
    if (!o.error.empty()) break;
    o.error = s.Munmap(addr, kPageFaultBytes);
    if (!o.error.empty()) break;
    ++o.ops;
    ++o.iterations;
  }
}

void FaulterClient(Session& s, uint64_t region, const BenchConfig& cfg, RunState& st, ClientOut& o) {
  while (!st.stop.load(std::memory_order_relaxed)) {
    uint64_t pages = 0;
    o.error = s.TouchThen(region, kMixedRegionBytes, cfg.chunk_bytes, st.stop, Session::Then::kMadviseDontneed,
                          &pages, &o.faults);
    o.ops += pages;
    if (!o.error.empty()) break;
    if (pages == kMixedRegionBytes / kPageBytes) ++o.iterations;
  }
}

void ChurnerClient(Session& s, RunState& st, ClientOut& o) {
  while (!st.stop.load(std::memory_order_relaxed)) {
    uint64_t addr = 0;
    o.error = s.Mmap(kChurnBytes, PROT_READ, &addr);
    if (!o.error.empty()) break;
    o.error = s.Munmap(addr, kChurnBytes);
    if (!o.error.empty()) break;
    ++o.churn_ops;
  }
}

/// The CPUs this process may run on, in order.
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

}  // namespace

std::unique_ptr<Backend> MakeInprocessBackend() { return std::make_unique<InprocessBackend>(); }

BenchResult RunBench(const BenchConfig& cfg, Backend& backend) {
  BenchResult res;
  res.profile = cfg.profile.empty() ? "linux-6.6" : cfg.profile;
  res.error = CheckProfile(res.profile, &res.profile_name, &res.profile_desc);
  if (!res.ok()) return res;
  const bool mixed = cfg.workload == Workload::kMixed;
  if (cfg.clients < 1 || (mixed && cfg.clients < 2)) {
    res.error = mixed ? "mixed needs at least 2 clients (faulters + 1 churner)" : "need at least 1 client";
    return res;
  }
  if (mixed && cfg.mode != Mode::kThreads) {
    res.error = "mixed runs all clients in one space (--mode threads)";
    return res;
  }
  if (!(cfg.duration_s > 0) || cfg.chunk_bytes == 0 || cfg.chunk_bytes % kPageBytes != 0) {
    res.error = "bad duration or chunk size";
    return res;
  }
  const size_t n = static_cast<size_t>(cfg.clients);
  const size_t nspaces = cfg.mode == Mode::kProcesses ? n : 1;

  // Set-up (untimed): spaces, sessions, the mixed faulters' regions.
  std::vector<uint64_t> spaces;
  std::vector<std::unique_ptr<Session>> sessions(n);
  std::vector<uint64_t> regions(n, 0);
  auto teardown = [&] {
    for (size_t c = 0; c < n; ++c)
      if (regions[c] != 0 && sessions[c]) (void)sessions[c]->Munmap(regions[c], kMixedRegionBytes);
    sessions.clear();
    for (uint64_t sp : spaces) {
      std::string e = backend.DestroySpace(sp);
      if (!e.empty() && res.error.empty()) res.error = "destroy space: " + e;
    }
  };
  for (size_t i = 0; i < nspaces && res.ok(); ++i) {
    uint64_t sp = 0;
    std::string e = backend.CreateSpace(res.profile, &sp);
    if (!e.empty()) res.error = "create space: " + e;
    else spaces.push_back(sp);
  }
  for (size_t c = 0; c < n && res.ok(); ++c) {
    std::string e = backend.OpenSession(spaces[nspaces == 1 ? 0 : c], &sessions[c]);
    if (!e.empty()) res.error = "open session: " + e;
  }
  if (mixed) {
    for (size_t c = 0; c + 1 < n && res.ok(); ++c) {
      std::string e = sessions[c]->Mmap(kMixedRegionBytes, kRw, &regions[c]);
      if (!e.empty()) res.error = "set-up " + e;
    }
  }
  if (!res.ok()) {
    teardown();
    return res;
  }

  uint64_t frame_bytes = cfg.workload == Workload::kPageFault1 ? kPageFaultBytes * n
                         : mixed                               ? kMixedRegionBytes * (n - 1)
                                                               : 0;
  backend.Prepare(std::min<uint64_t>(frame_bytes, 8ull << 30));

  LockFigures before;
  std::string why;
  bool have_locks = backend.ReadLocks(res.profile_name, &before, &why);

  // The timed phase.
  RunState st;
  std::vector<ClientOut> outs(n);
  std::barrier<> start(static_cast<std::ptrdiff_t>(n + 1));
  std::vector<std::thread> threads;
  std::vector<int> cpus = cfg.pin ? AllowedCpus() : std::vector<int>{};
  for (size_t c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      ClientOut& o = outs[c];
      Session& s = *sessions[c];
      if (!cpus.empty()) PinTo(cpus[c % cpus.size()]);
      start.arrive_and_wait();
      o.t0 = NowNs();
      switch (cfg.workload) {
        case Workload::kPageFault1: PageFault1Client(s, cfg, st, o); break;
        case Workload::kMmap1: Mmap1Client(s, st, o); break;
        case Workload::kMixed:
          if (c + 1 < n) FaulterClient(s, regions[c], cfg, st, o);
          else ChurnerClient(s, st, o);
          break;
      }
      o.t1 = NowNs();
      if (!o.error.empty()) st.Fail();
    });
  }
  start.arrive_and_wait();
  {
    std::unique_lock lk(st.mu);
    st.cv.wait_for(lk, std::chrono::duration<double>(cfg.duration_s), [&] { return st.failed; });
  }
  st.stop.store(true, std::memory_order_relaxed);
  for (auto& t : threads) t.join();

  LockFigures after;
  if (have_locks && backend.ReadLocks(res.profile_name, &after, &why)) {
    res.locks = after.Minus(before);
    res.locks_note = backend.LocksCaveat();
  } else {
    res.locks_note = why;
  }

  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (size_t c = 0; c < n; ++c) {
    const ClientOut& o = outs[c];
    t0 = std::min(t0, o.t0);
    t1 = std::max(t1, o.t1);
    res.ops += o.ops;
    res.faults += o.faults;
    res.churn_ops += o.churn_ops;
    res.iterations += o.iterations;
    if (!o.error.empty() && res.error.empty()) {
      std::string who = mixed ? (c + 1 < n ? "faulter " : "churner ") : "client ";
      res.error = who + std::to_string(c) + ": " + o.error;
    }
  }
  res.seconds = t1 > t0 ? static_cast<double>(t1 - t0) / 1e9 : 0;
  teardown();
  return res;
}

}  // namespace vmspace::bench
