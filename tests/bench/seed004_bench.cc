// SPDX-License-Identifier: Apache-2.0
// seed-004 replay (the stress program of "[REGRESSION]: mmap performance regression
// starting with k-6.1", linux-mm, November 2023): the engine against the real kernel, same binary,
// same deterministic sequence (client/lib/seed004.h), plus engine memory costs.
//
//   BM_Seed004_Engine/page_fault:{0,1}/profile:{0..5}
//                                        rounds on one vmspace::AddressSpace with the
//                                        locking profile linux-6.0/6.1/6.4/6.6/6.7/6.15
//   BM_Seed004_Native/page_fault:{0,1}   the same rounds with this process's own
//                                        mmap/munmap (and real writes)
//   BM_Seed004_Ratio/...                 one run of each (the kernel in a forked
//                                        child), counters engine/native rounds/s and
//                                        their ratio
//   BM_EngineMemoryPerVma/vmas:N/profile:P  bytes per VMA, every profile: the VMA and
//                                        other heap (mallinfo2 delta without the node
//                                        slabs) plus the index nodes in the tree
//                                        (deferred_bytes: what the space's deferred-free
//                                        batches held, per space)
//   BM_EngineMemorySeed004/profile:P     index bytes per VMA in seed 004's steady state
//                                        (1024 slots of 1-32 KiB, neighbours merged, gaps
//                                        between); the space's other heap (live VMAs,
//                                        vma_bytes, plus its VMA cache) and deferred batches
//   BM_EngineMemoryPerPage/pages:N       bytes per resident page: frames, host chunks,
//                                        heap (page tables), pgtable_bytes
//
// Each round: pick slot k = rand() % 1024; with page_fault write every 128th byte of
// it; munmap it; mmap 1024 * (rand() % 32 + 1) bytes into it. Rates are per second of
// wall time; "rounds_per_s" is the figure to compare with `vmspace bench stress`. The
// engine runs also count, per round, the maple stores of each type (maple profiles)
// and the index nodes preallocated and used.
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
#include "lib/seed004.h"
#include "vma_index.h"

namespace {

using vmspace::stress::Seed004Sequence;

constexpr int kProt = PROT_READ | PROT_WRITE;
constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
constexpr uint64_t kStride = 128;

struct Slot {
  uint64_t addr = 0;
  uint64_t len = 0;
};

// range(1): index into LockingProfile::kNames (linux-6.0, 6.1, 6.4, 6.6, 6.7, 6.15).
vmspace::SpaceOptions ProfileOptions(benchmark::State& state, int64_t index) {
  vmspace::SpaceOptions opts;
  std::string err;
  const char* name = vmspace::LockingProfile::kNames[index];
  if (!vmspace::LockingProfile::Parse(name, &opts.profile, &err)) state.SkipWithError(err.c_str());
  state.SetLabel(name);
  return opts;
}

/// Fills the seed's 1024 slots.
void Seed004Setup(vmspace::AddressSpace& as, Seed004Sequence& seq, std::vector<Slot>& slots) {
  for (Slot& s : slots) {
    s.len = seq.NextSize();
    s.addr = as.Mmap(0, s.len, kProt, kFlags).value;
  }
}

/// One seed round without faults: munmap a slot, mmap a new size. False on error.
bool Seed004Round(vmspace::AddressSpace& as, Seed004Sequence& seq, std::vector<Slot>& slots) {
  Slot& s = slots[static_cast<size_t>(seq.NextSlot())];
  if (!as.Munmap(s.addr, s.len).ok()) return false;
  s.len = seq.NextSize();
  vmspace::SysResult r = as.Mmap(0, s.len, kProt, kFlags);
  s.addr = r.value;
  return r.ok();
}

/// Per-round maple counters from the trees destroyed since `before`.
void MapleCounters(benchmark::State& state, const vmspace::MapleStats& before, double rounds) {
  vmspace::MapleStats after = vmspace::MapleTree::DestroyedTotals();
  if (after.stores_total() == before.stores_total()) return;  // rbtree
  for (int i = 0; i < static_cast<int>(vmspace::MapleStoreType::kCount); i++) {
    double n = static_cast<double>(after.stores[i] - before.stores[i]);
    if (n > 0) state.counters[vmspace::MapleStoreTypeName(static_cast<vmspace::MapleStoreType>(i))] = n / rounds;
  }
  state.counters["nodes_prealloc"] = static_cast<double>(after.prealloc_nodes - before.prealloc_nodes) / rounds;
  state.counters["nodes_used"] = static_cast<double>(after.used_nodes - before.used_nodes) / rounds;
}

void BM_Seed004_Engine(benchmark::State& state) {
  const bool page_fault = state.range(0) != 0;
  vmspace::FrameAllocator frames;
  const vmspace::MapleStats maple_before = vmspace::MapleTree::DestroyedTotals();
  auto space = std::make_unique<vmspace::AddressSpace>(frames, ProfileOptions(state, state.range(1)));
  vmspace::AddressSpace& as = *space;
  Seed004Sequence seq(1);
  std::vector<Slot> slots(Seed004Sequence::kSlots);
  Seed004Setup(as, seq, slots);
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
  space.reset();
  MapleCounters(state, maple_before, static_cast<double>(std::max<int64_t>(1, state.iterations())));
}
BENCHMARK(BM_Seed004_Engine)->ArgNames({"page_fault", "profile"})->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5}});

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
    ->Args({0, 2000, 5})
    ->Args({0, 200000, 0})
    ->Args({0, 200000, 5})
    ->Args({1, 20000, 0})
    ->Args({1, 20000, 5})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

