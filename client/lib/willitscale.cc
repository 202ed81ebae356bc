// SPDX-License-Identifier: Apache-2.0
#include "lib/willitscale.h"

#include <sys/mman.h>

namespace vmspace::bench {

const char* WorkloadName(Workload w) {
  switch (w) {
    case Workload::kPageFault1: return "page_fault1";
    case Workload::kMmap1: return "mmap1";
    case Workload::kMixed: return "mixed";
    case Workload::kPageFault2: return "page_fault2";
    case Workload::kPageFault3: return "page_fault3";
    case Workload::kPageFault4: return "page_fault4";
    case Workload::kMmap2: return "mmap2";
  }
  return "?";
}

std::optional<Workload> ParseWorkload(std::string_view name) {
  for (Workload w : {Workload::kPageFault1, Workload::kMmap1, Workload::kMixed, Workload::kPageFault2,
                     Workload::kPageFault3, Workload::kPageFault4, Workload::kMmap2})
    if (name == WorkloadName(w)) return w;
  return std::nullopt;
}

bool UsesFiles(Workload w) {
  return w == Workload::kPageFault2 || w == Workload::kPageFault3 || w == Workload::kPageFault4 ||
         w == Workload::kMmap2;
}

const char* ModeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }

namespace {

using harness::Addr;
using harness::ClientFigures;
using harness::ClientLoop;
using harness::Session;

constexpr int kRw = PROT_READ | PROT_WRITE;

// Each step is one loop iteration of the will-it-scale program and ends when its ops are
// done (Wait), as the program's syscalls are: on a Batch stream an iteration's ops after
// its mmap travel in one message, and no iteration is queued ahead of the previous one.

/// Queues one page write (or read) per 4 KiB of [addr, addr + len), one Access op per
/// `chunk` bytes, until `stop`. Returns true if every chunk was queued.
bool TouchPages(Session& s, uint64_t addr, uint64_t len, uint64_t chunk, const std::atomic<bool>& stop,
                ClientFigures& f, bool write = true) {
  for (uint64_t off = 0; off < len; off += chunk) {
    if (stop.load(std::memory_order_relaxed)) return false;
    s.Access(addr + off, std::min(chunk, len - off), kPageBytes, write);
    ++f.accesses;
  }
  return true;
}

/// A loop whose mappings use `flags`: without MAP_ANONYMOUS the client's own 128 MiB
/// file, opened in set-up and closed in tear-down (will-it-scale's per-task tmpfile).
class MappingLoop : public ClientLoop {
 public:
  explicit MappingLoop(int flags) : flags_(flags) {}
  void Setup(Session& s, ClientFigures& f) override {
    if (flags_ & MAP_ANONYMOUS) return;
    bool shmem = false;
    if (!s.OpenFile(kPageFaultBytes, &file_, &shmem)) return;
    ++f.files;
    f.shmem_files += shmem ? 1 : 0;
    open_ = true;
  }
  void Teardown(Session& s, ClientFigures&) override {
    if (open_) s.CloseFile(file_);
  }

 protected:
  const int flags_;
  uint64_t file_ = 0;

 private:
  bool open_ = false;
};

/// page_fault1..4: mmap 128 MiB (anonymous or the file); write (read) every page; munmap.
class PageFaultClient : public MappingLoop {
 public:
  /// `flags`: the mmap flags (MAP_ANONYMOUS: no file); `write`: write or read each page.
  PageFaultClient(uint64_t chunk, int flags, bool write) : MappingLoop(flags), chunk_(chunk), write_(write) {}
  bool Step(Session& s, const std::atomic<bool>& stop, ClientFigures& f) override {
    uint64_t addr = 0;
    if (!s.Wait(s.Mmap(kPageFaultBytes, kRw, flags_, file_, &addr))) return false;
    ++f.mmaps;
    bool full = TouchPages(s, addr, kPageFaultBytes, chunk_, stop, f, write_);
    s.Munmap(addr, kPageFaultBytes);
    ++f.munmaps;
    if (s.Wait() && full) ++f.rounds;
    return true;
  }

 private:
  uint64_t chunk_;
  bool write_;
};

/// mmap1, mmap2 (the file, MAP_PRIVATE) and the mixed churner (16 KiB PROT_READ):
/// mmap; munmap.
class MmapMunmapClient : public MappingLoop {
 public:
  MmapMunmapClient(uint64_t len, int prot, int flags = MAP_PRIVATE | MAP_ANONYMOUS)
      : MappingLoop(flags), len_(len), prot_(prot) {}
  bool Step(Session& s, const std::atomic<bool>&, ClientFigures& f) override {
    uint64_t addr = 0;
    const uint64_t mmap = s.Mmap(len_, prot_, flags_, file_, &addr);
    // A Batch stream names the mmap's result (both ops go in one message, one round
    // trip); other sessions have the address at once.
    Addr target = Addr::Of(mmap);
    if (!s.CanRefer(mmap)) {
      if (!s.Wait(mmap)) return false;
      target = addr;
    }
    s.Munmap(target, len_);
    ++f.mmaps;
    ++f.munmaps;
    if (!s.Wait()) return false;  // and `addr` is no longer written
    ++f.rounds;
    return true;
  }

 private:
  uint64_t len_;
  int prot_;
};

/// mixed faulter: its own 32 MiB region, mapped once; write every page; MADV_DONTNEED.
class FaulterClient : public ClientLoop {
 public:
  explicit FaulterClient(uint64_t chunk) : chunk_(chunk) {}
  void Setup(Session& s, ClientFigures& f) override {
    s.Mmap(kMixedRegionBytes, kRw, &region_);
    ++f.setup_mmaps;
  }
  bool Step(Session& s, const std::atomic<bool>& stop, ClientFigures& f) override {
    bool full = TouchPages(s, region_, kMixedRegionBytes, chunk_, stop, f);
    s.MadviseDontneed(region_, kMixedRegionBytes);
    if (s.Wait() && full) ++f.rounds;
    return true;
  }
  void Teardown(Session& s, ClientFigures& f) override {
    s.Munmap(region_, kMixedRegionBytes);
    ++f.teardown_munmaps;
  }

