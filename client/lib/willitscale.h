// SPDX-License-Identifier: Apache-2.0
// Timed scalability workloads after will-it-scale (antonblanchard/will-it-scale), run on
// vmspace address spaces for a fixed duration under one engine locking profile:
//
//   page_fault1  per client, forever: mmap 128 MiB rw private anon; write one byte per
//                4 KiB page; munmap. One op = one page written (one write fault).
//   page_fault2  each client has its own sparse 128 MiB file (set-up: mkstemp,
//                ftruncate, unlink); forever: mmap it rw MAP_PRIVATE; write one byte
//                per page (copy-on-write of the page-cache page); munmap.
//   page_fault3  the same with MAP_SHARED (writes go to the page cache: dirty pages).
//   page_fault4  the same as page_fault2 but reading one byte per page (MAP_PRIVATE
//                read faults: fault-around maps the neighbours already cached). These
//                are will-it-scale's tests/page_fault{2,3,4}.c; one op = one page.
//   mmap2        the file of page_fault2: mmap it rw MAP_PRIVATE; munmap (tests/mmap2.c).
//   mmap1        per client, forever: mmap 128 MiB rw private anon; munmap.
//                One op = one mmap+munmap pair.
//   mixed        in ONE space: C-1 faulters, each with its own 32 MiB rw region mapped
//                once, loop {write every page; madvise(MADV_DONTNEED) the region} (one
//                op = one page written), while one churner loops {mmap 16 KiB PROT_READ
//                private anon; munmap} (counted separately). PROT_READ keeps the
//                churner's VMAs from merging with the faulters'. This is the case per-VMA
//                locks exist for: faults no longer wait for the churner's mmap_lock.
//
// Mode threads: all clients in one space (the contended case, will-it-scale's *_threads);
// mode processes: one space per client (*_processes). Clients are threads of this process
// either way; a "process" is its own address space.
//
// The workloads are harness::Workloads run by the one runner (harness.h), in-process
// or on the daemon backends (harness_grpc.h: unary RPCs, Batch streams).
// No gRPC in this file: it builds into vmspace_workload.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lib/harness.h"

namespace vmspace::bench {

/// The workloads.
enum class Workload { kPageFault1, kMmap1, kMixed, kPageFault2, kPageFault3, kPageFault4, kMmap2 };
/// "page_fault1", "mmap1", "mixed", "page_fault2", ...
const char* WorkloadName(Workload w);
/// Parses a workload name; nullopt if unknown.
std::optional<Workload> ParseWorkload(std::string_view name);
/// True for the workloads on files (page_fault2/3/4, mmap2): each client opens its own file.
bool UsesFiles(Workload w);

/// threads: all clients share one space; processes: one space per client.
enum class Mode { kThreads, kProcesses };
const char* ModeName(Mode m);

/// Sizes of the workloads (will-it-scale's MEMSIZE for page_fault1/mmap1).
inline constexpr uint64_t kPageFaultBytes = 128ull << 20;
inline constexpr uint64_t kMixedRegionBytes = 32ull << 20;
inline constexpr uint64_t kChurnBytes = 16ull << 10;
inline constexpr uint64_t kPageBytes = 4096;

/// What to run for one profile.
struct BenchConfig {
  Workload workload = Workload::kPageFault1;
  Mode mode = Mode::kThreads;
  int clients = 1;            // mixed: clients-1 faulters + 1 churner (needs >= 2)
  double duration_s = 5;      // timed phase
  /// Locking profile spec as LockingProfile::Parse takes it ("linux-6.0",
  /// "linux-6.6,vma_lock=off"); "" = linux-6.15.
  std::string profile;
  /// Page writes are issued as one Access op per chunk of this many bytes; the stop flag
  /// is checked between chunks. (A Batch stream sends a whole pass's chunks in one
  /// message, so there the stop flag takes effect between passes.)
  uint64_t chunk_bytes = 2ull << 20;
  /// Pin client c to the c-th CPU this process may run on (modulo their number), as
  /// will-it-scale pins each task to a core.
  bool pin = false;
};

/// The harness's lock figures and result type; BenchResult::rounds counts whole loop
/// iterations (page_fault1: 128 MiB mappings; mixed: faulter passes; mmap1: pairs).
using harness::LockFigures;
using BenchResult = harness::RunResult;
using harness::Backend;
using harness::CheckProfile;
using harness::ExpandCompare;
using harness::MakeInprocessBackend;

/// Runs `cfg` once on fresh spaces of `backend`: set-up (untimed), lock figures before,
/// the timed phase, lock figures after, tear-down. Never throws; failures are in
/// BenchResult::error.
BenchResult RunBench(const BenchConfig& cfg, Backend& backend);

/// Runs the same loops on this machine's kernel (harness::RunNative; files under
/// /var/tmp). No lock figures; profile "native".
BenchResult RunBenchNative(const BenchConfig& cfg);

}  // namespace vmspace::bench
