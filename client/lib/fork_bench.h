// SPDX-License-Identifier: Apache-2.0
// `vmspace bench fork`: fork of a space with N private anonymous VMAs of S bytes in
// all, fraction F of their pages present (written), in the engine linked into this
// process: each iteration forks the parent (AddressSpace::DupMmap), writes one byte of
// every present page in the child (each a copy-on-write copy) and destroys the child;
// beside this machine's kernel forking a process with the same layout and doing the
// same. With parent threads, M threads of the parent write during the forks, in pairs
// on shared pages (each thread its own half page, written in one access and read back
// after every write): a read
// that does not see the thread's own last write is a race hit, the lost write of the
// Linux 6.4.0 fork race ("fork: lock VMAs of the parent process when forking", Suren
// Baghdasaryan, July 2023); every child is also checked with Validate() (the rmap).
// Depends on the engine and libc only.
#pragma once

#include <cstdint>
#include <string>

#include "engine/address_space.h"

namespace vmspace::bench {

/// The layout and the work of one fork bench run.
struct ForkConfig {
  uint64_t size = 64ull << 20;  // bytes over all VMAs
  uint64_t vmas = 16;           // N: private anonymous read-write VMAs, a page apart
  double touch = 1.0;           // F: fraction of each VMA's pages written before forking
  int parent_threads = 0;       // M: parent threads writing during the forks
  double seconds = 2;
};

struct ForkResult {
  std::string setting;  // the profile spec; "native"
  double seconds = 0;
  uint64_t forks = 0;            // fork + touch + exit iterations
  uint64_t child_pages = 0;      // pages the child wrote per fork
  uint64_t mmap_lock_acquisitions = 0, mmap_lock_contentions = 0;
  double mmap_lock_wait_s = 0;
  uint64_t anon_vma_acquisitions = 0, anon_vma_contentions = 0;
  double anon_vma_wait_s = 0;
  uint64_t parent_writes = 0;    // the parent threads' checked writes
  uint64_t race_hits = 0;        // of them, read back without their own value
  uint64_t validate_failures = 0;  // children whose Validate() failed
  std::string validate_error;    // the first such failure
  std::string error;
  bool ok() const { return error.empty(); }
  double forks_per_s() const { return seconds > 0 ? forks / seconds : 0; }
};

/// The loop in the engine for `profile` (a LockingProfile spec, "" = linux-6.15).
ForkResult RunForkEngine(const std::string& profile, const ForkConfig& cfg);
/// The loop on this machine's kernel: a helper process maps the layout, writes the
/// same pages and forks (child: the same writes, _exit), without parent threads.
ForkResult RunForkNative(const ForkConfig& cfg);

}  // namespace vmspace::bench