 private:
  uint64_t chunk_;
  uint64_t region_ = 0;
};

/// The three workloads; inside this class `Workload` is harness::Workload, so the enum
/// is spelt bench::Workload.
class WillItScale : public harness::Workload {
 public:
  explicit WillItScale(const BenchConfig& cfg) : cfg_(cfg) {}
  std::unique_ptr<ClientLoop> NewClient(int client, int clients) const override {
    switch (cfg_.workload) {
      case bench::Workload::kPageFault1:
        return std::make_unique<PageFaultClient>(cfg_.chunk_bytes, MAP_PRIVATE | MAP_ANONYMOUS, true);
      case bench::Workload::kPageFault2:
        return std::make_unique<PageFaultClient>(cfg_.chunk_bytes, MAP_PRIVATE, true);
      case bench::Workload::kPageFault3:
        return std::make_unique<PageFaultClient>(cfg_.chunk_bytes, MAP_SHARED, true);
      case bench::Workload::kPageFault4:
        return std::make_unique<PageFaultClient>(cfg_.chunk_bytes, MAP_PRIVATE, false);
      case bench::Workload::kMmap1: return std::make_unique<MmapMunmapClient>(kPageFaultBytes, kRw);
      case bench::Workload::kMmap2: return std::make_unique<MmapMunmapClient>(kPageFaultBytes, kRw, MAP_PRIVATE);
      case bench::Workload::kMixed:
        if (client + 1 < clients) return std::make_unique<FaulterClient>(cfg_.chunk_bytes);
        return std::make_unique<MmapMunmapClient>(kChurnBytes, PROT_READ);
    }
    return nullptr;
  }
  uint64_t FrameBytes(int clients) const override {
    uint64_t n = static_cast<uint64_t>(clients);
    switch (cfg_.workload) {
      case bench::Workload::kPageFault1:
      case bench::Workload::kPageFault3:
      case bench::Workload::kPageFault4: return kPageFaultBytes * n;  // anon pages / the page cache
      case bench::Workload::kPageFault2: return 2 * kPageFaultBytes * n;  // page cache + COW copies
      case bench::Workload::kMixed: return kMixedRegionBytes * (n - 1);
      case bench::Workload::kMmap1:
      case bench::Workload::kMmap2: break;
    }
    return 0;
  }
  void Summarize(const std::vector<ClientFigures>& clients, harness::RunResult& r) const override {
    switch (cfg_.workload) {
      case bench::Workload::kPageFault1:
      case bench::Workload::kPageFault2:
      case bench::Workload::kPageFault3:
      case bench::Workload::kPageFault4: r.ops = r.bytes_touched; break;  // pages written (read)
      case bench::Workload::kMmap1:
      case bench::Workload::kMmap2: r.ops = r.rounds; break;
      case bench::Workload::kMixed:
        r.ops = r.bytes_touched;  // the faulters' pages (the churner writes none)
        r.churn_ops = clients.back().rounds;
        r.rounds -= r.churn_ops;
        break;
    }
  }
  std::string ClientName(int client, int clients) const override {
    if (cfg_.workload != bench::Workload::kMixed) return harness::Workload::ClientName(client, clients);
    return (client + 1 < clients ? "faulter " : "churner ") + std::to_string(client);
  }

 private:
  BenchConfig cfg_;
};

/// Checks `cfg` and fills the harness's RunSpec and `res`'s profile fields; false with
/// res->error set if it cannot run.
bool Prepare(const BenchConfig& cfg, harness::RunSpec* spec, BenchResult* res) {
  res->profile = cfg.profile.empty() ? "linux-6.15" : cfg.profile;
  res->error = CheckProfile(res->profile, &res->profile_name, &res->profile_desc);
  if (!res->ok()) return false;
  const bool mixed = cfg.workload == Workload::kMixed;
  if (cfg.clients < 1 || (mixed && cfg.clients < 2)) {
    res->error = mixed ? "mixed needs at least 2 clients (faulters + 1 churner)" : "need at least 1 client";
  } else if (mixed && cfg.mode != Mode::kThreads) {
    res->error = "mixed runs all clients in one space (--mode threads)";
  } else if (!(cfg.duration_s > 0) || cfg.chunk_bytes == 0 || cfg.chunk_bytes % kPageBytes != 0) {
    res->error = "bad duration or chunk size";
  }
  spec->clients = cfg.clients;
  spec->shared_space = cfg.mode == Mode::kThreads;
  spec->profile = res->profile;
  spec->duration_s = cfg.duration_s;
  spec->pin = cfg.pin;
  return res->ok();
}

}  // namespace

BenchResult RunBench(const BenchConfig& cfg, Backend& backend) {
  BenchResult res;
  harness::RunSpec spec;
  if (!Prepare(cfg, &spec, &res)) return res;
  return harness::Run(spec, WillItScale(cfg), backend);
}

BenchResult RunBenchNative(const BenchConfig& cfg) {
  BenchResult res;
  harness::RunSpec spec;
  if (!Prepare(cfg, &spec, &res)) return res;
  spec.profile.clear();
  BenchResult r = harness::RunNative(spec, WillItScale(cfg));
  r.profile = "native";
  return r;
}

}  // namespace vmspace::bench
