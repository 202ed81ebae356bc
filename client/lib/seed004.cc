// SPDX-License-Identifier: Apache-2.0
#include "lib/seed004.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

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

namespace {

constexpr int kProt = PROT_READ | PROT_WRITE;

/// One client: its sequence and its 1024 slots.
class Seed004Client : public harness::ClientLoop {
 public:
  Seed004Client(const StressConfig& cfg, uint32_t seed) : cfg_(cfg), seq_(seed), slots_(Seed004Sequence::kSlots) {}

  void Setup(harness::Session& s, harness::ClientFigures& f) override {
    for (Slot& sl : slots_) {
      sl.len = seq_.NextSize();
      sl.mmap = s.Mmap(sl.len, kProt, &sl.addr);
      ++f.setup_mmaps;
    }
  }

  bool Step(harness::Session& s, const std::atomic<bool>&, harness::ClientFigures& f) override {
    if (f.rounds >= cfg_.rounds) return false;
    Slot& sl = slots_[static_cast<size_t>(seq_.NextSlot())];
    // The slot's address: known once its mmap is answered; before, a pipelined session
    // names that mmap's result (the daemon fills it in), or the round waits for it.
    harness::Addr addr = harness::Addr::Of(sl.mmap);
    if (s.Done(sl.mmap)) {
      addr = sl.addr;
    } else if (!s.CanRefer(sl.mmap)) {
      ++f.waits;
      if (!s.Wait(sl.mmap)) return false;
      addr = sl.addr;
    }
    if (cfg_.page_fault) {
      s.Access(addr, sl.len, cfg_.stride);
      ++f.accesses;
    }
    s.Munmap(addr, sl.len);
    ++f.munmaps;
    sl.len = seq_.NextSize();
    sl.mmap = s.Mmap(sl.len, kProt, &sl.addr);
    ++f.mmaps;
    ++f.rounds;
    return true;
  }

  void Teardown(harness::Session& s, harness::ClientFigures& f) override {
    for (const Slot& sl : slots_) {
      s.Munmap(sl.addr, sl.len);
      ++f.teardown_munmaps;
    }
  }

 private:
  struct Slot {
    uint64_t addr = 0;
    uint64_t len = 0;
    uint64_t mmap = 0;  // the session's op number of the mmap that fills this slot
  };
  const StressConfig& cfg_;
  Seed004Sequence seq_;
  std::vector<Slot> slots_;
};

harness::RunSpec Spec(const StressConfig& cfg, Progress* progress) {
  harness::RunSpec spec;
  spec.clients = cfg.clients;
  spec.shared_space = cfg.shared_space;
  spec.profile = cfg.locking_profile;
  spec.label = "bench-stress";
  spec.progress = progress;
  spec.pin = cfg.pin_first_cpu >= 0;
  spec.first_cpu = spec.pin ? cfg.pin_first_cpu : 0;
  return spec;
}

}  // namespace

std::unique_ptr<harness::ClientLoop> Seed004Workload::NewClient(int client, int) const {
  return std::make_unique<Seed004Client>(cfg_, cfg_.seed + static_cast<uint32_t>(client));
}

void Seed004Workload::Summarize(const std::vector<harness::ClientFigures>&, harness::RunResult& r) const {
  r.ops = r.mmaps + r.munmaps + r.accesses;
}

bool InSeedTable(const std::string& profile) {
  for (const SeedFigure& f : kSeedTable)
    if (profile == f.profile) return true;
  return false;
}

SeedComparisonTable CompareWithSeed(const std::map<std::string, double>& ours, bool page_fault) {
  auto rate = [&](const char* profile) -> double {
    auto it = ours.find(profile);
    return it == ours.end() ? 0 : it->second;
  };
  const SeedFigure* base = &kSeedTable[0];
  if (rate(base->profile) <= 0) {
    for (const SeedFigure& f : kSeedTable) {
      if (rate(f.profile) > 0) {
        base = &f;
        break;
      }
    }
  }
  auto seed_s = [&](const SeedFigure& f) { return page_fault ? f.fault_s : f.no_fault_s; };
  SeedComparisonTable t;
  t.base = base->profile;
  t.page_fault = page_fault;
  const double base_rps = rate(base->profile);
  for (const SeedFigure& f : kSeedTable) {
    SeedComparison c;
    c.seed = &f;
    c.seed_s = seed_s(f);
    c.seed_slowdown = c.seed_s / seed_s(*base);
    if (const double r = rate(f.profile); r > 0) {
      c.our_s = static_cast<double>(kSeedRounds) / r;
      if (base_rps > 0) c.our_slowdown = base_rps / r;
    }
    t.rows.push_back(c);
  }
  return t;
}

StressStats RunStress(const StressConfig& cfg, harness::Backend& backend, Progress* progress) {
  return harness::Run(Spec(cfg, progress), Seed004Workload(cfg), backend);
}

StressStats RunEngineStress(const StressConfig& cfg, Progress* progress) {
  std::unique_ptr<harness::Backend> backend = harness::MakeInprocessBackend();
  return RunStress(cfg, *backend, progress);
}

StressStats RunNativeStress(const StressConfig& cfg, Progress* progress) {
  return harness::RunNative(Spec(cfg, progress), Seed004Workload(cfg));
}

double ControlSeconds(Control control, int threads, uint64_t iters) {
  const std::vector<int> cpus = harness::AllowedCpus();
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<uint64_t> sink{0};
  auto alu = [&] {
    uint64_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (uint64_t i = 0; i < iters; i++)
      for (uint64_t& v : x) {  // unrolled: eight independent chains
        v ^= v << 13;
        v ^= v >> 7;
        v ^= v << 17;
        asm volatile("" : "+r"(v));  // in a general register: no vectorizing
      }
    uint64_t h = 0;
    for (uint64_t v : x) h ^= v;
    return h;
  };
  auto map = [&](uint64_t seed) {
    constexpr size_t kKeys = 1024;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    auto next = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    std::map<uint64_t, uint64_t> m;
    std::vector<uint64_t> keys(kKeys);
    for (uint64_t& k : keys) {
      k = next();
      m[k] = k;
    }
    for (uint64_t i = 0; i < iters; i++) {
      uint64_t& k = keys[next() % kKeys];
      m.erase(k);
      k = next();
      m[k] = i;
    }
    return static_cast<uint64_t>(m.size());
  };
  auto run = [&](int t) {
    if (!cpus.empty()) harness::PinTo(cpus[static_cast<size_t>(t) % cpus.size()]);
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    const uint64_t h = control == Control::kAlu ? alu() : map(static_cast<uint64_t>(t) + 1);
    sink.fetch_xor(h, std::memory_order_relaxed);  // keeps the work
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) ts.emplace_back(run, t);
  while (ready.load() < threads) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace vmspace::stress
