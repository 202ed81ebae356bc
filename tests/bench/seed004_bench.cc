// seed-004 replay (shared/seeds/004): the engine against the real kernel, same binary,
// same deterministic sequence (client/lib/seed004.h), plus engine memory costs.
//
//   BM_Seed004_Engine/page_fault:{0,1}/profile:{0..3}
//                                        rounds on one vmspace::AddressSpace with the
//                                        locking profile linux-6.0/6.1/6.4/6.6
//   BM_Seed004_Native/page_fault:{0,1}   the same rounds with this process's own
//                                        mmap/munmap (and real writes)
//   BM_Seed004_Ratio/...                 one run of each (the kernel in a forked
//                                        child), counters engine/native rounds/s and
//                                        their ratio
//   BM_EngineMemoryPerVma/vmas:N/profile:P  heap bytes per VMA (mallinfo2 delta), rbtree
//                                        (linux-6.0) and maple (linux-6.6) VMA index
//   BM_EngineMemoryPerPage/pages:N       bytes per resident page: frames, host chunks,
//                                        heap (page tables), pgtable_bytes
//
// Each round: pick slot k = rand() % 1024; with page_fault write every 128th byte of
// it; munmap it; mmap 1024 * (rand() % 32 + 1) bytes into it. Rates are per second of
// wall time; "rounds_per_s" is the figure to compare with `vmspace bench stress`.
// The engine's first rounds with page faults are slower: a fresh FrameAllocator carves
// frames from new host chunks, so every first use of a frame is also a host page fault
// (run long enough, e.g. --benchmark_min_time=2, to reach the recycled steady state).
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/address_space.h"
#include "engine/frame_allocator.h"
#include "engine/address_space.h"
#include "lib/seed004.h"