uint64_t HeapBytes() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

/// Memory per VMA of a space between two points: the heap the space allocated apart
/// from the index node slabs (VMAs, anon_vmas, vectors), plus the index nodes in its
/// tree (nodes x node size; slabs are shared by all spaces and never shrink, so the
/// heap delta alone would count free nodes left by earlier spaces, or miss them).
/// Each point first queues the deferred frees every space holds (FrameAllocator::
/// Reclaim: the gather of retired index nodes, page tables and frames, and the batch of
/// freed VMAs) and waits for their grace period: what those batches held (the gather's
/// node vector reserves MmStruct::kDeferBatch pointers, 2 KiB) is a per-space cost of
/// the deferred frees, reported as `deferred`, not a cost per VMA.
struct MemoryProbe {
  uint64_t heap = 0, slabs = 0;
  int64_t nodes = 0;
  double deferred = 0;  // heap the deferred-free batches held before the flush
  static MemoryProbe Now(vmspace::FrameAllocator& frames) {
    vmspace::RcuBarrier();
    const uint64_t heap0 = HeapBytes(), slabs0 = vmspace::VmaIndex::PoolSlabBytes();
    frames.Reclaim();  // deferred batches queued, their grace period over
    MemoryProbe p{HeapBytes(), vmspace::VmaIndex::PoolSlabBytes(), vmspace::VmaIndex::ThreadNodeBytes()};
    p.deferred = (static_cast<double>(heap0) - static_cast<double>(p.heap)) -
                 (static_cast<double>(slabs0) - static_cast<double>(p.slabs));
    return p;
  }
  static void Report(benchmark::State& state, const MemoryProbe& a, const MemoryProbe& b, double vmas) {
    const double other = (static_cast<double>(b.heap) - static_cast<double>(a.heap)) -
                         (static_cast<double>(b.slabs) - static_cast<double>(a.slabs));
    const double nodes = static_cast<double>(b.nodes - a.nodes);
    state.counters["index_bytes_per_vma"] = nodes / vmas;
    state.counters["other_heap_bytes_per_vma"] = other / vmas;
    state.counters["bytes_per_vma"] = (nodes + other) / vmas;
    state.counters["deferred_bytes"] = b.deferred;
  }
};

