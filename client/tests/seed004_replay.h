// SPDX-License-Identifier: Apache-2.0
// What the seed-004 stress must touch, replayed from its random sequence alone, for
// tests to check a run's fault and write counts against.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/seed004.h"

namespace vmspace::testing_seed004 {

/// Pages and single-byte writes of the page-fault variant's accesses over `rounds` rounds
/// of client seed `seed` (1024 slots filled first, then per round: a slot, its access,
/// its new size). Every accessed mapping is fresh (mmapped since its last access), so
/// each of its pages faults exactly once.
struct Touched {
  uint64_t pages = 0;
  uint64_t writes = 0;
};

inline Touched ReplayTouched(uint32_t seed, uint64_t rounds, uint64_t stride = 128) {
  stress::Seed004Sequence seq(seed);
  std::vector<uint64_t> len(stress::Seed004Sequence::kSlots);
  for (uint64_t& l : len) l = seq.NextSize();
  Touched t;
  for (uint64_t r = 0; r < rounds; ++r) {
    uint64_t& l = len[static_cast<size_t>(seq.NextSlot())];
    t.pages += (l + 4095) / 4096;
    t.writes += (l + stride - 1) / stride;
    l = seq.NextSize();
  }
  return t;
}

}  // namespace vmspace::testing_seed004
