// SPDX-License-Identifier: Apache-2.0
// The seed-002 workload (`vmspace bench shmem-dirty`): sequentially write one byte of
// every page of a MAP_SHARED shmem mapping (MAP_SHARED|MAP_ANONYMOUS in the engine, a
// memfd on the kernel), as the "simple program sequentially dirtying 400MB shmem file
// being mmap()ed" of Peter Xu's "mm: avoid unnecessary page fault retires on shared
// memory types" (v5, 2022-05-30): 650.980 ms before (VM_FAULT_RETRY), 569.396 ms after
// (VM_FAULT_COMPLETED) on an aarch64 VM.
//
// Depends on the engine and libc only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/address_space.h"

namespace vmspace::bench {

/// One configuration's figures over `runs` timed runs after one untimed warm-up run
/// (each a fresh mapping; the engine: a fresh space on one warm frame allocator, the
/// modes taking turns run by run).
struct ShmemDirtyResult {
  std::string setting;   // "retry" / "completed" (the engine), "native"
  std::string profile;   // engine locking profile name ("" for native)
  uint64_t pages = 0;    // pages written per run
  int runs = 0;
  double seconds_mean = 0, seconds_min = 0, seconds_stddev = 0;  // one run's write loop
  uint64_t pgfault = 0;  // vmstat pgfault of one run (engine: Event::kPgfault; native: 0, see min_flt)
  uint64_t min_flt = 0;  // faults as getrusage ru_minflt counts them, one run
  uint64_t retries = 0;  // VM_FAULT_RETRY after dirtying (Event::kFaultRetryDirty), one run
  uint64_t completed = 0;  // VM_FAULT_COMPLETED (Event::kFaultCompleted), one run
  uint64_t mmap_lock_acquisitions = 0, mmap_lock_contentions = 0;  // read + write, one run
  uint64_t vma_lock_acquisitions = 0;  // VMA read locks, one run
  uint64_t i_pages_lock_acquisitions = 0;  // the shmem file's page-cache lock (a page added), one run
  std::string error;     // "" on success
  bool ok() const { return error.empty(); }
  double pgfault_per_page() const { return pages ? static_cast<double>(pgfault) / pages : 0; }
  double min_flt_per_page() const { return pages ? static_cast<double>(min_flt) / pages : 0; }
};

/// Runs the workload in the engine linked into this process, `runs` times per
/// completion mode, with locking profile `profile` ("" = linux-6.15). Sequential (the
/// statistics are read per profile slot around each run).
std::vector<ShmemDirtyResult> RunShmemDirtyEngine(uint64_t bytes, const std::string& profile,
                                                  const std::vector<SharedFaultCompletion>& modes, int runs);
/// The same loop on this machine's kernel: memfd_create + ftruncate + mmap MAP_SHARED,
/// write each page, getrusage min_flt around the loop (no vmstat: it is system-wide).
ShmemDirtyResult RunShmemDirtyNative(uint64_t bytes, int runs);

}  // namespace vmspace::bench