// N single-page VMAs that cannot merge (protections alternate), placed top-down next
// to each other (no gaps between them).
void BM_EngineMemoryPerVma(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    vmspace::FrameAllocator frames;
    vmspace::SpaceOptions opts = ProfileOptions(state, state.range(1));
    opts.max_map_count = n + 16;
    {
      // Warm-up: what the first mmap of a process and thread allocates once (about 29 KiB,
      // 29 B per VMA of 1000 when the first benchmark paid it) belongs to no VMA.
      vmspace::AddressSpace warm(frames, opts);
      if (!warm.Mmap(0, 4096, kProt, kFlags).ok()) state.SkipWithError("mmap failed");
    }
    auto as = std::make_unique<vmspace::AddressSpace>(frames, opts);
    const uint64_t before_vmas = as->Counters().map_count;
    const MemoryProbe before = MemoryProbe::Now(frames);
    for (uint64_t i = 0; i < n; ++i) {
      if (!as->Mmap(0, 4096, (i & 1) ? PROT_READ : kProt, kFlags).ok()) {
        state.SkipWithError("mmap failed");
        return;
      }
    }
    const MemoryProbe after = MemoryProbe::Now(frames);
    const uint64_t vmas = as->Counters().map_count - before_vmas;
    if (vmas != n) state.SkipWithError("VMAs merged unexpectedly");
    MemoryProbe::Report(state, before, after, static_cast<double>(vmas));
    state.PauseTiming();
    as.reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_EngineMemoryPerVma)
    ->ArgNames({"vmas", "profile"})
    ->ArgsProduct({{1000, 60000}, {0, 1, 2, 3, 4, 5}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// Seed 004's steady state: 1024 slots after 100000 rounds (neighbours merge, munmaps
// leave gaps), memory per VMA of the whole space.
void BM_EngineMemorySeed004(benchmark::State& state) {
  for (auto _ : state) {
    vmspace::FrameAllocator frames;
    const MemoryProbe before = MemoryProbe::Now(frames);
    auto as = std::make_unique<vmspace::AddressSpace>(frames, ProfileOptions(state, state.range(0)));
    const MemoryProbe empty = MemoryProbe::Now(frames);
    Seed004Sequence seq(1);
    std::vector<Slot> slots(Seed004Sequence::kSlots);
    Seed004Setup(*as, seq, slots);
    for (int i = 0; i < 100000; i++)
      if (!Seed004Round(*as, seq, slots)) {
        state.SkipWithError("seed round failed");
        return;
      }
    const MemoryProbe after = MemoryProbe::Now(frames);
    const double vmas = static_cast<double>(as->Counters().map_count);
    state.counters["index_bytes_per_vma"] = static_cast<double>(after.nodes - empty.nodes) / vmas;
    state.counters["map_count"] = vmas;
    state.counters["empty_space_bytes"] = static_cast<double>(empty.heap - before.heap);
    // The live VMAs (charged to the budget as kVmas, with their vma_locks) and the VMAs
    // the space's VmaCache keeps for reuse (the rwsem form: up to kMaxInFlight VMAs that
    // waited for a grace period, as the kernel's RCU-freed VMAs wait in their slab).
    state.counters["other_heap_bytes"] = (static_cast<double>(after.heap) - static_cast<double>(empty.heap)) -
                                         (static_cast<double>(after.slabs) - static_cast<double>(empty.slabs));
    state.counters["vma_bytes"] = static_cast<double>(frames.budget().usage(vmspace::MemKind::kVmas));
    state.counters["deferred_bytes"] = after.deferred;
    state.PauseTiming();
    as.reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_EngineMemorySeed004)->ArgName("profile")->DenseRange(0, 5)->Iterations(1)->Unit(benchmark::kMillisecond);

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