namespace {

using vmspace::stress::Seed004Sequence;

constexpr int kProt = PROT_READ | PROT_WRITE;
constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kStride = 128;

struct Slot {
  uint64_t addr = 0;
  uint64_t len = 0;
};

// range(1): index into LockingProfile::kNames (linux-6.0, 6.1, 6.4, 6.6).
vmspace::SpaceOptions ProfileOptions(benchmark::State& state, int64_t index) {
  vmspace::SpaceOptions opts;
  std::string err;
  const char* name = vmspace::LockingProfile::kNames[index];
  if (!vmspace::LockingProfile::Parse(name, &opts.profile, &err)) state.SkipWithError(err.c_str());
  state.SetLabel(name);
  return opts;
}

void BM_Seed004_Engine(benchmark::State& state) {
  const bool page_fault = state.range(0) != 0;
  vmspace::FrameAllocator frames;
  vmspace::AddressSpace as(frames, ProfileOptions(state, state.range(1)));
  Seed004Sequence seq(1);
  std::vector<Slot> slots(Seed004Sequence::kSlots);
  for (Slot& s : slots) {
    s.len = seq.NextSize();
    s.addr = as.Mmap(0, s.len, kProt, kFlags).value;
  }
  uint64_t faults = 0;
  for (auto _ : state) {
    Slot& s = slots[static_cast<size_t>(seq.NextSlot())];
    if (page_fault) faults += as.Access(s.addr, s.len, kStride, vmspace::AccessType::kWrite).faults;
    if (!as.Munmap(s.addr, s.len).ok()) state.SkipWithError("munmap failed");
    s.len = seq.NextSize();
    vmspace::SysResult r = as.Mmap(0, s.len, kProt, kFlags);
    if (!r.ok()) {
      state.SkipWithError("mmap failed");
      break;
    }
    s.addr = r.value;
  }
  state.counters["rounds_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["faults_per_round"] =
      benchmark::Counter(static_cast<double>(faults) / static_cast<double>(std::max<int64_t>(1, state.iterations())));
  state.counters["map_count"] = static_cast<double>(as.Counters().map_count);
}
BENCHMARK(BM_Seed004_Engine)->ArgNames({"page_fault", "profile"})->ArgsProduct({{0, 1}, {0, 1, 2, 3}});

void BM_Seed004_Native(benchmark::State& state) {
  const bool page_fault = state.range(0) != 0;
  Seed004Sequence seq(1);
  std::vector<Slot> slots(Seed004Sequence::kSlots);
  for (Slot& s : slots) {
    s.len = seq.NextSize();
    s.addr = reinterpret_cast<uint64_t>(mmap(nullptr, s.len, kProt, kFlags, -1, 0));
  }
  for (auto _ : state) {
    Slot& s = slots[static_cast<size_t>(seq.NextSlot())];
    if (page_fault) {
      volatile char* p = reinterpret_cast<volatile char*>(s.addr);
      for (uint64_t j = 0; j < s.len; j += kStride) p[j] = static_cast<char>(j);
    }
    munmap(reinterpret_cast<void*>(s.addr), s.len);
    s.len = seq.NextSize();
    void* p = mmap(nullptr, s.len, kProt, kFlags, -1, 0);
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      break;
    }
    s.addr = reinterpret_cast<uint64_t>(p);
  }
  for (Slot& s : slots) munmap(reinterpret_cast<void*>(s.addr), s.len);
  state.counters["rounds_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Seed004_Native)->ArgName("page_fault")->Arg(0)->Arg(1);

// One engine run and one kernel run (forked child) of the same `rounds` per iteration;
// the manual time is the engine's.
void BM_Seed004_Ratio(benchmark::State& state) {
  vmspace::stress::StressConfig cfg;
  cfg.page_fault = state.range(0) != 0;
  cfg.rounds = static_cast<uint64_t>(state.range(1));
  cfg.locking_profile = vmspace::LockingProfile::kNames[state.range(2)];
  state.SetLabel(cfg.locking_profile);
  double engine_rps = 0, native_rps = 0;
  for (auto _ : state) {
    vmspace::stress::StressStats e = vmspace::stress::RunEngineStress(cfg);
    vmspace::stress::StressStats n = vmspace::stress::RunNativeStress(cfg);
    if (!e.ok() || !n.ok()) {
      state.SkipWithError((e.ok() ? n.error : e.error).c_str());
      break;
    }
    state.SetIterationTime(e.seconds);
    engine_rps += e.rounds_per_sec();
    native_rps += n.rounds_per_sec();
  }
  double it = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["engine_rounds_per_s"] = engine_rps / it;
  state.counters["native_rounds_per_s"] = native_rps / it;
  state.counters["ratio_engine_vs_native"] = native_rps > 0 ? engine_rps / native_rps : 0;
}
BENCHMARK(BM_Seed004_Ratio)
    ->ArgNames({"page_fault", "rounds", "profile"})
    ->Args({0, 2000, 3})
    ->Args({0, 200000, 0})
    ->Args({0, 200000, 3})
    ->Args({1, 20000, 0})
    ->Args({1, 20000, 3})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

uint64_t HeapBytes() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Heap bytes per VMA: N single-page VMAs that cannot merge (protections alternate),
// measured after an RCU barrier so index nodes retired by copy-on-write updates are
// freed (heap_bytes_per_vma_raw: before the barrier).
void BM_EngineMemoryPerVma(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  double per_vma = 0, per_vma_raw = 0;
  for (auto _ : state) {
    vmspace::FrameAllocator frames;
    vmspace::SpaceOptions opts = ProfileOptions(state, state.range(1));
    opts.max_map_count = n + 16;
    auto as = std::make_unique<vmspace::AddressSpace>(frames, opts);
    uint64_t before_vmas = as->Counters().map_count;
    vmspace::RcuBarrier();
    uint64_t before = HeapBytes();
    for (uint64_t i = 0; i < n; ++i) {
      if (!as->Mmap(0, 4096, (i & 1) ? PROT_READ : kProt, kFlags).ok()) {
        state.SkipWithError("mmap failed");
        return;
      }
    }
    uint64_t raw = HeapBytes();
    vmspace::RcuBarrier();
    uint64_t after = HeapBytes();
    uint64_t vmas = as->Counters().map_count - before_vmas;
    if (vmas != n) state.SkipWithError("VMAs merged unexpectedly");
    per_vma = (static_cast<double>(after) - static_cast<double>(before)) / static_cast<double>(vmas);
    per_vma_raw = (static_cast<double>(raw) - static_cast<double>(before)) / static_cast<double>(vmas);
    state.PauseTiming();
    as.reset();
    state.ResumeTiming();
  }
  state.counters["heap_bytes_per_vma"] = per_vma;
  state.counters["heap_bytes_per_vma_raw"] = per_vma_raw;
}
BENCHMARK(BM_EngineMemoryPerVma)
    ->ArgNames({"vmas", "profile"})
    ->ArgsProduct({{1000, 60000}, {0, 3}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// Bytes per resident page: one large rw mapping written every 4 KiB.
void BM_EngineMemoryPerPage(benchmark::State& state) {
  const uint64_t pages = static_cast<uint64_t>(state.range(0));
  double frames_pp = 0, host_pp = 0, heap_pp = 0, pgtable_pp = 0;
  for (auto _ : state) {
    vmspace::FrameAllocator frames;
    auto as = std::make_unique<vmspace::AddressSpace>(frames);
    uint64_t addr = as->Mmap(0, pages * 4096, kProt, kFlags).value;
    uint64_t heap0 = HeapBytes(), in_use0 = frames.in_use_bytes(), host0 = frames.host_bytes();
    uint64_t pgt0 = as->Counters().pgtable_bytes;
    vmspace::AccessResult r = as->Access(addr, pages * 4096, 4096, vmspace::AccessType::kWrite);
    if (r.faults != pages) state.SkipWithError("unexpected fault count");
    vmspace::SpaceCounters c = as->Counters();
    double p = static_cast<double>(pages);
    frames_pp = static_cast<double>(frames.in_use_bytes() - in_use0) / p;
    host_pp = static_cast<double>(frames.host_bytes() - host0) / p;
    heap_pp = static_cast<double>(HeapBytes() - heap0) / p;
    pgtable_pp = static_cast<double>(c.pgtable_bytes - pgt0) / p;
    state.PauseTiming();
    as.reset();
    state.ResumeTiming();
  }
  state.counters["frame_bytes_per_page"] = frames_pp;
  state.counters["host_bytes_per_page"] = host_pp;
  state.counters["heap_bytes_per_page"] = heap_pp;
  state.counters["pgtable_bytes_per_page"] = pgtable_pp;
}
BENCHMARK(BM_EngineMemoryPerPage)->ArgName("pages")->Arg(1024)->Arg(65536)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
