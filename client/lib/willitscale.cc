#include "lib/willitscale.h"

#include <sys/mman.h>

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

namespace {

using harness::ClientFigures;
using harness::ClientLoop;
using harness::Session;

constexpr int kRw = PROT_READ | PROT_WRITE;

// Each step is one loop iteration of the will-it-scale program and ends when its ops are
// done (Wait), as the program's syscalls are: on a Batch stream an iteration's ops after
// its mmap travel in one message, and no iteration is queued ahead of the previous one.

/// Queues one page write per 4 KiB of [addr, addr + len), one Access op per `chunk`
/// bytes, until `stop`. Returns true if every chunk was queued.
bool TouchPages(Session& s, uint64_t addr, uint64_t len, uint64_t chunk, const std::atomic<bool>& stop,
                ClientFigures& f) {
  for (uint64_t off = 0; off < len; off += chunk) {
    if (stop.load(std::memory_order_relaxed)) return false;
    s.Access(addr + off, std::min(chunk, len - off), kPageBytes);
    ++f.accesses;
  }
  return true;
}

/// page_fault1: mmap 128 MiB; write every page; munmap.
class PageFault1Client : public ClientLoop {
 public:
  explicit PageFault1Client(uint64_t chunk) : chunk_(chunk) {}
  bool Step(Session& s, const std::atomic<bool>& stop, ClientFigures& f) override {
    uint64_t addr = 0;
    if (!s.Wait(s.Mmap(kPageFaultBytes, kRw, &addr))) return false;
    ++f.mmaps;
    bool full = TouchPages(s, addr, kPageFaultBytes, chunk_, stop, f);
    s.Munmap(addr, kPageFaultBytes);
    ++f.munmaps;
    if (s.Wait() && full) ++f.rounds;
    return true;
  }

 private:
  uint64_t chunk_;
};

/// mmap1 (and the mixed churner with 16 KiB PROT_READ): mmap; munmap.
class MmapMunmapClient : public ClientLoop {
 public:
  MmapMunmapClient(uint64_t len, int prot) : len_(len), prot_(prot) {}
  bool Step(Session& s, const std::atomic<bool>&, ClientFigures& f) override {
    uint64_t addr = 0;
    if (!s.Wait(s.Mmap(len_, prot_, &addr))) return false;
    s.Munmap(addr, len_);
    ++f.mmaps;
    ++f.munmaps;
    if (s.Wait()) ++f.rounds;
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
      case bench::Workload::kPageFault1: return std::make_unique<PageFault1Client>(cfg_.chunk_bytes);
      case bench::Workload::kMmap1: return std::make_unique<MmapMunmapClient>(kPageFaultBytes, kRw);
      case bench::Workload::kMixed:
        if (client + 1 < clients) return std::make_unique<FaulterClient>(cfg_.chunk_bytes);
        return std::make_unique<MmapMunmapClient>(kChurnBytes, PROT_READ);
    }
    return nullptr;
  }
  uint64_t FrameBytes(int clients) const override {
    uint64_t n = static_cast<uint64_t>(clients);
    switch (cfg_.workload) {
      case bench::Workload::kPageFault1: return kPageFaultBytes * n;
      case bench::Workload::kMixed: return kMixedRegionBytes * (n - 1);
      case bench::Workload::kMmap1: break;
    }
    return 0;
  }
  void Summarize(const std::vector<ClientFigures>& clients, harness::RunResult& r) const override {
    switch (cfg_.workload) {
      case bench::Workload::kPageFault1: r.ops = r.bytes_touched; break;  // pages written
      case bench::Workload::kMmap1: r.ops = r.rounds; break;
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

}  // namespace

BenchResult RunBench(const BenchConfig& cfg, Backend& backend) {
  BenchResult res;
  res.profile = cfg.profile.empty() ? "linux-6.15" : cfg.profile;
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
  harness::RunSpec spec;
  spec.clients = cfg.clients;
  spec.shared_space = cfg.mode == Mode::kThreads;
  spec.profile = res.profile;
  spec.duration_s = cfg.duration_s;
  spec.pin = cfg.pin;
  return harness::Run(spec, WillItScale(cfg), backend);
}

}  // namespace vmspace::bench
