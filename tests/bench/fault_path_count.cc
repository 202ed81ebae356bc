// SPDX-License-Identifier: Apache-2.0
// A fixed amount of fault-path work for instruction counting: 8 passes of anonymous
// write faults over 16 MiB (32768 faults), each pass followed by MADV_DONTNEED.
// Usage: valgrind --tool=callgrind fault_path_count STATS(0|1) PROFILE
// and compare the PROGRAM TOTALS of stats 0 and 1 (instruction counts do not depend on
// the machine's load, unlike timings).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/address_space.h"
#include "engine/stats.h"

int main(int argc, char** argv) {
  using namespace vmspace;
  if (argc != 3) {
    fprintf(stderr, "usage: %s 0|1 linux-6.0|linux-6.1|linux-6.4|linux-6.6\n", argv[0]);
    return 2;
  }
  SetLockStatsEnabled(atoi(argv[1]) != 0);
  FrameAllocator frames(1ull << 30);
  SpaceOptions opts;
  std::string err;
  if (!LockingProfile::Parse(argv[2], &opts.profile, &err)) {
    fprintf(stderr, "%s\n", err.c_str());
    return 2;
  }
  AddressSpace as(frames, opts);
  constexpr uint64_t kRegion = 16ull << 20;
  const uint64_t base = as.Mmap(0, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).value;
  uint64_t faults = 0;
  for (int pass = 0; pass < 8; pass++) {
    for (uint64_t off = 0; off < kRegion; off += 4096) faults += as.Fault(base + off, AccessType::kWrite).faults;
    as.Madvise(base, kRegion, MADV_DONTNEED);
  }
  printf("%llu faults\n", static_cast<unsigned long long>(faults));
  return faults == 8 * (kRegion / 4096) ? 0 : 1;
}
