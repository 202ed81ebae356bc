// SPDX-License-Identifier: Apache-2.0
// The cost of the instrumented fault path: anonymous write faults with lock statistics
// timing on vs off (--lock-stats), and under each locking profile. Budget:
// instrumentation on costs <= 5% more than compiled in but switched off. Read the
// ratio off one run: BM_FaultPath/stats:1 vs /stats:0 for the same profile.
//
// One iteration = one page written (a fault: zero-filled frame allocated and mapped);
// every 4096 pages the region is zapped with MADV_DONTNEED so faults continue.
// BM_FaultPathBudget: the same fault with the memory budget limited (charges reserve
// from the shared limit through the per-thread stock) vs unlimited (only counted).
// BM_FaultPathTrace: the same fault with the lock timeline (engine/lock_trace.h) off vs
// on, lock statistics on in both: the timeline's sampling keeps to the same budget.
#include <benchmark/benchmark.h>

#include "engine/address_space.h"
#include "engine/lock_trace.h"
#include "engine/stats.h"

namespace vmspace {
namespace {

constexpr uint64_t kRegion = 16ull << 20;

// One write fault per iteration on the next page of [base, base + kRegion), the region
// zapped (untimed) when it is used up; returns the faults counted.
uint64_t WriteFaultLoop(benchmark::State& state, AddressSpace& as, uint64_t base) {
  uint64_t off = 0;
  uint64_t faults = 0;
  for (auto _ : state) {
    faults += as.Fault(base + off, AccessType::kWrite).faults;
    off += 4096;
    if (off == kRegion) {
      state.PauseTiming();
      as.Madvise(base, kRegion, MADV_DONTNEED);
      off = 0;
      state.ResumeTiming();
    }
  }
  return faults;
}

void BM_FaultPath(benchmark::State& state) {
  const bool stats = state.range(0) != 0;
  const int profile = static_cast<int>(state.range(1));
  SetLockStatsEnabled(stats);
  FrameAllocator frames(1ull << 30);
  SpaceOptions opts;
  std::string err;
  LockingProfile::Parse(LockingProfile::kNames[profile], &opts.profile, &err);
  AddressSpace as(frames, opts);
  const uint64_t base = as.Mmap(0, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
  const uint64_t faults = WriteFaultLoop(state, as, base);
  state.counters["faults_per_iter"] =
      benchmark::Counter(static_cast<double>(faults) / static_cast<double>(state.iterations()));
  state.SetLabel(LockingProfile::kNames[profile]);
  SetLockStatsEnabled(true);
}
BENCHMARK(BM_FaultPath)
    ->ArgNames({"stats", "profile"})
    ->ArgsProduct({{0, 1}, {0, 3}})
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

void BM_FaultPathBudget(benchmark::State& state) {
  FrameAllocator frames(0, state.range(0) ? (1ull << 30) : 0);
  AddressSpace as(frames, SpaceOptions{});
  const uint64_t base = as.Mmap(0, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
  WriteFaultLoop(state, as, base);
}
BENCHMARK(BM_FaultPathBudget)->ArgName("limited")->Arg(0)->Arg(1)->Repetitions(3)->ReportAggregatesOnly(true);

void BM_FaultPathTrace(benchmark::State& state) {
  const bool trace = state.range(0) != 0;
  FrameAllocator frames(1ull << 30);
  AddressSpace as(frames, SpaceOptions{});
  const uint64_t base = as.Mmap(0, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
  if (trace) LockTraceStart();
  {
    OpTrace op(1, "fault_loop");
    WriteFaultLoop(state, as, base);
  }
  if (trace) state.counters["events"] = benchmark::Counter(static_cast<double>(LockTraceStop(SIZE_MAX).size()));
}
BENCHMARK(BM_FaultPathTrace)->ArgName("trace")->Arg(0)->Arg(1)->Repetitions(3)->ReportAggregatesOnly(true);

}  // namespace
}  // namespace vmspace

BENCHMARK_MAIN();
